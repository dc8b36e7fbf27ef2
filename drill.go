package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/example/function-database/scripts"
)

// The restore drill (docs/backups.md): a CronJob N-drill whose pod restores
// the newest backup of the Database's repository into a volume of its own,
// replays the archive to its end, checks the copy (scripts/drill.sh) and ends
// with the verdict in its termination message. The function reads that
// message through Crossplane's required resources once per run, when the
// CronJob's status shows a run that status.drill does not record yet, and
// keeps it in status.drill: the BackupVerified condition is derived from
// that record, so it needs no read on a reconcile where nothing ran.

// defaultDrillSchedule is weekly, on Sunday night: a drill reads the whole
// Database from the bucket and replays a week of WAL at most.
const defaultDrillSchedule = "30 4 * * 0"

// drillRecoverySeconds bounds the replay (RECOVERY_TIMEOUT_SECONDS); the
// Job's deadline leaves the restore and the checks as long again.
const drillRecoverySeconds = 3600

// drillName is the CronJob N-drill (CronJob names are limited to 52
// characters and N to 45). Not reserved, as N-wal.
func drillName(db *database) string { return db.Name + "-drill" }

// drillSocketDir is the copy's socket directory, on the pod's tmp volume.
const drillSocketDir = tmpDir + "/drill"

func drillCronJob(db *database, p *plan) *batchv1.CronJob {
	// The copy's volume: as large as the Database's, on the node's disk,
	// gone with the pod.
	size := dataVolume(p)
	env := []corev1.EnvVar{
		{Name: scripts.EnvPGData, Value: pgData},
		{Name: scripts.EnvPGHost, Value: drillSocketDir},
		{Name: scripts.EnvPGPort, Value: strconv.Itoa(postgresPort)},
		{Name: scripts.EnvPGUser, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: superuserName(db)}, Key: keyUsername,
		}}},
		{Name: scripts.EnvObjectStorageDir, Value: objectStorageDir},
		{Name: scripts.EnvRecoveryTimeout, Value: strconv.Itoa(drillRecoverySeconds)},
	}
	c := scriptContainer(containerDrill, p.Image, scripts.Drill, env,
		corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		},
		[]corev1.VolumeMount{
			{Name: volData, MountPath: dataDir},
			{Name: volScripts, MountPath: scriptsDir, ReadOnly: true},
			{Name: volObjectStorage, MountPath: objectStorageDir, ReadOnly: true},
			{Name: volTmp, MountPath: tmpDir},
		})
	// The verdict (scripts.DrillVerdict) leaves the pod as its termination message.
	c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	return cronJob(db, scheduled{
		name: drillName(db), component: componentDrill, schedule: db.ObjectStorage.DrillSchedule,
		// A drill missed by more than an hour waits for the next one.
		startingDeadline: 3600,
		history:          1,
		// One attempt: a retry would hide a failure the condition must
		// show; the next schedule retries.
		attempts:       1,
		activeDeadline: 2 * drillRecoverySeconds,
		container:      c,
		volumes: []corev1.Volume{
			{Name: volData, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &size}}},
			scriptsVolume(db),
			objectStorageVolume(db),
			{Name: volTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	})
}

// drillRecord is status.drill: the last finished drill, as the function read
// it. Scheduled is the run it answers (the CronJob's lastScheduleTime).
type drillRecord struct {
	Scheduled       *metav1.Time `json:"scheduled,omitempty"`
	Result          string       `json:"result"`
	Backup          string       `json:"backup,omitempty"`
	RestoredTo      string       `json:"restoredTo,omitempty"`
	RestoreSeconds  float64      `json:"restoreSeconds,omitempty"`
	RecoverySeconds float64      `json:"recoverySeconds,omitempty"`
	Seconds         float64      `json:"seconds,omitempty"`
	Tables          int64        `json:"tables,omitempty"`
	Rows            int64        `json:"rows,omitempty"`
	Checksum        string       `json:"checksum,omitempty"`
	Reason          string       `json:"reason,omitempty"`
}

// drillOutcome is what the required resources say of the drill's pods: the
// verdict of the newest pod created at or after since.
type drillOutcome struct {
	Resolved bool
	Verdict  *scripts.DrillVerdict
}

// lookupDrillOutcome reads the drill pods' termination messages: the newest
// pod (by creation) created at or after since that ended with a verdict.
func lookupDrillOutcome(req *fnv1.RunFunctionRequest, since time.Time) drillOutcome {
	rs, ok := req.GetRequiredResources()[requirementDrillPods]
	if !ok {
		return drillOutcome{}
	}
	out := drillOutcome{Resolved: true}
	var newest time.Time
	for _, r := range rs.GetItems() {
		pod := r.GetResource()
		created, err := time.Parse(time.RFC3339, stringAt(pod, "metadata", "creationTimestamp"))
		if err != nil || created.Before(since) || (out.Verdict != nil && !created.After(newest)) {
			continue
		}
		if v := decodeReport(terminationMessage(pod, containerDrill, false), func(v *scripts.DrillVerdict) bool { return v.Result != "" }); v != nil {
			out.Verdict, newest = v, created
		}
	}
	return out
}

// readDrillRecord reads status.drill of the observed XR; a record that does
// not decode is taken as absent (the next run writes a new one).
func readDrillRecord(xr *structpb.Struct) *drillRecord {
	s := structAt(xr, "status", "drill")
	if s == nil {
		return nil
	}
	b, err := s.MarshalJSON()
	if err != nil {
		return nil
	}
	var r drillRecord
	if json.Unmarshal(b, &r) != nil || r.Result == "" {
		return nil
	}
	return &r
}

// drillPlan is what happens about the drill this reconcile.
type drillPlan struct {
	Record    *drillRecord
	Condition condition
	// Require asks for the drill's pods: a run finished that Record does
	// not answer yet.
	Require *fnv1.ResourceSelector
}

// The BackupVerified condition's reasons.
const (
	reasonDrillVerified   = "Verified"
	reasonDrillFailed     = "DrillFailed"
	reasonDrillNotYet     = "NotDrilledYet"
	reasonDrillNoBackup   = "NoBackupYet"
	reasonDrillResultGone = "ResultUnknown"
)

func planDrill(db *database, o *observed) *drillPlan {
	if db.ObjectStorage == nil || db.ObjectStorage.DrillSchedule == "" {
		return nil
	}
	d := &drillPlan{Record: o.DrillRecord}
	cj := o.Drill
	if cj != nil && cj.Status.LastScheduleTime != nil && len(cj.Status.Active) == 0 &&
		(d.Record == nil || d.Record.Scheduled == nil || !d.Record.Scheduled.Equal(cj.Status.LastScheduleTime)) {
		// A run finished that the record does not answer: read its pod
		// (asked for again on Crossplane's second call, which answers).
		d.Require = podSelector(db, labels(db, componentDrill))
		if out := o.DrillOutcome; out.Resolved {
			d.Record = recordDrill(cj, out.Verdict)
		}
	}
	d.Condition = drillCondition(db, d.Record, cj)
	return d
}

// recordDrill is the record of the CronJob's last run: its pod's verdict,
// or, when its pod is gone, what the CronJob's status says of it.
func recordDrill(cj *batchv1.CronJob, v *scripts.DrillVerdict) *drillRecord {
	sched := cj.Status.LastScheduleTime
	if v == nil {
		r := &drillRecord{Scheduled: sched, Result: scripts.DrillFailed, Reason: "the drill's pod is gone with its verdict, and the CronJob counts the run failed"}
		if succ := cj.Status.LastSuccessfulTime; succ != nil && !succ.Before(sched) {
			r.Result, r.Reason = scripts.DrillVerified, "the drill succeeded; its pod is gone with the details"
		}
		return r
	}
	return &drillRecord{
		Scheduled: sched, Result: v.Result, Backup: v.Backup, RestoredTo: v.RestoredTo,
		RestoreSeconds: v.RestoreSeconds, RecoverySeconds: v.RecoverySeconds, Seconds: v.Seconds,
		Tables: v.Tables, Rows: v.Rows, Checksum: v.Checksum, Reason: v.Reason,
	}
}

// drillCondition is BackupVerified, from the record of the last drill.
func drillCondition(db *database, r *drillRecord, cj *batchv1.CronJob) condition {
	where := "(CronJob " + drillName(db) + ", " + db.ObjectStorage.DrillSchedule + ")"
	if r == nil {
		msg := "the first restore drill " + where + " has not run yet"
		if cj != nil && len(cj.Status.Active) > 0 {
			msg = "the first restore drill " + where + " is running"
		}
		return condition{condBackupVerified, fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonDrillNotYet, msg}
	}
	at := "the drill scheduled at " + stamp(r.Scheduled)
	switch r.Result {
	case scripts.DrillVerified:
		if r.Backup == "" {
			return condition{condBackupVerified, fnv1.Status_STATUS_CONDITION_TRUE, reasonDrillVerified, at + ": " + r.Reason}
		}
		to := "its own end (no commit after it)"
		if r.RestoredTo != "" {
			to = r.RestoredTo
		}
		return condition{condBackupVerified, fnv1.Status_STATUS_CONDITION_TRUE, reasonDrillVerified, fmt.Sprintf(
			"%s restored backup %s and the archive after it to %s in %s s (restore %s s, replay %s s), checked every relation (pg_amcheck) and read %d rows of %d tables",
			at, r.Backup, to, seconds(r.Seconds), seconds(r.RestoreSeconds), seconds(r.RecoverySeconds), r.Rows, r.Tables)}
	case scripts.DrillNoBackup:
		return condition{condBackupVerified, fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonDrillNoBackup,
			at + " found no backup in the repository yet (the primary takes the first one once its archive starts)"}
	case scripts.DrillFailed:
		msg := at + " failed"
		if r.Backup != "" {
			msg += " to restore backup " + r.Backup
		}
		if r.Reason != "" {
			msg += ": " + r.Reason
		}
		return condition{condBackupVerified, fnv1.Status_STATUS_CONDITION_FALSE, reasonDrillFailed,
			msg + ". A restore from this archive may fail the same way: the drill Job's log says more"}
	}
	return condition{condBackupVerified, fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonDrillResultGone,
		at + " ended with result " + strconv.Quote(r.Result) + ", which this function does not know"}
}

func seconds(s float64) string { return strconv.FormatFloat(s, 'f', 1, 64) }
