//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/example/function-database/e2e/internal/cluster"
)

// TestIdleCost measures what idle Databases cost the real node (issue 26,
// item 5): the machine's busy CPU and processes forked per minute over a
// window with no Database, then over the same window with
// E2E_IDLE_DATABASES (default 2) of the README's example (medium: two
// instances each) ready and untouched; and each instance pod's own CPU and
// memory from its cgroup. The probes and the password sidecar fork
// processes every few seconds in every instance: on a machine where process
// creation is slow that is most of an idle instance's cost. Not part of the
// full run (a measurement, minutes long):
//
//	E2E_IDLE=1 hack/e2e.sh -run '^TestIdleCost$'
func TestIdleCost(t *testing.T) {
	if os.Getenv("E2E_IDLE") == "" {
		t.Skip("measured on purpose: E2E_IDLE=1 hack/e2e.sh -run '^TestIdleCost$'")
	}
	count := 2
	if v := os.Getenv("E2E_IDLE_DATABASES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("E2E_IDLE_DATABASES=%q: want a count of at least 1", v)
		}
		count = n
	}
	window := 2 * time.Minute
	if v := os.Getenv("E2E_IDLE_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 10*time.Second {
			t.Fatalf("E2E_IDLE_WINDOW=%q: want a duration of at least 10s (%v)", v, err)
		}
		window = d
	}
	s := env
	s.realNode(t)
	const ns = "idle-real"
	s.realNamespace(t, ns)

	base := measureMachine(window)
	t.Logf("baseline (no Database, the function and the node's system pods only): %s", base)

	var ds []database
	for i := range count {
		d := s.create(t, realDatabase(t, ns, fmt.Sprintf("idle-%d", i), "medium", nil))
		t.Cleanup(func() { s.removeDatabases(t, d) })
		ds = append(ds, d)
	}
	for _, d := range ds {
		s.waitRealReady(t, d)
	}
	pods, err := s.k.CS.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var instances []corev1.Pod
	for _, p := range pods.Items {
		if _, ok := p.Labels["statefulset.kubernetes.io/pod-name"]; ok {
			instances = append(instances, p)
		}
	}
	if len(instances) != 2*count {
		t.Fatalf("%d instance pods in %s, want %d", len(instances), ns, 2*count)
	}
	// A first minute after Ready still holds start-up work (the sidecars'
	// first rounds, the passwords applied, the first checkpoints): measured
	// and shown, not counted.
	t.Logf("the first minute after Ready (not counted): %s", measureMachine(time.Minute))
	before := make([]podUsage, len(instances))
	for i, p := range instances {
		if before[i], err = readPodUsage(string(p.UID)); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
	}
	idle := measureMachine(window)
	t.Logf("%d Databases idle (%d instances): %s", count, len(instances), idle)

	perInstance := func(a, b float64) float64 { return (a - b) / float64(len(instances)) }
	minutes := window.Minutes()
	var cpuSum, wsSum float64
	for i, p := range instances {
		after, err := readPodUsage(string(p.UID))
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		cpu := float64(after.cpuNanos-before[i].cpuNanos) / 1e6 / minutes
		ws := float64(after.workingSet) / (1 << 20)
		cpuSum += cpu
		wsSum += ws
		t.Logf("%s: %.0f ms of CPU a minute in its cgroup (%.1f%% of a core), working set %.0f MiB (rss %.0f MiB), %d processes now",
			p.Name, cpu, cpu/600, ws, float64(after.rss)/(1<<20), after.processes)
		if cpu <= 0 || after.workingSet == 0 {
			t.Errorf("%s: no CPU or memory read from its cgroup (cpu %.0f ms/min, working set %d B): the measurement is broken", p.Name, cpu, after.workingSet)
		}
	}
	n := float64(len(instances))
	t.Logf("idle cost per instance: machine CPU %.0f ms a minute (%.1f%% of a core; its own cgroup %.0f ms, the rest is the kubelet, runc and containerd running its probes), %.0f processes forked a minute, working set %.0f MiB",
		perInstance(idle.busyMillisPerMinute, base.busyMillisPerMinute), perInstance(idle.busyMillisPerMinute, base.busyMillisPerMinute)/600,
		cpuSum/n, perInstance(idle.forksPerMinute, base.forksPerMinute), wsSum/n)
	if perInstance(idle.forksPerMinute, base.forksPerMinute) <= 0 {
		t.Errorf("no process forked for the idle instances (%s against %s): the measurement is broken", idle, base)
	}
	// What fits by CPU at the measured idle cost (the scheduler counts the
	// requests instead: 300m and 512Mi an instance on this composition).
	cores := float64(runtime.NumCPU())
	if c := perInstance(idle.busyMillisPerMinute, base.busyMillisPerMinute); c > 0 {
		t.Logf("idle instances that would saturate this machine's %.0f cores: %.0f", cores, cores*60000/c)
	}
}

// machineUsage is what the whole machine did over a window.
type machineUsage struct {
	busyMillisPerMinute float64 // CPU time not idle, all cores
	forksPerMinute      float64 // processes created (/proc/stat processes)
}

func (m machineUsage) String() string {
	return fmt.Sprintf("busy %.0f ms of CPU a minute (%.0f%% of one core), %.0f processes forked a minute", m.busyMillisPerMinute, m.busyMillisPerMinute/600, m.forksPerMinute)
}

// measureMachine reads /proc/stat at both ends of the window.
func measureMachine(window time.Duration) machineUsage {
	busy0, forks0 := procStat()
	t0 := time.Now()
	time.Sleep(window) // the measurement window itself, not a wait for a state
	busy1, forks1 := procStat()
	minutes := time.Since(t0).Minutes()
	return machineUsage{
		// USER_HZ is 100 on Linux: a jiffy is 10 ms.
		busyMillisPerMinute: float64(busy1-busy0) * 10 / minutes,
		forksPerMinute:      float64(forks1-forks0) / minutes,
	}
}

// procStat is the machine's busy jiffies (user, nice, system, irq,
// softirq, steal) and processes created since boot.
func procStat() (busy, forks int64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	for l := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) > 8 && f[0] == "cpu":
			for i, v := range f[1:9] {
				if i == 3 || i == 4 { // idle, iowait
					continue
				}
				n, _ := strconv.ParseInt(v, 10, 64)
				busy += n
			}
		case len(f) == 2 && f[0] == "processes":
			forks, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	return busy, forks
}

// podUsage is a pod's cgroup counters (cgroup v1, the cgroupfs driver).
type podUsage struct {
	cpuNanos        int64 // cpuacct.usage
	workingSet, rss int64 // memory usage less inactive file pages, as the kubelet counts it; total_rss
	processes       int   // pids.current
}

// readPodUsage reads the cgroup of the pod with this UID, in whichever QoS
// class the kubelet put it.
func readPodUsage(uid string) (podUsage, error) {
	var u podUsage
	dir := func(hierarchy string) (string, error) {
		for _, qos := range []string{"", "burstable", "besteffort"} {
			d := filepath.Join(cluster.CgroupV1, hierarchy, "kubepods", qos, "pod"+uid)
			if _, err := os.Stat(d); err == nil {
				return d, nil
			}
		}
		return "", fmt.Errorf("no %s cgroup for pod %s", hierarchy, uid)
	}
	readInt := func(path string) (int64, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	d, err := dir("cpuacct")
	if err != nil {
		return u, err
	}
	if u.cpuNanos, err = readInt(filepath.Join(d, "cpuacct.usage")); err != nil {
		return u, err
	}
	if d, err = dir("memory"); err != nil {
		return u, err
	}
	usage, err := readInt(filepath.Join(d, "memory.usage_in_bytes"))
	if err != nil {
		return u, err
	}
	stat, err := os.ReadFile(filepath.Join(d, "memory.stat"))
	if err != nil {
		return u, err
	}
	var inactiveFile int64
	for l := range strings.SplitSeq(string(stat), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "total_inactive_file":
			inactiveFile = n
		case "total_rss":
			u.rss = n
		}
	}
	u.workingSet = max(usage-inactiveFile, 0)
	if d, err = dir("pids"); err == nil {
		if n, err := readInt(filepath.Join(d, "pids.current")); err == nil {
			u.processes = int(n)
		}
	}
	return u, nil
}
