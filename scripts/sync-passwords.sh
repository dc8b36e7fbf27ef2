#!/usr/bin/env bash
# sync-passwords.sh: the password-sync sidecar of every StatefulSet pod.
#
# The Secrets are the source of truth for passwords. Every SYNC_INTERVAL
# seconds (default 5):
#   primary (ordinal 0, not in recovery): when the content of the mounted
#     secret files changed since the last successful apply, or postgres was
#     restarted since, ALTER ROLE ... PASSWORD for the app role, the
#     replication role and the superuser, over the socket (peer).
#   standby: refreshes its local replication passfile (used by its
#     walreceiver to reconnect); and every SLOT_CHECK_ROUNDS rounds (default
#     6) checks that the primary still holds the WAL it needs (check_lost_slot).
#   any instance: reloads the configuration when the function's
#     postgresql.conf changed (reload_settings).
# Safe while postgres is not up yet: it just tries again next round.
# Passwords go to psql on stdin (psql variables, :'pw' quoting): never in
# process arguments, never in logs (the session turns statement logging off).
#
# Environment: POD_NAME PGHOST PGPORT PGDATA APP_USER APP_SECRET_DIR
# ADMIN_SECRET_DIR; optional SYNC_INTERVAL (default 5), SYNC_ONCE (1: one round,
# then exit with its status; for tests and debugging), PRIMARY_HOST and
# PRIMARY_PORT (default 5432; standbys), SLOT_CHECK_ROUNDS (default 6),
# STATE_DIR (default /tmp, as entrypoint.sh).
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
LOG_TAG=sync-passwords

require_env POD_NAME PGHOST PGPORT PGDATA APP_USER APP_SECRET_DIR ADMIN_SECRET_DIR
SYNC_INTERVAL=${SYNC_INTERVAL:-5}
require_int SYNC_INTERVAL 1
SLOT_CHECK_ROUNDS=${SLOT_CHECK_ROUNDS:-6}
require_int SLOT_CHECK_ROUNDS 1
PRIMARY_HOST=${PRIMARY_HOST:-}
PRIMARY_PORT=${PRIMARY_PORT:-5432}
require_int PRIMARY_PORT 1
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

# secrets_checksum: one checksum over the secret files' content (sha256sum
# reads the files itself: only their paths are arguments).
secrets_checksum() {
	local sums
	sums=$(sha256sum "${secret_files[@]}" 2>/dev/null) || return 1
	sha256sum <<<"$sums" | cut -d' ' -f1
}

sync_sql() {
	local su su_pw repl repl_pw app_pw
	read_file_into su "$ADMIN_SECRET_DIR/username" || return 1
	read_file_into su_pw "$ADMIN_SECRET_DIR/password" || return 1
	read_file_into repl "$ADMIN_SECRET_DIR/replication-username" || return 1
	read_file_into repl_pw "$ADMIN_SECRET_DIR/replication-password" || return 1
	read_file_into app_pw "$APP_SECRET_DIR/password" || return 1
	psql_set su "$su"
	psql_set su_pw "$su_pw"
	psql_set repl "$repl"
	psql_set repl_pw "$repl_pw"
	psql_set app "$APP_USER"
	psql_set app_pw "$app_pw"
	cat <<-'SQL'
		SET log_statement = 'none';
		SET log_min_error_statement = 'panic';
		BEGIN;
		ALTER ROLE :"app" WITH PASSWORD :'app_pw';
		ALTER ROLE :"repl" WITH PASSWORD :'repl_pw';
		ALTER ROLE :"su" WITH PASSWORD :'su_pw';
		COMMIT;
	SQL
}

# check_lost_slot (standby): a standby that was down while the primary wrote
# more WAL than max_slot_wal_keep_size finds its slot invalidated and the WAL
# it needs removed: it can never catch up, yet it keeps serving stale reads.
# Only when the primary itself reports the slot lost, and this standby is in
# recovery and not streaming, does it turn the clone into an unfinished one
# (clone marker removed, reason in database.reclone): the liveness probe then
# restarts the postgres container, and entrypoint.sh wipes and clones it
# again. A primary that does not answer changes nothing.
check_lost_slot() {
	local su su_pw here_state slot wal_status passfile
	[[ -n $PRIMARY_HOST && -f $CLONE_MARKER ]] || return 0
	read_file_into su "$ADMIN_SECRET_DIR/username" || return 1
	read_file_into su_pw "$ADMIN_SECRET_DIR/password" || return 1
	here_state=$(psql -X -A -t -q -h "$PGHOST" -p "$PGPORT" -U "$su" -d postgres -c \
		"SELECT pg_is_in_recovery()::text || '|' || coalesce((SELECT status FROM pg_stat_wal_receiver), 'none')" 2>/dev/null) || return 1
	[[ $here_state == true\|* && $here_state != *\|streaming ]] || return 0
	passfile="$STATE_DIR/superuser.pgpass"
	mkdir -p "$STATE_DIR"
	write_passfile "$passfile" "$su" "$su_pw"
	slot=$(slot_name)
	wal_status=$(psql -X -A -t -q -v slot="$slot" \
		-d "host=$(conninfo_quote "$PRIMARY_HOST") port=$PRIMARY_PORT user=$(conninfo_quote "$su") dbname=postgres passfile=$(conninfo_quote "$passfile") connect_timeout=5" \
		<<<"SELECT wal_status FROM pg_replication_slots WHERE slot_name = :'slot'" 2>/dev/null) || return 1
	[[ $wal_status == lost ]] || return 0
	log "standby: the primary invalidated slot $slot (WAL this standby needs is gone; it is ${here_state#*|} and can never catch up): marking the clone unfinished, to be wiped and cloned again at the next container start"
	printf '%s slot %s lost on %s:%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$slot" "$PRIMARY_HOST" "$PRIMARY_PORT" >"$RECLONE_MARKER"
	rm -f "$CLONE_MARKER"
	sync "$PGDATA"
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
	local sum su status in_recovery started key
	sum=$(secrets_checksum) || {
		say_once "secret files not readable yet"
		return 1
	}
	if ((ordinal != 0)); then
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
	read_file_into su "$ADMIN_SECRET_DIR/username" || return 1
	status=$(psql -X -A -t -q -h "$PGHOST" -p "$PGPORT" -U "$su" -d postgres \
		-c "SELECT pg_is_in_recovery(), pg_postmaster_start_time()" 2>/dev/null) || {
		say_once "postgres is not accepting connections yet; retrying every ${SYNC_INTERVAL}s"
		return 1
	}
	in_recovery=${status%%|*}
	started=${status#*|}
	if [[ $in_recovery == t ]]; then
		say_once "postgres is in recovery (standby): nothing to do"
		return 0
	fi
	key="$sum|$started"
	[[ $applied != "$key" ]] || return 0
	if ! sync_sql | psql -X -q -v ON_ERROR_STOP=1 -h "$PGHOST" -p "$PGPORT" -U "$su" -d postgres >/dev/null; then
		say_once "applying the passwords failed; retrying every ${SYNC_INTERVAL}s"
		return 1
	fi
	applied=$key
	waiting=''
	log "passwords applied from the secrets (checksum ${sum:0:12}) for roles $APP_USER, replication and superuser"
}

# reload_settings: the function's postgresql.conf (in the scripts ConfigMap,
# included last by database.conf) changes without a pod restart when only
# settings PostgreSQL can reload changed (the pods' config hash covers the
# others): when its checksum differs from the one last loaded (or at the
# sidecar's start), SELECT pg_reload_conf(). Until postgres answers, it tries
# again next round.
settings_loaded='' # checksum of the settings file last reloaded
reload_settings() {
	local sum su
	sum=$(sha256sum "${SCRIPTS_DIR:-$here}/postgresql.conf" 2>/dev/null) || return 0
	[[ $settings_loaded != "${sum%% *}" ]] || return 0
	read_file_into su "$ADMIN_SECRET_DIR/username" || return 1
	psql -X -A -t -q -h "$PGHOST" -p "$PGPORT" -U "$su" -d postgres -c "SELECT pg_reload_conf()" >/dev/null 2>&1 || return 1
	[[ -z $settings_loaded ]] || log "settings file changed (checksum ${sum:0:12}): configuration reloaded"
	settings_loaded=${sum%% *}
}

round=0 # rounds done; the first one checks the slot
if [[ ${SYNC_ONCE:-} == 1 ]]; then
	reload_settings || true
	sync_round
	exit
fi

trap 'log "terminated"; exit 0' TERM INT
log "watching the secret files every ${SYNC_INTERVAL}s (ordinal $ordinal)"
while :; do
	sync_round || true
	reload_settings || true
	round=$((round + 1))
	sleep "$SYNC_INTERVAL" &
	wait $! || true
done
