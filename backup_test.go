package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/example/function-database/scripts"
)

// TestBackupRunsBounded: a backup run cannot hang forever. pg_dump gives up
// on a lock it waits for, the Job has a deadline (retries included) and the
// CronJob a starting deadline; a run stopped at its deadline empties the
// CronJob's active list, and BackupHealthy turns False saying so (it used to
// stay Unknown "running" for as long as the dump hung, every later run
// skipped by concurrencyPolicy Forbid).
func TestBackupRunsBounded(t *testing.T) {
	if d, err := time.ParseDuration(backupDeadlineText); err != nil || d != backupDeadline {
		t.Fatalf("backupDeadlineText %q is not backupDeadline %v", backupDeadlineText, backupDeadline)
	}
	if !strings.Contains(scriptFiles[scripts.Backup], `pg_dump --format=custom --no-password --lock-wait-timeout=`) {
		t.Errorf("backup.sh runs pg_dump without --lock-wait-timeout: a dump behind an exclusive lock waits forever")
	}
	type bounds struct {
		Concurrency                batchv1.ConcurrencyPolicy
		StartingDeadline, Deadline *int64
		BackoffLimit               *int32
	}
	const backups = "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: orders, namespace: shop}\nspec: {version: \"16\", size: medium, backup: {enabled: true}}"
	cases := map[string]struct {
		reason string
		status batchv1.CronJobStatus
		want   *fnv1.Condition
	}{
		"Hung": {"a run still active: Unknown, saying it is bounded",
			batchv1.CronJobStatus{Active: []corev1.ObjectReference{{Name: "orders-backup-29411640"}}, LastScheduleTime: at(t, "2026-11-29T02:00:00Z"), LastSuccessfulTime: at(t, "2026-11-28T02:03:12Z")},
			&fnv1.Condition{Type: condBackupHealthy, Status: fnv1.Status_STATUS_CONDITION_UNKNOWN, Reason: "BackupRunning", Target: fnv1.Target_TARGET_COMPOSITE_AND_CLAIM.Enum(),
				Message: ptr.To("a backup scheduled at 2026-11-29T02:00:00Z is running; a run not done within 6h is stopped and reported failed")}},
		"PastDeadline": {"the run was stopped at its deadline: the active list is empty and nothing succeeded since",
			batchv1.CronJobStatus{LastScheduleTime: at(t, "2026-11-29T02:00:00Z"), LastSuccessfulTime: at(t, "2026-11-28T02:03:12Z")},
			&fnv1.Condition{Type: condBackupHealthy, Status: fnv1.Status_STATUS_CONDITION_FALSE, Reason: "BackupFailed", Target: fnv1.Target_TARGET_COMPOSITE_AND_CLAIM.Enum(),
				Message: ptr.To("the backup scheduled at 2026-11-29T02:00:00Z did not succeed: it failed or ran past its 6h bound (the Job's Failed condition says which: BackoffLimitExceeded or DeadlineExceeded); last success at 2026-11-28T02:03:12Z; see the jobs of CronJob orders-backup")}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := runningRequest(t, backups)
			cj := decodeInto[batchv1.CronJob](t, req.Observed.Resources[string(rnBackup)].GetResource())
			cj.Status = tc.status
			req.Observed.Resources[string(rnBackup)] = encodeObserved(t, cj)
			rsp := runTest(t, req)
			got := decodeInto[batchv1.CronJob](t, rsp.GetDesired().GetResources()[string(rnBackup)].GetResource())
			want := bounds{batchv1.ForbidConcurrent, ptr.To[int64](3600), ptr.To[int64](6 * 3600), ptr.To[int32](2)}
			if d := cmp.Diff(want, bounds{got.Spec.ConcurrencyPolicy, got.Spec.StartingDeadlineSeconds, got.Spec.JobTemplate.Spec.ActiveDeadlineSeconds, got.Spec.JobTemplate.Spec.BackoffLimit}); d != "" {
				t.Errorf("backup run bounds (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.want, conditionOf(rsp, condBackupHealthy), protocmp.Transform()); d != "" {
				t.Errorf("%s: BackupHealthy (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}
