package main

import (
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/example/function-database/scripts"
)

// The restore of spec.restoreFrom (issue 12 item 6), as planRestore runs it.
//
// A Job's pod template is immutable and a Job is one run, so the function
// treats N-restore as one attempt and never patches it: the Job is composed
// from the parameters it was created with (frozen), replaced when the user
// asks for another run, and dropped once its success is recorded.
//
//   - The outcome is recorded in the XR's status.restore, which the function
//     reads back from the observed XR: status.restore is written from the
//     first reconcile (completed false), so "a restore was asked for at
//     creation" survives the loss of the Job, and completed true (with the
//     Job's completionTime) is the durable "done" that lets the Job go.
//     Before, a deleted Job looked like restoreFrom set after creation
//     (SpecApplied=False) and the phase said Running on an empty database.
//   - Frozen: the image and the source affinity of an observed Job are read
//     back from it, so a minor roll, an input image change or the source
//     going away never touch a Job that runs. A hash of the whole Job
//     (annotationRestoreHash) says whether the Job the function would
//     compose is the one that exists; if not (spec.restoreFrom.database,
//     .backup or .attempt changed, or a function version composes the Job
//     differently) the Job is dropped (Crossplane deletes it, foreground: its
//     pod goes, pg_restore's single transaction rolls back) and a new one is
//     composed once it is gone. Before, any such change failed every apply
//     ("field is immutable") for as long as restoreFrom stayed set.
//   - Retry: a failed Job stays (its logs, Restored=False with the reason and
//     phase Failed) until the user raises spec.restoreFrom.attempt, names
//     another backup or source, or deletes the Job. restore.sh refuses a
//     database that holds a user table (exit 3), so a retry can never
//     overwrite data, and its own mark makes a rerun after a success a no-op.
//   - Done: once the Job succeeded, status.restore says completed and the Job
//     is no longer composed (its template could not follow later changes);
//     restoreFrom may stay set. Changing it then is reported, not applied.
//   - Bounded: activeDeadlineSeconds covers every attempt and the time spent
//     pending; exit 3 (refused) and 4 (no such backup, or it does not
//     verify) fail the Job at once through its podFailurePolicy, and the
//     condition names the cause from the Job's Failed condition.
//   - Source: the source Database is read through Crossplane's required
//     resources (the same kind as the XR; a legacy XR's source by its claim
//     labels). While it exists its primary has the backup volume (ReadWriteOnce)
//     attached, so the pod must run on that node: required pod affinity
//     (preferred let it land elsewhere and hang on a Multi-Attach error).
//     When it does not exist the Job is still composed without affinity: a
//     Database deleted under deletionPolicy Retain leaves its backup volume,
//     and restoring from it is the way back. Restored=False
//     RestoreSourceMissing says so until the Job's pod runs.
const (
	// restoreDeadline bounds a restore Job, its retries and its time
	// pending included: a restore rebuilds every index and constraint, so it
	// takes longer than the dump (bounded at backupDeadline); a Job pending
	// on a backup volume that never comes, or beside a source primary that
	// never runs, fails at the bound instead of waiting forever.
	restoreDeadline     = 12 * time.Hour
	restoreDeadlineText = "12h" // for messages; TestRestoreJobBounded keeps it equal

	// restore.sh's exit codes that no retry of the same Job can change: the
	// Job fails at once (podFailurePolicy).
	restoreRefused  = 3 // the database holds user tables
	restoreNoBackup = 4 // the backup named is not there or does not verify
)

// Reasons of the Restored condition.
const (
	reasonRestoreSucceeded     = "RestoreSucceeded"
	reasonRestorePending       = "RestorePending"
	reasonRestoreRunning       = "RestoreRunning"
	reasonRestoreReplacing     = "RestoreReplacing"
	reasonRestoreSourceMissing = "RestoreSourceMissing"
	reasonRestoreRefused       = "RestoreRefused"
	reasonRestoreBackupMissing = "RestoreBackupMissing"
	reasonRestoreTimedOut      = "RestoreTimedOut"
	reasonRestoreFailed        = "RestoreFailed"
)

// restoreStatus is status.restore: what was asked for and how it went. Once
// Completed, the function reads it back as the record of the restore.
type restoreStatus struct {
	Source string `json:"source"`
	// Namespace is the source's namespace when it is not the Database's
	// (a restore from another namespace's archive).
	Namespace string `json:"namespace,omitempty"`
	Backup    string `json:"backup"`
	Attempt   int64  `json:"attempt,omitempty"`
	// PointInTime is the archive's point a restore from the archive
	// restored to (RFC 3339); empty: the archive's end, or a volume backup.
	PointInTime string `json:"pointInTime,omitempty"`
	// RestoredTo, LSN and Timeline: what a restore from the archive
	// reached, as its first primary reported it: the commit time of the
	// last transaction replayed (RFC 3339; empty when none was), and the
	// LSN and timeline where this Database's own history starts.
	RestoredTo string `json:"restoredTo,omitempty"`
	LSN        string `json:"lsn,omitempty"`
	Timeline   int64  `json:"timeline,omitempty"`
	// StoppedIn and ArchiveEnd, only when a restore to the archive's end
	// stopped at a gap: the segment the replay ended in, and the last one
	// the archive held (the writes in between were not restored).
	StoppedIn      string       `json:"stoppedIn,omitempty"`
	ArchiveEnd     string       `json:"archiveEnd,omitempty"`
	Completed      bool         `json:"completed"`
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// sourceLookup is what Crossplane's required resources said of the source
// Database. Resolved is false before Crossplane has answered (the first call
// of a reconcile): the function then asks and composes no new Job yet.
type sourceLookup struct {
	Resolved, Exists bool
}

// restoreRun is one run of the restore: the parameters of a restore Job.
type restoreRun struct {
	Source, Backup string
	Attempt        int64
	Image          string
	// BesideSource pins the pod to the node of the source's primary, which
	// has the source's backup volume attached.
	BesideSource bool
}

// restorePlan is what the function does about spec.restoreFrom.
type restorePlan struct {
	// Job is the restore Job to compose, or nil (none yet, replaced, or done).
	Job       *batchv1.Job
	Status    *restoreStatus
	Condition condition
	// Pending: the restored data is not there yet (phase Provisioning).
	Pending bool
	// Failed: the Job failed and waits for the user (phase Failed).
	Failed bool
	// Require asks Crossplane for the source Database.
	Require *fnv1.ResourceSelector
	// RequireInstances asks for the instance pods: a restore from the
	// archive done and not recorded yet, whose report is the first
	// primary's termination message.
	RequireInstances *fnv1.ResourceSelector
	// Warnings: a restore to the archive's end that stopped at a gap
	// (newlyWarned against the Restored condition).
	Warnings []warning
}

// planRestore decides the restore (see the comment above the constants);
// blocked is a spec.restoreFrom change it will not apply.
func planRestore(db *database, p *plan, o *observed) (*restorePlan, []blocked) {
	spec := db.RestoreFrom
	if spec == nil {
		return nil, nil
	}
	if spec.From == restoreFromArchive {
		return planArchiveRestore(db, p, o)
	}
	rec, job := o.RestoreRecord, o.Restore
	// The Job's conditions are the whole outcome (reported): restore.sh's
	// mark makes a rerun after a success a no-op, so a success is recorded
	// and the Job dropped in the same reconcile.
	stage := stageOf(job, rec != nil && rec.Completed, true)
	switch {
	case stage == stageRecorded:
		var b []blocked
		if spec.Database != rec.Source || spec.Backup != rec.Backup {
			b = append(b, blocked{reasonRestoreAfterCreate, fmt.Sprintf(
				"spec.restoreFrom names %s/%s, but backup %s/%s was restored%s: a restore runs once, at creation, and never over data. Set spec.restoreFrom back or remove it; to restore %s/%s, create a new Database",
				spec.Database, spec.Backup, rec.Source, rec.Backup, completedAt(rec), spec.Database, spec.Backup)})
		}
		return &restorePlan{Status: rec, Condition: restoreSucceeded(rec)}, b
	case stage == stageSucceeded:
		// Recorded now and dropped now: should the status write be lost,
		// the next reconcile composes the Job again, whose run finds the
		// mark restore.sh left and succeeds without touching the data.
		st := ranStatus(job, spec)
		st.Completed, st.CompletionTime = true, job.Status.CompletionTime
		return &restorePlan{Status: st, Condition: restoreSucceeded(st)}, nil
	case stage == stageAbsent && rec == nil && p.Initialized:
		return nil, []blocked{{reasonRestoreAfterCreate, fmt.Sprintf(
			"spec.restoreFrom was set after the database was created; a restore runs only at creation and never over existing data. Create a new Database restoring from %s", spec.Database)}}
	}

	want := restoreRun{Source: spec.Database, Backup: spec.Backup, Attempt: spec.Attempt, Image: p.Image, BesideSource: o.Source.Exists}
	rp := &restorePlan{
		Pending: true,
		Status:  &restoreStatus{Source: want.Source, Backup: want.Backup, Attempt: want.Attempt},
		Require: sourceSelector(db),
	}
	if job != nil {
		// Frozen: what the running Job was created with stays, whatever
		// the spec's version, the input's image or the source do now.
		want.Image, want.BesideSource = frozenRun(job, p.Image)
		frozen := restoreJob(db, want)
		if frozen.Annotations[annotationRestoreHash] != job.Annotations[annotationRestoreHash] {
			ran := ranStatus(job, spec)
			rp.Condition = condition{condRestored, fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonRestoreReplacing, fmt.Sprintf(
				"Job %s (backup %s/%s, attempt %d) is not the Job spec.restoreFrom (backup %s/%s, attempt %d) and this function version compose: it is deleted, and a new one starts once it is gone",
				restoreName(db), ran.Source, ran.Backup, ran.Attempt, want.Source, want.Backup, want.Attempt)}
			return rp, nil
		}
		rp.Job = frozen
		if stage == stageFailed {
			rp.Failed = true
			rp.Condition = restoreFailed(db, want, job)
			return rp, nil
		}
		rp.Condition = restoreUnderWay(db, want, job, o.Source)
		return rp, nil
	}
	if !o.Source.Resolved {
		rp.Condition = condition{condRestored, fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonRestorePending, "looking up Database " + want.Source}
		return rp, nil
	}
	rp.Job = restoreJob(db, want)
	rp.Condition = restoreUnderWay(db, want, nil, o.Source)
	return rp, nil
}

// frozenRun reads back what an observed restore Job runs: its image and
// whether it is pinned beside the source's primary.
func frozenRun(j *batchv1.Job, fallback string) (img string, beside bool) {
	a := j.Spec.Template.Spec.Affinity
	return frozenImage(j, containerRestore, fallback), a != nil && a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0
}

// ranStatus is what an observed Job ran, the spec's values where the Job
// does not say (a Job of an earlier function version has no attempt).
func ranStatus(j *batchv1.Job, spec *restoreSpec) *restoreStatus {
	st := &restoreStatus{Source: spec.Database, Backup: spec.Backup}
	if v, ok := frozenEnv(j, scripts.EnvRestoreSource); ok {
		st.Source = v
	}
	if v, ok := frozenEnv(j, scripts.EnvRestoreBackup); ok {
		st.Backup = v
	}
	if a, err := strconv.ParseInt(j.Annotations[annotationRestoreAttempt], 10, 64); err == nil {
		st.Attempt = a
	}
	return st
}

func completedAt(st *restoreStatus) string {
	if st.CompletionTime == nil {
		return ""
	}
	return " at " + stamp(st.CompletionTime)
}

func restoreSucceeded(st *restoreStatus) condition {
	return condition{condRestored, fnv1.Status_STATUS_CONDITION_TRUE, reasonRestoreSucceeded, "restored backup " + st.Source + "/" + st.Backup + completedAt(st)}
}

// restoreUnderWay is the condition of a restore that has not finished: its
// Job j (nil before it is observed) pending or running.
func restoreUnderWay(db *database, run restoreRun, j *batchv1.Job, src sourceLookup) condition {
	what := "backup " + run.Source + "/" + run.Backup
	if j != nil && j.Status.Ready != nil && *j.Status.Ready > 0 {
		return condition{condRestored, fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonRestoreRunning, fmt.Sprintf(
			"restoring %s (Job %s, bounded at %s)", what, restoreName(db), restoreDeadlineText)}
	}
	if src.Resolved && !src.Exists {
		return condition{condRestored, fnv1.Status_STATUS_CONDITION_FALSE, reasonRestoreSourceMissing, fmt.Sprintf(
			"spec.restoreFrom.database: there is no Database %s in namespace %s. Job %s waits for its backup volume %s (a Database deleted under deletionPolicy Retain leaves it) and fails after %s; if the name is wrong, correct spec.restoreFrom.database (the Job is replaced)",
			run.Source, db.Namespace, restoreName(db), backupsClaimName(run.Source), restoreDeadlineText)}
	}
	return condition{condRestored, fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonRestorePending, fmt.Sprintf(
		"restoring %s (Job %s, bounded at %s)", what, restoreName(db), restoreDeadlineText)}
}

// restoreFailed names the cause of a failed restore Job from its Failed
// condition, and the way to run it again.
func restoreFailed(db *database, run restoreRun, j *batchv1.Job) condition {
	c, code := jobFailure(j), jobExitCode(j)
	what := "backup " + run.Source + "/" + run.Backup
	retry := fmt.Sprintf("set spec.restoreFrom.attempt to %d (or delete Job %s) to run it again", run.Attempt+1, restoreName(db))
	var reason, msg string
	switch {
	case code == restoreRefused:
		reason, msg = reasonRestoreRefused, fmt.Sprintf(
			"%s was not restored: database %s already holds user tables, and a restore never overwrites data (nothing changed). Keep the data as it is (remove spec.restoreFrom), or restore into a new Database",
			what, db.SQLName)
	case code == restoreNoBackup:
		reason, msg = reasonRestoreBackupMissing, fmt.Sprintf(
			"%s was not restored: it is not on volume %s or does not verify (for latest: no good backup there); nothing changed, the log of Job %s says which. Name an existing backup in spec.restoreFrom.backup (the Job is replaced), or, once there is one, %s",
			what, backupsClaimName(run.Source), restoreName(db), retry)
	case c.Reason == batchv1.JobReasonDeadlineExceeded:
		reason, msg = reasonRestoreTimedOut, fmt.Sprintf(
			"%s did not finish within %s (time pending included: waiting for volume %s, or for the primary of Database %s, beside which it runs); %s",
			what, restoreDeadlineText, backupsClaimName(run.Source), run.Source, retry)
	default:
		why := c.Reason
		if why == "" {
			why = "no reason given"
		}
		reason, msg = reasonRestoreFailed, fmt.Sprintf(
			"restoring %s failed (%s); the logs of Job %s's pods say why (a database that already holds tables is never overwritten); %s",
			what, why, restoreName(db), retry)
	}
	return condition{condRestored, fnv1.Status_STATUS_CONDITION_FALSE, reason, msg}
}

// restoreJob restores a backup of another Database into this one, once, at
// creation. It mounts the source's backup volume read-only (it outlives its
// Database under Retain) and restore.sh refuses a database that holds user
// tables, so no run can overwrite live data.
func restoreJob(db *database, run restoreRun) *batchv1.Job {
	env := append(adminEnv(db),
		corev1.EnvVar{Name: scripts.EnvAppUser, Value: db.SQLName},
		corev1.EnvVar{Name: scripts.EnvRestoreDir, Value: restoreDir},
		corev1.EnvVar{Name: scripts.EnvRestoreBackup, Value: run.Backup},
		corev1.EnvVar{Name: scripts.EnvRestoreSource, Value: run.Source},
	)
	var affinity *corev1.Affinity
	if run.BesideSource {
		// Required, not preferred: elsewhere the volume cannot attach
		// while the source's primary holds it (Multi-Attach), and the pod
		// would hang until the deadline.
		affinity = besidePod(true, map[string]string{labelName: appName, labelInstance: run.Source, labelPodName: run.Source + "-0"})
	}
	j := oneShotJob(db, oneShot{
		name:        restoreName(db),
		component:   componentRestore,
		annotations: map[string]string{annotationRestoreAttempt: strconv.FormatInt(run.Attempt, 10)},
		// The script waits for the new primary; retries cover a pod lost
		// with its node. The deadline bounds them all.
		retries:  6,
		deadline: restoreDeadline,
		// A pod evicted (node drain, preemption) is not a failure of the
		// restore.
		evictionFree: true,
		// Refused (the database holds tables) or no such backup: final,
		// retrying the same run cannot change it.
		finalExits: []int32{restoreRefused, restoreNoBackup},
		affinity:   affinity,
		container:  jobContainer(containerRestore, run.Image, scripts.Restore, env, volRestore, restoreDir, true),
		volumes:    jobVolumes(db, volRestore, backupsClaimName(run.Source), true),
	})
	j.Annotations[annotationRestoreHash] = jobHash(j)
	return j
}

// sourceSelector asks Crossplane for the source Database: a Database of the
// XR's own kind named spec.restoreFrom.database in its namespace; for a
// legacy XR (cluster scoped, named after its claim plus a suffix), the XR
// whose claim has that name in that namespace.
func sourceSelector(db *database) *fnv1.ResourceSelector {
	sel := &fnv1.ResourceSelector{ApiVersion: db.APIVersion, Kind: db.Kind}
	if db.Legacy {
		sel.Match = &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: map[string]string{
			labelClaimName: db.RestoreFrom.Database, labelClaimNamespace: db.Namespace,
		}}}
		return sel
	}
	sel.Match = &fnv1.ResourceSelector_MatchName{MatchName: db.RestoreFrom.Database}
	sel.Namespace = ptr.To(db.Namespace)
	return sel
}

// lookupSource reads the answer to sourceSelector from the request. A key
// present with no items is Crossplane's "not found".
func lookupSource(req *fnv1.RunFunctionRequest) sourceLookup {
	rs, ok := req.GetRequiredResources()[requirementRestoreSource]
	if !ok {
		return sourceLookup{}
	}
	return sourceLookup{Resolved: true, Exists: len(rs.GetItems()) > 0}
}

// readRestoreRecord reads status.restore of the observed XR: the function's
// own record, written by an earlier reconcile. Fields of the wrong type are
// taken as absent: at worst a restore runs again, and restore.sh's mark
// makes that a no-op.
func readRestoreRecord(xr *structpb.Struct) *restoreStatus {
	s := structAt(xr, "status", "restore")
	if s == nil {
		return nil
	}
	st := &restoreStatus{
		Source:      stringAt(s, "source"),
		Namespace:   stringAt(s, "namespace"),
		Backup:      stringAt(s, "backup"),
		PointInTime: stringAt(s, "pointInTime"),
		RestoredTo:  stringAt(s, "restoredTo"),
		LSN:         stringAt(s, "lsn"),
		StoppedIn:   stringAt(s, "stoppedIn"),
		ArchiveEnd:  stringAt(s, "archiveEnd"),
		Completed:   s.GetFields()["completed"].GetBoolValue(),
	}
	if n, ok := s.GetFields()["timeline"].GetKind().(*structpb.Value_NumberValue); ok && n.NumberValue > 0 && n.NumberValue < 1<<32 {
		st.Timeline = int64(n.NumberValue)
	}
	if n, ok := s.GetFields()["attempt"].GetKind().(*structpb.Value_NumberValue); ok && n.NumberValue >= 0 && n.NumberValue <= maxRestoreAttempt {
		st.Attempt = int64(n.NumberValue)
	}
	if t, err := time.Parse(time.RFC3339, stringAt(s, "completionTime")); err == nil {
		st.CompletionTime = &metav1.Time{Time: t}
	}
	return st
}
