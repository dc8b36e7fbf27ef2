package crossplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/example/function-database/e2e/internal/kube"
	"github.com/example/function-database/e2e/internal/proc"
)

// Crossplane core and its RBAC manager run as the ServiceAccounts the Helm
// chart makes for their pods, with the chart's ClusterRoles: never as
// system:masters, so a kind the project's ClusterRole forgets fails here as
// it would in a cluster.
const (
	CoreSA = "crossplane"
	rbacSA = "rbac-manager"
	// The RBAC manager's --provider-clusterrole, as the chart passes it.
	providerClusterRole = "crossplane:allowed-provider-permissions"
	// Long enough for the longest suite (go test -timeout 40m); a pod's
	// projected token would be refreshed, ours need not be.
	tokenLifetime = 2 * time.Hour
)

// chartRBACTemplates are the templates of Crossplane's Helm chart that make
// the ServiceAccounts, ClusterRoles and ClusterRoleBindings of core and the
// RBAC manager. The rest of the chart is left out on purpose: its Deployments
// are the processes the suite runs itself, its Secrets are made by `core
// init`, its Service serves webhooks, which the suite turns off.
var chartRBACTemplates = []string{
	"serviceaccount.yaml",
	"clusterrole.yaml",
	"clusterrolebinding.yaml",
	"rbac-manager-serviceaccount.yaml",
	"rbac-manager-clusterrole.yaml",
	"rbac-manager-clusterrolebinding.yaml",
	"rbac-manager-allowed-provider-permissions.yaml",
	"rbac-manager-managed-clusterroles.yaml",
}

// renderChartRBAC renders chartRBACTemplates of the chart in moduleDir (the
// crossplane module of the core binary, so the roles match the binary) with
// the chart's default values, release "crossplane" in namespace. The
// templates use a handful of Helm's functions; chartFuncs has them, so this
// is the chart's own text, not a copy that could drift from it.
func renderChartRBAC(moduleDir, namespace string) ([]*unstructured.Unstructured, error) {
	chartDir := filepath.Join(moduleDir, "cluster", "charts", "crossplane")
	var values map[string]any
	if err := kube.ReadYAML(filepath.Join(chartDir, "values.yaml"), &values); err != nil {
		return nil, err
	}
	var chart struct {
		Name       string `json:"name"`
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := kube.ReadYAML(filepath.Join(chartDir, "Chart.yaml"), &chart); err != nil {
		return nil, err
	}
	data := map[string]any{
		"Values":  values,
		"Chart":   map[string]any{"Name": chart.Name, "Version": chart.Version, "AppVersion": chart.AppVersion},
		"Release": map[string]any{"Name": "crossplane", "Namespace": namespace, "Service": "Helm"},
	}

	var root *template.Template
	root = template.New("chart").Option("missingkey=zero").Funcs(chartFuncs(func(name string, data any) (string, error) {
		var b strings.Builder
		err := root.ExecuteTemplate(&b, name, data)
		return b.String(), err
	}))
	helpers, err := os.ReadFile(filepath.Join(chartDir, "templates", "_helpers.tpl"))
	if err != nil {
		return nil, err
	}
	if _, err := root.New("_helpers.tpl").Parse(string(helpers)); err != nil {
		return nil, fmt.Errorf("chart _helpers.tpl: %w", err)
	}
	var out []*unstructured.Unstructured
	for _, name := range chartRBACTemplates {
		text, err := os.ReadFile(filepath.Join(chartDir, "templates", name))
		if err != nil {
			return nil, err
		}
		t, err := root.New(name).Parse(string(text))
		if err != nil {
			return nil, fmt.Errorf("chart template %s: %w", name, err)
		}
		var b strings.Builder
		if err := t.Execute(&b, data); err != nil {
			return nil, fmt.Errorf("chart template %s: %w", name, err)
		}
		objs, err := kube.DecodeObjects([]byte(b.String()))
		if err != nil {
			return nil, fmt.Errorf("chart template %s rendered invalid YAML: %w\n%s", name, err, b.String())
		}
		for _, o := range objs {
			switch o.GetKind() {
			case "ServiceAccount", "ClusterRole", "ClusterRoleBinding":
			default:
				return nil, fmt.Errorf("chart template %s renders a %s: not an RBAC object; update chartRBACTemplates", name, o.GetKind())
			}
		}
		out = append(out, objs...)
	}
	return out, nil
}

// chartFuncs are the Helm (sprig) functions the chart's RBAC templates use,
// with sprig's argument order (the piped value last).
func chartFuncs(include func(string, any) (string, error)) template.FuncMap {
	indent := func(n int, s string) string {
		pad := strings.Repeat(" ", n)
		return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
	}
	return template.FuncMap{
		"include": include,
		"default": func(def any, given ...any) any {
			if len(given) == 0 || isEmpty(given[0]) {
				return def
			}
			return given[0]
		},
		"trunc": func(n int, s string) string {
			if len(s) > n {
				return s[:n]
			}
			return s
		},
		"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
		"replace":    func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
		"indent":     indent,
		"nindent":    func(n int, s string) string { return "\n" + indent(n, s) },
		"quote": func(args ...any) string {
			var out []string
			for _, a := range args {
				if a != nil {
					out = append(out, fmt.Sprintf("%q", fmt.Sprint(a)))
				}
			}
			return strings.Join(out, " ")
		},
		"toYaml": func(v any) (string, error) {
			b, err := yaml.Marshal(v)
			return strings.TrimSuffix(string(b), "\n"), err
		},
	}
}

// isEmpty is sprig's notion of an unset value, for `default`.
func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case bool:
		return !v
	case int:
		return v == 0
	case int64:
		return v == 0
	case float64: // numbers from YAML
		return v == 0
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}

// serviceAccountKubeconfig writes a kubeconfig whose identity is the
// ServiceAccount: a token from the TokenRequest API, as the kubelet projects
// into a pod.
func (x *Stack) serviceAccountKubeconfig(ctx context.Context, sa string) (string, error) {
	secs := int64(tokenLifetime / time.Second)
	tr, err := x.k.CS.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for ServiceAccount %s/%s: %w", Namespace, sa, err)
	}
	return x.cl.PKI.TokenKubeconfig(sa, x.cl.Host, tr.Status.Token)
}

// RuleAccesses lists every (group, resource, verb) a ClusterRole's rules
// grant, in namespace ns ("" for every namespace).
func RuleAccesses(role *unstructured.Unstructured, ns string) ([]kube.Access, error) {
	rules, _, err := unstructured.NestedSlice(role.Object, "rules")
	if err != nil {
		return nil, err
	}
	var out []kube.Access
	for _, r := range rules {
		m, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("ClusterRole %s: a rule is not an object", role.GetName())
		}
		groups, _, _ := unstructured.NestedStringSlice(m, "apiGroups")
		resources, _, _ := unstructured.NestedStringSlice(m, "resources")
		verbs, _, _ := unstructured.NestedStringSlice(m, "verbs")
		for _, g := range groups {
			for _, res := range resources {
				for _, v := range verbs {
					out = append(out, kube.Access{Namespace: ns, Group: g, Resource: res, Verb: v})
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("ClusterRole %s grants nothing", role.GetName())
	}
	return out, nil
}

// startRBACManager runs `rbac init` and `rbac start` as the chart's RBAC
// manager Deployment does (init container, then the manager), as the
// rbac-manager ServiceAccount. It makes the ClusterRoles of each XRD, among
// them the one that lets core manage the XR kind.
//
// The manager has no flag for its metrics listener: controller-runtime's
// default, :8080 on every interface, stays on while it runs; a second suite
// on the machine at the same time fails to start it (its log says so).
func (x *Stack) startRBACManager(ctx context.Context, dir, coreBin string) error {
	kcfg, err := x.serviceAccountKubeconfig(ctx, rbacSA)
	if err != nil {
		return err
	}
	env := []string{"KUBECONFIG=" + kcfg}
	initLog := filepath.Join(dir, "logs", "rbac-manager-init.log")
	ictx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := proc.Run(ictx, initLog, x.dir, env, coreBin, "rbac", "init"); err != nil {
		return fmt.Errorf("crossplane rbac init: %w\n%s", err, proc.TailFile(initLog, 20))
	}
	x.RBAC = proc.New(dir, "rbac-manager", coreBin, "rbac", "start",
		"--provider-clusterrole="+providerClusterRole,
		"--debug",
	)
	x.RBAC.Env = env
	return x.RBAC.Start()
}
