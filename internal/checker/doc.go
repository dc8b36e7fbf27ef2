// Package checker is the independent checker of a failover test, in the
// manner of Jepsen: a client writes uniquely numbered rows while a fault is
// injected, logging for each write whether it was acknowledged and by which
// server (system identifier, timeline, address, time); afterwards the
// checker reads what survived on the final primary and says whether the
// failover kept its promises. It depends on no database driver: the caller
// supplies how a statement runs (Exec).
//
// # Invariants
//
//   - S1, durability sync: no acknowledged commit is lost. Every write
//     acknowledged to the client is on the final primary. Under async,
//     acknowledged writes the standbys had not received may be lost: they
//     are reported, and the caller decides what bound it accepts.
//   - S2: no write is acknowledged by a deposed primary after the promotion
//     decision, whatever the durability. A write acknowledged after the
//     promotion by a server not on the final primary's timeline was
//     accepted by a primary that should have been fenced.
//   - S3: never two writable primaries. Two distinct servers answered as
//     writable (SampleSQL) at overlapping times.
//
// A write that timed out, was cut short, or whose answer could not be read
// is indeterminate: it may or may not have committed, so it is not lost when
// absent and not an error when present. A failed write (the Exec's error
// says it did not commit) is counted; found present it is reported
// (Report.FailedPresent), a sign the Exec's errors were not definite.
//
// Besides the invariants the checker measures the RTO as the client saw it
// (MeasureRTO): the longest time between two acknowledged writes across the
// fault, and the time from the fault to the first write acknowledged on a
// newer timeline.
//
// # Use
//
// A test creates a Workload with an Exec (psql through the rw Service, a
// pod exec), creates the table, runs the writers, injects the fault and
// marks it, waits for the failover, stops the writers, reads the surviving
// ids from the final primary and checks:
//
//	w := &checker.Workload{Exec: exec, Writers: 4}
//	if err := w.Setup(ctx); err != nil { ... }
//	run, stop := context.WithCancel(ctx)
//	done := make(chan error)
//	go func() { done <- w.Run(run) }()
//	w.MarkFault(time.Now())
//	... freeze the primary, wait for the promotion (promoted, primary) ...
//	stop(); <-done
//	out, err := exec(ctx, checker.SurvivingSQL) // on the final primary
//	ids, err := checker.ParseIDs(out)
//	r := checker.Check(checker.Input{
//		Scenario: "frozen-primary", Durability: checker.Sync,
//		Attempts: w.Attempts(), Surviving: ids, Fault: w.Fault(),
//		Promoted: promoted, Primary: primary, Samples: samples,
//	})
//	t.Log(r) // checker: scenario=frozen-primary durability=sync acknowledged=812 lost=0 ...
//	if err := r.Err(); err != nil { t.Error(err) }
//
// The final primary's Server is what ParseSample reads from its answer to
// SampleSQL. Samples, optional, are the answers of every instance to
// SampleSQL asked over time (ParseSample); asked of each instance directly
// they check S3 for the instances, asked through the Services for what
// clients can reach.
//
// Each write is one statement (InsertSQL) that inserts its id and returns
// the committing server's identity in the same round trip, so an
// acknowledgement names the server that committed it. Every statement
// expects psql's unaligned, tuples-only, quiet output (psql -X -q -A -t).
package checker
