//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/example/function-database/e2e/internal/kube"
)

// realRestoreRetry is the retry path of a restore on real pods (issue 12
// item 6), for TestRealNode after its Restore step (ns, db and app as there:
// db holds the rows and has a backup taken after them):
//   - a backup name that does not exist: restore.sh exits 4, the Job's
//     podFailurePolicy fails it at once, Restored=False RestoreBackupMissing,
//     phase Failed, and the database is left empty;
//   - spec.restoreFrom.backup corrected to latest: the failed Job is
//     replaced (never patched), the new one restores, status.restore records
//     the success and the Job is removed;
//   - spec.restoreFrom.attempt raised after the success: nothing runs again.
//
// The lead wires it into TestRealNode (only one real-node run at a time):
//
//	s.step(t, "RestoreRetry", func(t *testing.T) { s.realRestoreRetry(t, ns, db, app) })
func (s *suite) realRestoreRetry(t *testing.T, ns, db, app string) {
	const name, copyApp = "orders-retry", "app-retry"
	want := s.mustSQL(t, ns, app, "", checksums)
	c := s.create(t, realDatabase(t, ns, name, "small", map[string]any{
		"restoreFrom":    map[string]any{"database": db, "backup": db + "-19990101T000000Z"},
		"backup.enabled": false,
	}))
	defer func() { _ = s.k.Delete(context.Background(), c.gvk, c.ns, c.name) }()
	job := obj{gvkJob, name + "-restore"}

	var u *unstructured.Unstructured
	eventually(t, realReady, name+" Restored=False RestoreBackupMissing", func() (bool, string) {
		u = c.get(t)
		r := kube.GetCondition(u, "Restored")
		return r.Status == "False" && r.Reason == "RestoreBackupMissing", kube.ConditionsString(u) + "; jobs: " + s.jobsState(ns) + "; " + s.podsState(ns, name)
	})
	t.Logf("Restored: %s", kube.GetCondition(u, "Restored").Message)
	if ph := str(u, "status", "phase"); ph != "Failed" {
		t.Errorf("phase %s after a failed restore, want Failed", ph)
	}
	if completed, _, _ := unstructured.NestedBool(u.Object, "status", "restore", "completed"); completed {
		t.Errorf("status.restore says completed after a failed restore")
	}
	// Failed at once by the podFailurePolicy (exit 4), not after 7 attempts.
	if j, err := s.getObj(ns, job); err != nil {
		t.Errorf("the failed Job: %v", err)
	} else if failed, _, _ := unstructured.NestedInt64(j.Object, "status", "failed"); failed != 1 {
		t.Errorf("the failed Job ran %d pods, want 1 (exit 4 fails it at once): %s", failed, s.jobsState(ns))
	}
	s.clientPod(t, ns, copyApp, name)
	if got := s.mustSQL(t, ns, copyApp, "", checksums); got != "" {
		t.Errorf("a failed restore left tables: %s", got)
	}

	u = c.patch(t, `{"spec":{"restoreFrom":{"backup":"latest"}}}`)
	eventually(t, realReady, name+" Restored=True after the backup was corrected", func() (bool, string) {
		u = c.get(t)
		return kube.GetCondition(u, "Restored").Status == "True", kube.ConditionsString(u) + "; jobs: " + s.jobsState(ns) + "; " + s.podsState(ns, name)
	})
	t.Logf("Restored: %s", kube.GetCondition(u, "Restored").Message)
	if got := s.mustSQL(t, ns, copyApp, "", checksums); got != want {
		t.Errorf("restored checksums differ:\n got %s\nwant %s", got, want)
	}
	if b := str(u, "status", "restore", "backup"); b != "latest" {
		t.Errorf("status.restore.backup = %q, want latest", b)
	}
	s.waitGone(t, ns, []obj{job}, deleteWait)

	// After the success, a raised attempt runs nothing: the record holds.
	u = c.patch(t, `{"spec":{"restoreFrom":{"attempt":1}}}`)
	s.waitSynced(t, c, u.GetGeneration())
	time.Sleep(10 * time.Second)
	if _, err := s.getObj(ns, job); !apierrors.IsNotFound(err) {
		t.Errorf("Job %s after the restore completed and attempt was raised: %v", job.name, err)
	}
	if r := kube.GetCondition(c.get(t), "Restored"); r.Status != "True" {
		t.Errorf("Restored after attempt was raised: %s %s", r.Status, r.Message)
	}
}
