#!/usr/bin/env bash
# drill.sh: the restore drill CronJob's container (N-drill). Proves that the
# Database's archive restores, the way a restore after losing every instance
# would use it:
#   1. the newest backup in its pgBackRest repository is restored into this
#      pod's own volume (pgBackRest checks every file against the backup's
#      manifest as it restores);
#   2. the copy replays the archive to its end and promotes, started with no
#      network, no archive of its own (it never writes to the repository)
#      and no hot standby (it needs no settings as large as the primary's);
#   3. pg_amcheck checks every table and B-tree index of every database
#      (the pages' checksums are verified as they are read), then every row
#      of every user table is read into a checksum;
#   4. the replay must have reached the last segment the archive held when the
#      drill started: stopping before it means a gap in the archive (a
#      segment missing), and a restore to the latest point would stop there;
#   5. the copy is stopped; the volume goes with the pod.
# The verdict is one JSON line in the termination message, which the function
# reads into the BackupVerified condition:
#   {"result":"verified","backup":LABEL,"restoredTo":RFC3339,"restoreSeconds":N,
#    "recoverySeconds":N,"seconds":N,"tables":N,"rows":N,"checksum":HEX}  exit 0
#   {"result":"nobackup"}  exit 0: the repository has no backup yet
#   {"result":"failed","backup":LABEL,"reason":TEXT}  exit 1
# restoredTo is the commit time of the last transaction replayed: how far
# the archive reaches (empty when the backup is newer than every commit).
#
# Environment: PGDATA (the copy's data directory, on the drill's own volume,
# where pgbackrest.conf's pg1-path points), PGHOST (a socket directory) and
# PGPORT, PGUSER (the superuser's name), OBJECT_STORAGE_DIR and SCRIPTS_DIR
# (as pgbackrest.sh reads them); optional RECOVERY_TIMEOUT_SECONDS (default
# 3600: how long the replay may take), TERMINATION_LOG (default
# /dev/termination-log).
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
LOG_TAG=drill

require_env PGDATA PGHOST PGPORT PGUSER OBJECT_STORAGE_DIR
RECOVERY_TIMEOUT_SECONDS=${RECOVERY_TIMEOUT_SECONDS:-3600}
require_int RECOVERY_TIMEOUT_SECONDS 10
TERMINATION_LOG=${TERMINATION_LOG:-/dev/termination-log}

label=''
# verdict JSON: the outcome, for the function (termination message) and the log.
verdict() {
	printf '%s\n' "$1" >"$TERMINATION_LOG" 2>/dev/null || true
	printf '%s\n' "$1"
}

# fail REASON...: the drill failed; the copy is stopped.
fail() {
	log "ERROR: $*"
	stop_copy
	verdict "{\"result\":\"failed\",\"backup\":\"$label\",\"reason\":\"$(json_escape "$*")\"}"
	exit 1
}

stop_copy() {
	if [[ -f $PGDATA/postmaster.pid ]]; then
		pg_ctl -D "$PGDATA" -m immediate -w stop >/dev/null 2>&1 || true
	fi
}
trap 'fail "drill.sh failed (its log above says why)"' ERR

started=$(now_ms)
backrest() { bash "$here/pgbackrest.sh" "$@"; }

# 1. The newest backup, by its label (pgBackRest lists them oldest first).
if ! info=$(backrest info 2>&1); then
	fail "pgbackrest info failed: $info"
fi
label=$(awk '/^ *(full|diff|incr) backup: /{l=$3} END{print l}' <<<"$info")
if [[ -z $label ]]; then
	log "the repository has no backup yet: nothing to verify ($info)"
	verdict '{"result":"nobackup"}'
	exit 0
fi
# The last archived segment now: the replay must reach it.
archive_max=$(archive_max "$info")
# The copy's own data directory for pgBackRest (restore_command's paths).
export PGBACKREST_PG1_PATH=$PGDATA
log "restoring backup $label into $PGDATA"
wipe_dir "$PGDATA"
if ! out=$(backrest --log-level-console=warn restore --set="$label" --pg1-path="$PGDATA" --archive-mode=off \
	"--recovery-option=restore_command=bash $here/pgbackrest.sh get %f \"%p\"" 2>&1); then
	fail "pgBackRest could not restore backup $label: $(tail -n 5 <<<"$out" | tr '\n' ' ')"
fi
restored=$(now_ms)

# 2. Replay to the archive's end. With hot_standby off the copy refuses
# connections until it has replayed everything and promoted; a replay that
# cannot reach a consistent state stops postgres.
mkdir -p "$PGHOST"
printf 'local all all trust\n' >"$PGHOST/drill_hba.conf"
: >"$PGHOST/drill_ident.conf"
if ! out=$(pg_ctl -D "$PGDATA" -w -t 60 -l "$PGHOST/drill-postgres.log" \
	-o "-c listen_addresses='' -c port=$PGPORT -c unix_socket_directories='$PGHOST' -c hba_file='$PGHOST/drill_hba.conf' -c ident_file='$PGHOST/drill_ident.conf' -c archive_mode=off -c hot_standby=off -c synchronous_standby_names='' -c shared_buffers=128MB -c max_connections=20 -c cluster_name=drill" \
	start 2>&1); then
	fail "the restored copy of $label did not start: $(tail -n 8 "$PGHOST/drill-postgres.log" 2>/dev/null | tr '\n' ' ')"
fi
q() { psql -X -A -t -q -v ON_ERROR_STOP=1 -d "${2:-postgres}" -c "$1"; }
deadline=$(($(now_ms) + RECOVERY_TIMEOUT_SECONDS * 1000))
until q "SELECT 1" >/dev/null 2>&1; do
	if ! pg_ctl -D "$PGDATA" status >/dev/null 2>&1; then
		fail "the restored copy of $label stopped while replaying the archive: $(tail -n 8 "$PGHOST/drill-postgres.log" 2>/dev/null | tr '\n' ' ')"
	fi
	if (($(now_ms) > deadline)); then
		fail "the restored copy of $label replayed for over ${RECOVERY_TIMEOUT_SECONDS}s without reaching the archive's end"
	fi
	sleep 1
done
recovered=$(now_ms)
restored_to=$(q "SELECT coalesce(to_char(pg_last_xact_replay_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '')")
end_segment=$(q "SELECT pg_walfile_name(pg_current_wal_lsn())")
log "backup $label restored, replayed to ${restored_to:-its own end} (segment $end_segment; the archive held up to ${archive_max:-none}) and promoted"
if [[ -n $archive_max ]] && segment_before "$end_segment" "$archive_max"; then
	fail "the archive has a gap: the replay of backup $label stopped in segment $end_segment, but the archive holds segments up to $archive_max (one in between is missing); a restore to the latest point would stop there too"
fi

# 3. Every relation checked, every row read.
if ! out=$(pg_amcheck --all --install-missing --no-strict-names 2>&1); then
	fail "pg_amcheck found corruption in the copy of $label: $(head -n 5 <<<"$out" | tr '\n' ' ')"
fi
dbs=$(q "SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate AND datname <> 'postgres' ORDER BY datname")
tables=0 rows=0 sums=''
for d in $dbs; do
	# One line per user table: its name, its rows, the sum of its rows' hashes.
	out=$(psql -X -A -t -q -v ON_ERROR_STOP=1 -d "$d" <<-'SQL'
		SELECT format('SELECT %L, count(*), coalesce(sum(hashtextextended(t::text, 0)), 0) FROM %s t', c.oid::regclass::text, c.oid::regclass)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
		ORDER BY 1
		\gexec
	SQL
	) || fail "reading the tables of database $d in the copy of $label failed: $out"
	# Read from the right: a table's name may hold a '|'.
	while IFS= read -r line; do
		[[ $line =~ \|([0-9]+)\|-?[0-9]+$ ]] || continue
		tables=$((tables + 1))
		rows=$((rows + BASH_REMATCH[1]))
	done <<<"$out"
	sums+="$d"$'\n'"$out"$'\n'
done
checksum=$(md5sum <<<"$sums")
checksum=${checksum%% *}
stop_copy
done_at=$(now_ms)
secs() { printf '%d.%03d' "$(($1 / 1000))" "$(($1 % 1000))"; }
log "backup $label verified: restored in $(secs $((restored - started))) s, recovered in $(secs $((recovered - restored))) s, $tables tables and $rows rows read"
verdict "{\"result\":\"verified\",\"backup\":\"$label\",\"restoredTo\":\"$restored_to\",\"restoreSeconds\":$(secs $((restored - started))),\"recoverySeconds\":$(secs $((recovered - restored))),\"seconds\":$(secs $((done_at - started))),\"tables\":$tables,\"rows\":$rows,\"checksum\":\"$checksum\"}"
