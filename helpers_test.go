package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"

	"github.com/example/function-database/internal/wire"
)

// testFunction returns a Function whose passwords are predictable, so that
// whole responses can be compared with golden files.
func testFunction() *Function {
	n := 0
	f := NewFunction(logging.NewNopLogger())
	f.password = func() string {
		n++
		return fmt.Sprintf("generated-password-%02d", n)
	}
	return f
}

// runTest runs the function as Crossplane does within one reconcile, with
// the example Databases as the cluster's (exampleCluster): see runTestIn.
func runTest(t testing.TB, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
	t.Helper()
	return runTestIn(t, req, append(slices.Clip(exampleCluster(t)), instancePodsOf(t, req)...))
}

// instancePodsOf are the pods the StatefulSet controller would run for the
// request's observed StatefulSet: one per replica, ready when the
// StatefulSet reports every replica ready, as the kubelet would.
func instancePodsOf(t testing.TB, req *fnv1.RunFunctionRequest) []*structpb.Struct {
	t.Helper()
	sts := req.GetObserved().GetResources()[string(rnStatefulSet)].GetResource()
	if sts == nil {
		return nil
	}
	name, ns := stringAt(sts, "metadata", "name"), stringAt(sts, "metadata", "namespace")
	replicas := int(structAt(sts, "spec").GetFields()["replicas"].GetNumberValue())
	ready := replicas > 0 && int(structAt(sts, "status").GetFields()["readyReplicas"].GetNumberValue()) == replicas
	labels := map[string]any{}
	for k, v := range structAt(sts, "spec", "template", "metadata", "labels").GetFields() {
		labels[k] = v.GetStringValue()
	}
	var out []*structpb.Struct
	for k := range replicas {
		l := maps.Clone(labels)
		l[labelPodName] = fmt.Sprintf("%s-%d", name, k)
		pod, err := structpb.NewStruct(map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": fmt.Sprintf("%s-%d", name, k), "namespace": ns, "labels": l},
			"status":   map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": map[bool]string{true: "True", false: "False"}[ready]}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pod)
	}
	return out
}

// statusFromPods makes the observed StatefulSet's status.readyReplicas
// count the ready instance pods of cluster, as the StatefulSet controller
// would, when cluster has any: a cluster whose pods and StatefulSet
// disagree only for the moment the controller takes
// (TestInstancesAskedOnlyWhenNeeded covers that moment).
func statusFromPods(req *fnv1.RunFunctionRequest, cluster []*structpb.Struct) {
	sts := req.GetObserved().GetResources()[string(rnStatefulSet)].GetResource()
	st := structAt(sts, "status")
	if st == nil {
		return
	}
	name, seen, ready := stringAt(sts, "metadata", "name"), false, 0
	for _, o := range cluster {
		if stringAt(o, "kind") != "Pod" || !strings.HasPrefix(stringAt(o, "metadata", "name"), name+"-") ||
			stringAt(o, "metadata", "labels", labelPodName) == "" {
			continue
		}
		seen = true
		for _, c := range structAt(o, "status").GetFields()["conditions"].GetListValue().GetValues() {
			if stringAt(c.GetStructValue(), "type") == "Ready" && stringAt(c.GetStructValue(), "status") == "True" {
				ready++
			}
		}
	}
	if seen {
		st.Fields["readyReplicas"] = structpb.NewNumberValue(float64(ready))
	}
}

// runTestIn runs the function as Crossplane core's FetchingFunctionRunner
// does: while the response's requirements change, it fetches the required
// resources from cluster and calls again (at most 6 calls), and returns the
// last response. A Fatal result ends it. req itself is not changed.
func runTestIn(t testing.TB, req *fnv1.RunFunctionRequest, cluster []*structpb.Struct) *fnv1.RunFunctionResponse {
	t.Helper()
	req = proto.CloneOf(req)
	statusFromPods(req, cluster)
	var prev *fnv1.Requirements
	for range 6 {
		rsp := runOnce(t, req)
		for _, r := range rsp.GetResults() {
			if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
				return rsp
			}
		}
		if proto.Equal(rsp.GetRequirements(), prev) {
			return rsp
		}
		prev = rsp.GetRequirements()
		req.RequiredResources = map[string]*fnv1.Resources{}
		for name, sel := range prev.GetResources() {
			req.RequiredResources[name] = fetchRequired(sel, cluster)
		}
	}
	t.Fatalf("the requirements did not stabilize after 6 calls")
	return nil
}

// runOnce is one call of the function, its response as Crossplane gets it.
func runOnce(t testing.TB, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
	t.Helper()
	rsp, err := testFunction().RunFunction(t.Context(), req)
	if err != nil {
		t.Fatalf("RunFunction returned a Go error: %v", err)
	}
	return overTheWire(t, rsp)
}

// fetchRequired answers a resource selector from cluster as Crossplane's
// ExistingRequiredResourcesFetcher does: by name, nil when not found; by
// labels, the (possibly empty) list.
func fetchRequired(sel *fnv1.ResourceSelector, cluster []*structpb.Struct) *fnv1.Resources {
	var items []*fnv1.Resource
	for _, o := range cluster {
		if stringAt(o, "apiVersion") != sel.GetApiVersion() || stringAt(o, "kind") != sel.GetKind() ||
			(sel.Namespace != nil && stringAt(o, "metadata", "namespace") != sel.GetNamespace()) {
			continue
		}
		switch m := sel.GetMatch().(type) {
		case *fnv1.ResourceSelector_MatchName:
			if stringAt(o, "metadata", "name") != m.MatchName {
				continue
			}
		case *fnv1.ResourceSelector_MatchLabels:
			l := structAt(o, "metadata", "labels")
			matches := true
			for k, v := range m.MatchLabels.GetLabels() {
				if l.GetFields()[k].GetStringValue() != v {
					matches = false
				}
			}
			if !matches {
				continue
			}
		}
		items = append(items, &fnv1.Resource{Resource: proto.CloneOf(o)})
	}
	if _, byName := sel.GetMatch().(*fnv1.ResourceSelector_MatchName); byName && len(items) == 0 {
		return nil
	}
	return &fnv1.Resources{Items: items}
}

var (
	exampleClusterOnce sync.Once
	exampleClusterObjs []*structpb.Struct
)

// exampleCluster is every example XR, as if applied: the restore example's
// source (orders in shop) exists.
func exampleCluster(t testing.TB) []*structpb.Struct {
	t.Helper()
	exampleClusterOnce.Do(func() {
		files, _ := filepath.Glob("example/xrs/*.yaml")
		// The archive example's Secret is the platform's, which its
		// Composition's input names.
		for _, f := range append([]string{"example/xr.yaml", "example/legacy/xr.yaml", "example/archive/xr.yaml", "example/archive/object-storage-secret.yaml"}, files...) {
			exampleClusterObjs = append(exampleClusterObjs, readYAMLStruct(t, f))
		}
	})
	return exampleClusterObjs
}

// feedBack plays one reconcile later: the desired composed resources of rsp
// observed (running or starting) and the desired XR status it wrote read
// back in the observed XR, as Crossplane applies it.
func feedBack(t testing.TB, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, running bool) {
	t.Helper()
	req.Observed.Resources = observedFrom(t, rsp, running)
	st := rsp.GetDesired().GetComposite().GetResource().GetFields()["status"]
	if st == nil {
		return
	}
	xr := req.Observed.Composite.Resource
	cur := xr.GetFields()["status"].GetStructValue()
	if cur == nil {
		cur = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		xr.Fields["status"] = structpb.NewStructValue(cur)
	}
	for k, v := range st.GetStructValue().GetFields() {
		cur.Fields[k] = proto.CloneOf(v)
	}
}

// wireBytes is m as the server's codec puts it on the wire.
func wireBytes(m proto.Message) ([]byte, error) {
	data, err := wire.Codec{}.Marshal(m)
	if err != nil {
		return nil, err
	}
	defer data.Free()
	return data.Materialize(), nil
}

// overTheWire returns rsp as Crossplane receives it: marshaled as the server
// does and decoded. The composed resources leave RunFunction as pre-encoded
// bytes (wire.Resource); this is where they become Structs again.
func overTheWire(t testing.TB, rsp *fnv1.RunFunctionResponse) *fnv1.RunFunctionResponse {
	t.Helper()
	out, err := wire.Readable(rsp)
	if err != nil {
		t.Fatalf("cannot read the response as Crossplane would: %v", err)
	}
	return out
}

func readYAMLStruct(t testing.TB, path string) *structpb.Struct {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return yamlStruct(t, string(b))
}

func yamlStruct(t testing.TB, y string) *structpb.Struct {
	t.Helper()
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatalf("cannot parse YAML: %v", err)
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// compositionInput returns the input of the first pipeline step of a
// Composition file, or nil.
func compositionInput(t testing.TB, path string) *structpb.Struct {
	t.Helper()
	c := readYAMLStruct(t, path)
	steps := c.GetFields()["spec"].GetStructValue().GetFields()["pipeline"].GetListValue().GetValues()
	if len(steps) == 0 {
		t.Fatalf("%s has no pipeline steps", path)
	}
	return steps[0].GetStructValue().GetFields()["input"].GetStructValue()
}

// xrRequest is the request Crossplane sends for a new XR: the observed XR
// and nothing composed yet.
func xrRequest(xr, input *structpb.Struct) *fnv1.RunFunctionRequest {
	return &fnv1.RunFunctionRequest{
		Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: xr}},
		Input:    input,
	}
}

// observedFrom plays the API server and the controllers: the desired
// resources of rsp as Crossplane observes them once applied and running,
// with server-side status, generation and the composition resource name
// annotation Crossplane adds.
func observedFrom(t testing.TB, rsp *fnv1.RunFunctionResponse, running bool) map[string]*fnv1.Resource {
	t.Helper()
	out := map[string]*fnv1.Resource{}
	for name, r := range rsp.GetDesired().GetResources() {
		m := proto.CloneOf(r.GetResource()).AsMap()
		meta := m["metadata"].(map[string]any) //nolint:forcetypeassert // always set by the builders
		ann, _ := meta["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
		}
		ann["crossplane.io/composition-resource-name"] = name
		meta["annotations"] = ann
		meta["generation"] = 1
		// As the API server does: every object has a resourceVersion, and
		// an apply that changes nothing keeps it.
		if meta["resourceVersion"] == nil {
			meta["resourceVersion"] = fmt.Sprint(1000 + len(name))
		}
		meta["uid"] = "00000000-0000-0000-0000-" + fmt.Sprintf("%012d", len(name))
		switch m["kind"] {
		case "StatefulSet":
			spec := m["spec"].(map[string]any) //nolint:forcetypeassert // always set by the builders
			n := spec["replicas"]
			st := map[string]any{"observedGeneration": 1, "replicas": n, "currentRevision": meta["name"].(string) + "-7c9d8f6b5d", "updateRevision": meta["name"].(string) + "-7c9d8f6b5d"}
			if running {
				st["readyReplicas"], st["currentReplicas"], st["updatedReplicas"], st["availableReplicas"] = n, n, n, n
			}
			m["status"] = st
		case "CronJob":
			if running {
				m["status"] = map[string]any{"lastScheduleTime": "2026-11-28T02:00:00Z", "lastSuccessfulTime": "2026-11-28T02:03:12Z"}
			}
		case "Job":
			if running {
				m["status"] = map[string]any{"succeeded": 1, "completionTime": "2026-11-28T02:41:07Z", "conditions": []any{map[string]any{"type": "Complete", "status": "True"}}}
			}
		case "Service":
			spec := m["spec"].(map[string]any) //nolint:forcetypeassert // always set by the builders
			if spec["clusterIP"] == nil {
				spec["clusterIP"] = "10.0.0." + fmt.Sprint(10+len(name))
			}
			spec["type"] = "ClusterIP"
		}
		s, err := structpb.NewStruct(normalise(m).(map[string]any)) //nolint:forcetypeassert // maps stay maps
		if err != nil {
			t.Fatal(err)
		}
		out[name] = &fnv1.Resource{Resource: s}
	}
	return out
}

// normalise turns ints into float64 as a JSON decoder would.
func normalise(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalise(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalise(e)
		}
	case int:
		return float64(x)
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	}
	return v
}

// desiredOf returns a copy of rsp's desired composed resources.
func desiredOf(rsp *fnv1.RunFunctionResponse) map[string]*fnv1.Resource {
	out := map[string]*fnv1.Resource{}
	for k, v := range rsp.GetDesired().GetResources() {
		out[k] = proto.CloneOf(v)
	}
	return out
}

func testDB() *database {
	return &database{Name: "orders", Namespace: "shop", SQLName: "orders", ClusterDomain: "cluster.local", AllowedNamespaces: []string{"monitoring"}}
}

var wantLabels = map[string]string{
	"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders",
	"app.kubernetes.io/component": "database", "app.kubernetes.io/managed-by": "function-database",
}

// decodeInto decodes a desired or observed resource into its typed kind.
func decodeInto[T any](t testing.TB, s *structpb.Struct) *T {
	t.Helper()
	if s == nil {
		t.Fatalf("resource missing")
	}
	b, err := s.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	out := new(T)
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	if err := d.Decode(out); err != nil {
		t.Fatalf("cannot decode %T strictly: %v", out, err)
	}
	return out
}

// setObservedStatus replaces the status of the observed resource name.
func setObservedStatus(t testing.TB, req *fnv1.RunFunctionRequest, name resource.Name, status map[string]any) {
	t.Helper()
	r := req.GetObserved().GetResources()[string(name)]
	if r == nil {
		t.Fatalf("no observed %s", name)
	}
	st, err := structpb.NewStruct(status)
	if err != nil {
		t.Fatal(err)
	}
	r.Resource.Fields["status"] = structpb.NewStructValue(st)
}

func encodeObserved(t testing.TB, obj runtime.Object) *fnv1.Resource {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	s, err := structpb.NewStruct(normalise(m).(map[string]any)) //nolint:forcetypeassert // maps stay maps
	if err != nil {
		t.Fatal(err)
	}
	return &fnv1.Resource{Resource: s}
}

// runningRequest is the medium example (or xr) running: composed, observed,
// ready. mutate edits the spec of the XR before the call.
func runningRequest(t *testing.T, xr string) *fnv1.RunFunctionRequest {
	t.Helper()
	req := xrRequest(yamlStruct(t, xr), nil)
	req.Observed.Resources = observedFrom(t, runTest(t, req), true)
	return req
}

func setSpec(t *testing.T, req *fnv1.RunFunctionRequest, spec string) {
	t.Helper()
	setSpecOf(t, req.Observed.Composite.Resource, spec)
}

func setSpecOf(t *testing.T, xr *structpb.Struct, spec string) {
	t.Helper()
	xr.Fields["spec"] = structpb.NewStructValue(yamlStruct(t, spec))
}

func desiredSTS(t *testing.T, rsp *fnv1.RunFunctionResponse) *appsv1.StatefulSet {
	t.Helper()
	return decodeInto[appsv1.StatefulSet](t, rsp.GetDesired().GetResources()["statefulset"].GetResource())
}

func conditionOf(rsp *fnv1.RunFunctionResponse, typ string) *fnv1.Condition {
	for _, c := range rsp.GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

func at(t *testing.T, s string) *metav1.Time {
	t.Helper()
	tm, err := time3339(s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// lineDiff shows a readable diff of two texts.
func lineDiff(want, got string) string { return cmp.Diff(want, got) }
