package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"
)

func sts(replicas int32, gen int64, st appsv1.StatefulSetStatus) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Generation: gen},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To(replicas)},
		Status:     st,
	}
}

func TestStatefulSetReady(t *testing.T) {
	done := appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 3, ReadyReplicas: 3, UpdatedReplicas: 3, CurrentRevision: "r2", UpdateRevision: "r2"}
	cases := map[string]struct {
		reason string
		sts    *appsv1.StatefulSet
		want   int32
		ready  bool
	}{
		"NotObserved":     {"nothing to be ready", nil, 3, false},
		"AllReady":        {"every instance ready on the current revision", sts(3, 2, done), 3, true},
		"OldGeneration":   {"the controller has not seen the spec yet", sts(3, 3, done), 3, false},
		"OneNotReady":     {"an instance not ready", sts(3, 2, func() appsv1.StatefulSetStatus { s := done; s.ReadyReplicas = 2; return s }()), 3, false},
		"RollingUpdate":   {"a roll in progress", sts(3, 2, func() appsv1.StatefulSetStatus { s := done; s.UpdateRevision = "r3"; return s }()), 3, false},
		"NotUpdated":      {"instances on the old template", sts(3, 2, func() appsv1.StatefulSetStatus { s := done; s.UpdatedReplicas = 1; return s }()), 3, false},
		"ScaleNotApplied": {"desired 5 but the observed spec says 3", sts(3, 2, done), 5, false},
		"ScaledDownLeft":  {"an instance still terminating", sts(3, 2, func() appsv1.StatefulSetStatus { s := done; s.Replicas = 4; return s }()), 3, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := statefulSetReady(tc.sts, tc.want); got != tc.ready {
				t.Errorf("%s: statefulSetReady = %v, want %v", tc.reason, got, tc.ready)
			}
		})
	}
}

func TestReady(t *testing.T) {
	complete := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}}
	failed := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}}}
	type objs = map[resource.Name]runtime.Object
	cases := map[string]struct {
		reason string
		name   resource.Name
		obs    objs
		want   fnv1.Ready
	}{
		"SecretObserved":      {"a Secret works once it exists", rnCredentials, objs{rnCredentials: &corev1.Secret{}}, fnv1.Ready_READY_TRUE},
		"SecretNotObserved":   {"nothing observed, nothing ready", rnCredentials, objs{}, fnv1.Ready_READY_FALSE},
		"PDBObserved":         {"a PDB works once it exists", rnPDB, objs{rnPDB: &policyv1.PodDisruptionBudget{}}, fnv1.Ready_READY_TRUE},
		"CronJobNeverRan":     {"backup health is BackupHealthy's, not readiness'", rnBackup, objs{rnBackup: &batchv1.CronJob{}}, fnv1.Ready_READY_TRUE},
		"RestoreRunning":      {"a restore not done is not ready", rnRestore, objs{rnRestore: &batchv1.Job{}}, fnv1.Ready_READY_FALSE},
		"RestoreComplete":     {"a restore done is", rnRestore, objs{rnRestore: complete}, fnv1.Ready_READY_TRUE},
		"RestoreFailed":       {"a failed restore is not", rnRestore, objs{rnRestore: failed}, fnv1.Ready_READY_FALSE},
		"StatefulSetStarting": {"one of two instances", rnStatefulSet, objs{rnStatefulSet: sts(2, 1, appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 1})}, fnv1.Ready_READY_FALSE},
		"StatefulSetReady":    {"both instances ready on the current revision", rnStatefulSet, objs{rnStatefulSet: sts(2, 1, appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2, CurrentRevision: "r", UpdateRevision: "r"})}, fnv1.Ready_READY_TRUE},
		"NoRule":              {"a name without a rule is never ready, even observed: no default", "pgbouncer", objs{"pgbouncer": &corev1.Secret{}}, fnv1.Ready_READY_FALSE},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ready(tc.name, observedOf(t, tc.obs), 2); got != tc.want {
				t.Errorf("%s: ready(%s) = %v, want %v", tc.reason, tc.name, got, tc.want)
			}
		})
	}
}

func TestBackupCondition(t *testing.T) {
	at := func(s string) *metav1.Time {
		tm, err := time3339(s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	on := &database{Name: "orders", Backup: backup{Enabled: true, Schedule: "0 2 * * *"}}
	cj := func(sched, succ *metav1.Time, active int) *batchv1.CronJob {
		c := &batchv1.CronJob{Status: batchv1.CronJobStatus{LastScheduleTime: sched, LastSuccessfulTime: succ}}
		for range active {
			c.Status.Active = append(c.Status.Active, corev1.ObjectReference{Name: "job"})
		}
		return c
	}
	archived := &database{Name: "orders", Backup: on.Backup, ObjectStorage: &objectStorage{}}
	ok := cj(at("2026-11-28T02:00:00Z"), at("2026-11-28T02:03:00Z"), 0)
	cases := map[string]struct {
		db   *database
		cj   *batchv1.CronJob
		want condition
	}{
		"Disabled":    {&database{}, nil, condition{condBackupHealthy, fnv1.Status_STATUS_CONDITION_TRUE, "BackupDisabled", "no backups are taken (spec.backup.enabled is false): nothing can fail; enable them to have backups"}},
		"NotObserved": {on, nil, condition{condBackupHealthy, fnv1.Status_STATUS_CONDITION_UNKNOWN, "NoBackupYet", "no backup has been scheduled yet; schedule 0 2 * * *"}},
		"NeverRan":    {on, cj(nil, nil, 0), condition{condBackupHealthy, fnv1.Status_STATUS_CONDITION_UNKNOWN, "NoBackupYet", "no backup has been scheduled yet; schedule 0 2 * * *"}},
		"Succeeded":   {on, cj(at("2026-11-28T02:00:00Z"), at("2026-11-28T02:03:00Z"), 0), condition{condBackupHealthy, fnv1.Status_STATUS_CONDITION_TRUE, "BackupSucceeded", "last backup succeeded at 2026-11-28T02:03:00Z"}},
		"Running": {on, cj(at("2026-11-29T02:00:00Z"), at("2026-11-28T02:03:00Z"), 1), condition{condBackupHealthy, fnv1.Status_STATUS_CONDITION_UNKNOWN, "BackupRunning",
			"a backup scheduled at 2026-11-29T02:00:00Z is running; a run not done within 6h is stopped and reported failed"}},
		"Failed": {on, cj(at("2026-11-29T02:00:00Z"), at("2026-11-28T02:03:00Z"), 0), condition{condBackupHealthy, fnv1.Status_STATUS_CONDITION_FALSE, "BackupFailed",
			"the backup scheduled at 2026-11-29T02:00:00Z did not succeed: it failed or ran past its 6h bound (the Job's Failed condition says which: BackoffLimitExceeded or DeadlineExceeded); last success at 2026-11-28T02:03:00Z; see the jobs of CronJob orders-backup"}},
		"NeverSucceeded": {on, cj(at("2026-11-29T02:00:00Z"), nil, 0), condition{condBackupHealthy, fnv1.Status_STATUS_CONDITION_FALSE, "BackupFailed",
			"the backup scheduled at 2026-11-29T02:00:00Z did not succeed and no backup ever has: it failed or ran past its 6h bound (the Job's Failed condition says which: BackoffLimitExceeded or DeadlineExceeded); see the jobs of CronJob orders-backup"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, backupCondition(tc.db, &observed{Backup: tc.cj}, nil)); d != "" {
				t.Errorf("backupCondition (-want +got):\n%s", d)
			}
		})
	}
	// With the archive, the worse of the dumps and the full backups, both
	// named.
	for name, tc := range map[string]struct {
		dump, full *batchv1.CronJob
		want       condition
	}{
		"BothSucceeded": {ok, cj(at("2026-11-28T02:00:00Z"), at("2026-11-28T02:01:10Z"), 0), condition{condBackupHealthy, fnv1.Status_STATUS_CONDITION_TRUE, "BackupSucceeded",
			"volume dump (CronJob orders-backup): last backup succeeded at 2026-11-28T02:03:00Z; full backup to the bucket (CronJob orders-full): last full backup succeeded at 2026-11-28T02:01:10Z"}},
		"FullNotYet": {ok, nil, condition{condBackupHealthy, fnv1.Status_STATUS_CONDITION_UNKNOWN, "NoBackupYet",
			"volume dump (CronJob orders-backup): last backup succeeded at 2026-11-28T02:03:00Z; full backup to the bucket (CronJob orders-full): no full backup has been scheduled yet; schedule 0 2 * * *"}},
		"FullFailed": {ok, cj(at("2026-11-28T02:00:00Z"), nil, 0), condition{condBackupHealthy, fnv1.Status_STATUS_CONDITION_FALSE, "BackupFailed",
			"volume dump (CronJob orders-backup): last backup succeeded at 2026-11-28T02:03:00Z; full backup to the bucket (CronJob orders-full): the full backup scheduled at 2026-11-28T02:00:00Z did not succeed and no full backup ever has: it failed or ran past its 6h bound (the Job's Failed condition says which: BackoffLimitExceeded or DeadlineExceeded); see the jobs of CronJob orders-full"}},
		"DumpFailedFullRunning": {cj(at("2026-11-29T02:00:00Z"), at("2026-11-28T02:03:00Z"), 0), cj(at("2026-11-29T02:00:00Z"), at("2026-11-28T02:01:10Z"), 1), condition{condBackupHealthy, fnv1.Status_STATUS_CONDITION_FALSE, "BackupFailed",
			"volume dump (CronJob orders-backup): the backup scheduled at 2026-11-29T02:00:00Z did not succeed: it failed or ran past its 6h bound (the Job's Failed condition says which: BackoffLimitExceeded or DeadlineExceeded); last success at 2026-11-28T02:03:00Z; see the jobs of CronJob orders-backup; full backup to the bucket (CronJob orders-full): a full backup scheduled at 2026-11-29T02:00:00Z is running; a run not done within 6h is stopped and reported failed"}},
	} {
		t.Run("Archived"+name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, backupCondition(archived, &observed{Backup: tc.dump, FullBackup: tc.full}, nil)); d != "" {
				t.Errorf("backupCondition (-want +got):\n%s", d)
			}
		})
	}
	want := condition{condBackupHealthy, fnv1.Status_STATUS_CONDITION_TRUE, "BackupDisabled",
		"no backups are taken (spec.backup.enabled is false): nothing can fail; enable them to have backups (the WAL archive goes on, from its first full backup; the repository's retention acts only after a backup)"}
	if d := cmp.Diff(want, backupCondition(&database{ObjectStorage: &objectStorage{}}, &observed{}, &archivePlan{})); d != "" {
		t.Errorf("archived, backups off: backupCondition (-want +got):\n%s", d)
	}
	// A failing archive is a failing backup, backups on or off.
	failing := &archivePlan{Condition: condition{condWALArchive, fnv1.Status_STATUS_CONDITION_FALSE, reasonArchiveFailing, "the check scheduled at 2026-11-28T02:05:00Z found the archive failing"}}
	for name, db := range map[string]*database{"on": archived, "off": {Name: "orders", ObjectStorage: &objectStorage{}}} {
		got := backupCondition(db, &observed{Backup: ok, FullBackup: ok}, failing)
		if got.Status != fnv1.Status_STATUS_CONDITION_FALSE || got.Reason != reasonArchiveFailing || !strings.HasPrefix(got.Message, "the WAL archive fails (WALArchive): the check scheduled") {
			t.Errorf("backups %s, the archive failing: BackupHealthy %+v, want False naming WALArchive", name, got)
		}
	}
}

func time3339(s string) (*metav1.Time, error) {
	var tm metav1.Time
	err := tm.UnmarshalQueryParameter(s)
	return &tm, err
}
