#!/usr/bin/env bash
# The whole test suite, as CI runs it (README "Developing"). Expects the
# tools installed by .ci/run: PostgreSQL and shellcheck (hack/install-postgres.sh),
# the crossplane CLI, core and crane (hack/tools.sh), the control-plane
# binaries (hack/cluster-tools.sh).
#
#   hack/test.sh           everything
#   hack/test.sh unit      only the go test levels (no e2e)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
what=${1:-all}

step() { printf '\n=== %s\n' "$*" >&2; }

step "static checks"
hack/lint.sh

step "unit, scripts (real PostgreSQL), render (real crossplane CLI), package: go test -race ./..."
go test -race -count=1 -timeout 40m ./...

step "benchmarks compile and run once"
go test -run='^$' -bench=. -benchtime=1x -count=1 .

step "fuzzing, briefly"
for target in $(go test -list '^Fuzz' . | grep '^Fuzz'); do
	go test -run='^$' -fuzz="^${target}\$" -fuzztime="${FUZZTIME:-20s}" -fuzzminimizetime=5s .
done

if [ "$what" = all ]; then
	step "end to end on a real control plane"
	hack/e2e.sh
fi
