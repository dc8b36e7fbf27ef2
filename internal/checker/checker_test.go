package checker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The servers of the tests: a cluster's primary on timeline 1, the standby
// promoted on timeline 2, and a server of another cluster.
var (
	t0       = time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	old      = Server{SystemID: "7714432686548007642", Timeline: 1, Addr: "10.0.0.5:5432"}
	promoted = Server{SystemID: "7714432686548007642", Timeline: 2, Addr: "10.0.0.6:5432"}
	stranger = Server{SystemID: "7714432686548000001", Timeline: 2, Addr: "10.0.0.6:5432"}
)

// at is t0 plus s seconds, to the millisecond.
func at(s float64) time.Time { return t0.Add(time.Duration(math.Round(s*1000)) * time.Millisecond) }

// acked is write id acknowledged by srv s seconds after t0.
func acked(id int64, s float64, srv Server) Attempt {
	return Attempt{ID: id, Start: at(s - 0.01), End: at(s), Server: srv}
}

var (
	errRefused = errors.New("connection refused")
	errTimeout = fmt.Errorf("%w: signal: killed", context.DeadlineExceeded)
)

// failed is write id refused s seconds after t0.
func failed(id int64, s float64) Attempt {
	return Attempt{ID: id, Start: at(s - 0.01), End: at(s), Err: errRefused}
}

// timedOut is write id timed out s seconds after t0.
func timedOut(id int64, s float64) Attempt {
	return Attempt{ID: id, Start: at(s - 5), End: at(s), Err: errTimeout}
}

// sample is srv's answer asked from s to e seconds after t0.
func sample(s, e float64, srv Server, writable bool) Sample {
	return Sample{Start: at(s), End: at(e), Server: srv, Writable: writable}
}

func TestOutcome(t *testing.T) {
	cases := map[string]struct {
		reason string
		err    error
		want   Outcome
	}{
		"Acknowledged":  {reason: "no error", err: nil, want: Acknowledged},
		"Refused":       {reason: "an error the Exec says is definite", err: errRefused, want: Failed},
		"Timeout":       {reason: "the attempt's deadline", err: errTimeout, want: Indeterminate},
		"Canceled":      {reason: "the run stopped mid-attempt", err: fmt.Errorf("%w: exit status 2", context.Canceled), want: Indeterminate},
		"Indeterminate": {reason: "the Exec says the statement may have reached the server", err: fmt.Errorf("server closed the connection: %w", ErrIndeterminate), want: Indeterminate},
		"Malformed":     {reason: "the Workload's wrapping of an unreadable answer", err: fmt.Errorf("%w: %w", ErrIndeterminate, ErrMalformed), want: Indeterminate},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			a := Attempt{ID: 1, Err: tc.err}
			if got := a.Outcome(); got != tc.want {
				t.Errorf("%s\n(Attempt{Err: %v}).Outcome() = %v, want %v", tc.reason, tc.err, got, tc.want)
			}
			_, ok := a.Ack()
			if ok != (tc.want == Acknowledged) {
				t.Errorf("%s\n(Attempt{Err: %v}).Ack() ok = %t", tc.reason, tc.err, ok)
			}
		})
	}
	if got := Outcome(7).String(); got != "Outcome(7)" {
		t.Errorf("Outcome(7).String() = %q", got)
	}
}

func TestCheck(t *testing.T) {
	// A failover: acknowledgements on timeline 1 until 10 s, the fault at
	// 10.5 s, the promotion at 30 s, acknowledgements on timeline 2 from
	// 32.3 s.
	steady := []Attempt{acked(1, 9, old), acked(2, 10, old), failed(3, 20), timedOut(4, 25), acked(5, 32.3, promoted), acked(6, 33, promoted)}
	cases := map[string]struct {
		reason  string
		in      Input
		want    Report
		line    string
		wantErr string
	}{
		"NothingLost": {
			reason: "every acknowledged write survived; a failed one is absent, a timed out one too",
			in: Input{
				Scenario: "frozen", Durability: Sync, Attempts: steady, Surviving: []int64{1, 2, 5, 6},
				Fault: at(10.5), Promoted: at(30), Primary: promoted,
			},
			want: Report{
				Scenario: "frozen", Durability: Sync, Attempts: 6, Acknowledged: 4, Failed: 1, Indeterminate: 1,
				RTO: RTO{Outage: 22300 * time.Millisecond, NewTimeline: 21800 * time.Millisecond},
			},
			line: "checker: scenario=frozen durability=sync acknowledged=4 lost=0 acked-by-deposed=0 two-primaries=0 rto-seconds=22.3",
		},
		"LostUnderSync": {
			reason: "acknowledged and absent is lost; under sync that violates S1; ids are sorted",
			in: Input{
				Scenario: "frozen", Durability: Sync, Surviving: []int64{5, 6},
				Attempts: []Attempt{acked(2, 10, old), acked(1, 9, old), acked(5, 32.3, promoted), acked(6, 33, promoted)},
			},
			want: Report{
				Scenario: "frozen", Durability: Sync, Attempts: 4, Acknowledged: 4, Lost: []int64{1, 2},
				RTO: RTO{Outage: Unknown, NewTimeline: Unknown},
			},
			line:    "checker: scenario=frozen durability=sync acknowledged=4 lost=2 acked-by-deposed=0 two-primaries=0 rto-seconds=-",
			wantErr: "checker: scenario frozen: S1: 2 acknowledged writes lost under durability sync: ids [1 2]",
		},
		"LostUnderAsync": {
			reason: "under async a loss is reported, no error",
			in: Input{
				Scenario: "async", Durability: Async, Surviving: []int64{5, 6}, Attempts: steady,
				Fault: at(10.5), Promoted: at(30), Primary: promoted,
			},
			want: Report{
				Scenario: "async", Durability: Async, Attempts: 6, Acknowledged: 4, Failed: 1, Indeterminate: 1, Lost: []int64{1, 2},
				RTO: RTO{Outage: 22300 * time.Millisecond, NewTimeline: 21800 * time.Millisecond},
			},
			line: "checker: scenario=async durability=async acknowledged=4 lost=2 acked-by-deposed=0 two-primaries=0 rto-seconds=22.3",
		},
		"UnknownDurability": {
			reason: "a durability neither sync nor async is held to sync's rule",
			in:     Input{Scenario: "x", Attempts: []Attempt{acked(1, 1, old)}},
			want: Report{
				Scenario: "x", Attempts: 1, Acknowledged: 1, Lost: []int64{1},
				RTO: RTO{Outage: Unknown, NewTimeline: Unknown},
			},
			line:    `checker: scenario=x durability="" acknowledged=1 lost=1 acked-by-deposed=0 two-primaries=0 rto-seconds=-`,
			wantErr: `checker: scenario x: S1: 1 acknowledged writes lost under durability "": ids [1]`,
		},
		"Indeterminate": {
			reason: "an indeterminate write absent is not lost; present it is no error, counted as committed",
			in: Input{
				Scenario: "timeouts", Durability: Sync, Surviving: []int64{1, 3},
				Attempts: []Attempt{acked(1, 1, old), timedOut(2, 6), timedOut(3, 7),
					{ID: 4, Err: fmt.Errorf("%w: %w: %q", ErrIndeterminate, ErrMalformed, "")},
					{ID: 5, Err: fmt.Errorf("%w: exit status 2", context.Canceled)}},
			},
			want: Report{
				Scenario: "timeouts", Durability: Sync, Attempts: 5, Acknowledged: 1, Indeterminate: 4, IndeterminateCommitted: 1,
				RTO: RTO{Outage: Unknown, NewTimeline: Unknown},
			},
			line: "checker: scenario=timeouts durability=sync acknowledged=1 lost=0 acked-by-deposed=0 two-primaries=0 rto-seconds=-",
		},
		"FailedPresent": {
			reason: "a write the Exec said failed but that committed is reported, no violation",
			in:     Input{Scenario: "s", Durability: Sync, Surviving: []int64{1, 2}, Attempts: []Attempt{failed(2, 1), acked(1, 0.5, old)}},
			want: Report{
				Scenario: "s", Durability: Sync, Attempts: 2, Acknowledged: 1, Failed: 1, FailedPresent: []int64{2},
				RTO: RTO{Outage: Unknown, NewTimeline: Unknown},
			},
			line: "checker: scenario=s durability=sync acknowledged=1 lost=0 acked-by-deposed=0 two-primaries=0 rto-seconds=-",
		},
		"OtherScenariosIgnored": {
			reason: "surviving ids no attempt wrote (an earlier scenario's) are ignored",
			in:     Input{Scenario: "s", Durability: Sync, Surviving: []int64{100, 1, 101}, Attempts: []Attempt{acked(1, 0.5, old)}},
			want: Report{
				Scenario: "s", Durability: Sync, Attempts: 1, Acknowledged: 1,
				RTO: RTO{Outage: Unknown, NewTimeline: Unknown},
			},
			line: "checker: scenario=s durability=sync acknowledged=1 lost=0 acked-by-deposed=0 two-primaries=0 rto-seconds=-",
		},
		"AckedByDeposed": {
			reason: "after the promotion, acknowledgements by the old timeline or another system are a deposed primary's (S2, under async too); before it they are not",
			in: Input{
				Scenario: "resumed", Durability: Async, Surviving: []int64{1, 2, 3, 4, 5},
				Attempts: []Attempt{acked(1, 29.9, old), acked(2, 30, old), acked(5, 31, stranger), acked(3, 30.1, old), acked(4, 30.2, promoted)},
				Promoted: at(30), Primary: promoted,
			},
			want: Report{
				Scenario: "resumed", Durability: Async, Attempts: 5, Acknowledged: 5,
				AckedByDeposed: []Ack{{ID: 3, At: at(30.1), Server: old}, {ID: 5, At: at(31), Server: stranger}},
				RTO:            RTO{Outage: Unknown, NewTimeline: Unknown},
			},
			line: "checker: scenario=resumed durability=async acknowledged=5 lost=0 acked-by-deposed=2 two-primaries=0 rto-seconds=-",
			wantErr: "checker: scenario resumed: S2: 2 writes acknowledged by a deposed primary after the promotion, " +
				"the first id 3 by 10.0.0.5:5432 (system 7714432686548007642, timeline 1) at 03:04:30.100",
		},
		"DeposedUnknownPromotion": {
			reason: "without the promotion time no acknowledgement is judged deposed",
			in:     Input{Scenario: "s", Durability: Sync, Surviving: []int64{1, 2}, Attempts: []Attempt{acked(1, 1, old), acked(2, 40, old)}, Primary: promoted},
			want: Report{
				Scenario: "s", Durability: Sync, Attempts: 2, Acknowledged: 2,
				RTO: RTO{Outage: Unknown, NewTimeline: Unknown},
			},
			line: "checker: scenario=s durability=sync acknowledged=2 lost=0 acked-by-deposed=0 two-primaries=0 rto-seconds=-",
		},
		"DeposedUnknownPrimary": {
			reason: "without the final primary no acknowledgement is judged deposed",
			in:     Input{Scenario: "s", Durability: Sync, Surviving: []int64{2}, Attempts: []Attempt{acked(2, 40, old)}, Promoted: at(30)},
			want: Report{
				Scenario: "s", Durability: Sync, Attempts: 1, Acknowledged: 1,
				RTO: RTO{Outage: Unknown, NewTimeline: Unknown},
			},
			line: "checker: scenario=s durability=sync acknowledged=1 lost=0 acked-by-deposed=0 two-primaries=0 rto-seconds=-",
		},
		"TwoPrimaries": {
			reason: "two distinct servers writable at overlapping times (S3); the first pair by start is reported",
			in: Input{
				Scenario: "split", Durability: Sync,
				Samples: []Sample{
					sample(1, 1.1, old, true), sample(1, 1.1, promoted, false),
					sample(31, 31.2, promoted, true), sample(31.1, 31.3, old, true),
					sample(40, 40.1, promoted, true), sample(40, 40.1, stranger, true),
				},
			},
			want: Report{
				Scenario: "split", Durability: Sync, TwoPrimaries: true,
				Overlap: []Sample{sample(31, 31.2, promoted, true), sample(31.1, 31.3, old, true)},
				RTO:     RTO{Outage: Unknown, NewTimeline: Unknown},
			},
			line: "checker: scenario=split durability=sync acknowledged=0 lost=0 acked-by-deposed=0 two-primaries=1 rto-seconds=-",
			wantErr: "checker: scenario split: S3: two writable primaries: " +
				"10.0.0.6:5432 (system 7714432686548007642, timeline 2) asked 03:04:31.000-03:04:31.200 and " +
				"10.0.0.5:5432 (system 7714432686548007642, timeline 1) asked 03:04:31.100-03:04:31.300",
		},
		"InstantSamples": {
			reason: "samples without an end are instants: equal instants overlap",
			in:     Input{Scenario: "s", Durability: Sync, Samples: []Sample{{Start: at(5), Server: promoted, Writable: true}, {Start: at(5), Server: old, Writable: true}}},
			want: Report{
				Scenario: "s", Durability: Sync, TwoPrimaries: true,
				Overlap: []Sample{{Start: at(5), Server: promoted, Writable: true}, {Start: at(5), Server: old, Writable: true}},
				RTO:     RTO{Outage: Unknown, NewTimeline: Unknown},
			},
			line:    "checker: scenario=s durability=sync acknowledged=0 lost=0 acked-by-deposed=0 two-primaries=1 rto-seconds=-",
			wantErr: "checker: scenario s: S3: two writable primaries: 10.0.0.6:5432 (system 7714432686548007642, timeline 2) asked 03:04:05.000-03:04:05.000 and 10.0.0.5:5432 (system 7714432686548007642, timeline 1) asked 03:04:05.000-03:04:05.000",
		},
		"OnePrimaryAtATime": {
			reason: "writable servers one after the other, a server writable twice at once, a standby beside a primary: one primary",
			in: Input{
				Scenario: "s", Durability: Sync,
				Samples: []Sample{
					sample(1, 1.1, old, true), sample(1.05, 1.2, old, true), sample(1, 1.1, promoted, false),
					sample(31.2, 31.3, promoted, true), sample(31, 31.1, old, true), sample(31.3, 31.4, old, false),
				},
			},
			want: Report{Scenario: "s", Durability: Sync, RTO: RTO{Outage: Unknown, NewTimeline: Unknown}},
			line: "checker: scenario=s durability=sync acknowledged=0 lost=0 acked-by-deposed=0 two-primaries=0 rto-seconds=-",
		},
		"Everything": {
			reason: "every violation at once, each named",
			in: Input{
				Scenario: "all of it", Durability: Sync, Surviving: []int64{2},
				Attempts: []Attempt{acked(1, 1, old), acked(2, 31, old)},
				Promoted: at(30), Primary: promoted,
				Samples: []Sample{sample(31, 31.1, old, true), sample(31, 31.1, promoted, true)},
			},
			want: Report{
				Scenario: "all of it", Durability: Sync, Attempts: 2, Acknowledged: 2, Lost: []int64{1},
				AckedByDeposed: []Ack{{ID: 2, At: at(31), Server: old}},
				TwoPrimaries:   true, Overlap: []Sample{sample(31, 31.1, old, true), sample(31, 31.1, promoted, true)},
				RTO: RTO{Outage: Unknown, NewTimeline: Unknown},
			},
			line: `checker: scenario="all of it" durability=sync acknowledged=2 lost=1 acked-by-deposed=1 two-primaries=1 rto-seconds=-`,
			wantErr: `checker: scenario "all of it": S1: 1 acknowledged writes lost under durability sync: ids [1]` + "\n" +
				"S2: 1 writes acknowledged by a deposed primary after the promotion, the first id 2 by 10.0.0.5:5432 (system 7714432686548007642, timeline 1) at 03:04:31.000\n" +
				"S3: two writable primaries: 10.0.0.5:5432 (system 7714432686548007642, timeline 1) asked 03:04:31.000-03:04:31.100 and 10.0.0.6:5432 (system 7714432686548007642, timeline 2) asked 03:04:31.000-03:04:31.100",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Check(tc.in)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nCheck(...): -want, +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.line, got.String()); diff != "" {
				t.Errorf("%s\nString(): -want, +got:\n%s", tc.reason, diff)
			}
			var gotErr string
			if err := got.Err(); err != nil {
				gotErr = err.Error()
			}
			if diff := cmp.Diff(tc.wantErr, gotErr); diff != "" {
				t.Errorf("%s\nErr(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReportString(t *testing.T) {
	cases := map[string]struct {
		reason string
		r      Report
		want   string
	}{
		"Rounded": {
			reason: "rto-seconds has one decimal, rounded half away from zero",
			r:      Report{Scenario: "s", Durability: Sync, RTO: RTO{Outage: 32250 * time.Millisecond}},
			want:   "checker: scenario=s durability=sync acknowledged=0 lost=0 acked-by-deposed=0 two-primaries=0 rto-seconds=32.3",
		},
		"Zero": {
			reason: "an outage of 0 is known",
			r:      Report{Scenario: "s", Durability: Async, RTO: RTO{Outage: 0}},
			want:   "checker: scenario=s durability=async acknowledged=0 lost=0 acked-by-deposed=0 two-primaries=0 rto-seconds=0.0",
		},
		"Unknown": {
			reason: "an unknown outage is -",
			r:      Report{Scenario: "s", Durability: Async, RTO: RTO{Outage: Unknown}},
			want:   "checker: scenario=s durability=async acknowledged=0 lost=0 acked-by-deposed=0 two-primaries=0 rto-seconds=-",
		},
		"NameCharacters": {
			reason: "letters, digits and ._:/+- stand as they are",
			r:      Report{Scenario: "Frozen_2/crossplane-down:v1.0+x", Durability: Sync, Acknowledged: 812, RTO: RTO{Outage: 97 * time.Second}},
			want:   "checker: scenario=Frozen_2/crossplane-down:v1.0+x durability=sync acknowledged=812 lost=0 acked-by-deposed=0 two-primaries=0 rto-seconds=97.0",
		},
		"NameQuoted": {
			reason: "a name with a space, an = or a newline is quoted: the line stays one key=value per field",
			r:      Report{Scenario: "a=b c\n", Durability: Sync},
			want:   `checker: scenario="a=b c\n" durability=sync acknowledged=0 lost=0 acked-by-deposed=0 two-primaries=0 rto-seconds=0.0`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.r.String()); diff != "" {
				t.Errorf("%s\nString(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestErrManyLost(t *testing.T) {
	// More than 20 lost ids: the first 20, then an ellipsis.
	var attempts []Attempt
	for id := int64(1); id <= 25; id++ {
		attempts = append(attempts, acked(id, float64(id), old))
	}
	err := Check(Input{Scenario: "s", Durability: Sync, Attempts: attempts}).Err()
	want := "checker: scenario s: S1: 25 acknowledged writes lost under durability sync: ids [1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 ...]"
	if err == nil || err.Error() != want {
		t.Errorf("Err() = %v, want %s", err, want)
	}
}

func TestCheckDeterministic(t *testing.T) {
	// The same input in another order gives the same report.
	attempts := []Attempt{acked(5, 31, old), acked(3, 30.5, old), acked(1, 1, old), acked(4, 30.2, old), acked(2, 2, old)}
	in := Input{Scenario: "s", Durability: Sync, Attempts: attempts, Promoted: at(30), Primary: promoted, Fault: at(10)}
	want := Check(in)
	for range 20 {
		shuffled := append([]Attempt(nil), attempts...)
		for i := range shuffled {
			j := (i*7 + 3) % len(shuffled)
			shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
		}
		attempts = shuffled
		in.Attempts = shuffled
		got := Check(in)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("Check of the attempts reordered: -first, +now:\n%s", diff)
		}
		if got.String() != want.String() {
			t.Fatalf("String() changed: %q, then %q", want.String(), got.String())
		}
	}
}
