package main

import (
	"sort"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"
)

// goTemplatingRequest is req for function-go-templating, the peer issue 26
// compares the first reconcile with: an inline template that composes the
// very resources this function composes for req (its desired composed
// resources, as YAML, the XR's name templated wherever it stands), so both
// functions parse one XR and emit the same stack. Not counted for the peer:
// the XR's status and conditions this function also computes. The peer is
// not served by the Go module proxy this project builds from, so the load
// tool runs it only where it was built by hand (docs/performance.md).
func goTemplatingRequest(t testing.TB, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionRequest {
	t.Helper()
	rsp := runTest(t, req)
	name := req.GetObserved().GetComposite().GetResource().GetFields()["metadata"].GetStructValue().GetFields()["name"].GetStringValue()
	names := make([]string, 0, len(rsp.GetDesired().GetResources()))
	for n := range rsp.GetDesired().GetResources() {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("{{- $xr := .observed.composite.resource }}\n")
	for _, n := range names {
		obj := rsp.GetDesired().GetResources()[n].GetResource().AsMap()
		meta, _ := obj["metadata"].(map[string]any)
		ann, _ := meta["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
		}
		ann["gotemplating.fn.crossplane.io/composition-resource-name"] = n
		meta["annotations"] = ann
		y, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(y), "{{", `{{"{{"}}`)
		text = strings.ReplaceAll(text, name, "{{ $xr.metadata.name }}")
		b.WriteString("---\n" + text)
	}
	input, err := structpb.NewStruct(map[string]any{
		"apiVersion": "gotemplating.fn.crossplane.io/v1beta1",
		"kind":       "GoTemplate",
		"source":     "Inline",
		"inline":     map[string]any{"template": b.String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := proto.CloneOf(req)
	out.Input = input
	return out
}
