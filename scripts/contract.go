package scripts

import "slices"

// Need is what the function owes a script for one variable.
type Need int

// The needs, strongest first.
const (
	// Required: the script refuses to run without it (require_env,
	// require_int). The function always sends it.
	Required Need = iota
	// Expected: the script runs without it, but a part of it the pods rely
	// on is then off (Var.Meaning says which). The function always sends it.
	Expected
	// Optional: the script's default (Var.Default) fits the pods; the
	// function may send another value.
	Optional
	// TestOnly: an override for the scripts' tests (scripts/*_test.go). The
	// function never sends it.
	TestOnly
)

func (n Need) String() string {
	switch n {
	case Required:
		return "required"
	case Expected:
		return "expected"
	case Optional:
		return "optional"
	case TestOnly:
		return "test only"
	}
	return "unknown"
}

// Var is one environment variable a script reads.
type Var struct {
	Name string
	Need Need
	// When is NAME=VALUE of another variable of the script: only then is
	// this one needed (Need applies then; otherwise it is not read).
	When string
	// Default is what the script takes when the variable is unset or
	// empty, as the script writes it (${NAME:-Default}); "" when none.
	Default string
	// Libpq is set when the PostgreSQL client programs the script runs
	// read it (libpq's own variables); the script's text may read it too.
	Libpq bool
	// Meaning is one line: what it is, and what it is for.
	Meaning string
	// Files are the files the script reads in the directory it names, for a
	// directory the function fills (a Secret's or the ConfigMap's mount).
	Files []File
}

// File is one file a script reads in a directory the function fills: a key
// of the Secret or ConfigMap mounted there.
type File struct {
	Name string
	// Need is Required or Expected when the function always writes the
	// key, Optional when the script copes with its absence.
	Need    Need
	Meaning string
}

// Script is what one script reads.
type Script struct {
	Name string // Entrypoint, Probe, ...
	// Does is what it does and how it ends, in a few sentences.
	Does string
	Env  []Var
}

// Environment variable names the function sends (the builders use these).
const (
	EnvPodName          = "POD_NAME"
	EnvObjectStorageDir = "OBJECT_STORAGE_DIR"
	EnvStuckSeconds     = "STUCK_SECONDS"
	EnvRecoveryTimeout  = "RECOVERY_TIMEOUT_SECONDS"
	EnvPGData           = "PGDATA"
	EnvPGPort           = "PGPORT"
	EnvPGHost           = "PGHOST"
	EnvPGUser           = "PGUSER"
	EnvPGPassword       = "PGPASSWORD"
	EnvDBName           = "DB_NAME"
	EnvAppUser          = "APP_USER"
	EnvPrimaryHost      = "PRIMARY_HOST"
	EnvPeerDomain       = "PEER_DOMAIN"
	EnvScriptsDir       = "SCRIPTS_DIR"
	EnvAppSecretDir     = "APP_SECRET_DIR" //nolint:gosec // G101: a variable's name, not a credential
	EnvAdminSecretDir   = "ADMIN_SECRET_DIR"
	EnvMonitorUser      = "MONITOR_USER"
	EnvMonitorUID       = "MONITOR_UID"

	EnvSyncInterval = "SYNC_INTERVAL"

	EnvBackupDir       = "BACKUP_DIR"
	EnvBackupRetention = "BACKUP_RETENTION"
	EnvDatabase        = "DATABASE"

	EnvRestoreDir    = "RESTORE_DIR"
	EnvRestoreBackup = "RESTORE_BACKUP"
	EnvRestoreSource = "RESTORE_SOURCE"

	EnvPrimaryOrdinal     = "PRIMARY_ORDINAL"
	EnvInstances          = "INSTANCES"
	EnvGraceSeconds       = "GRACE_SECONDS"
	EnvFenceSeconds       = "FENCE_SECONDS"
	EnvStartingMaxSeconds = "STARTING_MAX_SECONDS"
	// EnvDurability, EnvLastTimeline and EnvQualifiedOrdinals are what the
	// function knew when it composed the failover Job; it reads them back
	// from the observed Job (its pod template is immutable).
	EnvDurability        = "DURABILITY"
	EnvLastTimeline      = "LAST_TIMELINE"
	EnvQualifiedOrdinals = "QUALIFIED_ORDINALS"
	EnvMode              = "MODE"
	EnvTargetOrdinal     = "TARGET_ORDINAL"

	// ModeSwitchover is the MODE of a planned switchover's Job.
	ModeSwitchover = "switchover"
)

// adminFiles are the named files of the superuser Secret's mount.
func adminFiles(names ...string) []File {
	meaning := map[string]string{ //nolint:gosec // G101: key names and what they hold, not credentials
		"username":                      "the superuser's name",
		"password":                      "the superuser's password",
		"replication-username":          "the replication role's name",
		"replication-password":          "the replication role's password",
		"password-verifier":             "the SCRAM-SHA-256 verifier of the superuser's password (the function computes it: no pod does)",
		"replication-password-verifier": "the SCRAM-SHA-256 verifier of the replication role's password",
		"app-password":                  "the function's copy of the app password: app-password-verifier is of it",
		"app-password-verifier":         "the SCRAM-SHA-256 verifier of the app password (its copy)",
	}
	out := make([]File, len(names))
	for i, n := range names {
		out[i] = File{Name: n, Need: Required, Meaning: meaning[n]}
	}
	return out
}

// Files of the directories the function fills.
var (
	appFiles   = []File{{Name: "password", Need: Required, Meaning: "the app role's password"}}
	confFile   = File{Name: "postgresql.conf", Need: Expected, Meaning: "the function's settings (WAL bounds, the tier's); included last by the instances' configuration"}
	primaryKey = File{Name: "primary", Need: Expected, Meaning: "the ordinal the function names the primary (absent: 0)"}
	instances  = File{Name: "instances", Need: Expected, Meaning: "the number of instances (absent: PEER_ORDINALS + 1)"}
	// pgbackrestConf is written only when the input names objectStorage:
	// its presence is what turns the archive's parts on.
	pgbackrestConf = File{Name: "pgbackrest.conf", Need: Optional, Meaning: "pgBackRest's configuration, when the function input names objectStorage (docs/backups.md): its presence turns archiving on"}
)

// Variables several scripts read alike.
var (
	stateDir    = Var{Name: "STATE_DIR", Need: Optional, Default: "/tmp", Meaning: "the container's own state: the entrypoint's state and hold marks, the probe's last-streamed mark, superuser passfiles"}
	peerTimeout = Var{Name: "PEER_TIMEOUT", Need: Optional, Default: "2", Meaning: "seconds to connect to a peer's postgres (lib.sh remote_query)"}
	peerHosts   = Var{Name: "PEER_HOSTS", Need: TestOnly, Meaning: "space-separated host:port of the peers, replacing N-k.PEER_DOMAIN:PGPORT (lib.sh peer_hosts)"}
	peerOrds    = Var{Name: "PEER_ORDINALS", Need: TestOnly, Default: "9", Meaning: "the highest ordinal when SCRIPTS_DIR/instances is absent (lib.sh instance_count)"}
	peerDomain  = Var{Name: EnvPeerDomain, Need: Expected, Meaning: "the headless Service's domain: peer k is N-k.PEER_DOMAIN (without it no peer is asked)"}
	// jobConn is how backup.sh and restore.sh reach the primary (libpq).
	jobConn = []Var{
		{Name: EnvPGHost, Need: Required, Libpq: true, Meaning: "the rw Service's host: the primary"},
		{Name: EnvPGPort, Need: Optional, Default: "5432", Libpq: true, Meaning: "its port"},
		{Name: EnvPGUser, Need: Expected, Libpq: true, Meaning: "the superuser (libpq's default, the OS user, is no role here)"},
		{Name: EnvPGPassword, Need: Expected, Libpq: true, Meaning: "its password, from the Secret by reference"},
		{Name: EnvDBName, Need: Required, Meaning: "the SQL database"},
	}
)

// Contract is the pod contract: what each script reads from its environment
// and from the files the function mounts, one entry per script but lib.sh
// (what a script reads through the lib.sh functions it calls is its own).
//
// Both sides are held to it. TestContractScripts (contract_test.go) reads
// the scripts and fails when the table misses a variable one of them reads
// or lists one it never reads, a required one the script does not require,
// a default, a file or a header that differ. The function's
// TestContractEnv builds every composed workload and fails when a container
// running a script lacks a variable the script requires or expects, or
// sends one that no script it runs reads. notes/CONTRACT.md is generated
// from it (TestGoldenContract; make golden).
var Contract = []Script{
	{
		Name: Entrypoint,
		Does: "The command of the postgres container of every instance pod. The ordinal SCRIPTS_DIR/primary names (0 until a failover) is the primary: it initialises an empty data directory once (initdb, roles, database), unless the Database was initialised before (SCRIPTS_DIR/initialized is true, or a peer's postgres answers): then it holds, unready and alive. Every other ordinal clones the primary (pg_basebackup through slot POD_NAME, '-' as '_') and streams from PRIMARY_HOST; a completed clone is never cloned again, a former primary is rewound (pg_rewind) or cloned once a primary on a newer timeline answers. Every path ends in `exec postgres`, but one: a first primary restored from an archive (restore-repo) exits once, its report as the termination message, and serves at its next start.",
		Env: []Var{
			{Name: EnvPodName, Need: Required, Meaning: "the pod's name; the ordinal after its last '-' picks the role; also cluster_name, application_name and the slot's name"},
			{Name: EnvPGData, Need: Required, Meaning: "the data directory, on the data volume (its parent holds the replication passfile and the rewind mark)"},
			{Name: EnvPGPort, Need: Required, Meaning: "the port postgres listens on, and the peers' port"},
			{Name: EnvPGHost, Need: Required, Meaning: "the socket directory (an absolute path)"},
			{Name: EnvDBName, Need: Required, Meaning: "the SQL database the primary's bootstrap creates"},
			{Name: EnvAppUser, Need: Required, Meaning: "the app role the bootstrap creates, owner of DB_NAME"},
			{Name: EnvPrimaryHost, Need: Required, Meaning: "where standbys clone and stream from: the rw Service, which follows a failover (required on standbys)"},
			{Name: "PRIMARY_PORT", Need: Optional, Default: "5432", Meaning: "its port"},
			peerDomain,
			{Name: EnvScriptsDir, Need: Required, Meaning: "the scripts ConfigMap's mount", Files: []File{
				primaryKey, instances,
				{Name: "initialized", Need: Optional, Meaning: "true once the Database has been ready: an empty data directory is then lost data, never initialised again"},
				confFile, pgbackrestConf,
				{Name: "restore-repo", Need: Optional, Meaning: "at creation, with spec.restoreFrom source Archive: the source Database's repository path in the bucket, to restore the first primary from"},
				{Name: "restore-source", Need: Optional, Meaning: "with restore-repo: the source's SQL name (its app database and role, renamed to this Database's)"},
				{Name: "restore-target", Need: Optional, Meaning: "with restore-repo: the point in time (RFC 3339) to restore to; absent: the archive's end"},
			}},
			{Name: EnvAdminSecretDir, Need: Required, Meaning: "the superuser Secret's mount", Files: adminFiles("username", "password", "replication-username", "replication-password", "password-verifier", "replication-password-verifier", "app-password-verifier")},
			stateDir,
			{Name: "RETRY_INTERVAL", Need: Optional, Default: "5", Meaning: "seconds between clone attempts, and between looks while holding"},
			{Name: "CLONE_MAX_RATE", Need: Optional, Meaning: "pg_basebackup --max-rate of a clone (none: unbounded)"},
			{Name: "TERMINATION_LOG", Need: Optional, Default: "/dev/termination-log", Meaning: "where a primary restored from an archive writes what it reached (JSON: result, source, restoredTo, lsn, timeline, stoppedIn, archiveEnd, seconds) before it exits once"},
			{Name: EnvMonitorUser, Need: Optional, Meaning: "with metrics: the role postgres_exporter logs in as over the socket (pg_hba.conf: peer, map monitor)"},
			{Name: EnvMonitorUID, Need: Optional, Meaning: "with MONITOR_USER: the uid the exporter runs as; its user name in this image maps to MONITOR_USER, and to no other role"},
			peerTimeout, peerHosts, peerOrds,
		},
	},
	{
		Name: Probe,
		Does: "`probe.sh ready|live`, the readiness and liveness probes of the postgres container (the container's environment). Ready: postgres runs (not initialising, cloning or holding) and accepts connections; a standby also streams, at most READY_MAX_LAG_BYTES behind, within the last READY_GRACE_SECONDS; a primary that finds a peer writing on a newer timeline stops its postgres (the fence) and is not ready; a standby named the primary for more than NAMED_STANDBY_SECONDS is not ready. Live: postgres answers, or the pod deliberately initialises, clones or holds; not a standby marked to be cloned again, nor one whose replay paused for a setting the primary raised.",
		Env: []Var{
			{Name: EnvPGHost, Need: Required, Meaning: "the socket directory"},
			{Name: EnvPGPort, Need: Required, Meaning: "the port; also the peers' port"},
			{Name: EnvPGData, Need: Expected, Meaning: "the data directory: tells a standby (standby.signal) and its marks; without it no fence and no reclone or paused-replay check"},
			{Name: EnvPodName, Need: Expected, Meaning: "the pod's name: its peers are the other ordinals (the fence)"},
			peerDomain,
			{Name: EnvScriptsDir, Need: Expected, Meaning: "the scripts ConfigMap's mount; without it no fence and no named-standby check", Files: []File{instances, primaryKey}},
			{Name: EnvAdminSecretDir, Need: Expected, Meaning: "the superuser Secret's mount: the role probes connect as (else postgres), and the peers' credentials (the fence)", Files: adminFiles("username", "password")},
			stateDir,
			{Name: "READY_GRACE_SECONDS", Need: Optional, Default: "60", Meaning: "how long a standby that stopped streaming stays ready"},
			{Name: "NAMED_STANDBY_SECONDS", Need: Optional, Default: "120", Meaning: "how long a standby named the primary (SCRIPTS_DIR/primary: the key edited) stays ready"},
			{Name: "READY_MAX_LAG_BYTES", Need: Optional, Default: "268435456", Meaning: "how far (bytes of WAL) a ready standby may be behind the primary"},
			{Name: "PROBE_QUERY_TIMEOUT", Need: Optional, Default: "3", Meaning: "seconds a probe's query may take"},
			peerTimeout, peerHosts, peerOrds,
		},
	},
	{
		Name: PreStop,
		Does: "The postgres container's preStop hook (the container's environment). On a primary with a streaming standby it waits, asking postgres every second, until the instance is no longer the primary (a switchover Job promoted a standby: the function composes one when the primary's pod is being deleted), no standby streams, postgres stops answering (SILENT_LOOKS queries in a row), or DRAIN_WAIT_SECONDS passed; then the kubelet's stop signal shuts postgres down. A standby returns at once. Always ends 0.",
		Env: []Var{
			{Name: EnvPGHost, Need: Required, Meaning: "the socket directory"},
			{Name: EnvPGPort, Need: Required, Meaning: "the port"},
			{Name: EnvScriptsDir, Need: Required, Meaning: "the scripts ConfigMap's mount", Files: []File{
				{Name: "switchover-on-stop", Need: Expected, Meaning: "true when the function switches over from a primary whose pod is being deleted; otherwise the hook returns at once"},
			}},
			{Name: EnvPGData, Need: Expected, Meaning: "the data directory: a standby (standby.signal) returns at once; the postmaster's PID (postmaster.pid) whose stderr, the container's log, takes the hook's lines"},
			{Name: EnvAdminSecretDir, Need: Expected, Meaning: "the superuser Secret's mount: the role it connects as (else postgres)", Files: adminFiles("username")},
			{Name: "DRAIN_WAIT_SECONDS", Need: Optional, Default: "45", Meaning: "the longest a primary waits for a switchover, within the pod's grace of 60 s"},
			{Name: "PROBE_QUERY_TIMEOUT", Need: Optional, Default: "3", Meaning: "seconds a query may take"},
			{Name: "SILENT_LOOKS", Need: Optional, Default: "5", Meaning: "failed queries in a row taken for a postgres that stopped answering (one failure is asked again: the switchover Job ends the primary's sessions, the hook's own among them)"},
		},
	},
	{
		Name: SyncPasswords,
		Does: "The password-sync sidecar of every instance pod. Every SYNC_INTERVAL seconds: on the primary (postgres not in recovery, whatever the ordinal), applies the Secrets' passwords to the roles (the SCRAM verifiers the function computed into the superuser Secret; an app password edited in the credentials Secret once the function wrote its verifier) when the secret files or the postmaster changed since the last apply; on a standby, refreshes the walreceiver's passfile next to PGDATA and, every SLOT_CHECK_ROUNDS rounds, asks the primary whether it still holds this standby's slot, and is the same cluster (also for a standby whose postgres refuses connections until it is consistent: its facts from PGDATA), marking the clone to be cloned again when the primary answers it cannot replicate; on any instance, reloads the configuration when SCRIPTS_DIR/postgresql.conf changed; on a primary with peers, stops postgres (immediate) and leaves PGDATA/database.isolated when no standby replied within ISOLATION_REPLY_SECONDS, no peer answers a connection at all and the witness (the API server) accepts none (a partition), so that a failover elsewhere cannot meet a primary still acknowledging writes.",
		Env: []Var{
			{Name: EnvPodName, Need: Required, Meaning: "the pod's name: its ordinal (0 applies the passwords) and its slot"},
			{Name: EnvPGHost, Need: Required, Meaning: "the socket directory"},
			{Name: EnvPGPort, Need: Required, Meaning: "the port"},
			{Name: EnvPGData, Need: Required, Meaning: "the data directory (shared with the postgres container): the clone's marks, the passfile beside it"},
			{Name: EnvAppUser, Need: Required, Meaning: "the app role whose password is applied"},
			{Name: EnvAppSecretDir, Need: Required, Meaning: "the app Secret's mount: an edited app password is applied once the superuser Secret's copy is the same", Files: appFiles},
			{Name: EnvAdminSecretDir, Need: Required, Meaning: "the superuser Secret's mount", Files: adminFiles("username", "password", "replication-username", "replication-password", "password-verifier", "replication-password-verifier", "app-password", "app-password-verifier")},
			{Name: EnvPrimaryHost, Need: Expected, Meaning: "the primary a standby asks about its slot; without it no slot check"},
			{Name: "PRIMARY_PORT", Need: Optional, Default: "5432", Meaning: "its port"},
			{Name: EnvScriptsDir, Need: Optional, Default: "$here", Meaning: "the scripts ConfigMap's mount (unset: the script's own directory, the same mount)", Files: []File{confFile, primaryKey, instances, pgbackrestConf}},
			{Name: EnvSyncInterval, Need: Optional, Default: "5", Meaning: "seconds between rounds"},
			{Name: EnvMonitorUser, Need: Optional, Meaning: "with metrics: the exporter's role, created on the primary when missing (LOGIN, no password, member of pg_monitor)"},
			peerDomain,
			{Name: "ISOLATION_FENCE", Need: Optional, Default: "on", Meaning: "off: no isolation fence (check_isolation); on: a primary cut off from every peer and from the witness stops itself"},
			{Name: "ISOLATION_WITNESS", Need: Optional, Meaning: "HOST:PORT whose accepted connection says the control plane still hears this pod; unset: the API server's Service (KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT); empty: none, the peers alone decide"},
			{Name: "KUBERNETES_SERVICE_HOST", Need: Optional, Meaning: "set by the kubelet in every container: the API server's Service address, the default witness"},
			{Name: "KUBERNETES_SERVICE_PORT", Need: Optional, Meaning: "set by the kubelet in every container: its port"},
			{Name: "ISOLATION_REPLY_SECONDS", Need: Optional, Default: "5", Meaning: "how old the freshest standby reply may be before a primary asks whether any peer answers at all"},
			peerTimeout, peerHosts, peerOrds,
			{Name: "SLOT_CHECK_ROUNDS", Need: Optional, Default: "6", Meaning: "rounds between a standby's slot checks"},
			{Name: "ARCHIVE_RETRY_SECONDS", Need: Optional, Default: "60", Meaning: "seconds after a failed `pgbackrest.sh ensure` (the stanza, the first backup) or `rebase` (the full backup after a gap) before the next try"},
			stateDir,
			{Name: "SYNC_ONCE", Need: TestOnly, Meaning: "1: one round, then exit with its status"},
		},
	},
	{
		Name: Backup,
		Does: "The backup CronJob's container: one backup of DB_NAME into BACKUP_DIR, files DATABASE-YYYYmmddTHHMMSSZ.{dump,globals.sql,sha256} (pg_dump -Fc, pg_dumpall --globals-only, their checksums written last), verified before they get their names; then only the BACKUP_RETENTION newest good backups of DATABASE stay. Before the dump, once the server answers, a lowered retention applies and the oldest good backups go while the free space is short of 1.5 times the newest one, never below one. A run that fails exits non-zero and removes its own files.",
		Env: slices.Concat(jobConn, []Var{
			{Name: EnvBackupDir, Need: Required, Meaning: "the backups volume's mount (ordinal 0's), writable"},
			{Name: EnvBackupRetention, Need: Required, Meaning: "how many good backups to keep (>= 1)"},
			{Name: EnvDatabase, Need: Required, Meaning: "the Database's name: the backup files' prefix"},
			{Name: "BACKUP_WAIT_SECONDS", Need: Optional, Default: "120", Meaning: "how long to wait for the server to answer before giving up (nothing removed)"},
			{Name: "LOCK_WAIT_TIMEOUT", Need: Optional, Default: "5min", Meaning: "pg_dump --lock-wait-timeout"},
		}),
	},
	{
		Name: Restore,
		Does: "The restore Job's container: restores one backup of RESTORE_SOURCE from RESTORE_DIR into DB_NAME (pg_restore --no-owner --role=APP_USER, one transaction) and ends with one line `restore: SUCCESS: ...` (also the termination message). Exit 0 restored (or already restored by this Job: its mark on the database), 2 the server did not answer in time, 3 refused (DB_NAME holds user tables; nothing changed), 4 no usable backup (the one named is not there or does not verify; nothing changed), 1 anything else.",
		Env: slices.Concat(jobConn, []Var{
			{Name: EnvAppUser, Need: Required, Meaning: "the app role that owns what is restored"},
			{Name: EnvRestoreDir, Need: Required, Meaning: "the source's backups volume's mount, read-only"},
			{Name: EnvRestoreBackup, Need: Optional, Default: "latest", Meaning: "latest (the newest good backup) or a backup's file name"},
			{Name: EnvRestoreSource, Need: Optional, Meaning: "the source Database's name: the backup files' prefix (empty: any)"},
			{Name: "RESTORE_WAIT_SECONDS", Need: Optional, Default: "600", Meaning: "how long to wait for the server (exit 2 after)"},
			{Name: "RETRY_INTERVAL", Need: Optional, Default: "5", Meaning: "seconds between connection attempts"},
			{Name: "TERMINATION_LOG", Need: Optional, Default: "/dev/termination-log", Meaning: "where the final line goes as the termination message"},
		}),
	},
	{
		Name: Failover,
		Does: "The failover Job's container (docs/failover.md). A failover: waits GRACE_SECONDS, and at least FENCE_SECONDS (by then the kubelet killed a hung primary), for the lost primary PRIMARY_ORDINAL to answer as a primary (longer while it is starting, up to STARTING_MAX_SECONDS), then promotes the most advanced qualified standby, once its replay settled and every other standby streams from it; a switchover (MODE=switchover) makes the primary read-only, waits for TARGET_ORDINAL to replay everything and promotes it. The outcome is one JSON line, the termination message: {\"result\":\"promoted\",\"from\":F,\"to\":T,\"timeline\":N,\"lsn\":\"X/Y\",\"reason\":...} or {\"result\":\"not-needed\",...}, exit 0; {\"result\":\"held\",...} (no promotion now, and why), exit 5; exit 5 too when no standby answers.",
		Env: []Var{
			{Name: EnvDatabase, Need: Required, Meaning: "the Database's name N: instance k is N-k"},
			{Name: EnvPrimaryOrdinal, Need: Required, Meaning: "the lost primary's ordinal (the current one, for a switchover)"},
			{Name: EnvInstances, Need: Required, Meaning: "the number of instances (>= 2)"},
			{Name: EnvPeerDomain, Need: Required, Meaning: "the headless Service's domain: instance k is N-k.PEER_DOMAIN"},
			{Name: EnvPGPort, Need: Required, Meaning: "the instances' port"},
			{Name: EnvAdminSecretDir, Need: Required, Meaning: "the superuser Secret's mount", Files: adminFiles("username", "password")},
			{Name: EnvGraceSeconds, Need: Optional, Default: "10", Meaning: "how long the primary may stay silent before a standby is promoted"},
			{Name: EnvFenceSeconds, Need: Expected, Default: "0", Meaning: "how long after the lost primary stops answering its kubelet has killed it (its liveness probe's bound): no standby is promoted before the primary has been silent this long, nor GRACE_SECONDS"},
			{Name: EnvStartingMaxSeconds, Need: Optional, Default: "120", Meaning: "how much longer a primary that is starting up (rejecting connections) may take"},
			{Name: EnvDurability, Need: Expected, Meaning: "sync or async, as the function resolved spec.durability (without it: sync when a standby has synchronous_standby_names)"},
			{Name: EnvLastTimeline, Need: Expected, Default: "1", Meaning: "the last recorded failover's timeline: an instance answering as a primary counts as promoted only above it"},
			{Name: EnvQualifiedOrdinals, Need: Expected, Meaning: "the standbys whose pods were ready, ascending, space-separated, possibly empty: the only ones to promote under async (unset: every standby)"},
			{Name: EnvMode, Need: Optional, Default: "failover", Meaning: "failover, or switchover: a planned move to TARGET_ORDINAL"},
			{Name: EnvTargetOrdinal, Need: Required, When: EnvMode + "=" + ModeSwitchover, Meaning: "the ordinal a switchover promotes"},
			{Name: "STALL_LOOKS", Need: Optional, Default: "3", Meaning: "looks in a row at the same replay position after which a standby counts as settled (or, asked to promote, stuck)"},
			{Name: "PROMOTE_WAIT_SECONDS", Need: Optional, Default: "60", Meaning: "how long the chosen standby's replay may take to settle before the promotion is asked, and how long pg_promote waits at once; the wait goes on while the replay advances"},
			{Name: "CANDIDATE_ROUNDS", Need: Optional, Default: "15", Meaning: "rounds (2 s apart) of asking every standby before choosing among those that answered"},
			{Name: "TERMINATION_LOG", Need: Optional, Default: "/dev/termination-log", Meaning: "where the outcome goes"},
			stateDir, peerTimeout,
			{Name: "FAILOVER_HOSTS", Need: TestOnly, Meaning: "space-separated host:port by ordinal, replacing N-k.PEER_DOMAIN:PGPORT"},
		},
	},
	{
		Name: ArchiveCheck,
		Does: "The WAL archive check CronJob's container (N-wal, every 5 minutes): asks the primary through the rw Service whether its archiver keeps up, and exits 0 when it does, 1 when the last archive attempt failed after the last success, a segment has waited over STUCK_SECONDS, archive_mode is off, or the primary does not answer; the function's WALArchive condition reads the verdict from the CronJob's last success and last schedule. Prints the recovery point exposure (the last archived segment's age) either way.",
		Env: slices.Concat(jobConn, []Var{
			{Name: EnvStuckSeconds, Need: Optional, Default: "300", Meaning: "how long a segment may wait to be archived before the check fails"},
			{Name: "WAIT_SECONDS", Need: Optional, Default: "90", Meaning: "how long the primary may take to answer (a failover under way) before the check fails"},
		}),
	},
	{
		Name: FullBackup,
		Does: "The full backup CronJob's container (N-full, on spec.backup.schedule, with the archive): asks the primary's sidecar for a full backup by writing its ID to database.full-backup-request in the primary's data directory (SQL through the rw Service, as the superuser), and waits for the sidecar's answer in database.full-backup: exit 0 on \"ID ok LABEL\", 1 on \"ID failed WHY\"; asks again when the primary answering has no request of it (a failover). The Job's deadline bounds the wait; the function's BackupHealthy condition reads the CronJob's status.",
		Env: slices.Concat(jobConn, []Var{
			{Name: EnvPodName, Need: Required, Meaning: "the pod's name, the request's ID: each attempt of the Job asks anew"},
			{Name: "POLL_SECONDS", Need: Optional, Default: "5", Meaning: "how often the primary is asked for the answer"},
		}),
	},
	{
		Name: Drill,
		Does: "The restore drill CronJob's container (N-drill): restores the newest backup of the Database's pgBackRest repository into the pod's own volume, replays the archive to its end and promotes (no network, archive_mode off, hot_standby off), runs pg_amcheck over every database and reads every row of every user table into a checksum, stops the copy. Ends with one JSON line in the termination message (result verified with the backup, the restored point, the durations, tables, rows and checksum; nobackup; or failed with the backup and the reason), exit 0 unless failed; the function's BackupVerified condition reads it.",
		Env: []Var{
			{Name: EnvPGData, Need: Required, Meaning: "the copy's data directory, on the drill's own volume (pgbackrest.conf's pg1-path)"},
			{Name: EnvPGHost, Need: Required, Libpq: true, Meaning: "the copy's socket directory (it listens on no address)"},
			{Name: EnvPGPort, Need: Required, Libpq: true, Meaning: "the copy's port"},
			{Name: EnvPGUser, Need: Required, Libpq: true, Meaning: "the superuser's name, whom the copy trusts on its socket"},
			{Name: EnvObjectStorageDir, Need: Required, Meaning: "the mount of N-object-storage, for pgbackrest.sh (which reads the keys, and pgbackrest.conf from the scripts' folder)"},
			{Name: EnvRecoveryTimeout, Need: Optional, Default: "3600", Meaning: "how long the replay of the archive may take"},
			{Name: "TERMINATION_LOG", Need: Optional, Default: "/dev/termination-log", Meaning: "where the verdict goes"},
		},
	},
	{
		Name: Archive,
		Does: "pgBackRest for one instance, run by postgres as its archive_command (`pgbackrest.sh push %p`: asynchronous, the spool on the data volume, the WAL waiting in pg_wal bounded by archive-push-queue-max) and by the sidecar on a primary (`pgbackrest.sh ensure`: creates the stanza, or checks that the bucket's is this cluster's, then takes a first full backup when the repository has none). Reads the bucket's keys from OBJECT_STORAGE_DIR at each call and passes them in pgBackRest's environment, never as arguments. Exits with pgBackRest's status; 1 when the configuration, the keys or pgbackrest are missing.",
		Env: []Var{
			{Name: EnvPGData, Need: Expected, Default: ".", Meaning: "the instance's data directory, where the gap marker is (push: postgres runs archive_command in it; rebase: required)"},
			{Name: EnvScriptsDir, Need: Optional, Default: "$here", Meaning: "the scripts ConfigMap's mount", Files: []File{{Name: "pgbackrest.conf", Need: Required, Meaning: "pgBackRest's configuration (archive.go)"}}},
			{Name: EnvObjectStorageDir, Need: Required, Meaning: "the mount of N-object-storage, the bucket's keys", Files: []File{
				{Name: "AWS_ACCESS_KEY_ID", Need: Required, Meaning: "the access key"},
				{Name: "AWS_SECRET_ACCESS_KEY", Need: Required, Meaning: "the secret key"},
			}},
		},
	},
}

// ContractOf is the table's entry for script name.
func ContractOf(name string) (Script, bool) {
	for _, s := range Contract {
		if s.Name == name {
			return s, true
		}
	}
	return Script{}, false
}
