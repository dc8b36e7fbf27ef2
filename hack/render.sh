#!/usr/bin/env bash
# The README's main command. Renders a Database XR with the real crossplane
# CLI and Crossplane core, no Docker: builds the function, serves it on a free
# loopback port, runs `crossplane composition render` against it and prints
# the YAML (with the function's results, -r). Needs only Go: the CLI and core
# are built into the cache on first use.
#
#   hack/render.sh                                       example/xr.yaml
#   hack/render.sh example/xrs/backup.yaml
#   hack/render.sh example/legacy/xr.yaml                uses example/legacy/{composition,xrd}.yaml
#   hack/render.sh example/xr.yaml -o example/observed   a Running database (observed resources)
#
# Arguments after the XR file go to `crossplane composition render` as they are.
# The Composition and XRD are composition.yaml and xrd.yaml beside the XR file
# when it has them, else example/'s.
# Environment: RENDER_COMPOSITION, RENDER_XRD, RENDER_FUNCTIONS override those files;
# FUNCTION_BIN serves a prebuilt function binary instead of building one;
# CROSSPLANE_BIN, CROSSPLANE_CORE_BIN override the tools (default: hack/tools.sh).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

xr=${1:-$root/example/xr.yaml}
[ $# -eq 0 ] || shift
[ -f "$xr" ] || { echo "render: no XR file $xr" >&2; exit 2; }
dir=$(dirname "$xr")
[ -f "$dir/composition.yaml" ] && [ -f "$dir/xrd.yaml" ] || dir=$root/example
composition=${RENDER_COMPOSITION:-$dir/composition.yaml}
xrd=${RENDER_XRD:-$dir/xrd.yaml}
functions=${RENDER_FUNCTIONS:-$root/example/functions.yaml}

# Everything else it needs it builds itself on first use (hack/tools.sh):
# the crossplane CLI and core, into the cache; the function, here.
require_go
crossplane=$(tool crossplane CROSSPLANE_BIN)
core=$(tool crossplane-core CROSSPLANE_CORE_BIN)

tmp=$(mktemp -d)
fn_pid=
trap 'stop "$fn_pid"; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

fn=${FUNCTION_BIN:-}
if [ -z "$fn" ]; then
	(cd "$root" && go build -o "$tmp/function" .)
	fn=$tmp/function
fi

# Another process may take the chosen port before the function binds it: retry.
for _ in 1 2 3 4 5; do
	port=$(free_port)
	"$fn" --insecure --address="127.0.0.1:$port" --metrics-address= >"$tmp/function.log" 2>&1 &
	fn_pid=$!
	wait_port "$port" "$fn_pid" 60 && break
	stop "$fn_pid"
	fn_pid=
done
if [ -z "$fn_pid" ]; then
	echo "render: the function did not start; its log:" >&2
	cat "$tmp/function.log" >&2
	exit 1
fi

if ! "$crossplane" composition render "$xr" "$composition" "$functions" \
	--xrd "$xrd" --crossplane-binary "$core" -r \
	-a render.crossplane.io/runtime=Development \
	-a "render.crossplane.io/runtime-development-target=127.0.0.1:$port" \
	"$@"; then
	echo "render: failed; the function's log:" >&2
	cat "$tmp/function.log" >&2
	exit 1
fi
