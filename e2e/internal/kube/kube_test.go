package kube

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	discoveryfake "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/restmapper"
	k8stesting "k8s.io/client-go/testing"
)

// jsonOf is v as JSON (map keys sorted), to compare decoded objects without
// reflection.
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDecodeObjects(t *testing.T) {
	cases := []struct {
		name string
		data string
		want []string // each object as JSON
	}{
		{"nothing", "", nil},
		{"only separators and comments", "---\n# a comment\n---\n\n---\n", nil},
		{
			"one document",
			"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: db\n",
			[]string{`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"db"}}`},
		},
		{
			"several documents, empty ones skipped",
			"---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\n---\n# nothing here\n---\n" +
				"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  namespace: a\ndata:\n  k: v\n---\n",
			[]string{
				`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}}`,
				`{"apiVersion":"v1","data":{"k":"v"},"kind":"ConfigMap","metadata":{"name":"b","namespace":"a"}}`,
			},
		},
		{
			"empty objects skipped",
			"{}\n---\nkind: A\n---\n{}\n",
			[]string{`{"kind":"A"}`},
		},
		{
			"JSON",
			`{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "db"}}`,
			[]string{`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"db"}}`},
		},
		{
			"JSON, several objects",
			`{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}` + "\n" +
				`{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b"}}`,
			[]string{
				`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}}`,
				`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"b"}}`,
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs, err := DecodeObjects([]byte(c.data))
			if err != nil {
				t.Fatalf("DecodeObjects: %v", err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, jsonOf(t, o.Object))
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") || len(got) != len(c.want) {
				t.Errorf("DecodeObjects =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

func TestDecodeObjectsErrors(t *testing.T) {
	cases := []struct {
		name string
		data string
	}{
		{"malformed YAML document", "apiVersion: v1\nkind: Namespace\n---\nmetadata: [a, b\n"},
		{"a list, not an object", "- a\n- b\n"},
		{"a scalar, not an object", "just a string\n"},
		// Not `{"kind": }`: the decoder falls back to YAML, where that is
		// a flow mapping with a null value.
		{"malformed JSON", `{"apiVersion": "v1", "kind": "Namespace"`},
		{"a good JSON object, then a malformed one", `{"kind": "A"}` + "\n" + `{"kind": "B"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs, err := DecodeObjects([]byte(c.data))
			if err == nil {
				t.Fatalf("DecodeObjects = %d objects, want an error", len(objs))
			}
			if objs != nil {
				t.Errorf("DecodeObjects = %d objects with error %v, want none", len(objs), err)
			}
		})
	}
}

func TestReadObject(t *testing.T) {
	cases := []struct {
		name    string
		content string
		wantErr string // "" for success
	}{
		{"one object", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: db\n", ""},
		{"one object among empty documents", "---\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: db\n---\n", ""},
		{"no object", "# nothing\n---\n", "want one object, found 0"},
		{"empty file", "", "want one object, found 0"},
		{"two objects", "kind: A\n---\nkind: B\n", "want one object, found 2"},
		{"malformed", "kind: [A\n", "yaml"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, "obj.yaml", c.content)
			o, err := ReadObject(path)
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("ReadObject: %v", err)
				}
				if o.GetKind() != "Namespace" || o.GetName() != "db" {
					t.Errorf("ReadObject = %s %s, want Namespace db", o.GetKind(), o.GetName())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("ReadObject = %v, want an error containing %q", err, c.wantErr)
			}
			if strings.HasPrefix(c.wantErr, "want one object") && !strings.HasPrefix(err.Error(), path+": ") {
				t.Errorf("ReadObject error %q does not start with the path %s", err, path)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, err := ReadObject(filepath.Join(t.TempDir(), "none.yaml"))
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("ReadObject of a missing file = %v, want ErrNotExist", err)
		}
	})
}

func TestReadObjects(t *testing.T) {
	path := writeFile(t, "objs.yaml", "kind: A\n---\n---\nkind: B\n")
	objs, err := ReadObjects(path)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
	}
	if got := strings.Join(kinds, ","); got != "A,B" {
		t.Errorf("ReadObjects kinds = %s, want A,B", got)
	}
	if _, err := ReadObjects(filepath.Join(t.TempDir(), "none.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadObjects of a missing file = %v, want ErrNotExist", err)
	}
}

func TestReadYAML(t *testing.T) {
	type config struct {
		Name  string   `json:"name"`
		Count int      `json:"count"`
		Tags  []string `json:"tags"`
	}
	t.Run("decodes", func(t *testing.T) {
		var c config
		if err := ReadYAML(writeFile(t, "c.yaml", "name: db\ncount: 3\ntags: [a, b]\n"), &c); err != nil {
			t.Fatal(err)
		}
		if c.Name != "db" || c.Count != 3 || strings.Join(c.Tags, ",") != "a,b" {
			t.Errorf("ReadYAML = %+v, want {db 3 [a b]}", c)
		}
	})
	t.Run("malformed names the file", func(t *testing.T) {
		path := writeFile(t, "c.yaml", "name: [db\n")
		var c config
		err := ReadYAML(path, &c)
		if err == nil || !strings.HasPrefix(err.Error(), path+": ") {
			t.Errorf("ReadYAML = %v, want an error starting with %s", err, path)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		var c config
		if err := ReadYAML(filepath.Join(t.TempDir(), "none.yaml"), &c); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("ReadYAML of a missing file = %v, want ErrNotExist", err)
		}
	})
}

// withConditions is an object whose status.conditions is conds.
func withConditions(conds any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.org/v1alpha1",
		"kind":       "Database",
		"status":     map[string]any{"conditions": conds},
	}}
}

func sameCondition(a, b Condition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
		a.ObservedGeneration == b.ObservedGeneration && a.LastTransitionTime.Equal(b.LastTransitionTime)
}

func TestConditions(t *testing.T) {
	ltt := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	cases := []struct {
		name string
		u    *unstructured.Unstructured
		want []Condition
	}{
		{"no status", &unstructured.Unstructured{Object: map[string]any{"kind": "X"}}, nil},
		{"empty list", withConditions([]any{}), nil},
		{"conditions not a list", withConditions(map[string]any{"type": "Ready"}), nil},
		{
			"every field, observedGeneration as int64",
			withConditions([]any{map[string]any{
				"type": "Ready", "status": "True", "reason": "Available", "message": "all good",
				"observedGeneration": int64(7), "lastTransitionTime": "2024-05-06T07:08:09Z",
			}}),
			[]Condition{{Type: "Ready", Status: "True", Reason: "Available", Message: "all good", ObservedGeneration: 7, LastTransitionTime: ltt}},
		},
		{
			"observedGeneration as float64 (decoded from JSON into any)",
			withConditions([]any{map[string]any{"type": "Synced", "status": "False", "observedGeneration": float64(12)}}),
			[]Condition{{Type: "Synced", Status: "False", ObservedGeneration: 12}},
		},
		{
			"lastTransitionTime with an offset",
			withConditions([]any{map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-06T09:08:09+02:00"}}),
			[]Condition{{Type: "Ready", Status: "True", LastTransitionTime: ltt}},
		},
		{
			"unparsable lastTransitionTime and wrong types left zero",
			withConditions([]any{map[string]any{
				"type": "Ready", "status": true, "reason": int64(3), "observedGeneration": "7", "lastTransitionTime": "yesterday",
			}}),
			[]Condition{{Type: "Ready"}},
		},
		{
			"entries that are not objects skipped",
			withConditions([]any{
				"Ready",
				int64(1),
				nil,
				[]any{"type", "Ready"},
				map[string]any{"type": "Ready", "status": "True"},
				map[string]any{"type": "Synced", "status": "False", "reason": "ReconcileError"},
			}),
			[]Condition{{Type: "Ready", Status: "True"}, {Type: "Synced", Status: "False", Reason: "ReconcileError"}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Conditions(c.u)
			ok := len(got) == len(c.want)
			for i := 0; ok && i < len(got); i++ {
				ok = sameCondition(got[i], c.want[i])
			}
			if !ok {
				t.Errorf("Conditions =\n%+v\nwant\n%+v", got, c.want)
			}
		})
	}
}

func TestGetCondition(t *testing.T) {
	u := withConditions([]any{
		map[string]any{"type": "Synced", "status": "True"},
		map[string]any{"type": "Ready", "status": "False", "reason": "Creating", "observedGeneration": int64(2)},
	})
	cases := []struct {
		name string
		u    *unstructured.Unstructured
		typ  string
		want Condition
	}{
		{"present", u, "Ready", Condition{Type: "Ready", Status: "False", Reason: "Creating", ObservedGeneration: 2}},
		{"the first", u, "Synced", Condition{Type: "Synced", Status: "True"}},
		{"missing", u, "Healthy", Condition{Type: "Healthy", Status: "Unknown"}},
		{"no conditions at all", &unstructured.Unstructured{Object: map[string]any{}}, "Ready", Condition{Type: "Ready", Status: "Unknown"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := GetCondition(c.u, c.typ); !sameCondition(got, c.want) {
				t.Errorf("GetCondition(%q) = %+v, want %+v", c.typ, got, c.want)
			}
		})
	}
}

func TestConditionsString(t *testing.T) {
	cases := []struct {
		name string
		u    *unstructured.Unstructured
		want string
	}{
		{"no status", &unstructured.Unstructured{Object: map[string]any{}}, "no conditions"},
		{"empty list", withConditions([]any{}), "no conditions"},
		{"only non-objects", withConditions([]any{"Ready"}), "no conditions"},
		{"type and status", withConditions([]any{map[string]any{"type": "Ready", "status": "True"}}), "Ready=True"},
		{"with reason", withConditions([]any{map[string]any{"type": "Ready", "status": "False", "reason": "Creating"}}), "Ready=False (Creating)"},
		{"with message", withConditions([]any{map[string]any{"type": "Ready", "status": "False", "message": "waiting"}}), "Ready=False: waiting"},
		{
			"several, with reason and message",
			withConditions([]any{
				map[string]any{"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
				map[string]any{"type": "Ready", "status": "False", "reason": "Unavailable", "message": "primary not ready"},
				map[string]any{"type": "Healthy"},
			}),
			"Synced=True (ReconcileSuccess); Ready=False (Unavailable): primary not ready; Healthy=",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ConditionsString(c.u); got != c.want {
				t.Errorf("ConditionsString = %q, want %q", got, c.want)
			}
		})
	}
}

func TestToYAML(t *testing.T) {
	cases := []struct {
		name string
		u    *unstructured.Unstructured
		want string
	}{
		{"nil", nil, "<nil>"},
		{
			"managed fields dropped",
			&unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1",
				"kind":       "ConfigMap",
				"metadata": map[string]any{
					"name":      "cm",
					"namespace": "db",
					"managedFields": []any{map[string]any{
						"manager":    "kubectl",
						"operation":  "Apply",
						"apiVersion": "v1",
						"fieldsType": "FieldsV1",
						"fieldsV1":   map[string]any{"f:data": map[string]any{}},
					}},
				},
				"data": map[string]any{"k": "v"},
			}},
			"apiVersion: v1\ndata:\n  k: v\nkind: ConfigMap\nmetadata:\n  name: cm\n  namespace: db\n",
		},
		{
			"without managed fields",
			&unstructured.Unstructured{Object: map[string]any{"kind": "X", "spec": map[string]any{"replicas": int64(3), "paused": true}}},
			"kind: X\nspec:\n  paused: true\n  replicas: 3\n",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before string
			if c.u != nil {
				before = jsonOf(t, c.u.Object)
			}
			if got := ToYAML(c.u); got != c.want {
				t.Errorf("ToYAML =\n%s\nwant\n%s", got, c.want)
			}
			if c.u != nil {
				if after := jsonOf(t, c.u.Object); after != before {
					t.Errorf("ToYAML modified its input:\n%s\nwas\n%s", after, before)
				}
			}
		})
	}
}

func TestGVK(t *testing.T) {
	cases := []struct {
		apiVersion, kind string
		want             schema.GroupVersionKind
	}{
		{"v1", "ConfigMap", schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}},
		{"example.org/v1alpha1", "Database", schema.GroupVersionKind{Group: "example.org", Version: "v1alpha1", Kind: "Database"}},
	}
	for _, c := range cases {
		if got := GVK(c.apiVersion, c.kind); got != c.want {
			t.Errorf("GVK(%q, %q) = %v, want %v", c.apiVersion, c.kind, got, c.want)
		}
	}
}

func TestAccessString(t *testing.T) {
	cases := []struct {
		name string
		a    Access
		want string
	}{
		{"core, cluster-scoped", Access{Verb: "list", Resource: "namespaces"}, "list namespaces"},
		{"core, namespaced", Access{Verb: "get", Resource: "secrets", Namespace: "db"}, "get secrets in db"},
		{
			"group, cluster-scoped",
			Access{Verb: "create", Group: "apiextensions.crossplane.io", Resource: "compositeresourcedefinitions"},
			"create compositeresourcedefinitions.apiextensions.crossplane.io",
		},
		{"group, namespaced", Access{Verb: "patch", Group: "example.org", Resource: "databases", Namespace: "db"}, "patch databases.example.org in db"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := AccessString(c.a); got != c.want {
				t.Errorf("AccessString = %q, want %q", got, c.want)
			}
		})
	}
}

// The kinds the fake discovery serves.
var (
	gvkNamespace = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	gvkConfigMap = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	gvkXRD       = schema.GroupVersionKind{Group: "apiextensions.crossplane.io", Version: "v1", Kind: "CompositeResourceDefinition"}
	gvkDatabase  = schema.GroupVersionKind{Group: "example.org", Version: "v1alpha1", Kind: "Database"}

	gvrNamespace = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	gvrConfigMap = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	gvrXRD       = schema.GroupVersionResource{Group: "apiextensions.crossplane.io", Version: "v1", Resource: "compositeresourcedefinitions"}
	gvrDatabase  = schema.GroupVersionResource{Group: "example.org", Version: "v1alpha1", Resource: "databases"}
)

func discoveryResources() []*metav1.APIResourceList {
	return []*metav1.APIResourceList{
		{
			GroupVersion: "v1",
			APIResources: []metav1.APIResource{
				{Name: "namespaces", SingularName: "namespace", Kind: "Namespace", Namespaced: false, Verbs: []string{"get", "list", "create", "delete"}},
				{Name: "configmaps", SingularName: "configmap", Kind: "ConfigMap", Namespaced: true, Verbs: []string{"get", "list", "create", "delete", "patch"}},
			},
		},
		{
			GroupVersion: "apiextensions.crossplane.io/v1",
			APIResources: []metav1.APIResource{
				{Name: "compositeresourcedefinitions", SingularName: "compositeresourcedefinition", Kind: "CompositeResourceDefinition", Namespaced: false, Verbs: []string{"get", "list", "create", "delete"}},
			},
		},
	}
}

// databases is the API resource list served once the XRD is established.
func databases() *metav1.APIResourceList {
	return &metav1.APIResourceList{
		GroupVersion: "example.org/v1alpha1",
		APIResources: []metav1.APIResource{
			{Name: "databases", SingularName: "database", Kind: "Database", Namespaced: true, Verbs: []string{"get", "list", "create", "delete", "patch"}},
		},
	}
}

// fakeClient is a Client on fakes: a dynamic client on an object tracker,
// a clientset, and a mapper answering from discoveryResources (plus the
// databases when withDatabases).
func fakeClient(t *testing.T, withDatabases bool, objs ...runtime.Object) (*Client, *dynamicfake.FakeDynamicClient, *discoveryfake.FakeDiscovery) {
	t.Helper()
	disc := &discoveryfake.FakeDiscovery{Fake: &k8stesting.Fake{Resources: discoveryResources()}}
	if withDatabases {
		disc.Resources = append(disc.Resources, databases())
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		gvrNamespace: "NamespaceList",
		gvrConfigMap: "ConfigMapList",
		gvrXRD:       "CompositeResourceDefinitionList",
		gvrDatabase:  "DatabaseList",
	}, objs...)
	k := &Client{
		CS:     fake.NewClientset(),
		Dyn:    dyn,
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)),
	}
	return k, dyn, disc
}

func obj(gvk schema.GroupVersionKind, ns, name string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	for k, v := range fields {
		u.Object[k] = v
	}
	u.SetGroupVersionKind(gvk)
	u.SetName(name)
	if ns != "" {
		u.SetNamespace(ns)
	}
	return u
}

func TestMapping(t *testing.T) {
	k, _, _ := fakeClient(t, true)
	cases := []struct {
		gvk       schema.GroupVersionKind
		want      schema.GroupVersionResource
		namespace bool
	}{
		{gvkNamespace, gvrNamespace, false},
		{gvkConfigMap, gvrConfigMap, true},
		{gvkXRD, gvrXRD, false},
		{gvkDatabase, gvrDatabase, true},
	}
	for _, c := range cases {
		t.Run(c.gvk.Kind, func(t *testing.T) {
			m, err := k.Mapping(c.gvk)
			if err != nil {
				t.Fatalf("Mapping: %v", err)
			}
			if m.Resource != c.want || m.GroupVersionKind != c.gvk {
				t.Errorf("Mapping = %v %v, want %v %v", m.Resource, m.GroupVersionKind, c.want, c.gvk)
			}
			if got := m.Scope.Name() == meta.RESTScopeNameNamespace; got != c.namespace {
				t.Errorf("Mapping namespaced = %v, want %v", got, c.namespace)
			}
		})
	}
	for _, gvk := range []schema.GroupVersionKind{
		{Group: "nowhere.example.org", Version: "v1", Kind: "Thing"},
		{Version: "v1", Kind: "Thing"},
		{Group: "example.org", Version: "v1", Kind: "Database"}, // a version not served
	} {
		t.Run("unknown "+gvk.String(), func(t *testing.T) {
			if m, err := k.Mapping(gvk); err == nil {
				t.Fatalf("Mapping = %v, want an error", m.Resource)
			} else if !meta.IsNoMatchError(err) {
				t.Errorf("Mapping = %v, want a no-match error", err)
			}
		})
	}
}

// A kind served after the mapper first read discovery is found: Mapping
// resets discovery on a miss.
func TestMappingRefreshesOnMiss(t *testing.T) {
	k, _, disc := fakeClient(t, false)
	if _, err := k.Mapping(gvkConfigMap); err != nil {
		t.Fatal(err) // discovery read and cached
	}
	if _, err := k.Mapping(gvkDatabase); !meta.IsNoMatchError(err) {
		t.Fatalf("Mapping of a kind not served yet = %v, want a no-match error", err)
	}
	disc.Resources = append(disc.Resources, databases())
	m, err := k.Mapping(gvkDatabase)
	if err != nil {
		t.Fatalf("Mapping after the kind appeared: %v", err)
	}
	if m.Resource != gvrDatabase {
		t.Errorf("Mapping = %v, want %v", m.Resource, gvrDatabase)
	}
}

func TestWaitKind(t *testing.T) {
	k, _, _ := fakeClient(t, false)
	t.Run("served", func(t *testing.T) {
		if err := k.WaitKind(context.Background(), gvkXRD); err != nil {
			t.Errorf("WaitKind = %v", err)
		}
	})
	t.Run("never served", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		err := k.WaitKind(ctx, gvkDatabase)
		if err == nil || !strings.Contains(err.Error(), "never served") || !meta.IsNoMatchError(err) {
			t.Errorf("WaitKind = %v, want a never-served error wrapping the no-match error", err)
		}
	})
}

func TestResource(t *testing.T) {
	cases := []struct {
		name   string
		gvk    schema.GroupVersionKind
		ns     string
		want   schema.GroupVersionResource
		wantNS string
	}{
		{"namespaced kind in a namespace", gvkConfigMap, "db", gvrConfigMap, "db"},
		{"namespaced kind in all namespaces", gvkConfigMap, "", gvrConfigMap, ""},
		{"namespaced XR in a namespace", gvkDatabase, "db", gvrDatabase, "db"},
		{"cluster-scoped kind", gvkXRD, "", gvrXRD, ""},
		{"cluster-scoped kind, namespace ignored", gvkNamespace, "db", gvrNamespace, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k, dyn, _ := fakeClient(t, true)
			r, err := k.Resource(c.gvk, c.ns)
			if err != nil {
				t.Fatalf("Resource: %v", err)
			}
			// The fake's clients keep their resource and namespace to
			// themselves: read them from the action a Get records.
			_, _ = r.Get(context.Background(), "x", metav1.GetOptions{})
			acts := dyn.Actions()
			if len(acts) != 1 {
				t.Fatalf("%d actions, want 1", len(acts))
			}
			if a := acts[0]; a.GetResource() != c.want || a.GetNamespace() != c.wantNS {
				t.Errorf("Resource = %v in %q, want %v in %q", a.GetResource(), a.GetNamespace(), c.want, c.wantNS)
			}
		})
	}
	t.Run("unknown kind", func(t *testing.T) {
		k, _, _ := fakeClient(t, true)
		if _, err := k.Resource(schema.GroupVersionKind{Group: "nowhere.example.org", Version: "v1", Kind: "Thing"}, "db"); !meta.IsNoMatchError(err) {
			t.Errorf("Resource of an unknown kind = %v, want a no-match error", err)
		}
	})
	t.Run("ResourceFor", func(t *testing.T) {
		k, dyn, _ := fakeClient(t, true)
		r, err := k.ResourceFor(obj(gvkDatabase, "db", "x", nil))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = r.Get(context.Background(), "x", metav1.GetOptions{})
		if a := dyn.Actions()[0]; a.GetResource() != gvrDatabase || a.GetNamespace() != "db" {
			t.Errorf("ResourceFor = %v in %q, want %v in db", a.GetResource(), a.GetNamespace(), gvrDatabase)
		}
	})
}

func TestGetCreateDelete(t *testing.T) {
	ctx := context.Background()
	existing := obj(gvkConfigMap, "db", "present", map[string]any{"data": map[string]any{"k": "v"}})
	k, dyn, _ := fakeClient(t, true, existing)

	t.Run("get", func(t *testing.T) {
		u, err := k.Get(ctx, gvkConfigMap, "db", "present")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if v, _, _ := unstructured.NestedString(u.Object, "data", "k"); v != "v" || u.GetName() != "present" {
			t.Errorf("Get = %s", ToYAML(u))
		}
	})
	t.Run("get missing", func(t *testing.T) {
		if _, err := k.Get(ctx, gvkConfigMap, "db", "absent"); !apierrors.IsNotFound(err) {
			t.Errorf("Get of a missing object = %v, want NotFound", err)
		}
	})
	t.Run("get in another namespace", func(t *testing.T) {
		if _, err := k.Get(ctx, gvkConfigMap, "other", "present"); !apierrors.IsNotFound(err) {
			t.Errorf("Get in another namespace = %v, want NotFound", err)
		}
	})
	t.Run("get unknown kind", func(t *testing.T) {
		if _, err := k.Get(ctx, schema.GroupVersionKind{Version: "v1", Kind: "Thing"}, "db", "present"); !meta.IsNoMatchError(err) {
			t.Errorf("Get of an unknown kind = %v, want a no-match error", err)
		}
	})

	t.Run("create namespaced", func(t *testing.T) {
		dyn.ClearActions()
		in := obj(gvkDatabase, "db", "pg", map[string]any{"spec": map[string]any{"version": "16"}})
		out, err := k.Create(ctx, in)
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		if out.GetName() != "pg" || out.GetNamespace() != "db" {
			t.Errorf("Create = %s/%s, want db/pg", out.GetNamespace(), out.GetName())
		}
		acts := dyn.Actions()
		if len(acts) != 1 {
			t.Fatalf("%d actions, want 1", len(acts))
		}
		a, ok := acts[0].(k8stesting.CreateActionImpl)
		if !ok || a.GetResource() != gvrDatabase || a.GetNamespace() != "db" {
			t.Fatalf("action = %#v, want a create of databases in db", acts[0])
		}
		if fm := a.CreateOptions.FieldManager; fm != FieldManager {
			t.Errorf("Create field manager = %q, want %q", fm, FieldManager)
		}
		got, err := k.Get(ctx, gvkDatabase, "db", "pg")
		if err != nil {
			t.Fatalf("Get after Create: %v", err)
		}
		if v, _, _ := unstructured.NestedString(got.Object, "spec", "version"); v != "16" {
			t.Errorf("Get after Create = %s", ToYAML(got))
		}
	})
	t.Run("create cluster-scoped", func(t *testing.T) {
		if _, err := k.Create(ctx, obj(gvkNamespace, "", "db", nil)); err != nil {
			t.Fatalf("Create: %v", err)
		}
		if _, err := k.Get(ctx, gvkNamespace, "", "db"); err != nil {
			t.Errorf("Get after Create: %v", err)
		}
	})
	t.Run("create existing", func(t *testing.T) {
		if _, err := k.Create(ctx, obj(gvkConfigMap, "db", "present", nil)); !apierrors.IsAlreadyExists(err) {
			t.Errorf("Create of an existing object = %v, want AlreadyExists", err)
		}
	})
	t.Run("create unknown kind", func(t *testing.T) {
		if _, err := k.Create(ctx, obj(schema.GroupVersionKind{Version: "v1", Kind: "Thing"}, "db", "x", nil)); !meta.IsNoMatchError(err) {
			t.Errorf("Create of an unknown kind = %v, want a no-match error", err)
		}
	})

	t.Run("delete", func(t *testing.T) {
		if err := k.Delete(ctx, gvkConfigMap, "db", "present"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if _, err := k.Get(ctx, gvkConfigMap, "db", "present"); !apierrors.IsNotFound(err) {
			t.Errorf("Get after Delete = %v, want NotFound", err)
		}
	})
	t.Run("delete missing is no error", func(t *testing.T) {
		if err := k.Delete(ctx, gvkConfigMap, "db", "present"); err != nil {
			t.Errorf("Delete of a deleted object = %v, want nil", err)
		}
		if err := k.Delete(ctx, gvkXRD, "", "never-there"); err != nil {
			t.Errorf("Delete of a missing object = %v, want nil", err)
		}
	})
	t.Run("delete unknown kind", func(t *testing.T) {
		if err := k.Delete(ctx, schema.GroupVersionKind{Version: "v1", Kind: "Thing"}, "db", "x"); !meta.IsNoMatchError(err) {
			t.Errorf("Delete of an unknown kind = %v, want a no-match error", err)
		}
	})
	t.Run("delete other errors returned", func(t *testing.T) {
		dyn.PrependReactor("delete", "databases", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(gvrDatabase.GroupResource(), "pg", errors.New("no"))
		})
		if err := k.Delete(ctx, gvkDatabase, "db", "pg"); !apierrors.IsForbidden(err) {
			t.Errorf("Delete = %v, want Forbidden", err)
		}
	})
}

// The fake dynamic client's object tracker implements JSON merge patches, so
// MergePatch is tested against it.
func TestMergePatch(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name     string
		patch    string
		wantData string // data as JSON after the patch; "" for an error
	}{
		{"YAML", "data:\n  b: \"2\"\n", `{"a":"1","b":"2"}`},
		{"JSON", `{"data": {"a": "3"}}`, `{"a":"3"}`},
		{"null deletes", "data:\n  a: null\n  c: x\n", `{"c":"x"}`},
		{"malformed", "data: [a\n", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k, dyn, _ := fakeClient(t, true, obj(gvkConfigMap, "db", "cm", map[string]any{"data": map[string]any{"a": "1"}}))
			out, err := k.MergePatch(ctx, gvkConfigMap, "db", "cm", c.patch)
			if c.wantData == "" {
				if err == nil {
					t.Fatalf("MergePatch = %s, want an error", ToYAML(out))
				}
				if n := len(dyn.Actions()); n != 0 {
					t.Errorf("MergePatch of a malformed patch sent %d requests, want none", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("MergePatch: %v", err)
			}
			if got := jsonOf(t, out.Object["data"]); got != c.wantData {
				t.Errorf("MergePatch returned data %s, want %s", got, c.wantData)
			}
			stored, err := k.Get(ctx, gvkConfigMap, "db", "cm")
			if err != nil {
				t.Fatal(err)
			}
			if got := jsonOf(t, stored.Object["data"]); got != c.wantData {
				t.Errorf("data after MergePatch = %s, want %s", got, c.wantData)
			}
			a, ok := dyn.Actions()[0].(k8stesting.PatchAction)
			if !ok || a.GetPatchType() != types.MergePatchType || a.GetNamespace() != "db" || a.GetName() != "cm" {
				t.Fatalf("action = %#v, want a merge patch of db/cm", dyn.Actions()[0])
			}
			if !json.Valid(a.GetPatch()) {
				t.Errorf("patch sent is not JSON: %s", a.GetPatch())
			}
		})
	}
	t.Run("missing object", func(t *testing.T) {
		k, _, _ := fakeClient(t, true)
		if _, err := k.MergePatch(ctx, gvkConfigMap, "db", "cm", "data: {a: b}"); !apierrors.IsNotFound(err) {
			t.Errorf("MergePatch of a missing object = %v, want NotFound", err)
		}
	})
}

// Server-side apply is not tested: the fake dynamic client's object tracker
// does not implement it (it strategic-merges into an existing object, creates
// none and tracks no field ownership). Only the request Apply makes is
// checked, from the action the fake records; its result is not.
func TestApplyRequest(t *testing.T) {
	k, dyn, _ := fakeClient(t, true)
	in := obj(gvkDatabase, "db", "pg", map[string]any{"spec": map[string]any{"version": "16"}})
	in.SetResourceVersion("42")
	in.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}})
	before := jsonOf(t, in.Object)
	_, _ = k.Apply(context.Background(), in)
	if after := jsonOf(t, in.Object); after != before {
		t.Errorf("Apply modified its input:\n%s\nwas\n%s", after, before)
	}
	acts := dyn.Actions()
	if len(acts) != 1 {
		t.Fatalf("%d actions, want 1", len(acts))
	}
	a, ok := acts[0].(k8stesting.PatchActionImpl)
	if !ok || a.GetPatchType() != types.ApplyPatchType || a.GetResource() != gvrDatabase || a.GetNamespace() != "db" || a.GetName() != "pg" {
		t.Fatalf("action = %#v, want an apply patch of databases db/pg", acts[0])
	}
	if a.PatchOptions.FieldManager != FieldManager || a.PatchOptions.Force == nil || !*a.PatchOptions.Force {
		t.Errorf("apply options = %+v, want field manager %q, forced", a.PatchOptions, FieldManager)
	}
	var sent unstructured.Unstructured
	if err := json.Unmarshal(a.GetPatch(), &sent.Object); err != nil {
		t.Fatalf("patch sent is not JSON: %v", err)
	}
	if sent.GetResourceVersion() != "" || sent.GetManagedFields() != nil {
		t.Errorf("patch sent has resourceVersion %q and managed fields %v, want neither", sent.GetResourceVersion(), sent.GetManagedFields())
	}
	if v, _, _ := unstructured.NestedString(sent.Object, "spec", "version"); v != "16" || sent.GetKind() != "Database" {
		t.Errorf("patch sent = %s", a.GetPatch())
	}
}

// sarReactor answers SubjectAccessReviews from allow, recording the reviews.
type sarReactor struct {
	mu      sync.Mutex
	reviews []authorizationv1.SubjectAccessReview
	allow   func(n int, spec authorizationv1.SubjectAccessReviewSpec) (bool, error) // n counts reviews from 1
}

func (r *sarReactor) react(a k8stesting.Action) (bool, runtime.Object, error) {
	sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
	r.mu.Lock()
	r.reviews = append(r.reviews, *sar.DeepCopy())
	n := len(r.reviews)
	r.mu.Unlock()
	ok, err := r.allow(n, sar.Spec)
	if err != nil {
		return true, nil, err
	}
	out := sar.DeepCopy()
	out.Status.Allowed = ok
	return true, out, nil
}

func (r *sarReactor) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reviews)
}

// sarClient is a Client whose clientset answers SubjectAccessReviews with allow.
func sarClient(t *testing.T, allow func(n int, spec authorizationv1.SubjectAccessReviewSpec) (bool, error)) (*Client, *sarReactor) {
	t.Helper()
	r := &sarReactor{allow: allow}
	cs := fake.NewClientset()
	cs.PrependReactor("create", "subjectaccessreviews", r.react)
	return &Client{CS: cs}, r
}

// readOnly allows get, list and watch of anything, in any namespace.
func readOnly(_ int, s authorizationv1.SubjectAccessReviewSpec) (bool, error) {
	switch s.ResourceAttributes.Verb {
	case "get", "list", "watch":
		return true, nil
	}
	return false, nil
}

var (
	getSecrets    = Access{Verb: "get", Resource: "secrets", Namespace: "db"}
	listDatabases = Access{Verb: "list", Group: "example.org", Resource: "databases", Namespace: "db"}
	deleteSecrets = Access{Verb: "delete", Resource: "secrets", Namespace: "db"}
	createXRDs    = Access{Verb: "create", Group: "apiextensions.crossplane.io", Resource: "compositeresourcedefinitions"}
)

func TestAllowed(t *testing.T) {
	ctx := context.Background()
	k, r := sarClient(t, readOnly)
	cases := []struct {
		a    Access
		want bool
	}{
		{getSecrets, true},
		{listDatabases, true},
		{deleteSecrets, false},
		{createXRDs, false},
	}
	for _, c := range cases {
		t.Run(AccessString(c.a), func(t *testing.T) {
			got, err := k.Allowed(ctx, "db", "app", c.a)
			if err != nil {
				t.Fatalf("Allowed: %v", err)
			}
			if got != c.want {
				t.Errorf("Allowed = %v, want %v", got, c.want)
			}
		})
	}

	// The review asks for the ServiceAccount as the authenticator would
	// name it, with its groups, and the access as given.
	s := r.reviews[0].Spec
	if s.User != "system:serviceaccount:db:app" {
		t.Errorf("review user = %q, want system:serviceaccount:db:app", s.User)
	}
	if got, want := strings.Join(s.Groups, ","), "system:serviceaccounts,system:serviceaccounts:db,system:authenticated"; got != want {
		t.Errorf("review groups = %s, want %s", got, want)
	}
	if s.ResourceAttributes == nil || *s.ResourceAttributes != getSecrets {
		t.Errorf("review resource attributes = %+v, want %+v", s.ResourceAttributes, getSecrets)
	}

	t.Run("error", func(t *testing.T) {
		k, _ := sarClient(t, func(int, authorizationv1.SubjectAccessReviewSpec) (bool, error) {
			return false, apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, "", errors.New("no"))
		})
		if ok, err := k.Allowed(ctx, "db", "app", getSecrets); !apierrors.IsForbidden(err) || ok {
			t.Errorf("Allowed = %v, %v, want false and Forbidden", ok, err)
		}
	})
}

func TestWaitAllowed(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		allow   func(int, authorizationv1.SubjectAccessReviewSpec) (bool, error)
		want    bool
		as      []Access
		wantErr []string // substrings of the error; nil for success
		notErr  []string // not in the error
	}{
		{"all allowed, want allowed", readOnly, true, []Access{getSecrets, listDatabases}, nil, nil},
		{"none allowed, want denied", readOnly, false, []Access{deleteSecrets, createXRDs}, nil, nil},
		{"no accesses", readOnly, true, nil, nil, nil},
		{
			"allowed after a moment (RBAC catching up)",
			func(n int, s authorizationv1.SubjectAccessReviewSpec) (bool, error) { return n > 2, nil },
			true, []Access{getSecrets, deleteSecrets}, nil, nil,
		},
		{
			"one denied, want allowed",
			readOnly, true, []Access{getSecrets, deleteSecrets, listDatabases},
			[]string{"ServiceAccount db/app allowed=false for: delete secrets in db"},
			[]string{"get secrets", "list databases"},
		},
		{
			"two allowed, want denied",
			readOnly, false, []Access{getSecrets, deleteSecrets, listDatabases},
			[]string{"ServiceAccount db/app allowed=true for: get secrets in db, list databases.example.org in db"},
			[]string{"delete"},
		},
		{
			"review fails",
			func(int, authorizationv1.SubjectAccessReviewSpec) (bool, error) {
				return false, errors.New("apiserver down")
			},
			true, []Access{getSecrets},
			[]string{"apiserver down"}, nil,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // the failures each wait out the timeout
			k, r := sarClient(t, c.allow)
			err := k.WaitAllowed(ctx, time.Second, "db", "app", c.want, c.as...)
			if c.wantErr == nil {
				if err != nil {
					t.Errorf("WaitAllowed = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("WaitAllowed = nil, want an error")
			}
			for _, s := range c.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("WaitAllowed = %q, want it to contain %q", err, s)
				}
			}
			for _, s := range c.notErr {
				if strings.Contains(err.Error(), s) {
					t.Errorf("WaitAllowed = %q, want it not to contain %q", err, s)
				}
			}
			// It retried until the timeout: more than one round of reviews.
			if n := r.count(); n <= len(c.as) {
				t.Errorf("%d reviews, want more than one round of %d", n, len(c.as))
			}
		})
	}
	t.Run("context canceled", func(t *testing.T) {
		t.Parallel()
		k, _ := sarClient(t, readOnly)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		err := k.WaitAllowed(ctx, time.Minute, "db", "app", true, deleteSecrets)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "delete secrets in db") {
			t.Errorf("WaitAllowed = %v, want the context's error and the wrong access", err)
		}
	})
}
