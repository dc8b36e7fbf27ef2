//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/example/function-database/e2e/internal/kube"
)

var gvkJob = kube.GVK("batch/v1", "Job")

// Restore: the restore lifecycle with Crossplane core itself (issue 12 item
// 6). kwok's pods do not run PostgreSQL, but the Job's pod completes once it
// is scheduled, which it is only when its volume exists:
//   - a restoreFrom naming a Database that does not exist is said within a
//     reconcile (core v2.3.4 answers the function's required resources),
//     and the outcome so far is in status.restore;
//   - raising spec.restoreFrom.attempt replaces the Job (core deletes it and
//     creates the new one: never a patch of its immutable template);
//   - once the source exists (its StatefulSet makes the backup volume), the
//     Job runs and succeeds, status.restore records it, and the Job is
//     removed;
//   - a later minor version change with restoreFrom still set stays Synced
//     and brings no Job back.
func (s *suite) testRestore(t *testing.T) {
	ns := exampleXR(t).GetNamespace()
	s.ensureNamespace(t, ns)
	const n, src = "restore-demo", "restore-src"
	job := obj{gvkJob, n + "-restore"}
	d := s.create(t, newDatabase(t, n, map[string]any{"size": "small", "backup.enabled": false, "restoreFrom": map[string]any{"database": src}}))
	defer func() { _ = s.k.Delete(context.Background(), d.gvk, d.ns, d.name) }()

	var u *unstructured.Unstructured
	eventually(t, syncWait, "Restored=False RestoreSourceMissing", func() (bool, string) {
		u = d.get(t)
		c := kube.GetCondition(u, "Restored")
		return c.Status == "False" && c.Reason == "RestoreSourceMissing", kube.ConditionsString(u)
	})
	t.Logf("Restored: %s", kube.GetCondition(u, "Restored").Message)
	if got := str(u, "status", "restore", "source"); got != src {
		t.Errorf("status.restore.source = %q, want %s (recorded from the first reconcile)", got, src)
	}
	if ph := str(u, "status", "phase"); ph != "Provisioning" {
		t.Errorf("phase %s, want Provisioning", ph)
	}
	j1 := s.restoreJob(t, ns, job.name)
	if j1.Spec.ActiveDeadlineSeconds == nil || j1.Spec.Template.Spec.Affinity != nil {
		t.Errorf("the Job of a missing source: activeDeadlineSeconds %v, affinity %v; want a deadline and no affinity", j1.Spec.ActiveDeadlineSeconds, j1.Spec.Template.Spec.Affinity)
	}

	u = d.patch(t, `{"spec":{"restoreFrom":{"attempt":1}}}`)
	eventually(t, syncWait, "a new Job for attempt 1", func() (bool, string) {
		j, err := s.k.CS.BatchV1().Jobs(ns).Get(context.Background(), job.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error() + "; " + kube.ConditionsString(d.get(t))
		}
		return j.UID != j1.UID && j.Annotations["database.example.com/restore-attempt"] == "1",
			fmt.Sprintf("Job uid %s attempt %q; %s", j.UID, j.Annotations["database.example.com/restore-attempt"], kube.ConditionsString(d.get(t)))
	})
	s.waitSynced(t, d, u.GetGeneration())

	sd := s.create(t, newDatabase(t, src, map[string]any{"size": "small", "backup.enabled": true}))
	defer func() { _ = s.k.Delete(context.Background(), sd.gvk, sd.ns, sd.name) }()
	eventually(t, readyWait, "Restored=True once the source's backup volume exists", func() (bool, string) {
		u = d.get(t)
		return kube.GetCondition(u, "Restored").Status == "True", kube.ConditionsString(u) + "; jobs: " + s.jobsState(ns)
	})
	t.Logf("Restored: %s; status.restore %v", kube.GetCondition(u, "Restored").Message, u.Object["status"].(map[string]any)["restore"])
	if completed, _, _ := unstructured.NestedBool(u.Object, "status", "restore", "completed"); !completed || str(u, "status", "restore", "completionTime") == "" {
		t.Errorf("status.restore does not record the completion: %v", u.Object["status"].(map[string]any)["restore"])
	}
	if a, _, _ := unstructured.NestedInt64(u.Object, "status", "restore", "attempt"); a != 1 {
		t.Errorf("status.restore.attempt = %d, want 1", a)
	}
	s.waitGone(t, ns, []obj{job}, deleteWait)

	// restoreFrom stays set; a minor change later: Synced, no Job.
	u = d.patch(t, `{"spec":{"version":"16.4"}}`)
	u = s.waitSynced(t, d, u.GetGeneration())
	if c := kube.GetCondition(u, "SpecApplied"); c.Status != "True" {
		t.Errorf("SpecApplied after a minor change: %s", kube.ConditionsString(u))
	}
	if c := kube.GetCondition(u, "Restored"); c.Status != "True" {
		t.Errorf("Restored after a minor change: %s", kube.ConditionsString(u))
	}
	if _, err := s.getObj(ns, job); !apierrors.IsNotFound(err) {
		t.Errorf("Job %s after the restore completed: %v", job.name, err)
	}
}

func (s *suite) restoreJob(t *testing.T, ns, name string) *batchv1.Job {
	t.Helper()
	var j *batchv1.Job
	eventually(t, syncWait, "Job "+name, func() (bool, string) {
		var err error
		j, err = s.k.CS.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return j
}
