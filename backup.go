package main

import (
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/example/function-database/scripts"
)

// adminEnv connects a job to the primary as the superuser (libpq's
// variables), and names the SQL database (scripts.Contract). The password
// comes from the Secret by reference: no secret value is ever written into
// a pod spec.
func adminEnv(db *database) []corev1.EnvVar {
	ref := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: superuserName(db)}, Key: key,
		}}
	}
	return []corev1.EnvVar{
		{Name: scripts.EnvPGHost, Value: serviceHost(db, db.Name)},
		{Name: scripts.EnvPGPort, Value: strconv.Itoa(postgresPort)},
		{Name: scripts.EnvPGUser, ValueFrom: ref(keyUsername)},
		{Name: scripts.EnvPGPassword, ValueFrom: ref(keyPassword)},
		{Name: scripts.EnvDBName, Value: db.SQLName},
	}
}

// jobResources are modest: pg_dump and pg_restore stream, they do not buffer.
func jobResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
}

// besidePod schedules a job pod on the node of another pod: the backup
// volume is ReadWriteOnce and attached where ordinal 0 runs.
func besidePod(required bool, podLabels map[string]string) *corev1.Affinity {
	term := corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: podLabels},
		TopologyKey:   corev1.LabelHostname,
	}
	a := &corev1.PodAffinity{}
	if required {
		a.RequiredDuringSchedulingIgnoredDuringExecution = []corev1.PodAffinityTerm{term}
	} else {
		a.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: term}}
	}
	return &corev1.Affinity{PodAffinity: a}
}

// backupDeadline bounds one backup run, retries included: the Job is
// stopped (DeadlineExceeded) and fails, its CronJob's active list empties and
// BackupHealthy turns False. Without it a hung pg_dump ran forever, and with
// concurrencyPolicy Forbid every later run was skipped while the condition
// said "running". Six hours dump tens of GB with room to spare; pg_dump's own
// --lock-wait-timeout (backup.sh) fails a dump stuck behind a lock sooner.
const (
	backupDeadline     = 6 * time.Hour
	backupDeadlineText = "6h" // for messages; TestBackupRunsBounded keeps it equal
)

// backupCronJob dumps the app database on schedule to the backup volume of
// ordinal 0. The volume is a claim template of the StatefulSet, not a
// resource of the Database, so the backups outlive the Database under
// deletionPolicy Retain.
func backupCronJob(db *database, p *plan) *batchv1.CronJob {
	env := append(adminEnv(db),
		corev1.EnvVar{Name: scripts.EnvBackupDir, Value: backupsDir},
		corev1.EnvVar{Name: scripts.EnvBackupRetention, Value: strconv.FormatInt(db.Backup.Retention, 10)},
		corev1.EnvVar{Name: scripts.EnvDatabase, Value: db.Name},
	)
	return cronJob(db, scheduled{
		name: backupName(db), component: componentBackup, schedule: db.Backup.Schedule,
		// A missed run (controller down) still runs within the hour.
		startingDeadline: 3600,
		history:          3,
		// Three attempts: a dump that failed on a primary restart
		// succeeds on the next; one that fails three times needs a person.
		attempts:       3,
		activeDeadline: int64(backupDeadline / time.Second),
		affinity:       besidePod(true, podLabels(db, 0)),
		container:      jobContainer(containerBackup, p.Image, scripts.Backup, env, volBackups, backupsDir, false),
		volumes:        jobVolumes(db, volBackups, backupsClaimName(db.Name), false),
	})
}

// jobContainer is the container of a backup or restore Job: script from the
// scripts volume, the backup volume vol at dir, a scratch /tmp.
func jobContainer(name, image, script string, env []corev1.EnvVar, vol, dir string, readOnly bool) corev1.Container {
	return scriptContainer(name, image, script, env, jobResources(), []corev1.VolumeMount{
		{Name: vol, MountPath: dir, ReadOnly: readOnly},
		{Name: volScripts, MountPath: scriptsDir, ReadOnly: true},
		{Name: volTmp, MountPath: tmpDir},
	})
}

// jobVolumes are the volumes jobContainer mounts.
func jobVolumes(db *database, vol, claim string, readOnly bool) []corev1.Volume {
	return []corev1.Volume{
		claimVolume(vol, claim, readOnly),
		scriptsVolume(db),
		{Name: volTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
}

func claimVolume(name, claim string, readOnly bool) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly},
	}}
}
