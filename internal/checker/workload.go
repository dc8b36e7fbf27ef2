package checker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Exec runs one SQL statement on the database under test, through whatever
// path a client of the test uses (psql through the rw Service, a pod exec),
// and returns its output as psql -X -q -A -t prints it. It must return when
// ctx is done. An error that wraps ErrIndeterminate says the statement may
// have reached the server; any other error, that it did not commit.
type Exec func(ctx context.Context, sql string) (string, error)

// Log records attempts and the fault. It is safe for concurrent use; its
// zero value is empty and ready.
type Log struct {
	mu       sync.Mutex
	attempts []Attempt
	fault    time.Time
}

// Record adds an attempt.
func (l *Log) Record(a Attempt) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attempts = append(l.attempts, a)
}

// MarkFault records when the fault was injected; a later call replaces it.
func (l *Log) MarkFault(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fault = t
}

// Fault is the time MarkFault recorded, zero if none.
func (l *Log) Fault() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fault
}

// Attempts is a copy of the attempts recorded so far, sorted by id.
func (l *Log) Attempts() []Attempt {
	l.mu.Lock()
	a := slices.Clone(l.attempts)
	l.mu.Unlock()
	slices.SortStableFunc(a, func(x, y Attempt) int { return cmp.Compare(x.ID, y.ID) })
	return a
}

// RTO measures the RTO of the marked fault from the attempts so far
// (MeasureRTO).
func (l *Log) RTO() RTO {
	return MeasureRTO(l.Attempts(), l.Fault())
}

// Defaults of a Workload's zero fields.
const (
	DefaultTimeout = 5 * time.Second
	DefaultPause   = 100 * time.Millisecond
)

// Workload is a client writing uniquely numbered rows: Writers goroutines,
// each inserting one row at a time (InsertSQL) through Exec, recording
// every attempt in the embedded Log. Set its fields before Run; do not copy
// it once used.
type Workload struct {
	Exec Exec
	// Writers is how many write concurrently; zero: one.
	Writers int
	// FirstID is the first id written, the next ones follow; zero: 1. A
	// scenario that shares the table with an earlier one starts above the
	// ids the earlier one used.
	FirstID int64
	// Timeout bounds each attempt; zero: DefaultTimeout. An attempt that
	// runs out of time is Indeterminate.
	Timeout time.Duration
	// Pause is a writer's pause after each attempt; zero: DefaultPause,
	// negative: none.
	Pause time.Duration

	Log

	next atomic.Int64 // ids handed out so far
}

// Setup creates the table (CreateTableSQL), within Timeout.
func (w *Workload) Setup(ctx context.Context) error {
	if w.Exec == nil {
		return errors.New("checker: Workload.Exec is nil")
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(w.Timeout, DefaultTimeout))
	defer cancel()
	if _, err := w.Exec(ctx, CreateTableSQL); err != nil {
		return fmt.Errorf("checker: create table %s: %w", Table, err)
	}
	return nil
}

// Run writes until ctx is done, then returns once every writer has stopped.
// The attempt in flight when ctx is done is recorded as Indeterminate (it
// may have committed). Run may be called again (with the same Exec) to go
// on writing: ids keep increasing.
func (w *Workload) Run(ctx context.Context) error {
	if w.Exec == nil {
		return errors.New("checker: Workload.Exec is nil")
	}
	var wg sync.WaitGroup
	for range max(w.Writers, 1) {
		wg.Go(func() { w.write(ctx) })
	}
	wg.Wait()
	return nil
}

// write is one writer's loop.
func (w *Workload) write(ctx context.Context) {
	timeout, pause := cmp.Or(w.Timeout, DefaultTimeout), cmp.Or(w.Pause, DefaultPause)
	for ctx.Err() == nil {
		w.Record(w.attempt(ctx, cmp.Or(w.FirstID, 1)+w.next.Add(1)-1, timeout))
		if pause > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
	}
}

// attempt writes id once.
func (w *Workload) attempt(ctx context.Context, id int64, timeout time.Duration) Attempt {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	a := Attempt{ID: id, Start: time.Now()}
	out, err := w.Exec(ctx, InsertSQL(id))
	a.End = time.Now()
	switch {
	case err != nil && ctx.Err() != nil:
		// The Exec may report a killed psql, not the deadline: say which.
		a.Err = fmt.Errorf("%w: %w", ctx.Err(), err)
	case err != nil:
		a.Err = err
	default:
		if a.Server, err = ParseAnswer(id, out); err != nil {
			// The statement ran; its answer cannot say by whom.
			a.Err = fmt.Errorf("%w: %w", ErrIndeterminate, err)
		}
	}
	return a
}
