#!/usr/bin/env bash
# The generated files: go mod tidy, and the input CRD (package/input/) and
# deepcopy functions (input/v1beta1/) from controller-gen, built from the
# pinned tools-gen module (input/generate.go). hack/lint.sh runs it and fails
# when it changed a file: CI's check that they are committed fresh.
set -euo pipefail
cd "$(dirname "$0")/.."
go mod tidy
go generate -tags generate ./input/...
