#!/usr/bin/env bash
# full-backup.sh: the full backup CronJob's container (N-full, on the
# Database's backup schedule, when the platform archives to object storage).
# pgBackRest backs up only where it reaches the data directory, so this pod
# does not take the backup: it asks the primary's sidecar to, and waits for
# the answer, so that the CronJob's status is the backup's (BackupHealthy).
#
# The request and the answer are two small files in the primary's data
# directory, written and read over SQL (the superuser's, through the rw
# Service): nothing is added to the user's databases, and a request reaches
# whichever instance is primary.
#   database.full-backup-request  the requester's ID (this pod's name)
#   database.full-backup          "ID running", "ID ok LABEL" or "ID failed WHY"
#                                 (the sidecar, pgbackrest.sh full ID)
# A failover while it waits: the new primary has no request of this ID, so
# it is asked again; the deposed primary's backup fails or is never used.
#
# Exits 0 once the sidecar reports this request's backup taken, 1 when it
# reports it failed. No deadline of its own: the Job's activeDeadlineSeconds
# bounds the wait.
#
# Environment: PGHOST PGPORT PGUSER PGPASSWORD (libpq), DB_NAME, POD_NAME
# (the request's ID: each attempt of the Job asks anew); optional
# POLL_SECONDS (default 5).
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
LOG_TAG=full-backup

require_env PGHOST DB_NAME POD_NAME
id=$POD_NAME
# The ID goes into SQL as a literal and into a file read by the sidecar.
[[ $id =~ ^[a-z0-9][a-z0-9.-]{0,252}$ ]] || die "POD_NAME must be a DNS name, got '$id'"
POLL_SECONDS=${POLL_SECONDS:-5}
require_int POLL_SECONDS 1

sql="SELECT pg_is_in_recovery(),
	rtrim(coalesce(pg_read_file('database.full-backup-request', 0, 256, true), ''), E'\n'),
	replace(rtrim(coalesce(pg_read_file('database.full-backup', 0, 4096, true), ''), E'\n'), E'\n', ' ')"
# COPY writes a server file only to an absolute path: the data directory's.
request="DO \$\$ BEGIN EXECUTE format('COPY (SELECT %L) TO %L', '$id',
	current_setting('data_directory') || '/database.full-backup-request'); END \$\$"

asked='' last=''
while :; do
	if row=$(psql -X -A -t -q -v ON_ERROR_STOP=1 -d "$DB_NAME" -c "$sql" 2>&1); then
		IFS='|' read -r recovery current result <<<"$row"
		if [[ $recovery == f ]]; then
			case $result in
			"$id ok"*)
				log "the primary took the full backup ${result#"$id ok "}"
				exit 0
				;;
			"$id failed"*)
				die "the full backup failed on the primary:${result#"$id failed"} (the primary's sidecar log has pgBackRest's output)"
				;;
			"$id running"*)
				[[ $last == running ]] || log "the primary's sidecar is taking the full backup"
				last=running
				;;
			*)
				if [[ $current != "$id" ]]; then
					psql -X -q -v ON_ERROR_STOP=1 -d "$DB_NAME" -c "$request" >/dev/null ||
						log "the request could not be written; trying again in ${POLL_SECONDS}s"
					if [[ -z $asked ]]; then
						log "asked the primary for a full backup (request $id)"
					else
						log "asked again (request $id): the primary answering has no request of it (a failover, or a restart)"
					fi
					asked=y last=asked
				fi
				;;
			esac
		elif [[ $last != standby ]]; then
			log "the rw Service reached a standby (a failover under way); waiting for the primary"
			last=standby
		fi
	elif [[ $last != down ]]; then
		log "no answer from the primary at ${PGHOST}:${PGPORT:-5432} (${row//$'\n'/ }); retrying every ${POLL_SECONDS}s"
		last=down
	fi
	sleep "$POLL_SECONDS"
done
