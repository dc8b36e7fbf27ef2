# Helpers sourced by hack/render.sh, hack/package.sh and hack/push.sh.
# shellcheck shell=bash

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# tool NAME VAR: the path of a pinned tool. $VAR overrides it; otherwise
# hack/tools.sh builds it (once, into a cache outside the clone).
tool() {
	local name=$1 override=${!2:-}
	if [ -n "$override" ]; then
		echo "$override"
		return
	fi
	echo "$("$root/hack/tools.sh" "$name")/$name"
}

# listening PORT: whether something accepts connections on 127.0.0.1:PORT.
listening() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port: a loopback port nothing listens on (below the ephemeral range).
free_port() {
	local port
	for _ in $(seq 100); do
		port=$((20000 + RANDOM % 12000))
		if ! listening "$port"; then
			echo "$port"
			return
		fi
	done
	return 1
}

# wait_port PORT PID [SECONDS]: waits until 127.0.0.1:PORT accepts
# connections; fails if process PID exits first or time runs out.
wait_port() {
	local port=$1 pid=$2 tries=$((${3:-60} * 10))
	until listening "$port"; do
		kill -0 "$pid" 2>/dev/null || return 1
		tries=$((tries - 1))
		[ "$tries" -gt 0 ] || return 1
		sleep 0.1
	done
}

# stop PID: stops a background process started by this script.
stop() {
	[ -n "${1:-}" ] || return 0
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

# require_go: fails, saying what to install, unless a Go toolchain at least as
# new as go.mod's go line runs here. Debian's golang package is older than
# that: Go comes with the machine (/usr/local/go on ours).
require_go() {
	local want have
	want=$(sed -n 's/^go //p' "$root/go.mod")
	if ! command -v go >/dev/null; then
		echo "no go on PATH: install Go $want or later (go.mod's go line)" >&2
		return 1
	fi
	# Asked in the module, so that a GOTOOLCHAIN switch is what answers.
	have=$(cd "$root" && go env GOVERSION) || return 1
	have=${have#go}
	if [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n1)" != "$want" ]; then
		echo "go $have is older than go.mod's go $want: install Go $want or later" >&2
		return 1
	fi
}

# function_name REGISTRY/REPOSITORY: the name Crossplane's package manager
# gives the Function it installs for a dependency on that package: its
# repository path (no registry) as a DNS label, as xpkg.ToDNSLabel in
# crossplane-runtime does it (keep [a-z0-9]; '.', '/', ':', '-' become '-'
# except at index 0, 62 and the end; stop after index 62; trim '-').
# Fails unless the reference names a registry host and has no tag or digest.
function_name() {
	local ref=$1 host repo out='' c i
	host=${ref%%/*}
	repo=${ref#*/}
	if [ "$host" = "$ref" ] || [ -z "$repo" ] || [[ $ref == *@* ]] || [[ ${ref##*/} == *:* ]] ||
		! [[ $host == *.* || $host == *:* || $host == localhost ]]; then
		return 1
	fi
	for ((i = 0; i < ${#repo}; i++)); do
		c=${repo:i:1}
		case $c in
		[abcdefghijklmnopqrstuvwxyz0123456789]) out+=$c ;;
		. | / | : | -) if ((i != 0 && i != 62 && i != ${#repo} - 1)); then out+=-; fi ;;
		esac
		((i != 62)) || break
	done
	while [[ $out == -* ]]; do out=${out#-}; done
	while [[ $out == *- ]]; do out=${out%-}; done
	echo "$out"
}
