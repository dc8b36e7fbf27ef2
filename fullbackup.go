package main

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/example/function-database/scripts"
)

// Full backups on the Database's schedule, with the archive (docs/backups.md).
// pgBackRest backs up only where it reaches the data directory, and a Job
// pod does not: the CronJob N-full asks the primary's sidecar for a full
// backup (scripts/full-backup.sh writes a request into the primary's data
// directory over SQL) and waits for its answer, so the CronJob's status is
// the backup's and BackupHealthy reads it as it reads the volume dumps'. The
// request reaches whichever instance is primary, and is asked again after a
// failover. pgBackRest expires what the repository's retention no longer
// needs after each backup (pgbackrestConf).

// fullBackupName is the CronJob N-full (CronJob names are limited to 52
// characters and N to 45). Not reserved, as N-wal.
func fullBackupName(db *database) string { return db.Name + "-full" }

// fullBackupCronJob: on spec.backup.schedule, when backups are on and the
// platform archives to object storage.
func fullBackupCronJob(db *database, p *plan) *batchv1.CronJob {
	env := append(adminEnv(db), corev1.EnvVar{Name: scripts.EnvPodName, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
	}})
	c, vols := sqlScriptPod(containerFullBackup, p.Image, scripts.FullBackup, env, db)
	return cronJob(db, scheduled{
		name: fullBackupName(db), component: componentFullBackup, schedule: db.Backup.Schedule,
		// A missed run (controller down) still runs within the hour.
		startingDeadline: 3600,
		history:          3,
		// Two attempts: each asks anew (its pod's name is the request),
		// so a backup that failed on a primary's restart is taken again.
		attempts: 2,
		// The wait is the backup's: bounded as the volume dumps are.
		activeDeadline: int64(backupDeadline / time.Second),
		container:      c,
		volumes:        vols,
	})
}
