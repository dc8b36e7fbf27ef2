package crossplane

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/example/function-database/e2e/internal/kube"
)

// chartVersion is the Crossplane core whose Helm chart the tests render: the
// CORE_VERSION hack/tools.sh pins (TestChartVersionIsCoreVersion).
const chartVersion = "v2.3.4"

// crossplaneModule is the directory of github.com/crossplane/crossplane/v2 at
// chartVersion, from `go mod download` as coreModule finds it (run outside
// any module, once for the package's tests).
var crossplaneModule = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "github.com/crossplane/crossplane/v2@"+chartVersion)
	cmd.Dir = os.TempDir()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	_ = json.Unmarshal(out, &m) // on failure, go prints Error in the JSON
	if err != nil || m.Dir == "" {
		return "", fmt.Errorf("go mod download crossplane %s: %w %s %s", chartVersion, err, m.Error, strings.TrimSpace(stderr.String()))
	}
	return m.Dir, nil
})

// moduleDir is crossplaneModule's directory, the test skipped when it cannot
// be downloaded.
func moduleDir(t *testing.T) string {
	t.Helper()
	dir, err := crossplaneModule()
	if err != nil {
		t.Skipf("no crossplane module: %v", err)
	}
	return dir
}

// TestChartVersionIsCoreVersion: the chart the tests render is that of the
// core binary the suite runs.
func TestChartVersionIsCoreVersion(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "..", "hack", "tools.sh"))
	if err != nil {
		t.Skipf("no hack/tools.sh: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CORE_VERSION="); ok {
			if v != chartVersion {
				t.Errorf("hack/tools.sh pins CORE_VERSION=%s, the tests render the chart of %s: update chartVersion (and TestRenderChartRBAC's objects)", v, chartVersion)
			}
			return
		}
	}
	t.Errorf("no CORE_VERSION= line in hack/tools.sh (%v)", sc.Err())
}

type objectID struct{ Kind, Name, Namespace string }

func idOf(o *unstructured.Unstructured) objectID {
	return objectID{o.GetKind(), o.GetName(), o.GetNamespace()}
}

// TestRenderChartRBAC renders the RBAC templates of Crossplane's own chart.
func TestRenderChartRBAC(t *testing.T) {
	dir := moduleDir(t)
	const ns = "xp-under-test" // not Namespace: the namespace must come from the argument
	objs, err := renderChartRBAC(dir, ns)
	if err != nil {
		t.Fatal(err)
	}

	// Every object, in template order, with the chart's default values
	// (rbacManager.deploy, the aggregated roles not skipped).
	var got []objectID
	byID := map[objectID]*unstructured.Unstructured{}
	for _, o := range objs {
		if byID[idOf(o)] != nil {
			t.Errorf("%v rendered twice", idOf(o))
		}
		byID[idOf(o)] = o
		got = append(got, idOf(o))
	}
	sa := func(name string) objectID { return objectID{"ServiceAccount", name, ns} }
	cr := func(name string) objectID { return objectID{"ClusterRole", name, ""} }
	crb := func(name string) objectID { return objectID{"ClusterRoleBinding", name, ""} }
	want := []objectID{
		sa(CoreSA),
		cr("crossplane"),
		cr("crossplane:system:aggregate-to-crossplane"),
		crb("crossplane"),
		sa(rbacSA),
		cr("crossplane-rbac-manager"),
		crb("crossplane-rbac-manager"),
		cr(providerClusterRole),
		crb("crossplane-admin"),
		cr("crossplane-admin"),
		cr("crossplane-edit"),
		cr("crossplane-view"),
		cr("crossplane-browse"),
		cr("crossplane:aggregate-to-admin"),
		cr("crossplane:aggregate-to-edit"),
		cr("crossplane:aggregate-to-view"),
		cr("crossplane:aggregate-to-browse"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rendered objects (-want +got):\n%s", diff)
	}

	// The bindings: each to its ClusterRole, core's and the RBAC manager's
	// to their ServiceAccounts in ns.
	type subject struct{ Kind, Name, Namespace string }
	for _, c := range []struct {
		binding, role string
		subjects      []subject
	}{
		{"crossplane", "crossplane", []subject{{"ServiceAccount", CoreSA, ns}}},
		{"crossplane-rbac-manager", "crossplane-rbac-manager", []subject{{"ServiceAccount", rbacSA, ns}}},
		{"crossplane-admin", "crossplane-admin", []subject{{"Group", "crossplane:masters", ""}}},
	} {
		b := byID[crb(c.binding)]
		if b == nil {
			continue // reported above
		}
		ref, _, _ := unstructured.NestedStringMap(b.Object, "roleRef")
		if diff := cmp.Diff(map[string]string{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": c.role}, ref); diff != "" {
			t.Errorf("ClusterRoleBinding %s roleRef (-want +got):\n%s", c.binding, diff)
		}
		if byID[cr(c.role)] == nil {
			t.Errorf("ClusterRoleBinding %s binds ClusterRole %s, which the chart does not make", c.binding, c.role)
		}
		list, _, _ := unstructured.NestedSlice(b.Object, "subjects")
		var subjects []subject
		for _, s := range list {
			m, _ := s.(map[string]any)
			str := func(k string) string { v, _ := m[k].(string); return v }
			subjects = append(subjects, subject{str("kind"), str("name"), str("namespace")})
		}
		if diff := cmp.Diff(c.subjects, subjects); diff != "" {
			t.Errorf("ClusterRoleBinding %s subjects (-want +got):\n%s", c.binding, diff)
		}
	}

	// Labels from _helpers.tpl, through include, template, quote and
	// trunc/trimSuffix: Chart.yaml's name and version.
	for _, o := range objs {
		l := o.GetLabels()
		for k, v := range map[string]string{
			"app":                          "crossplane",
			"app.kubernetes.io/name":       "crossplane",
			"app.kubernetes.io/part-of":    "crossplane",
			"app.kubernetes.io/instance":   "crossplane",
			"app.kubernetes.io/managed-by": "Helm",
			"helm.sh/chart":                "crossplane-0.0.1",
			"app.kubernetes.io/version":    "0.0.1",
		} {
			if l[k] != v {
				t.Errorf("%v: label %s = %q, want %q", idOf(o), k, l[k], v)
			}
		}
	}

	// Core's rules reach it through the aggregated `crossplane` ClusterRole:
	// the rules themselves are in the role labelled to be aggregated to it,
	// among them the access Start waits for.
	if agg := byID[cr("crossplane")]; agg != nil {
		sel, _, _ := unstructured.NestedSlice(agg.Object, "aggregationRule", "clusterRoleSelectors")
		if diff := cmp.Diff([]any{map[string]any{"matchLabels": map[string]any{"rbac.crossplane.io/aggregate-to-crossplane": "true"}}}, sel); diff != "" {
			t.Errorf("ClusterRole crossplane aggregation (-want +got):\n%s", diff)
		}
		if _, err := RuleAccesses(agg, ""); err == nil {
			t.Error("RuleAccesses of the aggregating ClusterRole crossplane (no rules of its own): no error")
		}
	}
	if sys := byID[cr("crossplane:system:aggregate-to-crossplane")]; sys != nil {
		if sys.GetLabels()["rbac.crossplane.io/aggregate-to-crossplane"] != "true" {
			t.Errorf("ClusterRole %s not labelled to be aggregated to crossplane: %v", sys.GetName(), sys.GetLabels())
		}
		as, err := RuleAccesses(sys, "")
		if err != nil {
			t.Fatal(err)
		}
		crds := kube.Access{Verb: "*", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}
		found := false
		for _, a := range as {
			found = found || a == crds
		}
		if !found {
			t.Errorf("ClusterRole %s does not grant %s: %v", sys.GetName(), kube.AccessString(crds), as)
		}
	}

	// All rendered: no template action, no missing value printed, in any
	// key or string value.
	for _, o := range objs {
		for _, s := range stringsIn(o.Object) {
			for _, bad := range []string{"{{", "}}", "<no value>"} {
				if strings.Contains(s, bad) {
					t.Errorf("%v holds %q: %q", idOf(o), bad, s)
				}
			}
		}
	}

	// Deterministic: a second rendering is the same objects.
	again, err := renderChartRBAC(dir, ns)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(objs, again); diff != "" {
		t.Errorf("second rendering differs (-first +second):\n%s", diff)
	}
}

// stringsIn is every map key and string value in v.
func stringsIn(v any) []string {
	var out []string
	switch v := v.(type) {
	case string:
		out = append(out, v)
	case map[string]any:
		for k, e := range v {
			out = append(out, k)
			out = append(out, stringsIn(e)...)
		}
	case []any:
		for _, e := range v {
			out = append(out, stringsIn(e)...)
		}
	}
	return out
}

// fakeChart writes a chart as renderChartRBAC reads it, every template of
// chartRBACTemplates empty unless templates gives its text.
func fakeChart(t *testing.T, templates map[string]string) string {
	t.Helper()
	module := t.TempDir()
	chart := filepath.Join(module, "cluster", "charts", "crossplane")
	files := map[string]string{
		"Chart.yaml":              "name: crossplane\nversion: 1.2.3\nappVersion: 1.2.3\n",
		"values.yaml":             "rbacManager:\n  deploy: true\n",
		"templates/_helpers.tpl":  `{{- define "crossplane.name" -}}{{ default .Chart.Name .Values.nameOverride }}{{- end -}}`,
		"templates/unrelated.txt": "{{ not parsed }}",
	}
	for _, name := range chartRBACTemplates {
		files["templates/"+name] = templates[name]
	}
	for name, text := range files {
		path := filepath.Join(chart, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return module
}

// TestRenderChartRBACRefuses: what renderChartRBAC must not let through.
func TestRenderChartRBACRefuses(t *testing.T) {
	sa := "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {{ template \"crossplane.name\" . }}\n  namespace: {{ .Release.Namespace }}\n"
	t.Run("a fake chart renders", func(t *testing.T) {
		objs, err := renderChartRBAC(fakeChart(t, map[string]string{"serviceaccount.yaml": sa}), "ns1")
		if err != nil {
			t.Fatal(err)
		}
		var got []objectID
		for _, o := range objs {
			got = append(got, idOf(o))
		}
		if diff := cmp.Diff([]objectID{{"ServiceAccount", "crossplane", "ns1"}}, got); diff != "" {
			t.Errorf("objects (-want +got):\n%s", diff)
		}
	})
	for _, c := range []struct {
		name      string
		templates map[string]string
		wantErr   string
	}{
		{"a kind that is not RBAC", map[string]string{"clusterrole.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"},
			"chart template clusterrole.yaml renders a ConfigMap: not an RBAC object"},
		{"a function chartFuncs lacks", map[string]string{"clusterrole.yaml": "name: {{ .Chart.Name | upper }}\n"},
			"chart template clusterrole.yaml"},
		{"invalid YAML", map[string]string{"serviceaccount.yaml": "kind: [ServiceAccount\n"},
			"chart template serviceaccount.yaml rendered invalid YAML"},
		{"an undefined named template", map[string]string{"serviceaccount.yaml": "{{ include \"crossplane.nothing\" . }}\n"},
			"chart template serviceaccount.yaml"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := renderChartRBAC(fakeChart(t, c.templates), "ns1")
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("renderChartRBAC = %v, want an error with %q", err, c.wantErr)
			}
		})
	}
	t.Run("no chart", func(t *testing.T) {
		if _, err := renderChartRBAC(t.TempDir(), "ns1"); err == nil {
			t.Error("renderChartRBAC of a folder without a chart: no error")
		}
	})
}

// TestChartFuncs runs the chart's Helm functions as its templates call them:
// piped, the piped value last.
func TestChartFuncs(t *testing.T) {
	include := func(name string, data any) (string, error) {
		if name != "known" {
			return "", fmt.Errorf("no template %s", name)
		}
		return fmt.Sprintf("known(%v)", data), nil
	}
	values := map[string]any{
		"str": "crossplane", "empty": "", "zero": float64(0), "num": float64(3), "no": false, "yes": true,
		"emptyMap": map[string]any{}, "emptyList": []any{}, "list": []any{"a"},
		"labels": map[string]any{"b": "2", "a": "1"},
	}
	for _, c := range []struct {
		name, text, want, wantErr string
	}{
		{name: "default given", text: `{{ default "d" .str }}`, want: "crossplane"},
		{name: "default missing key", text: `{{ default "d" .missing }}`, want: "d"},
		{name: "default empty string", text: `{{ default "d" .empty }}`, want: "d"},
		{name: "default zero", text: `{{ default "d" .zero }}`, want: "d"},
		{name: "default number", text: `{{ default "d" .num }}`, want: "3"},
		{name: "default false", text: `{{ default "d" .no }}`, want: "d"},
		{name: "default true", text: `{{ default "d" .yes }}`, want: "true"},
		{name: "default empty map", text: `{{ default "d" .emptyMap }}`, want: "d"},
		{name: "default empty list", text: `{{ default "d" .emptyList }}`, want: "d"},
		{name: "default list", text: `{{ default "d" .list }}`, want: "[a]"},
		{name: "default piped", text: `{{ .empty | default "d" }}`, want: "d"},
		{name: "default nothing given", text: `{{ default "d" }}`, want: "d"},
		{name: "trunc longer", text: `{{ .str | trunc 5 }}`, want: "cross"},
		{name: "trunc shorter", text: `{{ .str | trunc 63 }}`, want: "crossplane"},
		{name: "trunc exact", text: `{{ .str | trunc 10 }}`, want: "crossplane"},
		{name: "trunc 0", text: `{{ .str | trunc 0 }}`, want: ""},
		{name: "trimSuffix", text: `{{ "name-" | trimSuffix "-" }}`, want: "name"},
		{name: "trimSuffix once", text: `{{ "name--" | trimSuffix "-" }}`, want: "name-"},
		{name: "trimSuffix absent", text: `{{ "name" | trimSuffix "-" }}`, want: "name"},
		{name: "replace all", text: `{{ "1.0+a+b" | replace "+" "_" }}`, want: "1.0_a_b"},
		{name: "the chart label", text: `{{ printf "%s-%s" "crossplane" "1.0+build" | replace "+" "_" | trunc 63 | trimSuffix "-" }}`, want: "crossplane-1.0_build"},
		{name: "indent", text: `{{ "a: 1\nb: 2" | indent 2 }}`, want: "  a: 1\n  b: 2"},
		{name: "indent 0", text: `{{ "a\nb" | indent 0 }}`, want: "a\nb"},
		{name: "nindent", text: `{{ "a: 1\nb: 2" | nindent 4 }}`, want: "\n    a: 1\n    b: 2"},
		{name: "quote string", text: `{{ .str | quote }}`, want: `"crossplane"`},
		{name: "quote number", text: `{{ .num | quote }}`, want: `"3"`},
		{name: "quote escapes", text: `{{ "a\"b" | quote }}`, want: `"a\"b"`},
		{name: "quote nil left out", text: `{{ quote .missing }}`, want: ``},
		{name: "quote several", text: `{{ quote "a" .missing "b" }}`, want: `"a" "b"`},
		{name: "toYaml map sorted, no final newline", text: `{{ toYaml .labels }}`, want: "a: \"1\"\nb: \"2\""},
		{name: "toYaml empty map", text: `{{ toYaml .emptyMap }}`, want: "{}"},
		{name: "toYaml list", text: `{{ toYaml .list }}`, want: "- a"},
		{name: "toYaml nindent", text: `labels:{{ toYaml .labels | nindent 2 }}`, want: "labels:\n  a: \"1\"\n  b: \"2\""},
		{name: "include", text: `{{ include "known" .str | quote }}`, want: `"known(crossplane)"`},
		{name: "include error", text: `{{ include "other" . }}`, wantErr: "no template other"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tmpl, err := template.New(c.name).Option("missingkey=zero").Funcs(chartFuncs(include)).Parse(c.text)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			err = tmpl.Execute(&b, values)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Errorf("%s: %v, want an error with %q", c.text, err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", c.text, err)
			}
			if got := b.String(); got != c.want {
				t.Errorf("%s = %q, want %q", c.text, got, c.want)
			}
		})
	}
}

func TestIsEmpty(t *testing.T) {
	for _, c := range []struct {
		v    any
		want bool
	}{
		{nil, true},
		{"", true},
		{"x", false},
		{false, true},
		{true, false},
		{0, true},
		{1, false},
		{int64(0), true},
		{int64(-1), false},
		{float64(0), true},
		{0.5, false},
		{map[string]any{}, true},
		{map[string]any(nil), true},
		{map[string]any{"k": nil}, false},
		{[]any{}, true},
		{[]any(nil), true},
		{[]any{nil}, false},
	} {
		if got := isEmpty(c.v); got != c.want {
			t.Errorf("isEmpty(%#v) = %t, want %t", c.v, got, c.want)
		}
	}
}

// role is a ClusterRole named name with these rules (YAML, as a file has
// them).
func role(t *testing.T, name, rules string) *unstructured.Unstructured {
	t.Helper()
	objs, err := kube.DecodeObjects([]byte("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: " + name + "\n" + rules))
	if err != nil || len(objs) != 1 {
		t.Fatalf("role %s: %v (%d objects)", name, err, len(objs))
	}
	return objs[0]
}

func TestRuleAccesses(t *testing.T) {
	acc := func(ns, group, resource, verb string) kube.Access {
		return kube.Access{Namespace: ns, Group: group, Resource: resource, Verb: verb}
	}
	for _, c := range []struct {
		name, rules, ns string
		want            []kube.Access
		wantErr         string
	}{
		{
			name:  "one of each",
			rules: "rules:\n- apiGroups: [apps]\n  resources: [statefulsets]\n  verbs: [get]\n",
			want:  []kube.Access{acc("", "apps", "statefulsets", "get")},
		},
		{
			name:  "groups × resources × verbs, in that order, the namespace carried",
			rules: "rules:\n- apiGroups: [\"\", batch]\n  resources: [jobs, pods]\n  verbs: [get, delete]\n",
			ns:    "team-a",
			want: []kube.Access{
				acc("team-a", "", "jobs", "get"), acc("team-a", "", "jobs", "delete"),
				acc("team-a", "", "pods", "get"), acc("team-a", "", "pods", "delete"),
				acc("team-a", "batch", "jobs", "get"), acc("team-a", "batch", "jobs", "delete"),
				acc("team-a", "batch", "pods", "get"), acc("team-a", "batch", "pods", "delete"),
			},
		},
		{
			name:  "rules one after the other",
			rules: "rules:\n- apiGroups: [policy]\n  resources: [poddisruptionbudgets]\n  verbs: [patch]\n- apiGroups: [\"\"]\n  resources: [secrets]\n  verbs: [list]\n",
			want:  []kube.Access{acc("", "policy", "poddisruptionbudgets", "patch"), acc("", "", "secrets", "list")},
		},
		{
			name:  "wildcards kept as they are, not expanded",
			rules: "rules:\n- apiGroups: [\"*\"]\n  resources: [\"*\"]\n  verbs: [\"*\"]\n",
			ns:    "ns",
			want:  []kube.Access{acc("ns", "*", "*", "*")},
		},
		{
			name:  "a subresource as its rule names it",
			rules: "rules:\n- apiGroups: [apps]\n  resources: [deployments/scale]\n  verbs: [update]\n",
			want:  []kube.Access{acc("", "apps", "deployments/scale", "update")},
		},
		{
			name:  "a non-resource rule grants no resource access",
			rules: "rules:\n- nonResourceURLs: [/healthz]\n  verbs: [get]\n- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [get]\n",
			want:  []kube.Access{acc("", "", "pods", "get")},
		},
		{
			name:    "only a non-resource rule",
			rules:   "rules:\n- nonResourceURLs: [/healthz]\n  verbs: [get]\n",
			wantErr: "ClusterRole r grants nothing",
		},
		{
			name:    "a rule without verbs",
			rules:   "rules:\n- apiGroups: [apps]\n  resources: [deployments]\n",
			wantErr: "ClusterRole r grants nothing",
		},
		{
			name:    "no rules: an aggregating ClusterRole",
			rules:   "aggregationRule:\n  clusterRoleSelectors:\n  - matchLabels:\n      x: \"true\"\n",
			wantErr: "ClusterRole r grants nothing",
		},
		{
			name:    "empty rules",
			rules:   "rules: []\n",
			wantErr: "ClusterRole r grants nothing",
		},
		{
			name:    "a rule that is not an object",
			rules:   "rules:\n- get pods\n",
			wantErr: "ClusterRole r: a rule is not an object",
		},
		{
			name:    "rules not a list",
			rules:   "rules: everything\n",
			wantErr: ".rules accessor error",
		},
		{
			name:    "verbs not strings",
			rules:   "rules:\n- apiGroups: [apps]\n  resources: [deployments]\n  verbs: [1, 2]\n",
			wantErr: "ClusterRole r grants nothing",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := RuleAccesses(role(t, "r", c.rules), c.ns)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Errorf("RuleAccesses = %v, %v; want an error with %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("RuleAccesses (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRuleAccessesProjectRole: the project's ClusterRole, as the suite
// reads it before waiting for core to be allowed all it grants.
func TestRuleAccessesProjectRole(t *testing.T) {
	r, err := kube.ReadObject(filepath.Join("..", "..", "..", "example", "rbac.yaml"))
	if err != nil {
		t.Skipf("no example/rbac.yaml: %v", err)
	}
	as, err := RuleAccesses(r, "")
	if err != nil {
		t.Fatal(err)
	}
	want := kube.Access{Group: "apps", Resource: "statefulsets", Verb: "create"}
	seen := map[kube.Access]bool{}
	for _, a := range as {
		if seen[a] {
			t.Errorf("%s listed twice", kube.AccessString(a))
		}
		seen[a] = true
	}
	if !seen[want] {
		t.Errorf("RuleAccesses of %s lacks %s: %v", r.GetName(), kube.AccessString(want), as)
	}
}

func TestWriteFiles(t *testing.T) {
	data := map[string][]byte{"tls.crt": []byte("CRT"), "tls.key": []byte("KEY"), "ca.crt": []byte("CA"), "empty": {}, "nil": nil}
	for _, c := range []struct {
		name    string
		keys    []string
		wantErr string
	}{
		{name: "all present", keys: []string{"tls.crt", "tls.key", "ca.crt"}},
		{name: "no keys", keys: nil},
		{name: "a missing key", keys: []string{"tls.crt", "tls.pem"}, wantErr: "no tls.pem"},
		{name: "an empty value", keys: []string{"empty"}, wantErr: "no empty"},
		{name: "a nil value", keys: []string{"nil", "tls.crt"}, wantErr: "no nil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "a", "b") // made, parents too
			err := writeFiles(dir, data, c.keys...)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Errorf("writeFiles = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if perm := fi.Mode().Perm(); perm&0o077 != 0 {
				t.Errorf("folder mode %v, want none for group and others", perm)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != len(c.keys) {
				t.Errorf("%d files written, want %d", len(entries), len(c.keys))
			}
			for _, k := range c.keys {
				path := filepath.Join(dir, k)
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if string(b) != string(data[k]) {
					t.Errorf("%s = %q, want %q", k, b, data[k])
				}
				fi, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if perm := fi.Mode().Perm(); perm != 0o600 {
					t.Errorf("%s mode %v, want 0600", k, perm)
				}
			}
		})
	}
}

func TestIsDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "none"), dangling); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		want bool
	}{
		{dir, true},
		{file, false},
		{filepath.Join(dir, "none"), false},
		{filepath.Join(file, "below"), false},
		{link, true},
		{dangling, false},
		{"", false},
	} {
		if got := isDir(c.path); got != c.want {
			t.Errorf("isDir(%q) = %t, want %t", c.path, got, c.want)
		}
	}
}

func TestToUnstructuredImageConfig(t *testing.T) {
	tm := metav1.TypeMeta{APIVersion: gvkImageConfig.GroupVersion().String(), Kind: gvkImageConfig.Kind}
	for _, c := range []struct {
		name string
		ic   *imageConfig
		want map[string]any
	}{
		{
			name: "with a rewrite",
			ic: &imageConfig{TypeMeta: tm, ObjectMeta: metav1.ObjectMeta{Name: "e2e-mirror"}, Spec: imageConfigSpec{
				MatchImages:  []imageMatch{{Type: "Prefix", Prefix: "xpkg.example.test"}},
				RewriteImage: &imageRewrite{Prefix: "127.0.0.1:5000/"},
			}},
			want: map[string]any{
				"matchImages":  []any{map[string]any{"type": "Prefix", "prefix": "xpkg.example.test"}},
				"rewriteImage": map[string]any{"prefix": "127.0.0.1:5000/"},
			},
		},
		{
			name: "no rewrite, no type",
			ic: &imageConfig{TypeMeta: tm, ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Spec: imageConfigSpec{
				MatchImages: []imageMatch{{Prefix: "a.test"}, {Prefix: "b.test"}},
			}},
			want: map[string]any{
				"matchImages": []any{map[string]any{"prefix": "a.test"}, map[string]any{"prefix": "b.test"}},
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			u, err := toUnstructured(c.ic)
			if err != nil {
				t.Fatal(err)
			}
			if got := u.GetAPIVersion(); got != "pkg.crossplane.io/v1beta1" {
				t.Errorf("apiVersion %q", got)
			}
			if got := u.GetKind(); got != "ImageConfig" {
				t.Errorf("kind %q", got)
			}
			if u.GetName() != c.ic.Name {
				t.Errorf("name %q, want %q", u.GetName(), c.ic.Name)
			}
			if u.GroupVersionKind() != gvkImageConfig {
				t.Errorf("GVK %v, want %v", u.GroupVersionKind(), gvkImageConfig)
			}
			if diff := cmp.Diff(c.want, u.Object["spec"]); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCoreModuleNoVersion: a core binary whose name (or whose link's
// target's name) carries no version is refused before go is run.
func TestCoreModuleNoVersion(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, target string // target: the file name is a link to it
	}{
		{name: "crossplane-core"},
		{name: "crossplane"},
		{name: "crossplane-core-latest"},
		{name: "crossplane-core-2.3.4"},
		{name: "crossplane-core", target: "crossplane-core-dev"},
	} {
		t.Run(c.name+"→"+c.target, func(t *testing.T) {
			sub := t.TempDir()
			bin := filepath.Join(sub, c.name)
			if c.target != "" {
				if err := os.WriteFile(filepath.Join(sub, c.target), nil, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(c.target, bin); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(bin, nil, 0o700); err != nil {
				t.Fatal(err)
			}
			logs := filepath.Join(dir, "logs") // absent: go would fail to log
			_, err := coreModule(context.Background(), logs, bin)
			if err == nil || !strings.Contains(err.Error(), "cannot tell the version of "+bin) {
				t.Errorf("coreModule(%s) = %v, want cannot tell the version", bin, err)
			}
		})
	}
}

// TestCoreModule: a link named as hack/tools.sh makes it, to the binary of
// chartVersion, finds the module renderChartRBAC reads.
func TestCoreModule(t *testing.T) {
	want := moduleDir(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "crossplane-core")
	if err := os.WriteFile(filepath.Join(dir, "crossplane-core-"+chartVersion), nil, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("crossplane-core-"+chartVersion, bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got, err := coreModule(ctx, dir, bin)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("coreModule = %s, want %s", got, want)
	}
}
