package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestServices(t *testing.T) {
	port := []corev1.ServicePort{{Name: "postgresql", Port: 5432, TargetPort: intstr.FromString("postgresql"), Protocol: corev1.ProtocolTCP}}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: wantLabels}
	}
	tm := metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
	// Instances only: the backup and restore pods carry name and instance too.
	sel := map[string]string{"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders", "app.kubernetes.io/component": "database"}
	cases := map[string]struct {
		got, want *corev1.Service
	}{
		"Primary": {primaryService(testDB(), 0), &corev1.Service{TypeMeta: tm, ObjectMeta: meta("orders"), Spec: corev1.ServiceSpec{
			Ports: port, Selector: map[string]string{"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders", "statefulset.kubernetes.io/pod-name": "orders-0"},
			PublishNotReadyAddresses: true,
		}}},
		// After a failover the rw Service follows the promoted ordinal.
		"PrimaryAfterFailover": {primaryService(testDB(), 2), &corev1.Service{TypeMeta: tm, ObjectMeta: meta("orders"), Spec: corev1.ServiceSpec{
			Ports: port, Selector: map[string]string{"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders", "statefulset.kubernetes.io/pod-name": "orders-2"},
			PublishNotReadyAddresses: true,
		}}},
		"Read": {readService(testDB()), &corev1.Service{TypeMeta: tm, ObjectMeta: meta("orders-r"), Spec: corev1.ServiceSpec{Ports: port, Selector: sel}}},
		"Headless": {headlessService(testDB()), &corev1.Service{TypeMeta: tm, ObjectMeta: meta("orders-hl"), Spec: corev1.ServiceSpec{
			Ports: port, Selector: sel, ClusterIP: "None", PublishNotReadyAddresses: true,
		}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, tc.got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestReadServiceKept: N-r exists at every size, selecting every instance
// (the primary alone with one), so scaling to one instance never deletes it
// (its clients used to get NXDOMAIN) and scaling never rewrites it.
func TestReadServiceKept(t *testing.T) {
	type got struct {
		Selector     map[string]string
		ReadEndpoint string
	}
	want := got{map[string]string{labelName: appName, labelInstance: "orders", labelComponent: componentDatabase}, "orders-r.shop.svc.cluster.local"}
	cases := map[string]struct {
		reason string
		from   string // the spec the Database runs with; empty: a new Database
		spec   string
	}{
		"NewSmall":     {"a new one-instance Database", "", `{version: "16", size: small}`},
		"MediumToOne":  {"scaling to one instance keeps N-r", `{version: "16", size: medium}`, `{version: "16", size: small}`},
		"SmallToLarge": {"scaling out keeps the same Service", `{version: "16", size: small}`, `{version: "16", size: large}`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := xrRequest(yamlStruct(t, validXR), nil)
			if tc.from != "" {
				setSpec(t, req, tc.from)
				req.Observed.Resources = observedFrom(t, runTest(t, req), true)
			}
			setSpec(t, req, tc.spec)
			rsp := runTest(t, req)
			svc := rsp.GetDesired().GetResources()[string(rnServiceRead)]
			if svc == nil {
				t.Fatalf("%s: no Service %s composed", tc.reason, readServiceName(&database{Name: "orders"}))
			}
			// The status follows the observed Service: feed the response back.
			req.Observed.Resources = observedFrom(t, rsp, true)
			rsp = runTest(t, req)
			g := got{
				Selector:     decodeInto[corev1.Service](t, svc.GetResource()).Spec.Selector,
				ReadEndpoint: rsp.GetDesired().GetComposite().GetResource().GetFields()["status"].GetStructValue().GetFields()["readEndpoint"].GetStringValue(),
			}
			if d := cmp.Diff(want, g); d != "" {
				t.Errorf("%s: read Service (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}
