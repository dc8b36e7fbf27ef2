//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/example/function-database/e2e/internal/cluster"
	"github.com/example/function-database/e2e/internal/kube"
)

// appConnects runs example/app.yaml, the README's app, next to Database db
// in namespace ns on the real node: the manifest as users get it, with only
// its namespace and its image (the PostgreSQL image built for the node)
// changed. The app must turn Ready (its readiness probe needs a recent
// successful write) and its heartbeat rows must reach the database and keep
// coming, read back by another client with the same credentials.
//
// db must be the Database the manifest names (orders): the test refuses to
// rewrite the Secret references, which are what it checks. It removes the
// app when it ends, so later scenarios see no extra client.
func (s *suite) appConnects(t *testing.T, ns, db string) {
	t.Helper()
	objs, err := kube.ReadObjects(s.example("app.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var dep *appsv1.Deployment
	for _, o := range objs {
		o.SetNamespace(ns)
		if o.GetKind() != "Deployment" {
			continue
		}
		if dep != nil {
			t.Fatalf("example/app.yaml has two Deployments")
		}
		// Edited as a map, so that nothing but the images changes (a trip
		// through the typed struct would add its zero values).
		for _, field := range []string{"initContainers", "containers"} {
			path := []string{"spec", "template", "spec", field}
			cs, found, err := unstructured.NestedSlice(o.Object, path...)
			if err != nil {
				t.Fatal(err)
			}
			if !found {
				continue
			}
			for _, c := range cs {
				c.(map[string]any)["image"] = cluster.PostgresImage
			}
			if err := unstructured.SetNestedSlice(o.Object, cs, path...); err != nil {
				t.Fatal(err)
			}
		}
		dep = &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, dep); err != nil {
			t.Fatalf("example/app.yaml's Deployment: %v", err)
		}
		spec := &dep.Spec.Template.Spec
		for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
			for _, e := range c.Env {
				if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && r.SecretKeyRef.Name != db+"-credentials" {
					t.Fatalf("example/app.yaml's %s reads Secret %s, not Database %s's %s-credentials", c.Name, r.SecretKeyRef.Name, db, db)
				}
			}
		}
	}
	if dep == nil {
		t.Fatalf("example/app.yaml has no Deployment")
	}
	for _, o := range objs {
		if _, err := s.k.Apply(context.Background(), o); err != nil {
			t.Fatalf("apply %s %s from example/app.yaml: %v", o.GetKind(), o.GetName(), err)
		}
		t.Logf("applied %s %s/%s", o.GetKind(), ns, o.GetName())
	}
	t.Cleanup(func() {
		for _, o := range objs {
			_ = s.k.Delete(context.Background(), o.GroupVersionKind(), ns, o.GetName())
		}
		_ = s.k.CS.CoreV1().Pods(ns).Delete(context.Background(), "app-reader", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
		// Deleting the Deployment only starts its pods' end: one still
		// running writes heartbeat rows into the data later scenarios
		// compare (seen: DeleteRetainRecreate's checksums). Wait it out.
		sel := metav1.FormatLabelSelector(dep.Spec.Selector)
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
			pods, err := s.k.CS.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
			if err == nil && len(pods.Items) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("the app's pods still there 2m after its Deployment was deleted: %v", err)
				return
			}
		}
	})

	selector := metav1.FormatLabelSelector(dep.Spec.Selector)
	appPods := func() ([]corev1.Pod, string) {
		pods, err := s.k.CS.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return nil, err.Error()
		}
		var st []string
		for _, p := range pods.Items {
			st = append(st, fmt.Sprintf("%s %s ready=%v node=%q %s", p.Name, p.Status.Phase, podReady(&p), p.Spec.NodeName, podWaiting(&p)))
		}
		return pods.Items, strings.Join(st, ", ")
	}
	eventually(t, realReady, "Deployment "+ns+"/"+dep.Name+" available", func() (bool, string) {
		d, err := s.k.CS.AppsV1().Deployments(ns).Get(context.Background(), dep.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		_, st := appPods()
		want := ptrInt(d.Spec.Replicas)
		return d.Status.ObservedGeneration == d.Generation && d.Status.AvailableReplicas == want && d.Status.UpdatedReplicas == want,
			fmt.Sprintf("available %d/%d; pods: %s", d.Status.AvailableReplicas, want, st)
	})
	pods, st := appPods()
	if len(pods) != 1 {
		t.Fatalf("want one app pod, found: %s", st)
	}
	pod := pods[0]
	if pod.Spec.NodeName != cluster.RealNodeName {
		t.Fatalf("app pod %s ran on %q, not the real node: the check would prove nothing", pod.Name, pod.Spec.NodeName)
	}
	t.Logf("app pod %s Ready: its writes succeed", pod.Name)

	// Read back with another pod holding the same credentials.
	s.clientPod(t, ns, "app-reader", db)
	count := "SELECT count(*) FROM heartbeat WHERE pod = '" + pod.Name + "'"
	var first int
	eventually(t, time.Minute, "heartbeat rows of "+pod.Name, func() (bool, string) {
		out, err := s.sql(ns, "app-reader", "", count)
		if err != nil {
			return false, err.Error()
		}
		first, err = strconv.Atoi(out)
		return err == nil && first > 0, "count " + out
	})
	eventually(t, time.Minute, "more heartbeat rows (the app keeps writing)", func() (bool, string) {
		out, err := s.sql(ns, "app-reader", "", count)
		n, _ := strconv.Atoi(out)
		return err == nil && n > first, fmt.Sprintf("count %s (first %d) %v", out, first, err)
	})
	// The app's init container made the table as the app role: the Secret
	// holds the app's credentials, not the superuser's.
	user := s.secretKey(t, ns, db+"-credentials", "username")
	if owner := s.mustSQL(t, ns, "app-reader", "", "SELECT tableowner FROM pg_tables WHERE tablename = 'heartbeat'"); owner != user {
		t.Errorf("table heartbeat is owned by %q, want the app role %q", owner, user)
	}
}
