package checker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// fakeDB plays a PostgreSQL cluster behind Exec: a table of ids, a primary
// that answers as psql would, and a behaviour per id.
type fakeDB struct {
	mu      sync.Mutex
	rows    map[int64]bool
	primary Server
	down    bool // refuse every connection
	sqls    []string
	// behave, when set, decides what becomes of write id.
	behave func(id int64) behaviour
}

type behaviour int

const (
	commit         behaviour = iota // commit, answer
	refuse                          // no connection: not committed
	commitThenHang                  // commit, never answer (until the deadline)
	hang                            // never reach the server (until the deadline)
	garble                          // commit, answer something unreadable
)

var valuesRE = regexp.MustCompile(`^INSERT INTO checker_writes\(id\) VALUES \((\d+)\) RETURNING `)

func newFakeDB(primary Server) *fakeDB {
	return &fakeDB{rows: map[int64]bool{}, primary: primary}
}

func (f *fakeDB) exec(ctx context.Context, sql string) (string, error) {
	f.mu.Lock()
	f.sqls = append(f.sqls, sql)
	if sql == CreateTableSQL {
		f.mu.Unlock()
		return "", nil
	}
	m := valuesRE.FindStringSubmatch(sql)
	if m == nil || sql != InsertSQL(mustAtoi(m[1])) {
		f.mu.Unlock()
		return "", fmt.Errorf("fake: unexpected statement %q", sql)
	}
	id := mustAtoi(m[1])
	b := commit
	if f.behave != nil {
		b = f.behave(id)
	}
	if f.down {
		b = refuse
	}
	if b == commit || b == commitThenHang || b == garble {
		f.rows[id] = true
	}
	srv := f.primary
	f.mu.Unlock()
	switch b {
	case refuse:
		return "", errRefused
	case commitThenHang, hang:
		<-ctx.Done()
		return "", errors.New("signal: killed") // what exec.CommandContext reports
	case garble:
		return "INSERT 0 1\n", nil
	}
	host, port, _ := net.SplitHostPort(srv.Addr)
	return fmt.Sprintf("%d|%s|%d|%s|%s\n", id, srv.SystemID, srv.Timeline, host, port), nil
}

func mustAtoi(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic(err)
	}
	return n
}

func (f *fakeDB) surviving() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []int64
	for id := range f.rows {
		ids = append(ids, id)
	}
	return ids
}

func (f *fakeDB) set(fn func(f *fakeDB)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func TestWorkloadConcurrent(t *testing.T) {
	// Eight writers, every behaviour, under -race: every id written once,
	// each attempt classified by what the server did, and nothing that was
	// acknowledged missing.
	db := newFakeDB(old)
	behave := func(id int64) behaviour {
		switch {
		case id%7 == 0:
			return refuse
		case id%11 == 0:
			return commitThenHang
		case id%13 == 0:
			return hang
		case id%17 == 0:
			return garble
		}
		return commit
	}
	db.behave = behave
	w := &Workload{Exec: db.exec, Writers: 8, FirstID: 1000, Timeout: 20 * time.Millisecond, Pause: -1}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	// The log is read and the fault marked while the writers write.
	go func() {
		for ctx.Err() == nil {
			w.MarkFault(time.Now())
			_ = w.Attempts()
			_ = w.RTO()
		}
	}()
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	attempts := w.Attempts()
	if len(attempts) < 100 {
		t.Fatalf("%d attempts in 300 ms, want at least 100", len(attempts))
	}
	for i, a := range attempts {
		if want := int64(1000 + i); a.ID != want {
			t.Fatalf("attempt %d has id %d, want %d: ids are unique and handed out in order", i, a.ID, want)
		}
		if a.End.Before(a.Start) {
			t.Errorf("attempt %d ends before it starts", a.ID)
		}
		want := map[behaviour]Outcome{commit: Acknowledged, refuse: Failed, commitThenHang: Indeterminate, hang: Indeterminate, garble: Indeterminate}[behave(a.ID)]
		// A refusal that comes back as the deadline passes, or the run
		// ends, is indeterminate: the Workload cannot tell it was definite.
		late := errors.Is(a.Err, context.Canceled) || errors.Is(a.Err, context.DeadlineExceeded)
		if got := a.Outcome(); got != want && (got != Indeterminate || !late) {
			t.Errorf("attempt %d: %v (%v), want %v", a.ID, got, a.Err, want)
		}
		switch behave(a.ID) {
		case commit:
			if a.Err == nil && a.Server != old {
				t.Errorf("attempt %d acknowledged by %v, want %v", a.ID, a.Server, old)
			}
		case commitThenHang, hang:
			if !errors.Is(a.Err, context.DeadlineExceeded) && !errors.Is(a.Err, context.Canceled) {
				t.Errorf("attempt %d: %v, want the deadline named though the Exec said signal: killed", a.ID, a.Err)
			}
		case garble:
			if !errors.Is(a.Err, ErrMalformed) || !errors.Is(a.Err, ErrIndeterminate) {
				t.Errorf("attempt %d: %v, want an indeterminate malformed answer", a.ID, a.Err)
			}
		}
	}
	r := Check(Input{Scenario: "concurrent", Durability: Sync, Attempts: attempts, Surviving: db.surviving()})
	if err := r.Err(); err != nil {
		t.Error(err)
	}
	if r.Attempts != len(attempts) || r.Acknowledged+r.Failed+r.Indeterminate != r.Attempts || r.Acknowledged == 0 || r.Failed == 0 || r.Indeterminate == 0 || r.IndeterminateCommitted == 0 {
		t.Errorf("counts %+v: every outcome seen, summing to the attempts", r)
	}
	if len(r.Lost) > 0 || len(r.FailedPresent) > 0 {
		t.Errorf("lost %v, failed yet present %v: want none", r.Lost, r.FailedPresent)
	}
}

func TestWorkloadFailover(t *testing.T) {
	// The primary is lost: connections refused for 100 ms, then the standby
	// promoted on timeline 2 acknowledges. The writers measure the outage,
	// the checker finds nothing lost and no deposed acknowledgement.
	db := newFakeDB(old)
	w := &Workload{Exec: db.exec, Writers: 4, Timeout: time.Second, Pause: time.Millisecond}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()

	time.Sleep(50 * time.Millisecond)
	db.set(func(f *fakeDB) { f.down = true })
	fault := time.Now()
	w.MarkFault(fault)
	time.Sleep(100 * time.Millisecond)
	promotedAt := time.Now()
	db.set(func(f *fakeDB) { f.down, f.primary = false, promoted })
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	rto := w.RTO()
	// An attempt in flight at the fault may be acknowledged just after it.
	if rto.Outage < 90*time.Millisecond || rto.Outage > 5*time.Second {
		t.Errorf("outage %v, want about 100 ms", rto.Outage)
	}
	if rto.NewTimeline < 100*time.Millisecond || rto.NewTimeline > 5*time.Second {
		t.Errorf("time to the new timeline %v, want about 100 ms", rto.NewTimeline)
	}
	r := Check(Input{
		Scenario: "fake-failover", Durability: Sync, Attempts: w.Attempts(), Surviving: db.surviving(),
		Fault: w.Fault(), Promoted: promotedAt, Primary: promoted,
	})
	if err := r.Err(); err != nil {
		t.Error(err)
	}
	if diff := cmp.Diff(rto, r.RTO); diff != "" {
		t.Errorf("Check's RTO differs from the Workload's: -workload, +check:\n%s", diff)
	}
	if r.Failed == 0 || r.Acknowledged == 0 {
		t.Errorf("%s: want writes refused during the outage and acknowledged around it", r)
	}
	t.Log(r)

	// Had the old primary gone on acknowledging after the promotion, S2.
	db.set(func(f *fakeDB) { f.primary = old })
	late := &Workload{Exec: db.exec, FirstID: 1 << 20, Pause: -1}
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if err := late.Run(ctx); err != nil {
		t.Fatal(err)
	}
	r = Check(Input{
		Scenario: "fake-failover", Durability: Sync, Attempts: append(w.Attempts(), late.Attempts()...), Surviving: db.surviving(),
		Promoted: promotedAt, Primary: promoted,
	})
	if len(r.AckedByDeposed) == 0 || r.Err() == nil {
		t.Errorf("%s: want the old primary's acknowledgements after the promotion found (S2)", r)
	}
}

func TestWorkloadIDs(t *testing.T) {
	// One writer: ids follow FirstID one by one, and a second Run goes on
	// where the first stopped.
	db := newFakeDB(old)
	var calls int
	w := &Workload{FirstID: 500, Pause: -1}
	ctx, cancel := context.WithCancel(t.Context())
	w.Exec = func(c context.Context, sql string) (string, error) {
		calls++
		if calls%3 == 0 {
			cancel()
		}
		return db.exec(c, sql)
	}
	for range 2 {
		if err := w.Run(ctx); err != nil {
			t.Fatal(err)
		}
		ctx, cancel = context.WithCancel(t.Context())
	}
	cancel()
	var got []int64
	for _, a := range w.Attempts() {
		got = append(got, a.ID)
	}
	if diff := cmp.Diff([]int64{500, 501, 502, 503, 504, 505}, got); diff != "" {
		t.Errorf("ids: -want, +got:\n%s", diff)
	}
}

func TestWorkloadSetup(t *testing.T) {
	cases := map[string]struct {
		reason  string
		exec    Exec
		wantErr bool
	}{
		"Created": {
			reason: "the table is created with CreateTableSQL",
			exec: func(_ context.Context, sql string) (string, error) {
				if sql != CreateTableSQL {
					return "", fmt.Errorf("unexpected %q", sql)
				}
				return "", nil
			},
		},
		"Refused": {
			reason:  "the Exec's error is returned",
			exec:    func(context.Context, string) (string, error) { return "", errRefused },
			wantErr: true,
		},
		"NoExec": {
			reason:  "a Workload needs an Exec",
			wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := &Workload{Exec: tc.exec}
			if err := w.Setup(t.Context()); (err != nil) != tc.wantErr {
				t.Errorf("%s\nSetup: %v, want error %t", tc.reason, err, tc.wantErr)
			}
		})
	}
	if err := (&Workload{}).Run(t.Context()); err == nil {
		t.Error("Run without an Exec: no error")
	}
}

func TestWorkloadTimeout(t *testing.T) {
	// An Exec that hangs is cut at Timeout; the attempt is indeterminate
	// and names the deadline.
	w := &Workload{Timeout: 10 * time.Millisecond, Pause: -1}
	ctx, cancel := context.WithCancel(t.Context())
	w.Exec = func(c context.Context, _ string) (string, error) {
		<-c.Done()
		cancel() // one attempt
		return "", errors.New("signal: killed")
	}
	start := time.Now()
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	// Loose: CI runs this under -race beside the e2e suite on two cores;
	// an Exec never cut would hang until go test's own timeout.
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Run took %v with a 10 ms timeout", took)
	}
	got := w.Attempts()
	if len(got) != 1 {
		t.Fatalf("%d attempts, want 1", len(got))
	}
	a := got[0]
	if diff := cmp.Diff(context.DeadlineExceeded, a.Err, cmpopts.EquateErrors()); diff != "" {
		t.Errorf("Err: -want, +got:\n%s", diff)
	}
	if a.Outcome() != Indeterminate {
		t.Errorf("Outcome %v, want indeterminate", a.Outcome())
	}
	// Not asserted: End - Start >= the timeout. The deadline is set before
	// Start is read, so the difference can be a little short of it (seen:
	// 9.92 ms of 10): DeadlineExceeded above already says the timeout ran
	// out.
}

func TestLogConcurrent(t *testing.T) {
	// Record, MarkFault, Attempts and RTO from many goroutines (-race).
	var l Log
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				l.Record(acked(int64(g*100+i), float64(i), old))
				if i%10 == 0 {
					l.MarkFault(at(float64(i)))
					_ = l.RTO()
				}
			}
		})
	}
	wg.Wait()
	got := l.Attempts()
	if len(got) != 800 {
		t.Fatalf("%d attempts, want 800", len(got))
	}
	for i, a := range got {
		if a.ID != int64(i) {
			t.Fatalf("Attempts()[%d].ID = %d: sorted by id", i, a.ID)
		}
	}
}
