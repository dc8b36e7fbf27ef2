// Command loadtest measures the cost of a composition function per
// RunFunction call, next to a no-op baseline built from the same
// function-sdk-go version (cmd/noop-function).
//
// For every request file, concurrency and binary it starts a fresh process
// with `--insecure --address=127.0.0.1:<free port> --metrics-address=`,
// measures the time until the first RunFunction call succeeds (startup), runs
// a warm-up, then drives RunFunction from N goroutines for a fixed time (or a
// fixed number of requests) and reports requests/s, p50/p99 latency, the
// function's CPU time per request (utime+stime from /proc/<pid>/stat over the
// measured window), its peak RSS (VmHWM from /proc/<pid>/status) and the
// binary size, as a markdown table with ratio rows ours/no-op.
//
//	go run ./cmd/loadtest --function _output/function-database \
//	    --baseline _output/noop-function --request testdata/perf/large-observed.yaml
//
// Leak check (RSS every 100k requests):
//
//	go run ./cmd/loadtest --function _output/function-database \
//	    --request testdata/perf/large-observed.yaml --concurrency 8 --requests 1000000
//
// Linux only (/proc). Listens on and dials only 127.0.0.1.
package main

import (
	"context"
	"debug/buildinfo"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

const sdkModule = "github.com/crossplane/function-sdk-go"

type config struct {
	function, baseline string
	requests           []string
	duration, warmup   time.Duration
	concurrency        []int
	count              int64
	reportEvery        int64
	connections        int
	rounds             int
	timeout            time.Duration
	startupTimeout     time.Duration
	rpcTimeout         time.Duration
	env                []string
	keepLogs           bool
	decode             string
	out                string
	logDir             string
}

func main() {
	os.Exit(run())
}

func run() int {
	var cfg config
	var conc string
	fs := flag.NewFlagSet("loadtest", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: loadtest --function BIN [--baseline BIN] --request FILE [--request FILE...] [flags]\n\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.function, "function", "", "function binary under test (\"ours\")")
	fs.StringVar(&cfg.baseline, "baseline", "", "no-op baseline function binary (cmd/noop-function); ratio rows need it")
	fs.Func("request", "RunFunctionRequest file, YAML or JSON (protojson field names); repeatable or comma-separated", func(s string) error {
		for _, f := range strings.Split(s, ",") {
			if f = strings.TrimSpace(f); f != "" {
				cfg.requests = append(cfg.requests, f)
			}
		}
		return nil
	})
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "measured time per run (duration mode)")
	fs.DurationVar(&cfg.warmup, "warmup", time.Second, "unmeasured warm-up per run, after startup")
	fs.StringVar(&conc, "concurrency", "1,8", "comma-separated numbers of concurrent callers")
	fs.Int64Var(&cfg.count, "requests", 0, "fixed-count mode: measure exactly this many requests per run instead of --duration (leak checks)")
	fs.Int64Var(&cfg.reportEvery, "report-every", 100000, "fixed-count mode: sample RSS and CPU every this many requests")
	fs.IntVar(&cfg.connections, "connections", 1, "gRPC connections per run (callers are spread over them); Crossplane uses one per function")
	fs.IntVar(&cfg.rounds, "rounds", 1, "repeat the whole matrix this many times (one table per round)")
	fs.DurationVar(&cfg.timeout, "timeout", 30*time.Minute, "hard limit for the whole tool; children are killed when it expires")
	fs.DurationVar(&cfg.startupTimeout, "startup-timeout", 30*time.Second, "limit for a binary to start serving")
	fs.DurationVar(&cfg.rpcTimeout, "rpc-timeout", 30*time.Second, "limit per RunFunction call")
	fs.Func("env", "KEY=VALUE added to the functions' environment (e.g. GOMAXPROCS=1, GOGC=200); repeatable", func(s string) error {
		if !strings.Contains(s, "=") {
			return errors.New("want KEY=VALUE")
		}
		cfg.env = append(cfg.env, s)
		return nil
	})
	fs.BoolVar(&cfg.keepLogs, "keep-logs", false, "keep the functions' stdout/stderr log files")
	fs.StringVar(&cfg.logDir, "log-dir", "", "directory for the functions' log files (default: the temp dir)")
	fs.StringVar(&cfg.decode, "decode", "fast", "how the client decodes responses: fast (scan for fatal results only) or full (protobuf Unmarshal of every response)")
	fs.StringVar(&cfg.out, "out", "", "also append the markdown report to this file")
	_ = fs.Parse(os.Args[1:])

	var err error
	if cfg.concurrency, err = parseIntList(conc); err != nil {
		return usageError(fs, "--concurrency: %v", err)
	}
	switch {
	case cfg.function == "" && cfg.baseline == "":
		return usageError(fs, "--function (and/or --baseline) is required")
	case len(cfg.requests) == 0:
		return usageError(fs, "--request is required")
	case cfg.decode != "fast" && cfg.decode != "full":
		return usageError(fs, "--decode must be fast or full")
	case cfg.connections < 1 || cfg.rounds < 1 || cfg.reportEvery < 1 || cfg.count < 0:
		return usageError(fs, "--connections, --rounds, --report-every must be >= 1, --requests >= 0")
	case cfg.count == 0 && cfg.duration <= 0:
		return usageError(fs, "--duration must be > 0")
	case fs.NArg() > 0:
		return usageError(fs, "unexpected arguments %q", fs.Args())
	}
	if runtime.GOOS != "linux" {
		fmt.Fprintln(os.Stderr, "loadtest: needs Linux (/proc)")
		return 2
	}

	var reqs []*request
	for _, p := range cfg.requests {
		r, err := loadRequest(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadtest:", err)
			return 2
		}
		reqs = append(reqs, r)
	}
	var targets []*target
	for _, t := range []struct{ role, path string }{{roleOurs, cfg.function}, {roleBaseline, cfg.baseline}} {
		if t.path == "" {
			continue
		}
		tg, err := newTarget(t.role, t.path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadtest:", err)
			return 2
		}
		targets = append(targets, tg)
	}
	if len(targets) == 2 && targets[0].Label == targets[1].Label {
		targets[0].Label = "ours:" + targets[0].Label
		targets[1].Label = "no-op:" + targets[1].Label
	}

	// Ctrl-C/SIGTERM: cancel (runs unwind and kill their child); a second
	// signal or a stuck unwind kills the children and exits at once.
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		fmt.Fprintln(os.Stderr, "loadtest: interrupted, stopping (again to force)")
		cancel()
		select {
		case <-sigs:
		case <-time.After(10 * time.Second):
		}
		killAllChildren()
		os.Exit(130)
	}()
	go func() {
		<-ctx.Done()
		time.Sleep(cfg.rpcTimeout + 10*time.Second) // the normal unwind is quicker
		killAllChildren()
		fmt.Fprintln(os.Stderr, "loadtest: timed out")
		os.Exit(124)
	}()
	defer killAllChildren()

	hz, hzSource := clockTicksPerSecond()
	out := io.Writer(os.Stdout)
	if cfg.out != "" {
		f, err := os.OpenFile(cfg.out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadtest:", err)
			return 2
		}
		defer f.Close()
		out = io.MultiWriter(os.Stdout, f)
	}
	printHeader(out, &cfg, targets, reqs, hz, hzSource)

	failed := false
	var all [][]*result
	for round := 1; round <= cfg.rounds && ctx.Err() == nil; round++ {
		var results []*result
		for _, rq := range reqs {
			for _, c := range cfg.concurrency {
				// Alternate ours / no-op for the same request and
				// concurrency so that both see the same background load.
				for _, tg := range targets {
					if ctx.Err() != nil {
						break
					}
					fmt.Fprintf(os.Stderr, "loadtest: round %d: %s, %s, concurrency %d ...\n", round, tg.Label, rq.Name, c)
					res, err := measure(ctx, &cfg, tg, rq, c, hz)
					if err != nil {
						fmt.Fprintf(os.Stderr, "loadtest: %s %s c=%d: %v\n", tg.Label, rq.Name, c, err)
						failed = true
						continue
					}
					fmt.Fprintf(os.Stderr, "loadtest:   %s\n", res.oneLine())
					results = append(results, res)
				}
			}
		}
		printRound(out, round, results)
		all = append(all, results)
	}
	if len(all) > 1 {
		printSummary(out, all)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "loadtest: stopped early:", context.Cause(ctx))
		return 1
	}
	if failed {
		return 1
	}
	return 0
}

func usageError(fs *flag.FlagSet, format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "loadtest: "+format+"\n", a...)
	fs.Usage()
	return 2
}

const (
	roleOurs     = "ours"
	roleBaseline = "no-op"
)

// target is a function binary to measure.
type target struct {
	Role, Label, Path string
	Size              int64
	GoVersion, SDK    string
}

func newTarget(role, path string) (*target, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("%s is not an executable file", path)
	}
	t := &target{Role: role, Label: filepath.Base(abs), Path: abs, Size: st.Size(), GoVersion: "?", SDK: "?"}
	if bi, err := buildinfo.ReadFile(abs); err == nil {
		t.GoVersion = bi.GoVersion
		for _, d := range bi.Deps {
			if d.Path == sdkModule {
				t.SDK = d.Version
				if d.Replace != nil {
					t.SDK += " => " + d.Replace.Path + " " + d.Replace.Version
				}
			}
		}
	}
	return t, nil
}

// snapshot is the state of the counters at one edge of the measured window.
type snapshot struct {
	at         time.Time
	childTicks uint64
	selfTicks  uint64
	host       hostCPU
}

func takeSnapshot(pid string) (snapshot, error) {
	s := snapshot{at: time.Now()}
	var err error
	if s.childTicks, err = readCPUTicks(pid); err != nil {
		return s, err
	}
	if s.selfTicks, err = readCPUTicks("self"); err != nil {
		return s, err
	}
	s.host, err = readHostCPU()
	return s, err
}

// sample is one line of the fixed-count (leak check) report.
type sample struct {
	Completed int64
	Elapsed   time.Duration
	WindowRPS float64
	CPUPerReq time.Duration // over the window since the previous sample
	Mem       memStatus
	Errors    int64
}

// result is one measured run: one binary, one request, one concurrency.
type result struct {
	Target      *target
	Request     string
	Concurrency int
	Window      time.Duration
	OK, Errors  int64
	Fatal       int64 // successful calls whose response had a Fatal result
	FirstError  string
	P50, P99    time.Duration
	Max         time.Duration
	CPUPerReq   time.Duration
	ClientCPU   time.Duration // load tool's own CPU per request
	OtherCores  float64       // CPU used by other processes during the window, in cores
	Mem         memStatus     // at the end of the window
	Startup     time.Duration
	Response    string // describeResponse of the startup probe
	Samples     []sample
}

func (r *result) rps() float64 {
	return float64(r.OK+r.Errors) / r.Window.Seconds()
}

func (r *result) oneLine() string {
	return fmt.Sprintf("%.0f req/s, p50 %s ms, p99 %s ms, CPU %.1f µs/req (client %.1f), peak RSS %s MiB, startup %s ms, errors %d, fatal %d, other load %.2f cores",
		r.rps(), ms(r.P50), ms(r.P99), us(r.CPUPerReq), us(r.ClientCPU), mib(r.Mem.HWM), msShort(r.Startup), r.Errors, r.Fatal, r.OtherCores)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// measure starts tg, waits for it to serve, warms up and measures one run.
func measure(ctx context.Context, cfg *config, tg *target, rq *request, conc int, hz int64) (*result, error) {
	t0 := time.Now()
	c, err := startChild(tg.Path, cfg.env, cfg.logDir)
	if err != nil {
		return nil, err
	}
	defer c.stop(cfg.keepLogs)

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-c.exited:
			cancel(fmt.Errorf("%s exited during the run: %w", tg.Label, c.waitErr))
		case <-runCtx.Done():
		}
	}()
	fail := func(err error) (*result, error) {
		if cause := context.Cause(runCtx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = fmt.Errorf("%w (%w)", err, cause)
		}
		if tail := strings.TrimSpace(c.logTail(2048)); tail != "" {
			err = fmt.Errorf("%w\n--- %s log (tail) ---\n%s", err, tg.Label, tail)
		}
		return nil, err
	}

	// Short reconnect backoff: the default (1s base) would dominate the
	// measured startup time when the first dial hits a not yet listening port.
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 2 * time.Millisecond, Multiplier: 1.5, MaxDelay: 20 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
	}
	clients := make([]fnv1.FunctionRunnerServiceClient, cfg.connections)
	for i := range clients {
		conn, err := grpc.NewClient("passthrough:///"+c.addr, dialOpts...)
		if err != nil {
			return fail(err)
		}
		defer conn.Close()
		clients[i] = fnv1.NewFunctionRunnerServiceClient(conn)
	}

	// Startup: until the first RunFunction call (fully decoded) succeeds.
	pctx, pcancel := context.WithTimeout(runCtx, cfg.startupTimeout)
	probe, err := clients[0].RunFunction(pctx, rq.Msg, grpc.WaitForReady(true))
	pcancel()
	if err != nil {
		return fail(fmt.Errorf("not serving: %w", err))
	}
	res := &result{Target: tg, Request: rq.Name, Concurrency: conc, Startup: time.Since(t0), Response: describeResponse(probe)}
	fmt.Fprintf(os.Stderr, "loadtest:   pid %s, startup %s ms; %s\n", c.pid, msShort(res.Startup), res.Response)
	for i := 1; i < len(clients); i++ { // connect the others before measuring
		cctx, ccancel := context.WithTimeout(runCtx, cfg.startupTimeout)
		_, err := clients[i].RunFunction(cctx, rq.Msg, grpc.WaitForReady(true))
		ccancel()
		if err != nil {
			return fail(err)
		}
	}

	var callOpts []grpc.CallOption
	if cfg.decode == "fast" {
		callOpts = append(callOpts, grpc.ForceCodec(fastCodec{encoded: map[*fnv1.RunFunctionRequest][]byte{rq.Msg: rq.Encoded}}))
	}

	const (
		phaseWarmup int32 = iota
		phaseMeasure
		phaseStop
	)
	var (
		phase            atomic.Int32
		ok, errs, fatal  atomic.Int64
		firstErr         sync.Once
		lat              = make([][]time.Duration, conc)
		wg               sync.WaitGroup
		done             = make(chan struct{})
		doneOnce         sync.Once
		tick             = make(chan struct{}, 1)
		capHint          = 1 << 14
		measuredBoundary = cfg.count
		sampleEvery      = cfg.reportEvery
		fixedCount       = cfg.count > 0
	)
	if fixedCount && cfg.count/int64(conc) > int64(capHint) {
		capHint = int(cfg.count/int64(conc)) + 1024
	}
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			client := clients[w%len(clients)]
			local := make([]time.Duration, 0, capHint)
			defer func() { lat[w] = local }()
			for runCtx.Err() == nil && phase.Load() != phaseStop {
				cctx, ccancel := context.WithTimeout(runCtx, cfg.rpcTimeout)
				start := time.Now()
				rsp, err := client.RunFunction(cctx, rq.Msg, callOpts...)
				d := time.Since(start)
				ccancel()
				if phase.Load() != phaseMeasure {
					continue // warm-up, or completed after the window closed
				}
				var n int64
				if err != nil {
					if runCtx.Err() != nil {
						return
					}
					errs.Add(1)
					firstErr.Do(func() { res.FirstError = err.Error() })
					n = ok.Load() + errs.Load()
				} else {
					for _, r := range rsp.GetResults() {
						if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
							fatal.Add(1)
							firstErr.Do(func() { res.FirstError = "fatal result: " + r.GetMessage() })
							break
						}
					}
					local = append(local, d)
					n = ok.Add(1) + errs.Load()
				}
				if fixedCount {
					if n%sampleEvery == 0 {
						select {
						case tick <- struct{}{}:
						default:
						}
					}
					if n >= measuredBoundary && phase.CompareAndSwap(phaseMeasure, phaseStop) {
						doneOnce.Do(func() { close(done) })
					}
				}
			}
		}(w)
	}
	stopWorkers := func() {
		phase.Store(phaseStop)
		wg.Wait()
	}

	select {
	case <-time.After(cfg.warmup):
	case <-runCtx.Done():
		stopWorkers()
		return fail(errors.New("stopped during warm-up"))
	}
	s0, err := takeSnapshot(c.pid)
	if err != nil {
		stopWorkers()
		return fail(err)
	}
	phase.Store(phaseMeasure)

	if !fixedCount {
		select {
		case <-time.After(cfg.duration):
		case <-runCtx.Done():
		}
		phase.CompareAndSwap(phaseMeasure, phaseStop)
	} else {
		prev, prevN := s0, int64(0)
		for waiting := true; waiting; {
			select {
			case <-tick:
			case <-done:
				waiting = false
			case <-runCtx.Done():
				waiting = false
			}
			if runCtx.Err() != nil {
				break
			}
			s, err := takeSnapshot(c.pid)
			if err != nil {
				continue
			}
			m, _ := readStatus(c.pid)
			n := ok.Load() + errs.Load()
			if n == prevN {
				continue
			}
			sm := sample{
				Completed: n,
				Elapsed:   s.at.Sub(s0.at),
				WindowRPS: float64(n-prevN) / s.at.Sub(prev.at).Seconds(),
				CPUPerReq: ticksToDuration(s.childTicks-prev.childTicks, hz) / time.Duration(n-prevN),
				Mem:       m,
				Errors:    errs.Load(),
			}
			res.Samples = append(res.Samples, sm)
			fmt.Fprintf(os.Stderr, "loadtest:   %d requests, %.0f req/s, CPU %.1f µs/req, RSS %s MiB (peak %s), errors %d\n",
				sm.Completed, sm.WindowRPS, us(sm.CPUPerReq), mib(m.RSS), mib(m.HWM), sm.Errors)
			prev, prevN = s, n
		}
	}
	s1, serr := takeSnapshot(c.pid)
	mem, merr := readStatus(c.pid)
	stopWorkers()
	if runCtx.Err() != nil {
		return fail(errors.New("run interrupted"))
	}
	if serr != nil {
		return fail(serr)
	}
	if merr != nil {
		return fail(merr)
	}

	res.Window = s1.at.Sub(s0.at)
	res.OK, res.Errors, res.Fatal, res.Mem = ok.Load(), errs.Load(), fatal.Load(), mem
	n := res.OK + res.Errors
	if n == 0 {
		return fail(errors.New("no request completed in the measured window"))
	}
	res.CPUPerReq = ticksToDuration(s1.childTicks-s0.childTicks, hz) / time.Duration(n)
	res.ClientCPU = ticksToDuration(s1.selfTicks-s0.selfTicks, hz) / time.Duration(n)
	other := int64(s1.host.Busy-s0.host.Busy) - int64(s1.childTicks-s0.childTicks) - int64(s1.selfTicks-s0.selfTicks)
	res.OtherCores = max(0, float64(other)/float64(hz)/res.Window.Seconds())
	sorted := mergeSorted(lat)
	res.P50, res.P99 = percentile(sorted, 50), percentile(sorted, 99)
	if len(sorted) > 0 {
		res.Max = sorted[len(sorted)-1]
	}
	return res, nil
}

func ticksToDuration(ticks uint64, hz int64) time.Duration {
	return time.Duration(ticks) * time.Second / time.Duration(hz)
}

func printHeader(w io.Writer, cfg *config, targets []*target, reqs []*request, hz int64, hzSource string) {
	host, _ := os.Hostname()
	fmt.Fprintf(w, "## loadtest %s\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "- host %s: %d CPUs, clock ticks %d Hz (%s); loadtest built with %s\n", host, runtime.NumCPU(), hz, hzSource, runtime.Version())
	mode := fmt.Sprintf("%s measured after %s warm-up", cfg.duration, cfg.warmup)
	if cfg.count > 0 {
		mode = fmt.Sprintf("%d requests per run after %s warm-up, sampled every %d", cfg.count, cfg.warmup, cfg.reportEvery)
	}
	fmt.Fprintf(w, "- %s; concurrency %v over %d connection(s); client decode %s; a fresh process per run", mode, cfg.concurrency, cfg.connections, cfg.decode)
	if len(cfg.env) > 0 {
		fmt.Fprintf(w, "; env %s", strings.Join(cfg.env, " "))
	}
	fmt.Fprintln(w)
	sdks := map[string]bool{}
	for _, t := range targets {
		fmt.Fprintf(w, "- %s `%s`: %s, %s %s, %s MiB\n", t.Role, t.Path, t.GoVersion, sdkModule, t.SDK, mib(uint64(t.Size)))
		sdks[t.SDK] = true
	}
	if len(sdks) > 1 {
		fmt.Fprintf(w, "- **WARNING: the binaries are built from different function-sdk-go versions**\n")
	}
	for _, r := range reqs {
		fmt.Fprintf(w, "- request %s: `%s`, %d B on the wire, %d observed resources\n", r.Name, r.Path, len(r.Encoded), len(r.Msg.GetObserved().GetResources()))
	}
	fmt.Fprintln(w)
}

func printRound(w io.Writer, round int, results []*result) {
	fmt.Fprintf(w, "### Round %d\n\n", round)
	if len(results) == 0 {
		fmt.Fprintf(w, "No run completed.\n\n")
		return
	}
	fmt.Fprintln(w, "| binary | request | conc | req/s | p50 ms | p99 ms | CPU µs/req | peak RSS MiB | startup ms | size MiB | errors | other load (cores) |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	type key struct {
		req  string
		conc int
	}
	byKey := map[key]map[string]*result{}
	var order []key
	for _, r := range results {
		errs := fmt.Sprint(r.Errors)
		if r.Fatal > 0 {
			errs += fmt.Sprintf(" (+%d fatal)", r.Fatal)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.0f | %s | %s | %.1f | %s | %s | %s | %s | %.2f |\n",
			r.Target.Label, r.Request, r.Concurrency, r.rps(), ms(r.P50), ms(r.P99), us(r.CPUPerReq),
			mib(r.Mem.HWM), msShort(r.Startup), mib(uint64(r.Target.Size)), errs, r.OtherCores)
		k := key{r.Request, r.Concurrency}
		if byKey[k] == nil {
			byKey[k] = map[string]*result{}
			order = append(order, k)
		}
		byKey[k][r.Target.Role] = r
	}
	var checks []string
	for _, k := range order {
		o, b := byKey[k][roleOurs], byKey[k][roleBaseline]
		if o == nil || b == nil {
			continue
		}
		cpu := float64(o.CPUPerReq) / float64(b.CPUPerReq)
		rss := float64(o.Mem.HWM) / float64(b.Mem.HWM)
		fmt.Fprintf(w, "| **ours/no-op** | %s | %d | %s | %s | %s | **%s** | **%s** | %s | %s | | |\n",
			k.req, k.conc, ratio(o.rps(), b.rps()), ratio(float64(o.P50), float64(b.P50)), ratio(float64(o.P99), float64(b.P99)),
			ratio(float64(o.CPUPerReq), float64(b.CPUPerReq)), ratio(float64(o.Mem.HWM), float64(b.Mem.HWM)),
			ratio(float64(o.Startup), float64(b.Startup)), ratio(float64(o.Target.Size), float64(b.Target.Size)))
		// The CPU target is for the request with full observed
		// state; for the others the ratio is information only.
		cpuCheck := "no target for this request"
		if strings.Contains(k.req, "observed") {
			cpuCheck = "target ≤3×: " + verdict(cpu <= 3)
		}
		checks = append(checks, fmt.Sprintf("- %s c=%d: CPU/req %.2f× (%s)", k.req, k.conc, cpu, cpuCheck))
		if k.conc == 8 {
			checks[len(checks)-1] += fmt.Sprintf("; peak RSS %.2f× (target ≤1.2× at concurrency 8: %s)", rss, verdict(rss <= 1.2))
		} else {
			checks[len(checks)-1] += fmt.Sprintf("; peak RSS %.2f×", rss)
		}
	}
	fmt.Fprintln(w)
	if len(checks) > 0 {
		fmt.Fprintln(w, strings.Join(checks, "\n"))
		fmt.Fprintln(w)
	}
	for _, r := range results {
		if r.FirstError != "" {
			fmt.Fprintf(w, "- %s %s c=%d first error: %s\n", r.Target.Label, r.Request, r.Concurrency, r.FirstError)
		}
	}
	for _, r := range results {
		if len(r.Samples) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n#### RSS over %d requests: %s, %s, concurrency %d\n\n", r.OK+r.Errors, r.Target.Label, r.Request, r.Concurrency)
		fmt.Fprintln(w, "| requests | elapsed s | req/s | CPU µs/req | RSS MiB | peak RSS MiB | errors |")
		fmt.Fprintln(w, "|--:|--:|--:|--:|--:|--:|--:|")
		for _, s := range r.Samples {
			fmt.Fprintf(w, "| %d | %.1f | %.0f | %.1f | %s | %s | %d |\n", s.Completed, s.Elapsed.Seconds(), s.WindowRPS, us(s.CPUPerReq), mib(s.Mem.RSS), mib(s.Mem.HWM), s.Errors)
		}
		fmt.Fprintf(w, "\n%s\n", leakVerdict(r.Samples))
	}
	fmt.Fprintln(w)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// leakVerdict compares RSS in the second half of the samples with the first
// half (the first sample is skipped: heaps are still growing to their steady
// size). It is a heuristic for a human reading the table, not a test.
func leakVerdict(s []sample) string {
	if len(s) < 4 {
		return "Too few samples for a leak verdict (need 4; lower --report-every)."
	}
	s = s[1:]
	half := len(s) / 2
	var first, second uint64
	for _, x := range s[:half] {
		first = max(first, x.Mem.RSS)
	}
	for _, x := range s[half:] {
		second = max(second, x.Mem.RSS)
	}
	growth := float64(second) - float64(first)
	perM := growth / float64(s[len(s)-1].Completed-s[0].Completed) * 1e6
	flat := growth <= max(0.05*float64(first), 4<<20)
	word := "flat"
	if !flat {
		word = "**growing**"
	}
	return fmt.Sprintf("RSS %s: max %s MiB in the first half of the samples, %s MiB in the second (%+.1f MiB, %+.1f MiB per 1e6 requests; flat = ≤ max(5%%, 4 MiB)).",
		word, mib(first), mib(second), growth/(1<<20), perM/(1<<20))
}

// printSummary prints, for every binary, request and concurrency, the median
// over the rounds, and the ours/no-op ratios of the medians with the range of
// the per-round ratios: on a busy machine a single round can be off by 2×.
func printSummary(w io.Writer, rounds [][]*result) {
	type key struct {
		role, req string
		conc      int
	}
	byKey := map[key][]*result{}
	var order []key
	for _, rs := range rounds {
		for _, r := range rs {
			k := key{r.Target.Role, r.Request, r.Concurrency}
			if byKey[k] == nil {
				order = append(order, k)
			}
			byKey[k] = append(byKey[k], r)
		}
	}
	med := func(rs []*result, f func(*result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return median(v)
	}
	cpu := func(r *result) float64 { return us(r.CPUPerReq) }
	hwm := func(r *result) float64 { return float64(r.Mem.HWM) }
	fmt.Fprintf(w, "### Summary: median over %d rounds\n\n", len(rounds))
	fmt.Fprintln(w, "| binary | request | conc | runs | req/s | p50 ms | p99 ms | CPU µs/req (min–max) | peak RSS MiB | startup ms |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, k := range order {
		rs := byKey[k]
		lo, hi := cpu(rs[0]), cpu(rs[0])
		for _, r := range rs {
			lo, hi = min(lo, cpu(r)), max(hi, cpu(r))
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %.0f | %.3f | %.3f | %.1f (%.1f–%.1f) | %s | %.1f |\n",
			rs[0].Target.Label, k.req, k.conc, len(rs), med(rs, (*result).rps),
			med(rs, func(r *result) float64 { return float64(r.P50) / 1e6 }),
			med(rs, func(r *result) float64 { return float64(r.P99) / 1e6 }),
			med(rs, cpu), lo, hi, mib(uint64(med(rs, hwm))),
			med(rs, func(r *result) float64 { return float64(r.Startup) / 1e6 }))
	}
	for _, k := range order {
		if k.role != roleOurs {
			continue
		}
		o, b := byKey[k], byKey[key{roleBaseline, k.req, k.conc}]
		if len(b) == 0 {
			continue
		}
		var per []string
		for i := 0; i < len(o) && i < len(b); i++ {
			per = append(per, ratio(cpu(o[i]), cpu(b[i])))
		}
		fmt.Fprintf(w, "| **ours/no-op** | %s | %d | | %s | | | **%s** (rounds: %s) | **%s** | %s |\n",
			k.req, k.conc, ratio(med(o, (*result).rps), med(b, (*result).rps)),
			ratio(med(o, cpu), med(b, cpu)), strings.Join(per, ", "),
			ratio(med(o, hwm), med(b, hwm)),
			ratio(med(o, func(r *result) float64 { return float64(r.Startup) }), med(b, func(r *result) float64 { return float64(r.Startup) })))
	}
	fmt.Fprintln(w)
}
