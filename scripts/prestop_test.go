package scripts

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPreStop: the postgres container's preStop hook holds a primary with a
// streaming standby (its pod being deleted: a drain) until a switchover
// moved the primary, and returns at once where no switchover will come.
func TestPreStop(t *testing.T) {
	t.Parallel()
	c, p, s := newPair(t, "ps-db")
	onStop := filepath.Join(c.scripts, "switchover-on-stop")
	preStop := func(in *instance, extra ...string) (string, time.Duration) {
		t.Helper()
		start := time.Now()
		out, err := c.script(2*time.Minute, in.env(extra...), PreStop)
		if err != nil {
			t.Fatalf("prestop.sh on %s: %v\n%s", in.pod, err, out)
		}
		return out, time.Since(start)
	}
	// What the bounds below allow for one run of the script that asks
	// nothing: bash, lib.sh, one psql at most. Far below the wait it is
	// told from (DRAIN_WAIT_SECONDS, 45 s by default), and far above what
	// it takes on a quiet machine (well under a second), since CI runs
	// these tests beside the e2e suite on two cores.
	const quick = 20 * time.Second

	writeFile(t, onStop, "false\n")
	if _, took := preStop(p); took > quick {
		t.Errorf("with %s false the primary's hook took %s, want it to return at once", onStop, took)
	}
	writeFile(t, onStop, "true\n")
	if _, took := preStop(s); took > quick {
		t.Errorf("a standby's hook took %s, want it to return at once", took)
	}

	// No switchover comes: the hook gives up after DRAIN_WAIT_SECONDS.
	_, took := preStop(p, "DRAIN_WAIT_SECONDS=2")
	if took < 2*time.Second || took > 2*time.Second+quick {
		t.Errorf("with no switchover the hook returned after %s, want DRAIN_WAIT_SECONDS (2s)", took)
	}
	if !strings.Contains(p.logs(), "no switchover within 2s") {
		t.Errorf("the postmaster's log does not say the hook gave up:\n%s", tail(p.logs(), 20))
	}

	// A switchover moves the primary while the hook waits: it returns
	// once the standby was promoted, not before.
	type result struct {
		took time.Duration
		at   time.Time
	}
	done := make(chan result, 1)
	go func() {
		_, took := preStop(p, "DRAIN_WAIT_SECONDS=90")
		done <- result{took, time.Now()}
	}()
	waitFor(t, 30*time.Second, "the hook waiting", func() error {
		if !strings.Contains(p.logs(), "serves on until a switchover moves it") {
			return fmt.Errorf("no line of the hook in the postmaster's log yet")
		}
		return nil
	})
	select {
	case r := <-done:
		t.Fatalf("the hook returned after %s with a standby streaming and no switchover", r.took)
	default:
	}
	// Queries that fail are no answer: no connection to the hook's
	// database is accepted until two of its rounds were refused (as when
	// the switchover Job ends the primary's sessions, the hook's own
	// among them), and the hook waits on. Before SILENT_LOOKS it returned
	// at the first failed query and the kubelet stopped the primary under
	// the switchover.
	const refused = `database "postgres" is not currently accepting connections`
	before := strings.Count(p.logs(), refused)
	c.superSQL(t, p, "template1", "ALTER DATABASE postgres ALLOW_CONNECTIONS false")
	waitFor(t, 30*time.Second, "two of the hook's rounds refused", func() error {
		select {
		case r := <-done:
			t.Fatalf("the hook returned after %s at a failed query (SILENT_LOOKS 5):\n%s", r.took, tail(p.logs(), 10))
		default:
		}
		if n := strings.Count(p.logs(), refused) - before; n < 2 {
			return fmt.Errorf("%d refused so far", n)
		}
		return nil
	})
	c.superSQL(t, p, "template1", "ALTER DATABASE postgres ALLOW_CONNECTIONS true")
	select {
	case r := <-done:
		t.Fatalf("the hook returned after %s when two of its queries failed (SILENT_LOOKS 5):\n%s", r.took, tail(p.logs(), 10))
	default:
	}
	r := c.runFailover(t, []int{p.port, s.port}, 0, 0, "MODE=switchover", "TARGET_ORDINAL=1")
	promoted := time.Now()
	if out := r.outcome(t); out["result"] != "promoted" || out["to"] != 1.0 {
		t.Fatalf("switchover: %v\n%s", out, tail(r.out, 30))
	}
	select {
	case res := <-done:
		t.Logf("the hook returned %s after the promotion (switchover %s)", res.at.Sub(promoted).Round(10*time.Millisecond), r.took.Round(10*time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatalf("the hook still waits 30s after the promotion")
	}
	if !strings.Contains(p.logs(), "prestop: no standby streams any more") && !strings.Contains(p.logs(), "prestop: the primary moved") {
		t.Errorf("the postmaster's log does not say why the hook returned:\n%s", tail(p.logs(), 20))
	}
}
