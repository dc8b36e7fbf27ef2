//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/example/function-database/e2e/internal/kube"
	"github.com/example/function-database/internal/checker"
)

// rollWatch is what a supervised roll did to one Database, as seen from
// outside by polling: each instance's pod replacements, the primary status
// named at each, and the most instances down at once.
type rollWatch struct {
	d        database
	ns, db   string
	from     string // status.primary before the roll
	revision string // the StatefulSet's updateRevision before it
	count    string // status.failover.count before it
	replicas int
	uids     map[string]types.UID
	replaced map[string]int
	// asPrimary lists pods replaced while status.primary named them (the
	// roll must switch over first).
	asPrimary []string
	maxDown   int
	primaries []string  // status.primary, each change in order
	promoted  time.Time // when status.primary last moved
	done      bool
}

// watchRoll starts watching db before its pod template changes.
func (s *suite) watchRoll(t *testing.T, d database, ns, db string) *rollWatch {
	t.Helper()
	u := d.get(t)
	w := &rollWatch{
		d: d, ns: ns, db: db,
		from: str(u, "status", "primary"), count: str(u, "status", "failover", "count"),
		revision: s.statefulSet(t, ns, db).Status.UpdateRevision,
		uids:     map[string]types.UID{}, replaced: map[string]int{},
	}
	w.primaries = []string{w.from}
	pods, err := s.instancePods(ns, db)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		w.uids[p.Name] = p.UID
	}
	w.replicas = len(pods)
	return w
}

// poll looks once; true once the roll is over: a new revision on every
// instance, every instance ready, condition Updated True.
func (w *rollWatch) poll(t *testing.T, s *suite) (bool, string) {
	x := w.d.get(t)
	primary := str(x, "status", "primary")
	if primary != w.primaries[len(w.primaries)-1] {
		w.primaries = append(w.primaries, primary)
		w.promoted = time.Now()
	}
	pods, err := s.instancePods(w.ns, w.db)
	if err != nil {
		return false, err.Error()
	}
	ready := 0
	for _, p := range pods {
		if old, ok := w.uids[p.Name]; ok && old != p.UID {
			w.replaced[p.Name]++
			if p.Name == primary && w.replicas > 1 {
				w.asPrimary = append(w.asPrimary, p.Name)
			}
		}
		w.uids[p.Name] = p.UID
		if podReady(p) {
			ready++
		}
	}
	w.maxDown = max(w.maxDown, w.replicas-ready)
	sts := s.statefulSet(t, w.ns, w.db)
	st, n := sts.Status, ptrInt(sts.Spec.Replicas)
	c := kube.GetCondition(x, "Updated")
	w.done = sts.Generation == st.ObservedGeneration && st.UpdateRevision != w.revision && st.UpdateRevision == st.CurrentRevision &&
		st.ReadyReplicas == n && st.UpdatedReplicas == n && c.Status == "True"
	return w.done, fmt.Sprintf("%s: Updated %s %s: %s; primary %s; %s", w.db, c.Status, c.Reason, c.Message, primary, s.podsState(w.ns, w.db))
}

// verify checks what the supervised roll promises: every instance replaced
// once, never while it was the primary (several instances), one down at
// most, and the primary moved by a switchover.
func (w *rollWatch) verify(t *testing.T, took time.Duration) {
	t.Helper()
	t.Logf("roll of %s: %s; primaries %v; pods replaced %v; at most %d down at once; status.failover.count %q → %q",
		w.db, took.Round(time.Second), w.primaries, w.replaced, w.maxDown, w.count, str(w.d.get(t), "status", "failover", "count"))
	for name := range w.uids {
		if w.replaced[name] != 1 {
			t.Errorf("%s replaced %d times by the roll, want once", name, w.replaced[name])
		}
	}
	if len(w.asPrimary) > 0 {
		t.Errorf("replaced while status.primary named them: %v", w.asPrimary)
	}
	if w.maxDown > 1 {
		t.Errorf("%s: %d instances down at once during the roll", w.db, w.maxDown)
	}
	if w.replicas > 1 && len(w.primaries) < 2 {
		t.Errorf("%s: the primary never moved (%v): the roll restarted it in place", w.db, w.primaries)
	}
}

// checkRollWrites runs the checker over the writer's log across the roll:
// no acknowledged write lost, none acknowledged by a deposed primary; it
// logs the longest gap between two acknowledged writes.
func (s *suite) checkRollWrites(t *testing.T, w *rollWatch, writerName string, start time.Time) {
	t.Helper()
	u := w.d.get(t)
	if len(w.primaries) != 2 || str(u, "status", "primary") != w.primaries[1] {
		// The checker judges one promotion: with two, what the interim
		// primary acknowledged would count as a deposed primary's.
		t.Fatalf("%s: the primary moved %v (status.primary now %s): the scenario must make one switchover for the checker", w.db, w.primaries, str(u, "status", "primary"))
	}
	if r := str(u, "status", "failover", "last", "reason"); r != "Update" {
		t.Errorf("%s: status.failover.last.reason %q, want Update", w.db, r)
	}
	r := s.checkAfterFailover(t, w.d, w.ns, w.db, writerName, failoverCheck{
		scenario: "SupervisedRoll", durability: checker.Durability(str(u, "spec", "durability")), noLoss: true,
		from: w.from, to: str(u, "status", "primary"), fault: start, promoted: w.promoted,
	})
	t.Logf("%s: the longest gap between two acknowledged writes during the roll: %s", w.db, duration(r.RTO.Outage))
}

// supervisedRoll changes the Database's pod template with patch (a minor
// version: image is the one it must end on) and checks the roll
// (rollWatch.verify); with a writer (writerName not empty) the checker too.
func (s *suite) supervisedRoll(t *testing.T, d database, ns, db, writerName, patch, image string) {
	t.Helper()
	w := s.watchRoll(t, d, ns, db)
	start := time.Now()
	u := d.patch(t, patch)
	s.waitSynced(t, d, u.GetGeneration())
	eventually(t, 10*time.Minute, fmt.Sprintf("every instance of %s on %s, Updated=True", db, image), func() (bool, string) {
		done, state := w.poll(t, s)
		sts := s.statefulSet(t, ns, db)
		if c := container(sts, "postgres"); c == nil || c.Image != image {
			return false, "not on " + image + " yet; " + state
		}
		return done, state
	})
	s.waitRealReady(t, d)
	w.verify(t, time.Since(start))
	if writerName != "" {
		s.checkRollWrites(t, w, writerName, start)
	}
}
