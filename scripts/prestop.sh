#!/usr/bin/env bash
# prestop.sh: the postgres container's preStop hook. A primary whose pod is
# being deleted (a drain's eviction, a node's graceful shutdown, a delete)
# keeps serving until a switchover has moved the primary, then lets the
# kubelet stop it (the image's stop signal: a fast shutdown).
#
# Without it the kubelet stops the primary at once and the function can only
# fail over: the failover Job waits out its grace and fence (about 40 s of
# no writes) before it promotes. With it the function sees the primary's pod
# being deleted and composes a switchover Job (failover.sh MODE=switchover,
# reason PrimaryStopping): the old primary is fenced, a standby replays
# everything and is promoted, a write gap of seconds, nothing acknowledged
# lost.
#
# Only when SCRIPTS_DIR/switchover-on-stop is true (failover on, standbys:
# the function switches over). Waits, asking postgres every second, while
# all of these hold: postgres
# answers, it is a primary, and at least one standby streams from it (the
# target streams until its promotion; with none, no switchover can happen,
# and a whole Database being deleted stops its standbys at once). Ends 0
# in every case: at most DRAIN_WAIT_SECONDS, within the pod's grace
# (terminationGracePeriodSeconds 60), so that the fast shutdown that follows
# still has time. A standby returns at once.
#
# Environment (the postgres container's): PGHOST (socket dir), PGPORT,
# SCRIPTS_DIR (the ConfigMap's mount: switchover-on-stop); optional PGDATA (a standby returns at once: standby.signal),
# ADMIN_SECRET_DIR (its username is the role it connects as, else postgres),
# DRAIN_WAIT_SECONDS (default 45), PROBE_QUERY_TIMEOUT (default 3),
# SILENT_LOOKS (default 5: failed queries in a row taken for a postgres that
# stopped answering).
#
# Its lines go to the server's log (RAISE LOG: the container's log), as a
# hook's own output is kept nowhere (the kubelet shows it only when the
# hook fails), and to its stderr.
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
LOG_TAG=prestop

require_env PGHOST PGPORT SCRIPTS_DIR
DRAIN_WAIT_SECONDS=${DRAIN_WAIT_SECONDS:-45}
require_int DRAIN_WAIT_SECONDS 0

# A standby has nothing to hand over; nor a primary no switchover will move.
[[ -n ${PGDATA:-} && -f $PGDATA/standby.signal ]] && exit 0
[[ -r $SCRIPTS_DIR/switchover-on-stop && $(<"$SCRIPTS_DIR/switchover-on-stop") == true ]] || exit 0

user=postgres
if [[ -n ${ADMIN_SECRET_DIR:-} && -r $ADMIN_SECRET_DIR/username ]]; then
	user=$(<"$ADMIN_SECRET_DIR/username")
fi

sql() {
	timeout "${PROBE_QUERY_TIMEOUT:-3}" psql -X -A -t -q -h "$PGHOST" -p "$PGPORT" -U "$user" -d postgres -c "$1"
}

# note MESSAGE: one line in the server's log, and on stderr.
note() {
	log "$*"
	local m=${*//\'/\'\'}
	timeout "${PROBE_QUERY_TIMEOUT:-3}" psql -X -A -t -q -h "$PGHOST" -p "$PGPORT" -U "$user" -d postgres \
		-c "SET prestop.note = 'prestop: $m'" -c "DO 'BEGIN RAISE LOG ''%'', current_setting(''prestop.note''); END'" >/dev/null 2>&1 || true
}

# A query that fails is asked again, up to SILENT_LOOKS times in a row: one
# failure is no answer. The switchover Job ends every client session of the
# primary when it fences it, this hook's own query among them when they
# meet (seen on several real nodes: the hook took the killed query for a
# stopped postgres, let the kubelet stop it under the Job, and the
# switchover became a failover).
SILENT_LOOKS=${SILENT_LOOKS:-5}
require_int SILENT_LOOKS 1
start=$(now_ms) waited='' silent=0
while (($(now_ms) - start < DRAIN_WAIT_SECONDS * 1000)); do
	if ! row=$(sql "SELECT pg_is_in_recovery(), (SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming')"); then
		if ((++silent < SILENT_LOOKS)); then
			sleep 1
			continue
		fi
		row=''
	fi
	silent=0
	IFS='|' read -r recovery streaming <<<"$row"
	if [[ $recovery != f ]]; then
		[[ -z $waited ]] || note "the primary moved (this instance answers ${recovery:-nothing}): stopping"
		exit 0
	fi
	if [[ ! $streaming =~ ^[0-9]+$ ]] || ((streaming == 0)); then
		[[ -z $waited ]] || note "no standby streams any more: stopping"
		exit 0
	fi
	if [[ -z $waited ]]; then
		note "the pod is being deleted: the primary serves on until a switchover moves it (at most ${DRAIN_WAIT_SECONDS}s; $streaming standbys stream)"
		waited=1
	fi
	sleep 1
done
note "no switchover within ${DRAIN_WAIT_SECONDS}s: stopping as the primary (a failover Job promotes a standby)"
