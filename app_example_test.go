package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

// appExample reads example/app.yaml strictly: a misspelt field fails here
// rather than being dropped by a lenient decoder (the API server's apply
// refuses it on a cluster).
func appExample(t *testing.T) *appsv1.Deployment {
	t.Helper()
	b, err := os.ReadFile("example/app.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := &appsv1.Deployment{}
	if err := yaml.UnmarshalStrict(b, d); err != nil {
		t.Fatalf("example/app.yaml: %v", err)
	}
	return d
}

// composedForExample is the credentials Secret and NetworkPolicy the
// function composes for example/xr.yaml.
func composedForExample(t *testing.T) (*corev1.Secret, *networkingv1.NetworkPolicy) {
	t.Helper()
	rsp := runTest(t, xrRequest(readYAMLStruct(t, "example/xr.yaml"), nil))
	res := rsp.GetDesired().GetResources()
	return decodeInto[corev1.Secret](t, res[string(rnCredentials)].GetResource()),
		decodeInto[networkingv1.NetworkPolicy](t, res[string(rnNetworkPolicy)].GetResource())
}

// appProblems lists what keeps app from working with the Database whose
// credentials Secret and NetworkPolicy are given.
func appProblems(app *appsv1.Deployment, creds *corev1.Secret, np *networkingv1.NetworkPolicy) []string {
	var out []string
	if app.Namespace != creds.Namespace {
		out = append(out, fmt.Sprintf("the app is in namespace %q, the Database's Secret in %q", app.Namespace, creds.Namespace))
	}
	spec := &app.Spec.Template.Spec
	var refs []string
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, e := range c.Env {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				continue
			}
			r := e.ValueFrom.SecretKeyRef
			refs = append(refs, r.Name+"/"+r.Key)
			if r.Name != creds.Name {
				out = append(out, fmt.Sprintf("container %s reads Secret %s; the Database's credentials are %s", c.Name, r.Name, creds.Name))
			} else if _, ok := creds.Data[r.Key]; !ok {
				out = append(out, fmt.Sprintf("container %s reads key %q, which %s does not have", c.Name, r.Key, creds.Name))
			}
		}
	}
	for _, key := range []string{keyPassword, keyURI} {
		if !slices.Contains(refs, creds.Name+"/"+key) {
			out = append(out, fmt.Sprintf("no container reads %s/%s by secretKeyRef (reads: %s)", creds.Name, key, strings.Join(refs, ", ")))
		}
	}

	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return append(out, err.Error())
	}
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	pt := app.Spec.Template
	if res := policy.AggregateCheckResults(eval.EvaluatePod(lv, &pt.ObjectMeta, &pt.Spec)); !res.Allowed {
		out = append(out, "violates the restricted Pod Security Standard: "+res.ForbiddenReason())
	}

	if !admits(np, app.Namespace, app.Spec.Template.Labels) {
		out = append(out, "the Database's NetworkPolicy does not admit the app's pods")
	}
	return out
}

// admits reports whether one of the policy's ingress peers matches a pod
// with these labels in namespace ns (same namespace as the policy: a peer
// with a pod selector alone; another namespace needs a namespace selector,
// which this check does not evaluate).
func admits(np *networkingv1.NetworkPolicy, ns string, podLabels map[string]string) bool {
	if ns != np.Namespace {
		return false
	}
	for _, rule := range np.Spec.Ingress {
		for _, peer := range rule.From {
			if peer.NamespaceSelector != nil || peer.PodSelector == nil {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			if err == nil && sel.Matches(k8slabels.Set(podLabels)) {
				return true
			}
		}
	}
	return false
}

// TestAppExample: example/app.yaml consumes the credentials Secret the
// function composes for example/xr.yaml, in its namespace, only by keys that
// Secret has, with the password by secretKeyRef and the uri key; it passes
// the restricted Pod Security Standard like the Database's pods, and the
// Database's NetworkPolicy admits it. (The real-node e2e, appConnects, runs
// it against PostgreSQL.)
func TestAppExample(t *testing.T) {
	creds, np := composedForExample(t)
	for _, p := range appProblems(appExample(t), creds, np) {
		t.Error("example/app.yaml: " + p)
	}
}

// TestAppExampleCheckCanFail: each kind of mistake is caught.
func TestAppExampleCheckCanFail(t *testing.T) {
	creds, np := composedForExample(t)
	for name, tc := range map[string]struct {
		mutate func(*appsv1.Deployment)
		want   string
	}{
		"WrongNamespace": {func(d *appsv1.Deployment) { d.Namespace = "elsewhere" }, "namespace"},
		"MissingKey": {func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Env[0].ValueFrom.SecretKeyRef.Key = "url"
		}, `reads key "url"`},
		"NoPasswordRef": {func(d *appsv1.Deployment) {
			for i := range d.Spec.Template.Spec.InitContainers {
				d.Spec.Template.Spec.InitContainers[i].Env = nil
			}
		}, "password by secretKeyRef"},
		"Privileged": {func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
		}, "restricted Pod Security"},
	} {
		t.Run(name, func(t *testing.T) {
			app := appExample(t)
			tc.mutate(app)
			got := strings.Join(appProblems(app, creds, np), "\n")
			if !strings.Contains(got, tc.want) {
				t.Errorf("problems %q, want one mentioning %q", got, tc.want)
			}
		})
	}
	// A policy that admits only other pods.
	strict := np.DeepCopy()
	strict.Spec.Ingress[0].From = []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "db-client"}}}}
	if got := strings.Join(appProblems(appExample(t), creds, strict), "\n"); !strings.Contains(got, "NetworkPolicy") {
		t.Errorf("a policy admitting only role=db-client: problems %q", got)
	}
}
