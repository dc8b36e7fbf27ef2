#!/usr/bin/env bash
# Builds the pinned crossplane CLI, Crossplane core, crane, versitygw and
# postgres_exporter from the Go module proxy into a cache folder outside the
# clone, keyed by version, so a second run is a no-op. Prints the bin directory
# on stdout.
#
#   hack/tools.sh            build all (crossplane, crossplane-core, crane, versitygw,
#                            postgres_exporter)
#   hack/tools.sh crossplane build one
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
CLI_VERSION=v2.5.0
CORE_VERSION=v2.3.4
CRANE_VERSION=v0.21.9
S3_VERSION=v1.8.0 # versitygw (tools-s3/go.mod pins the same)
# The metrics sidecar's exporter, which the e2e real node runs as the image
# e2e.local/postgres-exporter (tools-metrics/go.mod pins the same).
EXPORTER_VERSION=v0.17.1
cache=${FUNCTION_DATABASE_CACHE:-$HOME/.cache/function-database}
bin="$cache/bin"
mkdir -p "$bin"

build() { # name version module-dir package [ldflags]
	local name=$1 version=$2 dir=$3 pkg=$4 ldflags=${5:-}
	local out="$bin/$name-$version"
	if [ ! -x "$out" ]; then
		echo "building $name $version (cold: several minutes)" >&2
		(cd "$root/$dir" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w $ldflags" -o "$out.tmp" "$pkg")
		mv "$out.tmp" "$out"
	fi
	ln -sf "$name-$version" "$bin/$name"
}

want=${1:-all}
runtime_version=github.com/crossplane/crossplane-runtime/v2/pkg/version.version
case $want in all | crossplane)
	build crossplane "$CLI_VERSION" tools github.com/crossplane/cli/v2/cmd/crossplane "-X=$runtime_version=$CLI_VERSION" ;;
esac
case $want in all | crossplane-core)
	build crossplane-core "$CORE_VERSION" tools-core github.com/crossplane/crossplane/v2/cmd/crossplane "-X=$runtime_version=$CORE_VERSION" ;;
esac
case $want in all | crane)
	build crane "$CRANE_VERSION" tools github.com/google/go-containerregistry/cmd/crane ;;
esac
case $want in all | versitygw)
	build versitygw "$S3_VERSION" tools-s3 github.com/versity/versitygw/cmd/versitygw ;;
esac
# Upstream's release builds (promu) stamp the version without its "v", which
# --version and the postgres_exporter_build_info metric show; without it
# both say "". Cold: about 20 s of compile on two cores.
case $want in all | postgres_exporter)
	build postgres_exporter "$EXPORTER_VERSION" tools-metrics \
		github.com/prometheus-community/postgres_exporter/cmd/postgres_exporter \
		"-X=github.com/prometheus/common/version.Version=${EXPORTER_VERSION#v}" ;;
esac
echo "$bin"
