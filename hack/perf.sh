#!/usr/bin/env bash
# Performance check (issue 6): CPU per request, latency, peak RSS and startup
# of function-database next to a no-op function built from the same
# function-sdk-go version, over loopback gRPC; plus the Go benchmarks.
#
#   hack/perf.sh                      benchmarks + load test (2 rounds)
#   hack/perf.sh --no-bench           load test only
#   hack/perf.sh --no-load            benchmarks only
#   hack/perf.sh --profile            also CPU/alloc profiles of the benchmarks (top functions)
#   hack/perf.sh --leak               1e6 requests at concurrency 8 on the largest request, RSS every 100k
#   hack/perf.sh --profile-load       CPU profile of the whole function process (gRPC and protobuf
#                                     included) under load at concurrency 8 on the largest request
#   hack/perf.sh -- FLAGS...          extra cmd/loadtest flags (see go run ./cmd/loadtest -h)
#
# Environment: PERF_REQUESTS (request files; default testdata/perf/*.yaml),
# PERF_DURATION (10s), PERF_WARMUP (1s), PERF_CONCURRENCY (1,8), PERF_ROUNDS (2),
# PERF_BENCH (regexp, .), PERF_COUNT (3), PERF_OUT (_output/perf).
# Results: $PERF_OUT/report.md (load test), bench.txt, cpu-top.txt, alloc-top.txt.
# Binaries are built like the package (hack/package.sh): CGO_ENABLED=0 -trimpath -s -w.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${PERF_OUT:-$root/_output/perf}
bench=1 load=1 profile=0 leak=0 profload=0 status=0
extra=()
while [ $# -gt 0 ]; do
	case $1 in
	--no-bench) bench=0 ;;
	--no-load) load=0 ;;
	--profile) profile=1 ;;
	--leak) leak=1 bench=0 ;;
	--profile-load) profload=1 bench=0 ;;
	--) shift; extra=("$@"); break ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "perf.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
	shift
done
mkdir -p "$out"
cd "$root"

echo "==> building function-database, noop-function, loadtest into $out" >&2
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/function-database" .
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/noop-function" ./cmd/noop-function
go build -o "$out/loadtest" ./cmd/loadtest

if [ "$bench" = 1 ]; then
	echo "==> go test -bench=${PERF_BENCH:-.} -benchmem -count=${PERF_COUNT:-3} ." >&2
	# A failing benchmark does not stop the load test; it fails the script.
	if ! go test -run='^$' -bench="${PERF_BENCH:-.}" -benchmem -count="${PERF_COUNT:-3}" . | tee "$out/bench.txt"; then
		echo "perf.sh: the benchmarks failed (see above); continuing with the load test" >&2
		status=1 profile=0
	fi
	if [ "$profile" = 1 ]; then
		echo "==> profiling the benchmarks" >&2
		go test -run='^$' -bench="${PERF_BENCH:-.}" -benchmem -count=1 -benchtime=3s \
			-cpuprofile "$out/cpu.prof" -memprofile "$out/mem.prof" -o "$out/function-database.test" . >/dev/null
		go tool pprof -top -nodecount=30 "$out/function-database.test" "$out/cpu.prof" 2>/dev/null | tee "$out/cpu-top.txt"
		go tool pprof -top -cum -nodecount=40 "$out/function-database.test" "$out/cpu.prof" 2>/dev/null >"$out/cpu-cum.txt"
		go tool pprof -top -sample_index=alloc_space -nodecount=30 "$out/function-database.test" "$out/mem.prof" 2>/dev/null | tee "$out/alloc-top.txt"
	fi
fi

[ "$load" = 1 ] || exit "$status"
if [ -n "${PERF_REQUESTS:-}" ]; then
	read -r -a requests <<<"$PERF_REQUESTS"
else
	shopt -s nullglob
	requests=("$root"/testdata/perf/*.yaml)
	shopt -u nullglob
fi
if [ ${#requests[@]} -eq 0 ]; then
	echo "perf.sh: no request files: testdata/perf/*.yaml is empty; set PERF_REQUESTS='a.yaml b.yaml'" >&2
	exit 2
fi
args=()
for r in "${requests[@]}"; do args+=(--request "$r"); done

# The largest request file: the one whose leak or hot spot would show first.
big='' size=-1
for r in "${requests[@]}"; do
	s=$(stat -c %s "$r")
	if [ "$s" -gt "$size" ]; then big=$r size=$s; fi
done

if [ "$profload" = 1 ]; then
	# pprof.go (build tag pprof) serves net/http/pprof on a loopback port.
	CGO_ENABLED=0 go build -tags pprof -trimpath -o "$out/function-database-pprof" .
	port=$((20000 + RANDOM % 20000))
	echo "==> profiling the function process: $big at concurrency 8, pprof on 127.0.0.1:$port" >&2
	"$out/loadtest" --function "$out/function-database-pprof" --request "$big" --concurrency 8 \
		--duration 20s --warmup 1s --env "FUNCTION_PPROF_ADDRESS=127.0.0.1:$port" "${extra[@]}" >&2 &
	lt=$!
	sleep 5
	go tool pprof -proto -seconds 12 -output "$out/process-cpu.prof" "http://127.0.0.1:$port/debug/pprof/profile" 2>/dev/null || status=1
	wait "$lt" || status=1
	go tool pprof -top -cum -nodecount=50 "$out/function-database-pprof" "$out/process-cpu.prof" 2>/dev/null | tee "$out/process-cpu-cum.txt"
	exit "$status"
fi

if [ "$leak" = 1 ]; then
	echo "==> leak check: 1e6 requests of $big at concurrency 8" >&2
	exec "$out/loadtest" --function "$out/function-database" --request "$big" \
		--concurrency 8 --requests 1000000 --report-every 100000 --timeout 2h \
		--out "$out/leak.md" "${extra[@]}"
fi

rm -f "$out/report.md"
echo "==> load test ($(printf '%s ' "${requests[@]##*/}")): report in $out/report.md" >&2
"$out/loadtest" --function "$out/function-database" --baseline "$out/noop-function" "${args[@]}" \
	--duration "${PERF_DURATION:-10s}" --warmup "${PERF_WARMUP:-1s}" \
	--concurrency "${PERF_CONCURRENCY:-1,8}" --rounds "${PERF_ROUNDS:-2}" \
	--out "$out/report.md" "${extra[@]}" || status=$?
exit "$status"
