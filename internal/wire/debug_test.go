package wire

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// TestReadable: a pre-encoded resource is nil inside the process and, read
// through Readable, the Struct Crossplane receives; YAML renders it.
func TestReadable(t *testing.T) {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "orders-scripts", Namespace: "shop"},
		Data:       map[string]string{"initialized": "true"},
	}
	r, err := Resource("scripts", cm, fnv1.Ready_READY_TRUE)
	if err != nil {
		t.Fatal(err)
	}
	rsp := &fnv1.RunFunctionResponse{Desired: &fnv1.State{Resources: map[string]*fnv1.Resource{"scripts": r}}}
	if rsp.GetDesired().GetResources()["scripts"].GetResource() != nil {
		t.Fatal("a pre-encoded resource is readable inside the process: Readable's reason is gone")
	}

	got, err := Readable(rsp)
	if err != nil {
		t.Fatal(err)
	}
	s, err := structpb.NewStruct(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "orders-scripts", "namespace": "shop"},
		"data":     map[string]any{"initialized": "true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &fnv1.RunFunctionResponse{Desired: &fnv1.State{Resources: map[string]*fnv1.Resource{"scripts": {Resource: s, Ready: fnv1.Ready_READY_TRUE}}}}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("Readable (-want +got):\n%s", d)
	}

	y, err := YAML(rsp)
	if err != nil {
		t.Fatal(err)
	}
	wantYAML := `desired:
  resources:
    scripts:
      ready: READY_TRUE
      resource:
        apiVersion: v1
        data:
          initialized: "true"
        kind: ConfigMap
        metadata:
          name: orders-scripts
          namespace: shop
`
	if d := cmp.Diff(wantYAML, string(y)); d != "" {
		t.Errorf("YAML (-want +got):\n%s", d)
	}
}
