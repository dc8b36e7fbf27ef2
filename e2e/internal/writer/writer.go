// Package writer is the client of the real-node failover test: a shell loop
// in the PostgreSQL image that writes uniquely numbered rows through the rw
// Service, one psql (one connection, one statement) a write, and logs one
// line per attempt; and the parser that turns that log into the attempts
// the independent checker (internal/checker) reads.
//
// Each write is checker.InsertSQL: it answers which server committed it
// (system identifier, timeline, address), so an acknowledged write names
// the server that acknowledged it.
package writer

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/example/function-database/internal/checker"
)

// Timeout bounds one write, connection included (the script's timeout(1));
// an attempt that runs out of it is indeterminate.
const Timeout = 5 * time.Second

// idPlaceholder stands for the write's id in InsertTemplate; the script
// substitutes its counter.
const idPlaceholder = "@ID@"

// InsertTemplate is checker.InsertSQL with its id replaced by idPlaceholder,
// for the script: the statement the checker parses the answer of, not a
// copy of it.
func InsertTemplate() string {
	const probe = 987654321987654321
	sql := checker.InsertSQL(probe)
	n := strconv.FormatInt(probe, 10)
	if strings.Count(sql, n) != 1 {
		panic("writer: checker.InsertSQL does not hold its id exactly once: " + sql)
	}
	return strings.Replace(sql, n, idPlaceholder, 1)
}

// Env is what Script reads besides libpq's PG* variables (the caller sets
// PGHOST to the rw Service, the credentials and PGCONNECT_TIMEOUT).
func Env() map[string]string {
	return map[string]string{
		"CREATE_SQL": checker.CreateTableSQL,
		"MAX_SQL":    "SELECT coalesce(max(id), 0) FROM " + checker.Table,
		"INSERT_SQL": InsertTemplate(),
		"TIMEOUT":    strconv.Itoa(int(Timeout / time.Second)),
	}
}

// Script is the writer, for bash in the PostgreSQL image. It creates the
// table (retrying until the Service answers), starts above the ids already
// written (a restarted container must not reuse one), then loops: one psql
// per write, bounded by timeout(1), a 200 ms pause between writes. Each
// attempt logs one line, tab-separated:
//
//	attempt ID START_MS END_MS EXIT STDOUT STDERR
//
// START_MS and END_MS are Unix milliseconds before psql starts and after it
// returned (the node's clock, which is the test's: one machine), EXIT is
// psql's exit status (124 or 137: timed out), STDOUT its answer and STDERR
// its error, tabs and newlines turned to spaces.
const Script = `set -u
until i=$(psql -X -q -A -t -v ON_ERROR_STOP=1 -c "$CREATE_SQL" -c "$MAX_SQL") && [[ $i =~ ^[0-9]+$ ]]; do
	sleep 1
done
errf=$(mktemp)
while :; do
	i=$((i + 1))
	t=${EPOCHREALTIME/[.,]/}
	start=${t%???}
	out=$(timeout -k 1 "$TIMEOUT" psql -X -q -A -t -v ON_ERROR_STOP=1 -c "${INSERT_SQL//@ID@/$i}" 2>"$errf")
	rc=$?
	t=${EPOCHREALTIME/[.,]/}
	end=${t%???}
	err=$(<"$errf")
	printf 'attempt\t%s\t%s\t%s\t%s\t%s\t%s\n' "$i" "$start" "$end" "$rc" "${out//[$'\t\r\n']/ }" "${err//[$'\t\r\n']/ }"
	sleep 0.2
done`

// Parse reads the writer's log into attempts, sorted by id; lines that are
// not attempts (psql's notices while creating the table) are skipped. A
// write in flight when the log was read has no line yet and is not among
// them: the checker ignores rows no attempt wrote.
func Parse(log string) []checker.Attempt {
	var as []checker.Attempt
	for line := range strings.Lines(log) {
		if a, ok := parseLine(strings.TrimRight(line, "\r\n")); ok {
			as = append(as, a)
		}
	}
	slices.SortStableFunc(as, func(a, b checker.Attempt) int { return cmp.Compare(a.ID, b.ID) })
	return as
}

func parseLine(line string) (checker.Attempt, bool) {
	f := strings.Split(line, "\t")
	if len(f) != 7 || f[0] != "attempt" {
		return checker.Attempt{}, false
	}
	id, err1 := strconv.ParseInt(f[1], 10, 64)
	start, err2 := strconv.ParseInt(f[2], 10, 64)
	end, err3 := strconv.ParseInt(f[3], 10, 64)
	rc, err4 := strconv.Atoi(f[4])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return checker.Attempt{}, false
	}
	a := checker.Attempt{ID: id, Start: time.UnixMilli(start), End: time.UnixMilli(end)}
	a.Server, a.Err = Outcome(id, rc, f[5], f[6])
	return a, true
}

// Outcome reads one psql run of InsertSQL(id): its exit status, standard
// output and standard error. A nil error: acknowledged by the server
// returned. Otherwise the error says whether the write may have committed:
// it wraps checker.ErrIndeterminate unless psql's error shows the
// statement never ran or was refused (see failedBeforeCommit).
func Outcome(id int64, rc int, stdout, stderr string) (checker.Server, error) {
	stderr = strings.TrimSpace(stderr)
	switch {
	case rc == 0:
		s, err := checker.ParseAnswer(id, stdout)
		if err != nil {
			// psql said it succeeded but the answer is not one: it may
			// have committed.
			return checker.Server{}, fmt.Errorf("%w: %w", checker.ErrIndeterminate, err)
		}
		return s, nil
	case rc == 124 || rc == 137:
		return checker.Server{}, fmt.Errorf("%w: timed out after %s: %s", checker.ErrIndeterminate, Timeout, stderr)
	case failedBeforeCommit(stderr):
		return checker.Server{}, fmt.Errorf("psql exit %d: %s", rc, stderr)
	}
	return checker.Server{}, fmt.Errorf("%w: psql exit %d: %s", checker.ErrIndeterminate, rc, stderr)
}

// failedBeforeCommit: psql's error says the write did not commit. Either
// libpq could not open the connection (no statement was sent: refused,
// DNS, timed out connecting, the server starting, in recovery or shutting
// down), or the server answered the statement with an ERROR (autocommit:
// rolled back; a read-only server's refusal). A connection lost once the
// statement was sent, a FATAL that ended the session (an administrator's
// termination while the commit waited for a standby: "committed locally"),
// or anything not recognised is not definite.
func failedBeforeCommit(stderr string) bool {
	lost := []string{"FATAL:", "PANIC:", "committed locally", "connection to server was lost", "server closed the connection", "SSL SYSCALL", "could not receive data", "could not send data"}
	connect := strings.Contains(stderr, "could not translate host name") ||
		strings.Contains(stderr, "could not connect to server") ||
		(strings.Contains(stderr, "connection to server ") && strings.Contains(stderr, " failed: "))
	if connect {
		// libpq's connection errors name the phase: "connection to
		// server at \"H\" (A), port P failed: ...". Whatever follows
		// (FATAL of a starting server, a closed connection) happened
		// before any statement.
		return true
	}
	for _, l := range lost {
		if strings.Contains(stderr, l) {
			return false
		}
	}
	return strings.Contains(stderr, "ERROR:")
}
