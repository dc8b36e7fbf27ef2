#!/usr/bin/env bash
# Builds the function's Crossplane package without Docker:
#   1. a static binary (CGO_ENABLED=0, -trimpath, -s -w);
#   2. a runtime image holding it as /function (entrypoint /function, user
#      65532, port 9443/tcp), made with crane through a throwaway loopback
#      registry, saved as a tarball;
#   3. the package: `crossplane xpkg build -f package` with that runtime embedded.
#
#   hack/package.sh        writes _output/function-database.xpkg
#   hack/push.sh REF       pushes it (REGISTRY/REPOSITORY:TAG)
#
# Environment: OUTPUT_DIR (default _output), PLATFORM (default linux/amd64),
# CROSSPLANE_BIN, CRANE_BIN override the tools (default: hack/tools.sh).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

out=${OUTPUT_DIR:-$root/_output}
platform=${PLATFORM:-linux/amd64}
IFS=/ read -r goos goarch _ <<<"$platform"

crossplane=$(tool crossplane CROSSPLANE_BIN)
crane=$(tool crane CRANE_BIN)

tmp=$(mktemp -d)
registry_pid=
trap 'stop "$registry_pid"; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

echo "package: building the function for $platform" >&2
mkdir -p "$tmp/rootfs" "$tmp/registry" "$out"
(cd "$root" && CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath -ldflags='-s -w' -o "$tmp/rootfs/function" .)
tar -C "$tmp/rootfs" --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$tmp/layer.tar" function

# crane mutate reads its image from a registry: serve one on loopback meanwhile.
"$crane" registry serve --address 127.0.0.1:0 --disk "$tmp/registry" 2>"$tmp/registry.log" &
registry_pid=$!
port=
for _ in $(seq 300); do
	port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$tmp/registry.log")
	[ -z "$port" ] || break
	kill -0 "$registry_pid" 2>/dev/null || break
	sleep 0.1
done
if [ -z "$port" ] || ! wait_port "$port" "$registry_pid" 30; then
	echo "package: the loopback registry did not start:" >&2
	cat "$tmp/registry.log" >&2
	exit 1
fi

# quiet CMD...: runs CMD, showing its output only when it fails.
quiet() {
	"$@" >"$tmp/quiet.log" 2>&1 || {
		cat "$tmp/quiet.log" >&2
		return 1
	}
}

echo "package: building the runtime image" >&2
image=127.0.0.1:$port/function-database/runtime:build
quiet "$crane" append --oci-empty-base -f "$tmp/layer.tar" -t "$image"
quiet "$crane" mutate "$image" --entrypoint=/function --user=65532 --exposed-ports=9443/tcp \
	--set-platform="$platform" -o "$tmp/runtime.tar"

echo "package: building the package" >&2
# No examples layer: example/ is for render and kubectl, and holds files
# (legacy XRD, development annotations) that are not the package's.
"$crossplane" xpkg build -f "$root/package" -e "$tmp/no-examples" \
	--embed-runtime-image-tarball="$tmp/runtime.tar" -o "$out/function-database.xpkg"
echo "$out/function-database.xpkg"
