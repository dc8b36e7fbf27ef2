#!/usr/bin/env bash
# Crossplane core's bill in a busy cluster (issue 26): core's CPU and memory
# at rest in the bare suite, with N unrelated pods (kwok, on fake nodes), and
# with ten Databases among them (e2e/corebill_test.go). Not part of the full
# run: it runs alone, and leaves the pods behind.
#
#   hack/core-bill.sh [N]     e.g. hack/core-bill.sh 10000
set -euo pipefail
n=${1:-10000}
[[ $n =~ ^[0-9]+$ && $n -ge 1 ]] || {
	echo "usage: hack/core-bill.sh [N]" >&2
	exit 2
}
export E2E_CORE_BILL=$n
exec "$(dirname "$0")/e2e.sh" -run '^TestCoreBill$' -timeout 60m
