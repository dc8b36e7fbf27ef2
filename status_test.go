package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// TestStatusNotAlarming: states that are fine must not look like failures:
// a restore running on ready instances is Provisioning (it was Degraded), and
// backups turned off on purpose are not BackupHealthy=False.
func TestStatusNotAlarming(t *testing.T) {
	const restoring = `{version: "16", size: small, restoreFrom: {database: orders-old}}`
	type got struct {
		Phase         string
		BackupHealthy *fnv1.Condition
	}
	backupOff := &fnv1.Condition{Type: condBackupHealthy, Status: fnv1.Status_STATUS_CONDITION_TRUE, Reason: "BackupDisabled",
		Message: ptr.To("no backups are taken (spec.backup.enabled is false): nothing can fail; enable them to have backups"), Target: fnv1.Target_TARGET_COMPOSITE_AND_CLAIM.Enum()}
	cases := map[string]struct {
		reason string
		spec   string
		job    *batchv1.JobStatus // the restore Job's observed status
		want   got
	}{
		"RestoreRunning":  {"a restore running on a ready StatefulSet", restoring, &batchv1.JobStatus{Active: 1}, got{phaseProvisioning, backupOff}},
		"RestoreDone":     {"a completed restore", restoring, &batchv1.JobStatus{Succeeded: 1, Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}, got{phaseRunning, backupOff}},
		"RestoreFailed":   {"a failed restore", restoring, &batchv1.JobStatus{Failed: 1, Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}}, got{phaseFailed, backupOff}},
		"BackupsOff":      {"backups off on purpose: not applicable, not failing", `{version: "16", size: medium}`, nil, got{phaseRunning, backupOff}},
		"BackupsOffFalse": {"backups off, explicitly", `{version: "16", size: medium, backup: {enabled: false}}`, nil, got{phaseRunning, backupOff}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := xrRequest(yamlStruct(t, validXR), nil)
			setSpec(t, req, tc.spec)
			req.Observed.Resources = observedFrom(t, runTest(t, req), true)
			if tc.job != nil {
				job := decodeInto[batchv1.Job](t, req.Observed.Resources[string(rnRestore)].GetResource())
				job.Status = *tc.job
				req.Observed.Resources[string(rnRestore)] = encodeObserved(t, job)
			}
			rsp := runTest(t, req)
			g := got{
				Phase:         rsp.GetDesired().GetComposite().GetResource().GetFields()["status"].GetStructValue().GetFields()["phase"].GetStringValue(),
				BackupHealthy: conditionOf(rsp, condBackupHealthy),
			}
			if d := cmp.Diff(tc.want, g, protocmp.Transform()); d != "" {
				t.Errorf("%s: (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}

// TestWritableCondition: with durability sync and no standby streaming,
// commits wait without bound while the primary stays ready: the Writable
// condition says so. Absent where it cannot know (async, a lost primary).
func TestWritableCondition(t *testing.T) {
	cases := map[string]struct {
		durability string
		ready      []bool // analytics-0 (the primary), -1, -2
		want       string // status/reason, "" for no condition
		says       []string
	}{
		"SyncStandbysStreaming": {durabilitySync, []bool{true, true, false}, "STATUS_CONDITION_TRUE/SynchronousStandby", []string{"analytics-1"}},
		"SyncNoStandby": {durabilitySync, []bool{true, false, false}, "STATUS_CONDITION_FALSE/NoSynchronousStandby",
			[]string{"analytics-1, analytics-2 not ready", "writes block"}},
		"SyncPrimaryLost": {durabilitySync, []bool{false, false, true}, "", nil},
		"Async":           {durabilityAsync, []bool{true, false, false}, "", nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := largeSteady(t)
			structAt(req.Observed.Composite.Resource, "spec").Fields["durability"] = structpb.NewStringValue(tc.durability)
			cluster := append(append([]*structpb.Struct{}, exampleCluster(t)...), instancePodsReady(t, tc.ready...)...)
			c := conditionOf(runTestIn(t, req, cluster), condWritable)
			got := ""
			if c != nil {
				got = c.GetStatus().String() + "/" + c.GetReason()
			}
			if got != tc.want {
				t.Fatalf("Writable %q, want %q (%s)", got, tc.want, c.GetMessage())
			}
			for _, s := range tc.says {
				if !strings.Contains(c.GetMessage(), s) {
					t.Errorf("the condition does not say %q: %s", s, c.GetMessage())
				}
			}
		})
	}
}
