//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/example/function-database/internal/checker"
)

// rollWatch is what a supervised roll did, as seen from outside by polling:
// each instance's pod replacements, the primary status named at each, and
// the most instances down at once.
type rollWatch struct {
	uids     map[string]types.UID
	replaced map[string]int
	// asPrimary lists pods replaced while status.primary named them (the
	// roll must switch over first).
	asPrimary []string
	maxDown   int
	primaries []string // status.primary, each change in order
}

// supervisedRoll changes the Database's pod template (a minor version:
// version and patch) while the writer writes, and checks what the
// supervised roll promises (roll.go): every instance replaced once, never
// while it is the primary (a switchover first, reason Update), one instance
// down at most, and, by the checker, no acknowledged write lost and none
// acknowledged by a deposed primary; the write gap is measured. Without a
// writer (writerName empty), the checker is not run.
func (s *suite) supervisedRoll(t *testing.T, d database, ns, db, writerName, patch, image string) {
	t.Helper()
	u := d.get(t)
	from := str(u, "status", "primary")
	count := str(u, "status", "failover", "count")
	w := &rollWatch{uids: map[string]types.UID{}, replaced: map[string]int{}, primaries: []string{from}}
	replicas := 0
	pods, err := s.instancePods(ns, db)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		w.uids[p.Name] = p.UID
		replicas++
	}
	start := time.Now()
	var promoted time.Time
	u = d.patch(t, patch)
	s.waitSynced(t, d, u.GetGeneration())
	eventually(t, 10*time.Minute, fmt.Sprintf("every instance of %s on %s, Updated=True", db, image), func() (bool, string) {
		x := d.get(t)
		primary := str(x, "status", "primary")
		if primary != w.primaries[len(w.primaries)-1] {
			w.primaries = append(w.primaries, primary)
			if promoted.IsZero() {
				promoted = time.Now()
			}
		}
		pods, err := s.instancePods(ns, db)
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, p := range pods {
			if old, ok := w.uids[p.Name]; ok && old != p.UID {
				w.replaced[p.Name]++
				if p.Name == primary {
					w.asPrimary = append(w.asPrimary, p.Name)
				}
			}
			w.uids[p.Name] = p.UID
			if podReady(p) {
				ready++
			}
		}
		w.maxDown = max(w.maxDown, replicas-ready)
		sts := s.statefulSet(t, ns, db)
		img := ""
		if c := container(sts, "postgres"); c != nil {
			img = c.Image
		}
		st, n := sts.Status, ptrInt(sts.Spec.Replicas)
		c := getCondition(x, "Updated")
		done := img == image && st.UpdateRevision == st.CurrentRevision && st.ReadyReplicas == n && st.UpdatedReplicas == n && c.Status == "True"
		return done, fmt.Sprintf("Updated %s %s: %s; primary %s; %s", c.Status, c.Reason, c.Message, primary, s.podsState(ns, db))
	})
	u = s.waitRealReady(t, d)
	to := str(u, "status", "primary")
	t.Logf("roll of %s to %s: %s; primaries %v; pods replaced %v; at most %d down at once",
		db, image, time.Since(start).Round(time.Second), w.primaries, w.replaced, w.maxDown)
	for _, p := range pods {
		if w.replaced[p.Name] != 1 {
			t.Errorf("%s replaced %d times by the roll, want once", p.Name, w.replaced[p.Name])
		}
	}
	if len(w.asPrimary) > 0 {
		t.Errorf("replaced while status.primary named them: %v", w.asPrimary)
	}
	if w.maxDown > 1 {
		t.Errorf("%d instances down at once during the roll", w.maxDown)
	}
	if len(w.primaries) < 2 {
		t.Fatalf("the primary never moved (%v): the roll restarted it in place", w.primaries)
	}
	if r := str(u, "status", "failover", "last", "reason"); r != "Update" && !strings.Contains(patch, `"primary"`) {
		t.Errorf("status.failover.last.reason %q, want Update", r)
	}
	t.Logf("status.failover.count %s → %s", count, str(u, "status", "failover", "count"))
	if to == from || writerName == "" {
		// No writer to check, or spec.primary brought the primary back (the
		// last switchover is not the roll's).
		return
	}
	durability := checker.Durability(str(u, "spec", "durability"))
	r := s.checkAfterFailover(t, d, ns, db, writerName, failoverCheck{
		scenario: "SupervisedRoll", durability: durability, noLoss: true,
		from: from, to: to, fault: start, promoted: promoted,
	})
	t.Logf("the longest gap between two acknowledged writes during the roll: %s", duration(r.RTO.Outage))
}
