// Package scripts embeds the shell scripts that the PostgreSQL pods and jobs
// composed by function-database run, and says what each of them reads. The
// function ships every file of Files(), without its comments (Shipped), in
// the ConfigMap N-scripts (mounted at /opt/database/scripts, env
// SCRIPTS_DIR), next to the keys
// postgresql.conf (the function's settings), primary (the ordinal it names
// the primary), instances (their number) and initialized (value "true" once
// the StatefulSet has first been ready). Scripts are started as
// `bash $SCRIPTS_DIR/<name>` and find lib.sh (shared helpers) next to
// themselves.
//
// What each script reads from its environment and from the files the
// function mounts, what it does and how it ends, is one table: Contract
// (contract.go). TestContractScripts holds it to the scripts (it reads
// them), the function's TestContractEnv to the containers its builders
// compose, and notes/CONTRACT.md is generated from it. The builders name the
// variables by its constants (EnvPodName, ...).
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
	Entrypoint = "entrypoint.sh"
	Probe      = "probe.sh"
	// PreStop is the postgres container's preStop hook: a primary whose
	// pod is being deleted serves on until a switchover moves it.
	PreStop       = "prestop.sh"
	SyncPasswords = "sync-passwords.sh"
	Backup        = "backup.sh"
	Restore       = "restore.sh"
	Failover      = "failover.sh"
	// Archive runs pgBackRest with the bucket's credentials (the
	// archive_command, and the sidecar's stanza and first backup).
	Archive = "pgbackrest.sh"
	// ArchiveCheck is the archive check CronJob's container.
	ArchiveCheck = "archive-check.sh"
	// FullBackup is the full backup CronJob's container: it asks the
	// primary's sidecar for a full backup and waits for the answer.
	FullBackup = "full-backup.sh"
	// Drill is the restore drill CronJob's container.
	Drill = "drill.sh"
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
