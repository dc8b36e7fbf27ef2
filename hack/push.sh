#!/usr/bin/env bash
# Pushes the packages built by hack/package.sh with the crossplane CLI:
#   hack/push.sh FUNCTION_REF [CONFIGURATION_REF]
# e.g. hack/push.sh xpkg.example.test/acme/function-database:v0.1.0 \
#                   xpkg.example.test/acme/configuration-database:v0.1.0
# The function's per-platform packages go up as one OCI index (one manifest
# per platform) under FUNCTION_REF; the Configuration, when asked, under
# CONFIGURATION_REF. Its dependency was fixed when it was built
# (FUNCTION_PACKAGE): push the function where it points, or to a mirror an
# ImageConfig rewrites it to (docs/packaging.md).
# Credentials come from the usual Docker config (~/.docker/config.json).
# Registries are spoken to over HTTPS (a loopback one over plain HTTP when it
# does not answer HTTPS); an extra CA: SSL_CERT_FILE=ca.pem hack/push.sh ...
# Environment: OUTPUT_DIR (default _output), CROSSPLANE_BIN (default: hack/tools.sh).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: hack/push.sh FUNCTION_REF [CONFIGURATION_REF]" >&2
	exit 2
fi
out=${OUTPUT_DIR:-$root/_output}
shopt -s nullglob
fn_xpkgs=("$out"/function-database-*.xpkg)
shopt -u nullglob
[ ${#fn_xpkgs[@]} -gt 0 ] || { echo "push: no $out/function-database-*.xpkg; run hack/package.sh first" >&2; exit 1; }

crossplane=$(tool crossplane CROSSPLANE_BIN)
files=$(IFS=,; echo "${fn_xpkgs[*]}")
echo "push: $1 (${fn_xpkgs[*]##*/})" >&2
"$crossplane" xpkg push --package-files="$files" "$1"

if [ $# -eq 2 ]; then
	cfg=$out/configuration-database.xpkg
	[ -f "$cfg" ] || { echo "push: no $cfg; run hack/package.sh first" >&2; exit 1; }
	echo "push: $2 (${cfg##*/})" >&2
	"$crossplane" xpkg push --package-files="$cfg" "$2"
fi
