#!/usr/bin/env bash
# The failover soak: seeded random faults against one Database on the real
# node, each judged by the independent checker (e2e/soak_realnode_test.go).
# Not part of the full run; a seed replays its schedule.
#
#   hack/soak.sh SEED [ROUNDS]     e.g. hack/soak.sh 42 12   (about 5 min a round)
set -euo pipefail
[[ $# -ge 1 && $1 =~ ^[0-9]+$ ]] || {
	echo "usage: hack/soak.sh SEED [ROUNDS]" >&2
	exit 2
}
export E2E_SOAK_SEED=$1 E2E_SOAK_ROUNDS=${2:-12}
exec "$(dirname "$0")/e2e.sh" -run '^TestFailoverSoak$' -timeout "$((E2E_SOAK_ROUNDS * 8 + 20))m"
