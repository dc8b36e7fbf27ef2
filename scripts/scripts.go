// Package scripts embeds the shell scripts that the PostgreSQL pods and jobs
// composed by function-database run. The function ships every file of
// Files() in the ConfigMap N-scripts (mounted at /opt/database/scripts, env
// SCRIPTS_DIR), next to the keys postgresql.conf (tier settings) and
// initialized (value "true" once the StatefulSet has first been ready).
// Scripts are started as `bash $SCRIPTS_DIR/<name>` and find lib.sh (shared
// helpers) next to themselves.
//
// The contract (notes/CONTRACT.md), by script:
//
//   - Entrypoint, command of the postgres container of every pod. Env POD_NAME
//     (ordinal after the last '-'; 0 is the primary), PGDATA, PGPORT, PGHOST
//     (socket directory), DB_NAME, APP_USER, PRIMARY_HOST, SCRIPTS_DIR,
//     APP_SECRET_DIR (file password), ADMIN_SECRET_DIR (files username,
//     password, replication-username, replication-password). Optional:
//     PRIMARY_PORT (default 5432), STATE_DIR (default /tmp; probe state),
//     RETRY_INTERVAL (default 5 s), CLONE_MAX_RATE (pg_basebackup --max-rate).
//     The primary initialises an empty data directory once; with
//     SCRIPTS_DIR/initialized true it holds instead (unready, alive). Standbys
//     clone the primary with pg_basebackup through slot POD_NAME ('-' → '_')
//     and never clone a completed data directory again.
//   - Probe, `probe.sh ready|live`: readiness and liveness of that container.
//   - SyncPasswords, the password-sync sidecar (same env and mounts, including
//     the data volume; SYNC_INTERVAL, default 5 s): applies the Secrets'
//     passwords to the roles on the primary when they change; on a standby it
//     only refreshes the walreceiver's passfile next to PGDATA.
//   - Backup, the backup CronJob: PGHOST PGPORT PGUSER PGPASSWORD DB_NAME
//     BACKUP_DIR BACKUP_RETENTION DATABASE. Files
//     DATABASE-YYYYmmddTHHMMSSZ.{dump,globals.sql,sha256}.
//   - Restore, the restore Job: PGHOST PGPORT PGUSER PGPASSWORD DB_NAME
//     APP_USER RESTORE_DIR RESTORE_BACKUP (latest or a file name)
//     RESTORE_SOURCE. Exit 0 and a last line "restore: SUCCESS: ..." on
//     success; exit 3 when DB_NAME already holds user tables (refused,
//     nothing changed); exit 4 when the backup asked for is not there or
//     does not verify (nothing changed); other non-zero on failure.
//   - Failover, the failover Job: DATABASE PRIMARY_ORDINAL INSTANCES
//     PEER_DOMAIN PGPORT ADMIN_SECRET_DIR, optional GRACE_SECONDS and
//     STARTING_MAX_SECONDS (how long a starting primary may take), and what
//     the function knew when it composed the Job: DURABILITY (sync or
//     async), LAST_TIMELINE (the last recorded failover's timeline, 1 when
//     none is: an instance answering as a primary counts as promoted only
//     above it), QUALIFIED_ORDINALS (the standbys whose pods were ready,
//     ascending, space-separated, possibly empty: the only ones to promote);
//     MODE=switchover with TARGET_ORDINAL for a planned switchover. Waits
//     for the primary for GRACE_SECONDS, promotes the most advanced standby
//     and writes the outcome as one JSON line to the termination log:
//     {"result":"promoted","from":F,"to":T,"timeline":N,"lsn":"X/Y"} or
//     {"result":"not-needed",...}. Exit 5 when no standby answers.
//
// The scripts need bash, coreutils and the PostgreSQL client and server tools
// only: they run unchanged in the official postgres image and on a Debian
// machine with the postgresql package. No password is ever a process argument.
package scripts

import (
	"embed"
	"io/fs"
	"sort"
)

// Script names: keys of Files() and of the scripts ConfigMap.
const (
	Entrypoint    = "entrypoint.sh"
	Probe         = "probe.sh"
	SyncPasswords = "sync-passwords.sh"
	Backup        = "backup.sh"
	Restore       = "restore.sh"
	Failover      = "failover.sh"
	// Lib holds the helpers the other scripts source; it must be shipped too.
	Lib = "lib.sh"
)

//go:embed *.sh
var files embed.FS

// Files returns every embedded script, file name → content.
func Files() map[string]string {
	out := map[string]string{}
	entries, err := fs.Glob(files, "*.sh")
	if err != nil {
		panic(err) // the pattern is constant and valid
	}
	for _, name := range entries {
		b, err := files.ReadFile(name)
		if err != nil {
			panic(err) // embedded files are always readable
		}
		out[name] = string(b)
	}
	return out
}

// Names returns the names of Files(), sorted.
func Names() []string {
	names := make([]string, 0, len(Files()))
	for name := range Files() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
