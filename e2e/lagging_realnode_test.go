//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/example/function-database/e2e/internal/cluster"
)

// The LaggingStandby scenario (issue 21's "a standby lagging at the moment
// of loss", reproduction 3): under sync, the one standby that holds the
// last acknowledged commits is the one whose replay lags. A Job that ranked
// standbys by what they replayed, or skipped one still replaying, promoted
// the other and lost every commit only the lagging one held.
//
// The fault, from the host, on a three-instance Database:
//   - the holder's replay (its startup process) stops: a standby whose
//     single-threaded replay fell behind under a write load;
//   - the other standby's walreceiver stops: it receives nothing more, so
//     the holder alone acknowledges the primary's synchronous commits;
//   - a bulk write (laggingRows rows, about 50 MB of WAL) commits on the
//     primary, acknowledged once the holder flushed it;
//   - the primary freezes (as FrozenPrimary), the other standby's receiver
//     resumes (nothing left to receive from a frozen primary);
//   - once the failover Job has seen the holder short of what it received,
//     its replay resumes, throttled (a fifth of the time), until the
//     promotion.
//
// The holder must be promoted, the bulk write must be there, and the
// checker's line must say lost=0.
type laggingStandby struct {
	holder, behind       string // pod names
	holderUID, behindUID string
	// rows is what the bulk write committed (the count to find again).
	rows int
	// throttle ends the holder's throttled replay and resumes it fully.
	throttle func()
	resume   []func() // every process stopped, resumed at the end
}

// laggingRows: about 50 MB of heap and WAL, written in a few seconds,
// replayed by an unthrottled standby in a few more. Not more: the new
// primary's first reads and vacuum of the table log an image of each page
// (hint bits, wal_log_hints), as much WAL again, and the former primary's
// slot on it is lost past max_slot_wal_keep_size (128 MB on the pool's
// 1Gi volumes) before the rejoin (seen with 700,000 rows: rewound, then
// cloned again).
const laggingRows = 350_000

// laggingMinBytes: the least WAL the holder must have received and not
// replayed at the loss for the scenario to test what it claims.
const laggingMinBytes = 32 << 20

// lagTheStandbys stops the holder's replay and the other standby's
// receiver, commits the bulk write on the primary, and checks the
// positions the scenario needs. The caller freezes the primary next, then
// calls receiverBack.
func (s *suite) lagTheStandbys(t *testing.T, ns, db, primary string) *laggingStandby {
	t.Helper()
	ctx := context.Background()
	var standbys []string
	for k := range 3 {
		if n := fmt.Sprintf("%s-%d", db, k); n != primary {
			standbys = append(standbys, n)
		}
	}
	l := &laggingStandby{behind: standbys[0], holder: standbys[1], rows: laggingRows}
	for _, p := range []struct {
		name string
		uid  *string
	}{{l.holder, &l.holderUID}, {l.behind, &l.behindUID}} {
		pod, err := s.k.CS.CoreV1().Pods(ns).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		*p.uid = string(pod.UID)
	}
	t.Cleanup(l.release)

	replay := signalTitled(t, l.holderUID, "startup", syscall.SIGSTOP)
	l.resume = append(l.resume, func() { signalPIDs(replay, syscall.SIGCONT) })
	receiver := signalTitled(t, l.behindUID, "walreceiver", syscall.SIGSTOP)
	l.resume = append(l.resume, func() { signalPIDs(receiver, syscall.SIGCONT) })
	t.Logf("stopped %s's replay (pids %v) and %s's WAL receiver (pids %v)", l.holder, replay, l.behind, receiver)

	// Acknowledged under sync once the holder flushed it: the other
	// standby receives nothing.
	start := time.Now()
	if out := s.superSQL(ns, primary, fmt.Sprintf(
		"DROP TABLE IF EXISTS lagging_bulk; CREATE TABLE lagging_bulk AS SELECT g AS id, repeat('x', 100) AS pad FROM generate_series(1, %d) g; SELECT count(*) FROM lagging_bulk", l.rows)); out != strconv.Itoa(l.rows) {
		t.Fatalf("the bulk write on %s: %s", primary, out)
	}
	t.Logf("bulk write of %d rows committed on %s in %s (synchronous: %s flushed it)", l.rows, primary, time.Since(start).Round(100*time.Millisecond), l.holder)

	const pos = "SELECT pg_wal_lsn_diff(pg_last_wal_receive_lsn(), '0/0')::bigint || ' ' || pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '0/0')::bigint"
	hr, hp := lsnPair(t, s.superSQL(ns, l.holder, pos))
	br, bp := lsnPair(t, s.superSQL(ns, l.behind, pos))
	t.Logf("at the loss: %s received %d MB, replayed %d MB; %s received %d MB, replayed %d MB", l.holder, hr>>20, hp>>20, l.behind, br>>20, bp>>20)
	if hr-hp < laggingMinBytes {
		t.Fatalf("%s replayed all but %d bytes of what it received (want at least %d behind): the scenario needs a lagging replay", l.holder, hr-hp, laggingMinBytes)
	}
	if max(br, bp) >= hr {
		t.Fatalf("%s holds as much WAL as %s (%d >= %d): the scenario needs one standby alone to hold the last commits", l.behind, l.holder, max(br, bp), hr)
	}
	if hp > max(br, bp) {
		// The other standby's receiver stopped a moment after the
		// holder's replay: it is usually at least there.
		t.Logf("%s replayed more (%d) than %s holds (%d): a Job ranking by replay alone would choose right too; this run proves less", l.holder, hp, l.behind, max(br, bp))
	}
	return l
}

// receiverBack resumes the other standby's WAL receiver (the primary is
// frozen by then: nothing more reaches it).
func (l *laggingStandby) receiverBack(t *testing.T) {
	t.Helper()
	l.resume[1]()
	t.Logf("resumed %s's WAL receiver", l.behind)
}

// replayThrottled waits until the failover Job has seen the holder short
// of what it received, then lets its replay run a fifth of the time.
func (s *suite) replayThrottled(t *testing.T, ns, db string, l *laggingStandby) {
	t.Helper()
	ordinal := l.holder[strings.LastIndexByte(l.holder, '-')+1:]
	seen := regexp.MustCompile(`ordinal ` + ordinal + ` (is still replaying|stands at \S+, short of)`)
	eventually(t, 4*time.Minute, "the failover Job seeing "+l.holder+" behind in replay", func() (bool, string) {
		log := s.jobLog(ns, db+"-failover", "failover")
		return seen.MatchString(log), lastLines(log, 3)
	})
	t.Logf("the failover Job: %s", grepLine(s.jobLog(ns, db+"-failover", "failover"), "ordinal "+ordinal+" "))
	pids := cluster.KubepodsPIDs(l.holderUID)
	replay := titled(pids, "startup")
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			signalPIDs(replay, syscall.SIGCONT)
			time.Sleep(20 * time.Millisecond)
			signalPIDs(replay, syscall.SIGSTOP)
			select {
			case <-done:
				return
			case <-time.After(80 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	l.throttle = func() {
		once.Do(func() {
			close(done)
			<-stopped
			signalPIDs(replay, syscall.SIGCONT)
		})
	}
	t.Logf("%s's replay resumed, throttled to a fifth of the time", l.holder)
}

// promoted: the holder was promoted; everything stopped resumes.
func (l *laggingStandby) promoted(t *testing.T, to string) {
	t.Helper()
	l.release()
	if to != l.holder {
		t.Errorf("promoted %s, not %s, the one standby that held the last acknowledged commits (its replay lagging)", to, l.holder)
	}
}

// checkLagging: the bulk write is on the new primary (read once the
// former primary rejoined: the read logs as much WAL as the table holds).
func (s *suite) checkLagging(t *testing.T, ns, to string, l *laggingStandby) {
	t.Helper()
	if got := s.superSQL(ns, to, "SELECT count(*) FROM lagging_bulk"); got != strconv.Itoa(l.rows) {
		t.Errorf("the acknowledged bulk write on the new primary %s: %s rows, want %d", to, got, l.rows)
	} else {
		t.Logf("the acknowledged bulk write is on the new primary %s: %s rows", to, got)
	}
	_ = s.superSQL(ns, to, "DROP TABLE IF EXISTS lagging_bulk")
}

// release resumes everything the scenario stopped (idempotent).
func (l *laggingStandby) release() {
	if l.throttle != nil {
		l.throttle()
	}
	for _, r := range l.resume {
		r()
	}
}

// lsnPair parses "RECEIVED REPLAYED" (bytes).
func lsnPair(t *testing.T, out string) (int64, int64) {
	t.Helper()
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("WAL positions: %q", out)
	}
	a, err1 := strconv.ParseInt(f[0], 10, 64)
	b, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("WAL positions: %q", out)
	}
	return a, b
}

// signalTitled sends sig to the PostgreSQL processes of the pod with this
// UID in role (titled), and returns them; it fails the test when there is
// none.
func signalTitled(t *testing.T, uid, role string, sig syscall.Signal) []int {
	t.Helper()
	pids := titled(cluster.KubepodsPIDs(uid), role)
	if len(pids) == 0 {
		t.Fatalf("no PostgreSQL %s process in pod %s", role, uid)
	}
	signalPIDs(pids, sig)
	return pids
}

// titled are the PostgreSQL processes in role: PostgreSQL rewrites its
// argv to "postgres: CLUSTER_NAME: ROLE ..." (cluster_name is the pod's
// name here).
func titled(pids []int, role string) []int {
	var out []int
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		// The title may end in NUL padding rather than a space.
		if title := strings.ReplaceAll(string(b), "\x00", " ") + " "; strings.HasPrefix(title, "postgres: ") && strings.Contains(title, ": "+role+" ") {
			out = append(out, pid)
		}
	}
	return out
}

func signalPIDs(pids []int, sig syscall.Signal) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}

// jobLog is the log of container c of every pod of Job job (a retried
// Job has several).
func (s *suite) jobLog(ns, job, c string) string {
	pods, err := s.k.CS.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		return "(pods: " + err.Error() + ")"
	}
	var b strings.Builder
	for _, p := range pods.Items {
		b.WriteString(s.podLog(ns, p.Name, c))
	}
	return b.String()
}
