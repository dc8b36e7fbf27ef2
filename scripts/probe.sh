#!/usr/bin/env bash
# probe.sh ready|live: the postgres container's readiness and liveness probes.
#
#   ready: entrypoint.sh has exec'd postgres (state running; never while
#          initialising, cloning or holding) and postgres accepts connections
#          on the socket. A standby also has to replicate (standby_fresh):
#          it is ready only while its WAL receiver streamed, at most
#          READY_MAX_LAG_BYTES behind the primary and with replay not paused,
#          within the last READY_GRACE_SECONDS; otherwise the read Service
#          drops it instead of serving stale reads. A primary that finds a
#          peer writing on a newer timeline (a failover promoted it while
#          this one was frozen or cut off) stops its postgres at once and
#          is not ready: never two writable instances behind the Services.
#   live:  postgres answers on the socket (accepting, or rejecting while it
#          starts or recovers), or postgres is not started yet: the
#          entrypoint prepares (starting), initialises, clones or holds; the
#          kubelet must not restart it in a loop.
#          Not live: a running standby whose clone the sidecar marked for
#          cloning again (database.reclone: the primary lost its WAL), so
#          that the restarted container clones it. Not live either: a standby
#          whose replay paused because the primary raised a setting above the
#          standby's own (standby_needs_restart): the restart starts it with
#          the primary's values (entrypoint.sh write_standby_floor); asked
#          only once the readiness probe saw replay paused (PAUSED_FILE).
#
# Each probe costs a process start per client it runs (60-80 ms of CPU each
# where process creation is slow, issue 26): ready runs one local psql (and,
# on a primary, one per peer for the fence), live one pg_isready.
#
# Environment (the postgres container's): PGHOST (socket dir), PGPORT;
# optional ADMIN_SECRET_DIR (its username is the role probes connect as, else
# postgres), STATE_DIR (default /tmp, as entrypoint.sh), PGDATA,
# READY_GRACE_SECONDS (default 60), READY_MAX_LAG_BYTES (default 268435456,
# 256 MiB), PROBE_QUERY_TIMEOUT (seconds, default 3), NAMED_STANDBY_SECONDS
# (default 120; named_standby, which also needs PGDATA, SCRIPTS_DIR and
# POD_NAME). The fence (fenced) also
# needs PGDATA, SCRIPTS_DIR, POD_NAME, PEER_DOMAIN and ADMIN_SECRET_DIR
# (lib.sh newer_primary_peer; PEER_TIMEOUT, default 2; PEER_HOSTS /
# PEER_ORDINALS, overrides for tests).
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
LOG_TAG=probe

mode=${1:-}
[[ $mode == ready || $mode == live ]] || die "usage: probe.sh ready|live"
require_env PGHOST PGPORT

# Connect as the superuser (peer on the socket) so that the server logs
# nothing for a probe.
user=postgres
if [[ -n ${ADMIN_SECRET_DIR:-} && -r $ADMIN_SECRET_DIR/username ]]; then
	user=$(<"$ADMIN_SECRET_DIR/username")
fi

READY_GRACE_SECONDS=${READY_GRACE_SECONDS:-60}
require_int READY_GRACE_SECONDS 0
READY_MAX_LAG_BYTES=${READY_MAX_LAG_BYTES:-268435456}
require_int READY_MAX_LAG_BYTES 0
NAMED_STANDBY_SECONDS=${NAMED_STANDBY_SECONDS:-120}
require_int NAMED_STANDBY_SECONDS 0

# sql STATEMENT: bounded, as everything a probe runs. A psql left waiting on
# a hung server outlives the probe the kubelet kills on timeout and holds
# the exec's output open, and the kubelet then hears nothing from the probe
# for its 2-minute runtime timeout: a frozen primary looked ready that long
# (seen on the real node).
sql() {
	timeout "${PROBE_QUERY_TIMEOUT:-3}" psql -X -A -t -q -h "$PGHOST" -p "$PGPORT" -U "$user" -d postgres -c "$1"
}

# The readiness probe's one query (one connection, see above): whether
# postgres is in recovery, its WAL receiver's status, how far replay is
# behind what it received, whether replay is paused, and on a primary the
# timeline it writes (lib.sh SQL_WAL_TIMELINE), for the fence.
SQL_READY="SELECT pg_is_in_recovery(), coalesce(r.status, 'none'),
		coalesce(pg_wal_lsn_diff(r.latest_end_lsn, pg_last_wal_replay_lsn())::bigint, -1),
		CASE WHEN pg_is_in_recovery() THEN pg_get_wal_replay_pause_state() ELSE 'not paused' END,
		CASE WHEN pg_is_in_recovery() THEN 0 ELSE $SQL_WAL_TIMELINE END
	FROM (SELECT 1) one LEFT JOIN pg_stat_wal_receiver r ON true"

# When the readiness probe last saw this standby's replay paused; the
# liveness probe asks why (standby_needs_restart) only then, instead of a
# query every 4 s on every standby.
PAUSED_FILE="$STATE_DIR/database-replay-paused"

# standby_fresh: 0 for a primary, or a standby that replicated within the last
# READY_GRACE_SECONDS. The grace is deliberate: a primary restarting for a
# settings change or a minor roll (seconds) should not take every standby out
# of the read Service at once; a primary gone longer, a dropped slot or a
# primary of another cluster (the sidecar then has it cloned again) do. A new
# container (entrypoint.sh removes the mark) is not ready until it has caught
# up and streams once: a fresh clone never serves before. Reads the fields of
# SQL_READY's row (recovery, status, lag, paused).
standby_fresh() {
	local now last=0
	[[ $recovery == t ]] || return 0
	now=$(printf '%(%s)T' -1)
	if [[ $status == streaming && $paused == 'not paused' ]] && ((lag >= 0 && lag <= READY_MAX_LAG_BYTES)); then
		printf '%s\n' "$now" >"$STREAMED_FILE"
		return 0
	fi
	{ read -r last <"$STREAMED_FILE"; } 2>/dev/null || true
	[[ $last =~ ^[0-9]+$ ]] || last=0
	if ((last > 0 && now - last <= READY_GRACE_SECONDS)); then
		echo "standby: WAL receiver $status, replay $paused, $lag bytes behind; ready for $((READY_GRACE_SECONDS - (now - last)))s more (grace)" >&2
		return 0
	fi
	echo "not ready: standby not replicating (WAL receiver $status, replay $paused, $lag bytes behind the primary, bound $READY_MAX_LAG_BYTES) for more than ${READY_GRACE_SECONDS}s or since start" >&2
	return 1
}

# named_standby: 0 when this instance is a standby that the function has
# named the primary (SCRIPTS_DIR/primary) for more than NAMED_STANDBY_SECONDS
# (default 120): the ConfigMap's primary key was edited to a standby's
# ordinal, so the rw Service sends every new connection here, where writes
# fail. Not ready, it makes the function start the failover Job, which finds
# the real primary and promotes nothing (failover.sh
# report_existing_primary: found). Ready meanwhile, it could stream from
# itself through that Service and nothing would ever move. The delay covers
# a real failover: the ConfigMap volume names the old primary for a minute
# or so after it rejoined as a standby.
named_standby() {
	local f=$STATE_DIR/database-named-standby since='' now
	if [[ -z ${PGDATA:-} || ! -f $PGDATA/standby.signal || -z ${SCRIPTS_DIR:-} || -z ${POD_NAME:-} ]] ||
		(($(pod_ordinal) != $(current_primary))); then
		rm -f "$f"
		return 1
	fi
	now=$(printf '%(%s)T' -1)
	[[ -r $f ]] && since=$(<"$f")
	if ! [[ $since =~ ^[0-9]+$ ]]; then
		since=$now
		printf '%s\n' "$now" >"$f"
	fi
	((now - since >= NAMED_STANDBY_SECONDS)) || return 1
	echo "not ready: a standby named the primary (key primary of the scripts ConfigMap: ordinal $(current_primary)) for $((now - since))s: the key was edited? The failover Job finds the real primary" >&2
	return 0
}

# fenced: 0 when this instance is a primary and a peer is a primary on a
# newer timeline (lib.sh newer_primary_peer); it then stops postgres
# (immediate: a clean shutdown would let its clients write on), and the
# restarted container rejoins as a standby (entrypoint.sh). Reads SQL_READY's
# recovery and timeline.
fenced() {
	local newer
	[[ -n ${PGDATA:-} && -n ${SCRIPTS_DIR:-} && $recovery == f && $timeline =~ ^[0-9]+$ ]] || return 1
	newer=$(newer_primary_peer "$timeline") || return 1
	echo "not ready: FENCED: $newer while this primary is on timeline $timeline: a failover replaced it; stopping postgres" >&2
	pg_ctl -D "$PGDATA" -m immediate stop >/dev/null 2>&1 || true
	return 0
}

# standby_needs_restart: 0 when this standby's replay paused because the
# primary's WAL needs a setting higher than this standby's own (PostgreSQL
# pauses instead of aborting, then waits forever): its control file already
# holds the primary's values, which the next start takes.
standby_needs_restart() {
	local row controldata name label have current
	[[ -n ${PGDATA:-} && -f $PGDATA/standby.signal ]] || return 1
	row=$(sql "SELECT CASE WHEN pg_is_in_recovery() THEN pg_get_wal_replay_pause_state() <> 'not paused' ELSE false END") || return 1
	[[ $row == t ]] || return 1
	controldata=$(LC_ALL=C pg_controldata "$PGDATA") || return 1
	for name in max_connections max_worker_processes max_wal_senders max_prepared_transactions max_locks_per_transaction; do
		case $name in
		max_prepared_transactions) label='max_prepared_xacts setting' ;;
		max_locks_per_transaction) label='max_locks_per_xact setting' ;;
		*) label="$name setting" ;;
		esac
		have=$(sed -n "s/^$label: *//p" <<<"$controldata")
		current=$(sql "SHOW $name") || return 1
		if [[ $have =~ ^[0-9]+$ && $current =~ ^[0-9]+$ ]] && ((have > current)); then
			echo "not live: replay paused: the primary runs with $name = $have, this standby with $current; restarting to take the primary's value" >&2
			return 0
		fi
	done
	return 1
}

state=none
{ read -r state <"$STATE_FILE"; } 2>/dev/null || true

case $mode in
ready)
	if [[ $state != running ]]; then
		echo "not ready: state ${state:-none}" >&2
		exit 1
	fi
	rc=0
	row=$(sql "$SQL_READY") || rc=$?
	if ((rc != 0)) || [[ -z $row ]]; then
		echo "not ready: postgres is not accepting connections or cannot be queried (psql exit $rc)" >&2
		exit 1
	fi
	IFS='|' read -r recovery status lag paused timeline <<<"$row"
	if [[ $recovery == t && $paused != 'not paused' ]]; then
		[[ -e $PAUSED_FILE ]] || : >"$PAUSED_FILE"
	elif [[ -e $PAUSED_FILE ]]; then
		rm -f "$PAUSED_FILE"
	fi
	standby_fresh || exit 1
	! named_standby || exit 1
	! fenced || exit 1
	;;
live)
	case $state in
	starting | initializing | cloning | hold) exit 0 ;;
	esac
	if [[ -n ${PGDATA:-} && -f $PGDATA/database.reclone ]]; then
		echo "not live: this standby cannot replicate any more ($(<"$PGDATA/database.reclone")); restarting to clone it again" >&2
		exit 1
	fi
	# pg_isready: 0 accepting, 1 rejecting (starting up / recovery), 2 no
	# response, 3 no attempt.
	rc=0
	pg_isready -q -t 3 -h "$PGHOST" -p "$PGPORT" -U "$user" -d postgres || rc=$?
	if ((rc > 1)); then
		echo "not live: postgres does not answer (pg_isready exit $rc, state $state)" >&2
		exit 1
	fi
	# Why replay paused is asked only once the readiness probe saw it
	# paused (PAUSED_FILE): one query fewer every 4 s on every standby.
	if ((rc == 0)) && [[ -e $PAUSED_FILE ]] && standby_needs_restart; then
		exit 1
	fi
	;;
esac
exit 0
