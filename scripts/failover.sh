#!/usr/bin/env bash
# failover.sh: the failover Job, composed by the function when the primary's
# pod is not ready (docs/failover.md). One run decides and acts once:
#
#   1. For GRACE_SECONDS, and at least FENCE_SECONDS, the primary is asked,
#      every second, whether it answers as a primary. If it does, the Job
#      ends "not-needed": a primary that restarts (a roll, a deleted pod, a
#      hang its kubelet killed) is not failed over. A primary still starting
#      up (rejecting connections) extends the wait, up to
#      STARTING_MAX_SECONDS. FENCE_SECONDS is the fence: the bound of the
#      primary's liveness probe, after which its kubelet has killed a
#      postgres that answers nothing. A primary that hung (frozen, stalled
#      on its disk) and resumes after the promotion has no session left to
#      acknowledge a write on, under async as under sync.
#   2. Every other instance is asked for its timeline and the WAL it has
#      received. One that already answers as a primary was promoted by an
#      earlier run whose result was not recorded: it is the answer again.
#      Otherwise the most advanced standby (newest timeline, then the most
#      WAL held, then lowest ordinal, so the choice is deterministic) is
#      chosen; with synchronous replication it holds every committed write.
#   3. The chosen standby's replay settles, it is asked once more that
#      the primary is still silent, and is promoted (pg_promote). Replication
#      slots for every other instance are created on it, so that standbys
#      following it, and the old primary cloning it, find theirs.
#   4. The outcome is the termination message (one JSON line), which the
#      function reads back through the Job's pod:
#        {"result":"promoted","from":F,"to":T,"timeline":TLI,"lsn":"X/Y"}
#        {"result":"not-needed","from":F,"reason":"..."}
#        {"result":"found","from":F,"to":T,"timeline":TLI,"lsn":"X/Y","reason":"..."}
#      ("found": F answers as a standby and T is the primary on the last
#      recorded timeline: F was named wrongly, nothing is promoted.)
#      Exit 5 when no standby answers (the Job retries, bounded by its
#      deadline).
#
# The Job never touches the old primary: it cannot stop a frozen process on
# another node. Fencing is elsewhere: the kubelet kills a hung primary
# (FENCE_SECONDS above), the rw Service's selector moves to the promoted
# pod, the old primary's readiness probe stops it when it sees the newer
# timeline (probe.sh), and its entrypoint rejoins it as a standby. A
# primary alive but cut off from every peer and from the API server stops
# itself (sync-passwords.sh check_isolation) before its pod turns unready.
#
# Environment: DATABASE (N), PRIMARY_ORDINAL (F, the lost primary),
# INSTANCES, PEER_DOMAIN (N-hl.NS.svc...; instances are N-k.PEER_DOMAIN),
# PGPORT, ADMIN_SECRET_DIR (username, password); what the function knew when
# it composed the Job: DURABILITY (sync or async; unset: detected from the
# standbys), LAST_TIMELINE (default 1), QUALIFIED_ORDINALS (the standbys it
# may promote; unset: every one); MODE=switchover and TARGET_ORDINAL for a
# planned switchover (MODE default failover); FENCE_SECONDS (default 0: no
# fence beyond the grace); optional GRACE_SECONDS (default 10),
# STARTING_MAX_SECONDS (default 120), STALL_LOOKS (default 3),
# CANDIDATE_ROUNDS (default 15), PROMOTE_WAIT_SECONDS (default 60),
# STATE_DIR (default /tmp), PEER_TIMEOUT
# (default 2), TERMINATION_LOG (default /dev/termination-log), FAILOVER_HOSTS
# (tests: space-separated host:port by ordinal, replacing
# N-k.PEER_DOMAIN:PGPORT).
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
LOG_TAG=failover

require_env DATABASE PRIMARY_ORDINAL INSTANCES PGPORT ADMIN_SECRET_DIR
require_int PRIMARY_ORDINAL 0
require_int INSTANCES 2
GRACE_SECONDS=${GRACE_SECONDS:-10}
require_int GRACE_SECONDS 0
FENCE_SECONDS=${FENCE_SECONDS:-0}
require_int FENCE_SECONDS 0
# PROMOTE_WAIT_SECONDS: how long the chosen standby's replay may take to
# settle before the promotion is asked, and how long pg_promote waits at
# once (the wait goes on while the replay advances: promote).
PROMOTE_WAIT_SECONDS=${PROMOTE_WAIT_SECONDS:-60}
require_int PROMOTE_WAIT_SECONDS 1
# STALL_LOOKS: looks in a row at one replay position that make a replay
# settled (settled) or stuck (promote).
STALL_LOOKS=${STALL_LOOKS:-3}
require_int STALL_LOOKS 2
# silence_seconds: how long the primary must stay silent before a standby
# is promoted: the grace, and never less than the fence.
silence_seconds=$((GRACE_SECONDS > FENCE_SECONDS ? GRACE_SECONDS : FENCE_SECONDS))
STARTING_MAX_SECONDS=${STARTING_MAX_SECONDS:-120}
require_int STARTING_MAX_SECONDS 0
TERMINATION_LOG=${TERMINATION_LOG:-/dev/termination-log}
durability=${DURABILITY:-}
[[ -z $durability || $durability == sync || $durability == async ]] || die "DURABILITY must be sync or async, got '$durability'"
LAST_TIMELINE=${LAST_TIMELINE:-1}
require_int LAST_TIMELINE 1
[[ ${QUALIFIED_ORDINALS:-} =~ ^[0-9\ ]*$ ]] || die "QUALIFIED_ORDINALS must be ordinals separated by spaces, got '$QUALIFIED_ORDINALS'"
from=$((10#$PRIMARY_ORDINAL))
((from < INSTANCES)) || die "PRIMARY_ORDINAL $from is not below INSTANCES $INSTANCES"

declare -a hosts
if [[ -n ${FAILOVER_HOSTS:-} ]]; then
	read -r -a hosts <<<"$FAILOVER_HOSTS"
	((${#hosts[@]} >= INSTANCES)) || die "FAILOVER_HOSTS names ${#hosts[@]} hosts for $INSTANCES instances"
else
	require_env PEER_DOMAIN
	for ((k = 0; k < INSTANCES; k++)); do hosts[k]="$DATABASE-$k.$PEER_DOMAIN:$PGPORT"; done
fi

# finish JSON: the outcome, for the function (termination message) and the log.
finish() {
	printf '%s\n' "$1"
	printf '%s\n' "$1" >"$TERMINATION_LOG" 2>/dev/null || log "cannot write $TERMINATION_LOG"
	exit 0
}

# lsn_int X/Y: an LSN as one integer (64 bits fit bash arithmetic).
lsn_int() {
	local hi=${1%/*} lo=${1#*/}
	[[ $1 == */* && $hi =~ ^[0-9A-Fa-f]+$ && $lo =~ ^[0-9A-Fa-f]+$ ]] || {
		echo -1
		return
	}
	echo $((16#$hi * 4294967296 + 16#$lo))
}

# seconds_since START_MS: the time since START_MS (now_ms) as seconds with
# two decimals.
seconds_since() {
	local d=$(($(now_ms) - $1))
	printf '%d.%02d\n' "$((d / 1000))" "$((d % 1000 / 10))"
}

# primary_answers: 0 when the lost primary answers as a primary; sets
# primary_state to accepting, starting (postgres up, not yet accepting) or
# silent.
primary_answers() {
	local host=${hosts[from]%:*} port=${hosts[from]##*:} rc=0 row
	row=$(remote_query "${hosts[from]}" "$SQL_ROLE") || row=''
	if [[ $row == t\|* ]]; then
		primary_state=accepting
		return 0
	fi
	pg_isready -q -t 2 -h "$host" -p "$port" || rc=$?
	if ((rc == 1)); then primary_state=starting; else primary_state=silent; fi
	return 1
}

# A promotion by an earlier run of this Job that was not recorded: report it.
# And a Job started for the wrong instance: when the "lost primary" answers
# as a standby and another instance answers as a primary on the last
# recorded timeline, the one named was never the primary (the ConfigMap's
# primary key edited to a standby's ordinal): promoting a standby would
# leave that live primary's writes since the edit on no copy that survives
# (with async, those a client still sent it); it is reported "found", and
# nothing is promoted. Every promotion starts a new timeline, so a primary
# on the last recorded one is the recorded primary itself.
report_existing_primary() {
	local k row from_role
	for ((k = 0; k < INSTANCES; k++)); do
		((k != from)) || continue
		row=$(remote_query "${hosts[k]}" "SELECT ($SQL_ROLE) || '|' || pg_current_wal_lsn() WHERE NOT pg_is_in_recovery()") || continue
		if [[ $row =~ ^t\|([0-9]+)\|([0-9A-Fa-f]+/[0-9A-Fa-f]+)$ ]] && ((BASH_REMATCH[1] == LAST_TIMELINE)); then
			[[ -n ${from_role:-} ]] || from_role=$(remote_query "${hosts[from]}" "SELECT pg_is_in_recovery()") || from_role=silent
			if [[ $from_role == t ]]; then
				log "ordinal $k answers as the primary on timeline ${BASH_REMATCH[1]}, the last recorded one, and ordinal $from, named the primary, is a standby: ordinal $from was never the primary (the ConfigMap's primary key edited?); reporting ordinal $k, promoting nothing"
				finish "{\"result\":\"found\",\"from\":$from,\"to\":$k,\"timeline\":${BASH_REMATCH[1]},\"lsn\":\"${BASH_REMATCH[2]}\",\"reason\":\"ordinal $from answers as a standby and ordinal $k as the primary on the last recorded timeline ${BASH_REMATCH[1]}\"}"
			fi
		fi
		if [[ $row =~ ^t\|([0-9]+)\|([0-9A-Fa-f]+/[0-9A-Fa-f]+)$ ]] && ((BASH_REMATCH[1] <= LAST_TIMELINE)); then
			log "ordinal $k answers as a primary on timeline ${BASH_REMATCH[1]}, not above the lost primary's $LAST_TIMELINE: a deposed primary, not a promotion; ignored"
			continue
		fi
		if [[ $row =~ ^t\|([0-9]+)\|([0-9A-Fa-f]+/[0-9A-Fa-f]+)$ ]]; then
			log "ordinal $k already answers as a primary (timeline ${BASH_REMATCH[1]}): an earlier run promoted it"
			finish "{\"result\":\"promoted\",\"from\":$from,\"to\":$k,\"timeline\":${BASH_REMATCH[1]},\"lsn\":\"${BASH_REMATCH[2]}\",\"reason\":\"PrimaryLost\"}"
		fi
	done
}

# switchover: a planned move of the primary to TARGET_ORDINAL, losing
# nothing: the old primary turns read-only and its sessions end, the target
# replays everything the old primary wrote, then it is promoted. Any failure
# before the promotion makes the old primary writable again.
# SWITCHOVER_FENCE: the synchronous standby name a switchover makes the old
# primary's commits wait for. No instance has it (application_name is the
# pod's name).
SWITCHOVER_FENCE=database_switchover_fence

# unfence: the old primary writable again (a switchover that failed before
# it promoted anything).
# shellcheck disable=SC2317 # run by the EXIT trap
unfence() {
	log "switchover failed before the promotion: making ordinal $from writable again"
	if ! { remote_query "${hosts[from]}" "ALTER SYSTEM RESET default_transaction_read_only" >/dev/null &&
		remote_query "${hosts[from]}" "ALTER SYSTEM RESET synchronous_standby_names" >/dev/null &&
		remote_query "${hosts[from]}" "ALTER SYSTEM RESET synchronous_commit" >/dev/null &&
		remote_query "${hosts[from]}" "SELECT pg_reload_conf()" >/dev/null; }; then
		log "WARNING: could not unfence ordinal $from: it stays read-only until a Job retries the switchover or its settings are reset (ALTER SYSTEM RESET default_transaction_read_only, synchronous_standby_names, synchronous_commit)"
	fi
}

switchover() {
	local to=$((10#$TARGET_ORDINAL)) row end i
	((to != from && to < INSTANCES)) || die "TARGET_ORDINAL $to must be another instance below $INSTANCES"
	# Asked again for up to 30 s: a new pod's first connections can be
	# refused while the NetworkPolicy's implementation learns its address
	# (seen with kube-router on the real node).
	local standby=''
	for ((i = 0; i < 30; i++)); do
		row=$(remote_query "${hosts[from]}" "$SQL_ROLE") || row=''
		standby=$(remote_query "${hosts[to]}" "SELECT pg_is_in_recovery()") || standby=''
		[[ $row != t\|* || $standby != t ]] || break
		sleep 1
	done
	[[ $row == t\|* ]] || die "the primary ordinal $from does not answer as a primary ('$row'): not switching over"
	[[ $standby == t ]] || die "ordinal $to does not answer as a standby ('$standby'): not switching over"
	trap unfence EXIT
	log "switchover from ordinal $from to $to: fencing the primary (read-only, every commit waits for a standby that does not exist) and ending its sessions"
	# default_transaction_read_only alone did not fence: a session's BEGIN
	# READ WRITE overrides it (25 of 100 acknowledged writes were lost
	# so). The synchronous fence holds whatever a transaction says: its
	# COMMIT waits for a standby named $SWITCHOVER_FENCE, which none is, so
	# it is never acknowledged; what it wrote still streams to the target
	# and survives the promotion. Only a session that turned
	# synchronous_commit off itself, and so accepted losing commits on a
	# crash, can still be acknowledged.
	{ remote_query "${hosts[from]}" "ALTER SYSTEM SET default_transaction_read_only = on" >/dev/null &&
		remote_query "${hosts[from]}" "ALTER SYSTEM SET synchronous_standby_names = '$SWITCHOVER_FENCE'" >/dev/null &&
		remote_query "${hosts[from]}" "ALTER SYSTEM SET synchronous_commit = on" >/dev/null &&
		remote_query "${hosts[from]}" "SELECT pg_reload_conf()" >/dev/null; } || die "cannot fence the primary"
	# The reload reaches every backend at its next command; sessions end.
	remote_query "${hosts[from]}" "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()" >/dev/null ||
		die "cannot end the primary's sessions"
	# Wait until the target replayed everything the primary wrote, asked
	# again until the primary's position stands still (autovacuum and
	# checkpoints still write, and a fenced commit's record is written
	# before it waits).
	for ((i = 0; i < 120; i++)); do
		end=$(remote_query "${hosts[from]}" "SELECT pg_current_wal_lsn() WHERE current_setting('synchronous_standby_names') = '$SWITCHOVER_FENCE'") || end=''
		[[ -n $end ]] || die "the primary does not answer as fenced: not promoting"
		row=$(remote_query "${hosts[to]}" "SELECT pg_last_wal_replay_lsn() >= '$end'::pg_lsn") || row=''
		if [[ $row == t ]]; then
			row=$(remote_query "${hosts[from]}" "SELECT pg_current_wal_lsn() = '$end'::pg_lsn") || row=''
			[[ $row != t ]] || break
		fi
		sleep 1
	done
	[[ $row == t ]] || die "ordinal $to did not replay all the primary wrote within 120s"
	log "ordinal $to replayed everything the primary wrote (up to $end)"
	# The other standbys follow the target from here, as in a failover: one
	# left streaming from a pod named by an earlier failover (the Job
	# repoints standbys to the chosen pod, not the Service) would keep
	# following the old primary, then cascade from it once it rejoins.
	detach_standbys "$to"
	# From here the promotion may happen even if pg_promote's answer is
	# lost: the old primary is never unfenced again by this run (its probe
	# stops it once the target answers on a newer timeline; a retried Job
	# fences it again before anything else).
	trap - EXIT
	promote "$to" Switchover
}

# promote T REASON: promote ordinal T, create the other ordinals' slots on
# it, and report.
promote() {
	local to=$1 reason=$2 row at='' stood=0
	# pg_promote waits up to PROMOTE_WAIT_SECONDS for the promotion: so does
	# the query.
	row=$(remote_query "${hosts[to]}" "SELECT pg_promote(true, $PROMOTE_WAIT_SECONDS)" $((PROMOTE_WAIT_SECONDS + 5))) || row=''
	# The standby ends recovery only once it replayed every record it holds,
	# and a long backlog (replay is one process, and a lagging standby may be
	# the only one with the last commits) outlasts that wait: pg_promote
	# then answers f, and the promotion goes on regardless (asked once, it
	# cannot be taken back). Wait while the replay advances; a replay that
	# stands still (or a standby that does not answer) for STALL_LOOKS
	# looks 5 s apart fails the run. Before, the
	# run failed after 60 s, and every retry waited out the fence again.
	[[ $row != f ]] || log "pg_promote on ordinal $to did not end within ${PROMOTE_WAIT_SECONDS}s: the promotion goes on; waiting while its replay advances"
	while [[ $row == f ]]; do
		sleep 5
		row=$(remote_query "${hosts[to]}" "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()::text ELSE 'promoted' END") || row=''
		case $row in
		promoted) row=t ;;
		*/*)
			if [[ $row == "$at" ]]; then
				stood=$((stood + 1))
				((stood < STALL_LOOKS)) || die "ordinal $to was asked to promote and its replay stands at $row"
			else
				at=$row stood=0
			fi
			log "ordinal $to replays what it holds before its promotion ends: at $row"
			row=f
			;;
		*)
			# No answer (a standby busy replaying can miss PEER_TIMEOUT):
			# one more look, counted as standing still.
			stood=$((stood + 1))
			((stood < STALL_LOOKS)) || die "ordinal $to was asked to promote and has not answered, or stood still, for $STALL_LOOKS looks"
			log "ordinal $to does not answer while its promotion goes on (look $stood of $STALL_LOOKS)"
			row=f
			;;
		esac
	done
	[[ $row == t ]] || die "pg_promote on ordinal $to did not complete (answer '$row')"
	create_slots "$to" || log "could not create the replication slots on ordinal $to; standbys that miss theirs are cloned again"
	row=$(remote_query "${hosts[to]}" "SELECT ($SQL_ROLE) || '|' || pg_current_wal_lsn()") || row=''
	[[ $row =~ ^t\|([0-9]+)\|([0-9A-Fa-f]+/[0-9A-Fa-f]+)$ ]] || die "ordinal $to does not answer as a primary after the promotion (answer '$row')"
	log "ordinal $to is the primary on timeline ${BASH_REMATCH[1]}"
	finish "{\"result\":\"promoted\",\"from\":$from,\"to\":$to,\"timeline\":${BASH_REMATCH[1]},\"lsn\":\"${BASH_REMATCH[2]}\",\"reason\":\"$reason\"}"
}

# hold REASON: no promotion now, and the reason as the outcome; exit 5, so
# the Job runs again (bounded by its deadline) and the function reports it.
hold() {
	log "HOLDING, not promoting: $1"
	printf '%s\n' "{\"result\":\"held\",\"from\":$from,\"reason\":\"$(json_escape "$1")\"}" >"$TERMINATION_LOG" 2>/dev/null || true
	exit 5
}

# qualified K: 0 when ordinal K may be promoted under asynchronous
# replication: its pod was ready when the function composed this Job
# (QUALIFIED_ORDINALS), so it streamed within the readiness bound
# (probe.sh: 60 s, 256 MiB). Without the variable (a Job composed by an
# older function) every standby is.
qualified() {
	[[ -n ${QUALIFIED_ORDINALS+set} ]] || return 0
	[[ " $QUALIFIED_ORDINALS " == *" $1 "* ]]
}

# detect_durability K...: DURABILITY, or when the Job does not say, what the
# standbys K... were configured with (the function's tier settings are the
# same file on every instance): sync when synchronous_standby_names is set.
detect_durability() {
	local k row
	[[ -z $durability ]] || return 0
	durability=async
	for k in "$@"; do
		row=$(remote_query "${hosts[k]}" "SELECT current_setting('synchronous_standby_names') <> ''") || row=t
		[[ $row != t ]] || durability=sync
	done
	log "durability $durability (from the standbys' synchronous_standby_names)"
}

# slot_of K: the physical slot of ordinal K (entrypoint.sh slot_name).
slot_of() {
	local name=$DATABASE-$1
	name=${name,,}
	printf '%s\n' "${name//[^a-z0-9_]/_}"
}

# create_slots T: on ordinal T, a slot for every other ordinal (standbys
# following T, and the old primary cloning or rewinding onto it).
create_slots() {
	local to=$1 k slots=''
	for ((k = 0; k < INSTANCES; k++)); do
		((k != to)) || continue
		slots+="${slots:+, }('$(slot_of "$k")')"
	done
	remote_query "${hosts[to]}" "SELECT count(pg_create_physical_replication_slot(s, true)) FROM (VALUES $slots) v(s)
		WHERE s NOT IN (SELECT slot_name FROM pg_replication_slots)" >/dev/null
}

# conninfo_to CONNINFO HOST PORT: CONNINFO with its host and port replaced.
conninfo_to() {
	local c=" $1 " q="'([^'\\\\]|\\\\.)*'"
	c=$(sed -E "s/ host=($q|[^ ]+) / /; s/ hostaddr=($q|[^ ]+) / /; s/ port=($q|[^ ]+) / /" <<<"$c")
	c=${c# }
	printf '%s host=%s port=%s\n' "${c% }" "$2" "$3"
}

# detach_standbys T: repoint every other standby to stream from ordinal T,
# and wait until each does. Under durability sync every one must: hold
# otherwise.
declare -A original_conninfo
detach_standbys() {
	local to=$1 k conninfo new host=${hosts[$1]%:*} port=${hosts[$1]##*:} row i
	create_slots "$to" || log "could not create the replication slots on ordinal $to"
	for ((k = 0; k < INSTANCES; k++)); do
		((k != from && k != to)) || continue
		if ! conninfo=$(remote_query "${hosts[k]}" "SELECT current_setting('primary_conninfo') WHERE pg_is_in_recovery()"); then
			[[ $durability != sync ]] || hold "ordinal $k stopped answering before it could be detached from the old primary; with durability sync it could still acknowledge the old primary's commits"
			log "WARNING: ordinal $k does not answer: it is not repointed to ordinal $to"
			continue
		fi
		[[ -n $conninfo ]] || continue
		new=$(conninfo_to "$conninfo" "$host" "$port")
		if [[ $new != "$conninfo" ]]; then
			if ! { remote_query "${hosts[k]}" "ALTER SYSTEM SET primary_conninfo = '${new//\'/\'\'}'" >/dev/null &&
				remote_query "${hosts[k]}" "SELECT pg_reload_conf()" >/dev/null; }; then
				[[ $durability != sync ]] || hold "ordinal $k could not be repointed to ordinal $to"
				log "WARNING: ordinal $k could not be repointed to ordinal $to"
				continue
			fi
			original_conninfo[$k]=$conninfo
		fi
		for ((i = 0; i < 30; i++)); do
			row=$(remote_query "${hosts[k]}" "SELECT count(*) FROM pg_stat_wal_receiver
				WHERE status = 'streaming' AND position(' host=$host ' in ' ' || conninfo || ' ') > 0 AND position(' port=$port ' in ' ' || conninfo || ' ') > 0") || row=''
			[[ $row != 1 ]] || break
			sleep 1
		done
		if [[ $row != 1 ]]; then
			[[ $durability != sync ]] || hold "ordinal $k did not start streaming from ordinal $to within 30s; with durability sync it must stop following the old primary first"
			log "WARNING: ordinal $k does not stream from ordinal $to yet"
			continue
		fi
		log "ordinal $k now streams from ordinal $to (it no longer follows the old primary)"
	done
}

# reattach_standbys: undo detach_standbys (the old primary answered again).
reattach_standbys() {
	local k
	for k in "${!original_conninfo[@]}"; do
		if ! { remote_query "${hosts[k]}" "ALTER SYSTEM SET primary_conninfo = '${original_conninfo[$k]//\'/\'\'}'" >/dev/null &&
			remote_query "${hosts[k]}" "SELECT pg_reload_conf()" >/dev/null; }; then
			log "WARNING: could not point ordinal $k back at the primary; it streams from a standby (cascading) until its next start"
		fi
	done
}

if [[ ${MODE:-failover} == switchover ]]; then
	require_int TARGET_ORDINAL 0
	switchover
fi

log "primary ordinal $from (${hosts[from]}) is not ready; watching it for ${silence_seconds}s (grace ${GRACE_SECONDS}s, fence ${FENCE_SECONDS}s)"
# Milliseconds on a monotonic clock (now_ms): the grace is a floor on how
# long a primary is given to come back, never a second less.
start=$(now_ms)
silent_since=$start
primary_state=silent
while :; do
	# An unrecorded promotion first: a frozen old primary that resumes still
	# answers as a primary (on the old timeline) until its probe fences it.
	report_existing_primary
	if primary_answers; then
		finish "{\"result\":\"not-needed\",\"from\":$from,\"reason\":\"the primary answered again after $(seconds_since "$start")s\"}"
	fi
	now=$(now_ms)
	[[ $primary_state == silent ]] || silent_since=$now
	if ((now - silent_since >= silence_seconds * 1000)); then
		break
	fi
	if ((now - start >= (silence_seconds + STARTING_MAX_SECONDS) * 1000)); then
		log "the primary has been starting up for more than ${STARTING_MAX_SECONDS}s without accepting connections"
		break
	fi
	sleep 1
done
log "primary ordinal $from did not answer as a primary for ${silence_seconds}s (last: $primary_state): choosing a standby"

# standby_position K: "recovery|timeline|replayed|received" of ordinal K
# ("f" first when it is no standby); fails when it does not answer.
standby_position() {
	remote_query "${hosts[$1]}" "SELECT pg_is_in_recovery(),
		coalesce((SELECT received_tli FROM pg_stat_wal_receiver WHERE received_tli > 0), (SELECT timeline_id FROM pg_control_checkpoint())),
		coalesce(pg_last_wal_replay_lsn(), '0/0'),
		coalesce(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn(), '0/0')"
}

# settled K REPLAYED RECEIVED: 0 once ordinal K replayed all it will: up to
# what it received, or standing at REPLAYED for STALL_LOOKS looks in a row.
# The second is a primary lost while it wrote a record: the standby received
# the record's beginning, which it can never replay, so "replayed >=
# received" never comes (seen on the real node: both standbys stood at a
# record that went on past the last page they received, and every run of
# the Job gave up, for minutes, until the old primary came back). Such a
# record was never committed anywhere: a commit returns once its whole
# record is flushed.
declare -a stood_at stood_for
settled() {
	local k=$1 replayed=$2 received=$3
	if (($(lsn_int "$replayed") >= $(lsn_int "$received"))); then
		return 0
	fi
	if [[ ${stood_at[k]:-} == "$replayed" ]]; then
		stood_for[k]=$((${stood_for[k]:-1} + 1))
	else
		stood_at[k]=$replayed stood_for[k]=1
	fi
	((stood_for[k] >= STALL_LOOKS))
}

# Every standby must answer before one is chosen: one that is slow to
# answer (a loaded node) may hold WAL the others lack, and promoting another
# would lose its commits and leave it diverged. Asynchronous: after
# CANDIDATE_ROUNDS rounds (2 s apart) the choice goes ahead among the
# qualified standbys that answered. Synchronous: never among a subset. With
# synchronous_standby_names 'ANY 1 (*)' a commit returned once any one
# standby flushed it, so the last acknowledged commits may be on a silent
# one alone: the Job holds instead (S1, S4 in docs/failover.md).
# A standby is ranked by the WAL it holds: what it replayed, or what it
# received when that is more (a settled standby short of it holds a record
# it cannot replay, or waits on a query that conflicts with replay).
# Received alone is not enough: it is reset when a walreceiver restarts
# (it then counts from the segment it streams from again), and comparing it
# chose a standby with less WAL (seen on the real node). A standby still
# replaying when the rounds run out is ranked all the same: pg_promote
# replays everything it flushed (skipping it lost the commits only it held).
CANDIDATE_ROUNDS=${CANDIDATE_ROUNDS:-15}
require_int CANDIDATE_ROUNDS 1
for ((round = 1; round <= CANDIDATE_ROUNDS; round++)); do
	best=-1 best_tli=-1 best_lsn=-1 best_text='' silent=0 unsettled=0 answered=()
	all=-1 all_tli=-1 all_lsn=-1 all_text=''
	for ((k = 0; k < INSTANCES; k++)); do
		((k != from)) || continue
		row=$(standby_position "$k") || {
			log "ordinal $k (${hosts[k]}) does not answer (round $round of $CANDIDATE_ROUNDS)"
			silent=$((silent + 1))
			continue
		}
		IFS='|' read -r recovery tli replayed received <<<"$row"
		[[ $recovery == t && $tli =~ ^[0-9]+$ ]] || continue
		answered+=("$k")
		if ! settled "$k" "$replayed" "$received"; then
			log "ordinal $k is still replaying what it received: $replayed of $received (round $round of $CANDIDATE_ROUNDS)"
			unsettled=$((unsettled + 1))
		fi
		lsn=$replayed n=$(lsn_int "$replayed")
		if (($(lsn_int "$received") > n)); then
			lsn=$received n=$(lsn_int "$received")
			log "ordinal $k stands at $replayed, short of the $received it received: a record it cannot replay, or one it is still replaying"
		fi
		if ((tli > all_tli || (tli == all_tli && n > all_lsn))); then
			all=$k all_tli=$tli all_lsn=$n all_text=$lsn
		fi
		if ! qualified "$k"; then
			log "ordinal $k: standby on timeline $tli, holds WAL up to $lsn; not qualified: its pod was not ready (streaming within the readiness bound) when the Job was composed"
			continue
		fi
		log "ordinal $k: standby on timeline $tli, holds WAL up to $lsn"
		if ((tli > best_tli || (tli == best_tli && n > best_lsn))); then
			best=$k best_tli=$tli best_lsn=$n best_text=$lsn
		fi
	done
	((silent + unsettled > 0 && round < CANDIDATE_ROUNDS)) || break
	report_existing_primary
	sleep 2
done
((${#answered[@]} == 0)) || detect_durability "${answered[@]}"
if [[ $durability == sync ]]; then
	# Every standby answered: the most advanced of all holds every
	# acknowledged commit, whether or not it was ready (replay may lag).
	if ((silent > 0)); then
		hold "$silent standby(s) did not answer in $CANDIDATE_ROUNDS rounds; with durability sync any of them may hold the last acknowledged commits, so none is promoted until every standby answers"
	fi
	best=$all best_tli=$all_tli best_lsn=$all_lsn best_text=$all_text
fi
if ((silent > 0 && best >= 0)); then
	log "WARNING: $silent standby(s) never answered; choosing among the others: a silent one may hold more WAL (it is rewound or cloned again when it returns)"
fi
if ((best < 0)); then
	if ((${#answered[@]} > 0)); then
		hold "no standby qualifies: ordinals ${answered[*]} answered, but none was ready (streaming within the readiness bound) when the Job was composed; promoting one would lose what it never received"
	fi
	log "no standby answers: nothing to promote; the Job retries"
	exit 5
fi

# pg_promote replays whatever complete WAL the standby holds before it ends
# recovery; this wait only lets a standby that was judged while still
# receiving finish first, and ends as soon as its replay settles.
log "promoting ordinal $best (timeline $best_tli, WAL up to $best_text): waiting for its replay to settle"
stood_at=() stood_for=()
for ((i = 0; i < PROMOTE_WAIT_SECONDS; i++)); do
	if row=$(standby_position "$best"); then
		IFS='|' read -r recovery tli replayed received <<<"$row"
		if [[ $recovery != t ]] || settled "$best" "$replayed" "$received"; then
			break
		fi
	fi
	sleep 1
done

# Detach every other standby from the old primary before the promotion:
# each is repointed to stream from the chosen one (cascading, and on its new
# timeline once it is promoted). A standby still attached to a lost primary
# that resumes acknowledges its commits under durability sync: the commit
# returns, and the promotion and the rewind then discard it everywhere
# (seen: a session held open on a frozen primary committed after the
# promotion). Once no standby streams from it, a resumed old primary's
# synchronous commits wait and never return.
detach_standbys "$best"
if primary_answers; then
	reattach_standbys
	finish "{\"result\":\"not-needed\",\"from\":$from,\"reason\":\"the primary answered again before the promotion\"}"
fi
promote "$best" PrimaryLost
