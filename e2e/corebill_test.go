//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/example/function-database/e2e/internal/proc"
)

// TestCoreBill is Crossplane core's bill in a busy cluster (issue 26): its
// CPU and resident memory at rest, first in the bare suite, then with
// E2E_CORE_BILL unrelated pods (kwok runs them on fake nodes; nothing of
// ours selects them), then with a few Databases, whose reconciles ask core
// for their instance pods (required resources: core answers from a cache
// of Pods). What the pods cost core without Databases is what any cluster
// pays; what they add once Databases exist is what the function's pod
// reads cost. Opt-in (hack/core-bill.sh N): it takes minutes, leaves the
// pods behind, and needs the machine to itself.
func TestCoreBill(t *testing.T) {
	n := optInCount(t, "E2E_CORE_BILL", "hack/core-bill.sh [N]")
	s := env
	ctx := context.Background()
	const podsNS, dbsNS, databases = "bill-pods", "bill-dbs", 10
	const window = 2 * time.Minute

	// Started afresh: core's caches hold only what this test makes it read.
	s.coreAsPlatformsRunIt(t)
	procs := s.controlPlane()
	atRest := func(t *testing.T, what string) {
		c0, w0 := cpuOf(t, procs), time.Now()
		<-time.After(window)
		reportCPU(t, what, time.Since(w0), c0, cpuOf(t, procs))
		reportMemory(t, procs)
		t.Logf("core: %s resident, %s peak; the API server serves %s", procStatus(s.xp.Core, "VmRSS:"), procStatus(s.xp.Core, "VmHWM:"), s.podWatches(ctx))
	}

	steps := []step{
		{name: "Bare", needed: true, run: func(t *testing.T) {
			atRest(t, "two minutes at rest, the bare suite")
		}},
		{name: "Pods", needed: true, run: func(t *testing.T) {
			s.ensureNamespace(t, podsNS)
			// A fake node holds 110 pods; 100 a node leaves room.
			nodes := (n + 99) / 100
			for i := range nodes {
				if err := s.cl.KwokNode(ctx, fmt.Sprintf("bill-node-%d", i), fmt.Sprintf("zone-%c", 'a'+i%3), false); err != nil {
					t.Fatal(err)
				}
			}
			t0 := time.Now()
			var wg sync.WaitGroup
			work := make(chan int)
			for range 16 {
				wg.Go(func() {
					for i := range work {
						if _, err := s.k.CS.CoreV1().Pods(podsNS).Create(ctx, billPod(i, fmt.Sprintf("bill-node-%d", i%nodes)), metav1.CreateOptions{}); err != nil {
							t.Errorf("create pod %d: %v", i, err)
							return
						}
					}
				})
			}
			for i := range n {
				work <- i
			}
			close(work)
			wg.Wait()
			if t.Failed() {
				return
			}
			eventually(t, 15*time.Minute, fmt.Sprintf("%d pods Running", n), func() (bool, string) {
				running, err := s.runningPods(ctx, podsNS)
				if err != nil {
					return false, err.Error()
				}
				return running >= n, fmt.Sprintf("%d of %d Running", running, n)
			})
			t.Logf("%d pods on %d fake nodes Running %s after the first create", n, nodes, time.Since(t0).Round(time.Second))
			atRest(t, fmt.Sprintf("two minutes at rest with %d unrelated pods", n))
		}},
		{name: "Databases", run: func(t *testing.T) {
			s.ensureNamespace(t, dbsNS)
			var dbs []database
			for i := range databases {
				// Two instances: until both are ready the function asks
				// core for their pods (one instance never needs them).
				u := newDatabase(t, fmt.Sprintf("bill-%02d", i), map[string]any{"size": "medium", "backup.enabled": false})
				u.SetNamespace(dbsNS)
				dbs = append(dbs, s.create(t, u))
			}
			t0 := time.Now()
			eventually(t, 5*time.Minute, fmt.Sprintf("%d Databases Ready", databases), func() (bool, string) {
				ready := s.fleetReady(t, dbs)
				return len(ready) == len(dbs), fmt.Sprintf("%d of %d Ready", len(ready), len(dbs))
			})
			t.Logf("%d Databases Ready %s after their creation, among %d unrelated pods", databases, time.Since(t0).Round(time.Second), n)
			atRest(t, fmt.Sprintf("two minutes at rest with %d Databases and %d unrelated pods", databases, n))
		}},
	}
	s.steps(t, steps)
}

// billPod is one unrelated pod, bound to a fake node (no scheduling): what a
// busy cluster's pods look like to a cache of every Pod (labels, one
// container with requests and an environment).
func billPod(i int, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:   fmt.Sprintf("app-%05d", i),
			Labels: map[string]string{"app.kubernetes.io/name": "unrelated", "app.kubernetes.io/instance": fmt.Sprintf("app-%d", i%50)},
		},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.invalid/unrelated:1",
				Env:   []corev1.EnvVar{{Name: "MODE", Value: "serve"}, {Name: "PORT", Value: "8080"}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi"),
				}},
			}},
		},
	}
}

// runningPods counts the Running pods of a namespace, a page at a time.
func (s *suite) runningPods(ctx context.Context, ns string) (int, error) {
	running, cont := 0, ""
	for {
		l, err := s.k.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 2000, Continue: cont})
		if err != nil {
			return running, err
		}
		for i := range l.Items {
			if l.Items[i].Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if cont = l.Continue; cont == "" {
			return running, nil
		}
	}
}

// podWatches says how many watches of Pods the API server serves, by scope
// (apiserver_longrunning_requests): the scheduler's, kwok's and the
// controller manager's are there from the start; a cluster-wide watch more
// once Databases exist is core's cache of Pods.
func (s *suite) podWatches(ctx context.Context) string {
	b, err := s.k.CS.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return "? pod watches (" + err.Error() + ")"
	}
	by := map[string]float64{}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "apiserver_longrunning_requests{") || !strings.Contains(l, `resource="pods"`) || !strings.Contains(l, `verb="WATCH"`) {
			continue
		}
		scope := "?"
		if _, rest, ok := strings.Cut(l, `scope="`); ok {
			scope, _, _ = strings.Cut(rest, `"`)
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			by[scope] += v
		}
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, by[k]))
	}
	return "watches of Pods: " + strings.Join(parts, ", ")
}

// procStatus is one field of a process's /proc status (VmRSS:, VmHWM:).
func procStatus(p *proc.Proc, field string) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.PID()), "status"))
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
