#!/usr/bin/env bash
# The cost of a fleet (issue 26): N small Databases applied at once on the
# kwok control plane, the CPU and memory of each control-plane process until
# all are Ready and during two minutes at rest, then a restart of the function
# and of Crossplane core with nothing regenerated (e2e/fleet_test.go). Not
# part of the full run: it runs alone, and leaves the fleet behind.
#
#   hack/fleet.sh [N] [READY_MINUTES]     e.g. hack/fleet.sh 500 5
#   E2E_FLEET_BACKUPS=off hack/fleet.sh   Databases without backups (one claim each)
set -euo pipefail
n=${1:-500}
[[ $n =~ ^[0-9]+$ && $n -ge 1 ]] || {
	echo "usage: hack/fleet.sh [N] [READY_MINUTES]" >&2
	exit 2
}
export E2E_FLEET=$n E2E_FLEET_READY_MINUTES=${2:-5}
exec "$(dirname "$0")/e2e.sh" -run '^TestFleet$' -timeout "$((E2E_FLEET_READY_MINUTES * 3 + 20))m"
