//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/example/function-database/e2e/internal/kube"
	"github.com/example/function-database/e2e/internal/proc"
)

// TestFleet is the cost of a fleet on the kwok control plane (issue 26):
// E2E_FLEET small Databases applied at once over fleetNamespaces
// namespaces, with enough fake nodes for their pods. It measures, from
// /proc, the CPU each control-plane process spent while the fleet became
// Ready and during two minutes at rest (core as a platform runs it: its
// default poll interval, no debug logs), and each one's memory; then it
// restarts the function and Crossplane core and requires that every
// Database is composed again by them with nothing regenerated (the
// credentials Secrets' contents and the StatefulSets' UIDs unchanged) and
// still Ready. Not part of the full run: `hack/fleet.sh [N]` runs it
// alone (it leaves the fleet behind).
func TestFleet(t *testing.T) {
	n := optInCount(t, "E2E_FLEET", "hack/fleet.sh [N]")
	readyWithin := 5 * time.Minute
	if v := os.Getenv("E2E_FLEET_READY_MINUTES"); v != "" {
		m, err := strconv.Atoi(v)
		if err != nil || m < 1 {
			t.Fatalf("E2E_FLEET_READY_MINUTES %q: want a positive number", v)
		}
		readyWithin = time.Duration(m) * time.Minute
	}
	// E2E_FLEET_BACKUPS=off: Databases without backups (one claim each, not
	// two), to tell the volume binding's share of the time to Ready.
	spec := map[string]any{"size": "small"}
	switch b := os.Getenv("E2E_FLEET_BACKUPS"); b {
	case "", "on":
	case "off":
		spec["backup.enabled"] = false
	default:
		t.Fatalf("E2E_FLEET_BACKUPS %q: want on or off", b)
	}
	s := env
	ctx := context.Background()

	// Each Database has two ClusterIP Services: the suite's range (a /24,
	// kept small for the real node's kube-proxy and CoreDNS) holds 125
	// Databases. A second range for the fleet, as a platform adds one
	// (ServiceCIDR, networking.k8s.io/v1 since Kubernetes 1.33).
	extra := &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet"},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.1.0.0/16"}},
	}
	if _, err := s.k.CS.NetworkingV1().ServiceCIDRs().Create(ctx, extra, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("ServiceCIDR for the fleet: %v", err)
	}
	eventually(t, time.Minute, "ServiceCIDR fleet Ready", func() (bool, string) {
		c, err := s.k.CS.NetworkingV1().ServiceCIDRs().Get(ctx, "fleet", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range c.Status.Conditions {
			if cond.Type == networkingv1.ServiceCIDRConditionReady && cond.Status == metav1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%v", c.Status.Conditions)
	})

	// One instance each; a kwok node takes 110 pods.
	nodes := n/100 + 1
	for i := range nodes {
		if err := s.cl.KwokNode(ctx, fmt.Sprintf("fleet-node-%d", i), fmt.Sprintf("zone-%c", 'a'+i%3), false); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]database, n)
	for i := range n {
		ns := fmt.Sprintf("fleet-%d", i%fleetNamespaces)
		if i < fleetNamespaces {
			s.ensureNamespace(t, ns)
		}
		u := newDatabase(t, fmt.Sprintf("db-%04d", i), spec)
		u.SetNamespace(ns)
		names[i] = database{gvk: u.GroupVersionKind(), ns: ns, name: u.GetName()}
	}
	// The function keeps its --debug: one line per request, which the
	// restarts below read.
	s.coreAsPlatformsRunIt(t)
	procs := s.controlPlane()
	t.Logf("%d Databases (spec %v) in %d namespaces, %d more kwok nodes; measuring %s", n, spec, fleetNamespaces, nodes, strings.Join(slices.Sorted(maps.Keys(procs)), ", "))

	before := cpuOf(t, procs)
	t0 := time.Now()
	s.step(t, "Apply", func(t *testing.T) {
		var wg sync.WaitGroup
		work := make(chan database)
		for range 16 {
			wg.Go(func() {
				for d := range work {
					u := newDatabase(t, d.name, spec)
					u.SetNamespace(d.ns)
					if _, err := s.k.Create(ctx, u); err != nil {
						t.Errorf("create %s: %v", d, err)
					}
				}
			})
		}
		for _, d := range names {
			work <- d
		}
		close(work)
		wg.Wait()
		t.Logf("%d Databases created in %s", n, time.Since(t0).Round(time.Millisecond))
	})
	if t.Failed() {
		return
	}

	var readyAt map[database]time.Duration
	s.step(t, "AllReady", func(t *testing.T) {
		eventually(t, readyWithin, fmt.Sprintf("%d Databases Ready", n), func() (bool, string) {
			readyAt = s.fleetReady(t, names)
			return len(readyAt) == n, fmt.Sprintf("%d of %d Ready", len(readyAt), n)
		})
		took := time.Since(t0)
		var times []time.Duration
		for _, d := range readyAt {
			times = append(times, d)
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		t.Logf("all %d Ready %s after the first create; each Ready after its creation: p50 %s, p90 %s, max %s",
			n, took.Round(time.Second), times[len(times)/2], times[len(times)*9/10], times[len(times)-1])
		reportCPU(t, "applying the fleet until all Ready", took, before, cpuOf(t, procs))
		reportMemory(t, procs)
	})
	if t.Failed() {
		return
	}

	s.step(t, "AtRest", func(t *testing.T) {
		// Two minutes of steady state: every Database reconciled at core's
		// poll interval (a minute), nothing to change.
		const window = 2 * time.Minute
		c0, w0 := cpuOf(t, procs), time.Now()
		<-time.After(window)
		reportCPU(t, "two minutes at rest", time.Since(w0), c0, cpuOf(t, procs))
	})

	kept := s.fleetState(t, names)
	for _, restart := range []struct {
		name string
		do   func() error
	}{
		{"RestartFunction", func() error {
			s.xp.Fn.Stop(15 * time.Second)
			return s.xp.Fn.Start()
		}},
		{"RestartCore", s.xp.RestartCore},
	} {
		s.step(t, restart.name, func(t *testing.T) {
			from := proc.FileSize(s.xp.Fn.Log)
			t1 := time.Now()
			if err := restart.do(); err != nil {
				t.Fatal(err)
			}
			// Every Database composed again by the restarted process (or
			// through it), judged by the function's own log.
			eventually(t, readyWithin, fmt.Sprintf("every Database composed after %s", restart.name), func() (bool, string) {
				seen := composedSince(s.xp.Fn.Log, from)
				missing := 0
				for _, d := range names {
					if !seen[d.ns+"/"+d.name] {
						missing++
					}
				}
				return missing == 0, fmt.Sprintf("%d of %d not composed yet", missing, n)
			})
			t.Logf("every Database composed again %s after the restart", time.Since(t1).Round(time.Second))
			got := s.fleetState(t, names)
			changed := 0
			for d, v := range kept {
				if got[d] != v {
					changed++
					if changed <= 5 {
						t.Errorf("%s: %s → %s", d, v, got[d])
					}
				}
			}
			if changed > 0 {
				t.Errorf("%d Databases had a Secret or StatefulSet regenerated", changed)
			}
			if r := s.fleetReady(t, names); len(r) != n {
				t.Errorf("%d of %d Databases Ready after %s", len(r), n, restart.name)
			}
		})
	}
}

// optInCount is the size of a measurement that runs on purpose: the
// positive number in the environment variable name, or a skip naming the
// command that sets it.
func optInCount(t *testing.T, name, command string) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Skipf("runs on purpose: %s", command)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s %q: want a positive number", name, v)
	}
	return n
}

// coreAsPlatformsRunIt restarts Crossplane core without the suite's --debug
// logs and 15 s poll interval (kept for its scenarios' speed), which would
// bill a measurement for four times the reconciles at rest and a log line
// per event; the suite's arguments come back when the test ends (for the
// next restart).
func (s *suite) coreAsPlatformsRunIt(t *testing.T) {
	t.Helper()
	suiteArgs := s.xp.Core.Args
	s.xp.Core.Args = slices.DeleteFunc(slices.Clone(suiteArgs), func(a string) bool {
		return a == "--debug" || strings.HasPrefix(a, "--poll-interval=")
	})
	t.Cleanup(func() { s.xp.Core.Args = suiteArgs })
	if err := s.xp.RestartCore(); err != nil {
		t.Fatal(err)
	}
}

// fleetNamespaces is how many namespaces the fleet spreads over.
const fleetNamespaces = 10

// controlPlane are the processes whose CPU a fleet costs: the cluster's,
// Crossplane's and the function's, by name.
func (s *suite) controlPlane() map[string]*proc.Proc {
	out := map[string]*proc.Proc{}
	for _, p := range slices.Concat(s.cl.Procs(), s.xp.Procs()) {
		out[p.Name] = p
	}
	return out
}

// fleetReady lists the Databases of names that are Ready, each with how
// long after its creation it turned Ready (whole seconds: the API's
// timestamps).
func (s *suite) fleetReady(t *testing.T, names []database) map[database]time.Duration {
	t.Helper()
	c, err := s.k.Resource(names[0].gvk, "")
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("list Databases: %v", err)
		return nil
	}
	want := map[database]bool{}
	for _, d := range names {
		want[d] = true
	}
	out := map[database]time.Duration{}
	for i := range list.Items {
		u := &list.Items[i]
		d := database{gvk: names[0].gvk, ns: u.GetNamespace(), name: u.GetName()}
		if !want[d] {
			continue
		}
		if c := kube.GetCondition(u, "Ready"); c.Status == "True" {
			out[d] = c.LastTransitionTime.Sub(u.GetCreationTimestamp().Time)
		}
	}
	return out
}

// fleetState is what must never be regenerated, per Database: the
// contents of its credentials Secret (hashed) and its StatefulSet's UID.
func (s *suite) fleetState(t *testing.T, names []database) map[database]string {
	t.Helper()
	ctx := context.Background()
	secrets := map[string]*corev1.Secret{}
	sets := map[string]string{}
	for ns := range fleetNamespaces {
		name := fmt.Sprintf("fleet-%d", ns)
		sl, err := s.k.CS.CoreV1().Secrets(name).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range sl.Items {
			secrets[name+"/"+sl.Items[i].Name] = &sl.Items[i]
		}
		stl, err := s.k.CS.AppsV1().StatefulSets(name).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range stl.Items {
			sets[name+"/"+stl.Items[i].Name] = string(stl.Items[i].UID)
		}
	}
	out := map[database]string{}
	for _, d := range names {
		sec := secrets[d.ns+"/"+d.name+"-credentials"]
		if sec == nil {
			t.Fatalf("%s: no Secret %s-credentials", d, d.name)
		}
		h := sha256.New()
		for _, k := range slices.Sorted(maps.Keys(sec.Data)) {
			h.Write([]byte(k + "\x00"))
			h.Write(sec.Data[k])
			h.Write([]byte{0})
		}
		out[d] = "secret " + hex.EncodeToString(h.Sum(nil))[:12] + ", statefulset " + sets[d.ns+"/"+d.name]
	}
	return out
}

// composedLine is the function's debug line for one composed Database.
var composedLine = regexp.MustCompile(`Composed a Database\s+\{"xr-name": "([^"]+)", "xr-namespace": "([^"]*)"`)

// composedSince are the Databases (namespace/name) the function's log
// says it composed after offset.
func composedSince(log string, offset int64) map[string]bool {
	out := map[string]bool{}
	for _, m := range composedLine.FindAllStringSubmatch(proc.ReadFrom(log, offset), -1) {
		out[m[2]+"/"+m[1]] = true
	}
	return out
}

// cpuTicks are a process's user and system CPU in clock ticks (USER_HZ,
// 100 on Linux), by name.
type cpuTicks map[string]int64

func cpuOf(t *testing.T, procs map[string]*proc.Proc) cpuTicks {
	t.Helper()
	out := cpuTicks{}
	for name, p := range procs {
		pid := p.PID()
		if pid == 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			t.Logf("%s: %v", name, err)
			continue
		}
		// The fields after "pid (comm) ": state is the first, utime the
		// 12th, stime the 13th.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		out[name] = utime + stime
	}
	return out
}

// reportCPU logs each process's CPU between two readings, in core-seconds
// and as its share of the whole control plane's.
func reportCPU(t *testing.T, what string, wall time.Duration, from, to cpuTicks) {
	t.Helper()
	const hz = 100
	total := int64(0)
	for name, v := range to {
		if _, ok := from[name]; ok {
			total += v - from[name]
		}
	}
	var lines []string
	for _, name := range slices.Sorted(maps.Keys(to)) {
		if _, ok := from[name]; !ok {
			continue
		}
		d := to[name] - from[name]
		share := 0.0
		if total > 0 {
			share = 100 * float64(d) / float64(total)
		}
		lines = append(lines, fmt.Sprintf("  %-16s %8.1f s CPU  %5.1f%%", name, float64(d)/hz, share))
	}
	t.Logf("CPU %s (%s wall, %.1f core-seconds in all, %.2f cores on average):\n%s",
		what, wall.Round(time.Second), float64(total)/hz, float64(total)/hz/wall.Seconds(), strings.Join(lines, "\n"))
}

// reportMemory logs each process's resident memory now.
func reportMemory(t *testing.T, procs map[string]*proc.Proc) {
	t.Helper()
	var lines []string
	for _, name := range slices.Sorted(maps.Keys(procs)) {
		pid := procs[name].PID()
		if pid == 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if rss, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				lines = append(lines, fmt.Sprintf("  %-16s %s", name, strings.TrimSpace(rss)))
			}
		}
	}
	t.Logf("resident memory:\n%s", strings.Join(lines, "\n"))
}
