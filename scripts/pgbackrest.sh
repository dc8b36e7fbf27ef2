#!/usr/bin/env bash
# pgbackrest.sh: pgBackRest for one instance, with the bucket's keys read from
# OBJECT_STORAGE_DIR at each call, so that a rotated key is used without a
# restart; they reach pgBackRest in its environment, never as arguments.
#
#   pgbackrest.sh push PATH       postgres's archive_command (asynchronous: the
#                              spool is on the data volume, bounded by
#                              archive-push-queue-max in pgbackrest.conf)
#   pgbackrest.sh get SEGMENT PATH  a restore_command
#   pgbackrest.sh get-from REPOSITORY_PATH SEGMENT PATH
#                              the restore_command of a Database restored
#                              from another's archive (entrypoint.sh
#                              restore_primary)
#   pgbackrest.sh ensure          on a primary (the sidecar): create the stanza,
#                              or check that the bucket's is this cluster's;
#                              then take a first full backup when the
#                              repository has none, so that the archive is
#                              restorable from its start
#   pgbackrest.sh rebase          on a primary (the sidecar), when a push dropped
#                              WAL (GAP_MARKER): once archiving works again,
#                              a full backup, the start of a chain a restore
#                              can replay to the end; then the marker goes
#   pgbackrest.sh full ID         on a primary (the sidecar), when full-backup.sh
#                              asked (database.full-backup-request in PGDATA
#                              holds ID): a full backup, its progress and
#                              outcome in database.full-backup: "ID running",
#                              then "ID ok LABEL" or "ID failed WHY"; the
#                              repository's retention applies after it
#   pgbackrest.sh COMMAND [ARG...]  any other pgBackRest command (info, check,
#                              backup, verify)
#
# A push that drops WAL (pgBackRest's queue was full: the bucket could not be
# reached) adds the dropped segments' names to GAP_MARKER in PGDATA (postgres
# runs archive_command there): the archive has a gap, and a restore reaches
# only the point before it until a full backup that starts after the last
# dropped segment. archive-check.sh fails while the marker is there.
#
# Reads SCRIPTS_DIR/pgbackrest.conf (the function writes it when its input
# names objectStorage), OBJECT_STORAGE_DIR/AWS_ACCESS_KEY_ID and
# AWS_SECRET_ACCESS_KEY. Exits with pgBackRest's status; 1 when the
# configuration, the keys or pgbackrest itself are missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
LOG_TAG=archive

require_env OBJECT_STORAGE_DIR
conf=${SCRIPTS_DIR:-$here}/pgbackrest.conf
stanza=db

[[ -f $conf ]] || die "$conf missing: the function input names no objectStorage"
command -v pgbackrest >/dev/null ||
	die "pgbackrest is not in this image: archiving to object storage needs an image with pgBackRest (docs/backups.md)"

# The keys, from the mounted Secret (optional: it may not exist yet).
read_file_into PGBACKREST_REPO1_S3_KEY "$OBJECT_STORAGE_DIR/AWS_ACCESS_KEY_ID" 2>/dev/null ||
	die "no $OBJECT_STORAGE_DIR/AWS_ACCESS_KEY_ID: the object storage Secret is missing or incomplete (the Database's WALArchive condition says which)"
read_file_into PGBACKREST_REPO1_S3_KEY_SECRET "$OBJECT_STORAGE_DIR/AWS_SECRET_ACCESS_KEY" 2>/dev/null ||
	die "no $OBJECT_STORAGE_DIR/AWS_SECRET_ACCESS_KEY: the object storage Secret is missing or incomplete"
export PGBACKREST_REPO1_S3_KEY PGBACKREST_REPO1_S3_KEY_SECRET

backrest() { pgbackrest --config="$conf" --stanza="$stanza" "$@"; }
GAP_MARKER=database.archive-gap
# full-backup.sh's request and the answer (pgbackrest.conf excludes both
# from backups: a copy restored from one must not take the request up).
FULL_ANSWER=database.full-backup

[[ $# -gt 0 ]] || die "usage: pgbackrest.sh push PATH | get SEGMENT PATH | get-from REPOSITORY_PATH SEGMENT PATH | ensure | rebase | full ID | COMMAND [ARG...]"
case $1 in
push)
	[[ $# -eq 2 ]] || die "usage: pgbackrest.sh push PATH"
	rc=0
	out=$(backrest archive-push "$2" 2>&1) || rc=$?
	[[ -z $out ]] || printf '%s\n' "$out" >&2
	if [[ $out == *"dropped WAL file"* ]]; then
		grep 'dropped WAL file' <<<"$out" | grep -o '[0-9A-F]\{24\}' >>"${PGDATA:-.}/$GAP_MARKER" || true
	fi
	exit "$rc"
	;;
get)
	[[ $# -eq 3 ]] || die "usage: pgbackrest.sh get SEGMENT PATH"
	exec pgbackrest --config="$conf" --stanza="$stanza" archive-get "$2" "$3"
	;;
get-from)
	# A restored copy's restore_command: the source Database's repository.
	[[ $# -eq 4 ]] || die "usage: pgbackrest.sh get-from REPOSITORY_PATH SEGMENT PATH"
	exec pgbackrest --config="$conf" --stanza="$stanza" --repo1-path="$2" archive-get "$3" "$4"
	;;
ensure)
	# stanza-create is idempotent, and refuses a bucket path that holds
	# another cluster's archive (its system identifier differs): two
	# Databases never mix their WAL in one repository.
	backrest --log-level-console=info stanza-create
	if backrest info | grep -q 'status: error (no valid backups)'; then
		log "no backup in the repository yet: taking the first full backup"
		backrest --log-level-console=info --type=full backup
	fi
	;;
rebase)
	marker=${PGDATA:?}/$GAP_MARKER
	[[ -f $marker ]] || exit 0
	# check: a switched segment reaches the bucket (archiving works again).
	backrest --log-level-console=warn check
	log "the archive has a gap (WAL dropped up to $(sort "$marker" | tail -n 1) while the bucket could not be reached): taking a full backup, from which a restore reaches the end again"
	backrest --log-level-console=info --type=full backup
	# The new backup's first segment (info lists the newest last): a
	# segment dropped at or after it (reported late, or dropped during the
	# backup) is a gap in this chain too, and the marker stays.
	start=$(backrest info | awk '/wal start\/stop:/{s=$3} END{print s}')
	last=$(sort "$marker" | tail -n 1)
	[[ -n $start ]] || die "no WAL start in pgbackrest info after the backup"
	if [[ -z $last || $last < $start ]]; then
		rm -f "$marker"
		log "full backup taken, starting at $start after the last dropped segment ${last:-none}: the archive is restorable to its end again"
	else
		die "segment $last was dropped after the new backup's start $start: another full backup follows"
	fi
	;;
full)
	[[ $# -eq 2 && $2 =~ ^[a-z0-9][a-z0-9.-]*$ ]] || die "usage: pgbackrest.sh full ID (a DNS name)"
	id=$2 answer_file=${PGDATA:?}/$FULL_ANSWER
	# answer STATE [DETAIL]: the one line full-backup.sh reads, replaced
	# whole (a reader never sees half of it).
	answer() {
		printf '%s %s\n' "$id" "$*" >"$answer_file.tmp" && mv -f "$answer_file.tmp" "$answer_file"
	}
	answer running
	log "a full backup, requested by $id"
	rc=0
	out=$(backrest --log-level-console=info --type=full backup 2>&1) || rc=$?
	[[ -z $out ]] || printf '%s\n' "$out" >&2
	if ((rc != 0)); then
		# pgBackRest's error, with the lines that go on with it, in one line.
		why=$(awk '/ERROR/{p=1} p{printf "%s ", $0}' <<<"$out" | tr -s ' \t' ' ' | cut -c1-300)
		answer failed "pgBackRest exited $rc: ${why:-$(tail -n 1 <<<"$out")}"
		exit "$rc"
	fi
	# The newest backup (info lists them oldest first) and its stop time,
	# from the JSON (the text form prints local time without an offset).
	info=$(backrest --output=json info)
	label=$(grep -o '"label":"[^"]*"' <<<"$info" | tail -n 1 | cut -d'"' -f4)
	stop=$(grep -o '"stop":[0-9]*}' <<<"$info" | tail -n 1 | tr -dc 0-9)
	[[ -n $label && -n $stop ]] || die "no backup in pgbackrest info after the backup: $info"
	stop=$(TZ=UTC printf '%(%Y-%m-%dT%H:%M:%SZ)T' "$stop")
	answer ok "$label stopped $stop"
	log "full backup $label taken (stopped $stop) for $id"
	;;
*)
	exec pgbackrest --config="$conf" --stanza="$stanza" "$@"
	;;
esac
