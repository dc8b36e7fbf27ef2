package main

import (
	"maps"
	"slices"
	"strings"
)

// PostgreSQL applies a postgresql.conf parameter according to its context
// (pg_settings.context): a postmaster-context parameter only at server
// start; every other one (sighup, superuser, user, backend) on a reload of
// the configuration files. The pods' config hash covers only what needs a
// restart, so a change of a reloadable setting no longer restarts every
// instance: the password-sync sidecar notices the mounted postgresql.conf
// changed and reloads it (sync-passwords.sh).
type paramContext int

const (
	// contextPostmaster parameters take effect at server start only.
	contextPostmaster paramContext = iota
	// contextReload parameters take effect on pg_reload_conf() (sighup,
	// or a session-level context whose file value applies to new sessions).
	contextReload
)

// paramContexts are the contexts of the parameters tiers commonly set,
// checked against the server's own `postgres --describe-config` by
// TestParamContexts. A parameter missing here counts as postmaster, the safe
// side: a restart applies any setting, a reload would leave a postmaster one
// silently pending. Where the context differs by major (autovacuum_max_workers
// is sighup from 18), the table holds the strictest.
var paramContexts = map[string]paramContext{
	// Memory and connections, fixed when the server allocates shared memory.
	"max_connections":                 contextPostmaster,
	"superuser_reserved_connections":  contextPostmaster,
	"shared_buffers":                  contextPostmaster,
	"huge_pages":                      contextPostmaster,
	"max_worker_processes":            contextPostmaster,
	"max_prepared_transactions":       contextPostmaster,
	"max_locks_per_transaction":       contextPostmaster,
	"max_pred_locks_per_transaction":  contextPostmaster,
	"max_logical_replication_workers": contextPostmaster,
	"max_files_per_process":           contextPostmaster,
	"shared_preload_libraries":        contextPostmaster,
	"track_activity_query_size":       contextPostmaster,
	"track_commit_timestamp":          contextPostmaster,
	"autovacuum_max_workers":          contextPostmaster,
	"wal_buffers":                     contextPostmaster,
	"wal_log_hints":                   contextPostmaster,
	"archive_mode":                    contextPostmaster,

	// Reloadable: planner, memory per operation, WAL volume, logging,
	// autovacuum, timeouts.
	"effective_cache_size":                contextReload,
	"work_mem":                            contextReload,
	"maintenance_work_mem":                contextReload,
	"hash_mem_multiplier":                 contextReload,
	"temp_buffers":                        contextReload,
	"max_wal_size":                        contextReload,
	"synchronous_standby_names":           contextReload,
	"min_wal_size":                        contextReload,
	"wal_keep_size":                       contextReload,
	"max_slot_wal_keep_size":              contextReload,
	"wal_compression":                     contextReload,
	"checkpoint_timeout":                  contextReload,
	"checkpoint_completion_target":        contextReload,
	"random_page_cost":                    contextReload,
	"seq_page_cost":                       contextReload,
	"effective_io_concurrency":            contextReload,
	"default_statistics_target":           contextReload,
	"max_parallel_workers":                contextReload,
	"max_parallel_workers_per_gather":     contextReload,
	"max_parallel_maintenance_workers":    contextReload,
	"synchronous_commit":                  contextReload,
	"statement_timeout":                   contextReload,
	"lock_timeout":                        contextReload,
	"idle_in_transaction_session_timeout": contextReload,
	"log_min_duration_statement":          contextReload,
	"log_checkpoints":                     contextReload,
	"log_lock_waits":                      contextReload,
	"log_temp_files":                      contextReload,
	"log_autovacuum_min_duration":         contextReload,
	"autovacuum_vacuum_scale_factor":      contextReload,
	"autovacuum_analyze_scale_factor":     contextReload,
	"autovacuum_vacuum_cost_limit":        contextReload,
	"autovacuum_naptime":                  contextReload,
	"jit":                                 contextReload,
}

// needsRestart tells whether a change of parameter name takes a restart.
func needsRestart(name string) bool {
	c, ok := paramContexts[name]
	return !ok || c == contextPostmaster
}

// restartSettings renders, sorted, the settings whose change takes a server
// restart: what the pods' config hash covers.
func restartSettings(settings map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		if needsRestart(k) {
			b.WriteString(k + "=" + settings[k] + "\n")
		}
	}
	return b.String()
}
