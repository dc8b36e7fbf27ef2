#!/usr/bin/env bash
# sync-passwords.sh: the password-sync sidecar of every StatefulSet pod.
#
# The Secrets are the source of truth for passwords. Every SYNC_INTERVAL
# seconds (default 5):
#   primary (postgres not in recovery, whatever the ordinal): when the content of the mounted
#     secret files changed since the last successful apply, or postgres was
#     restarted since, ALTER ROLE ... PASSWORD for the app role, the
#     replication role and the superuser, over the socket (peer), and the
#     exporter's role (MONITOR_USER) created when missing.
#   standby (in recovery, or not up and not the ordinal the function names
#     the primary in SCRIPTS_DIR/primary): refreshes its local replication passfile (used by its
#     walreceiver to reconnect); and every SLOT_CHECK_ROUNDS rounds (default
#     6) checks that the primary still holds its slot and the WAL it needs,
#     and is the same cluster (check_lost_slot).
#   any instance: reloads the configuration when the function's
#     postgresql.conf changed (reload_settings).
#   primary with peers: stops postgres when it is cut off from every peer
#     and from the API server (check_isolation): the fence of a partition, which its kubelet's
#     liveness probe, running inside the pod, never sees.
# Safe while postgres is not up yet: it just tries again next round.
# Passwords never reach the server: the sidecar sends the SCRAM verifiers the
# function computed into the superuser Secret (lib.sh read_verifier), as psql
# variables on stdin (:'pw' quoting): never in process arguments; the session
# also turns statement logging off. An app password edited in the
# credentials Secret is applied once the function wrote its verifier
# (app_verifier_current).
#
# Environment: POD_NAME PGHOST PGPORT PGDATA APP_USER APP_SECRET_DIR
# ADMIN_SECRET_DIR; optional SYNC_INTERVAL (default 5), SYNC_ONCE (1: one round,
# then exit with its status; for tests and debugging), PRIMARY_HOST and
# PRIMARY_PORT (default 5432; standbys), SLOT_CHECK_ROUNDS (default 6),
# ISOLATION_FENCE (off disables check_isolation; default on),
# ISOLATION_WITNESS (lib.sh isolation_witness; default the API server's
# Service, KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT),
# ISOLATION_REPLY_SECONDS (default 5), PEER_TIMEOUT (default 2), PEER_DOMAIN
# and PEER_HOSTS / PEER_ORDINALS (lib.sh peer_hosts: the peers
# check_isolation tries), ARCHIVE_RETRY_SECONDS (default 60: archive_round),
# STATE_DIR (default /tmp, as entrypoint.sh), SCRIPTS_DIR (default this
# script's directory: its postgresql.conf), MONITOR_USER (with metrics: the
# exporter's role, created with pg_monitor on the primary).
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
LOG_TAG=sync-passwords

require_env POD_NAME PGHOST PGPORT PGDATA APP_USER APP_SECRET_DIR ADMIN_SECRET_DIR
MONITOR_USER=${MONITOR_USER:-}
SYNC_INTERVAL=${SYNC_INTERVAL:-5}
require_int SYNC_INTERVAL 1
SLOT_CHECK_ROUNDS=${SLOT_CHECK_ROUNDS:-6}
require_int SLOT_CHECK_ROUNDS 1
PRIMARY_HOST=${PRIMARY_HOST:-}
PRIMARY_PORT=${PRIMARY_PORT:-5432}
SCRIPTS_DIR=${SCRIPTS_DIR:-$here}
require_int PRIMARY_PORT 1
# ISOLATION_FENCE=off disables check_isolation (on by default). It was off
# by default while the peers alone decided: in CI a standby's pod replaced
# during a roll looked like a partition (its old address, still in DNS, no
# longer answering) and the primary stopped itself; the witness (the API
# server) tells the two apart (notes/issue-21.md).
ISOLATION_FENCE=${ISOLATION_FENCE:-on}
ISOLATION_REPLY_SECONDS=${ISOLATION_REPLY_SECONDS:-5}
require_int ISOLATION_REPLY_SECONDS 1
ordinal=$(pod_ordinal)
CLONE_MARKER="$PGDATA/database.cloned"
RECLONE_MARKER="$PGDATA/database.reclone"

secret_files=(
	"$ADMIN_SECRET_DIR/username"
	"$ADMIN_SECRET_DIR/password"
	"$ADMIN_SECRET_DIR/replication-username"
	"$ADMIN_SECRET_DIR/replication-password"
	"$APP_SECRET_DIR/password"
)
# The verifiers the primary applies, and the app password's copy its
# verifier is of: compared too, but not required, so that a Secret written
# by a function before verifiers (a fleet being upgraded) stops only the
# password apply (sync_sql says why), never the fence, the slot check or a
# standby's passfile.
verifier_files=(
	"$ADMIN_SECRET_DIR/password-verifier"
	"$ADMIN_SECRET_DIR/replication-password-verifier"
	"$ADMIN_SECRET_DIR/app-password-verifier"
	"$ADMIN_SECRET_DIR/app-password"
)

# secrets_read NAME: the secret files' content, each prefixed by its length
# (a missing verifier file by "-"), into the variable NAME; 1 when a
# required one is not readable. Compared round after round in memory
# (read, a builtin: no process), so that an idle sidecar forks nothing to
# learn that nothing changed; a checksum is computed only for the log line
# of an apply (short_sum).
secrets_read() {
	local -n _all=$1
	local f c
	_all=''
	for f in "${secret_files[@]}"; do
		[[ -r $f ]] || return 1
	done
	for f in "${secret_files[@]}" "${verifier_files[@]}"; do
		if [[ -r $f ]]; then
			c=''
			IFS= read -r -d '' c <"$f" || true
			_all+="${#c}:$c;"
		else
			_all+="-;"
		fi
	done
}

# short_sum CONTENT: the first 12 hex digits of CONTENT's sha256, for logs
# (never the secrets themselves).
short_sum() {
	local s
	s=$(sha256sum <<<"$1")
	printf '%s\n' "${s:0:12}"
}

# app_verifier_current: succeeds when the superuser Secret's copy of the app
# password is the password in the credentials Secret, so that its verifier
# (app-password-verifier, beside the copy) is that password's. A password
# just edited in the credentials Secret makes the function write a new copy
# and verifier at the reconcile the edit triggers; until then the old
# password stays, rather than the role getting the old verifier as if it
# were the new one.
app_verifier_current() {
	local app_pw copy
	read_file_into app_pw "$APP_SECRET_DIR/password" || return 1
	read_file_into copy "$ADMIN_SECRET_DIR/app-password" || return 1
	[[ $app_pw == "$copy" ]]
}

# sync_sql: the SQL that sets the three roles' passwords from their SCRAM
# verifiers (lib.sh read_verifier), as psql variables on stdin.
sync_sql() {
	local su su_pw repl repl_pw app_pw
	read_file_into su "$ADMIN_SECRET_DIR/username" || return 1
	read_file_into repl "$ADMIN_SECRET_DIR/replication-username" || return 1
	# Only SCRAM verifiers reach the server, never a plaintext password.
	read_verifier su_pw "$ADMIN_SECRET_DIR/password-verifier" || return 1
	read_verifier repl_pw "$ADMIN_SECRET_DIR/replication-password-verifier" || return 1
	read_verifier app_pw "$ADMIN_SECRET_DIR/app-password-verifier" || return 1
	psql_set su "$su"
	psql_set su_pw "$su_pw"
	psql_set repl "$repl"
	psql_set repl_pw "$repl_pw"
	psql_set app "$APP_USER"
	psql_set app_pw "$app_pw"
	cat <<-'SQL'
		SET log_statement = 'none';
		SET log_min_duration_statement = -1;
		SET log_min_error_statement = 'panic';
		BEGIN;
		ALTER ROLE :"app" WITH PASSWORD :'app_pw';
		ALTER ROLE :"repl" WITH PASSWORD :'repl_pw';
		ALTER ROLE :"su" WITH PASSWORD :'su_pw';
		COMMIT;
	SQL
	[[ -n $MONITOR_USER ]] || return 0
	# The exporter's role: it may read the statistics (pg_monitor), no
	# table; it logs in by peer authentication only (no password), from
	# the exporter's uid (entrypoint.sh's pg_ident.conf). Created here, not
	# at the bootstrap, so that Databases created before it, restored ones
	# and a metrics setting turned on later get it from their primary.
	psql_set mon "$MONITOR_USER"
	cat <<-'SQL'
		SELECT format('CREATE ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION', :'mon')
		WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'mon') \gexec
		SELECT format('GRANT pg_monitor TO %I', :'mon')
		WHERE NOT pg_has_role(:'mon', 'pg_monitor', 'MEMBER') \gexec
	SQL
}

# check_lost_slot (standby): a standby that cannot replicate keeps serving
# stale reads, and can never catch up when
#   - the primary invalidated its slot (it was down while the primary wrote
#     more WAL than max_slot_wal_keep_size): wal_status 'lost';
#   - the primary has no slot for it at all (dropped by hand, or a primary
#     re-created on a new volume): the walreceiver loops on "replication slot
#     does not exist";
#   - the primary is another cluster (its system identifier differs from this
#     standby's: re-created by initdb): nothing it sends can be replayed.
# Only when the primary itself ANSWERS with one of these, and this standby is
# in recovery and not streaming (or not even consistent yet, when it cannot
# answer a query: standby_not_consistent), does it turn the clone into an unfinished one
# (clone marker removed, reason in database.reclone): the liveness probe then
# restarts the postgres container, and entrypoint.sh wipes and clones it
# again. A primary that does not answer changes nothing: this standby may
# hold the only copy of the data.
# diverged_from_primary PASSFILE SUPERUSER: prints why and succeeds when this
# standby replayed past the point where the primary's timeline forked off
# its own (a failover promoted a standby that had received less: possible
# only when this one did not answer the failover Job): it can then never
# follow, and waits for WAL forever.
diverged_from_primary() {
	local passfile=$1 su=$2 mine answer primary_tli fork ahead
	mine=$(psql -X -A -t -q -h "$PGHOST" -p "$PGPORT" -U "$su" -d postgres -c \
		"SELECT coalesce((SELECT received_tli FROM pg_stat_wal_receiver WHERE received_tli > 0), (SELECT timeline_id FROM pg_control_checkpoint()))" 2>/dev/null) || return 1
	[[ $mine =~ ^[0-9]+$ ]] || return 1
	answer=$(psql -X -A -t -q -v mine="$mine" \
		-d "host=$(conninfo_quote "$PRIMARY_HOST") port=$PRIMARY_PORT user=$(conninfo_quote "$su") dbname=postgres passfile=$(conninfo_quote "$passfile") connect_timeout=5" \
		<<<"WITH t AS (SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int AS tli)
			SELECT t.tli || '|' || coalesce((SELECT split_part(l, E'\t', 2) FROM regexp_split_to_table(
				coalesce(pg_read_file('pg_wal/' || lpad(upper(to_hex(t.tli)), 8, '0') || '.history', 0, 1000000, true), ''), E'\n') l
				WHERE split_part(l, E'\t', 1) = :'mine'), '') FROM t" 2>/dev/null) || return 1
	primary_tli=${answer%%|*}
	fork=${answer#*|}
	[[ $primary_tli =~ ^[0-9]+$ && $fork =~ ^[0-9A-Fa-f]+/[0-9A-Fa-f]+$ ]] && ((primary_tli > mine)) || return 1
	ahead=$(psql -X -A -t -q -h "$PGHOST" -p "$PGPORT" -U "$su" -d postgres -v fork="$fork" \
		<<<"SELECT pg_last_wal_replay_lsn() > :'fork'::pg_lsn" 2>/dev/null) || return 1
	[[ $ahead == t ]] || return 1
	printf 'this standby replayed timeline %s past %s, where the primary'\''s timeline %s forked off it\n' "$mine" "$fork" "$primary_tli"
}

# standby_not_consistent: for a standby whose postgres runs but refuses
# connections because it has not reached a consistent state (a former
# primary rewound onto the new one replays up to the point pg_rewind
# copied; a clone resuming), check_lost_slot's facts from disk, in the
# form of its query: "true|not consistent|SYSTEM_IDENTIFIER". Such a copy
# may wait for WAL the primary no longer has ("requested WAL segment ...
# has already been removed": its slot was invalidated while its node was
# down, seen in e2e TestNodes/PrimaryNodeDies) and would wait forever,
# never answering a query, had the check needed one. Fails for anything
# else (postgres not running at all: the entrypoint is at work).
standby_not_consistent() {
	local rc=0 sysid
	[[ -f $PGDATA/standby.signal ]] || return 1
	pg_isready -q -t 5 -h "$PGHOST" -p "$PGPORT" || rc=$?
	((rc == 1)) || return 1
	sysid=$(LC_ALL=C pg_controldata "$PGDATA" 2>/dev/null | sed -n 's/^Database system identifier: *//p')
	[[ $sysid =~ ^[0-9]+$ ]] || return 1
	printf 'true|not consistent|%s\n' "$sysid"
}

check_lost_slot() {
	local su su_pw here_state here_sysid slot answer primary_sysid wal_status passfile reason
	[[ -n $PRIMARY_HOST && -f $CLONE_MARKER ]] || return 0
	read_file_into su "$ADMIN_SECRET_DIR/username" || return 1
	read_file_into su_pw "$ADMIN_SECRET_DIR/password" || return 1
	here_state=$(psql -X -A -t -q -h "$PGHOST" -p "$PGPORT" -U "$su" -d postgres -c \
		"SELECT pg_is_in_recovery()::text || '|' || coalesce((SELECT status FROM pg_stat_wal_receiver), 'none') || '|' || (SELECT system_identifier FROM pg_control_system())" 2>/dev/null) ||
		here_state=$(standby_not_consistent) || return 1
	here_sysid=${here_state##*|}
	here_state=${here_state%|*}
	[[ $here_state == true\|* && $here_state != *\|streaming ]] || return 0
	passfile="$STATE_DIR/superuser.pgpass"
	mkdir -p "$STATE_DIR"
	write_passfile "$passfile" "$su" "$su_pw"
	slot=$(slot_name)
	answer=$(psql -X -A -t -q -v slot="$slot" \
		-d "host=$(conninfo_quote "$PRIMARY_HOST") port=$PRIMARY_PORT user=$(conninfo_quote "$su") dbname=postgres passfile=$(conninfo_quote "$passfile") connect_timeout=5" \
		<<<"SELECT (SELECT system_identifier FROM pg_control_system()) || '|' || coalesce((SELECT coalesce(wal_status, 'unreserved') FROM pg_replication_slots WHERE slot_name = :'slot'), 'missing')" 2>/dev/null) || return 1
	primary_sysid=${answer%%|*}
	wal_status=${answer#*|}
	# Anything but a well-formed answer (and a well-formed identifier here) is
	# no answer.
	[[ $primary_sysid =~ ^[0-9]+$ && $here_sysid =~ ^[0-9]+$ && -n $wal_status ]] || return 0
	if [[ $primary_sysid != "$here_sysid" ]]; then
		reason="the primary is another cluster (system identifier $primary_sysid, this standby's $here_sysid)"
	elif [[ $wal_status == missing ]]; then
		reason="the primary has no replication slot $slot"
	elif [[ $wal_status == lost ]]; then
		reason="the primary invalidated slot $slot (WAL this standby needs is gone)"
	elif ! reason=$(diverged_from_primary "$passfile" "$su"); then
		return 0
	fi
	log "standby: $reason; it is ${here_state#*|} and can never catch up: marking the clone unfinished, to be wiped and cloned again at the next container start"
	printf '%s %s (%s:%s)\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$reason" "$PRIMARY_HOST" "$PRIMARY_PORT" >"$RECLONE_MARKER"
	rm -f "$CLONE_MARKER"
	sync "$PGDATA"
}

# check_isolation AGE ADDRESSES: on a primary, 1 once it found itself cut off
# from every peer and from the control plane, and stopped postgres. Cut
# off: no standby replied over replication within ISOLATION_REPLY_SECONDS,
# no peer answers a TCP connection at all (network_reaches_a_peer: a
# refused connection or an unknown name is an answer, so a standby
# restarting or deleted is not a partition), and the isolation witness (the
# API server, lib.sh isolation_witness) accepts no connection: a pod that
# cannot reach it may be marked unready with its node and failed over, a
# pod that can is not. Where a policy forbids the pods to reach the API
# server, the peers alone decide, and a primary whose every standby is
# being replaced at once stops until one answers (README "Known limits").
# Such a primary may be failed over by the others at any moment,
# and with async replication every write it acknowledged from then on would
# be lost, and acknowledged by a deposed primary: it stops (fast: every
# session ends) and leaves ISOLATION_MARKER, and entrypoint.sh starts it
# again only once a peer answers. A fence of commits that wait instead
# (synchronous_standby_names) would not do: a client cancelling its wait
# (statement_timeout) gets its COMMIT acknowledged, committed locally only.
# From the partition to the stop: ISOLATION_REPLY_SECONDS, a round
# (SYNC_INTERVAL) and twice PEER_TIMEOUT, 14 s by default, inside the failover
# Job's fence (21 s), and before its pod turns unready, which is what starts
# a failover at all.
check_isolation() {
	local age=$1 list=$2 addrs=() a
	[[ $ISOLATION_FENCE == on ]] || return 0
	if [[ $age =~ ^[0-9]+$ ]] && ((age < ISOLATION_REPLY_SECONDS)); then
		return 0
	fi
	[[ -n $(peer_hosts) ]] || return 0
	# The standbys' own addresses too, as their replication connections
	# came from: a name server down is no partition, and must not stop
	# a primary whose standbys stream.
	for a in $list; do
		[[ $a == *:* ]] && a="[$a]"
		addrs+=("$a:$PGPORT")
	done
	network_reaches_a_peer "${addrs[@]}" && return 0
	# The control plane is the witness: while this pod reaches the API
	# server, so does its kubelet, which reports it ready (its probes run
	# inside the pod), and nothing starts a failover; a standby that is
	# only being replaced (a roll: its old address in DNS a moment longer,
	# answering nothing) is then no partition.
	witness_answers && return 0
	local witness
	witness=$(isolation_witness)
	local why="no standby replied for ${ISOLATION_REPLY_SECONDS}s or more (last reply age: ${age/#-1/none}), no peer answers a connection within ${PEER_TIMEOUT:-2}s, and the witness ${witness:-(none)} accepts none"
	log "ISOLATED: $why: stopping postgres (immediate: every session ends at once) so that it acknowledges nothing a promoted standby would not have; it starts again once a peer answers"
	printf '%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$why" >"$PGDATA/$ISOLATION_MARKER"
	sync "$PGDATA"
	# Immediate, not fast: a fast shutdown waits for its walsenders to hand
	# the last WAL to standbys it cannot reach (43 s on the real node, until
	# the TCP connections timed out); crash recovery at the next start
	# costs less.
	pg_ctl stop -D "$PGDATA" -m immediate -W >/dev/null 2>&1 || log "pg_ctl stop failed: postgres stopped already?"
	return 1
}

applied=''   # checksum|postmaster start time of the last successful apply
waiting=''   # last "not yet" reason logged, to log each reason once

say_once() {
	[[ $waiting == "$1" ]] && return 0
	waiting=$1
	log "$1"
}

# sync_round: one round; 0 when the database matches the secrets (or there is
# nothing to do), 1 when it should be tried again.
sync_round() {
	local sum su status in_recovery='' started='' age=-1 replies='' key
	secrets_read sum || {
		say_once "secret files not readable yet"
		return 1
	}
	read_file_into su "$ADMIN_SECRET_DIR/username" || return 1
	# The role is postgres's own answer, never the ordinal: after a
	# failover the primary is any ordinal, and ordinal 0 may be a standby
	# (deciding by "ordinal 0" left password edits unapplied after every
	# failover, and ordinal 0 as a standby never checked its slot). The
	# same query (one connection a round: each psql is a process start and
	# a backend fork) answers check_isolation: the age of the standbys'
	# last reply and their addresses (none on a standby).
	if status=$(psql -X -A -t -q -h "$PGHOST" -p "$PGPORT" -U "$su" -d postgres \
		-c "SELECT pg_is_in_recovery(), pg_postmaster_start_time(), coalesce(min(extract(epoch FROM now() - reply_time))::int, -1), coalesce(string_agg(DISTINCT host(client_addr), ' '), '') FROM pg_stat_replication" 2>/dev/null); then
		IFS='|' read -r in_recovery started age replies <<<"$status"
	elif ((ordinal == $(current_primary))); then
		say_once "postgres is not accepting connections yet; retrying every ${SYNC_INTERVAL}s"
		return 1
	else
		# Not up, and not the named primary: a standby starting or cloning
		# needs its passfile first.
		in_recovery=t
	fi
	if [[ $in_recovery == t ]]; then
		local repl repl_pw
		if ((round % SLOT_CHECK_ROUNDS == 0)); then
			check_lost_slot || true
		fi
		[[ $applied != "$sum" ]] || return 0
		read_file_into repl "$ADMIN_SECRET_DIR/replication-username" || return 1
		read_file_into repl_pw "$ADMIN_SECRET_DIR/replication-password" || return 1
		[[ -d $(dirname "$PGDATA") ]] || {
			say_once "data volume not mounted"
			return 1
		}
		write_passfile "$(replication_passfile)" "$repl" "$repl_pw"
		[[ -z $applied ]] || log "standby: replication passfile refreshed"
		applied=$sum
		return 0
	fi
	check_isolation "$age" "$replies" || return 1
	archive_round
	key="$sum|$started"
	[[ $applied != "$key" ]] || return 0
	app_verifier_current || {
		say_once "the app password in the credentials Secret is not the one the superuser Secret's app-password-verifier is of (edited since the function's last reconcile): waiting for the function to write its verifier"
		return 1
	}
	if ! sync_sql | psql -X -q -v ON_ERROR_STOP=1 -h "$PGHOST" -p "$PGPORT" -U "$su" -d postgres >/dev/null; then
		say_once "applying the passwords failed; retrying every ${SYNC_INTERVAL}s"
		return 1
	fi
	applied=$key
	waiting=''
	log "passwords applied from the secrets (checksum $(short_sum "$sum")) for roles $APP_USER, replication and superuser"
}

# archive_round: on a primary whose Database archives to object storage
# (SCRIPTS_DIR/pgbackrest.conf exists), runs `pgbackrest.sh ensure` once per
# postmaster start (the stanza, and a first full backup when the bucket has
# none), then `pgbackrest.sh rebase` whenever a push dropped WAL (the marker
# pgbackrest.sh leaves in PGDATA: a new full backup once the bucket answers),
# and `pgbackrest.sh full ID` when full-backup.sh (the N-full CronJob) asked
# for a full backup (database.full-backup-request in PGDATA), all
# in the background: a backup takes minutes and the passwords must not wait
# for it. A failed run is tried again ARCHIVE_RETRY_SECONDS later; its
# output is in the sidecar's log either way.
archive_started='' # postmaster start time the ensure run succeeded for
archive_pid=''
archive_next=0 # now_ms before which no new run starts
archive_cmd=''  # the running run's command: ensure, rebase or full ID
archive_round() {
	[[ -f ${SCRIPTS_DIR:-$here}/pgbackrest.conf ]] || return 0
	if [[ -n $archive_pid ]]; then
		kill -0 "$archive_pid" 2>/dev/null && return 0
		if wait "$archive_pid"; then
			if [[ $archive_cmd == ensure ]]; then
				archive_started=$started
				log "archive: stanza ready and the repository holds a backup"
			fi
		else
			log "archive: pgbackrest.sh $archive_cmd failed (above); trying again in ${ARCHIVE_RETRY_SECONDS:-60}s"
			archive_next=$(($(now_ms) + ${ARCHIVE_RETRY_SECONDS:-60} * 1000))
			if [[ $archive_cmd == "full "* ]]; then
				full_answer_failed "${archive_cmd#full }"
			fi
		fi
		archive_pid=''
		return 0
	fi
	local args=(ensure) id='' answer=''
	if [[ $archive_started == "$started" ]]; then
		if [[ -f $PGDATA/database.archive-gap ]]; then
			args=(rebase)
		else
			# A full backup full-backup.sh asked for, unless its answer is
			# final: one still "running" was cut short (this sidecar or
			# postgres restarted), so it is taken again.
			{ read -r id <"$PGDATA/database.full-backup-request"; } 2>/dev/null || return 0
			{ read -r answer <"$PGDATA/database.full-backup"; } 2>/dev/null || true
			[[ -n $id && $answer != "$id ok"* && $answer != "$id failed"* ]] || return 0
			args=(full "$id")
		fi
	fi
	(($(now_ms) >= archive_next)) || return 0
	bash "$here/pgbackrest.sh" "${args[@]}" &
	archive_pid=$! archive_cmd=${args[*]}
}

# full_answer_failed ID: a full backup run that ended without its answer
# (pgbackrest.sh stopped before pgBackRest ran: no keys, no pgbackrest)
# answers failed, so that full-backup.sh reports it now rather than at its
# deadline; its Job's next attempt asks anew.
full_answer_failed() {
	local id=$1 answer='' f=$PGDATA/database.full-backup
	{ read -r answer <"$f"; } 2>/dev/null || true
	[[ $answer != "$id ok"* && $answer != "$id failed"* ]] || return 0
	printf '%s failed before pgBackRest ran (the sidecar log of the primary says why)\n' "$id" >"$f.tmp" && mv -f "$f.tmp" "$f"
}

# reload_settings: the function's postgresql.conf (in the scripts ConfigMap,
# included last by database.conf) changes without a pod restart when only
# settings PostgreSQL can reload changed (the pods' config hash covers the
# others): when its content differs from the one last loaded (or at the
# sidecar's start), SELECT pg_reload_conf(). Until postgres answers, it tries
# again next round.
settings_loaded='' # content of the settings file last reloaded
reload_settings() {
	local conf='' su
	[[ -r ${SCRIPTS_DIR:-$here}/postgresql.conf ]] || return 0
	IFS= read -r -d '' conf <"${SCRIPTS_DIR:-$here}/postgresql.conf" || true
	[[ $settings_loaded != "$conf" ]] || return 0
	read_file_into su "$ADMIN_SECRET_DIR/username" || return 1
	psql -X -A -t -q -h "$PGHOST" -p "$PGPORT" -U "$su" -d postgres -c "SELECT pg_reload_conf()" >/dev/null 2>&1 || return 1
	[[ -z $settings_loaded ]] || log "settings file changed (checksum $(short_sum "$conf")): configuration reloaded"
	settings_loaded=$conf
}

round=0 # rounds done; the first one checks the slot
if [[ ${SYNC_ONCE:-} == 1 ]]; then
	reload_settings || true
	sync_round
	exit
fi

trap 'log "terminated"; exit 0' TERM INT
log "watching the secret files every ${SYNC_INTERVAL}s (ordinal $ordinal)"
# Said once, for the person on call: whether the isolation fence can tell a
# partition from standbys that are only being replaced.
if [[ $ISOLATION_FENCE == on ]]; then
	witness=$(isolation_witness)
	if [[ -z $witness ]]; then
		log "isolation fence on, no witness: the peers alone decide (a primary whose every standby is silent stops as if partitioned)"
	elif witness_answers; then
		log "isolation fence on: witness $witness answers"
	else
		log "isolation fence on: witness $witness does not answer; while it does not, a primary whose every standby is silent stops as if partitioned"
	fi
else
	log "isolation fence off (ISOLATION_FENCE=$ISOLATION_FENCE)"
fi
while :; do
	sync_round || true
	reload_settings || true
	round=$((round + 1))
	sleep "$SYNC_INTERVAL" &
	wait $! || true
done
