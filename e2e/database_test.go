//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/example/function-database/e2e/internal/cluster"
	"github.com/example/function-database/e2e/internal/crossplane"
	"github.com/example/function-database/e2e/internal/kube"
	"github.com/example/function-database/e2e/internal/proc"
)

// Bounds of the waits. Crossplane reconciles an XR within a second or two
// of a change here; the garbage collector needs up to ~30 s to discover a
// kind created after it started, so deletions get a minute.
const (
	syncWait   = 60 * time.Second
	readyWait  = 90 * time.Second
	deleteWait = 60 * time.Second
	churnWatch = 60 * time.Second
)

var (
	gvkSecret      = kube.GVK("v1", "Secret")
	gvkConfigMap   = kube.GVK("v1", "ConfigMap")
	gvkService     = kube.GVK("v1", "Service")
	gvkPVC         = kube.GVK("v1", "PersistentVolumeClaim")
	gvkStatefulSet = kube.GVK("apps/v1", "StatefulSet")
	gvkPDB         = kube.GVK("policy/v1", "PodDisruptionBudget")
	gvkNetPol      = kube.GVK("networking.k8s.io/v1", "NetworkPolicy")
	gvkCronJob     = kube.GVK("batch/v1", "CronJob")
)

// obj names one composed object.
type obj struct {
	gvk  schema.GroupVersionKind
	name string
}

func (o obj) String() string { return o.gvk.Kind + " " + o.name }

// composed lists the objects the function composes for Database n
// (notes/CONTRACT.md), given the replicas and whether backups are on.
func composed(n string, replicas int64, backup bool) []obj {
	out := []obj{
		{gvkSecret, n + "-credentials"},
		{gvkSecret, n + "-superuser"},
		{gvkConfigMap, n + "-scripts"},
		{gvkStatefulSet, n},
		{gvkService, n},
		{gvkService, n + "-hl"},
		// The read Service exists at every size (the primary alone with
		// one instance), so scaling never breaks clients of N-r.
		{gvkService, n + "-r"},
		{gvkNetPol, n},
	}
	if replicas > 1 {
		out = append(out, obj{gvkPDB, n})
	}
	if backup {
		out = append(out, obj{gvkCronJob, n + "-backup"})
	}
	return out
}

// database is one Database XR (or legacy claim) under test.
type database struct {
	gvk  schema.GroupVersionKind
	ns   string
	name string
}

func (d database) String() string { return d.gvk.Kind + " " + d.ns + "/" + d.name }

func (d database) get(t testing.TB) *unstructured.Unstructured {
	t.Helper()
	u, err := env.k.Get(context.Background(), d.gvk, d.ns, d.name)
	if err != nil {
		t.Fatalf("get %s: %v", d, err)
	}
	return u
}

func (d database) patch(t testing.TB, patch string) *unstructured.Unstructured {
	t.Helper()
	u, err := env.k.MergePatch(context.Background(), d.gvk, d.ns, d.name, patch)
	if err != nil {
		t.Fatalf("patch %s with %s: %v", d, patch, err)
	}
	t.Logf("patched %s: %s (generation %d)", d, strings.TrimSpace(patch), u.GetGeneration())
	return u
}

// exampleXR reads example/xr.yaml; mutate may rename it and change its spec.
func exampleXR(t testing.TB) *unstructured.Unstructured {
	t.Helper()
	u, err := kube.ReadObject(env.example("xr.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// newDatabase makes a Database from example/xr.yaml with another name and
// spec fields set (paths like "backup.enabled").
func newDatabase(t testing.TB, name string, set map[string]any) *unstructured.Unstructured {
	t.Helper()
	u := exampleXR(t)
	u.SetName(name)
	u.SetLabels(nil)
	u.SetAnnotations(nil)
	for path, v := range set {
		if err := unstructured.SetNestedField(u.Object, v, append([]string{"spec"}, strings.Split(path, ".")...)...); err != nil {
			t.Fatalf("set spec.%s: %v", path, err)
		}
	}
	return u
}

func (s *suite) create(t testing.TB, u *unstructured.Unstructured) database {
	t.Helper()
	if _, err := s.k.Create(context.Background(), u); err != nil {
		t.Fatalf("create %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	t.Logf("created %s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
	return database{gvk: u.GroupVersionKind(), ns: u.GetNamespace(), name: u.GetName()}
}

func (s *suite) getObj(ns string, o obj) (*unstructured.Unstructured, error) {
	return s.k.Get(context.Background(), o.gvk, ns, o.name)
}

// waitSynced waits until the Database is Synced=True for at least the given
// generation (conditions carry observedGeneration in Crossplane v2).
func (s *suite) waitSynced(t testing.TB, d database, generation int64) *unstructured.Unstructured {
	t.Helper()
	var u *unstructured.Unstructured
	eventually(t, syncWait, fmt.Sprintf("%s Synced at generation %d", d, generation), func() (bool, string) {
		var err error
		u, err = env.k.Get(context.Background(), d.gvk, d.ns, d.name)
		if err != nil {
			return false, err.Error()
		}
		c := kube.GetCondition(u, "Synced")
		state := fmt.Sprintf("generation %d; %s", u.GetGeneration(), kube.ConditionsString(u))
		if c.Status != "True" {
			return false, state
		}
		return c.ObservedGeneration == 0 || c.ObservedGeneration >= generation, state
	})
	if kube.GetCondition(u, "Synced").ObservedGeneration == 0 {
		// No observedGeneration to go by: give the reconcile a moment.
		time.Sleep(3 * time.Second)
		u = d.get(t)
	}
	return u
}

func (s *suite) waitReady(t testing.TB, d database) *unstructured.Unstructured {
	t.Helper()
	return s.waitReadyWithin(t, d, readyWait)
}

func (s *suite) waitReadyWithin(t testing.TB, d database, timeout time.Duration) *unstructured.Unstructured {
	t.Helper()
	var u *unstructured.Unstructured
	eventually(t, timeout, d.String()+" Ready", func() (bool, string) {
		var err error
		u, err = env.k.Get(context.Background(), d.gvk, d.ns, d.name)
		if err != nil {
			return false, err.Error()
		}
		return kube.GetCondition(u, "Ready").Status == "True", kube.ConditionsString(u) + "; " + s.podsState(d.ns, d.name)
	})
	return u
}

// waitExists waits until every object exists in ns.
func (s *suite) waitExists(t testing.TB, ns string, objs []obj) map[obj]*unstructured.Unstructured {
	t.Helper()
	found := map[obj]*unstructured.Unstructured{}
	eventually(t, syncWait, fmt.Sprintf("%d composed objects in %s", len(objs), ns), func() (bool, string) {
		var missing []string
		for _, o := range objs {
			u, err := s.getObj(ns, o)
			if err != nil {
				missing = append(missing, o.String())
				continue
			}
			found[o] = u
		}
		return len(missing) == 0, "missing: " + strings.Join(missing, ", ")
	})
	return found
}

// waitGone waits until none of objs exists in ns.
func (s *suite) waitGone(t testing.TB, ns string, objs []obj, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("%d objects gone from %s", len(objs), ns), func() (bool, string) {
		var left []string
		for _, o := range objs {
			_, err := s.getObj(ns, o)
			if err == nil {
				left = append(left, o.String())
			} else if !apierrors.IsNotFound(err) {
				left = append(left, o.String()+" ("+err.Error()+")")
			}
		}
		return len(left) == 0, "still there: " + strings.Join(left, ", ")
	})
}

func (s *suite) statefulSet(t testing.TB, ns, name string) *appsv1.StatefulSet {
	t.Helper()
	sts, err := s.k.CS.AppsV1().StatefulSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get StatefulSet %s/%s: %v", ns, name, err)
	}
	return sts
}

func (s *suite) podsState(ns, name string) string {
	sts, err := s.k.CS.AppsV1().StatefulSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return "StatefulSet: " + err.Error()
	}
	st := fmt.Sprintf("StatefulSet replicas %d ready %d updated %d current %s update %s observedGeneration %d/%d",
		ptrInt(sts.Spec.Replicas), sts.Status.ReadyReplicas, sts.Status.UpdatedReplicas, sts.Status.CurrentRevision, sts.Status.UpdateRevision, sts.Status.ObservedGeneration, sts.Generation)
	pods, err := s.k.CS.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err == nil {
		var ps []string
		for _, p := range pods.Items {
			if !strings.HasPrefix(p.Name, name+"-") {
				continue
			}
			ps = append(ps, fmt.Sprintf("%s %s ready=%v node=%q", p.Name, p.Status.Phase, podReady(&p), p.Spec.NodeName))
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
					ps[len(ps)-1] += " unschedulable: " + c.Message
				}
			}
		}
		st += "; pods: " + strings.Join(ps, ", ")
	}
	return st
}

func ptrInt(p *int32) int32 {
	if p == nil {
		return -1
	}
	return *p
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func container(sts *appsv1.StatefulSet, name string) *corev1.Container {
	for i := range sts.Spec.Template.Spec.Containers {
		if sts.Spec.Template.Spec.Containers[i].Name == name {
			return &sts.Spec.Template.Spec.Containers[i]
		}
	}
	if len(sts.Spec.Template.Spec.Containers) > 0 {
		return &sts.Spec.Template.Spec.Containers[0]
	}
	return nil
}

func ownedBy(u *unstructured.Unstructured, owner *unstructured.Unstructured) bool {
	for _, r := range u.GetOwnerReferences() {
		if r.UID == owner.GetUID() && r.Controller != nil && *r.Controller {
			return true
		}
	}
	return false
}

func ownersString(u *unstructured.Unstructured) string {
	var out []string
	for _, r := range u.GetOwnerReferences() {
		c := r.Controller != nil && *r.Controller
		out = append(out, fmt.Sprintf("%s/%s uid=%s controller=%v", r.Kind, r.Name, r.UID, c))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func str(u *unstructured.Unstructured, path ...string) string {
	v, found, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
	if !found || v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// example is the Database of example/xr.yaml, composed by
// TestDatabase/Compose and used by its later steps.
type example struct {
	d        database
	replicas int64
	backup   bool
	ok       bool
}

// require skips a step that needs the example Database when Compose failed.
func (orders *example) require(t *testing.T) {
	t.Helper()
	if !orders.ok {
		t.Skip("the example Database was not composed (see Compose)")
	}
}

// TestDatabase runs the scenarios in order: they share the control plane and
// the example Database. Permissions goes first: it takes core's access to
// the composed kinds away for a moment, which no other Database must feel.
func TestDatabase(t *testing.T) {
	s := env
	orders := &example{}
	with := func(f func(*testing.T, *example)) func(*testing.T) {
		return func(t *testing.T) { f(t, orders) }
	}
	s.steps(t, []step{
		{name: "Permissions", run: s.testPermissions},
		{name: "Compose", run: with(s.testCompose)},
		{name: "NoChurn", run: with(s.testNoChurn)},
		{name: "PasswordStable", run: with(s.testPasswordStable)},
		{name: "Scale", run: with(s.testScale)},
		{name: "Spread", run: s.testSpread},
		{name: "Backup", run: s.testBackup},
		{name: "Restore", run: s.testRestore},
		{name: "MajorDowngrade", run: with(s.testDowngrade)},
		{name: "InvalidSpecs", run: s.testInvalid},
		{name: "LegacyClaim", run: s.testLegacyClaim},
		{name: "Delete", run: with(s.testDelete)},
	})
}

// Permissions: Crossplane core runs on its own ServiceAccount's permissions
// (the chart's ClusterRoles, the RBAC manager's for the XRD, and
// example/rbac.yaml, which setup applied). Without the project's ClusterRole
// core is refused ("forbidden", naming its ServiceAccount) and creates no
// StatefulSet; once the ClusterRole is back, core composes it with no other
// nudge.
//
// Where core v2.3.4 reports the refusal depends on what it is refused first.
// The function asks for the instance pods (required resources, for
// failover), and core's cache then fails to list pods: core logs it
// ("Watch error", at debug level) and the reconcile waits, up to its
// 2-minute timeout, for that cache, with no event. Refused a composed kind
// instead, it records Warning events on the Database (not a Synced
// condition: the status write of its failed reconcile loses a conflict with
// its own resource-reference patch). The test takes either, and puts the
// role back as soon as it has one, so that the watch's backoff stays short.
func (s *suite) testPermissions(t *testing.T) {
	ctx := context.Background()
	role, err := s.coreRole()
	if err != nil {
		t.Fatal(err)
	}
	ns := "permissions"
	s.ensureNamespace(t, ns)
	granted, err := crossplane.RuleAccesses(role, ns)
	if err != nil {
		t.Fatal(err)
	}
	// The kinds only this role grants core. Secrets, ConfigMaps and Services
	// stay allowed without it: the chart's own role grants them to core.
	var onlyOurs []kube.Access
	for _, a := range granted {
		if a.Group != "" {
			onlyOurs = append(onlyOurs, a)
		}
	}
	// Every later scenario needs the role: put it back whatever happens.
	t.Cleanup(func() {
		if err := s.applyCoreRole(ctx); err != nil {
			t.Errorf("restore ClusterRole %s: %v", role.GetName(), err)
		}
	})
	if err := s.k.Delete(ctx, role.GroupVersionKind(), "", role.GetName()); err != nil {
		t.Fatalf("delete ClusterRole %s: %v", role.GetName(), err)
	}
	if err := s.k.WaitAllowed(ctx, 30*time.Second, crossplane.Namespace, crossplane.CoreSA, false, onlyOurs...); err != nil {
		t.Fatalf("ClusterRole %s deleted, but core keeps its access: %v", role.GetName(), err)
	}
	t.Logf("ClusterRole %s deleted: core may no longer do %d things it granted", role.GetName(), len(onlyOurs))

	logStart := proc.FileSize(s.xp.Core.Log)
	xr := exampleXR(t)
	xr.SetNamespace(ns)
	d := s.create(t, xr)
	user := "system:serviceaccount:" + crossplane.Namespace + ":" + crossplane.CoreSA
	var forbidden []string
	eventually(t, syncWait, d.String()+` refused: a Warning event or core's log saying "forbidden" and naming core's ServiceAccount`, func() (bool, string) {
		forbidden = forbidden[:0]
		evs, err := s.k.CS.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + d.name + ",involvedObject.kind=" + d.gvk.Kind})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			seen = append(seen, e.Type+" "+e.Reason+": "+e.Message)
			// Core names its own identity: the ServiceAccount, not an admin.
			if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "forbidden") && strings.Contains(e.Message, user) {
				forbidden = append(forbidden, "event "+e.Reason+": "+e.Message)
			}
		}
		for _, l := range strings.Split(proc.ReadFrom(s.xp.Core.Log, logStart), "\n") {
			if strings.Contains(l, "forbidden") && strings.Contains(l, user) {
				forbidden = append(forbidden, "core's log: "+l)
				break
			}
		}
		return len(forbidden) > 0, fmt.Sprintf("events: %q; no forbidden line in core's log", seen)
	})
	t.Logf("without the ClusterRole, core reports: %s", strings.Join(forbidden, "; "))
	if c := kube.GetCondition(d.get(t), "Synced"); c.Status == "True" {
		t.Errorf("%s is Synced without the ClusterRole: %s", d, c.Message)
	}
	if _, err := s.getObj(ns, obj{gvkStatefulSet, d.name}); !apierrors.IsNotFound(err) {
		t.Errorf("StatefulSet %s/%s: want NotFound without the ClusterRole, got %v", ns, d.name, err)
	}

	t0 := time.Now()
	if err := s.applyCoreRole(ctx); err != nil {
		t.Fatalf("re-apply ClusterRole %s: %v", role.GetName(), err)
	}
	s.waitSynced(t, d, d.get(t).GetGeneration())
	sts := s.statefulSet(t, ns, d.name)
	backup, _, _ := unstructured.NestedBool(xr.Object, "spec", "backup", "enabled")
	s.waitExists(t, ns, composed(d.name, int64(ptrInt(sts.Spec.Replicas)), backup))
	t.Logf("with the ClusterRole: Synced=True and every composed object there %s after re-applying it", time.Since(t0).Round(time.Millisecond))
	// Ready: core watches and reads the composed StatefulSet's status.
	s.waitReady(t, d)

	if err := s.k.Delete(ctx, d.gvk, d.ns, d.name); err != nil {
		t.Fatalf("delete %s: %v", d, err)
	}
	eventually(t, deleteWait, d.String()+" gone", func() (bool, string) {
		_, err := s.k.Get(ctx, d.gvk, d.ns, d.name)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// Compose: the medium Database of example/xr.yaml gets its whole stack in its
// namespace, owned by the XR; it is Synced at once but Ready only once kwok
// has made the StatefulSet's pods Ready.
func (s *suite) testCompose(t *testing.T, orders *example) {
	xr := exampleXR(t)
	ns, n := xr.GetNamespace(), xr.GetName()
	if ns == "" {
		t.Fatalf("example/xr.yaml has no namespace")
	}
	s.ensureNamespace(t, ns)
	backup, _, _ := unstructured.NestedBool(xr.Object, "spec", "backup", "enabled")

	// Hold the volumes of this namespace back: the pods cannot be scheduled,
	// so there is a window in which the stack exists and nothing is Ready.
	s.cl.HoldVolumes(ns)
	defer s.cl.HoldVolumes("")
	d := s.create(t, xr)
	u := s.waitSynced(t, d, 1)
	sts := func() *appsv1.StatefulSet {
		var sts *appsv1.StatefulSet
		eventually(t, syncWait, "StatefulSet "+n, func() (bool, string) {
			var err error
			sts, err = s.k.CS.AppsV1().StatefulSets(ns).Get(context.Background(), n, metav1.GetOptions{})
			if err != nil {
				return false, err.Error() + "; XR: " + kube.ConditionsString(d.get(t))
			}
			return true, ""
		})
		return sts
	}()
	replicas := int64(ptrInt(sts.Spec.Replicas))
	want := composed(n, replicas, backup)
	objs := s.waitExists(t, ns, want)

	// Early observation: stack there, pods not Ready, XR not Ready.
	early := d.get(t)
	if c := kube.GetCondition(early, "Ready"); c.Status == "True" {
		t.Errorf("%s is Ready before any pod could run: %s; %s", d, kube.ConditionsString(early), s.podsState(ns, n))
	} else {
		t.Logf("early observation: Ready=%s (%s) phase=%q; %s", c.Status, c.Reason, str(early, "status", "phase"), s.podsState(ns, n))
	}
	if p := str(early, "status", "phase"); p != "Provisioning" {
		t.Errorf("status.phase before the pods are Ready = %q, want Provisioning", p)
	}
	for range 8 { // stays so for a while: nothing becomes Ready by itself
		time.Sleep(250 * time.Millisecond)
		if c := kube.GetCondition(d.get(t), "Ready"); c.Status == "True" {
			t.Errorf("%s became Ready with no pod Ready: %s", d, s.podsState(ns, n))
			break
		}
	}

	// Ownership: every composed object is controlled by the XR.
	for _, o := range want {
		if !ownedBy(objs[o], u) {
			t.Errorf("%s in %s is not controlled by %s (uid %s): owners %s", o, ns, d, u.GetUID(), ownersString(objs[o]))
		}
	}
	if sts.Spec.ServiceName != n+"-hl" {
		t.Errorf("StatefulSet serviceName = %q, want %s-hl", sts.Spec.ServiceName, n)
	}
	var vcts []string
	for _, v := range sts.Spec.VolumeClaimTemplates {
		vcts = append(vcts, v.Name)
	}
	sort.Strings(vcts)
	if strings.Join(vcts, ",") != "backups,data" {
		t.Errorf("StatefulSet volumeClaimTemplates = %v, want [backups data] (backups from the start, backup enabled=%v)", vcts, backup)
	}

	// Release the volumes: kwok runs the pods, the XR turns Ready.
	s.cl.HoldVolumes("")
	released := time.Now()
	u = s.waitReady(t, d)
	t.Logf("Ready %s after the volumes were released", time.Since(released).Round(time.Millisecond))
	// Ready came after every pod became Ready (API timestamps, seconds;
	// pods made after the XR turned Ready, by a later roll, don't count).
	readyAt := kube.GetCondition(u, "Ready").LastTransitionTime
	pods, err := s.k.CS.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Name, n+"-") || p.CreationTimestamp.After(readyAt) {
			continue
		}
		seen++
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && readyAt.Before(c.LastTransitionTime.Time) {
				t.Errorf("XR Ready at %s, before pod %s was Ready at %s", readyAt, p.Name, c.LastTransitionTime.Time)
			}
		}
	}
	if int64(seen) < replicas {
		t.Errorf("XR Ready at %s with %d pods of %d created by then; %s", readyAt, seen, replicas, s.podsState(ns, n))
	}

	// Status fields written by the function.
	for _, f := range []string{"endpoint", "version", "replicas", "phase"} {
		if str(u, "status", f) == "" {
			t.Errorf("status.%s is empty; status: %v", f, u.Object["status"])
		}
	}
	if got := str(u, "status", "replicas"); got != strconv.FormatInt(replicas, 10) {
		t.Errorf("status.replicas = %q, StatefulSet has %d", got, replicas)
	}
	if got := str(u, "status", "phase"); got != "Running" {
		t.Errorf("status.phase = %q once Ready, want Running", got)
	}
	if ep := str(u, "status", "endpoint"); !strings.Contains(ep, n+"."+ns) {
		t.Errorf("status.endpoint = %q, want the Service %s.%s", ep, n, ns)
	}
	t.Logf("status: endpoint=%s version=%s replicas=%s phase=%s; %s", str(u, "status", "endpoint"), str(u, "status", "version"),
		str(u, "status", "replicas"), str(u, "status", "phase"), kube.ConditionsString(u))
	orders.d, orders.replicas, orders.backup = d, replicas, backup
	orders.ok = !t.Failed()
	if t.Failed() {
		t.Logf("XR:\n%s", kube.ToYAML(u))
	}
}

// NoChurn: in steady state nothing rewrites the composed objects.
func (s *suite) testNoChurn(t *testing.T, orders *example) {
	orders.require(t)
	d := orders.d
	want := composed(d.name, orders.replicas, orders.backup)
	// Let the XR settle first: right after it turns Ready, Crossplane core
	// can still write it a few times (its two-step status write, started
	// from a cached copy, may briefly restore an older Ready=False). The
	// window starts once the XR has held still for 5 s.
	s.settle(t, d, 5*time.Second, 30*time.Second)
	before := map[obj]*unstructured.Unstructured{}
	for o, u := range s.waitExists(t, d.ns, want) {
		before[o] = u
	}
	xrBefore := d.get(t)
	// Watch the XR through the window: its status must hold still too
	// (no condition or status field may change on every call: Crossplane
	// would write the XR on every reconcile).
	xc, err := s.k.Resource(d.gvk, d.ns)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := xc.Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + d.name, ResourceVersion: xrBefore.GetResourceVersion()})
	if err != nil {
		t.Fatalf("watch %s: %v", d, err)
	}
	type xrEvent struct {
		at time.Time
		u  *unstructured.Unstructured
	}
	events := make(chan []xrEvent, 1)
	go func() {
		var evs []xrEvent
		for ev := range w.ResultChan() {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok {
				evs = append(evs, xrEvent{time.Now(), u})
			}
		}
		events <- evs
	}()

	changed := map[obj]bool{}
	deadline := time.Now().Add(churnWatch)
	for time.Now().Before(deadline) {
		time.Sleep(5 * time.Second)
		for _, o := range want {
			if changed[o] {
				continue
			}
			u, err := s.getObj(d.ns, o)
			if err != nil {
				t.Errorf("%s: %v", o, err)
				changed[o] = true
				continue
			}
			if u.GetResourceVersion() != before[o].GetResourceVersion() {
				changed[o] = true
				t.Errorf("%s changed in steady state (resourceVersion %s -> %s):\n%s", o,
					before[o].GetResourceVersion(), u.GetResourceVersion(), lineDiff(kube.ToYAML(before[o]), kube.ToYAML(u)))
			}
		}
	}
	w.Stop()
	body := func(u *unstructured.Unstructured) string {
		c := u.DeepCopy()
		delete(c.Object, "metadata")
		return kube.ToYAML(c)
	}
	prev, metaOnly := xrBefore, 0
	for _, ev := range <-events {
		if diff := lineDiff(body(prev), body(ev.u)); diff != "" {
			t.Errorf("%s changed in steady state at %s (resourceVersion %s -> %s):\n%s\nconditions before: %s\nconditions after:  %s", d, ev.at.Format("15:04:05.000"),
				prev.GetResourceVersion(), ev.u.GetResourceVersion(), diff, conditionTimes(prev), conditionTimes(ev.u))
		} else if ev.u.GetResourceVersion() != prev.GetResourceVersion() {
			metaOnly++
		}
		prev = ev.u
	}
	if metaOnly > 0 {
		t.Logf("note: %d writes to the XR changed only its metadata (Crossplane's managed fields)", metaOnly)
	}
	if !t.Failed() {
		t.Logf("%d composed objects unchanged over %s (Crossplane poll interval 15s)", len(want), churnWatch)
	}
}

func (s *suite) password(t testing.TB, ns, name string) string {
	t.Helper()
	sec, err := s.k.CS.CoreV1().Secrets(ns).Get(context.Background(), name+"-credentials", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Secret %s-credentials: %v", name, err)
	}
	p := string(sec.Data["password"])
	if p == "" {
		t.Fatalf("Secret %s-credentials has no password", name)
	}
	return p
}

// touch makes Crossplane reconcile the XR: a harmless spec change (the backup
// retention, back and forth), then waits until it is Synced at the new
// generation.
func (s *suite) touch(t testing.TB, d database, i int) {
	t.Helper()
	u := d.patch(t, fmt.Sprintf(`{"spec":{"backup":{"retention":%d}}}`, 7+i%2))
	s.waitSynced(t, d, u.GetGeneration())
}

// PasswordStable: the generated password is kept across reconciles and a
// restart of Crossplane core.
func (s *suite) testPasswordStable(t *testing.T, orders *example) {
	orders.require(t)
	d := orders.d
	p0 := s.password(t, d.ns, d.name)
	for i := 1; i <= 3; i++ {
		s.touch(t, d, i)
		if p := s.password(t, d.ns, d.name); p != p0 {
			t.Fatalf("password of %s-credentials changed after reconcile %d", d.name, i)
		}
	}
	t.Logf("restarting Crossplane core (pid %d)", s.xp.Core.PID())
	if err := s.xp.RestartCore(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Crossplane core restarted (pid %d)", s.xp.Core.PID())
	s.touch(t, d, 0)
	s.waitReady(t, d)
	if p := s.password(t, d.ns, d.name); p != p0 {
		t.Fatalf("password of %s-credentials changed after Crossplane core restarted", d.name)
	}
	// Superuser secret too.
	sec, err := s.k.CS.CoreV1().Secrets(d.ns).Get(context.Background(), d.name+"-superuser", metav1.GetOptions{})
	if err != nil || len(sec.Data["password"]) == 0 {
		t.Errorf("Secret %s-superuser has no password (%v)", d.name, err)
	}
}

// Scale: large gives 3 replicas, a PDB and bigger resources; small gives 1
// replica and no PDB; back to the example's size afterwards.
func (s *suite) testScale(t *testing.T, orders *example) {
	orders.require(t)
	d := orders.d
	size := str(d.get(t), "spec", "size")
	before := container(s.statefulSet(t, d.ns, d.name), "postgres").Resources
	u := d.patch(t, `{"spec":{"size":"large"}}`)
	s.waitSynced(t, d, u.GetGeneration())
	var last *appsv1.StatefulSet
	eventually(t, syncWait, "StatefulSet with 3 replicas and new resources, and a PDB", func() (bool, string) {
		last = s.statefulSet(t, d.ns, d.name)
		_, pdbErr := s.getObj(d.ns, obj{gvkPDB, d.name})
		_, readErr := s.getObj(d.ns, obj{gvkService, d.name + "-r"})
		res := container(last, "postgres").Resources
		state := fmt.Sprintf("replicas %d, resources %v, PDB: %v, read Service: %v", ptrInt(last.Spec.Replicas), res, pdbErr, readErr)
		return ptrInt(last.Spec.Replicas) == 3 && pdbErr == nil && readErr == nil && !equalResources(before, res), state
	})
	t.Logf("large: replicas 3, resources %v (were %v)", container(last, "postgres").Resources, before)

	u = d.patch(t, `{"spec":{"size":"small"}}`)
	s.waitSynced(t, d, u.GetGeneration())
	eventually(t, syncWait, "StatefulSet with 1 replica", func() (bool, string) {
		last = s.statefulSet(t, d.ns, d.name)
		return ptrInt(last.Spec.Replicas) == 1, fmt.Sprintf("replicas %d", ptrInt(last.Spec.Replicas))
	})
	s.waitGone(t, d.ns, []obj{{gvkPDB, d.name}}, syncWait)
	if _, err := s.getObj(d.ns, obj{gvkService, d.name + "-r"}); err != nil {
		t.Errorf("read Service %s-r at one instance: %v (it must stay, selecting the primary)", d.name, err)
	}
	t.Logf("small: replicas 1, resources %v, no PDB, read Service kept", container(last, "postgres").Resources)

	u = d.patch(t, fmt.Sprintf(`{"spec":{"size":%q}}`, size))
	s.waitSynced(t, d, u.GetGeneration())
	eventually(t, syncWait, "StatefulSet back to its replicas", func() (bool, string) {
		last = s.statefulSet(t, d.ns, d.name)
		return int64(ptrInt(last.Spec.Replicas)) == orders.replicas, fmt.Sprintf("replicas %d", ptrInt(last.Spec.Replicas))
	})
	s.waitReady(t, d)
}

// Spread: a large Database's three instances each get a node of their own
// and a zone of their own (the kwok plane has three nodes in three zones);
// in a namespace whose pods may use only two of them (PodNodeSelector), the
// third instance stays Pending and the Database's Scheduled condition names
// it, the scheduler's reason and the way out; sized down to two instances it
// is placed again.
func (s *suite) testSpread(t *testing.T) {
	ctx := context.Background()
	nodesOf := func(ns, db string) map[string]string {
		pods, err := s.k.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + db + ",statefulset.kubernetes.io/pod-name"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, p := range pods.Items {
			out[p.Name] = p.Spec.NodeName
		}
		return out
	}
	distinct := func(m map[string]string) int {
		seen := map[string]bool{}
		for _, n := range m {
			if n != "" {
				seen[n] = true
			}
		}
		return len(seen)
	}

	const wide, narrow = "spread-wide", "spread-two-nodes"
	s.ensureNamespace(t, wide)
	w := newDatabase(t, "spread", map[string]any{"size": "large"})
	w.SetNamespace(wide)
	d := s.create(t, w)
	defer func() { _ = s.k.Delete(ctx, d.gvk, d.ns, d.name) }()
	s.waitReady(t, d)
	eventually(t, syncWait, "three instances on three nodes", func() (bool, string) {
		m := nodesOf(wide, "spread")
		return len(m) == 3 && distinct(m) == 3, fmt.Sprint(m)
	})
	zones := map[string]bool{}
	for _, n := range nodesOf(wide, "spread") {
		node, err := s.k.CS.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		zones[node.Labels[corev1.LabelTopologyZone]] = true
	}
	if len(zones) != 3 {
		t.Errorf("the instances are in zones %v, want three", zones)
	}
	// The condition is the function's reading of the pods at its last
	// reconcile, which may be older than the StatefulSet's readiness that
	// made the XR Ready (a pod still waiting for its claim then): the next
	// reconcile (the suite's poll interval is 15 s) must say it.
	eventually(t, syncWait, "Scheduled True (OneNodeEach)", func() (bool, string) {
		c := kube.GetCondition(d.get(t), "Scheduled")
		return c.Status == "True" && c.Reason == "OneNodeEach", fmt.Sprintf("Scheduled %s/%s: %s", c.Status, c.Reason, c.Message)
	})

	if _, err := s.k.CS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:        narrow,
		Annotations: map[string]string{"scheduler.alpha.kubernetes.io/node-selector": cluster.PairLabel + "=true"},
	}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	n := newDatabase(t, "crowded", map[string]any{"size": "large"})
	n.SetNamespace(narrow)
	c := s.create(t, n)
	defer func() { _ = s.k.Delete(ctx, c.gvk, c.ns, c.name) }()
	var cond kube.Condition
	// Until the suite's provisioner binds their claims, every pod is
	// unschedulable for that reason (the condition says so, truly); then
	// two are placed and the third is refused by the anti-affinity.
	eventually(t, syncWait, "the Scheduled condition naming the instance no node takes", func() (bool, string) {
		cond = kube.GetCondition(c.get(t), "Scheduled")
		m := nodesOf(narrow, "crowded")
		return cond.Status == "False" && cond.Reason == "InstanceUnschedulable" && strings.Contains(cond.Message, "anti-affinity") && distinct(m) == 2,
			fmt.Sprintf("%s/%s: %s; pods on %v", cond.Status, cond.Reason, cond.Message, m)
	})
	t.Logf("Scheduled=False: %s", cond.Message)
	for _, want := range []string{"crowded-", "anti-affinity", "spread.nodes: Preferred"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("the condition does not say %q: %s", want, cond.Message)
		}
	}
	if m := nodesOf(narrow, "crowded"); distinct(m) != 2 {
		t.Errorf("the two placed instances are on %v, want two nodes", m)
	}
	u := c.patch(t, `{"spec":{"size":"medium"}}`)
	s.waitSynced(t, c, u.GetGeneration())
	eventually(t, syncWait, "two instances placed, Scheduled again", func() (bool, string) {
		cond = kube.GetCondition(c.get(t), "Scheduled")
		return cond.Status == "True", fmt.Sprintf("%s/%s: %s; pods on %v", cond.Status, cond.Reason, cond.Message, nodesOf(narrow, "crowded"))
	})
}

func equalResources(a, b corev1.ResourceRequirements) bool {
	eq := func(x, y corev1.ResourceList) bool {
		if len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || v.Cmp(w) != 0 {
				return false
			}
		}
		return true
	}
	return eq(a.Requests, b.Requests) && eq(a.Limits, b.Limits)
}

// Backup: the backups volume claim template is on the StatefulSet from the
// start; backup.enabled adds and removes the CronJob.
func (s *suite) testBackup(t *testing.T) {
	ns := exampleXR(t).GetNamespace()
	s.ensureNamespace(t, ns)
	n := "backup-demo"
	d := s.create(t, newDatabase(t, n, map[string]any{"size": "small", "backup.enabled": false}))
	defer func() { _ = s.k.Delete(context.Background(), d.gvk, d.ns, d.name) }()
	s.waitSynced(t, d, 1)
	objs := s.waitExists(t, ns, composed(n, 1, false))
	sts := s.statefulSet(t, ns, n)
	var vcts []string
	for _, v := range sts.Spec.VolumeClaimTemplates {
		vcts = append(vcts, v.Name)
	}
	sort.Strings(vcts)
	if strings.Join(vcts, ",") != "backups,data" {
		t.Errorf("with backups off, StatefulSet volumeClaimTemplates = %v, want [backups data]", vcts)
	}
	if _, err := s.getObj(ns, obj{gvkCronJob, n + "-backup"}); !apierrors.IsNotFound(err) {
		t.Errorf("CronJob %s-backup with backups off: %v", n, err)
	}
	_ = objs

	u := d.patch(t, `{"spec":{"backup":{"enabled":true}}}`)
	s.waitSynced(t, d, u.GetGeneration())
	cj := s.waitExists(t, ns, []obj{{gvkCronJob, n + "-backup"}})[obj{gvkCronJob, n + "-backup"}]
	if xr := d.get(t); !ownedBy(cj, xr) {
		t.Errorf("CronJob %s-backup not controlled by the XR: %s", n, ownersString(cj))
	}
	t.Logf("CronJob %s-backup: schedule %q", n, str(cj, "spec", "schedule"))
	if sts2 := s.statefulSet(t, ns, n); len(sts2.Spec.VolumeClaimTemplates) != len(sts.Spec.VolumeClaimTemplates) {
		t.Errorf("volumeClaimTemplates changed when backups were enabled")
	}

	u = d.patch(t, `{"spec":{"backup":{"enabled":false}}}`)
	s.waitSynced(t, d, u.GetGeneration())
	s.waitGone(t, ns, []obj{{gvkCronJob, n + "-backup"}}, syncWait)
}

// MajorDowngrade: a major version change in place is not applied; a
// condition says why and points to restoreFrom.
func (s *suite) testDowngrade(t *testing.T, orders *example) {
	orders.require(t)
	d := orders.d
	version := str(d.get(t), "spec", "version")
	major, err := strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	if err != nil {
		t.Fatalf("spec.version %q: %v", version, err)
	}
	image := container(s.statefulSet(t, d.ns, d.name), "postgres").Image
	lower := strconv.Itoa(major - 1)
	u := d.patch(t, fmt.Sprintf(`{"spec":{"version":%q}}`, lower))
	s.waitSynced(t, d, u.GetGeneration())
	var cond kube.Condition
	eventually(t, syncWait, "a condition on "+d.String()+" whose message mentions restoreFrom", func() (bool, string) {
		u = d.get(t)
		for _, c := range kube.Conditions(u) {
			if strings.Contains(c.Message, "restoreFrom") {
				cond = c
				return true, ""
			}
		}
		return false, kube.ConditionsString(u)
	})
	t.Logf("condition: %s=%s (%s): %s", cond.Type, cond.Status, cond.Reason, cond.Message)
	// Give a wrong change time to land, then check it did not.
	time.Sleep(2 * time.Second)
	if got := container(s.statefulSet(t, d.ns, d.name), "postgres").Image; got != image {
		t.Errorf("StatefulSet image changed from %s to %s on a major downgrade to %s", image, got, lower)
	}

	u = d.patch(t, fmt.Sprintf(`{"spec":{"version":%q}}`, version))
	s.waitSynced(t, d, u.GetGeneration())
	ok := poll(15*time.Second, func() (bool, string) {
		for _, c := range kube.Conditions(d.get(t)) {
			if c.Type == cond.Type && strings.Contains(c.Message, "restoreFrom") {
				return false, ""
			}
		}
		return true, ""
	})
	if !ok {
		t.Errorf("condition %s still mentions restoreFrom after spec.version went back to %s: %s", cond.Type, version, kube.ConditionsString(d.get(t)))
	}
	if got := container(s.statefulSet(t, d.ns, d.name), "postgres").Image; got != image {
		t.Errorf("StatefulSet image %s after going back to version %s, want %s", got, version, image)
	}
}

// InvalidSpecs: the XRD's schema rejects bad input at admission.
func (s *suite) testInvalid(t *testing.T) {
	ns := exampleXR(t).GetNamespace()
	s.ensureNamespace(t, ns)
	cases := []struct {
		name string
		xr   *unstructured.Unstructured
		want []string
	}{
		{"bad size", newDatabase(t, "bad-size", map[string]any{"size": "huge"}), []string{"spec.size", "Unsupported value", `"huge"`}},
		{"bad version", newDatabase(t, "bad-version", map[string]any{"version": "sixteen"}), []string{"spec.version", "should match"}},
		{"name over 45 characters", newDatabase(t, strings.Repeat("a", 46), nil), []string{"metadata.name", "at most 45 characters"}},
		{"a composed name's suffix", newDatabase(t, "orders-r", nil), []string{"metadata.name", "must not end in"}},
		// Its SQL role and database would be the superuser's.
		{"the superuser's name", newDatabase(t, "postgres", nil), []string{"metadata.name", "must not be postgres"}},
		{"PostgreSQL's reserved prefix", newDatabase(t, "pg-orders", nil), []string{"metadata.name", "nor start with pg-"}},
	}
	for _, c := range cases {
		cl, err := s.k.ResourceFor(c.xr)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Create(context.Background(), c.xr, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			t.Errorf("%s: accepted by the API server", c.name)
			continue
		}
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: want an Invalid error, got %v", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", c.name, err, w)
			}
		}
		t.Logf("%s: rejected: %v", c.name, err)
	}
}

// LegacyClaim: a claim of the LegacyCluster XRD gets the same stack in the
// claim's namespace, named after the claim.
func (s *suite) testLegacyClaim(t *testing.T) {
	xrds, err := s.applyFiles(context.Background(), env.example("legacy", "xrd.yaml"), env.example("legacy", "composition.yaml"))
	if err != nil {
		t.Fatalf("legacy XRD and Composition: %v", err)
	}
	t.Logf("legacy XRD %v established and offered", xrds)
	claim, err := kube.ReadObject(env.example("legacy", "claim.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.k.WaitKind(wctx, claim.GroupVersionKind()); err != nil {
		t.Fatal(err)
	}
	ns, n := claim.GetNamespace(), claim.GetName()
	if ns == "" {
		t.Fatalf("example/legacy/claim.yaml has no namespace")
	}
	s.ensureNamespace(t, ns)
	d := s.create(t, claim)
	s.waitSynced(t, d, 1)
	var xrName string
	eventually(t, syncWait, "the claim's composite resource", func() (bool, string) {
		u := d.get(t)
		xrName = str(u, "spec", "resourceRef", "name")
		return xrName != "", kube.ConditionsString(u)
	})
	cu := d.get(t)
	xrAPI, xrKind := str(cu, "spec", "resourceRef", "apiVersion"), str(cu, "spec", "resourceRef", "kind")
	xr, err := s.k.Get(context.Background(), kube.GVK(xrAPI, xrKind), "", xrName)
	if err != nil {
		t.Fatalf("composite %s %s: %v", xrKind, xrName, err)
	}
	t.Logf("claim %s/%s -> %s %s", ns, n, xrKind, xrName)
	backup, _, _ := unstructured.NestedBool(claim.Object, "spec", "backup", "enabled")
	sts := func() *appsv1.StatefulSet {
		var sts *appsv1.StatefulSet
		eventually(t, syncWait, "StatefulSet "+ns+"/"+n, func() (bool, string) {
			var err error
			sts, err = s.k.CS.AppsV1().StatefulSets(ns).Get(context.Background(), n, metav1.GetOptions{})
			if err != nil {
				x, _ := s.k.Get(context.Background(), kube.GVK(xrAPI, xrKind), "", xrName)
				return false, err.Error() + "; XR: " + kube.ConditionsString(x)
			}
			return true, ""
		})
		return sts
	}()
	want := composed(n, int64(ptrInt(sts.Spec.Replicas)), backup)
	objs := s.waitExists(t, ns, want)
	for _, o := range want {
		if !ownedBy(objs[o], xr) {
			t.Errorf("%s in %s is not controlled by %s %s: owners %s", o, ns, xrKind, xrName, ownersString(objs[o]))
		}
	}
	u := s.waitReady(t, d)
	t.Logf("claim Ready: status endpoint=%s phase=%s; %s", str(u, "status", "endpoint"), str(u, "status", "phase"), kube.ConditionsString(u))
	if ep := str(u, "status", "endpoint"); !strings.Contains(ep, n+"."+ns) {
		t.Errorf("claim status.endpoint = %q, want the Service %s.%s", ep, n, ns)
	}
	s.checkClaimSecret(t, d, xr)
}

// claimSecretKeys are the keys of a legacy claim's connection Secret, as the
// README documents them: the XRD's connectionSecretKeys, which are the keys
// of N-credentials.
var claimSecretKeys = []string{"dbname", "host", "jdbc-uri", "password", "pgpass", "port", "uri", "username"}

// checkClaimSecret: the claim's writeConnectionSecretToRef Secret is in the
// claim's namespace with the documented keys, holding what N-credentials
// holds. Crossplane writes the XR's Secret into the Composition's
// writeConnectionSecretsToNamespace from the connection details the function
// returns, then copies it to the claim's namespace.
func (s *suite) checkClaimSecret(t *testing.T, claim database, xr *unstructured.Unstructured) {
	c := claim.get(t)
	name := str(c, "spec", "writeConnectionSecretToRef", "name")
	if name == "" {
		t.Fatalf("claim %s has no spec.writeConnectionSecretToRef.name", claim)
	}
	xrd, err := s.k.Get(context.Background(), crossplane.GVKXRD, "", "xdatabases.legacy.example.com")
	if err != nil {
		t.Fatal(err)
	}
	declared, _, _ := unstructured.NestedStringSlice(xrd.Object, "spec", "connectionSecretKeys")
	sort.Strings(declared)
	if strings.Join(declared, ",") != strings.Join(claimSecretKeys, ",") {
		t.Errorf("the legacy XRD's connectionSecretKeys are %v, the documented keys %v", declared, claimSecretKeys)
	}
	var sec *corev1.Secret
	eventually(t, syncWait, "Secret "+claim.ns+"/"+name+" (the claim's writeConnectionSecretToRef)", func() (bool, string) {
		var err error
		sec, err = s.k.CS.CoreV1().Secrets(claim.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			x, _ := s.k.Get(context.Background(), xr.GroupVersionKind(), "", xr.GetName())
			return false, fmt.Sprintf("%v; XR writeConnectionSecretToRef %s/%s", err, str(x, "spec", "writeConnectionSecretToRef", "namespace"), str(x, "spec", "writeConnectionSecretToRef", "name"))
		}
		return len(sec.Data) == len(claimSecretKeys), fmt.Sprintf("keys %v", keys(sec.Data))
	})
	if got := keys(sec.Data); strings.Join(got, ",") != strings.Join(claimSecretKeys, ",") {
		t.Errorf("Secret %s/%s keys %v, want %v", claim.ns, name, got, claimSecretKeys)
	}
	creds, err := s.k.CS.CoreV1().Secrets(claim.ns).Get(context.Background(), claim.name+"-credentials", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range claimSecretKeys {
		if len(sec.Data[k]) == 0 || string(sec.Data[k]) != string(creds.Data[k]) {
			t.Errorf("Secret %s/%s key %s differs from %s-credentials' (or is empty)", claim.ns, name, k, claim.name)
		}
	}
	if !ownedByUID(sec, c.GetUID()) {
		t.Errorf("Secret %s/%s is not controlled by the claim: owners %v", claim.ns, name, sec.OwnerReferences)
	}
	x, err := s.k.Get(context.Background(), xr.GroupVersionKind(), "", xr.GetName())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claim Secret %s/%s: keys %v, copied from the XR's %s/%s", claim.ns, name, keys(sec.Data),
		str(x, "spec", "writeConnectionSecretToRef", "namespace"), str(x, "spec", "writeConnectionSecretToRef", "name"))
}

func keys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func ownedByUID(o metav1.Object, uid types.UID) bool {
	for _, r := range o.GetOwnerReferences() {
		if r.UID == uid && r.Controller != nil && *r.Controller {
			return true
		}
	}
	return false
}

// Delete: deleting a Database garbage-collects every composed object; the
// volumes stay with deletionPolicy Retain and go with Delete.
func (s *suite) testDelete(t *testing.T, orders *example) {
	orders.require(t)
	keep := orders.d
	ns := keep.ns
	n := "delete-demo"
	gone := s.create(t, newDatabase(t, n, map[string]any{"size": "small", "deletionPolicy": "Delete", "backup.enabled": false}))
	s.waitReady(t, gone)

	pvcs := func(name string, sts *appsv1.StatefulSet) []string {
		var out []string
		for _, v := range sts.Spec.VolumeClaimTemplates {
			for i := range ptrInt(sts.Spec.Replicas) {
				out = append(out, fmt.Sprintf("%s-%s-%d", v.Name, name, i))
			}
		}
		sort.Strings(out)
		return out
	}
	policy := func(sts *appsv1.StatefulSet) string {
		if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p != nil {
			return string(p.WhenDeleted)
		}
		return "(unset: Retain)"
	}
	keepSTS, goneSTS := s.statefulSet(t, ns, keep.name), s.statefulSet(t, ns, n)
	if p := policy(keepSTS); p != string(appsv1.RetainPersistentVolumeClaimRetentionPolicyType) {
		t.Errorf("StatefulSet %s (deletionPolicy Retain): persistentVolumeClaimRetentionPolicy.whenDeleted = %s, want Retain", keep.name, p)
	}
	if p := policy(goneSTS); p != string(appsv1.DeletePersistentVolumeClaimRetentionPolicyType) {
		t.Errorf("StatefulSet %s (deletionPolicy Delete): persistentVolumeClaimRetentionPolicy.whenDeleted = %s, want Delete", n, p)
	}
	keepPVCs, gonePVCs := pvcs(keep.name, keepSTS), pvcs(n, goneSTS)
	pvcObjs := func(names []string) []obj {
		var out []obj
		for _, p := range names {
			out = append(out, obj{gvkPVC, p})
		}
		return out
	}
	s.waitExists(t, ns, pvcObjs(keepPVCs))
	s.waitExists(t, ns, pvcObjs(gonePVCs))
	t.Logf("PVCs before deletion: %v and %v", keepPVCs, gonePVCs)

	keepObjs := composed(keep.name, int64(ptrInt(keepSTS.Spec.Replicas)), orders.backup)
	goneObjs := composed(n, int64(ptrInt(goneSTS.Spec.Replicas)), false)
	for _, d := range []database{keep, gone} {
		if err := s.k.Delete(context.Background(), d.gvk, d.ns, d.name); err != nil {
			t.Fatalf("delete %s: %v", d, err)
		}
		t.Logf("deleted %s", d)
	}
	t0 := time.Now()
	for _, d := range []database{keep, gone} {
		eventually(t, deleteWait, d.String()+" gone", func() (bool, string) {
			u, err := s.k.Get(context.Background(), d.gvk, d.ns, d.name)
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			if err != nil {
				return false, err.Error()
			}
			return false, fmt.Sprintf("finalizers %v; %s", u.GetFinalizers(), kube.ConditionsString(u))
		})
	}
	s.waitGone(t, ns, append(keepObjs, goneObjs...), deleteWait)
	t.Logf("composed objects of both Databases garbage-collected in %s", time.Since(t0).Round(time.Millisecond))
	s.waitGone(t, ns, pvcObjs(gonePVCs), deleteWait)
	t.Logf("deletionPolicy Delete: PVCs %v gone after %s", gonePVCs, time.Since(t0).Round(time.Millisecond))
	for _, p := range keepPVCs {
		pvc, err := s.k.CS.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), p, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("deletionPolicy Retain: PVC %s: %v", p, err)
		case pvc.DeletionTimestamp != nil:
			t.Errorf("deletionPolicy Retain: PVC %s is being deleted", p)
		}
	}
	if !t.Failed() {
		t.Logf("deletionPolicy Retain: PVCs %v kept", keepPVCs)
	}
	orders.ok = false
}

// lineDiff lists the lines only in a (-) and only in b (+), ignoring order.
func lineDiff(a, b string) string {
	count := map[string]int{}
	for _, l := range strings.Split(a, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(b, "\n") {
		count[l]--
	}
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if count[l] > 0 {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if count[l] < 0 {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

func conditionTimes(u *unstructured.Unstructured) string {
	var out []string
	for _, c := range kube.Conditions(u) {
		out = append(out, fmt.Sprintf("%s=%s@%s", c.Type, c.Status, c.LastTransitionTime.Format("15:04:05")))
	}
	return strings.Join(out, " ")
}

// settle waits until the XR's resourceVersion has held for quiet (at most
// limit), so a steady-state check does not start inside a burst of writes.
func (s *suite) settle(t *testing.T, d database, quiet, limit time.Duration) {
	t.Helper()
	t0 := time.Now()
	rv, since := d.get(t).GetResourceVersion(), time.Now()
	for time.Since(since) < quiet {
		if time.Since(t0) > limit {
			t.Logf("%s still changing after %s; starting anyway", d, limit)
			return
		}
		time.Sleep(500 * time.Millisecond)
		if now := d.get(t).GetResourceVersion(); now != rv {
			rv, since = now, time.Now()
		}
	}
	t.Logf("%s settled (resourceVersion %s unchanged for %s, after %s)", d, rv, quiet, time.Since(t0).Round(100*time.Millisecond))
}
