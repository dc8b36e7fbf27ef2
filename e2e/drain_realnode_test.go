//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/example/function-database/e2e/internal/kube"
	"github.com/example/function-database/e2e/internal/writer"
	"github.com/example/function-database/internal/checker"
)

// Drains, as `kubectl drain` does them: cordon the node, then evict its
// pods through the Eviction API (which the PodDisruptionBudget guards),
// retrying an eviction the budget refuses.

// poolWriter starts the checker's writer on the pool node without an
// instance (where), once; it returns when the first write was acknowledged.
func (s *suite) poolWriter(t *testing.T, ns, db, writerName string, where map[string]string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.k.CS.CoreV1().Pods(ns).Get(ctx, writerName, metav1.GetOptions{}); err == nil {
		return
	}
	used := map[string]bool{}
	for _, n := range where {
		used[n] = true
	}
	spare := ""
	for i := 1; i <= poolSize; i++ {
		if !used[poolNode(i)] {
			spare = poolNode(i)
			break
		}
	}
	if spare == "" {
		t.Fatalf("no pool node without an instance: %v", where)
	}
	w := s.writerPodSpec(ns, writerName, db)
	w.Spec.NodeSelector = map[string]string{corev1.LabelHostname: spare}
	if _, err := s.k.CS.CoreV1().Pods(ns).Create(ctx, w, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create writer pod: %v", err)
	}
	eventually(t, 2*time.Minute, "the writer's first acknowledged write", func() (bool, string) {
		log := s.podLog(ns, writerName, "writer")
		return !lastAcknowledged(writer.Parse(log)).IsZero(), lastLines(log, 3)
	})
	t.Logf("the writer writes from %s", spare)
}

// cordon marks node unschedulable (or schedulable again).
func (s *suite) cordon(t *testing.T, node string, unschedulable bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, unschedulable)
	if _, err := s.k.CS.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("cordon %s (%v): %v", node, unschedulable, err)
	}
}

// evict asks the Eviction API to evict pod: nil when accepted, a
// TooManyRequests error when a PodDisruptionBudget refuses it.
func (s *suite) evict(ns, pod string) error {
	return s.k.CS.CoreV1().Pods(ns).EvictV1(context.Background(), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns}})
}

// evictRetrying evicts pod as kubectl drain does: a refusal by the budget
// is retried every 2 s, up to timeout.
func (s *suite) evictRetrying(t *testing.T, ns, pod string, timeout time.Duration) {
	t.Helper()
	var last error
	eventually(t, timeout, "the eviction of "+pod+" accepted", func() (bool, string) {
		last = s.evict(ns, pod)
		return last == nil, fmt.Sprint(last)
	})
}

// waitPrimaryMoved waits, up to timeout, until status.primary names
// another pod than from, and returns it.
func (s *suite) waitPrimaryMoved(t *testing.T, d database, ns, db, from string, timeout time.Duration, what string) (to string) {
	t.Helper()
	eventually(t, timeout, what, func() (bool, string) {
		u := d.get(t)
		to = str(u, "status", "primary")
		c := kube.GetCondition(u, "Failover")
		return to != "" && to != from, fmt.Sprintf("primary %s; Failover %s %s: %s; %s; jobs: %s", to, c.Status, c.Reason, c.Message, s.podsState(ns, db), s.jobsState(ns))
	})
	return to
}

// beforeDrain waits until the Database is whole, starts the writer, and
// returns the primary, where each instance runs and the failover count.
func (s *suite) beforeDrain(t *testing.T, d database, ns, db, writerName string) (primary string, where map[string]string, count int64) {
	t.Helper()
	primary = s.waitWhole(t, d, ns, db, "before the drain", nil)
	where = s.placement(t, ns, db)
	s.poolWriter(t, ns, db, writerName, where)
	count, _, _ = unstructured.NestedInt64(d.get(t).Object, "status", "failover", "count")
	return primary, where, count
}

// drain cordons pod's node and evicts pod. It returns when the eviction was
// accepted, the pod's UID before it, and uncordon (idempotent: deferred
// too, so that a failed test leaves the node in service).
func (s *suite) drain(t *testing.T, ns, pod, node string) (fault time.Time, old types.UID, uncordon func()) {
	t.Helper()
	p, err := s.k.CS.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.cordon(t, node, true)
	done := false
	uncordon = func() {
		if !done {
			done = true
			s.cordon(t, node, false)
		}
	}
	fault = time.Now()
	s.evictRetrying(t, ns, pod, time.Minute)
	return fault, p.UID, uncordon
}

// waitRecreated waits until the StatefulSet created pod again (a new UID
// than old): on a cordoned node holding its volume, it stays Pending.
func (s *suite) waitRecreated(t *testing.T, ns, db, pod string, old types.UID) {
	t.Helper()
	eventually(t, 2*time.Minute, pod+" re-created, waiting for its cordoned node", func() (bool, string) {
		p, err := s.k.CS.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.UID != old, s.podsState(ns, db)
	})
}

// drainStandby drains the node of a standby while a second drain, of
// another standby's node, runs at the same time: the PodDisruptionBudget
// (maxUnavailable 1) admits the first eviction and refuses the second
// while the first instance is away; nothing fails over and nothing
// acknowledged is lost.
func (s *suite) drainStandby(t *testing.T, d database, ns, db, writerName string) {
	ctx := context.Background()
	primary, where, count := s.beforeDrain(t, d, ns, db, writerName)
	last, _, _ := unstructured.NestedMap(d.get(t).Object, "status", "failover", "last")
	var standbys []string
	for _, pod := range slices.Sorted(mapKeys(where)) {
		if pod != primary {
			standbys = append(standbys, pod)
		}
	}
	a, b := standbys[0], standbys[1]
	fault, old, uncordon := s.drain(t, ns, a, where[a])
	defer uncordon()
	t.Logf("drained %s: the standby %s evicted", where[a], a)
	// The second drain: refused while a is away.
	s.cordon(t, where[b], true)
	err := s.evict(ns, b)
	s.cordon(t, where[b], false)
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evicting the second standby %s while %s is away: %v, want refused by the PodDisruptionBudget (429)", b, a, err)
	}
	t.Logf("the second drain's eviction of %s refused while %s is away: %v", b, a, err)
	s.waitRecreated(t, ns, db, a, old)
	t.Logf("with %s cordoned: %s", where[a], kube.ConditionsString(d.get(t)))
	uncordon()
	back := time.Now()
	eventually(t, realReady, a+" ready on "+where[a]+" again", func() (bool, string) {
		p, err := s.k.CS.CoreV1().Pods(ns).Get(ctx, a, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return podReady(p) && p.Spec.NodeName == where[a], s.podsState(ns, db)
	})
	t.Logf("%s ready again %s after its node was uncordoned (away %s)", a, time.Since(back).Round(100*time.Millisecond), time.Since(fault).Round(time.Second))
	s.checkAfterFailover(t, d, ns, db, writerName, failoverCheck{
		scenario: "DrainStandby", durability: checker.Sync,
		from: primary, to: primary, fault: fault, promoted: time.Now(),
	})
	// Nothing promoted: the primary and the last recorded failover are
	// the same. A failover Job that found the primary answering and ended
	// without promoting (not-needed) counts in status.failover.count: on
	// a starved machine the primary's readiness probe can time out (10 s)
	// twice during the drain, which starts one (seen in a CI rehearsal
	// with the scripts level running beside); it is logged, not failed on.
	u := d.get(t)
	now, _, _ := unstructured.NestedMap(u.Object, "status", "failover", "last")
	if str(u, "status", "primary") != primary || !reflect.DeepEqual(now, last) {
		t.Errorf("a standby's drain moved the primary: %s, last failover %v (was %s, %v)", str(u, "status", "primary"), now, primary, last)
	}
	if c, _, _ := unstructured.NestedInt64(u.Object, "status", "failover", "count"); c != count {
		t.Logf("a failover Job ran during the standby's drain and promoted nothing (count %d, was %d): %s", c, count, kube.GetCondition(u, "Failover").Message)
	}
}

// drainPrimary drains the primary's node: the primary's preStop hook holds
// it while the function switches over to a standby on another node
// (status.failover.last.reason PrimaryStopping), so writes stop for
// seconds, not for a failover's grace and fence, and nothing acknowledged
// is lost. Uncordoned, the old primary rejoins as a standby.
func (s *suite) drainPrimary(t *testing.T, d database, ns, db, writerName string) {
	from, where, count := s.beforeDrain(t, d, ns, db, writerName)
	node := where[from]
	fault, old, uncordon := s.drain(t, ns, from, node)
	defer uncordon()
	t.Logf("drain of %s: the primary %s evicted", node, from)
	to := s.waitPrimaryMoved(t, d, ns, db, from, 2*time.Minute, "the primary moved off "+from)
	promoted := time.Now()
	u := d.get(t)
	t.Logf("%s (on %s) is the primary %s after the eviction", to, where[to], promoted.Sub(fault).Round(100*time.Millisecond))
	if r := str(u, "status", "failover", "last", "reason"); r != "PrimaryStopping" {
		t.Errorf("status.failover.last.reason %q, want PrimaryStopping (a switchover from the stopping primary, not a failover)", r)
	}
	if where[to] == node {
		t.Errorf("the primary moved to %s on the drained node %s", to, node)
	}
	eventually(t, 2*time.Minute, "writes acknowledged through "+db+" after the switchover", func() (bool, string) {
		log := s.podLog(ns, writerName, "writer")
		return lastAcknowledged(writer.Parse(log)).After(promoted), lastLines(log, 3)
	})
	rto := checker.MeasureRTO(writer.Parse(s.podLog(ns, writerName, "writer")), fault)
	t.Logf("drain of the primary's node: writes acknowledged again on the new timeline %s after the eviction (longest gap between acknowledged writes %s)", duration(rto.NewTimeline), duration(rto.Outage))
	s.waitRecreated(t, ns, db, from, old)
	if c := kube.GetCondition(d.get(t), "Instances"); !strings.Contains(c.Message, from) {
		t.Errorf("condition Instances does not name %s, away on the cordoned node: %s %s: %s", from, c.Status, c.Reason, c.Message)
	} else {
		t.Logf("with %s cordoned: Instances %s: %s", node, c.Reason, c.Message)
	}
	uncordon()
	r := s.checkAfterFailover(t, d, ns, db, writerName, failoverCheck{
		scenario: "DrainPrimary", durability: checker.Sync, noLoss: true,
		from: from, to: to, fault: fault, promoted: promoted,
	})
	how := s.rejoinedBy(ns, from)
	if how == "" {
		how = "streaming alone"
	}
	t.Logf("the old primary %s rejoined by %s; the writes' outage %s", from, how, duration(r.RTO.Outage))
	if c, _, _ := unstructured.NestedInt64(d.get(t).Object, "status", "failover", "count"); c != count+1 {
		t.Errorf("status.failover.count %d, want %d: one switchover", c, count+1)
	}
}
