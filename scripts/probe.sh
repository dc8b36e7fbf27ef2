#!/usr/bin/env bash
# probe.sh ready|live: the postgres container's readiness and liveness probes.
#
#   ready: entrypoint.sh has exec'd postgres (state running; never while
#          initialising, cloning or holding) and postgres accepts connections
#          on the socket.
#   live:  postgres answers on the socket (accepting, or rejecting while it
#          starts or recovers), or the pod is deliberately initialising,
#          cloning or holding: the kubelet must not restart it in a loop.
#          Not live: a running standby whose clone the sidecar marked for
#          cloning again (database.reclone: the primary lost its WAL), so
#          that the restarted container clones it.
#
# Environment: PGHOST (socket dir), PGPORT, ADMIN_SECRET_DIR; optional
# STATE_DIR (default /tmp, as entrypoint.sh), PGDATA.
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

state=$(get_state)
rc=0
pg_isready -q -t 3 -h "$PGHOST" -p "$PGPORT" -U "$user" -d postgres || rc=$?

case $mode in
ready)
	if [[ $state != running ]]; then
		echo "not ready: state $state" >&2
		exit 1
	fi
	if ((rc != 0)); then
		echo "not ready: postgres is not accepting connections (pg_isready exit $rc)" >&2
		exit 1
	fi
	;;
live)
	case $state in
	initializing | cloning | hold) exit 0 ;;
	esac
	if [[ -n ${PGDATA:-} && -f $PGDATA/database.reclone ]]; then
		echo "not live: this standby lost the WAL it needs ($(<"$PGDATA/database.reclone")); restarting to clone it again" >&2
		exit 1
	fi
	# pg_isready: 0 accepting, 1 rejecting (starting up / recovery), 2 no
	# response, 3 no attempt.
	if ((rc > 1)); then
		echo "not live: postgres does not answer (pg_isready exit $rc, state $state)" >&2
		exit 1
	fi
	;;
esac
exit 0
