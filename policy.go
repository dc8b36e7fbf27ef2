package main

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// podDisruptionBudget lets a drain take one instance at a time, so a
// replicated Database keeps serving through node maintenance.
func podDisruptionBudget(db *database) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      db.Name,
			Namespace: db.Namespace,
			Labels:    labels(db, componentDatabase),
		},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: instanceLabels(db)},
		},
	}
}

// networkPolicy admits connections to PostgreSQL only from pods of the
// Database's own namespace (apps, standbys, backup and restore jobs) and of
// the namespaces the platform team allows.
func networkPolicy(db *database) *networkingv1.NetworkPolicy {
	port := intstr.FromString(portName)
	ingress := []networkingv1.NetworkPolicyIngressRule{{
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: &port}},
		From:  namespacePeers(db.AllowedNamespaces),
	}}
	if db.Metrics != nil {
		// Scraped from the namespaces the input names (where Prometheus
		// runs) and the Database's own: the exporter's /probe answers any
		// DSN with what the superuser sees of it, so no one else.
		metrics := intstr.FromString(metricsPortName)
		ingress = append(ingress, networkingv1.NetworkPolicyIngressRule{
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: &metrics}},
			From:  namespacePeers(db.Metrics.AllowedNamespaces),
		})
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      db.Name,
			Namespace: db.Namespace,
			Labels:    labels(db, componentNetwork),
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selectorLabels(db)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     ingress,
		},
	}
}

// namespacePeers are the pods of the Database's own namespace and of the
// namespaces named.
func namespacePeers(namespaces []string) []networkingv1.NetworkPolicyPeer {
	peers := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}
	if len(namespaces) > 0 {
		peers = append(peers, networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: labelNamespaceName, Operator: metav1.LabelSelectorOpIn, Values: namespaces,
			}},
		}})
	}
	return peers
}
