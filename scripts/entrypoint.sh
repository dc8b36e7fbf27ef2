#!/usr/bin/env bash
# entrypoint.sh: command of the postgres container of every StatefulSet pod.
#
# The ordinal the function names in $SCRIPTS_DIR/primary (0 until a failover
# moves it; docs/failover.md) is the primary: it bootstraps an empty data
# directory once (initdb, roles, database, pg_hba), unless the Database has
# been initialised before ($SCRIPTS_DIR/initialized says true, or a standby's
# postgres answers): then an empty data directory means lost data, and the
# pod holds (unready, alive) instead of serving an empty primary. Every other
# ordinal is a hot standby cloned from the primary (PRIMARY_HOST, the rw
# Service, so it follows a failover) with pg_basebackup through a physical
# slot per pod; a completed clone is never cloned again, a half-finished one
# (no completion marker) is wiped and redone. A former primary rejoins as a
# standby (cloned again) only once a primary on a newer timeline answers:
# data is never discarded on the word of a ConfigMap alone. Every path ends
# in `exec postgres` in the foreground, but one: a primary restored from an
# archive exits once, reporting what it restored (restore_primary); a hold
# re-runs this script when the function names another primary.
#
# Environment (see notes/CONTRACT.md): POD_NAME PGDATA PGPORT PGHOST DB_NAME
# APP_USER PRIMARY_HOST SCRIPTS_DIR ADMIN_SECRET_DIR; optional
# PRIMARY_PORT (default 5432), STATE_DIR (default /tmp), RETRY_INTERVAL
# (seconds, default 5), CLONE_MAX_RATE (pg_basebackup --max-rate, default none),
# PEER_DOMAIN (the headless Service's domain: peers are N-k.PEER_DOMAIN),
# PEER_TIMEOUT (seconds to connect to a peer, default 2; lib.sh remote_query),
# PEER_HOSTS / PEER_ORDINALS (overrides for tests; lib.sh peer_hosts),
# TERMINATION_LOG (default /dev/termination-log: a restore from the archive
# reports there),
# MONITOR_USER and MONITOR_UID (with metrics: the role the exporter logs in
# as over the socket, and the uid it runs as; write_config).
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
LOG_TAG=entrypoint
# First, before anything slow: the state file lives in an emptyDir that
# outlives the container, so a restarted container would otherwise show the
# last one's "running" to probe.sh live while this script checks its peers,
# rewinds or waits, and the kubelet would kill it for a postgres not yet
# started (seen on a starved node: a new primary restarted five times).
set_state starting

require_env POD_NAME PGDATA PGPORT PGHOST DB_NAME APP_USER SCRIPTS_DIR ADMIN_SECRET_DIR
PRIMARY_HOST=${PRIMARY_HOST:-}
require_int PGPORT 1
MONITOR_USER=${MONITOR_USER:-}
MONITOR_UID=${MONITOR_UID:-}
[[ -z $MONITOR_USER ]] || require_int MONITOR_UID 0
PRIMARY_PORT=${PRIMARY_PORT:-5432}
require_int PRIMARY_PORT 1
RETRY_INTERVAL=${RETRY_INTERVAL:-5}
require_int RETRY_INTERVAL 1
TERMINATION_LOG=${TERMINATION_LOG:-/dev/termination-log}
[[ $PGHOST == /* ]] || die "PGHOST must be the socket directory (an absolute path), got '$PGHOST'"

BOOTSTRAP_MARKER="$PGDATA/database.bootstrapped"
CLONE_MARKER="$PGDATA/database.cloned"
# Beside PGDATA, not in it: pg_rewind removes the files its source lacks.
REWIND_MARKER="${PGDATA%/}.rewinding"

ordinal=$(pod_ordinal)
superuser=''
read_file_into superuser "$ADMIN_SECRET_DIR/username" || die "superuser name missing"

# kill_descendants PID: SIGTERM to every descendant of PID (found in /proc).
kill_descendants() {
	local pid=$1 proc stat ppid
	for proc in /proc/[0-9]*; do
		{ read -r stat <"$proc/stat"; } 2>/dev/null || continue
		stat=${stat##*) } # the fields after "pid (comm) ": state ppid ...
		ppid=${stat#* }
		ppid=${ppid%% *}
		if [[ $ppid == "$pid" ]]; then
			kill_descendants "${proc#/proc/}"
			kill -TERM "${proc#/proc/}" 2>/dev/null || true
		fi
	done
}

# SIGTERM (pod deletion) ends a hold or a clone at once. The clone is left
# without its completion marker, so the next start redoes it; its processes
# go too (pg_basebackup forks a WAL streamer that would outlive it).
on_term() {
	trap '' TERM INT
	log "terminated"
	kill_descendants "$$"
	exit 0
}
trap on_term TERM INT

# run_child CMD...: run CMD in the background and wait for it, so that the
# TERM trap runs while it is running.
run_child() {
	"$@" &
	wait "$!"
}

# sleep_interruptibly SECONDS: sleep that lets the TERM trap run at once.
sleep_interruptibly() {
	run_child sleep "$1" || true
}

# hold REASON...: stay up without postgres: unready (probe.sh ready fails),
# alive (probe.sh live succeeds), until the pod is deleted or restarted, or
# the function names another primary ($SCRIPTS_DIR/primary): then this
# script starts over with the new role (a lost primary's pod becomes the
# new primary's standby without anyone deleting it).
hold() {
	local since=$SECONDS role
	role=$(current_primary)
	set_state hold
	log "HOLDING, not starting postgres: $*"
	log "the pod stays unready; probe.sh live keeps succeeding so it is not restarted in a loop"
	while :; do
		sleep_interruptibly "$RETRY_INTERVAL"
		if [[ $(current_primary) != "$role" ]]; then
			log "the function now names ordinal $(current_primary) the primary (was $role): starting over"
			exec bash "${BASH_SOURCE[0]}"
		fi
		if ((SECONDS - since >= 600)); then
			since=$SECONDS
			log "still holding: $*"
		fi
	done
}

# wait_and_retry REASON...: unready and alive like hold, but for a state
# that resolves by itself (a peer's answer, a ConfigMap reaching this pod):
# this script starts over every RETRY_INTERVAL seconds.
wait_and_retry() {
	set_state hold
	log "WAITING, not starting postgres: $*; retrying in ${RETRY_INTERVAL}s"
	sleep_interruptibly "$RETRY_INTERVAL"
	exec bash "${BASH_SOURCE[0]}"
}

# write_config: the files this script owns in PGDATA, rewritten at every start
# so that fixes roll out with the scripts: pg_hba.conf, pg_ident.conf,
# database.conf (included at the end of postgresql.conf; it includes the
# function's tier settings $SCRIPTS_DIR/postgresql.conf last, so they win).
write_config() {
	local os_user repl monitor_os_user=''
	read_file_into repl "$ADMIN_SECRET_DIR/replication-username" || die "replication user name missing"
	os_user=$(id -un 2>/dev/null) || die "the uid $(id -u) has no user name: peer authentication on the socket needs one"
	# The exporter runs as a uid of its own, which peer authentication
	# maps to its role (pg_monitor, created by sync-passwords.sh) and to
	# nothing else: a DSN naming the superuser (its /probe takes any) is
	# refused. Without a name for that uid in this image the exporter
	# cannot log in (its pg_up says 0); postgres starts all the same.
	if [[ -n $MONITOR_USER ]]; then
		# `id -un UID` takes a number with GNU coreutils; getent elsewhere.
		monitor_os_user=$(id -un "$MONITOR_UID" 2>/dev/null || getent passwd "$MONITOR_UID" 2>/dev/null | cut -d: -f1) || monitor_os_user=''
		[[ -n $monitor_os_user ]] || log "the uid $MONITOR_UID has no user name in this image: the exporter ($MONITOR_USER) cannot log in by peer authentication"
	fi
	{
		echo "# Written by entrypoint.sh at every start; edits are lost."
		echo "# TYPE  DATABASE     USER  ADDRESS  METHOD"
		echo "local   all          $(hba_quote "$superuser")  peer map=superuser"
		[[ -z $monitor_os_user ]] || echo "local   all          $(hba_quote "$MONITOR_USER")  peer map=monitor"
		echo "host    replication  $(hba_quote "$repl")  all  scram-sha-256"
		echo "host    $(hba_quote "$DB_NAME")  $(hba_quote "$APP_USER")  all  scram-sha-256"
		echo "host    all          $(hba_quote "$superuser")  all  scram-sha-256"
	} >"$PGDATA/pg_hba.conf.tmp"
	mv -f "$PGDATA/pg_hba.conf.tmp" "$PGDATA/pg_hba.conf"
	{
		echo "# Written by entrypoint.sh at every start; edits are lost."
		echo "# MAPNAME    SYSTEM-USERNAME  PG-USERNAME"
		echo "superuser    $(hba_quote "$os_user")  $(hba_quote "$superuser")"
		[[ -z $monitor_os_user ]] || echo "monitor      $(hba_quote "$monitor_os_user")  $(hba_quote "$MONITOR_USER")"
	} >"$PGDATA/pg_ident.conf.tmp"
	mv -f "$PGDATA/pg_ident.conf.tmp" "$PGDATA/pg_ident.conf"
	{
		echo "# Written by entrypoint.sh at every start; edits are lost."
		echo "listen_addresses = '*'"
		echo "port = $PGPORT"
		echo "unix_socket_directories = $(conf_quote "$PGHOST")"
		echo "cluster_name = $(conf_quote "$POD_NAME")"
		echo "password_encryption = 'scram-sha-256'"
		echo "wal_level = replica"
		echo "max_wal_senders = 10"
		echo "max_replication_slots = 10"
		echo "wal_keep_size = '256MB'"
		echo "# An abandoned slot (e.g. a standby scaled away) must not fill the primary's disk."
		echo "max_slot_wal_keep_size = '2GB'"
		echo "hot_standby = on"
		echo "# pg_rewind needs it: a former primary rejoins by copying what changed since the fork."
		echo "wal_log_hints = on"
		echo "# Tier settings from the function, last so that they win."
		echo "include_if_exists = $(conf_quote "$SCRIPTS_DIR/postgresql.conf")"
		echo "# Standbys only: floors for the settings a standby must not set lower than its"
		echo "# primary did (written by entrypoint.sh from the control file at every start)."
		echo "include_if_exists = 'database.standby.conf'"
	} >"$PGDATA/database.conf.tmp"
	mv -f "$PGDATA/database.conf.tmp" "$PGDATA/database.conf"
	if ! grep -qxF "include = 'database.conf'" "$PGDATA/postgresql.conf"; then
		printf '\n# function-database settings (managed)\ninclude = '\''database.conf'\''\n' >>"$PGDATA/postgresql.conf"
	fi
}

# check_version: a data directory of another major version is never started
# (postgres would refuse and the pod would crash-loop): hold and say why.
check_version() {
	local data_version binary_version
	[[ -f $PGDATA/PG_VERSION ]] || return 0
	data_version=$(<"$PGDATA/PG_VERSION")
	binary_version=$(pg_major)
	[[ $data_version == "$binary_version" ]] ||
		hold "data directory $PGDATA is PostgreSQL $data_version but this image runs PostgreSQL $binary_version;" \
			"an in-place major upgrade is not supported: create a new Database with spec.restoreFrom"
}

# Settings a hot standby must hold at least as high as the primary that wrote
# the WAL it replays, with their labels in pg_controldata's output.
declare -A STANDBY_FLOOR_LABELS=(
	[max_connections]='max_connections setting'
	[max_worker_processes]='max_worker_processes setting'
	[max_wal_senders]='max_wal_senders setting'
	[max_prepared_transactions]='max_prepared_xacts setting'
	[max_locks_per_transaction]='max_locks_per_xact setting'
)
STANDBY_FLOOR_CONF=database.standby.conf

# write_standby_floor: a standby started with one of these settings lower than
# the values its control file recorded from the primary aborts at startup
# ("insufficient parameter settings") and crash-loops for good: lowering them
# (a smaller tier) rolls the standbys first, while the primary still runs with
# the old values. So each is started at max(desired, control file): the
# primary restarts later with the lower value and writes a parameter-change
# record, the standby replays it (its control file then has the lower value)
# and its next start uses the desired value. Run with postgres stopped.
write_standby_floor() {
	local out="$PGDATA/$STANDBY_FLOOR_CONF" controldata name label have want
	rm -f "$out" # postgres -C must see the desired values, not the last floor
	controldata=$(LC_ALL=C pg_controldata "$PGDATA") || die "pg_controldata $PGDATA failed"
	{
		echo "# Written by entrypoint.sh at every standby start; edits are lost."
		echo "# max(desired, value recorded in the control file from the primary)."
		for name in "${!STANDBY_FLOOR_LABELS[@]}"; do
			label=${STANDBY_FLOOR_LABELS[$name]}
			have=$(sed -n "s/^$label: *//p" <<<"$controldata")
			want=$(postgres -D "$PGDATA" -C "$name") || die "postgres -C $name failed"
			[[ $have =~ ^[0-9]+$ && $want =~ ^[0-9]+$ ]] || die "cannot compare $name: control file '$have', configured '$want'"
			if ((have > want)); then
				echo "$name = $have"
				log "starting with $name = $have (configured $want): the primary's WAL replayed so far was written with $have; the configured value applies once the primary's lower value has been replayed, at a later restart"
			fi
		done
	} >"$out.tmp"
	mv -f "$out.tmp" "$out"
}

start_postgres() {
	log "starting postgres ($1) on port $PGPORT, socket dir $PGHOST"
	set_state running
	exec postgres -D "$PGDATA"
}

# password_vars: the psql variables both bootstrap_sql and restore_sql set
# the roles' passwords from: su, repl and app (the role names) and su_pw,
# repl_pw and app_pw (their SCRAM verifiers, which the function computes
# into the superuser Secret: lib.sh read_verifier). Only SCRAM verifiers
# reach the server, never a plaintext password. The app role gets the
# verifier of the superuser Secret's copy of its password; when the
# credentials Secret holds a newer one (edited since the function's last
# reconcile), the sidecar applies it once the function caught up.
password_vars() {
	local su_pw repl repl_pw app_pw
	read_file_into repl "$ADMIN_SECRET_DIR/replication-username" || return 1
	read_verifier su_pw "$ADMIN_SECRET_DIR/password-verifier" || return 1
	read_verifier repl_pw "$ADMIN_SECRET_DIR/replication-password-verifier" || return 1
	read_verifier app_pw "$ADMIN_SECRET_DIR/app-password-verifier" || return 1
	psql_set su "$superuser"
	psql_set su_pw "$su_pw"
	psql_set repl "$repl"
	psql_set repl_pw "$repl_pw"
	psql_set app "$APP_USER"
	psql_set app_pw "$app_pw"
}

# bootstrap_sql: the SQL that creates the roles and the database. Passwords
# travel as psql variables on stdin, never as arguments.
bootstrap_sql() {
	password_vars || return 1
	psql_set db "$DB_NAME"
	# Statement logging off for this session as well: a verifier is not the
	# password, but it allows an offline guess at it.
	cat <<-'SQL'
		SET log_statement = 'none';
		SET log_min_duration_statement = -1;
		SET log_min_error_statement = 'panic';
		ALTER ROLE :"su" WITH PASSWORD :'su_pw';
		CREATE ROLE :"repl" WITH LOGIN REPLICATION PASSWORD :'repl_pw';
		CREATE ROLE :"app" WITH LOGIN PASSWORD :'app_pw';
		CREATE DATABASE :"db" OWNER :"app";
		REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
		GRANT ALL ON DATABASE :"db" TO :"app";
		\connect :"db"
		ALTER SCHEMA public OWNER TO :"app";
	SQL
}

init_primary() {
	local started=$SECONDS
	set_state initializing
	log "initialising a new primary in $PGDATA"
	wipe_dir "$PGDATA"
	initdb -D "$PGDATA" -U "$superuser" --auth-local=peer --auth-host=scram-sha-256 \
		--data-checksums --encoding=UTF8 --locale=C.UTF-8 >&2
	write_config
	# A temporary server on the socket only; stopped again on any failure.
	trap 'pg_ctl -D "$PGDATA" -m immediate -w stop >/dev/null 2>&1 || true' EXIT
	# Synchronous replication (spec.durability sync) off: there is no
	# standby yet, and every bootstrap commit would wait for one forever.
	pg_ctl -D "$PGDATA" -w -t 120 -o "-c listen_addresses='' -c synchronous_standby_names=''" start >&2
	bootstrap_sql | psql -X -q -v ON_ERROR_STOP=1 -h "$PGHOST" -p "$PGPORT" -U "$superuser" -d postgres >&2
	pg_ctl -D "$PGDATA" -m fast -w -t 120 stop >&2
	trap - EXIT
	date -u +%Y-%m-%dT%H:%M:%SZ >"$BOOTSTRAP_MARKER"
	sync "$BOOTSTRAP_MARKER" "$PGDATA"
	log "primary bootstrapped in $((SECONDS - started))s: database $DB_NAME owned by $APP_USER, replication role, superuser $superuser"
}

# restore_sql SOURCE_SQL_NAME: after a restore from another Database's
# archive, its app database and role take this Database's names (a restored
# copy of orders serving as orders-copy answers as orders_copy), and every
# role this Database's Secrets' passwords (the source's are not this
# Database's). Passwords travel as psql variables (password_vars).
restore_sql() {
	password_vars || return 1
	psql_set src "$1"
	psql_set db "$DB_NAME"
	cat <<-'SQL'
		SET log_statement = 'none';
		SET log_min_duration_statement = -1;
		SET log_min_error_statement = 'panic';
		ALTER ROLE :"su" WITH PASSWORD :'su_pw';
		ALTER ROLE :"repl" WITH PASSWORD :'repl_pw';
		SELECT :'src' <> :'db' AS rename \gset
		\if :rename
		ALTER DATABASE :"src" RENAME TO :"db";
		ALTER ROLE :"src" RENAME TO :"app";
		\endif
		ALTER ROLE :"app" WITH PASSWORD :'app_pw';
		-- The recovery settings pgBackRest wrote: a standby cloned from this
		-- copy must not stop at the restore's target, nor fetch WAL from the
		-- source's archive.
		ALTER SYSTEM RESET restore_command;
		ALTER SYSTEM RESET recovery_target_time;
		ALTER SYSTEM RESET recovery_target_action;
		ALTER SYSTEM RESET recovery_target;
		ALTER SYSTEM RESET recovery_target_timeline;
	SQL
}

# restore_primary: a new Database's first primary, restored from another
# Database's WAL archive (the scripts ConfigMap's restore-repo, written by the
# function at creation only: spec.restoreFrom with source Archive) to the
# point restore-target names (RFC 3339), or to the archive's end without one.
# pgBackRest restores the newest full backup before the target, postgres
# replays the archive to it (restore_command: pgbackrest.sh get-from, the
# source's repository), promotes, and this Database's names and passwords
# are applied (restore_sql). Then it is bootstrapped as an initdb'd primary
# would be; its own archive starts on its new timeline (the sidecar creates
# its stanza). A target the archive does not reach stops postgres: the pod
# holds, saying so. Done, the container exits once with a JSON termination
# message (result, source, restoredTo: the last replayed commit's time, lsn
# and timeline where the new timeline starts, seconds) that the function
# records in status.restore; its next start serves as the primary.
restore_primary() {
	local started=$SECONDS repo target='' src args=() row report replayed lsn timeline segment archive_end=''
	read_file_into repo "$SCRIPTS_DIR/restore-repo" || die "restore-repo unreadable"
	read_file_into src "$SCRIPTS_DIR/restore-source" || die "restore-source unreadable"
	if [[ -s $SCRIPTS_DIR/restore-target ]]; then
		read_file_into target "$SCRIPTS_DIR/restore-target" || die "restore-target unreadable"
	fi
	set_state initializing
	log "restoring a new primary in $PGDATA from the archive at $repo, to ${target:-the end of the archive}"
	wipe_dir "$PGDATA"
	args=(--repo1-path="$repo" --pg1-path="$PGDATA" --log-level-console=info
		"--recovery-option=restore_command=bash $here/pgbackrest.sh get-from $repo %f \"%p\"")
	if [[ -n $target ]]; then
		args+=(--type=time --target="$target" --target-action=promote)
	else
		# To the end: the replay must reach the last segment archived now
		# (the source may still be archiving: later ones do not count).
		# Stopping before it is a gap, and the report says so.
		archive_end=$(archive_max "$(bash "$here/pgbackrest.sh" info --repo1-path="$repo" 2>/dev/null)")
	fi
	bash "$here/pgbackrest.sh" restore "${args[@]}" >&2 ||
		hold "pgBackRest could not restore from $repo (above): check restoreFrom and the bucket, then delete this pod"
	write_config
	trap 'pg_ctl -D "$PGDATA" -m immediate -w stop >/dev/null 2>&1 || true' EXIT
	# hot_standby off: a hot standby refuses to replay WAL written with
	# max_connections (and the like) above its own, and this Database's
	# size may be smaller than the source's (seen: 200 on a medium source,
	# 100 here). It accepts connections once promoted.
	pg_ctl -D "$PGDATA" -w -t 120 -o "-c listen_addresses='' -c synchronous_standby_names='' -c hot_standby=off" start >&2 ||
		hold "the restored copy did not start (above)"
	# Replay runs until the target, then promotes; a target past the
	# archive's end stops postgres (it never reached it).
	until row=$(psql -X -A -t -q -h "$PGHOST" -p "$PGPORT" -U "$superuser" -d postgres -c "SELECT pg_is_in_recovery()" 2>/dev/null) && [[ $row == f ]]; do
		if ! pg_ctl -D "$PGDATA" status >/dev/null 2>&1; then
			trap - EXIT
			hold "postgres stopped while replaying the archive of $repo to ${target:-its end} (the log above says why:" \
				"a target after the archive's last transaction is never reached); fix restoreFrom in a new Database"
		fi
		sleep_interruptibly 1
	done
	# What the replay reached: the commit time of the last transaction it
	# applied (static once promoted), and where the new timeline starts.
	report=$(psql -X -A -t -q -F ' ' -v ON_ERROR_STOP=1 -h "$PGHOST" -p "$PGPORT" -U "$superuser" -d postgres <<-'SQL'
		SELECT coalesce(to_char(pg_last_xact_replay_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), '-'),
		       pg_current_wal_lsn(),
		       ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int,
		       pg_walfile_name(pg_current_wal_lsn())
	SQL
	) || hold "the restored copy does not answer after its promotion (above)"
	read -r replayed lsn timeline segment <<<"$report"
	if [[ -n $archive_end ]] && segment_before "$segment" "$archive_end"; then
		log "WARNING: the replay stopped in segment $segment, but the archive holds segments up to $archive_end: one in between is missing (a gap), and the writes after it cannot be replayed"
	fi
	[[ $replayed != - ]] || replayed=''
	restore_sql "$src" | psql -X -q -v ON_ERROR_STOP=1 -h "$PGHOST" -p "$PGPORT" -U "$superuser" -d postgres >&2
	pg_ctl -D "$PGDATA" -m fast -w -t 120 stop >&2
	trap - EXIT
	rm -f "$PGDATA/recovery.signal" "$PGDATA/standby.signal"
	date -u +%Y-%m-%dT%H:%M:%SZ >"$BOOTSTRAP_MARKER"
	sync "$BOOTSTRAP_MARKER" "$PGDATA"
	log "primary restored in $((SECONDS - started))s from $repo to ${target:-the end of the archive}: database $src served as $DB_NAME;" \
		"the last transaction replayed committed at ${replayed:-(none replayed)}, timeline $timeline starts at $lsn"
	# The point reached leaves the pod the only way it can (no API access):
	# as this container's termination message, which the kubelet keeps in
	# the pod's status (lastState) and the function records in
	# status.restore. So the container ends here once; the kubelet starts it
	# again and it serves as the primary (the marker above).
	printf '%s\n' "{\"result\":\"restored\",\"source\":\"$(json_escape "$src")\",\"restoredTo\":\"$replayed\",\"lsn\":\"$lsn\",\"timeline\":$timeline,\"stoppedIn\":\"$segment\",\"archiveEnd\":\"$archive_end\",\"seconds\":$((SECONDS - started))}" \
		>"$TERMINATION_LOG" 2>/dev/null || log "cannot write $TERMINATION_LOG: status.restore will not say the point reached"
	log "exiting once, so that the pod's status says what was restored; the kubelet starts this container again as the primary"
	exit 0
}

# new_primary: a new Database's first primary: restored from an archive
# when the function says so (restore-repo), else initdb.
new_primary() {
	if [[ -s $SCRIPTS_DIR/restore-repo ]]; then
		restore_primary
	else
		init_primary
	fi
}

# refuse_initdb_if_peer_answers WHY: the `initialized` key lives in a
# ConfigMap that can be deleted; a standby's postgres, though, only ever runs
# on a completed clone of this Database's primary. If one answers (accepting,
# or rejecting while it starts), this Database had data and an initdb here
# would start a new, empty cluster over it (and its standbys would then be
# cloned from the empty one): hold instead. A standby still cloning, or none
# (a new Database, or a single instance), does not answer.
refuse_initdb_if_peer_answers() {
	local peer host port rc
	while IFS= read -r peer; do
		[[ -n $peer ]] || continue
		host=${peer%:*}
		port=${peer##*:}
		rc=0
		pg_isready -q -t 3 -h "$host" -p "$port" || rc=$?
		if ((rc <= 1)); then
			hold "$1, but the standby postgres at $host:$port answers: this Database holds data there;" \
				"refusing to initdb a new, empty primary over it. Restore this data volume, or promote that standby by hand," \
				"or (to start from nothing) delete the standbys' volumes, then delete this pod"
		fi
	done < <(peer_hosts)
}

primary() {
	local initialized='' newer
	if [[ -r $SCRIPTS_DIR/initialized ]]; then
		initialized=$(<"$SCRIPTS_DIR/initialized")
		initialized=${initialized//[[:space:]]/}
	fi
	if [[ -f $REWIND_MARKER ]]; then
		hold "a pg_rewind of $PGDATA did not finish ($REWIND_MARKER): this data mixes two timelines and cannot serve as the" \
			"primary. Name another ordinal the primary (spec.primary) and this pod clones it; or restore from a backup"
	fi
	if dir_is_empty "$PGDATA"; then
		if [[ $initialized == true ]]; then
			hold "data directory $PGDATA is empty but this Database was initialised before ($SCRIPTS_DIR/initialized is true);" \
				"refusing to initdb an empty primary over lost data. With standbys, the function fails over to the most advanced" \
				"one and this pod then rejoins as its standby; otherwise restore the data volume (or restore from a backup" \
				"into a new Database), then delete this pod"
		fi
		refuse_initdb_if_peer_answers "data directory $PGDATA is empty"
		new_primary
	elif [[ ! -f $BOOTSTRAP_MARKER && ! -f $CLONE_MARKER ]]; then
		if [[ $initialized == true ]]; then
			hold "data directory $PGDATA has no bootstrap marker ($BOOTSTRAP_MARKER) but this Database was initialised before;" \
				"not touching it: inspect the volume, then delete this pod"
		fi
		refuse_initdb_if_peer_answers "data directory $PGDATA holds an unfinished bootstrap (no $BOOTSTRAP_MARKER)"
		log "data directory $PGDATA holds an unfinished bootstrap (no $BOOTSTRAP_MARKER): starting over"
		new_primary
	else
		check_version
		# Stopped cut off from every peer (sync-passwords.sh
		# check_isolation): a standby may have been promoted meanwhile.
		# Not before a peer answers again, then the checks below as at
		# any start.
		if [[ -f $PGDATA/$ISOLATION_MARKER ]]; then
			# shellcheck disable=SC2119 # no addresses beyond the peers' names
			network_reaches_a_peer || wait_and_retry "ordinal $ordinal stopped itself cut off from every peer ($(<"$PGDATA/$ISOLATION_MARKER")), and no peer answers yet;" \
				"a primary started now could acknowledge writes that a promoted standby never sees"
			log "a peer answers again: clearing $ISOLATION_MARKER ($(<"$PGDATA/$ISOLATION_MARKER"))"
			rm -f "$PGDATA/$ISOLATION_MARKER"
		fi
		# A peer already writing on a newer timeline means this pod's view
		# of $SCRIPTS_DIR/primary is stale (a failover moved the primary):
		# never a second writable primary. The hold starts over once the
		# ConfigMap names the new primary.
		if newer=$(newer_primary_peer "$(data_timeline)"); then
			wait_and_retry "ordinal $ordinal is named the primary, but $newer is a primary on a newer timeline than this data directory's;" \
				"waiting for the function's choice to reach this pod"
		fi
		# Never two primaries on one timeline: a peer already writing on
		# this data's timeline is the primary, and this pod's name for it
		# is wrong (a ConfigMap edited by hand, or lost and defaulted).
		if newer=$(newer_primary_peer "$(($(data_timeline) - 1))"); then
			wait_and_retry "ordinal $ordinal is named the primary, but $newer already is a primary (this data is on timeline $(data_timeline));" \
				"waiting for the function's choice to name it"
		fi
		if [[ -f $PGDATA/standby.signal ]]; then
			# Only a failover names a standby's ordinal the primary, and only
			# once the failover Job promoted it (postgres removed
			# standby.signal and wrote a new timeline). A standby's data
			# named primary by anything else (the key edited by hand, or the
			# ConfigMap and status lost, after which the function names
			# ordinal 0) would start as a second primary on the same
			# timeline, without a promotion: never.
			hold "ordinal $ordinal is named the primary, but $PGDATA is a standby's (standby.signal) that was never promoted;" \
				"a failover promotes with pg_promote first. To move the primary, set spec.primary (a switchover); if the" \
				"ConfigMap key primary was edited or lost, set it back to the ordinal whose data is the primary's"
		fi
		write_config
	fi
	rm -f "$PGDATA/$STANDBY_FLOOR_CONF"
	start_postgres primary
}

# replication_conninfo: libpq connection string to the primary's replication
# endpoint; the password comes from a 0600 passfile, never an argument.
# The walreceiver connects asynchronously and ignores connect_timeout: when
# the primary's pod comes back with a new address, a connection to the old
# one hung for ~70 s of SYN retries (seen on the real node) while replication
# stood still. tcp_user_timeout bounds that, and keepalives find a primary
# that vanished mid-stream.
replication_conninfo() {
	local repl
	read_file_into repl "$ADMIN_SECRET_DIR/replication-username" || return 1
	printf 'host=%s port=%s user=%s passfile=%s application_name=%s connect_timeout=10 tcp_user_timeout=10000 keepalives_idle=10 keepalives_interval=5 keepalives_count=3\n' \
		"$(conninfo_quote "$PRIMARY_HOST")" "$PRIMARY_PORT" "$(conninfo_quote "$repl")" \
		"$(conninfo_quote "$(replication_passfile)")" "$(conninfo_quote "$POD_NAME")"
}

refresh_passfile() {
	local repl repl_pw
	read_file_into repl "$ADMIN_SECRET_DIR/replication-username" || return 1
	read_file_into repl_pw "$ADMIN_SECRET_DIR/replication-password" || return 1
	write_passfile "$(replication_passfile)" "$repl" "$repl_pw"
}

# clone_once: one attempt at a fresh clone; 0 when PGDATA is complete.
clone_once() {
	local conninfo slot started=$SECONDS size
	local -a rate=()
	[[ -z ${CLONE_MAX_RATE:-} ]] || rate=(--max-rate="$CLONE_MAX_RATE")
	slot=$(slot_name)
	wipe_dir "$PGDATA"
	refresh_passfile || return 1
	conninfo=$(replication_conninfo) || return 1
	if ! pg_isready -q -t 5 -d "$conninfo replication=true"; then
		log "primary $PRIMARY_HOST:$PRIMARY_PORT is not accepting connections yet"
		return 1
	fi
	# A slot left by an earlier clone of this pod holds WAL from the past:
	# drop it (it may not exist) and create it fresh.
	pg_receivewal --drop-slot --slot="$slot" --dbname="$conninfo" --no-password >/dev/null 2>&1 || true
	pg_receivewal --create-slot --if-not-exists --slot="$slot" --dbname="$conninfo" --no-password >&2 || {
		log "could not create replication slot $slot on the primary"
		return 1
	}
	log "cloning the primary $PRIMARY_HOST:$PRIMARY_PORT into $PGDATA (slot $slot)"
	run_child pg_basebackup --pgdata="$PGDATA" --dbname="$conninfo" --wal-method=stream --write-recovery-conf \
		--slot="$slot" --checkpoint=fast --no-password "${rate[@]}" >&2 || {
		log "pg_basebackup failed"
		return 1
	}
	date -u +%Y-%m-%dT%H:%M:%SZ >"$CLONE_MARKER"
	sync "$CLONE_MARKER" "$PGDATA"
	size=$(du -sm "$PGDATA" | cut -f1)
	log "clone completed in $((SECONDS - started))s (${size} MB)"
}

# clear_stale_locks: removes the postmaster's lock files, postmaster.pid in
# PGDATA and the socket's .s.PGSQL.PGPORT.lock in PGHOST (an emptyDir: it
# outlives the containers), when the PID they name is not a live postgres.
# A postmaster killed at once (its node died) leaves both. The pod's
# containers share one PID namespace, so when the node returns and the pod
# runs in a new sandbox, PIDs start over and the PID named (12 or 13: the
# entrypoint execs postgres) is often some live process of the same user:
# postgres then takes the lock for a live postmaster's. Seen on killed
# nodes (e2e TestNodes): pg_rewind's single-user crash recovery refused
# ("lock file already exists"), so the former primary was cloned whole
# instead of rewound; or every postmaster refused the socket's lock,
# restart after restart, and the former primary never rejoined. Called at
# every start of this script, when none of this container's postmasters
# runs (the hold and retry paths start over without one); a live postgres
# of that PID is left to postgres to judge.
clear_stale_locks() {
	local f pid comm
	for f in "$PGDATA/postmaster.pid" "$PGHOST/.s.PGSQL.$PGPORT.lock"; do
		[[ -f $f ]] || continue
		pid='' comm=''
		read -r pid <"$f" || true
		if [[ $pid =~ ^[0-9]+$ ]]; then
			comm=$(cat "/proc/$pid/comm" 2>/dev/null) || comm=''
			[[ $comm == postgres || $comm == postmaster ]] && continue
		fi
		log "removing the stale lock $f: PID ${pid:-?} is ${comm:-not running} here, not a postmaster"
		rm -f "$f"
	done
}

# rewind_once: pg_rewind PGDATA onto the primary at PRIMARY_HOST, as the
# superuser (pg_rewind reads the source's files through functions only a
# superuser may call by default). It copies what changed since the fork,
# not the whole database, and throws away what this copy wrote after it
# (never replicated), as a clone would. It fails on data written without
# wal_log_hints (write_config sets it; older data directories lack it) or
# when the source no longer has the WAL since the fork, and the caller
# clones; it first runs crash recovery itself when the server was not shut
# down cleanly (a lost primary). Half a rewind leaves a data directory no
# one can trust: REWIND_MARKER, set for the run, sends the next start to a
# clone (rewind_interrupted).
rewind_once() {
	local su passfile conninfo slot started=$SECONDS rc=0 row
	read_file_into su "$ADMIN_SECRET_DIR/username" || return 1
	passfile=$(superuser_passfile "$STATE_DIR/superuser.rewind.pgpass") || return 1
	# A promoted source keeps the old timeline in its control file until
	# its first checkpoint (minutes, for a spread one after a busy
	# promotion), and pg_rewind reads the timeline from there: it then
	# finds "no rewind required" and this diverged copy started as a
	# standby that never streamed (seen). pg_rewind's documentation: run
	# CHECKPOINT on a recently promoted source. Then the control file must
	# show the newer timeline, or there is no rewind.
	# The caller saw the primary answer a moment ago: no answer now is a
	# connection that did not open within PEER_TIMEOUT on a loaded node, or
	# a checkpoint that took long, not a verdict. Asked again, a few times,
	# before this copy is thrown away for a whole clone (a suspect for an e2e
	# rehearsal's former primary cloned where a rewind was expected, on a
	# loaded machine; its logs were gone).
	local tries=0 ask_tries=5
	while :; do
		row=$(remote_query "$PRIMARY_HOST:$PRIMARY_PORT" "CHECKPOINT" 120 && remote_query "$PRIMARY_HOST:$PRIMARY_PORT" "SELECT timeline_id FROM pg_control_checkpoint()") || row=''
		if [[ -n $row ]] || ((++tries >= ask_tries)); then
			break
		fi
		log "the primary at $PRIMARY_HOST did not answer the checkpoint a rewind needs (try $tries of $ask_tries); asking again in ${RETRY_INTERVAL}s"
		sleep "$RETRY_INTERVAL"
	done
	if [[ ! $row =~ ^[0-9]+$ ]] || ((row <= $(data_timeline))); then
		log "the primary's checkpoint is not on a timeline newer than this copy's (answer '${row:-none}'): not rewinding"
		return 1
	fi
	# A former primary not shut down cleanly finishes its crash recovery
	# here (single-user mode), keeping every WAL segment it has. Two ways
	# pg_rewind's own went wrong:
	# - pg_rewind reads the copy's WAL back from the fork to the last
	#   checkpoint before it. Its own crash recovery ends with a checkpoint
	#   that recycles the segments older than wal_keep_size, and after a
	#   busy spell whose checkpoint had not completed (a bulk write, then
	#   the loss) that last checkpoint lies further back: "could not find
	#   previous WAL record", and a whole clone instead of a rewind (seen in
	#   the soak's LaggingStandby: 120 MB past the checkpoint, 64 MB kept).
	#   wal_keep_size of 1TB for this recovery removes no segment.
	# - It does not finish a recovery shut down half way ("shut down in
	#   recovery": a former primary restarted, then stopped, while it
	#   replayed its own WAL); it then takes the copy's end of WAL from the
	#   control file, short of what the copy wrote after the fork, finds "no
	#   rewind required", and the diverged copy starts as a standby that can
	#   never stream (seen in CI: 176 bytes past the fork).
	local state
	state=$(LC_ALL=C pg_controldata "$PGDATA" 2>/dev/null | sed -n 's/^Database cluster state: *//p')
	if [[ ! -f $PGDATA/standby.signal && -n $state && $state != "shut down" ]]; then
		log "$PGDATA was not shut down cleanly ($state): finishing its crash recovery (postgres --single), keeping all of its WAL for pg_rewind"
		postgres --single -F -D "$PGDATA" -c wal_keep_size=1TB template1 </dev/null >/dev/null 2>&1 || log "the single-user recovery failed; pg_rewind decides"
	fi
	: >"$REWIND_MARKER"
	sync "$REWIND_MARKER"
	run_child pg_rewind --target-pgdata="$PGDATA" --progress \
		--source-server="host=$(conninfo_quote "$PRIMARY_HOST") port=$PRIMARY_PORT user=$(conninfo_quote "$su") dbname=postgres passfile=$(conninfo_quote "$passfile") connect_timeout=10 gssencmode=disable" >&2 || rc=$?
	rm -f "$passfile"
	if ((rc != 0)); then
		log "pg_rewind failed (exit $rc)"
		return 1
	fi
	# What pg_basebackup --write-recovery-conf writes for a clone: pg_rewind
	# copied the source's postgresql.auto.conf, which names the source's slot.
	refresh_passfile || return 1
	conninfo=$(replication_conninfo) || return 1
	slot=$(slot_name)
	{
		echo "# Written by entrypoint.sh after pg_rewind, as pg_basebackup --write-recovery-conf does for a clone."
		echo "primary_conninfo = $(conf_quote "$conninfo")"
		echo "primary_slot_name = $(conf_quote "$slot")"
	} >"$PGDATA/postgresql.auto.conf"
	# The failover Job made this ordinal's slot at the promotion; make sure.
	pg_receivewal --create-slot --if-not-exists --slot="$slot" --dbname="$conninfo" --no-password >&2 || {
		log "could not create replication slot $slot on the primary"
		return 1
	}
	rm -f "$BOOTSTRAP_MARKER" "$PGDATA/database.reclone"
	: >"$PGDATA/standby.signal"
	date -u +%Y-%m-%dT%H:%M:%SZ >"$CLONE_MARKER"
	sync "$PGDATA"
	rm -f "$REWIND_MARKER"
	log "rewound onto the primary in $((SECONDS - started))s: streaming from it as a standby"
}

# rewind_interrupted: a pg_rewind of PGDATA did not finish (the pod died in
# it): the data directory mixes two timelines; it is cloned again.
rewind_interrupted() {
	[[ -f $REWIND_MARKER ]] || return 1
	log "a pg_rewind of $PGDATA did not finish: discarding this copy and cloning the primary"
	printf '%s pg_rewind did not finish\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$PGDATA/database.reclone"
	rm -f "$CLONE_MARKER" "$BOOTSTRAP_MARKER" "$PGDATA/standby.signal"
	sync "$PGDATA"
	rm -f "$REWIND_MARKER"
}

# rejoin_former_primary: this data directory was a primary (no
# standby.signal) and the function named another ordinal the primary. Its
# WAL may hold writes that never reached the new primary (asynchronous
# replication), so it cannot simply follow: it is rewound onto the new
# primary (rewind_once), or else cloned again. Only once a primary answers
# at PRIMARY_HOST on a timeline newer than this data's: if none does, this
# may be the newest copy there is (the ConfigMap may be stale in the other
# direction), and it is kept and the pod holds.
rejoin_former_primary() {
	local mine row theirs
	mine=$(data_timeline)
	row=$(remote_query "$PRIMARY_HOST:$PRIMARY_PORT" "$SQL_ROLE") || row=''
	if [[ ! $row =~ ^t\|([0-9]+)$ ]] || ((BASH_REMATCH[1] <= mine)); then
		wait_and_retry "ordinal $ordinal is named a standby, but $PGDATA was a primary (timeline $mine) and no primary on a newer timeline" \
			"answers at $PRIMARY_HOST:$PRIMARY_PORT (answer '${row:-none}'); keeping this data until one does"
	fi
	theirs=${BASH_REMATCH[1]}
	set_state cloning
	log "$PGDATA was a primary on timeline $mine; the primary at $PRIMARY_HOST is on timeline $theirs:" \
		"rewinding this copy onto it (writes after the failover point were not replicated and are discarded)"
	rewind_once && return 0
	log "discarding this copy and cloning the new primary"
	printf '%s former primary on timeline %s; the primary is on timeline %s; pg_rewind failed\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$mine" "$theirs" >"$PGDATA/database.reclone"
	rm -f "$CLONE_MARKER" "$BOOTSTRAP_MARKER"
	sync "$PGDATA"
	rm -f "$REWIND_MARKER"
}

standby() {
	require_env PRIMARY_HOST
	# A standby acknowledges nothing: a former primary stopped cut off
	# (ISOLATION_MARKER) rejoins as any other.
	rm -f "$PGDATA/$ISOLATION_MARKER"
	rewind_interrupted || true
	if [[ -f $PGDATA/PG_VERSION && ! -f $PGDATA/standby.signal && (-f $CLONE_MARKER || -f $BOOTSTRAP_MARKER) ]]; then
		rejoin_former_primary
	fi
	if [[ -f $CLONE_MARKER ]]; then
		log "data directory $PGDATA holds a completed clone: starting it, not cloning again"
		check_version
	else
		set_state cloning
		if [[ -f $PGDATA/database.reclone ]]; then
			log "this standby cannot replicate from the primary any more ($(<"$PGDATA/database.reclone")): wiping it and cloning again"
		elif ! dir_is_empty "$PGDATA"; then
			log "data directory $PGDATA holds an unfinished clone (no $CLONE_MARKER): wiping it and cloning again"
		fi
		until clone_once; do
			log "clone attempt failed; retrying in ${RETRY_INTERVAL}s"
			sleep_interruptibly "$RETRY_INTERVAL"
		done
	fi
	refresh_passfile || die "cannot write the replication passfile"
	# Never start a standby's data as a primary.
	[[ -f $PGDATA/standby.signal ]] || : >"$PGDATA/standby.signal"
	write_config
	write_standby_floor
	start_postgres "standby of $PRIMARY_HOST:$PRIMARY_PORT"
}

# An image without pgBackRest, with archiving on, would fail every
# archive_command: the WAL would pile up in pg_wal until the volume is full.
# pgBackRest's queue bound needs pgBackRest, so the pod holds instead.
if [[ -f $SCRIPTS_DIR/pgbackrest.conf ]] && ! command -v pgbackrest >/dev/null; then
	hold "the function input names objectStorage, so postgres archives its WAL with pgBackRest, but this image has no pgbackrest;" \
		"use an image with it (docs/backups.md), or remove objectStorage from the input"
fi

clear_stale_locks
if ((ordinal == $(current_primary))); then
	primary
else
	standby
fi
