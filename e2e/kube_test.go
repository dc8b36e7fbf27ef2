//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

const fieldManager = "function-database-e2e"

// kube wraps the clients the suite uses: typed for core kinds, dynamic for
// Crossplane kinds and XRs (found through discovery, refreshed on a miss).
type kube struct {
	cfg *rest.Config
	cs  kubernetes.Interface
	dyn dynamic.Interface

	mu     sync.Mutex
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// newKube makes the suite's clients for cfg around cs, the cluster's
// clientset for cfg (cluster.Cluster.Client, with the same QPS and burst):
// the suite and the cluster's provisioner and nodes share it, and its
// client-side rate limit.
func newKube(cfg *rest.Config, cs kubernetes.Interface) (*kube, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 200, 400
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &kube{cfg: cfg, cs: cs, dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// mapping finds the resource of a kind, resetting discovery once on a miss
// (kinds appear while the suite runs: Crossplane's CRDs, the XRD's CRDs).
func (k *kube) mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, err := k.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		k.mapper.Reset()
		m, err = k.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	return m, err
}

// waitKind waits until the API server serves a kind.
func (k *kube) waitKind(ctx context.Context, gvk schema.GroupVersionKind) error {
	for {
		_, err := k.mapping(gvk)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kind %s never served: %w", gvk, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// client returns the dynamic client for a kind in a namespace ("" for
// cluster-scoped kinds or all namespaces).
func (k *kube) client(gvk schema.GroupVersionKind, ns string) (dynamic.ResourceInterface, error) {
	m, err := k.mapping(gvk)
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace && ns != "" {
		return k.dyn.Resource(m.Resource).Namespace(ns), nil
	}
	return k.dyn.Resource(m.Resource), nil
}

func (k *kube) clientFor(u *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	return k.client(u.GroupVersionKind(), u.GetNamespace())
}

// apply server-side applies an object (forcing ownership of its fields).
func (k *kube) apply(ctx context.Context, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	c, err := k.clientFor(u)
	if err != nil {
		return nil, err
	}
	u = u.DeepCopy()
	u.SetManagedFields(nil)
	u.SetResourceVersion("")
	return c.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
}

func (k *kube) create(ctx context.Context, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	c, err := k.clientFor(u)
	if err != nil {
		return nil, err
	}
	return c.Create(ctx, u, metav1.CreateOptions{FieldManager: fieldManager})
}

func (k *kube) get(ctx context.Context, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, error) {
	c, err := k.client(gvk, ns)
	if err != nil {
		return nil, err
	}
	return c.Get(ctx, name, metav1.GetOptions{})
}

// mergePatch applies a JSON merge patch given as YAML or JSON.
func (k *kube) mergePatch(ctx context.Context, gvk schema.GroupVersionKind, ns, name, patch string) (*unstructured.Unstructured, error) {
	c, err := k.client(gvk, ns)
	if err != nil {
		return nil, err
	}
	js, err := yaml.YAMLToJSON([]byte(patch))
	if err != nil {
		return nil, err
	}
	return c.Patch(ctx, name, types.MergePatchType, js, metav1.PatchOptions{FieldManager: fieldManager})
}

func (k *kube) delete(ctx context.Context, gvk schema.GroupVersionKind, ns, name string) error {
	c, err := k.client(gvk, ns)
	if err != nil {
		return err
	}
	err = c.Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// readObjects reads every YAML document of a file.
func readObjects(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return decodeObjects(data)
}

func decodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var m map[string]any
		if err := r.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

func readObject(path string) (*unstructured.Unstructured, error) {
	objs, err := readObjects(path)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s: want one object, found %d", path, len(objs))
	}
	return objs[0], nil
}

// condition is one entry of status.conditions.
type condition struct {
	Type, Status, Reason, Message string
	ObservedGeneration            int64
	LastTransitionTime            time.Time
}

func conditions(u *unstructured.Unstructured) []condition {
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var out []condition
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		c := condition{}
		c.Type, _ = m["type"].(string)
		c.Status, _ = m["status"].(string)
		c.Reason, _ = m["reason"].(string)
		c.Message, _ = m["message"].(string)
		switch g := m["observedGeneration"].(type) {
		case int64:
			c.ObservedGeneration = g
		case float64:
			c.ObservedGeneration = int64(g)
		}
		if s, ok := m["lastTransitionTime"].(string); ok {
			c.LastTransitionTime, _ = time.Parse(time.RFC3339, s)
		}
		out = append(out, c)
	}
	return out
}

func getCondition(u *unstructured.Unstructured, typ string) condition {
	for _, c := range conditions(u) {
		if c.Type == typ {
			return c
		}
	}
	return condition{Type: typ, Status: "Unknown"}
}

func conditionsString(u *unstructured.Unstructured) string {
	var parts []string
	for _, c := range conditions(u) {
		s := fmt.Sprintf("%s=%s", c.Type, c.Status)
		if c.Reason != "" {
			s += " (" + c.Reason + ")"
		}
		if c.Message != "" {
			s += ": " + c.Message
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "no conditions"
	}
	return strings.Join(parts, "; ")
}

// eventually polls check until it reports done, failing the test after
// timeout with what and the last state check described.
func eventually(t testing.TB, timeout time.Duration, what string, check func() (bool, string)) {
	t.Helper()
	eventuallyExplained(t, timeout, what, check, nil)
}

// eventuallyExplained is eventually, and on a timeout it adds what explain
// says: a diagnosis too slow or too noisy to run on every poll.
func eventuallyExplained(t testing.TB, timeout time.Duration, what string, check func() (bool, string), explain func() string) {
	t.Helper()
	t0 := time.Now()
	if !poll(timeout, check) {
		_, last := check()
		if explain != nil {
			last += "; " + explain()
		}
		t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, last)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Logf("waited %s for %s", d.Round(100*time.Millisecond), what)
	}
}

// poll polls check every 250ms until done or timeout; reports whether done.
func poll(timeout time.Duration, check func() (bool, string)) bool {
	deadline := time.Now().Add(timeout)
	for {
		if ok, _ := check(); ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func toYAML(u *unstructured.Unstructured) string {
	if u == nil {
		return "<nil>"
	}
	c := u.DeepCopy()
	c.SetManagedFields(nil)
	b, err := yaml.Marshal(c.Object)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

func gvk(apiVersion, kind string) schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(apiVersion, kind)
}
