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
#   pgbackrest.sh COMMAND [ARG...]  any other pgBackRest command (info, check,
#                              backup, verify)
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

[[ $# -gt 0 ]] || die "usage: pgbackrest.sh push PATH | get SEGMENT PATH | get-from REPOSITORY_PATH SEGMENT PATH | ensure | COMMAND [ARG...]"
case $1 in
push)
	[[ $# -eq 2 ]] || die "usage: pgbackrest.sh push PATH"
	exec pgbackrest --config="$conf" --stanza="$stanza" archive-push "$2"
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
*)
	exec pgbackrest --config="$conf" --stanza="$stanza" "$@"
	;;
esac
