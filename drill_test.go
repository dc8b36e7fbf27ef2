package main

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/example/function-database/scripts"
)

// TestDrillComposed: an archived Database has its restore drill, a CronJob
// whose pod restores into a volume as large as the Database's, reaching
// the bucket with the copied keys.
func TestDrillComposed(t *testing.T) {
	rsp := runTest(t, xrRequest(readYAMLStruct(t, "example/archive/xr.yaml"), compositionInput(t, "example/archive/composition.yaml")))
	r := rsp.GetDesired().GetResources()[string(rnDrill)]
	if r == nil {
		t.Fatal("no drill CronJob")
	}
	cj := decodeInto[batchv1.CronJob](t, r.GetResource())
	if cj.Name != "ledger-drill" || cj.Spec.Schedule != defaultDrillSchedule || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("the drill is CronJob %s on %q (%s)", cj.Name, cj.Spec.Schedule, cj.Spec.ConcurrencyPolicy)
	}
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	var data *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Name == volData {
			data = &pod.Volumes[i]
		}
	}
	if data == nil || data.EmptyDir == nil || data.EmptyDir.SizeLimit == nil || data.EmptyDir.SizeLimit.String() != "20Gi" {
		t.Errorf("the drill's data volume is %+v, want an emptyDir of the Database's 20Gi", data)
	}
	if c := conditionOf(rsp, condBackupVerified); c == nil || c.GetStatus() != fnv1.Status_STATUS_CONDITION_UNKNOWN || c.GetReason() != reasonDrillNotYet {
		t.Errorf("BackupVerified %v, want Unknown %s", c, reasonDrillNotYet)
	}
	if rsp.GetRequirements().GetResources()[requirementDrillPods] != nil {
		t.Error("the drill's pods are required before any drill ran")
	}
}

// TestDrillOff: drill.enabled false composes no drill and no condition.
func TestDrillOff(t *testing.T) {
	in := compositionInput(t, "example/archive/composition.yaml")
	in.GetFields()["objectStorage"].GetStructValue().Fields["drill"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"enabled": structpb.NewBoolValue(false)}})
	rsp := runTest(t, xrRequest(readYAMLStruct(t, "example/archive/xr.yaml"), in))
	if rsp.GetDesired().GetResources()[string(rnDrill)] != nil || conditionOf(rsp, condBackupVerified) != nil {
		t.Error("a drill composed with drill.enabled false")
	}
}

// TestPlanDrill: the drill's pods are read only when a run finished that
// status.drill does not record; BackupVerified follows the record.
func TestPlanDrill(t *testing.T) {
	db := &database{Name: "ledger", Namespace: "shop", ObjectStorage: &objectStorage{DrillSchedule: defaultDrillSchedule}}
	sched, prev := at(t, "2026-12-06T04:30:00Z"), at(t, "2026-11-29T04:30:00Z")
	done := func(succ *metav1.Time) *batchv1.CronJob {
		return &batchv1.CronJob{Status: batchv1.CronJobStatus{LastScheduleTime: sched, LastSuccessfulTime: succ}}
	}
	verified := &scripts.DrillVerdict{Result: scripts.DrillVerified, Backup: "20261206-043000F", RestoredTo: "2026-12-06T04:29:58Z", Seconds: 41.2, Tables: 3, Rows: 1200}
	recorded := &drillRecord{Scheduled: sched, Result: scripts.DrillVerified, Backup: "20261206-043000F"}
	cases := []struct {
		name    string
		cj      *batchv1.CronJob
		record  *drillRecord
		outcome drillOutcome
		require bool
		result  string // the record's result after the plan, "" for none
		status  fnv1.Status
		reason  string
	}{
		{"no CronJob yet", nil, nil, drillOutcome{}, false, "", fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonDrillNotYet},
		{"never ran", &batchv1.CronJob{}, nil, drillOutcome{}, false, "", fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonDrillNotYet},
		{"running", &batchv1.CronJob{Status: batchv1.CronJobStatus{LastScheduleTime: sched, Active: []corev1.ObjectReference{{Name: "ledger-drill-1"}}}}, nil, drillOutcome{}, false, "", fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonDrillNotYet},
		{"finished, first call", done(sched), nil, drillOutcome{}, true, "", fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonDrillNotYet},
		{"finished, its pod read", done(sched), nil, drillOutcome{Resolved: true, Verdict: verified}, true, scripts.DrillVerified, fnv1.Status_STATUS_CONDITION_TRUE, reasonDrillVerified},
		{"recorded: nothing to read", done(sched), recorded, drillOutcome{}, false, scripts.DrillVerified, fnv1.Status_STATUS_CONDITION_TRUE, reasonDrillVerified},
		{"failed, its pod read", done(prev), &drillRecord{Scheduled: prev, Result: scripts.DrillVerified}, drillOutcome{Resolved: true, Verdict: &scripts.DrillVerdict{Result: scripts.DrillFailed, Backup: "20261206-043000F", Reason: "lz4 error"}}, true, scripts.DrillFailed, fnv1.Status_STATUS_CONDITION_FALSE, reasonDrillFailed},
		{"failed, its pod gone", done(prev), &drillRecord{Scheduled: prev, Result: scripts.DrillVerified}, drillOutcome{Resolved: true}, true, scripts.DrillFailed, fnv1.Status_STATUS_CONDITION_FALSE, reasonDrillFailed},
		{"succeeded, its pod gone", done(sched), nil, drillOutcome{Resolved: true}, true, scripts.DrillVerified, fnv1.Status_STATUS_CONDITION_TRUE, reasonDrillVerified},
		{"no backup yet", done(sched), nil, drillOutcome{Resolved: true, Verdict: &scripts.DrillVerdict{Result: scripts.DrillNoBackup}}, true, scripts.DrillNoBackup, fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonDrillNoBackup},
		{"a new run while the last is recorded", &batchv1.CronJob{Status: batchv1.CronJobStatus{LastScheduleTime: sched, Active: []corev1.ObjectReference{{Name: "ledger-drill-2"}}}}, &drillRecord{Scheduled: prev, Result: scripts.DrillVerified, Backup: "b"}, drillOutcome{}, false, scripts.DrillVerified, fnv1.Status_STATUS_CONDITION_TRUE, reasonDrillVerified},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := planDrill(db, &observed{Drill: tc.cj, DrillRecord: tc.record, DrillOutcome: tc.outcome})
			if (d.Require != nil) != tc.require {
				t.Errorf("require %v, want %v", d.Require != nil, tc.require)
			}
			got := ""
			if d.Record != nil {
				got = d.Record.Result
			}
			if got != tc.result {
				t.Errorf("record %+v, want result %q", d.Record, tc.result)
			}
			if c := d.Condition; c.Status != tc.status || c.Reason != tc.reason {
				t.Errorf("BackupVerified %v %s (%s), want %v %s", c.Status, c.Reason, c.Message, tc.status, tc.reason)
			}
		})
	}
}

// TestDrillVerdictRead: a drill run finished; the function reads its pod's
// termination message in the same reconcile (a second call), records it in
// status.drill, and, fed that status back, reads no pod again.
func TestDrillVerdictRead(t *testing.T) {
	req := xrRequest(readYAMLStruct(t, "example/archive/xr.yaml"), compositionInput(t, "example/archive/composition.yaml"))
	rsp := runTest(t, req)
	feedBack(t, req, rsp, true)
	cj := decodeInto[batchv1.CronJob](t, req.GetObserved().GetResources()[string(rnDrill)].GetResource())
	cj.Status = batchv1.CronJobStatus{LastScheduleTime: at(t, "2026-12-06T04:30:00Z"), LastSuccessfulTime: at(t, "2026-12-06T04:31:02Z")}
	req.Observed.Resources[string(rnDrill)] = encodeObserved(t, cj)
	msg := `{"result":"verified","backup":"20261206-043000F","restoredTo":"2026-12-06T04:29:58Z","restoreSeconds":30.5,"recoverySeconds":8.25,"seconds":41.75,"tables":3,"rows":1200,"checksum":"8c0d"}`
	pod := yamlStruct(t, `apiVersion: v1
kind: Pod
metadata:
  name: ledger-drill-29420910-x2v7q
  namespace: shop
  creationTimestamp: "2026-12-06T04:30:01Z"
  labels: {app.kubernetes.io/name: postgresql, app.kubernetes.io/instance: ledger, app.kubernetes.io/component: drill, app.kubernetes.io/managed-by: function-database}
status:
  phase: Succeeded
  containerStatuses:
  - name: drill
    state: {terminated: {exitCode: 0, message: '`+msg+`'}}`)
	old := yamlStruct(t, `apiVersion: v1
kind: Pod
metadata:
  name: ledger-drill-29410830-abcde
  namespace: shop
  creationTimestamp: "2026-11-29T04:30:01Z"
  labels: {app.kubernetes.io/name: postgresql, app.kubernetes.io/instance: ledger, app.kubernetes.io/component: drill, app.kubernetes.io/managed-by: function-database}
status:
  containerStatuses:
  - name: drill
    state: {terminated: {exitCode: 1, message: '{"result":"failed","reason":"old"}'}}`)
	rsp = runTestIn(t, req, append(exampleCluster(t), old, pod))
	st := structAt(rsp.GetDesired().GetComposite().GetResource(), "status", "drill")
	if got := stringAt(st, "backup"); got != "20261206-043000F" || stringAt(st, "scheduled") != "2026-12-06T04:30:00Z" || st.GetFields()["rows"].GetNumberValue() != 1200 {
		t.Fatalf("status.drill %v, want the newest run's verdict", st)
	}
	c := conditionOf(rsp, condBackupVerified)
	if c == nil || c.GetStatus() != fnv1.Status_STATUS_CONDITION_TRUE || !strings.Contains(c.GetMessage(), "to 2026-12-06T04:29:58Z in 41.8 s") {
		t.Errorf("BackupVerified %v", c)
	}
	// The record fed back: one call, no pod read.
	req.Observed.Composite.Resource.Fields["status"] = structpb.NewStructValue(structAt(rsp.GetDesired().GetComposite().GetResource(), "status"))
	rsp = runOnce(t, req)
	if rsp.GetRequirements().GetResources()[requirementDrillPods] != nil {
		t.Error("the drill's pods are required again once their verdict is recorded")
	}
	if c := conditionOf(rsp, condBackupVerified); c == nil || c.GetStatus() != fnv1.Status_STATUS_CONDITION_TRUE {
		t.Errorf("BackupVerified %v from the record", c)
	}
}
