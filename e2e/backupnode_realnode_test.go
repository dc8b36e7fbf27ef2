//go:build e2e

package e2e

import (
	"path/filepath"
	"testing"
	"time"
)

// backupAfterNodeLoss runs while the node of the lost primary (from) is
// still dead and the promoted standby (to) takes writes on another node
// (issue 22 item 6): the WAL archive goes on from the new primary (its
// timeline's history file and a segment of it reach the bucket), a full
// backup on the Database's schedule (its CronJob run now) succeeds on a
// live node and lands in the bucket, taken by the new primary's sidecar,
// and WALArchive says Archiving. Nothing of the backups was on the dead
// node: the bucket is off the nodes.
func (s *suite) backupAfterNodeLoss(t *testing.T, r *nodesRun, from, to, dead string) {
	ns, db, store := r.ns, r.db, r.store
	repo := store.repository(ns, db)
	start := time.Now()
	// A segment of the new primary's timeline, switched now: the writer
	// keeps writing, so the switch always closes a segment.
	seg := s.superSQL(ns, to, "SELECT pg_walfile_name(pg_switch_wal())")
	if len(seg) != 24 {
		t.Fatalf("pg_walfile_name on %s: %q", to, seg)
	}
	eventually(t, 2*time.Minute, "segment "+seg+" of "+to+" in the bucket", func() (bool, string) {
		return store.archivedSegment(ns, db, seg) != "", s.superSQL(ns, to, "SELECT last_archived_wal, failed_count, last_failed_wal FROM pg_stat_archiver")
	})
	history := filepath.Join(repo, "archive", "db", "*", seg[:8]+".history")
	if h, _ := filepath.Glob(history); len(h) == 0 {
		t.Errorf("no %s.history in the bucket: a restore could not follow %s's timeline", seg[:8], to)
	}
	t.Logf("segment %s of %s (promoted in place of %s, whose node %s is dead) in the bucket %s after the switch", seg, to, from, dead, time.Since(start).Round(100*time.Millisecond))

	asked := time.Now()
	label, node := s.fullBackupNow(t, repo, ns, db, to)
	if node == "" || node == dead {
		t.Errorf("the full backup Job's pod ran on %q, want a live node (%s is dead)", node, dead)
	}
	t.Logf("full backup %s taken by %s for a Job on %s, in the bucket %s after the request", label, to, node, time.Since(asked).Round(time.Second))

	s.waitArchiving(t, r.d, ns)
	t.Logf("WALArchive True %s into the step", time.Since(start).Round(time.Second))
}
