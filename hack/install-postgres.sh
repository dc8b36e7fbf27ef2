#!/usr/bin/env bash
# Installs what the scripts tests (go test ./scripts/) need, if missing:
# Debian's PostgreSQL server (package postgresql), pgBackRest and shellcheck,
# and Debian's prometheus, whose promtool the unit tests check the alert
# rules with (`promtool test rules`). Idempotent: a second run installs
# nothing. Prints the PostgreSQL bin directory (the highest installed major)
# on stdout; everything else goes to stderr.
#
# The tests find that directory themselves (or take POSTGRES_BIN); CI calls
# this script first so that a missing server is installed, not skipped.
# No default cluster is created and no server is started: the tests start
# their own, as the postgres OS user, on 127.0.0.1.
set -euo pipefail

bin_dir() {
	local dir best='' best_major=0 major
	for dir in /usr/lib/postgresql/*/bin; do
		[[ -x $dir/initdb && -x $dir/postgres ]] || continue
		major=${dir#/usr/lib/postgresql/}
		major=${major%%/*}
		[[ $major =~ ^[0-9]+$ ]] || continue
		if ((major > best_major)); then
			best=$dir
			best_major=$major
		fi
	done
	[[ -n $best ]] && printf '%s\n' "$best"
}

need=()
bin_dir >/dev/null || need+=(postgresql)
command -v shellcheck >/dev/null || need+=(shellcheck)
# The WAL archive's tests (scripts/archive_test.go) run Debian's pgBackRest.
command -v pgbackrest >/dev/null || need+=(pgbackrest)
command -v promtool >/dev/null || need+=(prometheus)

if ((${#need[@]})); then
	sudo=()
	if ((EUID != 0)); then
		command -v sudo >/dev/null || {
			echo "install-postgres: need root (or sudo) to install: ${need[*]}" >&2
			exit 1
		}
		sudo=(sudo)
	fi
	echo "install-postgres: installing ${need[*]}" >&2
	# Debian's postgresql would create and start a "main" cluster on 5432.
	"${sudo[@]}" mkdir -p /etc/postgresql-common
	if [[ ! -e /etc/postgresql-common/createcluster.conf ]]; then
		echo 'create_main_cluster = false' | "${sudo[@]}" tee /etc/postgresql-common/createcluster.conf >/dev/null
	fi
	# Debian's prometheus would start a system Prometheus on :9090 (through
	# its init script without systemd, failing the install if that fails).
	# Packages ask policy-rc.d before starting a service: one answering 101
	# (start nothing) stands during the install unless the machine has its
	# own (container images ship one). The tests start their own servers.
	policy=/usr/sbin/policy-rc.d
	if [[ ! -e $policy ]]; then
		trap '"${sudo[@]}" rm -f "$policy"' EXIT
		printf '#!/bin/sh\n# hack/install-postgres.sh: no service starts while it installs packages\nexit 101\n' |
			"${sudo[@]}" tee "$policy" >/dev/null
		"${sudo[@]}" chmod 0755 "$policy"
	fi
	"${sudo[@]}" apt-get update -qq >&2
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		-o Dpkg::Options::=--force-confold "${need[@]}" >&2
fi

dir=$(bin_dir) || {
	echo "install-postgres: no PostgreSQL server in /usr/lib/postgresql/*/bin after installing" >&2
	exit 1
}
id postgres >/dev/null 2>&1 || {
	echo "install-postgres: the postgresql package did not create the postgres OS user" >&2
	exit 1
}
command -v shellcheck >/dev/null || {
	echo "install-postgres: shellcheck still missing" >&2
	exit 1
}
command -v promtool >/dev/null || {
	echo "install-postgres: promtool still missing (Debian prometheus)" >&2
	exit 1
}
printf '%s\n' "$dir"
