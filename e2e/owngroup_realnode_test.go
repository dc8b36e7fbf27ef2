//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/example/function-database/e2e/internal/kube"
)

// ownGroup is the API group TestOperate/OwnGroup moves the example's to.
const ownGroup = "platform.acme.io"

// ownGroupDatabase is TestOperate/OwnGroup: docs/install.md's "Your own API group"
// on a live control plane. The example's XRD and a real-node Composition
// are renamed to another group, as README says (the XRD's name and group,
// the Composition's compositeTypeRef); Crossplane establishes the XRD, its
// RBAC manager lets core manage the new kind, and a Database of that group
// comes up Ready on real pods, composed by the same function.
func (s *suite) ownGroupDatabase(t *testing.T, ns string) {
	ctx := context.Background()
	xrd, err := kube.ReadObject(s.example("xrd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	group, _, _ := unstructured.NestedString(xrd.Object, "spec", "group")
	xrd.SetName(strings.Replace(xrd.GetName(), "."+group, "."+ownGroup, 1))
	if err := unstructured.SetNestedField(xrd.Object, ownGroup, "spec", "group"); err != nil {
		t.Fatal(err)
	}
	comp, err := s.realComposition("database-real-own-group", nil)
	if err != nil {
		t.Fatal(err)
	}
	apiVersion, _, _ := unstructured.NestedString(comp.Object, "spec", "compositeTypeRef", "apiVersion")
	if err := unstructured.SetNestedField(comp.Object, strings.Replace(apiVersion, group+"/", ownGroup+"/", 1), "spec", "compositeTypeRef", "apiVersion"); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*unstructured.Unstructured{xrd, comp} {
		if _, err := s.k.Apply(ctx, o); err != nil {
			t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	t.Cleanup(func() {
		// Deleting the XRD deletes its CRD; the Database is gone by then.
		for _, o := range []*unstructured.Unstructured{comp, xrd} {
			if err := s.k.Delete(context.Background(), o.GroupVersionKind(), "", o.GetName()); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	})
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	if err := s.waitXRDs(wctx, xrd.GetName()); err != nil {
		t.Fatal(err)
	}
	t.Logf("XRD %s established, core may manage its kind, in %s", xrd.GetName(), time.Since(t0).Round(time.Second))

	u := realDatabase(t, ns, "acme", "small", nil)
	u.SetAPIVersion(strings.Replace(u.GetAPIVersion(), group+"/", ownGroup+"/", 1))
	if err := unstructured.SetNestedField(u.Object, comp.GetName(), "spec", "crossplane", "compositionRef", "name"); err != nil {
		t.Fatal(err)
	}
	d := s.create(t, u)
	defer s.removeDatabases(t, d)
	xr := s.waitRealReady(t, d)
	if got := str(xr, "status", "endpoint"); !strings.HasPrefix(got, "acme."+ns+".svc") {
		t.Errorf("status.endpoint = %q, want the Service acme in %s", got, ns)
	}
	// An app of the namespace connects with the Secret's uri.
	const client = "acme-client"
	s.clientPod(t, ns, client, "acme")
	defer func() {
		if err := s.k.CS.CoreV1().Pods(ns).Delete(context.Background(), client, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete pod %s: %v", client, err)
		}
	}()
	if got := s.mustSQL(t, ns, client, "", "SELECT current_database()"); got != "acme" {
		t.Errorf("SELECT current_database() through acme-credentials' uri: %q, want acme", got)
	}
}
