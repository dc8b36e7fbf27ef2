#!/usr/bin/env bash
# Restore time per GiB on the real node (issue 23): a medium Database filled
# with GIB GiB, a full backup, a new Database restored from the archive,
# each timed (e2e/restorespeed_realnode_test.go). Not part of the full run.
#
#   hack/restore-speed.sh GIB      e.g. hack/restore-speed.sh 1
set -euo pipefail
[[ $# -eq 1 && $1 =~ ^[0-9]+(\.[0-9]+)?$ ]] || {
	echo "usage: hack/restore-speed.sh GIB" >&2
	exit 2
}
export E2E_RESTORE_GIB=$1
exec "$(dirname "$0")/e2e.sh" -run '^TestRestoreSpeed$' -timeout 90m
