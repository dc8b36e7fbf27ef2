package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
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

// TestToStructRoundTrip: what toStruct emits decodes strictly back into the
// same typed object: nothing lost, nothing unknown.
func TestToStructRoundTrip(t *testing.T) {
	for name, obj := range allBuilt(t) {
		t.Run(name, func(t *testing.T) {
			s, err := toStruct(obj)
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
		s, err := toStruct(obj)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := s.MarshalJSON()
		j := string(b)
		all += j
		for _, noise := range []string{`"status"`, `"creationTimestamp"`, `:null`, `"resources":{}`, `"updateStrategy"`, `"hostPID"`, `"nodePort"`, `"metadata":{}`, `"strategy"`} {
			if strings.Contains(j, noise) {
				t.Errorf("%s: desired state contains server-owned or zero-value noise %s", name, noise)
			}
		}
		// The same object through encoding/json does carry noise: the test
		// would catch a regression to a plain JSON round trip.
		if name == "statefulset" {
			raw, _ := json.Marshal(obj)
			if !strings.Contains(string(raw), `"status"`) || !strings.Contains(string(raw), `"updateStrategy":{}`) {
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

// TestMarshalStructCanonical: the converter's bytes are exactly what
// protobuf's deterministic marshal gives for the Struct they decode to, so
// the wire form is canonical (sorted keys, minimal lengths) for every kind.
func TestMarshalStructCanonical(t *testing.T) {
	for name, obj := range allBuilt(t) {
		t.Run(name, func(t *testing.T) {
			b, err := marshalStruct(obj)
			if err != nil {
				t.Fatal(err)
			}
			s := decodeCanonical(t, b)

			// As a composed resource it decodes to a Resource carrying
			// that Struct and the readiness.
			r, err := composedResource(name, obj, fnv1.Ready_READY_TRUE)
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

// decodeCanonical decodes a Struct's wire form, failing t unless the bytes
// are what protobuf's deterministic marshal gives for it.
func decodeCanonical(t *testing.T, b []byte) *structpb.Struct {
	t.Helper()
	s := &structpb.Struct{}
	if err := proto.Unmarshal(b, s); err != nil {
		t.Fatal(err)
	}
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, b) {
		t.Errorf("not the canonical encoding: %d bytes, canonical %d", len(b), len(want))
	}
	return s
}

// TestMarshalStructCases pins the JSON rules the converter follows on small
// types, the length encodings (1, 2 and 3 byte lengths), and its errors.
func TestMarshalStructCases(t *testing.T) {
	type inner struct {
		A string `json:"a,omitempty"`
	}
	type Embedded struct {
		Name  string `json:"name"`
		Depth string `json:"depth"`
	}
	type withInline struct {
		*Embedded `json:",inline"`

		Depth string `json:"depth"`
	}
	type withValue struct {
		Embedded `json:",inline"`
	}
	long := func(n int) string { return strings.Repeat("x", n) }
	cases := map[string]struct {
		obj     any
		want    string // the Struct as JSON
		wantErr string
	}{
		"PointerToEmptyStructKept": {obj: &struct {
			E *inner `json:"e"`
		}{E: &inner{}}, want: `{"e":{}}`},
		"ZeroStructDropped": {obj: struct {
			E inner `json:"e"`
		}{}, want: `{}`},
		"NilsDropped": {obj: struct {
			P *string         `json:"p"`
			S []string        `json:"s"`
			M map[string]bool `json:"m"`
			B []byte          `json:"b"`
		}{}, want: `{}`},
		"EmptyButNotNilKept": {obj: struct {
			S []string        `json:"s"`
			M map[string]bool `json:"m"`
		}{S: []string{}, M: map[string]bool{}}, want: `{"m":{},"s":[]}`},
		"NoiseInListIsNull": {obj: struct {
			L []*inner `json:"l"`
		}{L: []*inner{nil, {A: "x"}}}, want: `{"l":[null,{"a":"x"}]}`},
		"OmitEmptyFalseDropped_PlainFalseKept": {obj: struct {
			A bool `json:"a,omitempty"`
			B bool `json:"b"`
		}{}, want: `{"b":false}`},
		"NumbersAndBytes": {obj: struct {
			I int64   `json:"i"`
			U uint8   `json:"u"`
			F float64 `json:"f"`
			B []byte  `json:"b"`
		}{I: -3, U: 7, F: 0.5, B: []byte("hi")}, want: `{"b":"aGk=","f":0.5,"i":-3,"u":7}`},
		"MapKeysSorted": {obj: struct {
			M map[string]int    `json:"m"`
			S map[string]string `json:"s"`
		}{M: map[string]int{"b": 2, "a": 1, "c": 3}, S: map[string]string{"z": "1", "": "0"}}, want: `{"m":{"a":1,"b":2,"c":3},"s":{"":"0","z":"1"}}`},
		"ShallowestFieldWins":     {obj: withInline{Embedded: &Embedded{Name: "n", Depth: "deep"}, Depth: "shallow"}, want: `{"depth":"shallow","name":"n"}`},
		"NilInlinePointerSkipped": {obj: withInline{Depth: "d"}, want: `{"depth":"d"}`},
		"InlineValue":             {obj: withValue{Embedded{Name: "n"}}, want: `{"depth":"","name":"n"}`},
		"TopLevelStatusDropped": {obj: struct {
			Status string `json:"status"`
			Spec   struct {
				Status string `json:"status"`
			} `json:"spec"`
		}{Status: "x", Spec: struct {
			Status string `json:"status"`
		}{Status: "y"}}, want: `{"spec":{"status":"y"}}`},
		"LengthsOfOneTwoAndThreeBytes": {obj: struct {
			A string   `json:"a"`
			B string   `json:"b"`
			C string   `json:"c"`
			L []string `json:"l"`
		}{A: long(100), B: long(200), C: long(20000), L: []string{long(127), long(128), long(16383), long(16384)}}},
		"InvalidUTF8": {obj: struct {
			S string `json:"s"`
		}{S: "\xff"}, wantErr: "s: \"\\xff\" is not valid UTF-8"},
		"InvalidUTF8Key": {obj: struct {
			M map[string]string `json:"m"`
		}{M: map[string]string{"\xfe": "x"}}, wantErr: "m: \"\\xfe\" is not valid UTF-8"},
		"NonStringKeys": {obj: struct {
			M map[int]string `json:"m"`
		}{M: map[int]string{1: "x"}}, wantErr: "m: cannot convert a map with int keys"},
		"NotAStruct": {obj: "x", wantErr: "cannot convert string: not a struct"},
		"Channel": {obj: struct {
			C chan int `json:"c"`
		}{C: make(chan int)}, wantErr: "c: cannot convert a value of type chan int"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := marshalStruct(tc.obj)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error: want %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := decodeCanonical(t, b)
			// Compare with encoding/json's form of the same object where
			// the case states none.
			want := tc.want
			if want == "" {
				j, _ := json.Marshal(tc.obj)
				want = string(j)
			}
			var w, g any
			got, _ := s.MarshalJSON()
			_ = json.Unmarshal([]byte(want), &w)
			_ = json.Unmarshal(got, &g)
			if d := cmp.Diff(w, g); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
