package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// podTemplates returns every pod template of a response's desired resources
// (podTemplateOf).
func podTemplates(t *testing.T, rsp *fnv1.RunFunctionResponse) map[string]corev1.PodTemplateSpec {
	t.Helper()
	out := map[string]corev1.PodTemplateSpec{}
	for name, r := range rsp.GetDesired().GetResources() {
		obj, err := decodeTyped(r.GetResource())
		if err != nil {
			t.Fatalf("desired composed resource %q: %v", name, err)
		}
		if pt := podTemplateOf(obj); pt != nil {
			out[name] = *pt
		}
	}
	return out
}

// TestRestrictedPodSecurity checks every pod template of every example with
// the Pod Security Standard's own policy code, at the restricted level.
func TestRestrictedPodSecurity(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	templates := 0
	for _, ex := range examples(t) {
		req := xrRequest(readYAMLStruct(t, ex.xr), compositionInput(t, ex.composition))
		for name, pt := range podTemplates(t, runTest(t, req)) {
			templates++
			res := policy.AggregateCheckResults(eval.EvaluatePod(lv, &pt.ObjectMeta, &pt.Spec))
			if !res.Allowed {
				t.Errorf("%s/%s violates the restricted Pod Security Standard: %s", ex.name, name, res.ForbiddenReason())
			}
		}
	}
	// The examples include backups and a restore: all three pod kinds.
	if templates < len(examples(t))+2 {
		t.Errorf("checked only %d pod templates", templates)
	}
}

// TestPodSecurityCheckCanFail proves the check above is not vacuous.
func TestPodSecurityCheckCanFail(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req := xrRequest(readYAMLStruct(t, "example/xr.yaml"), nil)
	pt := podTemplates(t, runTest(t, req))["statefulset"]
	pt.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
	res := policy.AggregateCheckResults(eval.EvaluatePod(psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}, &pt.ObjectMeta, &pt.Spec))
	if res.Allowed {
		t.Fatal("a container allowing privilege escalation passed the restricted check")
	}
}
