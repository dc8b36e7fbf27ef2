#!/usr/bin/env bash
# archive-check.sh: the WAL archive check CronJob's container (N-wal). Asks
# the primary, through the rw Service, whether its archiver keeps up, and
# ends with the answer: exit 0 when it does, 1 when it does not, so that the
# CronJob's last success and last schedule tell the function (the
# WALArchive condition) whether the archive works, with no clock of its own.
#
# Failing means one of:
#   - the most recent archive attempt failed (pg_stat_archiver's
#     last_failed_time after its last_archived_time): the bucket refuses or
#     cannot be reached, or the keys are wrong;
#   - a segment has waited in pg_wal/archive_status for more than
#     STUCK_SECONDS (the archiver is behind, or hung);
#   - archive_mode is not on (the instance has not restarted with it yet);
#   - the archive has a gap: pgBackRest dropped WAL while the bucket could
#     not be reached (pgbackrest.sh's marker in the primary's PGDATA), and
#     the full backup that starts a new chain is not taken yet.
# It prints the recovery point exposure (how long ago the last segment was
# archived) and the state in one line either way.
#
# Environment: PGHOST PGPORT PGUSER PGPASSWORD (libpq), DB_NAME; optional
# STUCK_SECONDS (default 300), WAIT_SECONDS (default 90: how long a primary
# may take to answer, a failover's length).
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
LOG_TAG=archive-check

require_env PGHOST DB_NAME
STUCK_SECONDS=${STUCK_SECONDS:-300}
require_int STUCK_SECONDS 1
WAIT_SECONDS=${WAIT_SECONDS:-90}
require_int WAIT_SECONDS 0

# One row: archive_mode|in recovery|seconds since the last archived
# segment (empty: none yet)|the last archived one|failed after it (t/f)|the
# last failed one|segments waiting|the oldest waiting one's age in seconds.
sql="SELECT current_setting('archive_mode'), pg_is_in_recovery(),
	(SELECT round(extract(epoch FROM now() - last_archived_time))::bigint FROM pg_stat_archiver),
	(SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver),
	(SELECT coalesce(last_failed_time > coalesce(last_archived_time, '-infinity'), false) FROM pg_stat_archiver),
	(SELECT coalesce(last_failed_wal, '') FROM pg_stat_archiver),
	(SELECT count(*) FROM pg_ls_archive_statusdir() WHERE name LIKE '%.ready'),
	(SELECT coalesce(round(extract(epoch FROM now() - min(modification)))::bigint, 0) FROM pg_ls_archive_statusdir() WHERE name LIKE '%.ready'),
	coalesce(pg_read_file('database.archive-gap', 0, 8192, true), '')"
# A failover under way (the rw Service without a primary for 30-60 s) is no
# archive failure: wait WAIT_SECONDS for a primary to answer first.
waited=0 recovery=''
while :; do
	if row=$(psql -X -A -t -q -v ON_ERROR_STOP=1 -d "$DB_NAME" -c "$sql" 2>&1); then
		IFS='|' read -r mode recovery age last failing last_failed waiting oldest gap <<<"$row"
		[[ $recovery != f ]] || break
	fi
	if ((waited >= WAIT_SECONDS)); then
		die "no primary answered at ${PGHOST}:${PGPORT:-5432} for ${WAIT_SECONDS}s (last answer: ${row:-none}): nothing is archived without one"
	fi
	sleep 5
	waited=$((waited + 5))
done
state="last archived ${last:-none} ${age:-never}s ago; ${waiting} segment(s) waiting, the oldest ${oldest}s"
if [[ $mode != on ]]; then
	die "archive_mode is $mode on the primary: it archives nothing until it restarts with the function's settings"
fi
if [[ -n ${gap//[[:space:]]/} ]]; then
	read -r -a dropped <<<"${gap//$'\n'/ }"
	die "the archive has a gap: ${#dropped[@]} WAL segment(s) dropped (${dropped[0]} .. ${dropped[-1]}) while the bucket could not be reached (pgBackRest's queue was full); a restore reaches only the point before them until the full backup the primary's sidecar takes once the bucket answers; $state"
fi
if [[ $failing == t ]]; then
	die "archiving fails: the last attempt ($last_failed) failed after the last success; $state (the primary's log has pgBackRest's error)"
fi
if ((oldest > STUCK_SECONDS)); then
	die "archiving is behind: a segment has waited ${oldest}s (over ${STUCK_SECONDS}s); $state"
fi
log "the archive keeps up: $state"
