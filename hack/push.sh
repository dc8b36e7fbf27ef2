#!/usr/bin/env bash
# Pushes the package built by hack/package.sh:
#   hack/push.sh REGISTRY/REPOSITORY:TAG
# e.g. hack/push.sh ghcr.io/example/function-database:v0.1.0. Credentials come
# from the usual Docker config (~/.docker/config.json); loopback registries are
# spoken to over plain http.
# Environment: OUTPUT_DIR (default _output), CROSSPLANE_BIN (default: hack/tools.sh).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

[ $# -eq 1 ] || { echo "usage: hack/push.sh REGISTRY/REPOSITORY:TAG" >&2; exit 2; }
xpkg=${OUTPUT_DIR:-$root/_output}/function-database.xpkg
[ -f "$xpkg" ] || { echo "push: no $xpkg; run hack/package.sh first" >&2; exit 1; }

crossplane=$(tool crossplane CROSSPLANE_BIN)
"$crossplane" xpkg push -f "$xpkg" "$1"
