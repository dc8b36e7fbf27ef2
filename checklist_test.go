package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"
)

// TestComposedKindChecklist is the test of docs/maintainers.md's checklist
// "How to add a composed kind": it fails until each step is done for every
// composed resource. A composition resource name (a resource.Name constant
// of names.go) must be composed in some scenario (checklistScenarios: every
// example, with its Composition's input and with none), and then have
//   - a readiness rule (readiness, ready.go): not ready before Crossplane
//     observes it, ready once it runs as observedFrom (helpers_test.go)
//     plays its controller;
//   - its apiVersion/kind in composedKinds and typedKinds (fuzz_test.go), so
//     that the fuzz invariants and the security checks decode it strictly;
//   - when its kind carries a pod template, podTemplateOf (security_test.go)
//     knowing the kind, so the restricted Pod Security check and the
//     container checks reach its pods;
//   - its resource granted to Crossplane core by example/rbac.yaml.
func TestComposedKindChecklist(t *testing.T) {
	names := composedResourceNames(t)
	role := readClusterRole(t, "example/rbac.yaml")
	composed := map[resource.Name]*structpb.Struct{}
	// readyEarly and notReadyRunning name a scenario where the readiness
	// rule failed, by resource.
	readyEarly, notReadyRunning := map[resource.Name]string{}, map[resource.Name]string{}
	for _, sc := range checklistScenarios(t) {
		req := sc.req
		run := func() *fnv1.RunFunctionResponse {
			if sc.cluster != nil {
				return runTestIn(t, req, sc.cluster)
			}
			return runTest(t, req)
		}
		rsp := run()
		for _, r := range rsp.GetResults() {
			if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
				t.Fatalf("scenario %s: Fatal result: %s", sc.name, r.GetMessage())
			}
		}
		for name, r := range rsp.GetDesired().GetResources() {
			composed[resource.Name(name)] = r.GetResource()
			if _, seen := req.GetObserved().GetResources()[name]; !seen && r.GetReady() != fnv1.Ready_READY_FALSE {
				readyEarly[resource.Name(name)] = sc.name
			}
		}
		req.Observed.Resources = observedFrom(t, rsp, true)
		for name, r := range run().GetDesired().GetResources() {
			if r.GetReady() != fnv1.Ready_READY_TRUE && !slices.Contains(sc.degraded, resource.Name(name)) {
				notReadyRunning[resource.Name(name)] = sc.name
			}
		}
	}

	for _, name := range slices.Sorted(maps.Keys(composed)) {
		if !slices.Contains(names, name) {
			t.Errorf("%s is composed but is no resource.Name constant of names.go: name it there", name)
		}
	}
	for _, name := range names {
		t.Run(string(name), func(t *testing.T) {
			s, ok := composed[name]
			if !ok {
				t.Fatalf("no scenario composes %s: add an example to example/xrs/ that does (the goldens, the fixed point and the security checks see only what the examples compose), or, for a resource composed only on some observed state, a scenario to checklistScenarios", name)
			}
			if _, ok := readiness[name]; !ok {
				t.Errorf("no readiness rule: add one to readiness (ready.go); there is no default")
			}
			if ex, ok := readyEarly[name]; ok {
				t.Errorf("ready before Crossplane observed it (scenario %s): its readiness rule (ready.go) must wait for the observed object", ex)
			}
			if ex, ok := notReadyRunning[name]; ok {
				t.Errorf("not ready when running (scenario %s): its readiness rule (ready.go) must hold once it runs, and observedFrom (helpers_test.go) must write what its controller writes", ex)
			}
			gvk := apiVersionKind(s)
			if want, ok := composedKinds[name]; !ok || want != gvk {
				t.Errorf("composedKinds (fuzz_test.go) says %q, want %q", want, gvk)
			}
			if _, ok := typedKinds[gvk]; !ok {
				t.Fatalf("typedKinds (fuzz_test.go) cannot make a %s: add its Go type", gvk)
			}
			obj, err := decodeTyped(s)
			if err != nil {
				t.Fatal(err)
			}
			if hasPodSpec(reflect.TypeOf(obj), map[reflect.Type]bool{}) && podTemplateOf(obj) == nil {
				t.Errorf("a %s carries a pod template that podTemplateOf (security_test.go) does not reach: the Pod Security and container checks would skip its pods", gvk)
			}
			gv, err := schema.ParseGroupVersion(s.GetFields()["apiVersion"].GetStringValue())
			if err != nil {
				t.Fatal(err)
			}
			plural, _ := meta.UnsafeGuessKindToResource(gv.WithKind(s.GetFields()["kind"].GetStringValue()))
			if !grants(role, plural.GroupResource()) {
				t.Errorf("example/rbac.yaml does not grant Crossplane core %s with the verbs %v: core could not compose it (and README's RBAC table lists every kind)", plural.GroupResource(), coreVerbs)
			}
		})
	}
}

// coreVerbs are the verbs Crossplane core checks for a composed kind before
// it reports a failure as an RBAC problem (example/rbac.yaml says why).
var coreVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

func readClusterRole(t *testing.T, path string) *rbacv1.ClusterRole {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(b, role); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return role
}

// grants is whether one rule of role grants every verb of coreVerbs on gr.
func grants(role *rbacv1.ClusterRole, gr schema.GroupResource) bool {
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, gr.Group) && slices.Contains(r.Resources, gr.Resource) &&
			!slices.ContainsFunc(coreVerbs, func(v string) bool { return !slices.Contains(r.Verbs, v) }) {
			return true
		}
	}
	return false
}

// A checklistScenario is a request that composes some of the resources.
type checklistScenario struct {
	name string
	req  *fnv1.RunFunctionRequest
	// cluster, when set, is what Crossplane's required resources find
	// (runTestIn); otherwise the examples and the observed StatefulSet's
	// pods (runTest).
	cluster []*structpb.Struct
	// degraded are the resources the scenario's cluster keeps from being
	// ready however long they run (a StatefulSet with a pod that is not).
	degraded []resource.Name
}

// checklistScenarios are every example, with its Composition's input and
// with none. A resource composed only on some observed state (a Job the
// function starts when something happened) gets a scenario here too: a
// request carrying that observed state.
func checklistScenarios(t *testing.T) []checklistScenario {
	t.Helper()
	var out []checklistScenario
	for _, ex := range allExamples(t) {
		out = append(out,
			checklistScenario{ex.name, xrRequest(readYAMLStruct(t, ex.xr), compositionInput(t, ex.composition)), nil, nil},
			checklistScenario{ex.name + "/no-input", xrRequest(readYAMLStruct(t, ex.xr), nil), nil, nil})
	}
	// The failover Job: the large example running, its primary's pod not
	// ready.
	req := xrRequest(readYAMLStruct(t, "example/xrs/large.yaml"), compositionInput(t, "example/composition.yaml"))
	rsp := runTest(t, req)
	for range 2 {
		feedBack(t, req, rsp, true)
		rsp = runTest(t, req)
	}
	feedBack(t, req, rsp, true)
	out = append(out, checklistScenario{"large/primary-lost", req,
		append(append([]*structpb.Struct{}, exampleCluster(t)...), instancePodsReady(t, false, true, true)...),
		[]resource.Name{rnStatefulSet}})
	return out
}

// composedResourceNames are the values of names.go's resource.Name constants.
func composedResourceNames(t *testing.T) []resource.Name {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "names.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []resource.Name
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v, ok := spec.(*ast.ValueSpec)
			if !ok {
				continue
			}
			if sel, ok := v.Type.(*ast.SelectorExpr); !ok || sel.Sel.Name != "Name" {
				continue
			}
			for _, val := range v.Values {
				lit, ok := val.(*ast.BasicLit)
				if !ok {
					t.Fatalf("names.go: a resource.Name constant that is not a string literal")
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, resource.Name(s))
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("names.go declares no resource.Name constants")
	}
	return out
}

// hasPodSpec is whether a value of type typ can hold a PodSpec.
func hasPodSpec(typ reflect.Type, seen map[reflect.Type]bool) bool {
	if typ == reflect.TypeFor[corev1.PodSpec]() {
		return true
	}
	if seen[typ] {
		return false
	}
	seen[typ] = true
	switch typ.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return hasPodSpec(typ.Elem(), seen)
	case reflect.Struct:
		for i := range typ.NumField() {
			if hasPodSpec(typ.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}
