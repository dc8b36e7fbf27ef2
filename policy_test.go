package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestPolicies(t *testing.T) {
	sel := map[string]string{"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders", "app.kubernetes.io/component": "database"}
	// The NetworkPolicy guards every pod of the Database (jobs included).
	all := map[string]string{"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders"}
	wantPDB := &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", Labels: wantLabels},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: sel}},
	}
	if d := cmp.Diff(wantPDB, podDisruptionBudget(testDB())); d != "" {
		t.Errorf("PDB (-want +got):\n%s", d)
	}
	port := intstr.FromString("postgresql")
	netLabels := map[string]string{"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders", "app.kubernetes.io/component": "network", "app.kubernetes.io/managed-by": "function-database"}
	wantNP := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", Labels: netLabels},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: all},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: &port}},
				From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{}},
					{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
						Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"monitoring"},
					}}}},
				},
			}},
		},
	}
	if d := cmp.Diff(wantNP, networkPolicy(testDB())); d != "" {
		t.Errorf("NetworkPolicy (-want +got):\n%s", d)
	}
}
