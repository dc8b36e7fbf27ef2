package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"
)

// TestCronJobs: the Database's CronJobs share one skeleton (cronJob) and
// differ only where they must: how long a missed run may wait, how many
// Jobs are kept, how many attempts (the checks one, so a failure reaches
// the CronJob's status), how long a run may last, and whether the pod must
// sit beside ordinal 0 (the volume backup reads its volume).
func TestCronJobs(t *testing.T) {
	archived := archiveExample(t)
	backup := runTest(t, xrRequest(readYAMLStruct(t, "example/xrs/backup.yaml"), compositionInput(t, "example/composition.yaml")))
	type shape struct {
		Name, Component                  string
		StartingDeadline, ActiveDeadline int64
		History, Backoff                 int32
		Forbid, RestartNever, Beside     bool
		Containers                       int
	}
	cases := []struct {
		rn   resource.Name
		rsp  *fnv1.RunFunctionResponse
		want shape
	}{
		{rnBackup, backup, shape{"billing-backup", componentBackup, 3600, 6 * 3600, 3, 2, true, true, true, 1}},
		{rnArchiveCheck, archived, shape{"ledger-wal", componentArchiveCheck, 300, 120, 1, 0, true, true, false, 1}},
		{rnDrill, archived, shape{"ledger-drill", componentDrill, 3600, 2 * drillRecoverySeconds, 1, 0, true, true, false, 1}},
		// Two attempts: each pod asks anew; not beside a pod (the sidecar
		// of whichever instance is primary takes the backup).
		{rnFullBackup, archived, shape{"ledger-full", componentFullBackup, 3600, 6 * 3600, 3, 1, true, true, false, 1}},
	}
	for _, tc := range cases {
		t.Run(string(tc.rn), func(t *testing.T) {
			cj := decodeInto[batchv1.CronJob](t, tc.rsp.GetDesired().GetResources()[string(tc.rn)].GetResource())
			js := cj.Spec.JobTemplate.Spec
			pod := js.Template
			got := shape{
				Name: cj.Name, Component: pod.Labels[labelComponent],
				StartingDeadline: *cj.Spec.StartingDeadlineSeconds, ActiveDeadline: *js.ActiveDeadlineSeconds,
				History: *cj.Spec.SuccessfulJobsHistoryLimit, Backoff: *js.BackoffLimit,
				Forbid:       cj.Spec.ConcurrencyPolicy == batchv1.ForbidConcurrent,
				RestartNever: pod.Spec.RestartPolicy == corev1.RestartPolicyNever,
				Beside:       pod.Spec.Affinity != nil,
				Containers:   len(pod.Spec.Containers),
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("CronJob %s (-want +got):\n%s", tc.rn, diff)
			}
			if *cj.Spec.FailedJobsHistoryLimit != got.History {
				t.Errorf("keeps %d failed Jobs and %d succeeded", *cj.Spec.FailedJobsHistoryLimit, got.History)
			}
			for _, l := range []map[string]string{cj.Labels, js.Template.Labels, cj.Spec.JobTemplate.Labels} {
				if l[labelComponent] != got.Component {
					t.Errorf("labels %v, want component %s everywhere", l, got.Component)
				}
			}
			if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
				t.Error("the pod defaults are not applied")
			}
		})
	}
}

// TestFullBackupCronJob: N-full exists with the archive and backups on, on
// the Database's schedule, and its pod's name is its request's ID.
func TestFullBackupCronJob(t *testing.T) {
	cj := decodeInto[batchv1.CronJob](t, archiveExample(t).GetDesired().GetResources()[string(rnFullBackup)].GetResource())
	if cj.Spec.Schedule != "0 2 * * *" {
		t.Errorf("schedule %q, want spec.backup.schedule", cj.Spec.Schedule)
	}
	c := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
	if d := cmp.Diff([]string{"bash", scriptsDir + "/full-backup.sh"}, c.Command); d != "" {
		t.Errorf("command (-want +got):\n%s", d)
	}
	var podName string
	for _, e := range c.Env {
		if e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			podName = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if podName != "metadata.name" {
		t.Errorf("POD_NAME from %q, want the pod's metadata.name", podName)
	}

	off := readYAMLStruct(t, "example/archive/xr.yaml")
	setSpecOf(t, off, "{version: \"16\", size: medium, backup: {enabled: false}, crossplane: {compositionRef: {name: database-archived}}}")
	for name, req := range map[string]*fnv1.RunFunctionRequest{
		"no archive":  xrRequest(readYAMLStruct(t, "example/xrs/backup.yaml"), compositionInput(t, "example/composition.yaml")),
		"backups off": xrRequest(off, compositionInput(t, "example/archive/composition.yaml")),
	} {
		if r := runTest(t, req).GetDesired().GetResources()[string(rnFullBackup)]; r != nil {
			t.Errorf("%s: a full backup CronJob is composed", name)
		}
	}
}
