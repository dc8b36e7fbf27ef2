// Package kube is the e2e suite's client of the API server: typed clients for
// core kinds, dynamic clients for Crossplane kinds and XRs (found through
// discovery, refreshed when a kind appears), server-side apply as the suite's
// field manager, objects read from YAML files, status conditions, and
// SubjectAccessReviews for what a ServiceAccount may do.
package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
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

	"github.com/example/function-database/e2e/internal/cluster"
)

// FieldManager is the suite's field manager for server-side apply.
const FieldManager = "function-database-e2e"

// Client wraps the clients the suite uses: typed for core kinds, dynamic for
// Crossplane kinds and XRs (found through discovery, refreshed on a miss).
type Client struct {
	Config *rest.Config
	CS     kubernetes.Interface
	Dyn    dynamic.Interface

	mu     sync.Mutex
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// New makes the suite's clients for cfg around cs, the cluster's
// clientset for cfg (cluster.Cluster.Client, with the same QPS and burst):
// the suite and the cluster's provisioner and nodes share it, and its
// client-side rate limit.
func New(cfg *rest.Config, cs kubernetes.Interface) (*Client, error) {
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
	return &Client{Config: cfg, CS: cs, Dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// Mapping finds the resource of a kind, resetting discovery once on a miss
// (kinds appear while the suite runs: Crossplane's CRDs, the XRD's CRDs).
func (k *Client) Mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, err := k.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		k.mapper.Reset()
		m, err = k.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	return m, err
}

// WaitKind waits until the API server serves a kind.
func (k *Client) WaitKind(ctx context.Context, gvk schema.GroupVersionKind) error {
	for {
		_, err := k.Mapping(gvk)
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

// Resource returns the dynamic client for a kind in a namespace ("" for
// cluster-scoped kinds or all namespaces).
func (k *Client) Resource(gvk schema.GroupVersionKind, ns string) (dynamic.ResourceInterface, error) {
	m, err := k.Mapping(gvk)
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace && ns != "" {
		return k.Dyn.Resource(m.Resource).Namespace(ns), nil
	}
	return k.Dyn.Resource(m.Resource), nil
}

// ResourceFor is Resource for the kind and namespace of u.
func (k *Client) ResourceFor(u *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	return k.Resource(u.GroupVersionKind(), u.GetNamespace())
}

// Apply server-side applies an object (forcing ownership of its fields).
func (k *Client) Apply(ctx context.Context, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	c, err := k.ResourceFor(u)
	if err != nil {
		return nil, err
	}
	u = u.DeepCopy()
	u.SetManagedFields(nil)
	u.SetResourceVersion("")
	return c.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
}

// Create creates u as the suite's field manager.
func (k *Client) Create(ctx context.Context, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	c, err := k.ResourceFor(u)
	if err != nil {
		return nil, err
	}
	return c.Create(ctx, u, metav1.CreateOptions{FieldManager: FieldManager})
}

// Get reads one object of a kind.
func (k *Client) Get(ctx context.Context, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, error) {
	c, err := k.Resource(gvk, ns)
	if err != nil {
		return nil, err
	}
	return c.Get(ctx, name, metav1.GetOptions{})
}

// MergePatch applies a JSON merge patch given as YAML or JSON.
func (k *Client) MergePatch(ctx context.Context, gvk schema.GroupVersionKind, ns, name, patch string) (*unstructured.Unstructured, error) {
	c, err := k.Resource(gvk, ns)
	if err != nil {
		return nil, err
	}
	js, err := yaml.YAMLToJSON([]byte(patch))
	if err != nil {
		return nil, err
	}
	return c.Patch(ctx, name, types.MergePatchType, js, metav1.PatchOptions{FieldManager: FieldManager})
}

// Delete deletes one object of a kind; one already gone is no error.
func (k *Client) Delete(ctx context.Context, gvk schema.GroupVersionKind, ns, name string) error {
	c, err := k.Resource(gvk, ns)
	if err != nil {
		return err
	}
	err = c.Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// ReadObjects reads every YAML document of a file.
func ReadObjects(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return DecodeObjects(data)
}

// DecodeObjects decodes every YAML or JSON document of data, skipping empty
// ones.
func DecodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
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

// ReadObject reads a file that holds exactly one object.
func ReadObject(path string) (*unstructured.Unstructured, error) {
	objs, err := ReadObjects(path)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s: want one object, found %d", path, len(objs))
	}
	return objs[0], nil
}

// Condition is one entry of status.conditions.
type Condition struct {
	Type, Status, Reason, Message string
	ObservedGeneration            int64
	LastTransitionTime            time.Time
}

// Conditions reads u's status.conditions; entries that are not objects are
// skipped.
func Conditions(u *unstructured.Unstructured) []Condition {
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var out []Condition
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		c := Condition{}
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

// GetCondition is u's condition of type typ, or Unknown when it has none.
func GetCondition(u *unstructured.Unstructured, typ string) Condition {
	for _, c := range Conditions(u) {
		if c.Type == typ {
			return c
		}
	}
	return Condition{Type: typ, Status: "Unknown"}
}

// ConditionsString says u's conditions in one line, for logs and failures.
func ConditionsString(u *unstructured.Unstructured) string {
	var parts []string
	for _, c := range Conditions(u) {
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

// ToYAML is u as YAML without its managed fields, for logs.
func ToYAML(u *unstructured.Unstructured) string {
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

// GVK is the GroupVersionKind of an apiVersion and kind.
func GVK(apiVersion, kind string) schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(apiVersion, kind)
}

// ReadYAML decodes a YAML file into into.
func ReadYAML(path string, into any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Access is one request a ServiceAccount may or may not be allowed.
type Access = authorizationv1.ResourceAttributes

// AccessString says a in a line: verb resource.group in namespace.
func AccessString(a Access) string {
	r := a.Resource
	if a.Group != "" {
		r += "." + a.Group
	}
	if a.Namespace != "" {
		r += " in " + a.Namespace
	}
	return a.Verb + " " + r
}

// Allowed asks the API server's authorizer (a SubjectAccessReview, made as
// admin) whether the ServiceAccount of namespace ns may do a.
func (k *Client) Allowed(ctx context.Context, ns, sa string, a Access) (bool, error) {
	r, err := k.CS.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + ns + ":" + sa,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &a,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return r.Status.Allowed, nil
}

// WaitAllowed waits until the ServiceAccount sa of namespace ns is allowed every request (want)
// or none of them (!want). RBAC changes reach the authorizer within a moment,
// but an aggregated ClusterRole changes only when kube-controller-manager's
// aggregation controller has copied the rules of the roles it selects.
func (k *Client) WaitAllowed(ctx context.Context, timeout time.Duration, ns, sa string, want bool, as ...Access) error {
	var wrong []string
	err := cluster.Retry(ctx, timeout, func() error {
		wrong = wrong[:0]
		for _, a := range as {
			ok, err := k.Allowed(ctx, ns, sa, a)
			if err != nil {
				return err
			}
			if ok != want {
				wrong = append(wrong, AccessString(a))
			}
		}
		if len(wrong) > 0 {
			return fmt.Errorf("ServiceAccount %s/%s allowed=%v for: %s", ns, sa, !want, strings.Join(wrong, ", "))
		}
		return nil
	})
	return err
}
