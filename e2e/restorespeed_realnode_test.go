//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/example/function-database/scripts"
)

// TestRestoreSpeed measures what a restore from the archive costs per GiB on
// real pods (issue 23): a medium Database filled with E2E_RESTORE_GIB GiB of
// rows, a full backup on request (its CronJob run now), then a new Database
// restored from the archive's end, timed to its first instance's report and
// to Ready (two instances: the standby is cloned from the restored
// primary). Not part of the full run (minutes per GiB): hack/restore-speed.sh GIB.
func TestRestoreSpeed(t *testing.T) {
	v := os.Getenv("E2E_RESTORE_GIB")
	if v == "" {
		t.Skip("measured on purpose: hack/restore-speed.sh GIB")
	}
	gib, err := strconv.ParseFloat(v, 64)
	if err != nil || gib <= 0 || gib > 16 {
		t.Fatalf("E2E_RESTORE_GIB=%q: want a size in GiB, above 0 and at most 16", v)
	}
	s := env
	s.realNode(t)
	store := s.objectStorage(t)
	const ns, db, copyName = "restore-speed", "bulk", "bulk-copy"
	s.realNamespace(t, ns)
	u := realDatabase(t, ns, db, "medium", nil)
	if err := unstructured.SetNestedField(u.Object, archivedComposition, "spec", "crossplane", "compositionRef", "name"); err != nil {
		t.Fatal(err)
	}
	d := s.create(t, u)
	defer func() { _ = s.k.Delete(context.Background(), d.gvk, d.ns, d.name) }()
	s.waitRealReady(t, d)

	// Rows of about 1 KB, in statements that each finish within the
	// exec's minute.
	const rowBytes, chunk = 1024, 100_000
	rows := int64(gib * (1 << 30) / rowBytes)
	start := time.Now()
	s.appDB(t, ns, db+"-0", db, "CREATE TABLE bulk (id bigint, pad text)")
	for from := int64(1); from <= rows; from += chunk {
		s.appDB(t, ns, db+"-0", db, fmt.Sprintf("INSERT INTO bulk SELECT g, repeat(md5(g::text), 30) FROM generate_series(%d, %d) g", from, min(from+chunk-1, rows)))
	}
	loaded := time.Since(start)
	size, _ := strconv.ParseInt(s.appDB(t, ns, db+"-0", db, "SELECT pg_database_size(current_database())"), 10, 64)
	t.Logf("loaded %d rows, %.2f GiB, in %s", rows, float64(size)/(1<<30), loaded.Round(time.Second))

	repo := store.repository(ns, db)
	before := fullBackups(t, repo)
	start = time.Now()
	job := s.runCronJobNow(t, ns, db+"-full")
	eventually(t, time.Duration(gib*20+5)*time.Minute, "Job "+job+" succeeded", func() (bool, string) {
		j, err := s.k.CS.BatchV1().Jobs(ns).Get(context.Background(), job, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return j.Status.Succeeded > 0 && len(fullBackups(t, repo)) > len(before), fmt.Sprintf("active=%d failed=%d; sidecar: %s", j.Status.Active, j.Status.Failed, lastLines(s.podLog(ns, db+"-0", "password-sync"), 3))
	})
	backup := time.Since(start)
	t.Logf("full backup %s in %s", fullBackups(t, repo)[len(before)], backup.Round(time.Second))
	seg := s.superSQL(ns, db+"-0", "SELECT pg_walfile_name(pg_switch_wal())")
	eventually(t, 5*time.Minute, "segment "+seg+" in the bucket", func() (bool, string) {
		return store.archivedSegment(ns, db, seg) != "", s.superSQL(ns, db+"-0", "SELECT last_archived_wal, failed_count, last_failed_wal FROM pg_stat_archiver")
	})

	cu := realDatabase(t, ns, copyName, "medium", map[string]any{"restoreFrom": map[string]any{"database": db, "from": "Archive"}})
	if err := unstructured.SetNestedField(cu.Object, archivedComposition, "spec", "crossplane", "compositionRef", "name"); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	cp := s.create(t, cu)
	defer func() { _ = s.k.Delete(context.Background(), cp.gvk, cp.ns, cp.name) }()
	s.waitReadyWithin(t, cp, time.Duration(gib*20+5)*time.Minute)
	ready := time.Since(start)
	if got := s.appDB(t, ns, copyName+"-0", "bulk_copy", "SELECT count(*) FROM bulk"); got != strconv.FormatInt(rows, 10) {
		t.Errorf("the copy has %s rows, want %d", got, rows)
	}
	// The first primary's report: how long its restore and replay took.
	var report scripts.RestoreReport
	pod, err := s.k.CS.CoreV1().Pods(ns).Get(context.Background(), copyName+"-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pod.Status.ContainerStatuses {
		if term := c.LastTerminationState.Terminated; c.Name == "postgres" && term != nil {
			if report, err = scripts.DecodeReport[scripts.RestoreReport]([]byte(strings.TrimSpace(term.Message))); err != nil {
				t.Errorf("the restore report %q: %v", term.Message, err)
			}
		}
	}
	per := func(d time.Duration) string {
		return (time.Duration(float64(d) / (float64(size) / (1 << 30)))).Round(time.Second).String()
	}
	t.Logf("| database | full backup | restore + replay (report) | restored and ready, two instances |")
	t.Logf("| %.2f GiB | %s (%s per GiB) | %.0f s (%s per GiB) | %s (%s per GiB) |", float64(size)/(1<<30),
		backup.Round(time.Second), per(backup), report.Seconds, per(time.Duration(report.Seconds*float64(time.Second))), ready.Round(time.Second), per(ready))
}
