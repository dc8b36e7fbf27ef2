//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/example/function-database/e2e/internal/cluster"
)

// Scenario groups, and the lane (docs/developing.md, "The e2e suite's
// schedule"). TestFailover runs on a lane, a real node of its own (its large
// Database, writer and failover Jobs need the CPU a node's scheduler would
// refuse beside another group's requests), so it never inherits what
// TestRealNode leaves on the first real node. The groups run one after the
// other by default. E2E_PARALLEL=1 runs TestFailover beside TestRealNode
// (at most -parallel at once, hack/e2e.sh: 2): the suite mostly waits, but
// on this two-core machine the two groups' six instances, two writers and
// the control plane starved the instances' liveness probes (12 s without
// an answer, the fence's bound): CI of session 25's schedule saw all three
// of TestFailover's instances killed and crash-looping for five minutes
// after FrozenPrimary (nothing lost), TestRealNode/SizeChange took 8m36s
// instead of 4m, and the run saved no time. Kept for a machine with more
// cores.
//
// A step that disturbs what every group relies on (Crossplane core stopped:
// TestFailover/CrossplaneDown) runs alone (a step marked alone): it waits until the steps
// of the other groups under way have ended, and holds theirs back until it
// ends (stepLock).

// concurrent marks t a group that runs beside the others, on node: the
// first real node (cluster.RealNodeName) or the lane's (laneNodeName). Two
// groups never share a node: their Databases' CPU requests would not fit on
// one, so a second group on a node waits for the first.
//
// Only with E2E_PARALLEL=1 (see above) do the groups run beside each other.
func (s *suite) concurrent(t *testing.T, node string) {
	t.Helper()
	if os.Getenv("E2E_PARALLEL") == "1" {
		t.Parallel()
	}
	v, _ := s.nodeGroups.LoadOrStore(node, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	t0 := time.Now()
	mu.Lock()
	t.Cleanup(mu.Unlock)
	if d := time.Since(t0); d > time.Second {
		logf("%s waited %s for node %s", t.Name(), d.Round(time.Second), node)
	}
}

const (
	laneLabel       = "e2e.function-database/lane"
	laneNodeName    = "lane-node-1"
	laneComposition = "database-lane"
)

// laneNode starts the lane's node once for the suite (labelled laneLabel,
// addresses 10.88.96.0 - 10.88.127.255 between the first node's and the
// pool's), and the Composition of its Databases: realComposition with the
// pool's StorageClass, whose volumes go to the node the scheduler picks. It
// is stopped with the suite.
func (s *suite) laneNode(t *testing.T) {
	t.Helper()
	s.realNode(t)
	if err := s.laneStarted.do(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		n, err := cluster.StartExtraNode(ctx, s.node, cluster.ExtraNode{
			Name: laneNodeName, Labels: laneLabel + "=true", RangeStart: "10.88.96.1", RangeEnd: "10.88.127.254",
		})
		s.mu.Lock()
		s.lanes = append(s.lanes, n)
		s.mu.Unlock()
		if err != nil {
			return fmt.Errorf("lane node: %w", err)
		}
		if err := s.ensurePoolClass(ctx); err != nil {
			return err
		}
		return s.applyComposition(ctx, laneComposition, func(input map[string]any) {
			input["storageClassName"] = poolClass
		})
	}); err != nil {
		t.Fatal(err)
	}
}

// laneNamespace makes a namespace whose pods go to the lane's node.
func (s *suite) laneNamespace(t *testing.T, ns string) {
	s.nodeNamespace(t, ns, laneLabel+"=true")
}

// stopLanes stops the lanes' nodes (with the suite).
func (s *suite) stopLanes() {
	s.mu.Lock()
	lanes := s.lanes
	s.lanes = nil
	s.mu.Unlock()
	for _, n := range lanes {
		if n != nil {
			n.Stop()
		}
	}
}

// lockStep takes stepLock for step name of a top-level test (a step inside
// a step runs under its parent's): shared, or alone. It returns the unlock.
func (s *suite) lockStep(parent *testing.T, name string, alone bool) func() {
	if strings.Contains(parent.Name(), "/") {
		return func() {}
	}
	if alone {
		t0 := time.Now()
		s.stepLock.Lock()
		if d := time.Since(t0); d > time.Second {
			logf("%s/%s waited %s for the steps beside it to end", parent.Name(), name, d.Round(time.Second))
		}
		return s.stepLock.Unlock
	}
	s.stepLock.RLock()
	return s.stepLock.RUnlock
}

// fullMatrix skips t unless E2E_FULL=1, when also (not empty) names what
// proves t's property in every run. The full matrix is for a session's
// rehearsal, not for CI: on two cores the whole suite outgrew CI's 90
// minutes (about 99 minutes measured in session 26), so scenarios another
// one covers run only there (docs/developing.md, "The e2e suite's
// schedule").
func fullMatrix(t *testing.T, also string) {
	t.Helper()
	if also != "" && os.Getenv("E2E_FULL") != "1" {
		t.Skipf("in the full matrix only (E2E_FULL=1); every run proves its property with %s", also)
	}
}
