package checker

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Table is the table the workload writes: one row per write, keyed by the
// write's unique id.
const Table = "checker_writes"

// CreateTableSQL creates Table if it does not exist. The workload needs it
// once, on the primary, before the first write.
const CreateTableSQL = "CREATE TABLE IF NOT EXISTS " + Table + " (id bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())"

// SurvivingSQL reads the ids that survived, on the final primary once the
// scenario is over; ParseIDs reads its answer (psql -X -q -A -t).
const SurvivingSQL = "SELECT id FROM " + Table + " ORDER BY id"

// serverSQL is the acknowledging server's identity, evaluated by the server
// that runs the statement: its system identifier (a clone or a standby keeps
// its primary's), its timeline (the first eight hex digits of the current WAL
// file's name: valid on a server not in recovery only), its address as the
// client reached it ("local" over a Unix socket, where inet_server_addr() is
// NULL and would make the whole answer NULL) and its port (servers on one
// host differ by it).
const serverSQL = "(SELECT system_identifier FROM pg_control_system())::text" +
	" || '|' || ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int" +
	" || '|' || coalesce(host(inet_server_addr()), 'local')" +
	" || '|' || current_setting('port')"

// InsertSQL is write id: one statement, one round trip, that inserts the row
// and answers who acknowledged it, as "ID|SYSTEM-ID|TIMELINE|HOST|PORT".
// Run in autocommit (psql -c), the answer arrives after the commit, so the
// server that answers is the one that committed. ParseAnswer reads it.
func InsertSQL(id int64) string {
	return fmt.Sprintf("INSERT INTO %s(id) VALUES (%d) RETURNING id::text || '|' || %s", Table, id, serverSQL)
}

// SampleSQL asks one server whether it takes writes, for a Sample:
// "WRITABLE|SYSTEM-ID|TIMELINE|HOST|PORT", WRITABLE true or false. Writable
// is not in recovery and not read-only (a switchover first makes the old
// primary read-only); a standby's timeline is not asked (0). ParseSample
// reads the answer.
const SampleSQL = "SELECT (NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off')::text" +
	" || '|' || (SELECT system_identifier FROM pg_control_system())::text" +
	" || '|' || CASE WHEN pg_is_in_recovery() THEN 0 ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END" +
	" || '|' || coalesce(host(inet_server_addr()), 'local')" +
	" || '|' || current_setting('port')"

// ErrMalformed is wrapped by the errors of ParseAnswer, ParseSample and
// ParseIDs: the answer is not what the statement returns.
var ErrMalformed = errors.New("malformed answer")

// ParseAnswer reads the answer of InsertSQL(id), as psql -X -q -A -t prints
// it (one line; surrounding white space is ignored). Anything else is an
// error wrapping ErrMalformed: another id, more than one line (psql without
// -q adds "INSERT 0 1"), a field missing or extra, a number not in its
// canonical form.
func ParseAnswer(id int64, out string) (Server, error) {
	f, err := fields(out)
	if err != nil {
		return Server{}, err
	}
	if f[0] != strconv.FormatInt(id, 10) {
		return Server{}, fmt.Errorf("%w: %q: id %q, want %d", ErrMalformed, out, f[0], id)
	}
	s, err := server(out, f[1:])
	if err != nil {
		return Server{}, err
	}
	if s.Timeline == 0 {
		return Server{}, fmt.Errorf("%w: %q: timeline 0", ErrMalformed, out)
	}
	return s, nil
}

// ParseSample reads the answer of SampleSQL to a query sent at start and
// answered at end, as ParseAnswer reads InsertSQL's.
func ParseSample(out string, start, end time.Time) (Sample, error) {
	f, err := fields(out)
	if err != nil {
		return Sample{}, err
	}
	var writable bool
	switch f[0] {
	case "true":
		writable = true
	case "false":
	default:
		return Sample{}, fmt.Errorf("%w: %q: writable %q, want true or false", ErrMalformed, out, f[0])
	}
	s, err := server(out, f[1:])
	if err != nil {
		return Sample{}, err
	}
	if writable && s.Timeline == 0 {
		return Sample{}, fmt.Errorf("%w: %q: a writable server on timeline 0", ErrMalformed, out)
	}
	return Sample{Start: start, End: end, Server: s, Writable: writable}, nil
}

// ParseIDs reads the answer of SurvivingSQL: one id a line. Blank lines are
// ignored; any other line that is not an id is an error wrapping
// ErrMalformed.
func ParseIDs(out string) ([]int64, error) {
	var ids []int64
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		id, err := canonicalInt(line, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: id %q: %w", ErrMalformed, line, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// fields splits a one-line answer of five fields separated by '|'.
func fields(out string) ([]string, error) {
	line := strings.TrimSpace(out)
	if line == "" {
		return nil, fmt.Errorf("%w: empty", ErrMalformed)
	}
	if strings.ContainsAny(line, "\r\n") {
		return nil, fmt.Errorf("%w: %q: more than one line", ErrMalformed, out)
	}
	f := strings.Split(line, "|")
	if len(f) != 5 {
		return nil, fmt.Errorf("%w: %q: %d fields, want 5", ErrMalformed, out, len(f))
	}
	return f, nil
}

// server reads SYSTEM-ID|TIMELINE|HOST|PORT.
func server(out string, f []string) (Server, error) {
	sysid, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil || sysid == 0 || strconv.FormatUint(sysid, 10) != f[0] {
		return Server{}, fmt.Errorf("%w: %q: system identifier %q", ErrMalformed, out, f[0])
	}
	tli, err := canonicalInt(f[1], 32)
	if err != nil || tli < 0 {
		return Server{}, fmt.Errorf("%w: %q: timeline %q", ErrMalformed, out, f[1])
	}
	host := f[2]
	if host != "local" {
		if _, err := netip.ParseAddr(host); err != nil {
			return Server{}, fmt.Errorf("%w: %q: host %q", ErrMalformed, out, host)
		}
	}
	port, err := canonicalInt(f[3], 32)
	if err != nil || port < 1 || port > 65535 {
		return Server{}, fmt.Errorf("%w: %q: port %q", ErrMalformed, out, f[3])
	}
	return Server{SystemID: f[0], Timeline: int(tli), Addr: net.JoinHostPort(host, f[3])}, nil
}

// canonicalInt parses a decimal integer written as strconv writes it: no
// sign but '-', no leading zeros.
func canonicalInt(s string, bits int) (int64, error) {
	n, err := strconv.ParseInt(s, 10, bits)
	if err != nil {
		return 0, err
	}
	if strconv.FormatInt(n, 10) != s {
		return 0, fmt.Errorf("%q is not in canonical form", s)
	}
	return n, nil
}
