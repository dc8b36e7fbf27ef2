#!/usr/bin/env bash
# Builds the two Crossplane packages without Docker (docs/packaging.md):
#
#   the function package, once per platform (default linux/amd64 and
#   linux/arm64):
#     1. a static binary (CGO_ENABLED=0, -trimpath, -s -w);
#     2. a runtime image holding it as /function (entrypoint /function, user
#        65532, port 9443/tcp, the platform in its config), made with crane
#        through a throwaway loopback registry, saved as a tarball;
#     3. `crossplane xpkg build -f package` with that runtime embedded:
#        _output/function-database-<arch>.xpkg. hack/push.sh pushes them as
#        one multi-platform index.
#   the Configuration package: configuration/crossplane.yaml with
#   example/xrd.yaml and example/composition.yaml copied in (example/ is the
#   one source), its dependency set to $FUNCTION_PACKAGE and the
#   Composition's functionRef to the Function name Crossplane gives that
#   dependency: _output/configuration-database.xpkg.
#
#   hack/package.sh                                  both packages
#   hack/push.sh FUNCTION_REF [CONFIGURATION_REF]    push them
#
# Environment:
#   FUNCTION_PACKAGE  the function's repository, as the Configuration depends
#                     on it (default xpkg.example.test/acme/function-database)
#   PLATFORMS         space-separated (default "linux/amd64 linux/arm64")
#   OUTPUT_DIR        default _output
#   EXAMPLE_DIR       where xrd.yaml and composition.yaml come from (default example)
#   CROSSPLANE_BIN, CRANE_BIN override the tools (default: hack/tools.sh).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

out=${OUTPUT_DIR:-$root/_output}
platforms=${PLATFORMS:-linux/amd64 linux/arm64}
examples=${EXAMPLE_DIR:-$root/example}
fn_package=${FUNCTION_PACKAGE:-xpkg.example.test/acme/function-database}

fn_name=$(function_name "$fn_package") || {
	echo "package: FUNCTION_PACKAGE=$fn_package is not REGISTRY/REPOSITORY (a registry host with a dot or a port, no tag or digest)" >&2
	exit 2
}

crossplane=$(tool crossplane CROSSPLANE_BIN)
crane=$(tool crane CRANE_BIN)

tmp=$(mktemp -d)
registry_pid=
trap 'stop "$registry_pid"; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

mkdir -p "$tmp/registry" "$out"
# Packages of platforms not asked for this time must not be pushed with the rest.
rm -f "$out"/function-database-*.xpkg

# crane mutate reads its image from a registry: serve one on loopback meanwhile.
# The log exists before the server starts: the background job opens its
# redirection after the fork, and a sed racing it under load found no file
# (set -e then ended the script with sed's status 2).
: >"$tmp/registry.log"
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

for platform in $platforms; do
	IFS=/ read -r goos goarch _ <<<"$platform"
	work=$tmp/$goos-$goarch
	mkdir -p "$work/rootfs"
	echo "package: building the function for $platform" >&2
	(cd "$root" && CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath -ldflags='-s -w' -o "$work/rootfs/function" .)
	tar -C "$work/rootfs" --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$work/layer.tar" function

	echo "package: building the $platform runtime image" >&2
	image=127.0.0.1:$port/function-database/runtime:$goos-$goarch
	quiet "$crane" append --oci-empty-base -f "$work/layer.tar" -t "$image"
	quiet "$crane" mutate "$image" --entrypoint=/function --user=65532 --exposed-ports=9443/tcp \
		--set-platform="$platform" -o "$work/runtime.tar"

	echo "package: building the $platform function package" >&2
	# No examples layer: example/ is for render and kubectl, and holds files
	# (legacy XRD, development annotations) that are not the package's.
	"$crossplane" xpkg build -f "$root/package" -e "$tmp/no-examples" \
		--embed-runtime-image-tarball="$work/runtime.tar" -o "$out/function-database-$goarch.xpkg"
	echo "$out/function-database-$goarch.xpkg"
done

echo "package: building the Configuration package (function $fn_package, named $fn_name)" >&2
stage=$tmp/configuration
mkdir -p "$stage"
# The dependency: the one `package:` line of configuration/crossplane.yaml.
sed "s|^    package: .*\$|    package: $fn_package|" "$root/configuration/crossplane.yaml" >"$stage/crossplane.yaml"
if [ "$(grep -cx "    package: $fn_package" "$stage/crossplane.yaml")" != 1 ]; then
	echo "package: configuration/crossplane.yaml has no single dependency line '    package: ...' to set" >&2
	exit 1
fi
cp "$examples/xrd.yaml" "$stage/xrd.yaml"
# Every pipeline step's functionRef names the Function the dependency
# becomes. No YAML tool on these machines: the line after each
# `functionRef:` must be its `name:`, or this fails rather than guess.
awk -v name="$fn_name" '
	ref { if ($0 ~ /^ +name: /) { sub(/name: .*$/, "name: " name); n++ }; ref = 0 }
	/^ *functionRef: *$/ { ref = 1; refs++ }
	{ print }
	END { if (refs == 0 || n != refs) { printf "%d functionRef, %d with name on the next line\n", refs, n > "/dev/stderr"; exit 1 } }
' "$examples/composition.yaml" >"$stage/composition.yaml"
"$crossplane" xpkg build -f "$stage" -e "$tmp/no-examples" -o "$out/configuration-database.xpkg"
echo "$out/configuration-database.xpkg"
