#!/usr/bin/env bash
# restore.sh: the restore Job's container.
#
# Restores one backup (see backup.sh) of Database RESTORE_SOURCE from
# RESTORE_DIR into database DB_NAME of the server at PGHOST:PGPORT:
#   1. wait (bounded) until the server accepts our connections;
#   2. pick RESTORE_BACKUP: "latest" = the newest backup whose checksums and
#      table of contents verify (bad ones are skipped, saying why), or an
#      explicit name (D-T, D-T.dump, ...), which must verify;
#   3. refuse (exit 3, nothing changed) if DB_NAME already holds a user table;
#      a backup that is not there or does not verify exits 4 (nothing
#      changed): the Job's podFailurePolicy fails at once on 3 and 4, which
#      no retry of the same run can change;
#   4. pg_restore --no-owner --role=APP_USER in one transaction, exit on error;
#   5. print one final line "restore: SUCCESS ..." (also the container's
#      termination message when /dev/termination-log is writable).
# A database restored by this script is marked (database comment); a retried
# Job pod that finds its own mark exits 0 instead of refusing.
#
# Environment: PGHOST PGPORT PGUSER PGPASSWORD (libpq; PGUSER a superuser),
# DB_NAME, APP_USER, RESTORE_DIR, RESTORE_BACKUP (default latest),
# RESTORE_SOURCE (file prefix; empty: any); optional RESTORE_WAIT_SECONDS
# (default 600), RETRY_INTERVAL (default 5), TERMINATION_LOG
# (default /dev/termination-log).
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
LOG_TAG=restore

require_env PGHOST DB_NAME APP_USER RESTORE_DIR
RESTORE_BACKUP=${RESTORE_BACKUP:-latest}
RESTORE_SOURCE=${RESTORE_SOURCE:-}
RESTORE_WAIT_SECONDS=${RESTORE_WAIT_SECONDS:-600}
require_int RESTORE_WAIT_SECONDS 0
RETRY_INTERVAL=${RETRY_INTERVAL:-5}
require_int RETRY_INTERVAL 1
TERMINATION_LOG=${TERMINATION_LOG:-/dev/termination-log}
MARK_PREFIX='function-database restore:'
started=$SECONDS

# finish CODE LINE: the final line, on stdout and as termination message.
finish() {
	local code=$1 line="restore: $2"
	printf '%s\n' "$line"
	if [[ -w $TERMINATION_LOG ]]; then
		printf '%s\n' "$line" >"$TERMINATION_LOG" || true
	fi
	exit "$code"
}

fail() {
	log "ERROR: $1"
	finish "${2:-1}" "FAILED: $1"
}

[[ -d $RESTORE_DIR ]] || fail "RESTORE_DIR $RESTORE_DIR is not a directory"

# psql_db SQL: one query in DB_NAME, unaligned tuples.
psql_db() {
	psql -X -A -t -q -v ON_ERROR_STOP=1 --no-password --dbname="$DB_NAME" -c "$1"
}

# 1. wait for the server
log "waiting up to ${RESTORE_WAIT_SECONDS}s for ${PGHOST}:${PGPORT:-5432} database $DB_NAME"
deadline=$((SECONDS + RESTORE_WAIT_SECONDS))
until psql_db 'SELECT 1' >/dev/null 2>&1; do
	if ((SECONDS >= deadline)); then
		psql_db 'SELECT 1' >/dev/null || true
		fail "database $DB_NAME at ${PGHOST}:${PGPORT:-5432} not reachable after ${RESTORE_WAIT_SECONDS}s" 2
	fi
	sleep "$RETRY_INTERVAL"
done
log "server reachable after $((SECONDS - started))s"

# 2. pick the backup
chosen=''
if [[ $RESTORE_BACKUP == latest ]]; then
	while IFS= read -r b; do
		[[ -n $b ]] || continue
		if verify_backup "$RESTORE_DIR" "$b" && check_dump "$RESTORE_DIR/$b.dump"; then
			chosen=$b
			break
		fi
		log "skipping backup $b: it does not verify"
	done < <(list_backups "$RESTORE_DIR" "$RESTORE_SOURCE")
	[[ -n $chosen ]] || fail "no good backup${RESTORE_SOURCE:+ of $RESTORE_SOURCE} in $RESTORE_DIR" 4
	log "latest good backup: $chosen"
else
	b=${RESTORE_BACKUP%.dump}
	b=${b%.globals.sql}
	b=${b%.sha256}
	[[ $b != */* && $b != .* && -n $b ]] || fail "RESTORE_BACKUP '$RESTORE_BACKUP' is not a backup file name" 4
	[[ -e $RESTORE_DIR/$b.dump ]] || fail "backup $b not found in $RESTORE_DIR" 4
	verify_backup "$RESTORE_DIR" "$b" || fail "backup $b does not verify (checksum mismatch or missing file): refusing to restore it; nothing changed" 4
	check_dump "$RESTORE_DIR/$b.dump" || fail "backup $b: pg_restore cannot read its table of contents; nothing changed" 4
	chosen=$b
fi
dump_sum=$(sha256sum <"$RESTORE_DIR/$chosen.dump" | cut -d' ' -f1)
mark="$MARK_PREFIX $chosen sha256 $dump_sum"

# 3. refuse a database that holds user tables
user_tables_sql="SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE c.relkind IN ('r','p','m','f')
	AND n.nspname NOT IN ('pg_catalog','information_schema') AND n.nspname NOT LIKE 'pg_toast%'"
tables=$(psql_db "$user_tables_sql") || fail "cannot inspect database $DB_NAME"
if ((tables > 0)); then
	comment=$(psql_db "SELECT coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database WHERE datname = current_database()") || comment=''
	if [[ $comment == "$MARK_PREFIX"* ]]; then
		finish 0 "SUCCESS: database $DB_NAME was already restored by an earlier run (${comment#"$MARK_PREFIX" }); nothing to do"
	fi
	example=$(psql_db "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r','p','m','f') AND n.nspname NOT IN ('pg_catalog','information_schema')
		AND n.nspname NOT LIKE 'pg_toast%' ORDER BY 1 LIMIT 1") || example='?'
	fail "REFUSED: database $DB_NAME already holds $tables user table(s) (e.g. $example); a restore never overwrites data; nothing changed" 3
fi

# 4. restore
log "restoring $chosen into database $DB_NAME as role $APP_USER (one transaction)"
t=$SECONDS
pg_restore --no-password --dbname="$DB_NAME" --no-owner --no-privileges --role="$APP_USER" \
	--single-transaction --exit-on-error --no-subscriptions --no-security-labels --no-tablespaces \
	"$RESTORE_DIR/$chosen.dump" ||
	fail "pg_restore of $chosen failed; the transaction was rolled back, database $DB_NAME unchanged"
log "pg_restore done in $((SECONDS - t))s"
{
	psql_set db "$DB_NAME"
	psql_set mark "$mark"
	echo "COMMENT ON DATABASE :\"db\" IS :'mark';"
} | psql -X -q -v ON_ERROR_STOP=1 --no-password --dbname="$DB_NAME" >/dev/null ||
	log "warning: could not mark database $DB_NAME as restored"
tables=$(psql_db "$user_tables_sql") || tables='?'

# 5. the final line
finish 0 "SUCCESS: restored backup $chosen${RESTORE_SOURCE:+ of $RESTORE_SOURCE} (sha256 $dump_sum) into database $DB_NAME: $tables tables in $((SECONDS - started))s"
