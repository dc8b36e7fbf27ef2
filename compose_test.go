package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/example/function-database/internal/wire"
	"github.com/example/function-database/internal/wire/wiretest"
)

// allBuilt composes every kind of resource once (backups and a restore on).
func allBuilt(t *testing.T) map[string]runtime.Object {
	t.Helper()
	cfg, errs := parseInput(nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	xr := yamlStruct(t, `
apiVersion: example.com/v1
kind: Database
metadata: {name: orders-v2, namespace: shop}
spec: {version: "17", size: large, backup: {enabled: true}, restoreFrom: {database: orders}}`)
	db, errs := parseDatabase(xr, cfg)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	p := makePlan(db, observedOf(t, nil), func() string { return "pw" })
	out := map[string]runtime.Object{}
	for name, obj := range compose(db, p) {
		out[string(name)] = obj.(runtime.Object) //nolint:forcetypeassert // builders return typed objects
	}
	return out
}

// TestToStructRoundTrip: what wire.Struct emits decodes strictly back into the
// same typed object: nothing lost, nothing unknown.
func TestToStructRoundTrip(t *testing.T) {
	for name, obj := range allBuilt(t) {
		t.Run(name, func(t *testing.T) {
			s, err := wire.Struct(obj)
			if err != nil {
				t.Fatal(err)
			}
			b, err := s.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			back := obj.DeepCopyObject()
			zero(back)
			d := json.NewDecoder(strings.NewReader(string(b)))
			d.DisallowUnknownFields()
			if err := d.Decode(back); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(obj, back) {
				t.Errorf("round trip changed the object:\n%s", cmp.Diff(obj, back))
			}
		})
	}
}

func zero(o runtime.Object) {
	switch x := o.(type) {
	case *corev1.Secret:
		*x = corev1.Secret{}
	case *corev1.ConfigMap:
		*x = corev1.ConfigMap{}
	case *corev1.Service:
		*x = corev1.Service{}
	case *appsv1.StatefulSet:
		*x = appsv1.StatefulSet{}
	case *batchv1.CronJob:
		*x = batchv1.CronJob{}
	case *batchv1.Job:
		*x = batchv1.Job{}
	case *policyv1.PodDisruptionBudget:
		*x = policyv1.PodDisruptionBudget{}
	case *networkingv1.NetworkPolicy:
		*x = networkingv1.NetworkPolicy{}
	}
}

// TestToStructStripsNoise: the server-owned and zero-value fields that JSON
// encoding of the typed objects adds are gone, and the meaningful falses and
// empty objects stay.
func TestToStructStripsNoise(t *testing.T) {
	built := allBuilt(t)
	all := ""
	for name, obj := range built {
		s, err := wire.Struct(obj)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := s.MarshalJSON()
		j := string(b)
		all += j
		for _, noise := range []string{`"status"`, `"creationTimestamp"`, `:null`, `"resources":{}`, `"updateStrategy":{}`, `"hostPID"`, `"nodePort"`, `"metadata":{}`, `"strategy"`} {
			if strings.Contains(j, noise) {
				t.Errorf("%s: desired state contains server-owned or zero-value noise %s", name, noise)
			}
		}
		// The same object through encoding/json does carry noise: the test
		// would catch a regression to a plain JSON round trip.
		if name == "statefulset" {
			raw, _ := json.Marshal(obj)
			if !strings.Contains(string(raw), `"status":{`) {
				t.Errorf("expected encoding/json to add noise to a StatefulSet; the noise list is stale")
			}
		}
	}
	for _, keep := range []string{`"allowPrivilegeEscalation":false`, `"automountServiceAccountToken":false`, `"emptyDir":{}`, `"enableServiceLinks":false`, `"podSelector":{}`} {
		if !strings.Contains(all, keep) {
			t.Errorf("meaningful field %s was stripped", keep)
		}
	}
}

// TestMarshalStructCanonical: the encoder's bytes are exactly what
// protobuf's deterministic marshal gives for the Struct they decode to, so
// the wire form is canonical (sorted keys, minimal lengths) for every kind.
func TestMarshalStructCanonical(t *testing.T) {
	for name, obj := range allBuilt(t) {
		t.Run(name, func(t *testing.T) {
			b, err := wire.MarshalStruct(obj)
			if err != nil {
				t.Fatal(err)
			}
			s := wiretest.DecodeCanonical(t, b)

			// As a composed resource it decodes to a Resource carrying
			// that Struct and the readiness.
			r, err := wire.Resource(name, obj, fnv1.Ready_READY_TRUE)
			if err != nil {
				t.Fatal(err)
			}
			rb, err := wireBytes(r)
			if err != nil {
				t.Fatal(err)
			}
			got := &fnv1.Resource{}
			if err := proto.Unmarshal(rb, got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(&fnv1.Resource{Resource: s, Ready: fnv1.Ready_READY_TRUE}, got, protocmp.Transform()); d != "" {
				t.Errorf("composed resource over the wire (-want +got):\n%s", d)
			}
		})
	}
}
