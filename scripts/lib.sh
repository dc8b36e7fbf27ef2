# shellcheck shell=bash
# Shared helpers for the function-database scripts. Sourced (never run) by the
# other scripts from their own directory:
#
#   . "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
#
# Nothing here prints a password or passes one as a process argument: secrets
# are read with bash builtins and written to pipes or 0600 files only.

# The server's own directory first: in the postgres images (and Debian),
# /usr/bin/psql, pg_isready and friends are postgresql-common's Perl wrapper,
# which costs more CPU than the query it runs; the probes run every few
# seconds in every pod.
if _pg_bin=$(command -v postgres) && [[ $_pg_bin == */* ]]; then
	PATH="${_pg_bin%/*}:$PATH"
fi
unset _pg_bin

# log MESSAGE...: one line on stderr, UTC timestamp and the script's tag
# (bash's printf %()T: no process per line).
log() {
	local TZ=UTC
	printf '%(%Y-%m-%dT%H:%M:%SZ)T %s: %s\n' -1 "${LOG_TAG:-database}" "$*" >&2
}

# utc_stamp: the current UTC time as YYYYmmddTHHMMSSZ.
utc_stamp() {
	local TZ=UTC
	printf '%(%Y%m%dT%H%M%SZ)T\n' -1
}

# now_ms: milliseconds on a monotonic clock (CLOCK_BOOTTIME, from
# /proc/uptime, 10 ms steps), for durations a decision depends on: bash's
# $SECONDS counts whole seconds, so a wait of G seconds measured with it
# ended up to a second early (the failover grace, seen in the tests), and
# the wall clock ($EPOCHREALTIME, the fallback) can jump.
now_ms() {
	local up
	if { read -r up _ </proc/uptime; } 2>/dev/null && [[ $up =~ ^([0-9]+)\.([0-9]{2})$ ]]; then
		printf '%d\n' "$((10#${BASH_REMATCH[1]} * 1000 + 10#${BASH_REMATCH[2]} * 10))"
	else
		up=${EPOCHREALTIME/[.,]/}
		printf '%d\n' "$((10#$up / 1000))"
	fi
}

# json_escape TEXT: TEXT as the inside of a JSON string.
json_escape() {
	local t=${1//\\/\\\\}
	t=${t//\"/\\\"}
	printf '%s' "${t//[$'\t\n\r']/ }"
}

# die MESSAGE...: log and exit 1.
die() {
	log "ERROR: $*"
	exit 1
}

# require_env NAME...: every named variable must be set and non-empty.
require_env() {
	local name
	for name in "$@"; do
		[[ -n ${!name:-} ]] || die "environment variable $name must be set"
	done
}

# require_int NAME MIN: the named variable must be an integer >= MIN.
require_int() {
	local name=$1 min=$2 value=${!1:-}
	if [[ ! $value =~ ^[0-9]+$ ]] || ((10#$value < min)); then
		die "environment variable $name must be an integer >= $min (got '$value')"
	fi
}

# read_file_into VAR PATH: the file's content (trailing newlines stripped) into
# VAR, with builtins only. Fails (1) if the file is missing or empty.
read_file_into() {
	local -n _out=$1
	local _path=$2 _content
	[[ -r $_path ]] || {
		log "cannot read $_path"
		return 1
	}
	_content=$(<"$_path")
	[[ -n $_content ]] || {
		log "$_path is empty"
		return 1
	}
	_out=$_content
}

# pod_ordinal: the StatefulSet ordinal of POD_NAME (text after the last '-').
pod_ordinal() {
	local ordinal=${POD_NAME##*-}
	[[ $POD_NAME == *-* && $ordinal =~ ^[0-9]+$ ]] || die "POD_NAME '$POD_NAME' does not end in -<ordinal>"
	printf '%d\n' "$((10#$ordinal))"
}

# slot_name: the physical replication slot of this pod (POD_NAME, '-' and any
# other character not allowed in a slot name turned into '_', lower case).
slot_name() {
	local name=${POD_NAME,,}
	printf '%s\n' "${name//[^a-z0-9_]/_}"
}

# State of the postgres container, read by probe.sh: starting (entrypoint.sh
# began; written first, over what a previous container left), initializing
# (initdb and bootstrap), cloning (standby waiting for / copying the
# primary), hold (deliberately not serving), running (postgres exec'd).
STATE_DIR=${STATE_DIR:-/tmp}
STATE_FILE="$STATE_DIR/database-state"
HOLD_FILE="$STATE_DIR/database-hold"
# When probe.sh last saw this standby replicate (epoch seconds); removed at
# every container start.
STREAMED_FILE="$STATE_DIR/database-streamed"

set_state() {
	mkdir -p "$STATE_DIR"
	printf '%s\n' "$1" >"$STATE_FILE.tmp"
	mv -f "$STATE_FILE.tmp" "$STATE_FILE"
	[[ $1 != running ]] || rm -f "$STREAMED_FILE"
	if [[ $1 == hold ]]; then
		: >"$HOLD_FILE"
	else
		rm -f "$HOLD_FILE"
	fi
}

# psql_set NAME VALUE: a psql meta-command line "\set NAME 'VALUE'" with VALUE
# quoted for psql (backslash escapes, single quote doubled); meant for psql's
# stdin, then used in SQL as :'NAME' (literal) or :"NAME" (identifier).
psql_set() {
	local value=$2
	value=${value//\\/\\\\}
	value=${value//\'/\'\'}
	value=${value//$'\n'/\\n}
	value=${value//$'\r'/\\r}
	value=${value//$'\t'/\\t}
	printf '\\set %s '\''%s'\''\n' "$1" "$value"
}

# conninfo_quote VALUE: VALUE as a libpq connection string value.
conninfo_quote() {
	local value=$1
	value=${value//\\/\\\\}
	value=${value//\'/\\\'}
	printf "'%s'" "$value"
}

# conf_quote VALUE: VALUE as a postgresql.conf / pg_hba string.
conf_quote() {
	printf "'%s'" "${1//\'/\'\'}"
}

# hba_quote NAME: a role or database name for pg_hba.conf / pg_ident.conf.
hba_quote() {
	printf '"%s"' "${1//\"/\"\"}"
}

# write_passfile PATH USER PASSWORD: a one-line 0600 libpq password file for
# USER on any host, replaced atomically.
write_passfile() {
	local path=$1 user=$2 password=$3 tmp
	local esc_user=${user//\\/\\\\} esc_pw=${password//\\/\\\\}
	esc_user=${esc_user//:/\\:}
	esc_pw=${esc_pw//:/\\:}
	tmp="$path.tmp"
	(
		umask 077
		printf '*:*:*:%s:%s\n' "$esc_user" "$esc_pw" >"$tmp"
	)
	mv -f "$tmp" "$path"
}

# replication_passfile: where a standby keeps the replication password for its
# walreceiver (next to PGDATA on the data volume, so it survives restarts and
# never travels inside a base backup).
replication_passfile() {
	printf '%s/replication.pgpass\n' "$(dirname "$PGDATA")"
}

# pg_major: the major version of the postgres binary in PATH.
pg_major() {
	local version
	version=$(postgres -V)
	[[ $version =~ \(PostgreSQL\)\ ([0-9]+) ]] || die "cannot parse postgres version '$version'"
	printf '%s\n' "${BASH_REMATCH[1]}"
}

# dir_is_empty DIR: true if DIR does not exist or has no entries.
dir_is_empty() {
	[[ ! -d $1 ]] && return 0
	local entries
	entries=$(find "$1" -mindepth 1 -maxdepth 1 -print -quit)
	[[ -z $entries ]]
}

# wipe_dir DIR: remove DIR's content (not DIR itself), leave it 0700.
wipe_dir() {
	mkdir -p "$1"
	find "$1" -mindepth 1 -delete
	chmod 0700 "$1"
}

# --- roles and failover ------------------------------------------------------
# The function decides which ordinal is the primary and writes it to the
# scripts ConfigMap (key `primary`, SCRIPTS_DIR/primary), with the number of
# instances (key `instances`). A ConfigMap reaches a running pod's volume
# late (the kubelet's sync, up to about a minute), so a script never trusts
# it alone to write: a primary also steps down when a peer is a primary on a
# newer timeline (newer_primary_peer), and data is only ever discarded once a
# primary on a newer timeline answers.

# current_primary: the ordinal SCRIPTS_DIR/primary names; 0 when absent or
# malformed (Databases composed before failover existed).
current_primary() {
	local p=0
	if [[ -r $SCRIPTS_DIR/primary ]]; then
		p=$(<"$SCRIPTS_DIR/primary")
		p=${p//[[:space:]]/}
	fi
	[[ $p =~ ^[0-9]+$ ]] || p=0
	printf '%d\n' "$((10#$p))"
}

# instance_count: SCRIPTS_DIR/instances, else PEER_ORDINALS + 1 (default 10).
instance_count() {
	local n=''
	[[ -r $SCRIPTS_DIR/instances ]] && n=$(<"$SCRIPTS_DIR/instances")
	n=${n//[[:space:]]/}
	[[ $n =~ ^[0-9]+$ ]] || n=$((${PEER_ORDINALS:-9} + 1))
	printf '%d\n' "$((10#$n))"
}

# peer_hosts: host:port of the other ordinals' postgres, one a line: the
# PEER_HOSTS override (space-separated host:port; tests), else every other
# ordinal below instance_count under PEER_DOMAIN (the headless Service,
# N-hl.NS.svc...: N-k.N-hl.NS.svc...). The headless Service publishes
# not-ready pods, so an unready peer still resolves.
peer_hosts() {
	local k prefix=${POD_NAME%-*} peer me n
	if [[ -n ${PEER_HOSTS:-} ]]; then
		for peer in $PEER_HOSTS; do printf '%s\n' "$peer"; done
		return 0
	fi
	[[ -n ${PEER_DOMAIN:-} ]] || return 0
	me=$(pod_ordinal)
	n=$(instance_count)
	for ((k = 0; k < n; k++)); do
		((k == me)) || printf '%s:%s\n' "$prefix-$k.$PEER_DOMAIN" "${PGPORT:-5432}"
	done
}

# superuser_passfile [PATH]: a 0600 passfile for the superuser (default
# STATE_DIR/superuser.pgpass; its path on stdout), for connections to peers.
superuser_passfile() {
	local su su_pw path=${1:-$STATE_DIR/superuser.pgpass}
	read_file_into su "$ADMIN_SECRET_DIR/username" || return 1
	read_file_into su_pw "$ADMIN_SECRET_DIR/password" || return 1
	mkdir -p "$STATE_DIR"
	write_passfile "$path" "$su" "$su_pw"
	printf '%s\n' "$path"
}

# remote_query HOST:PORT SQL [SECONDS]: the rows SQL returns on that
# postgres, as the superuser (fields separated by |). Fails when it does not
# connect within PEER_TIMEOUT seconds (default 2) or answer within SECONDS
# (default 4): a frozen or partitioned peer must not stall the caller.
remote_query() {
	local host=${1%:*} port=${1##*:} limit=${3:-4} su passfile rc=0
	read_file_into su "$ADMIN_SECRET_DIR/username" || return 1
	# One passfile per call: callers query peers in parallel.
	passfile=$(superuser_passfile "$STATE_DIR/superuser.$BASHPID.pgpass") || return 1
	timeout "$((${PEER_TIMEOUT:-2} + limit))" psql -X -A -t -q \
		-d "host=$(conninfo_quote "$host") port=$port user=$(conninfo_quote "$su") dbname=postgres passfile=$(conninfo_quote "$passfile") connect_timeout=${PEER_TIMEOUT:-2} gssencmode=disable options='-c statement_timeout=$((limit * 1000))'" \
		-c "$2" 2>/dev/null || rc=$?
	rm -f "$passfile"
	return "$rc"
}

# SQL_ROLE: "t|<timeline>" on a primary ("f|0" on a standby): the timeline
# of the WAL a primary writes now (pg_control_checkpoint's lags a promotion
# until the next checkpoint).
# SQL_WAL_TIMELINE is that timeline's expression (a primary's only: it
# fails in recovery), also in probe.sh's readiness query.
SQL_WAL_TIMELINE="('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int"
SQL_ROLE="SELECT CASE WHEN pg_is_in_recovery() THEN 'f|0' ELSE 't|' || $SQL_WAL_TIMELINE END"

# ISOLATION_MARKER (in PGDATA): a primary cut off from every peer stopped
# itself (sync-passwords.sh check_isolation); entrypoint.sh starts it again
# only once a peer answers.
# shellcheck disable=SC2034 # used by the scripts that source this file
ISOLATION_MARKER=database.isolated

# network_reaches_a_peer [HOST:PORT...]: 0 when the network reaches at
# least one peer (those named, and peer_hosts), or there is none: a TCP
# connection to its postgres accepted or refused, or
# its name known not to exist, all say the network works (that peer is
# down, at most); 1 when no peer gave such an answer within PEER_TIMEOUT
# (default 2): every attempt timed out, or failed on this side (a packet
# this host may not send, a network it has no route to, a name server it
# cannot reach), as from inside a partition. Every peer at once.
network_reaches_a_peer() {
	local peer line peers=0
	while IFS= read -r line; do
		peers=$((peers + 1))
		[[ $line == answered ]] && return 0
	done < <(
		while IFS= read -r peer; do
			[[ -n $peer ]] || continue
			{
				# shellcheck disable=SC2016 # expanded by the inner bash
				if err=$(LC_ALL=C timeout "${PEER_TIMEOUT:-2}" bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "${peer%:*}" "${peer##*:}" 2>&1) ||
					[[ $err == *"Connection refused"* || $err == *"Name or service not known"* || $err == *"No address associated"* ]]; then
					echo answered
				else
					echo silent
				fi
			} &
		done < <(printf '%s\n' "$@"; peer_hosts)
		wait
	)
	((peers == 0))
}

# isolation_witness: the HOST:PORT whose accepted connection tells a primary
# that the control plane still hears it: ISOLATION_WITNESS when set (empty:
# none), else the Kubernetes API server through its Service, as the kubelet
# gives every container (KUBERNETES_SERVICE_HOST and _PORT, whatever
# enableServiceLinks says). Prints nothing when there is none.
isolation_witness() {
	if [[ -n ${ISOLATION_WITNESS+set} ]]; then
		[[ -z $ISOLATION_WITNESS ]] || printf '%s\n' "$ISOLATION_WITNESS"
		return 0
	fi
	[[ -n ${KUBERNETES_SERVICE_HOST:-} && -n ${KUBERNETES_SERVICE_PORT:-} ]] || return 0
	local host=$KUBERNETES_SERVICE_HOST
	[[ $host == *:* ]] && host="[$host]"
	printf '%s:%s\n' "$host" "$KUBERNETES_SERVICE_PORT"
}

# witness_answers: 0 when the isolation witness accepts a TCP connection
# within PEER_TIMEOUT (default 2). Only an accepted connection counts: a
# refusal comes from this node's Service proxy when the API server has no
# endpoint, which says nothing about whether the control plane hears us.
witness_answers() {
	local w host
	w=$(isolation_witness)
	[[ -n $w ]] || return 1
	host=${w%:*}
	host=${host#[}
	host=${host%]}
	# shellcheck disable=SC2016 # expanded by the inner bash
	LC_ALL=C timeout "${PEER_TIMEOUT:-2}" bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$host" "${w##*:}" 2>/dev/null
}

# newer_primary_peer TIMELINE: prints the host:port of a peer that answers
# as a primary on a timeline above TIMELINE (and its timeline); fails when
# none does. Peers that do not answer are not primaries as far as anyone can
# tell: the rw Service only routes to the pod the function chose.
newer_primary_peer() {
	local mine=$1 peer line
	# Every peer at once: a probe must answer within its timeout even when
	# peers are slow or gone.
	while IFS= read -r line; do
		if [[ $line =~ ^(.*)\ t\|([0-9]+)$ ]] && ((BASH_REMATCH[2] > mine)); then
			printf '%s timeline %s\n' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
			return 0
		fi
	done < <(
		while IFS= read -r peer; do
			[[ -n $peer ]] || continue
			{ printf '%s %s\n' "$peer" "$(remote_query "$peer" "$SQL_ROLE" || true)"; } &
		done < <(peer_hosts)
		wait
	)
	return 1
}

# data_timeline: the timeline PGDATA is on (postgres stopped): its last
# checkpoint's, or the newest timeline history file's in pg_wal when that
# is newer: a promoted server writes the history file at once but updates
# its control file only at its next checkpoint, so a new primary that
# crashed before that still is on the newer timeline.
data_timeline() {
	local tli f h
	tli=$(LC_ALL=C pg_controldata "$PGDATA" 2>/dev/null | sed -n "s/^Latest checkpoint's TimeLineID: *//p")
	[[ $tli =~ ^[0-9]+$ ]] || tli=0
	for f in "$PGDATA"/pg_wal/*.history; do
		h=${f##*/}
		h=${h%.history}
		[[ $h =~ ^[0-9A-F]{8}$ ]] || continue
		((16#$h <= tli)) || tli=$((16#$h))
	done
	printf '%d\n' "$tli"
}

# --- the WAL archive -------------------------------------------------------
# archive_max INFO: the last segment pgbackrest info (text) reports in the
# WAL archive, or nothing. A replay of the archive to its end must reach it:
# stopping before (segment_before) means a segment in between is missing.
archive_max() {
	local line max=''
	while IFS= read -r line; do
		if [[ $line =~ wal\ archive\ min/max.*/([0-9A-F]{24})[[:space:]]*$ ]]; then
			max=${BASH_REMATCH[1]}
		fi
	done <<<"$1"
	printf '%s' "$max"
}

# segment_before A B: segment A is before segment B in the WAL's log and
# segment numbers, whatever their timelines (the first 8 of 24 digits).
segment_before() {
	[[ ${1:8} < ${2:8} ]]
}

# --- backups -----------------------------------------------------------------
# A backup of Database D taken at T (UTC, YYYYmmddTHHMMSSZ) is three files in
# one directory:
#   D-T.dump         pg_dump -Fc of the database
#   D-T.globals.sql  pg_dumpall --globals-only --no-role-passwords
#   D-T.sha256       sha256sum lines for both, written last (completion mark)
# A backup is good when all three exist and both checksums verify.

BACKUP_STAMP_RE='^[0-9]{8}T[0-9]{6}Z$'

# list_backups DIR PREFIX: backup base names (D-T) of Database PREFIX in DIR,
# newest first. With an empty PREFIX: of any Database.
list_backups() {
	local dir=$1 prefix=$2 path file base stamp
	local -A seen=()
	for path in "$dir"/*.dump "$dir"/*.globals.sql "$dir"/*.sha256; do
		[[ -e $path ]] || continue
		file=${path##*/}
		base=${file%.dump}
		base=${base%.globals.sql}
		base=${base%.sha256}
		[[ $base == *-* ]] || continue
		stamp=${base##*-}
		[[ $stamp =~ $BACKUP_STAMP_RE ]] || continue
		if [[ -n $prefix ]]; then
			[[ ${base%-*} == "$prefix" ]] || continue
		fi
		seen[$base]=1
	done
	((${#seen[@]})) || return 0
	# Sort by stamp (newest first), then name.
	for base in "${!seen[@]}"; do
		printf '%s %s\n' "${base##*-}" "$base"
	done | sort -r | cut -d' ' -f2
}

# verify_backup DIR BASE: 0 if BASE is a good backup; otherwise logs why and
# returns 1. Does not read the dump with pg_restore (see check_dump).
verify_backup() {
	local dir=$1 base=$2 ext line n=0
	for ext in dump globals.sql sha256; do
		[[ -f $dir/$base.$ext ]] || {
			log "backup $base: $base.$ext is missing"
			return 1
		}
	done
	# The checksum file must cover exactly the dump and the globals.
	while IFS= read -r line; do
		case $line in
		*"  $base.dump" | *"  $base.globals.sql") n=$((n + 1)) ;;
		*)
			log "backup $base: unexpected line in $base.sha256"
			return 1
			;;
		esac
	done <"$dir/$base.sha256"
	((n == 2)) || {
		log "backup $base: $base.sha256 does not list both files"
		return 1
	}
	(cd "$dir" && sha256sum --check --strict --quiet "$base.sha256" >/dev/null 2>&1) || {
		log "backup $base: checksum mismatch (truncated or corrupted)"
		return 1
	}
}

# check_dump FILE: pg_restore can read the archive's table of contents.
check_dump() {
	pg_restore --list "$1" >/dev/null || {
		log "$1: pg_restore --list failed"
		return 1
	}
}

# --- passwords -----------------------------------------------------------------
# read_verifier VAR FILE: the SCRAM-SHA-256 verifier in FILE (RFC 5802 /
# 7677, as PostgreSQL stores it: SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>)
# into VAR. The function computes the verifiers of the three roles'
# passwords and writes them into the superuser Secret (its *-verifier keys:
# secret.go), so that the pods set passwords with ALTER ROLE ... PASSWORD
# '<verifier>' and the plaintext never reaches the server, where a statement
# may be logged (log_statement, log_min_duration_statement, auto_explain, an
# error): only the verifier is then in the log. No pod computes one.
read_verifier() {
	local -n _verifier=$1
	local _read
	read_file_into _read "$2" || {
		log "no SCRAM verifier in $2 yet: the function writes it at its next reconcile (a Secret written by a function before verifiers has none)"
		return 1
	}
	[[ $_read =~ ^SCRAM-SHA-256\$[0-9]+:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$ ]] || {
		log "$2 is not a SCRAM-SHA-256 verifier"
		return 1
	}
	_verifier=$_read
}
