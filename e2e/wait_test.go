//go:build e2e

package e2e

import (
	"testing"
	"time"
)

// eventually polls check until it reports done, failing the test after
// timeout with what and the last state check described.
func eventually(t testing.TB, timeout time.Duration, what string, check func() (bool, string)) {
	t.Helper()
	eventuallyExplained(t, timeout, what, check, nil)
}

// eventuallyExplained is eventually, and on a timeout it adds what explain
// says: a diagnosis too slow or too noisy to run on every poll.
func eventuallyExplained(t testing.TB, timeout time.Duration, what string, check func() (bool, string), explain func() string) {
	t.Helper()
	t0 := time.Now()
	if !poll(timeout, check) {
		_, last := check()
		if explain != nil {
			last += "; " + explain()
		}
		t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, last)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Logf("waited %s for %s", d.Round(100*time.Millisecond), what)
	}
}

// poll polls check every 250ms until done or timeout; reports whether done.
func poll(timeout time.Duration, check func() (bool, string)) bool {
	deadline := time.Now().Add(timeout)
	for {
		if ok, _ := check(); ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(250 * time.Millisecond)
	}
}
