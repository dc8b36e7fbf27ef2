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

# The end-to-end level starts first and runs beside the levels below. It is
# the long one (45-76 minutes, most of it waiting on pods, grace periods and
# promotions: about 60-80 % of two cores busy) and they are about ten
# minutes of CPU (lint, go test -race, fuzzing): run one after the other, a
# warm .ci/run took 87 minutes on a machine with slow process creation
# (docs/developing.md), 3 short of CI's limit. Its output goes to a file,
# printed whole when it ends, so the two do not interleave. A failing level
# below does not stop it: every level runs, and the run fails at the end
# naming each level that failed, then each failed test with the lines that
# say why (failures, below). Measured in session 28 (clean clone, warm):
# the levels below end at about 1100 s beside the e2e level (scripts 875 s
# of it), the e2e level itself 50-60 minutes.
failed=()
e2e_pid=''
if [ "$what" = all ]; then
	e2e_log=$(mktemp "${TMPDIR:-/tmp}/function-database-e2e-output.XXXXXX")
	step "end to end on a real control plane: started beside the levels below (output: $e2e_log, printed when it ends)"
	hack/e2e.sh >"$e2e_log" 2>&1 &
	e2e_pid=$!
	# Interrupted, the run stops the suite too (a background job of a
	# script ignores SIGINT): SIGTERM to its processes, whose watchdog
	# tears the cluster down (e2e/main_test.go), then its output.
	descendants() {
		local p
		for p in $(pgrep -P "$1"); do
			descendants "$p"
			echo "$p"
		done
	}
	# shellcheck disable=SC2046 # the pids, one word each
	trap 'trap - INT TERM; kill -TERM $(descendants "$e2e_pid") "$e2e_pid" 2>/dev/null; wait "$e2e_pid"; cat "$e2e_log"; exit 130' INT TERM
	# The levels below (this shell and all it starts from now on) run at a
	# lower priority than the suite: it is the critical path, and its pods
	# and control plane have waits with deadlines; they take the CPU it
	# leaves. The first try without this: a load of 11-13 on two cores, the
	# unit phase twice as long (1156 s) and two unit tests failed on
	# wall-clock bounds (both fixed since).
	renice -n 10 -p $$ >/dev/null || true
fi
# Each level's output is kept (levels_dir) for the summary of what failed,
# printed last: a CI log is often read from its end.
levels_dir=$(mktemp -d "${TMPDIR:-/tmp}/function-database-levels.XXXXXX")
levels=0
failed_logs=()
level() {
	local name=$1 log
	shift
	levels=$((levels + 1))
	log=$levels_dir/$levels.log
	step "$name"
	"$@" 2>&1 | tee "$log" || {
		failed+=("$name")
		failed_logs+=("$log")
	}
}
# failures prints, from go test output, each "--- FAIL" line with the few
# lines that say why: in -v output the failed test's last lines (each
# attributed to the test its "=== RUN/NAME/CONT" header names: a subtest's
# result comes after its parent's), otherwise the lines after it.
failures() {
	awk '
		function keep(name, line) { k = cnt[name]++ % 4; last[name, k] = line }
		function show(name,   i, n) {
			n = cnt[name]
			for (i = (n > 4 ? n - 4 : 0); i < n; i++) print "      " substr(last[name, i % 4], 1, 300)
		}
		/^=== (RUN|NAME|CONT) / { cur = $3; after = 0; next }
		/^[[:space:]]*--- FAIL: / { print substr($0, 1, 300); show($3); after = 3; next }
		/^[[:space:]]*(=== |--- )/ { after = 0; next }
		/^(FAIL|ok|PASS)([[:space:]]|$)/ { after = 0; cur = ""; next }
		after > 0 && /^[[:space:]]/ { print "      " substr($0, 1, 300); after--; next }
		{ after = 0; keep(cur, $0) }
	' "$1" | head -80
}

level "static checks" hack/lint.sh

# The race detector where Go code runs concurrently: the function (its
# server, its caches) and its internal packages. The scripts, render and
# package tests drive PostgreSQL, the crossplane CLI and registries from
# test code: under -race they took 23 of CI's minutes beside the e2e level
# (scripts 1367 s against about 500 s without), for no concurrency of ours.
# -parallel 4: the scripts tests mostly wait on PostgreSQL (a load of about
# one on two cores at the default of two).
unit() {
	local rc=0
	go test -race -count=1 -timeout 40m -parallel 4 . ./input/... ./internal/... || rc=1
	go test -count=1 -timeout 40m -parallel 4 ./cmd/... ./scripts/... ./test/... || rc=1
	return $rc
}
level "unit (go test -race), scripts (real PostgreSQL), render (real crossplane CLI), package: go test -parallel 4" unit

level "benchmarks compile and run once" go test -run='^$' -bench=. -benchtime=1x -count=1 .

# Budgets in executions, not seconds: with a wall-clock -fuzztime, Go's
# fuzzing coordinator (up to go1.26) can fail a target with a bare "context
# deadline exceeded" at the deadline, no input found (golang/go#75804; seen
# in CI on FuzzRunFunction). 20000 runs are about 20 s here. (In a function:
# `level` runs it as the left side of ||, where set -e does not apply.)
fuzz() {
	local target targets
	targets=$(go test -list '^Fuzz' . | grep '^Fuzz') || return 1
	for target in $targets; do
		go test -run='^$' -fuzz="^${target}\$" -fuzztime="${FUZZTIME:-20000x}" -fuzzminimizetime=1000x . || return 1
	done
}
level "fuzzing, briefly" fuzz

if [ -n "$e2e_pid" ]; then
	step "end to end on a real control plane: waiting for it"
	e2e_rc=0
	wait "$e2e_pid" || e2e_rc=$?
	cat "$e2e_log"
	step "end to end on a real control plane: exit status $e2e_rc"
	if [ "$e2e_rc" != 0 ]; then
		failed+=("end to end")
		failed_logs+=("$e2e_log")
	fi
fi
if [ ${#failed[@]} -gt 0 ]; then
	for i in "${!failed[@]}"; do
		step "what failed in ${failed[$i]}"
		failures "${failed_logs[$i]}" >&2 || true # head may cut awk short
	done
	step "failed tests: $(cat "${failed_logs[@]}" | sed -n 's/^[[:space:]]*--- FAIL: \([^ ]*\).*/\1/p' | sort -u | tr '\n' ' ')"
	step "FAILED: $(printf '%s; ' "${failed[@]}")"
	exit 1
fi
rm -rf "$levels_dir" "${e2e_log:-}"
step "done"
