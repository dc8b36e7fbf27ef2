package main

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func service(db *database, name string, selector map[string]string) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: db.Namespace,
			Labels:    labels(db, componentDatabase),
		},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports: []corev1.ServicePort{{
				Name: portName, Port: postgresPort, TargetPort: intstr.FromString(portName), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// primaryService (read-write) selects the primary's pod only: standbys
// refuse writes, so a client must never be balanced onto one. A failover
// moves the selector to the promoted ordinal (failover.go); as only ready
// pods are endpoints, it never has two writable endpoints.
//
// Its one pod is an endpoint whether ready or not: standbys clone and
// stream through N (they follow a failover with it), and replication must
// not stop when the primary's readiness probe is slow (seen on the real
// node under load: every standby lost its primary, and with synchronous
// replication every commit waited). Clients of a primary that is down get
// a refused or timed-out connection either way.
func primaryService(db *database, primary int) *corev1.Service {
	s := service(db, db.Name, podLabels(db, primary))
	s.Spec.PublishNotReadyAddresses = true
	return s
}

// readService balances read-only clients over every instance: with one
// instance, that is the primary. The selector does not depend on the number
// of instances, so scaling never rewrites the Service.
func readService(db *database) *corev1.Service {
	return service(db, readServiceName(db), instanceLabels(db))
}

// headlessService gives each instance a stable DNS name (N-0.N-hl) for
// standbys to clone and stream from. Not-ready addresses are published:
// a standby must reach the primary before either is ready.
func headlessService(db *database) *corev1.Service {
	s := service(db, headlessServiceName(db), instanceLabels(db))
	s.Spec.ClusterIP = corev1.ClusterIPNone
	s.Spec.PublishNotReadyAddresses = true
	return s
}
