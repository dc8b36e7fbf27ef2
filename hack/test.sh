#!/usr/bin/env bash
# The README's test command, and all CI runs (.ci/run calls it): sets up a
# fresh Debian machine, then runs every test level. The Makefile's targets
# run the same scripts: make ci is this, make test is `unit`, make lint is
# hack/lint.sh, make e2e is hack/e2e.sh.
#
#   hack/test.sh           everything: lint, go test (unit, scripts on a real
#                          PostgreSQL, render, package), benchmarks, fuzzing, e2e
#   hack/test.sh unit      the same without the end-to-end level (and without
#                          installing its tools)
#   hack/test.sh setup     only the set-up below, for every level; no test
#
# Set-up, each step a no-op when already done (warm: a few seconds): Debian's
# postgresql, pgbackrest, shellcheck and prometheus (promtool; hack/install-postgres.sh),
# the Go modules, the crossplane CLI, Crossplane core, crane, versitygw and
# postgres_exporter (hack/tools.sh), golangci-lint (hack/lint.sh), and for e2e the
# control-plane binaries, kwok, etcd, prometheus and the real node's packages
# (hack/cluster-tools.sh). Tools are built from the Go
# module proxy into $HOME/.cache/function-database keyed by version (cold:
# see the README). Debian packages need root or sudo; the real node needs root.
#
# A level whose tool is missing fails here, saying what installs it
# (FNDB_REQUIRE_TOOLS): only a run narrowed on purpose, `go test ./...` alone,
# skips it.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$root"
what=${1:-all}
case $what in
all | unit | setup) ;;
*)
	echo "usage: hack/test.sh [unit | setup]" >&2
	exit 2
	;;
esac

start=$SECONDS
step() { printf '\n=== %s (%d s)\n' "$*" "$((SECONDS - start))" >&2; }

step "set-up: Go"
require_go
step "set-up: Debian packages postgresql, pgbackrest, shellcheck, prometheus"
hack/install-postgres.sh >/dev/null
step "set-up: Go modules"
go mod download
step "set-up: crossplane CLI, Crossplane core, crane, versitygw (S3), postgres_exporter"
hack/tools.sh >/dev/null
step "set-up: golangci-lint"
hack/lint.sh --build-only
if [ "$what" != unit ]; then
	step "set-up: control-plane binaries, kwok, etcd, the real node's packages"
	hack/cluster-tools.sh >/dev/null
fi
if [ "$what" = setup ]; then
	step "set-up done"
	exit 0
fi
export FNDB_REQUIRE_TOOLS=1

step "static checks"
hack/lint.sh

step "unit, scripts (real PostgreSQL), render (real crossplane CLI), package: go test -race -parallel 4 ./..."
# -parallel 4: the scripts tests mostly wait on PostgreSQL (a load of about
# one on two cores at the default of two). Measured: 685 s at two on a quiet
# machine without -race; 470 s at four with -race, an e2e suite beside them.
go test -race -count=1 -timeout 40m -parallel 4 ./...

step "benchmarks compile and run once"
go test -run='^$' -bench=. -benchtime=1x -count=1 .

step "fuzzing, briefly"
# Budgets in executions, not seconds: with a wall-clock -fuzztime, Go's
# fuzzing coordinator (up to go1.26) can fail a target with a bare "context
# deadline exceeded" at the deadline, no input found (golang/go#75804; seen
# in CI on FuzzRunFunction). 20000 runs are about 20 s here.
for target in $(go test -list '^Fuzz' . | grep '^Fuzz'); do
	go test -run='^$' -fuzz="^${target}\$" -fuzztime="${FUZZTIME:-20000x}" -fuzzminimizetime=1000x .
done

if [ "$what" = all ]; then
	step "end to end on a real control plane"
	hack/e2e.sh
fi
step "done"
