package main

import (
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

func TestLegacyClaim(t *testing.T) {
	rsp := runTest(t, xrRequest(readYAMLStruct(t, "example/legacy/xr.yaml"), nil))
	if len(rsp.GetResults()) != 0 {
		t.Fatalf("unexpected results: %v", rsp.GetResults())
	}
	for name, r := range rsp.Desired.Resources {
		md := r.GetResource().Fields["metadata"].GetStructValue().Fields
		if ns := md["namespace"].GetStringValue(); ns != "warehouse" {
			t.Errorf("%s: namespace %q, want the claim's namespace warehouse", name, ns)
		}
		if n := md["name"].GetStringValue(); !strings.HasPrefix(n, "inventory") || strings.Contains(n, "8k2xq") {
			t.Errorf("%s: name %q, want it named after the claim", name, n)
		}
	}
	cd := rsp.Desired.Composite.GetConnectionDetails()
	if string(cd["username"]) != "inventory" || len(cd["password"]) == 0 || !strings.HasPrefix(string(cd["uri"]), "postgresql://inventory:") {
		t.Errorf("legacy connection details: %q", cd)
	}
}

// TestBadInputKeepsEarlierSteps: a Fatal result still passes through the
// desired state of earlier pipeline steps untouched (Crossplane discards the
// response anyway, but a function never drops what it did not make).
func TestBadInputKeepsEarlierSteps(t *testing.T) {
	other := &fnv1.Resource{Resource: yamlStruct(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}")}
	req := &fnv1.RunFunctionRequest{
		Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: yamlStruct(t, "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: orders, namespace: shop}\nspec: {version: \"12\", size: small}")}},
		Desired:  &fnv1.State{Resources: map[string]*fnv1.Resource{"other": other}},
	}
	rsp := runTest(t, req)
	if rsp.GetResults()[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
		t.Fatalf("want Fatal, got %v", rsp.GetResults())
	}
	if _, ok := rsp.GetDesired().GetResources()["other"]; !ok {
		t.Errorf("the desired resource of an earlier step was dropped")
	}
}

// TestObservedUndecodable: an observed StatefulSet that does not decode is a
// Fatal: composing without knowing the running state could change volumes.
func TestObservedUndecodable(t *testing.T) {
	req := xrRequest(yamlStruct(t, validXR), nil)
	req.Observed.Resources = map[string]*fnv1.Resource{
		"statefulset": {Resource: yamlStruct(t, "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: orders}\nspec: {replicas: many}")},
	}
	assertFatal(t, "undecodable observed StatefulSet", runTest(t, req), `observed composed resource "statefulset"`)
}
