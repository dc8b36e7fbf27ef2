package checker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Server is who answered: a PostgreSQL server as it described itself.
type Server struct {
	// SystemID is pg_control_system().system_identifier, the same on a
	// primary and every standby cloned from it.
	SystemID string
	// Timeline is the server's timeline when it answered; 0 when not asked
	// (a standby's Sample).
	Timeline int
	// Addr is host:port as the client reached the server, host "local" over
	// a Unix socket.
	Addr string
}

// String names the server for messages.
func (s Server) String() string {
	return fmt.Sprintf("%s (system %s, timeline %d)", s.Addr, s.SystemID, s.Timeline)
}

// Ack is an acknowledged write: the server that committed write ID, and when
// the client received the acknowledgement.
type Ack struct {
	ID     int64
	At     time.Time
	Server Server
}

// Attempt is one write, whatever came of it. Err nil: acknowledged by Server
// at End. Otherwise see Outcome.
type Attempt struct {
	ID     int64
	Start  time.Time // the statement sent
	End    time.Time // its answer or error received
	Server Server    // who acknowledged it; zero unless Err is nil
	Err    error
}

// ErrIndeterminate, wrapped by an Exec's error, says the write may have
// committed: the statement may have reached the server (a connection lost
// after sending it). An Exec's error that wraps neither it nor a context
// error says the write did not commit (connection refused, a read-only
// server's refusal).
var ErrIndeterminate = errors.New("outcome unknown")

// Outcome is what a client knows of an attempt.
type Outcome int

// The outcomes of an attempt.
const (
	// Acknowledged: committed, by Attempt.Server.
	Acknowledged Outcome = iota
	// Failed: not committed.
	Failed
	// Indeterminate: may or may not have committed (a timeout, an attempt
	// cut short by the end of the run, a connection lost mid-statement, an
	// answer that could not be read). Absent afterwards is not a loss;
	// present is not an error.
	Indeterminate
)

// String is the outcome's name.
func (o Outcome) String() string {
	switch o {
	case Acknowledged:
		return "acknowledged"
	case Failed:
		return "failed"
	case Indeterminate:
		return "indeterminate"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Outcome classifies the attempt: Acknowledged when Err is nil;
// Indeterminate when Err wraps ErrIndeterminate, context.DeadlineExceeded or
// context.Canceled; Failed otherwise.
func (a Attempt) Outcome() Outcome {
	switch {
	case a.Err == nil:
		return Acknowledged
	case errors.Is(a.Err, ErrIndeterminate), errors.Is(a.Err, context.DeadlineExceeded), errors.Is(a.Err, context.Canceled):
		return Indeterminate
	}
	return Failed
}

// Ack is the attempt's acknowledgement, if it was acknowledged.
func (a Attempt) Ack() (Ack, bool) {
	if a.Err != nil {
		return Ack{}, false
	}
	return Ack{ID: a.ID, At: a.End, Server: a.Server}, true
}

// Durability is the Database's spec.durability.
type Durability string

// The durabilities. Any other value is held to Sync's rules.
const (
	Sync  Durability = "sync"
	Async Durability = "async"
)

// Sample is one server's answer to "do you take writes?" (SampleSQL), asked
// at Start and answered at End: the answer held at some instant between.
type Sample struct {
	Start, End time.Time // End zero: Start
	Server     Server
	Writable   bool
}

func (s Sample) end() time.Time {
	if s.End.IsZero() {
		return s.Start
	}
	return s.End
}

// Input is what the checker reads once a scenario is over.
type Input struct {
	Scenario   string
	Durability Durability

	// Attempts are the scenario's writes (Workload.Attempts).
	Attempts []Attempt
	// Surviving are the ids the final primary holds (SurvivingSQL). Ids no
	// attempt wrote (an earlier scenario's) are ignored.
	Surviving []int64

	// Fault is when the fault was injected (Workload.MarkFault); zero:
	// unknown, and so is the RTO.
	Fault time.Time
	// Promoted is when the promotion was decided, and Primary the final
	// primary. A write acknowledged after Promoted by a server not on
	// Primary's timeline (or of another system) was acknowledged by a deposed
	// primary. Either zero: not checked.
	Promoted time.Time
	Primary  Server

	// Samples are the servers' answers as sampled during the scenario, if
	// the caller sampled them (SampleSQL, ParseSample).
	Samples []Sample
}

// Report is the checker's verdict on one scenario.
type Report struct {
	Scenario   string
	Durability Durability

	// The attempts, by outcome.
	Attempts, Acknowledged, Failed, Indeterminate int
	// Lost: acknowledged, absent from the final primary. Sorted.
	Lost []int64
	// AckedByDeposed: acknowledged after the promotion by a server not on
	// the final primary's timeline (or of another system). Sorted by id.
	AckedByDeposed []Ack
	// TwoPrimaries: two distinct servers answered as writable at
	// overlapping times; Overlap holds the first such pair (by Start), nil
	// when there is none.
	TwoPrimaries bool
	Overlap      []Sample
	// IndeterminateCommitted: indeterminate attempts whose rows survived
	// (they had committed). Informational.
	IndeterminateCommitted int
	// FailedPresent: attempts the Exec said failed whose rows survived.
	// Sorted. Not a violation of S1-S3, but the Exec's errors were not
	// definite: it should wrap ErrIndeterminate where the write may have
	// reached the server.
	FailedPresent []int64
	// RTO as MeasureRTO computes it from the attempts and the fault.
	RTO RTO
}

// Check reads a scenario's writes against the surviving data.
func Check(in Input) Report {
	r := Report{Scenario: in.Scenario, Durability: in.Durability, Attempts: len(in.Attempts)}
	surviving := make(map[int64]bool, len(in.Surviving))
	for _, id := range in.Surviving {
		surviving[id] = true
	}
	lost, failedPresent := map[int64]bool{}, map[int64]bool{}
	for _, a := range in.Attempts {
		switch a.Outcome() {
		case Acknowledged:
			r.Acknowledged++
			if !surviving[a.ID] {
				lost[a.ID] = true
			}
			if ack, _ := a.Ack(); deposed(ack, in.Promoted, in.Primary) {
				r.AckedByDeposed = append(r.AckedByDeposed, ack)
			}
		case Failed:
			r.Failed++
			if surviving[a.ID] {
				failedPresent[a.ID] = true
			}
		case Indeterminate:
			r.Indeterminate++
			if surviving[a.ID] {
				r.IndeterminateCommitted++
			}
		}
	}
	r.Lost = sortedKeys(lost)
	r.FailedPresent = sortedKeys(failedPresent)
	slices.SortStableFunc(r.AckedByDeposed, func(a, b Ack) int { return cmp.Compare(a.ID, b.ID) })
	if p := twoPrimaries(in.Samples); p != nil {
		r.TwoPrimaries, r.Overlap = true, p
	}
	r.RTO = MeasureRTO(in.Attempts, in.Fault)
	return r
}

// deposed: acknowledged after the promotion by a server that is not the
// final primary (another timeline, or another system).
func deposed(a Ack, promoted time.Time, primary Server) bool {
	if promoted.IsZero() || primary == (Server{}) || !a.At.After(promoted) {
		return false
	}
	return a.Server.Timeline != primary.Timeline || (primary.SystemID != "" && a.Server.SystemID != primary.SystemID)
}

// twoPrimaries returns the first pair (by Start) of writable samples of
// distinct servers whose times overlap, or nil.
func twoPrimaries(samples []Sample) []Sample {
	var w []Sample
	for _, s := range samples {
		if s.Writable {
			w = append(w, s)
		}
	}
	slices.SortStableFunc(w, func(a, b Sample) int {
		return cmp.Or(a.Start.Compare(b.Start), a.end().Compare(b.end()))
	})
	for i, a := range w {
		for _, b := range w[i+1:] {
			if b.Start.After(a.end()) {
				break
			}
			if a.Server != b.Server {
				return []Sample{a, b}
			}
		}
	}
	return nil
}

func sortedKeys(m map[int64]bool) []int64 {
	if len(m) == 0 {
		return nil
	}
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// String is the report's one line:
//
//	checker: scenario=NAME durability=sync|async acknowledged=N lost=N acked-by-deposed=N two-primaries=0|1 rto-seconds=X
//
// X has one decimal, or is "-" when unknown. A NAME that is empty or holds
// anything but letters, digits and ._:/+- is quoted (Go syntax); so is a
// durability.
func (r Report) String() string {
	two := 0
	if r.TwoPrimaries {
		two = 1
	}
	return fmt.Sprintf("checker: scenario=%s durability=%s acknowledged=%d lost=%d acked-by-deposed=%d two-primaries=%d rto-seconds=%s",
		word(r.Scenario), word(string(r.Durability)), r.Acknowledged, len(r.Lost), len(r.AckedByDeposed), two, seconds(r.RTO.Outage))
}

// word keeps the line one space-separated key=value per field.
func word(s string) string {
	if s == "" || strings.ContainsFunc(s, func(c rune) bool {
		return (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && !strings.ContainsRune("._:/+-", c)
	}) {
		return strconv.Quote(s)
	}
	return s
}

// seconds is d in seconds with one decimal, "-" when unknown (negative).
func seconds(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return strconv.FormatFloat(d.Round(100*time.Millisecond).Seconds(), 'f', 1, 64)
}

// Err is nil unless the scenario violated an invariant (doc.go):
//   - S1, under any durability but Async: an acknowledged write lost;
//   - S2: a write acknowledged by a deposed primary after the promotion;
//   - S3: two writable primaries.
//
// Under Async lost writes are reported (Lost) but are no error: the caller
// decides what loss it accepts.
func (r Report) Err() error {
	var errs []error
	if r.Durability != Async && len(r.Lost) > 0 {
		errs = append(errs, fmt.Errorf("S1: %d acknowledged writes lost under durability %s: ids %s", len(r.Lost), word(string(r.Durability)), idList(r.Lost)))
	}
	if n := len(r.AckedByDeposed); n > 0 {
		a := r.AckedByDeposed[0]
		errs = append(errs, fmt.Errorf("S2: %d writes acknowledged by a deposed primary after the promotion, the first id %d by %s at %s", n, a.ID, a.Server, stamp(a.At)))
	}
	switch {
	case r.TwoPrimaries && len(r.Overlap) == 2:
		a, b := r.Overlap[0], r.Overlap[1]
		errs = append(errs, fmt.Errorf("S3: two writable primaries: %s asked %s-%s and %s asked %s-%s", a.Server, stamp(a.Start), stamp(a.end()), b.Server, stamp(b.Start), stamp(b.end())))
	case r.TwoPrimaries:
		errs = append(errs, errors.New("S3: two writable primaries"))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("checker: scenario %s: %w", word(r.Scenario), errors.Join(errs...))
}

// idList is ids, at most the first 20.
func idList(ids []int64) string {
	const most = 20
	s := fmt.Sprint(ids[:min(len(ids), most)])
	if len(ids) > most {
		s = s[:len(s)-1] + " ...]"
	}
	return s
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }
