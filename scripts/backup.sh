#!/usr/bin/env bash
# backup.sh: the backup CronJob's container.
#
# Writes one backup of database DB_NAME into BACKUP_DIR:
#   $DATABASE-YYYYmmddTHHMMSSZ.dump         pg_dump -Fc
#   $DATABASE-YYYYmmddTHHMMSSZ.globals.sql  pg_dumpall --globals-only (roles;
#                                           no role passwords: the Secrets are
#                                           the source of truth)
#   $DATABASE-YYYYmmddTHHMMSSZ.sha256       checksums of both, written last
# Everything is first written into a hidden temporary directory in BACKUP_DIR,
# verified (pg_restore --list and a full read of the archive), fsynced,
# checksummed, then renamed to the final names, and the directory pruned: the
# BACKUP_RETENTION newest GOOD backups stay, everything else of this Database
# goes (a backup that does not verify never counts and is removed).
# Before the dump, once the server answers (a run that cannot back up removes
# nothing), a lowered BACKUP_RETENTION is applied at once, and when the free
# space is short of the last good backup's size times 1.5 (the new one's
# estimate), the oldest good backups go until it is not, down to
# BACKUP_RETENTION - 1 and never below one: otherwise a volume filled by
# BACKUP_RETENTION backups would fail every later run for good. A run that
# still fails (ENOSPC included) exits non-zero, removes its own files and says
# how much space was free.
#
# Environment: PGHOST PGPORT PGUSER PGPASSWORD (libpq), DB_NAME, BACKUP_DIR,
# BACKUP_RETENTION (>= 1), DATABASE (the Database's name, file prefix);
# optional BACKUP_WAIT_SECONDS (default 120), LOCK_WAIT_TIMEOUT (pg_dump
# --lock-wait-timeout, default 5min).
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
LOG_TAG=backup

require_env PGHOST DB_NAME BACKUP_DIR BACKUP_RETENTION DATABASE
require_int BACKUP_RETENTION 1
[[ $DATABASE =~ ^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$ ]] || die "DATABASE '$DATABASE' is not a Kubernetes object name"
[[ -d $BACKUP_DIR && -w $BACKUP_DIR ]] || die "BACKUP_DIR $BACKUP_DIR is not a writable directory"
umask 077
started=$SECONDS

# One backup at a time per directory (the CronJob forbids concurrency, but a
# Job created by hand from it does not).
if command -v flock >/dev/null; then
	exec 9>"$BACKUP_DIR/.backup.lock"
	flock -n 9 || die "another backup is running in $BACKUP_DIR"
fi

# Temporary directories of runs that died (the lock is ours, so none is live).
for stale in "$BACKUP_DIR"/.partial-*; do
	[[ -e $stale ]] || continue
	log "removing the leftovers of an interrupted run: ${stale##*/}"
	rm -rf -- "$stale"
done

# A name sortable by time; never reuse an existing one.
for _ in 1 2 3 4 5; do
	base="$DATABASE-$(utc_stamp)"
	[[ -e $BACKUP_DIR/$base.dump || -e $BACKUP_DIR/$base.globals.sql || -e $BACKUP_DIR/$base.sha256 ]] || break
	sleep 1
done
[[ ! -e $BACKUP_DIR/$base.dump && ! -e $BACKUP_DIR/$base.globals.sql && ! -e $BACKUP_DIR/$base.sha256 ]] ||
	die "backup name $base is taken"

# free_bytes: space available to this user in BACKUP_DIR.
free_bytes() {
	local avail bsize
	read -r avail bsize < <(stat -f -c '%a %S' "$BACKUP_DIR") || return 1
	printf '%d\n' "$((avail * bsize))"
}

# backup_bytes BASE: the size of a backup's files.
backup_bytes() {
	local total=0 f
	for f in "$BACKUP_DIR/$1".{dump,globals.sql,sha256}; do
		[[ -f $f ]] && total=$((total + $(stat -c %s "$f")))
	done
	printf '%d\n' "$total"
}

remove_backup() {
	rm -f -- "$BACKUP_DIR/$1.sha256" "$BACKUP_DIR/$1.dump" "$BACKUP_DIR/$1.globals.sql"
}

# The server must answer before anything is removed. A new pod's first
# connections can be refused for a moment (the NetworkPolicy enforcer has not
# yet admitted its address; the primary is restarting in a roll): a bounded
# wait (BACKUP_WAIT_SECONDS, default 120) before giving up, well inside the
# Job's deadline.
BACKUP_WAIT_SECONDS=${BACKUP_WAIT_SECONDS:-120}
require_int BACKUP_WAIT_SECONDS 0
log "step 0/7 room: checking that database $DB_NAME answers on ${PGHOST}:${PGPORT:-5432}"
waited=$SECONDS
until psql -X -q -A -t --no-password --dbname="$DB_NAME" -c 'SELECT 1' >/dev/null; do
	((SECONDS - waited < BACKUP_WAIT_SECONDS)) ||
		die "database $DB_NAME does not answer after ${BACKUP_WAIT_SECONDS}s: nothing removed, no backup"
	sleep 2
done

# Good backups, newest first; bad ones removed (they never count).
good_before=()
while IFS= read -r b; do
	[[ -n $b ]] || continue
	if verify_backup "$BACKUP_DIR" "$b"; then
		good_before+=("$b")
	else
		remove_backup "$b"
		log "step 0/7 room: removed $b: not a good backup (never counted)"
	fi
done < <(list_backups "$BACKUP_DIR" "$DATABASE")
# A lowered retention applies now, not after a dump that may not fit.
while ((${#good_before[@]} > BACKUP_RETENTION)); do
	b=${good_before[-1]}
	remove_backup "$b"
	unset 'good_before[-1]'
	log "step 0/7 room: removed $b: beyond the retention of $BACKUP_RETENTION"
done
# Room for the new one: estimated at 1.5 times the newest good backup.
if ((${#good_before[@]} > 0)); then
	need=$(($(backup_bytes "${good_before[0]}") * 3 / 2))
	floor=$((BACKUP_RETENTION - 1))
	((floor >= 1)) || floor=1
	free=$(free_bytes)
	while ((free < need && ${#good_before[@]} > floor)); do
		b=${good_before[-1]}
		remove_backup "$b"
		unset 'good_before[-1]'
		log "step 0/7 room: removed the oldest good backup $b to make room: $free bytes free, the new backup needs about $need (keeping at least $floor)"
		free=$(free_bytes)
	done
	if ((free < need)); then
		log "step 0/7 room: WARNING: $free bytes free, the new backup needs about $need; $floor good backup(s) kept; trying anyway"
	else
		log "step 0/7 room: $free bytes free, the new backup needs about $need"
	fi
	sync "$BACKUP_DIR"
fi

tmp="$BACKUP_DIR/.partial-$base"
placed=()
done_ok=0
cleanup() {
	if ((done_ok == 0)); then
		rm -rf -- "$tmp"
		local f
		for f in "${placed[@]}"; do rm -f -- "$f"; done
		log "FAILED after $((SECONDS - started))s: no new backup, this run's files removed; $(free_bytes || echo '?') bytes free in $BACKUP_DIR (a full volume: lower spec.backup.retention or grow the backups volume)"
	fi
}
trap cleanup EXIT
# A deleted Job pod gets SIGTERM: clean up as on any failure.
trap 'exit 143' TERM INT
mkdir "$tmp"

log "step 1/7 dump: pg_dump -Fc of database $DB_NAME from ${PGHOST}:${PGPORT:-5432} as $base"
t=$SECONDS
pg_dump --format=custom --no-password --lock-wait-timeout="${LOCK_WAIT_TIMEOUT:-5min}" --dbname="$DB_NAME" --file="$tmp/$base.dump"
log "step 1/7 dump: done in $((SECONDS - t))s, $(stat -c %s "$tmp/$base.dump") bytes"

log "step 2/7 globals: pg_dumpall --globals-only"
pg_dumpall --globals-only --no-role-passwords --no-password --file="$tmp/$base.globals.sql"
log "step 2/7 globals: done, $(stat -c %s "$tmp/$base.globals.sql") bytes"

log "step 3/7 verify: pg_restore --list and a full read of the archive"
check_dump "$tmp/$base.dump" || die "the new dump does not verify"
pg_restore --file=/dev/null "$tmp/$base.dump" || die "the new dump cannot be read in full"
grep -q '^-- PostgreSQL database cluster dump complete' "$tmp/$base.globals.sql" || die "the globals dump is incomplete"
log "step 3/7 verify: ok"

log "step 4/7 checksum: sha256"
dump_sum=$(sha256sum <"$tmp/$base.dump" | cut -d' ' -f1)
globals_sum=$(sha256sum <"$tmp/$base.globals.sql" | cut -d' ' -f1)
printf '%s  %s\n%s  %s\n' "$dump_sum" "$base.dump" "$globals_sum" "$base.globals.sql" >"$tmp/$base.sha256"
log "step 4/7 checksum: dump sha256 $dump_sum"

log "step 5/7 fsync"
sync "$tmp/$base.dump" "$tmp/$base.globals.sql" "$tmp/$base.sha256" "$tmp"

log "step 6/7 rename to the final names (checksum file last)"
for ext in dump globals.sql sha256; do
	placed+=("$BACKUP_DIR/$base.$ext")
	mv -f -- "$tmp/$base.$ext" "$BACKUP_DIR/$base.$ext"
done
rmdir -- "$tmp"
sync "$BACKUP_DIR"
verify_backup "$BACKUP_DIR" "$base" || die "the new backup does not verify after the rename"
done_ok=1

log "step 7/7 prune: keep the $BACKUP_RETENTION newest good backups of $DATABASE"
good=0
kept=()
while IFS= read -r b; do
	[[ -n $b ]] || continue
	if ((good >= BACKUP_RETENTION)); then
		rm -f -- "$BACKUP_DIR/$b.sha256" "$BACKUP_DIR/$b.dump" "$BACKUP_DIR/$b.globals.sql"
		log "step 7/7 prune: removed $b"
	elif verify_backup "$BACKUP_DIR" "$b"; then
		good=$((good + 1))
		kept+=("$b")
	else
		# Useless for a restore, and it would hold space meant for good ones.
		rm -f -- "$BACKUP_DIR/$b.sha256" "$BACKUP_DIR/$b.dump" "$BACKUP_DIR/$b.globals.sql"
		log "step 7/7 prune: removed $b: not a good backup (never counted)"
	fi
done < <(list_backups "$BACKUP_DIR" "$DATABASE")
sync "$BACKUP_DIR"
log "step 7/7 prune: $good good backups kept: ${kept[*]}"

log "backup $base completed in $((SECONDS - started))s"
