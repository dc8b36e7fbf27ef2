package checker

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestInsertSQL(t *testing.T) {
	// Pinned: checked against PostgreSQL 15 as a non-superuser, over TCP
	// and a Unix socket, on a primary (timeline 1), a standby (refused: read
	// only) and the standby promoted (timeline 2).
	want := "INSERT INTO checker_writes(id) VALUES (42) RETURNING id::text || '|' || " +
		"(SELECT system_identifier FROM pg_control_system())::text" +
		" || '|' || ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int" +
		" || '|' || coalesce(host(inet_server_addr()), 'local')" +
		" || '|' || current_setting('port')"
	if diff := cmp.Diff(want, InsertSQL(42)); diff != "" {
		t.Errorf("InsertSQL(42): -want, +got:\n%s", diff)
	}
}

func TestParseAnswer(t *testing.T) {
	const sysid = "7714432686548007642"
	cases := map[string]struct {
		reason  string
		id      int64
		out     string
		want    Server
		wantErr error
	}{
		"TCP": {
			reason: "psql's line, newline included, over TCP",
			id:     42, out: "42|" + sysid + "|1|127.0.0.1|55432\n",
			want: Server{SystemID: sysid, Timeline: 1, Addr: "127.0.0.1:55432"},
		},
		"UnixSocket": {
			reason: "inet_server_addr() is NULL over a Unix socket: the host is local",
			id:     42, out: "42|" + sysid + "|2|local|5432\n",
			want: Server{SystemID: sysid, Timeline: 2, Addr: "local:5432"},
		},
		"IPv6": {
			reason: "an IPv6 address is bracketed in Addr",
			id:     7, out: "7|" + sysid + "|3|fd00::1|5432",
			want: Server{SystemID: sysid, Timeline: 3, Addr: "[fd00::1]:5432"},
		},
		"CRLF": {
			reason: "surrounding white space is ignored",
			id:     42, out: " 42|" + sysid + "|1|10.0.0.5|5432\r\n",
			want: Server{SystemID: sysid, Timeline: 1, Addr: "10.0.0.5:5432"},
		},
		"LargeID": {
			reason: "ids are int64",
			id:     1 << 40, out: "1099511627776|" + sysid + "|1|10.0.0.5|5432",
			want: Server{SystemID: sysid, Timeline: 1, Addr: "10.0.0.5:5432"},
		},
		"Empty":          {reason: "no answer (a NULL prints an empty line)", id: 42, out: "\n", wantErr: ErrMalformed},
		"OtherID":        {reason: "the answer of another write", id: 42, out: "43|" + sysid + "|1|10.0.0.5|5432", wantErr: ErrMalformed},
		"SignedID":       {reason: "numbers in canonical form only", id: 42, out: "+42|" + sysid + "|1|10.0.0.5|5432", wantErr: ErrMalformed},
		"ZeroPaddedID":   {reason: "numbers in canonical form only", id: 42, out: "042|" + sysid + "|1|10.0.0.5|5432", wantErr: ErrMalformed},
		"CommandTag":     {reason: "psql without -q adds the command tag", id: 42, out: "42|" + sysid + "|1|10.0.0.5|5432\nINSERT 0 1\n", wantErr: ErrMalformed},
		"TwoRows":        {reason: "one row only", id: 42, out: "42|" + sysid + "|1|10.0.0.5|5432\n42|" + sysid + "|1|10.0.0.5|5432\n", wantErr: ErrMalformed},
		"Aligned":        {reason: "psql without -A pads and separates with ' | '", id: 42, out: " 42 | " + sysid + " | 1 | 10.0.0.5 | 5432", wantErr: ErrMalformed},
		"FourFields":     {reason: "a field missing", id: 42, out: "42|" + sysid + "|1|10.0.0.5", wantErr: ErrMalformed},
		"SixFields":      {reason: "a field extra", id: 42, out: "42|" + sysid + "|1|10.0.0.5|5432|x", wantErr: ErrMalformed},
		"ZeroSystem":     {reason: "no cluster has system identifier 0", id: 42, out: "42|0|1|10.0.0.5|5432", wantErr: ErrMalformed},
		"NegativeSystem": {reason: "system identifiers are unsigned", id: 42, out: "42|-1|1|10.0.0.5|5432", wantErr: ErrMalformed},
		"HexSystem":      {reason: "system identifiers are decimal", id: 42, out: "42|6b0e|1|10.0.0.5|5432", wantErr: ErrMalformed},
		"ZeroTimeline":   {reason: "a server that committed is on a timeline", id: 42, out: "42|" + sysid + "|0|10.0.0.5|5432", wantErr: ErrMalformed},
		"NegTimeline":    {reason: "timelines are positive", id: 42, out: "42|" + sysid + "|-2|10.0.0.5|5432", wantErr: ErrMalformed},
		"HostName":       {reason: "the server's address, not a name", id: 42, out: "42|" + sysid + "|1|db-0|5432", wantErr: ErrMalformed},
		"HostWithMask":   {reason: "host() drops the mask: inet's text would not", id: 42, out: "42|" + sysid + "|1|10.0.0.5/32|5432", wantErr: ErrMalformed},
		"PortZero":       {reason: "ports are 1-65535", id: 42, out: "42|" + sysid + "|1|10.0.0.5|0", wantErr: ErrMalformed},
		"PortTooLarge":   {reason: "ports are 1-65535", id: 42, out: "42|" + sysid + "|1|10.0.0.5|65536", wantErr: ErrMalformed},
		"ErrorText":      {reason: "psql's error on stdout is no answer", id: 42, out: "ERROR:  cannot execute INSERT in a read-only transaction", wantErr: ErrMalformed},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseAnswer(tc.id, tc.out)
			if diff := cmp.Diff(tc.wantErr, err, cmpopts.EquateErrors()); diff != "" {
				t.Fatalf("%s\nParseAnswer(%d, %q) error: -want, +got:\n%s", tc.reason, tc.id, tc.out, diff)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nParseAnswer(%d, %q): -want, +got:\n%s", tc.reason, tc.id, tc.out, diff)
			}
		})
	}
}

func TestParseSample(t *testing.T) {
	const sysid = "7714432686548007642"
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	end := start.Add(3 * time.Millisecond)
	cases := map[string]struct {
		reason  string
		out     string
		want    Sample
		wantErr error
	}{
		"Primary": {
			reason: "a writable primary on its timeline",
			out:    "true|" + sysid + "|2|127.0.0.1|55433\n",
			want:   Sample{Start: start, End: end, Server: Server{SystemID: sysid, Timeline: 2, Addr: "127.0.0.1:55433"}, Writable: true},
		},
		"Standby": {
			reason: "a standby's timeline is not asked",
			out:    "false|" + sysid + "|0|127.0.0.1|55433\n",
			want:   Sample{Start: start, End: end, Server: Server{SystemID: sysid, Addr: "127.0.0.1:55433"}},
		},
		"ReadOnlyPrimary": {
			reason: "a primary made read-only (a switchover) is not writable",
			out:    "false|" + sysid + "|1|127.0.0.1|55432",
			want:   Sample{Start: start, End: end, Server: Server{SystemID: sysid, Timeline: 1, Addr: "127.0.0.1:55432"}},
		},
		"WritableTimeline0": {reason: "a writable server is on a timeline", out: "true|" + sysid + "|0|127.0.0.1|5432", wantErr: ErrMalformed},
		"BoolLetter":        {reason: "bool::text is true or false, not psql's t", out: "t|" + sysid + "|1|127.0.0.1|5432", wantErr: ErrMalformed},
		"Empty":             {reason: "no answer", out: "", wantErr: ErrMalformed},
		"MissingPort":       {reason: "five fields", out: "true|" + sysid + "|1|127.0.0.1", wantErr: ErrMalformed},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSample(tc.out, start, end)
			if diff := cmp.Diff(tc.wantErr, err, cmpopts.EquateErrors()); diff != "" {
				t.Fatalf("%s\nParseSample(%q) error: -want, +got:\n%s", tc.reason, tc.out, diff)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nParseSample(%q): -want, +got:\n%s", tc.reason, tc.out, diff)
			}
		})
	}
}

func TestParseIDs(t *testing.T) {
	cases := map[string]struct {
		reason  string
		out     string
		want    []int64
		wantErr error
	}{
		"Rows":     {reason: "one id a line, in the order given", out: "1\n2\n10\n", want: []int64{1, 2, 10}},
		"NoRows":   {reason: "an empty table", out: "", want: nil},
		"Blank":    {reason: "blank lines and surrounding spaces are ignored", out: "\n 3 \r\n\n4", want: []int64{3, 4}},
		"NotAnID":  {reason: "anything else is refused", out: "1\n(1 row)\n", wantErr: ErrMalformed},
		"TwoCols":  {reason: "one column", out: "1|2\n", wantErr: ErrMalformed},
		"Overflow": {reason: "ids are int64", out: "9223372036854775808\n", wantErr: ErrMalformed},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseIDs(tc.out)
			if diff := cmp.Diff(tc.wantErr, err, cmpopts.EquateErrors()); diff != "" {
				t.Fatalf("%s\nParseIDs(%q) error: -want, +got:\n%s", tc.reason, tc.out, diff)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nParseIDs(%q): -want, +got:\n%s", tc.reason, tc.out, diff)
			}
		})
	}
}
