//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientretry "k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/example/function-database/e2e/internal/cluster"
	"github.com/example/function-database/e2e/internal/kube"
	"github.com/example/function-database/e2e/internal/writer"
	"github.com/example/function-database/internal/checker"
)

// The pool: real nodes beside the first one, started by TestNodes alone and
// stopped at its end, so the rest of the suite runs as before. Each is a
// kubelet and a containerd of its own (own root, state, socket, CNI range on
// the shared bridge, cgroup root /e2e-<node>); kube-proxy, CoreDNS,
// kube-router and the API server's forwarder stay the first node's, one for
// the machine's one network namespace (every kubelet reports the bridge
// address, and the API server reaches each on its own port).
//
// The pool's nodes carry poolLabel and a zone each, not type=real: the
// function's pod and every other real namespace's pods stay on the first
// node (killing a pool node never takes the function with it), and the
// pool's namespace selects poolLabel.
const (
	poolLabel = "e2e.function-database/pool"
	// Four nodes: a large Database's three instances on three of them, one
	// a node (spread Required), and the fourth for the writer and for the
	// instance NodeGoneForGood rebuilds. (Before spread selected the
	// instance pods only, the failover Job could run only there too.)
	poolSize        = 4
	poolClass       = "e2e-nodes" // WaitForFirstConsumer, the suite's provisioner
	poolComposition = "database-nodes"
)

func poolNode(i int) string { return fmt.Sprintf("pool-node-%d", i) }

func poolZone(i int) string { return fmt.Sprintf("zone-%d", i) }

// startPool starts the pool's nodes (in parallel), the StorageClass their
// claims use, and a Composition with the function's default spread
// (Required: one node per instance), that class, and the WAL archive and
// full backups in store's bucket (backups off the nodes: issue 22 item 6).
// It returns once every node is Ready; t's cleanup stops them all.
func (s *suite) startPool(t *testing.T, store *objectStore) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	nodes := make([]*cluster.Node, poolSize)
	errs := make([]error, poolSize)
	var wg sync.WaitGroup
	for i := range poolSize {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = s.startPoolNode(ctx, i+1)
		}()
	}
	wg.Wait()
	s.mu.Lock()
	s.pool = nodes
	s.mu.Unlock()
	t.Cleanup(func() { s.stopPool() })
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("pool: %v", err)
	}
	if err := s.ensurePoolClass(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.applyComposition(ctx, poolComposition, func(input map[string]any) {
		delete(input, "spread") // the default: Required
		input["storageClassName"] = poolClass
		store.archiveInput(map[string]any{"enabled": false})(input)
		// The default archive_timeout (60 s), not TestBackups' 10 s: each
		// timeout with a write switches to a new 16MB segment, and a 1Gi
		// volume's slot bound (128MB) then lasted 80 s of a node's death;
		// PrimaryNodeDies keeps the node down longer (BackupAfterNodeLoss
		// runs meanwhile), its slot was invalidated and the old primary
		// could only be cloned, not rewound (docs/limits.md; scripts
		// TestRejoinAfterSlotLost proves that path).
		delete(input["objectStorage"].(map[string]any), "archiveTimeoutSeconds")
	}); err != nil {
		t.Fatalf("Composition %s: %v", poolComposition, err)
	}
	logf("pool: %d nodes Ready in %s", poolSize, time.Since(t0).Round(time.Millisecond))
	t.Logf("pool: %d nodes Ready in %s", poolSize, time.Since(t0).Round(time.Millisecond))
}

// ensurePoolClass creates the StorageClass of the pool's and the lanes'
// claims: the suite's provisioner, a volume on the node the scheduler picks.
func (s *suite) ensurePoolClass(ctx context.Context) error {
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: poolClass},
		Provisioner:       cluster.Provisioner,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimRetain),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
	if _, err := s.k.CS.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("StorageClass %s: %w", poolClass, err)
	}
	return nil
}

// startPoolNode starts pool node i (1-based): containerd with the first
// node's images, and a kubelet.
func (s *suite) startPoolNode(ctx context.Context, i int) (*cluster.Node, error) {
	third := 128 + 32*(i-1) // 10.88.128.0 - 10.88.255.255, 32 /24s a node
	return cluster.StartExtraNode(ctx, s.node, cluster.ExtraNode{
		Name:       poolNode(i),
		Labels:     fmt.Sprintf("%s=true,%s=%s", poolLabel, corev1.LabelTopologyZone, poolZone(i)),
		RangeStart: fmt.Sprintf("10.88.%d.1", third), RangeEnd: fmt.Sprintf("10.88.%d.254", third+31),
	})
}

// stopPool stops every pool node and deletes its Node: the tests after
// TestNodes see the cluster they always did.
func (s *suite) stopPool() {
	s.mu.Lock()
	pool := s.pool
	s.pool = nil
	s.mu.Unlock()
	if len(pool) == 0 {
		return
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	for _, n := range pool {
		if n == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.Stop()
		}()
	}
	wg.Wait()
	cluster.RemovePodNetns()
	logf("pool: %d nodes stopped in %s", len(pool), time.Since(t0).Round(time.Millisecond))
}

// poolNamespace makes a namespace whose pods go to the pool's nodes.
func (s *suite) poolNamespace(t *testing.T, ns string) {
	s.nodeNamespace(t, ns, poolLabel+"=true")
}

// poolNodeNamed is the pool's node of this name, nil if none.
func (s *suite) poolNodeNamed(name string) *cluster.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.pool {
		if n != nil && n.Name == name {
			return n
		}
	}
	return nil
}

// placement maps each instance pod of the Database to its node.
func (s *suite) placement(t *testing.T, ns, db string) map[string]string {
	t.Helper()
	pods, err := s.instancePods(ns, db)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods {
		out[p.Name] = p.Spec.NodeName
	}
	return out
}

// TestNodes runs a Database on several real nodes: its instances one a
// node (the function's default, spread Required), then drains, its
// primary's node killed, a standby's node lost for good, and the primary's
// node killed with one of the function's two replicas, while the checker's
// client writes. Run it alone with `hack/e2e.sh -run '^TestNodes$'`.
func TestNodes(t *testing.T) {
	s := env
	s.realNode(t)
	store := s.objectStorage(t)
	s.startPool(t, store)
	const ns, db, writerName = "nodes-real", "ledger", "writer"
	s.poolNamespace(t, ns)
	r := &nodesRun{ns: ns, db: db, writerName: writerName, store: store}
	t.Cleanup(func() {
		if r.d.name != "" {
			s.removeDatabases(t, r.d)
		}
	})
	// Four tables, so that the steps stop where they always did: Spread
	// makes the Database every step after works on; a failed drain does not
	// stop the steps after it; a failed node's death ends the test.
	if !s.steps(t, []step{
		{name: "Spread", needed: true, run: func(t *testing.T) { s.spread(t, r) }},
	}) {
		return
	}
	// Drains first: they leave every instance on its node.
	s.steps(t, []step{
		{name: "DrainStandby", run: func(t *testing.T) { s.drainStandby(t, r.d, r.ns, r.db, r.writerName) }},
		{name: "DrainPrimary", run: func(t *testing.T) { s.drainPrimary(t, r.d, r.ns, r.db, r.writerName) }},
	})
	if !s.steps(t, []step{
		{name: "PrimaryNodeDies", needed: true, run: func(t *testing.T) { s.primaryNodeDies(t, r) }},
		{name: "NodeGoneForGood", needed: true, run: func(t *testing.T) { s.nodeGoneForGood(t, r.d, r.ns, r.db, r.writerName) }},
	}) {
		return
	}
	// Last: it moves the function's Deployment to two pool nodes and back.
	s.steps(t, []step{
		{name: "FunctionNodeDies", run: func(t *testing.T) { s.functionNodeDies(t, r.d, r.ns, r.db, r.writerName) }},
	})
}

// nodesRun is what TestNodes's steps share.
type nodesRun struct {
	ns, db, writerName string // the namespace, the Database, the checker's client pod
	// d is the Database, set as soon as it exists: the test's cleanup
	// removes it.
	d     database
	where map[string]string // instance pod → node, as Spread found them
	store *objectStore      // the bucket the Database archives and backs up to
}

// spread: a large Database on the pool runs its instances one a node, in a
// zone each (the function's default, spread Required), each one's data
// volume a folder of its node and bound to it; Scheduled says OneNodeEach
// and the primary is ordinal 0.
func (s *suite) spread(t *testing.T, r *nodesRun) {
	ns, db := r.ns, r.db
	// Backups on (on the function's default schedule): the full backups go
	// to the bucket, as the WAL archive does, so that BackupAfterNodeLoss
	// can ask for one with the primary's node dead.
	u := realDatabase(t, ns, db, "large", map[string]any{"durability": "sync"})
	if err := unstructured.SetNestedField(u.Object, poolComposition, "spec", "crossplane", "compositionRef", "name"); err != nil {
		t.Fatal(err)
	}
	r.d = s.create(t, u)
	u = s.waitRealReady(t, r.d)
	t.Logf("Ready: %s", kube.ConditionsString(u))
	r.where = s.placement(t, ns, db)
	where := r.where
	if len(where) != 3 {
		t.Fatalf("want 3 instance pods: %v", where)
	}
	nodes, zones := map[string]bool{}, map[string]bool{}
	var lines []string
	for _, pod := range slices.Sorted(mapKeys(where)) {
		name := where[pod]
		nd, err := s.k.CS.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		zone := nd.Labels[corev1.LabelTopologyZone]
		if nd.Labels[poolLabel] != "true" {
			t.Errorf("%s runs on %s, not a pool node", pod, name)
		}
		nodes[name], zones[zone] = true, true
		// Its data volume is a folder of that node, with its affinity.
		pvc, err := s.k.CS.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), "data-"+pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pv, err := s.k.CS.CoreV1().PersistentVolumes().Get(context.Background(), pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pv.Spec.HostPath == nil || !strings.HasPrefix(pv.Spec.HostPath.Path, s.cl.VolumesOf(name)+"/") {
			t.Errorf("%s's volume %s is not a folder of %s: %+v", pod, pv.Name, name, pv.Spec.HostPath)
		}
		if na := pv.Spec.NodeAffinity; na == nil || na.Required == nil || len(na.Required.NodeSelectorTerms) != 1 ||
			!slices.Equal(na.Required.NodeSelectorTerms[0].MatchExpressions[0].Values, []string{name}) {
			t.Errorf("%s's volume %s is not bound to %s: %+v", pod, pv.Name, name, na)
		}
		lines = append(lines, fmt.Sprintf("%s on %s (%s)", pod, name, zone))
	}
	t.Logf("instances: %s", strings.Join(lines, ", "))
	if len(nodes) != 3 || len(zones) != 3 {
		t.Errorf("want the 3 instances on 3 nodes in 3 zones: %s", strings.Join(lines, ", "))
	}
	if c := kube.GetCondition(u, "Scheduled"); c.Status != "True" || c.Reason != "OneNodeEach" {
		t.Errorf("Scheduled %s/%s (%s), want True/OneNodeEach", c.Status, c.Reason, c.Message)
	}
	if p := str(u, "status", "primary"); p != db+"-0" {
		t.Errorf("status.primary %q, want %s-0", p, db)
	}
}

// postgresTail is the last n lines of the pod's postgres container's log
// (its previous container's if previous), less the configuration noise.
func (s *suite) postgresTail(ns, pod string, previous bool, n int) string {
	b, err := s.k.CS.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "postgres", Previous: previous}).DoRaw(context.Background())
	if err != nil {
		return "(" + err.Error() + ")"
	}
	var lines []string
	for l := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if !strings.Contains(l, "skipping missing configuration file") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// postmasterPID is the first line of the instance's postmaster.pid, read
// from its volume's folder on this machine ("none" when there is none).
func (s *suite) postmasterPID(ns, pod string) string {
	ctx := context.Background()
	pvc, err := s.k.CS.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-"+pod, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	pv, err := s.k.CS.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.HostPath == nil {
		return fmt.Sprintf("(no hostPath volume: %v)", err)
	}
	b, err := os.ReadFile(filepath.Join(pv.Spec.HostPath.Path, "pgdata", "postmaster.pid"))
	if err != nil {
		return "none"
	}
	pid, _, _ := strings.Cut(string(b), "\n")
	return pid
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// primaryNodeDies kills the node of the Database's primary while the
// checker's client writes from the pool's spare node (where the failover
// Job runs too): the node goes NotReady, a standby is promoted, writes are
// acknowledged again through the rw Service; while the node is dead,
// BackupAfterNodeLoss; then the node comes back and the old primary rejoins
// as a standby. Nothing acknowledged may be lost (durability sync).
func (s *suite) primaryNodeDies(t *testing.T, r *nodesRun) {
	s.primaryNodeDiesAs(t, "PrimaryNodeDies", r.d, r.ns, r.db, r.writerName, r.where, 4*time.Minute, func(t *testing.T, from, to, dead string) {
		t.Run("BackupAfterNodeLoss", func(t *testing.T) { s.backupAfterNodeLoss(t, r, from, to, dead) })
	})
}

// primaryNodeDiesAs is primaryNodeDies for a scenario of this name, waiting
// at most promoteWithin for the promotion; whileDead, if not nil, runs once
// writes are acknowledged again, before the node comes back.
func (s *suite) primaryNodeDiesAs(t *testing.T, scenario string, d database, ns, db, writerName string, where map[string]string, promoteWithin time.Duration, whileDead func(t *testing.T, from, to, dead string)) {
	ctx := context.Background()
	s.poolWriter(t, ns, db, writerName, where)
	w, err := s.k.CS.CoreV1().Pods(ns).Get(ctx, writerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spare := w.Spec.NodeName

	u := d.get(t)
	from := str(u, "status", "primary")
	count, _, _ := unstructured.NestedInt64(u.Object, "status", "failover", "count")
	victim := s.poolNodeNamed(where[from])
	if victim == nil {
		t.Fatalf("the primary %s runs on %q, not a pool node", from, where[from])
	}
	t.Logf("the writer writes from %s; killing %s, the node of the primary %s", spare, victim.Name, from)
	// The postmaster's lock file, which the kill leaves behind (the
	// entrypoint execs postgres: the PID is the entrypoint's in its
	// container).
	t.Logf("%s's postmaster.pid names PID %s", from, s.postmasterPID(ns, from))

	lost := time.Now()
	killed, err := victim.Kill()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s: kubelet, containerd and %d processes (shims, containers) in %s", victim.Name, killed, time.Since(lost).Round(time.Millisecond))
	revived := false
	defer func() {
		if !revived { // the test failed before: the node comes back for the cleanup
			_ = victim.Revive(ctx)
		}
	}()

	eventually(t, 2*time.Minute, victim.Name+" NotReady", func() (bool, string) {
		nd, err := s.k.CS.CoreV1().Nodes().Get(ctx, victim.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return !cluster.NodeReady(nd), fmt.Sprintf("%v", nd.Status.Conditions)
	})
	notReady := time.Since(lost)
	t.Logf("%s NotReady %s after its death", victim.Name, notReady.Round(100*time.Millisecond))

	to := s.waitPrimaryMoved(t, d, ns, db, from, promoteWithin, "a standby promoted in place of "+from)
	promoted := time.Now()
	t.Logf("%s (on %s) promoted in place of %s %s after the node's death", to, where[to], from, promoted.Sub(lost).Round(100*time.Millisecond))
	eventually(t, 2*time.Minute, "writes acknowledged through "+db+" after the promotion", func() (bool, string) {
		log := s.podLog(ns, writerName, "writer")
		return lastAcknowledged(writer.Parse(log)).After(promoted), lastLines(log, 3)
	})
	rto := checker.MeasureRTO(writer.Parse(s.podLog(ns, writerName, "writer")), lost)
	t.Logf("writes acknowledged again on the new timeline %s after the node's death (longest gap between acknowledged writes %s)", duration(rto.NewTimeline), duration(rto.Outage))
	// The Database names the instance on the dead node, and the node.
	eventually(t, time.Minute, "condition Instances naming "+from+" on "+victim.Name, func() (bool, string) {
		c := kube.GetCondition(d.get(t), "Instances")
		return c.Status == "False" && strings.Contains(c.Message, from+" on node "+victim.Name), fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
	})
	t.Logf("with %s dead: %s", victim.Name, kube.ConditionsString(d.get(t)))
	if whileDead != nil {
		whileDead(t, from, to, victim.Name)
	}

	back := time.Now()
	if err := victim.Revive(ctx); err != nil {
		t.Fatalf("revive %s: %v", victim.Name, err)
	}
	revived = true
	t.Logf("%s Ready again %s after its restart (down %s)", victim.Name, time.Since(back).Round(100*time.Millisecond), time.Since(lost).Round(time.Second))
	// The old primary's pod runs again on the same node: its containers
	// start in a new sandbox (a new PID namespace, shared by the pod's
	// containers), with the volumes and emptyDirs of before. While it is
	// not ready, its postgres logs say why.
	wedged := ""
	eventually(t, realReady, "the old primary "+from+" ready again", func() (bool, string) {
		p, err := s.k.CS.CoreV1().Pods(ns).Get(ctx, from, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cur, prev := s.postgresTail(ns, from, false, 8), s.postgresTail(ns, from, true, 8)
		// The wedge the entrypoint's clear_stale_locks mends (notes/
		// issue-22.md, session 18): the socket's lock file in the pod's
		// run emptyDir named the dead sandbox's postmaster PID; when that
		// PID was alive in the new sandbox, every postmaster refused to
		// start, restart after restart. Reported as a failure; the pod is
		// deleted (a new emptyDir), as an operator would, so that the rest
		// of the scenario still checks the data.
		if wedged == "" && strings.Contains(cur+prev, `.s.PGSQL.5432.lock" already exists`) && postgresRestarts(p) >= 3 {
			wedged = cur + " | " + prev
			if i := strings.Index(wedged, "FATAL:  lock file"); i >= 0 {
				wedged = wedged[i:min(len(wedged), i+200)]
			}
			t.Errorf("the old primary %s cannot start: its socket's stale lock file names a PID alive in its new sandbox (%d restarts): %s", from, postgresRestarts(p), wedged)
			if err := s.k.CS.CoreV1().Pods(ns).Delete(ctx, from, metav1.DeleteOptions{}); err != nil {
				t.Errorf("delete %s: %v", from, err)
			}
			return false, "deleted the wedged pod"
		}
		return podReady(p) && p.DeletionTimestamp == nil, fmt.Sprintf("%s; restarts %d; its postgres log: %s; before: %s", s.podsState(ns, db), postgresRestarts(p), cur, prev)
	})
	// The old primary rejoins by pg_rewind: the kill left its lock files
	// naming a PID that may be alive in the new sandbox, and before
	// clear_stale_locks pg_rewind's crash recovery refused them and the
	// entrypoint cloned the whole database instead (six runs of ten).
	s.checkAfterFailover(t, d, ns, db, writerName, failoverCheck{
		scenario: scenario, durability: checker.Sync,
		from: from, to: to, fault: lost, promoted: promoted,
	})
	how := s.rejoinedBy(ns, from)
	t.Logf("the old primary %s rejoined as a standby by %s %s after its node's restart; its postmaster's PID in its container is %s", from, how, time.Since(back).Round(time.Second), s.postmasterPID(ns, from))
	if how != rejoinRewind {
		t.Errorf("the old primary %s rejoined by %s, want %s", from, how, rejoinRewind)
		for _, previous := range []bool{false, true} {
			b, _ := s.k.CS.CoreV1().Pods(ns).GetLogs(from, &corev1.PodLogOptions{Container: "postgres", Previous: previous}).DoRaw(ctx)
			for l := range strings.SplitSeq(string(b), "\n") {
				if strings.Contains(l, "pg_rewind") || strings.Contains(l, "lock file") {
					t.Logf("  %s", l)
				}
			}
		}
	}
	if c, _, _ := unstructured.NestedInt64(d.get(t).Object, "status", "failover", "count"); c <= count {
		t.Errorf("status.failover.count %d, want more than %d", c, count)
	}
	if r := str(d.get(t), "status", "failover", "last", "reason"); r != "PrimaryLost" {
		t.Errorf("status.failover.last.reason %q, want PrimaryLost", r)
	}
}

// nodeGoneForGood loses a standby's node for good and follows the
// procedure of docs/failover.md ("A node lost for good"): the node tainted
// out of service (non-graceful node shutdown: its pods are deleted by
// force), the lost instance's claims and its re-created, pending pod
// deleted (their volumes are on the dead node); the StatefulSet creates pod
// and claims again, the scheduler places the pod on the one node without an
// instance, and the standby clones the primary there. The writer writes
// all along; nothing acknowledged may be lost.
func (s *suite) nodeGoneForGood(t *testing.T, d database, ns, db, writerName string) {
	ctx := context.Background()
	primary := s.waitWhole(t, d, ns, db, "before the node is lost", nil)
	where := s.placement(t, ns, db)
	w, err := s.k.CS.CoreV1().Pods(ns).Get(ctx, writerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spare := w.Spec.NodeName
	lost := "" // the standby whose node is lost
	for _, pod := range slices.Sorted(mapKeys(where)) {
		if pod != primary {
			lost = pod
			break
		}
	}
	victim := s.poolNodeNamed(where[lost])
	if victim == nil || victim.Name == spare {
		t.Fatalf("the standby %s runs on %q, not a pool node of its own", lost, where[lost])
	}
	old, err := s.k.CS.CoreV1().Pods(ns).Get(ctx, lost, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fault := time.Now()
	killed, err := victim.Kill()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s, the standby %s's node, for good (%d processes)", victim.Name, lost, killed)
	defer func() {
		// Failed half way: the dead node's pods would hold the Database's
		// removal (its pods never finish terminating there).
		if t.Failed() {
			pods, _ := s.instancePods(ns, db)
			for _, p := range pods {
				if p.Spec.NodeName == victim.Name {
					_ = s.k.CS.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
				}
			}
		}
	}()
	eventually(t, 2*time.Minute, victim.Name+" NotReady", func() (bool, string) {
		nd, err := s.k.CS.CoreV1().Nodes().Get(ctx, victim.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return !cluster.NodeReady(nd), fmt.Sprintf("%v", nd.Status.Conditions)
	})
	t.Logf("%s NotReady %s after its death", victim.Name, time.Since(fault).Round(100*time.Millisecond))

	// 1. Out of service: the taint eviction and the pod GC delete its pods
	// by force.
	// The node lifecycle controller taints the node (unreachable) at
	// about the same time: read and update again on a conflict.
	if err := clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
		nd, err := s.k.CS.CoreV1().Nodes().Get(ctx, victim.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		nd.Spec.Taints = append(nd.Spec.Taints, corev1.Taint{Key: "node.kubernetes.io/out-of-service", Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		_, err = s.k.CS.CoreV1().Nodes().Update(ctx, nd, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("taint %s out of service: %v", victim.Name, err)
	}
	tainted := time.Now()
	eventually(t, 2*time.Minute, "the pod "+lost+" on "+victim.Name+" deleted", func() (bool, string) {
		p, err := s.k.CS.CoreV1().Pods(ns).Get(ctx, lost, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return p.UID != old.UID, fmt.Sprintf("%s on %s, deletionTimestamp %v", p.Name, p.Spec.NodeName, p.DeletionTimestamp)
	})
	t.Logf("%s's pod deleted %s after the taint", lost, time.Since(tainted).Round(100*time.Millisecond))
	t.Logf("with %s out of service: %s", victim.Name, kube.ConditionsString(d.get(t)))
	// 2. Its claims (bound to volumes on the dead node), then the pending
	// pod that holds them (pvc-protection).
	var claims []string
	for _, v := range s.statefulSet(t, ns, db).Spec.VolumeClaimTemplates {
		claims = append(claims, v.Name+"-"+lost)
	}
	for _, c := range claims {
		if err := s.k.CS.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, c, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete claim %s: %v", c, err)
		}
	}
	if err := s.k.CS.CoreV1().Pods(ns).Delete(ctx, lost, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete the pending pod %s: %v", lost, err)
	}
	t.Logf("deleted %s's claims (%s) and its pending pod", lost, strings.Join(claims, ", "))
	var placed string
	eventually(t, realReady, lost+" re-created on another node and ready", func() (bool, string) {
		p, err := s.k.CS.CoreV1().Pods(ns).Get(ctx, lost, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		placed = p.Spec.NodeName
		return placed != "" && placed != victim.Name && podReady(p), s.podsState(ns, db) + "; " + s.postgresTail(ns, lost, false, 4)
	})
	t.Logf("%s ready on %s %s after the node's death (%s after the taint)", lost, placed, time.Since(fault).Round(time.Second), time.Since(tainted).Round(time.Second))
	if placed != spare {
		t.Errorf("%s placed on %s, want %s, the one node without an instance", lost, placed, spare)
	}
	if how := s.rejoinedBy(ns, lost); how != rejoinClone {
		t.Errorf("%s on its new node: %s, want a clone", lost, how)
	}
	s.checkAfterFailover(t, d, ns, db, writerName, failoverCheck{
		scenario: "NodeGoneForGood", durability: checker.Sync,
		from: primary, to: primary, fault: fault, promoted: time.Now(),
	})
}
