#!/usr/bin/env bash
# Static checks CI enforces (make lint): gofmt, go vet, shellcheck over hack/
# and .ci/, golangci-lint (pinned, built from the Go module proxy into the
# cache), go mod tidy and go generate freshness (hack/generate.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
GOLANGCI_VERSION=v2.15.0
cache=${FUNCTION_DATABASE_CACHE:-$HOME/.cache/function-database}
lint="$cache/bin/golangci-lint-$GOLANGCI_VERSION"
if [ ! -x "$lint" ]; then
	echo "building golangci-lint $GOLANGCI_VERSION (cold: a few minutes)" >&2
	tmp=$(mktemp -d)
	GOBIN="$tmp" go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_VERSION"
	mkdir -p "$cache/bin" && mv "$tmp/golangci-lint" "$lint" && rm -rf "$tmp"
fi
[ "${1:-}" = "--build-only" ] && exit 0

echo "lint: gofmt" >&2
mapfile -t gofiles < <(git ls-files '*.go')
bad=$(gofmt -l "${gofiles[@]}" 2>/dev/null || true)
[ -z "$bad" ] || { echo "gofmt would change: $bad" >&2; exit 1; }

echo "lint: go vet (and the e2e module with its build tag)" >&2
go vet ./...
(cd e2e && go vet -tags e2e ./...)

echo "lint: shellcheck over hack/ and .ci/ (the pods' scripts: go test ./scripts/)" >&2
command -v shellcheck >/dev/null || { echo "lint: shellcheck missing: hack/install-postgres.sh installs it (Debian package shellcheck)" >&2; exit 1; }
shellcheck -x hack/*.sh .ci/run

echo "lint: golangci-lint (and the e2e module with its build tag)" >&2
"$lint" run ./...
(cd e2e && "$lint" run --build-tags e2e ./...)

echo "lint: go mod tidy and go generate are fresh (hack/generate.sh)" >&2
hack/generate.sh
if [ -n "$(git status --porcelain -- go.mod go.sum package/input input/v1beta1)" ]; then
	git --no-pager diff -- go.mod go.sum package/input input/v1beta1 >&2
	echo "go.mod/go.sum or generated files are stale: run make generate (hack/generate.sh) and commit" >&2
	exit 1
fi
