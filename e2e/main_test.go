//go:build e2e

package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/example/function-database/e2e/internal/cluster"
	"github.com/example/function-database/e2e/internal/crossplane"
	"github.com/example/function-database/e2e/internal/kube"
	"github.com/example/function-database/e2e/internal/proc"
	"github.com/example/function-database/e2e/internal/registry"
)

// suite is everything TestMain starts, shared by the tests.
type suite struct {
	root string // the repository
	dir  string // temporary folder: logs, PKI, etcd data, certificates
	cl   *cluster.Cluster
	xp   *crossplane.Stack
	reg  *registry.Registry // the packages' registry
	k    *kube.Client
	node *cluster.Node // the real node, started by the first real-node test
	// pool are the real nodes TestNodes starts beside it, and stops
	// (nodes_realnode_test.go); guarded by mu.
	pool []*cluster.Node
	bin  string // the tools' folder (crossplane, crane, ...)

	// installed is what readmeInstall ran: README's Install blocks, each
	// with how long it took (TestOperate/InstallVerbatim reports them).
	installed []installedBlock

	mu        sync.Mutex
	durations []string
	running   map[string]time.Time // steps under way, by full name: the watchdog names them
	// lanes are the real nodes of the groups that run beside the first
	// node's (lanes_realnode_test.go); guarded by mu.
	lanes []*cluster.Node
	// stepLock: the top-level tests' steps hold it shared, a step that must
	// run alone (step.alone) exclusively.
	stepLock sync.RWMutex

	stopOnce sync.Once
	ending   atomic.Bool // the watchdog is tearing down (and exits)

	// What the first test that needs it starts, once for the suite: the
	// real node (with the function in its pod), the lane's node, the S3
	// server.
	nodeStarted, laneStarted, s3Started fixture
	s3                                  *objectStore
	// nodeGroups holds a mutex per real node: the group of tests running
	// there holds it (concurrent).
	nodeGroups sync.Map
	promCount  atomic.Int32 // Prometheus servers started, for their folders
	// lost are the acknowledged writes asynchronous failovers lost, by
	// writer (namespace/name); guarded by mu.
	lost map[string]map[int64]bool
}

// fixture is a part of the suite started once, by the first test that needs
// it; every later test gets the same outcome.
type fixture struct {
	once sync.Once
	err  error
}

func (f *fixture) do(start func() error) error {
	f.once.Do(func() { f.err = start() })
	return f.err
}

var env *suite

func logf(format string, args ...any) {
	fmt.Printf("e2e %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func TestMain(m *testing.M) {
	os.Exit(mainE2E(m))
}

func mainE2E(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	root := filepath.Dir(wd) // go test runs in e2e/
	dir, err := os.MkdirTemp("", "function-database-e2e-")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	s := &suite{root: root, dir: dir}
	env = s
	logf("temporary folder %s", dir)

	t0 := time.Now()
	// From the start: go test ends the binary at its start + -timeout (+1
	// minute), whatever the set-up took; and an interrupted run (SIGINT,
	// SIGTERM: hack/test.sh passes one on) tears down the same way.
	disarm := s.watchdog(t0, watchdogMargin)
	defer disarm()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	code := 1
	defer func() {
		if s.ending.Load() {
			return // the watchdog or a signal is tearing down, and exits
		}
		if code != 0 {
			s.dumpLogs(40)
		}
		s.stop()
		if code == 0 && os.Getenv("E2E_KEEP") == "" {
			os.RemoveAll(dir)
		} else {
			logf("kept %s (logs in %s)", dir, filepath.Join(dir, "logs"))
		}
	}()
	if err := s.setup(ctx); err != nil {
		logf("SETUP FAILED after %s: %v", time.Since(t0).Round(time.Millisecond), err)
		return 1
	}
	logf("setup done in %s", time.Since(t0).Round(time.Millisecond))
	t1 := time.Now()
	code = m.Run()
	logf("tests done in %s (setup %s)", time.Since(t1).Round(time.Millisecond), t1.Sub(t0).Round(time.Millisecond))
	s.printDurations()
	return code
}

func (s *suite) printDurations() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.durations) > 0 {
		logf("scenario durations:\n  %s", strings.Join(s.durations, "\n  "))
	}
}

// watchdogMargin is how long before go test's -timeout the watchdog tears
// the suite down: printing the components' logs and stopping a cluster with
// real nodes (unmounting their pods' volumes) takes about a minute here.
const watchdogMargin = 3 * time.Minute

// watchdog tears the suite down margin before go test's -timeout would end
// it (counted from start, the binary's start: go test's own kill counts
// from there), or when the process is told to stop (SIGINT, SIGTERM), and
// exits with a failure. go test's timeout panics in the test binary, or
// kills it, and a signal kills it: neither runs deferred cleanup, so the
// real node's processes and mounts stayed behind (37 mounts in session 22)
// and no component's log was printed to say why. It returns the function
// that disarms it.
func (s *suite) watchdog(start time.Time, margin time.Duration) (disarm func()) {
	// The testing flags are parsed by m.Run unless TestMain parses them
	// first: read before, -test.timeout would be its default, none.
	if !flag.Parsed() {
		flag.Parse()
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	var expired <-chan time.Time
	var timeout time.Duration
	if f := flag.Lookup("test.timeout"); f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			timeout, _ = g.Get().(time.Duration)
		}
	}
	var timer *time.Timer
	// Armed for any timeout longer than the margin: a rule of "twice the
	// margin" left a 6-minute run to go test's kill, mounts and all.
	if timeout > margin {
		timer = time.NewTimer(time.Until(start.Add(timeout - margin)))
		expired = timer.C
	}
	go func() {
		var why string
		select {
		case <-done:
			return
		case sig := <-sigs:
			why = fmt.Sprintf("%s received", sig)
		case <-expired:
			why = fmt.Sprintf("go test's -timeout %s ends in %s", timeout, margin)
		}
		s.ending.Store(true)
		logf("WATCHDOG: %s; tearing the suite down now. Steps under way: %s", why, s.runningSteps())
		s.printDurations()
		s.dumpLogs(40)
		s.stop()
		logf("kept %s (logs in %s)", s.dir, filepath.Join(s.dir, "logs"))
		fmt.Println("FAIL: the e2e suite was stopped: " + why)
		os.Exit(1)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(sigs)
			if timer != nil {
				timer.Stop()
			}
			close(done)
		})
	}
}

// runningSteps names the steps under way and how long each has run.
func (s *suite) runningSteps() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.running) == 0 {
		return "none (between steps, or in a test without steps)"
	}
	var names []string
	for n, t0 := range s.running {
		names = append(names, fmt.Sprintf("%s (for %s)", n, time.Since(t0).Round(time.Second)))
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func (s *suite) setup(ctx context.Context) error {
	logDir := filepath.Join(s.dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	bin, err := s.tools(ctx, logDir)
	if err != nil {
		return err
	}
	s.bin = bin

	// While the cluster starts: build the function from the repository root
	// (it runs here as a process) and both packages, as they ship.
	fnBin := filepath.Join(s.dir, "bin", "function-database")
	pkgDir := filepath.Join(s.dir, "packages")
	fnErr := make(chan error, 1)
	go func() {
		t0 := time.Now()
		err := proc.Run(ctx, filepath.Join(logDir, "go-build.log"), s.root, nil, "go", "build", "-o", fnBin, ".")
		if err != nil {
			fnErr <- fmt.Errorf("go build of the function: %w\n%s", err, proc.TailFile(filepath.Join(logDir, "go-build.log"), 30))
			return
		}
		logf("function built (%s)", time.Since(t0).Round(time.Millisecond))
		if err := registry.Packages(ctx, s.root, pkgDir, s.example(), logDir, filepath.Join(bin, "crossplane"), filepath.Join(bin, "crane"), fnPackage); err != nil {
			fnErr <- err
			return
		}
		logf("packages built (%s)", time.Since(t0).Round(time.Millisecond))
		fnErr <- nil
	}()

	s.cl, err = cluster.Start(ctx, cluster.Config{Dir: s.dir, Bin: bin, Logf: logf})
	if err == nil {
		s.k, err = kube.New(s.cl.RESTConfig, s.cl.Client)
	}
	if err != nil {
		<-fnErr
		return fmt.Errorf("control plane: %w", err)
	}
	if err := <-fnErr; err != nil {
		return err
	}
	if s.reg, err = registry.Start(s.dir); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	t0 := time.Now()
	// The function's index as pkgBeyond: pkgVersion of both is README's
	// install's to push (readmeInstall), under the packages' own names.
	if err := s.reg.Push(ctx, s.root, pkgDir, logDir, filepath.Join(bin, "crossplane"), s.reg.Mirror(pkgHost, fnPackage)+":"+pkgBeyond); err != nil {
		return err
	}
	logf("packages pushed over HTTPS to the registry on %s (%s)", s.reg.Addr(), time.Since(t0).Round(time.Millisecond))
	s.xp, err = crossplane.Start(ctx, s.dir, s.cl, s.k, filepath.Join(bin, "crossplane-core"), fnBin, s.reg.CAFile(), logf)
	if err != nil {
		return fmt.Errorf("crossplane: %w", err)
	}
	return s.install(ctx)
}

// tools builds or reuses the binaries (hack/cluster-tools.sh, hack/tools.sh:
// Crossplane core, the crossplane CLI and crane); both print their bin
// folder.
func (s *suite) tools(ctx context.Context, logDir string) (string, error) {
	t0 := time.Now()
	var bin string
	if os.Getenv("E2E_SKIP_TOOLS") != "" {
		cache := os.Getenv("FUNCTION_DATABASE_CACHE")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "function-database")
		}
		bin = filepath.Join(cache, "bin")
	} else {
		log := filepath.Join(logDir, "tools.log")
		out, err := proc.Output(ctx, log, s.root, "bash", "hack/cluster-tools.sh")
		if err != nil {
			return "", fmt.Errorf("hack/cluster-tools.sh: %w\n%s", err, proc.TailFile(log, 30))
		}
		bin = strings.TrimSpace(lastLine(out))
		out, err = proc.Output(ctx, log, s.root, "bash", "hack/tools.sh")
		if err != nil {
			return "", fmt.Errorf("hack/tools.sh: %w\n%s", err, proc.TailFile(log, 30))
		}
		if b := strings.TrimSpace(lastLine(out)); b != bin {
			return "", fmt.Errorf("tools in two folders: %s and %s", bin, b)
		}
	}
	// kubectl and crossplane run the README's commands as users type them.
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kwok-stages.yaml", "crossplane-core", "crossplane", "crane", "kubectl"} {
		if !fileExists(filepath.Join(bin, name)) {
			return "", fmt.Errorf("no %s in %s", name, bin)
		}
	}
	logf("tools ready in %s (%s)", bin, time.Since(t0).Round(time.Millisecond))
	return bin, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Example paths (notes/CONTRACT.md); E2E_EXAMPLES points at another folder
// laid out the same way.
func (s *suite) example(parts ...string) string {
	dir := os.Getenv("E2E_EXAMPLES")
	if dir == "" {
		dir = filepath.Join(s.root, "example")
	}
	return filepath.Join(append([]string{dir}, parts...)...)
}

// install installs the Database API by README's Install section, run
// verbatim (readmeInstall): the project's ClusterRole for core, then the
// Configuration pushed to and pulled from the registry, which brings the v2
// XRD and Composition and, as its dependency, the function (the legacy pair
// is applied by the LegacyClaim scenario, so that a problem there fails
// only that scenario). Then it checks what the section leaves and removes
// the example Database it applied.
func (s *suite) install(ctx context.Context) error {
	t0 := time.Now()
	if err := s.xp.PreparePackages(ctx, s.reg, pkgHost); err != nil {
		return err
	}
	if err := s.readmeInstall(ctx); err != nil {
		return err
	}
	logf("Configuration %s and Function %s installed by README's commands (%s)", crossplane.ConfigurationName, s.xp.FnName, time.Since(t0).Round(time.Millisecond))
	// What README's apply of example/rbac.yaml must have granted.
	if err := s.applyCoreRole(ctx); err != nil {
		return err
	}
	xrd, err := kube.ReadObject(s.example("xrd.yaml"))
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	if err := s.waitXRDs(wctx, xrd.GetName()); err != nil {
		return err
	}
	o, err := kube.ReadObject(s.example("xr.yaml"))
	if err != nil {
		return err
	}
	if err := s.k.WaitKind(wctx, o.GroupVersionKind()); err != nil {
		return err
	}
	logf("XRD %s from the Configuration established (%s)", xrd.GetName(), time.Since(t0).Round(time.Millisecond))
	// The section ends with a Database applied: it is there; the scenarios
	// start without it.
	if _, err := s.k.Get(wctx, o.GroupVersionKind(), o.GetNamespace(), o.GetName()); err != nil {
		return fmt.Errorf("the Database README's install applies: %w", err)
	}
	if err := s.k.Delete(wctx, o.GroupVersionKind(), o.GetNamespace(), o.GetName()); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	for {
		_, err := s.k.Get(wctx, o.GroupVersionKind(), o.GetNamespace(), o.GetName())
		if apierrors.IsNotFound(err) {
			break
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("Database %s/%s from README's install not gone: %w", o.GetNamespace(), o.GetName(), wctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return s.removeClaims(ctx, o.GetNamespace(), o.GetName())
}

// removeClaims deletes the volume claims a deleted Database's StatefulSet
// left (claims outlive their StatefulSet), once the StatefulSet is gone, and
// waits until they are: TestDatabase/Compose creates the same Database again
// and needs its claims Pending. When the install's Database lived long
// enough for its StatefulSet to make claims, they were bound, and the new
// pods ran at once (session 26: "became Ready with no pod Ready").
func (s *suite) removeClaims(ctx context.Context, ns, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	pvcs := s.k.CS.CoreV1().PersistentVolumeClaims(ns)
	// The StatefulSet's claims: <template>-<name>-<ordinal>.
	claims := func() ([]string, error) {
		l, err := pvcs.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var names []string
		for _, c := range l.Items {
			if strings.HasSuffix(strings.TrimRight(c.Name, "0123456789"), "-"+name+"-") {
				names = append(names, c.Name)
			}
		}
		return names, nil
	}
	deleted := false
	for {
		var left []string
		_, err := s.k.CS.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			left = []string{"StatefulSet " + name}
		case !apierrors.IsNotFound(err):
			return err
		default:
			if left, err = claims(); err != nil {
				return err
			}
			if len(left) == 0 {
				return nil
			}
			for _, c := range left {
				if deleted {
					break // deleted already: they are going
				}
				if err := pvcs.Delete(ctx, c, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
			}
			deleted = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("what Database %s/%s from README's install left is not gone: %s: %w", ns, name, strings.Join(left, ", "), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// useInstalledFunction points every pipeline step of a Composition applied
// by hand at the Function the Configuration's dependency became, as the
// README tells a platform team to: example/ names it function-database, the
// name of a Function installed by hand.
func (s *suite) useInstalledFunction(c *unstructured.Unstructured) error {
	steps, _, err := unstructured.NestedSlice(c.Object, "spec", "pipeline")
	if err != nil {
		return err
	}
	for i := range steps {
		step, ok := steps[i].(map[string]any)
		if !ok {
			return fmt.Errorf("Composition %s: pipeline step %d is not an object", c.GetName(), i)
		}
		if err := unstructured.SetNestedField(step, s.xp.FnName, "functionRef", "name"); err != nil {
			return err
		}
	}
	return unstructured.SetNestedSlice(c.Object, steps, "spec", "pipeline")
}

// coreRole reads example/rbac.yaml: the ClusterRole that lets core compose a
// Database.
func (s *suite) coreRole() (*unstructured.Unstructured, error) {
	return kube.ReadObject(s.example("rbac.yaml"))
}

// applyCoreRole applies the project's ClusterRole and waits until core may do
// all it grants, in every namespace (the aggregation into core's `crossplane`
// ClusterRole is kube-controller-manager's, moments later).
func (s *suite) applyCoreRole(ctx context.Context) error {
	role, err := s.coreRole()
	if err != nil {
		return err
	}
	as, err := crossplane.RuleAccesses(role, "")
	if err != nil {
		return err
	}
	if _, err := s.k.Apply(ctx, role); err != nil {
		return fmt.Errorf("apply ClusterRole %s: %w", role.GetName(), err)
	}
	return s.k.WaitAllowed(ctx, 60*time.Second, crossplane.Namespace, crossplane.CoreSA, true, as...)
}

// applyFiles applies every object of the files (Compositions calling the
// installed Function) and waits until the XRDs among them are Established
// (and Offered, when they offer a claim) and the RBAC manager has let core
// manage their kinds.
func (s *suite) applyFiles(ctx context.Context, files ...string) ([]string, error) {
	var xrds []string
	wctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	for _, f := range files {
		objs, err := kube.ReadObjects(f)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if err := s.k.WaitKind(wctx, o.GroupVersionKind()); err != nil {
				return nil, err
			}
			if o.GetKind() == "Composition" {
				if err := s.useInstalledFunction(o); err != nil {
					return nil, err
				}
			}
			if _, err := s.k.Apply(wctx, o); err != nil {
				return nil, fmt.Errorf("apply %s %s from %s: %w", o.GetKind(), o.GetName(), f, err)
			}
			if o.GetKind() == "CompositeResourceDefinition" {
				xrds = append(xrds, o.GetName())
			}
		}
	}
	if err := s.waitXRDs(wctx, xrds...); err != nil {
		return nil, err
	}
	return xrds, nil
}

// waitXRDs waits until the XRDs are Established (and Offered, when they
// offer a claim) and the RBAC manager has let core manage their kinds.
func (s *suite) waitXRDs(ctx context.Context, names ...string) error {
	for _, name := range names {
		var last string
		err := cluster.Retry(ctx, 90*time.Second, func() error {
			x, err := s.k.Get(ctx, crossplane.GVKXRD, "", name)
			if err != nil {
				return err
			}
			last = kube.ConditionsString(x)
			if kube.GetCondition(x, "Established").Status != "True" {
				return fmt.Errorf("XRD %s not Established: %s", name, last)
			}
			if claim, _, _ := unstructured.NestedString(x.Object, "spec", "claimNames", "kind"); claim != "" && kube.GetCondition(x, "Offered").Status != "True" {
				return fmt.Errorf("XRD %s not Offered: %s", name, last)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := s.waitXRDRoles(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// waitXRDRoles waits until core may manage the XRD's kinds: the RBAC
// manager's ClusterRole for it, aggregated to core's.
func (s *suite) waitXRDRoles(ctx context.Context, name string) error {
	x, err := s.k.Get(ctx, crossplane.GVKXRD, "", name)
	if err != nil {
		return err
	}
	group, _, _ := unstructured.NestedString(x.Object, "spec", "group")
	var as []kube.Access
	for _, names := range []string{"names", "claimNames"} {
		if plural, _, _ := unstructured.NestedString(x.Object, "spec", names, "plural"); plural != "" {
			as = append(as, kube.Access{Verb: "update", Group: group, Resource: plural})
		}
	}
	if err := s.k.WaitAllowed(ctx, 60*time.Second, crossplane.Namespace, crossplane.CoreSA, true, as...); err != nil {
		msg := fmt.Sprintf("XRD %s: the RBAC manager's roles never reached core: %v", name, err)
		if p := s.xp.RBAC; p != nil {
			if ended, perr := p.Exited(); ended {
				msg += fmt.Sprintf("\nthe RBAC manager exited (%v):\n%s", perr, p.Tail(20))
			}
		}
		return errors.New(msg)
	}
	return nil
}

func (s *suite) procs() []*proc.Proc {
	var ps []*proc.Proc
	if s.cl != nil {
		ps = append(ps, s.cl.Procs()...)
	}
	if s.xp != nil {
		ps = append(ps, s.xp.Procs()...)
	}
	if s.node != nil {
		ps = append(ps, s.node.Procs()...)
	}
	s.mu.Lock()
	for _, n := range slices.Concat(s.pool, s.lanes) {
		if n != nil {
			ps = append(ps, n.Procs()...)
		}
	}
	s.mu.Unlock()
	return ps
}

// stop stops everything the suite started, once: the watchdog and the
// normal end may both call it (a second registry stop would wait forever).
func (s *suite) stop() {
	s.stopOnce.Do(func() {
		if s.xp != nil {
			s.xp.Stop()
		}
		s.reg.Stop()
		s.stopPool()
		s.stopLanes()
		if s.node != nil {
			s.node.Stop()
		}
		if s.cl != nil {
			s.cl.Stop()
		}
	})
}

// dumpLogs prints the last n lines of every component's log.
func (s *suite) dumpLogs(n int) {
	seen := map[string]bool{}
	for _, p := range s.procs() {
		seen[p.Log] = true
		fmt.Printf("\n----- last %d lines of %s (pid %d, %s) -----\n%s\n", n, p.Name, p.PID(), p.Log, p.Tail(n))
	}
	logs, _ := filepath.Glob(filepath.Join(s.dir, "logs", "*.log"))
	// The real node's pods: every container's log (podLogsDir/<pod>/<container>/N.log).
	pods, _ := filepath.Glob(filepath.Join(s.dir, "node", "pods", "*", "*", "*.log"))
	poolPods, _ := filepath.Glob(filepath.Join(s.dir, "nodes", "*", "pods", "*", "*", "*.log"))
	pods = append(pods, poolPods...)
	for _, l := range append(logs, pods...) {
		if !seen[l] {
			fmt.Printf("\n----- last %d lines of %s -----\n%s\n", n, l, proc.TailFile(l, n))
		}
	}
}

// step runs one scenario as a subtest and logs how long it took.
func (s *suite) step(t *testing.T, name string, f func(t *testing.T)) bool {
	return s.runStep(t, name, false, f)
}

// step is one step of a test's table: a subtest run in order, with no state
// but what the test hands it.
type step struct {
	name string
	run  func(t *testing.T)
	// needed: the steps after it build on it, so a failure ends the table.
	needed bool
	// alone: no other group's step may run beside it.
	alone bool
}

// steps runs a table of steps in order; it reports whether every step that
// ran passed.
func (s *suite) steps(t *testing.T, table []step) bool {
	all := true
	for _, st := range table {
		ok := s.runStep(t, st.name, st.alone, st.run)
		all = all && ok
		if !ok && st.needed {
			return false
		}
	}
	return all
}

// runStep is step, run alone (step.alone) or beside other groups' steps.
func (s *suite) runStep(t *testing.T, name string, alone bool, f func(t *testing.T)) bool {
	unlock := s.lockStep(t, name, alone)
	defer unlock()
	t0 := time.Now()
	ran := false
	ok := t.Run(name, func(t *testing.T) {
		ran = true
		s.mu.Lock()
		if s.running == nil {
			s.running = map[string]time.Time{}
		}
		s.running[t.Name()] = t0
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.running, t.Name())
			s.mu.Unlock()
		}()
		defer func() { t.Logf("%s took %s", name, time.Since(t0).Round(time.Millisecond)) }()
		defer s.checkResponsive(t)
		f(t)
	})
	// A step -run left out: t.Run reports it passed without calling f; the
	// summary must not list it as a pass of 0 s.
	if !ran {
		return ok
	}
	res := "ok  "
	if !ok {
		res = "FAIL"
	}
	s.mu.Lock()
	s.durations = append(s.durations, fmt.Sprintf("%s %-30s %s", res, t.Name()+"/"+name, time.Since(t0).Round(time.Millisecond)))
	s.mu.Unlock()
	return ok
}

func (s *suite) ensureNamespace(t *testing.T, ns string) {
	t.Helper()
	_, err := s.k.CS.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
}

// checkResponsive fails the test when Crossplane's circuit breaker has cut a
// Database off (condition Responsive=False): a sign of a reconcile hot loop,
// given the large bucket the suite gives it.
func (s *suite) checkResponsive(t *testing.T) {
	xr, err := kube.ReadObject(s.example("xr.yaml"))
	if err != nil {
		return
	}
	c, err := s.k.Resource(xr.GroupVersionKind(), "")
	if err != nil {
		return
	}
	l, err := c.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range l.Items {
		if cond := kube.GetCondition(&l.Items[i], "Responsive"); cond.Status == "False" {
			t.Errorf("%s %s/%s: Crossplane's circuit breaker is open: %s (%s)", xr.GetKind(), l.Items[i].GetNamespace(), l.Items[i].GetName(), cond.Message, cond.Reason)
		}
	}
}
