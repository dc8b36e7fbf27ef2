package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/proto/v1beta1"

	"github.com/example/function-database/internal/server"
)

// The binary's tests: its flags, its serving path (run), and the real
// function served (concurrency, the codec's bytes, panics, request sizes).
// The server's transport alone (mTLS, the handshake timeout, refusing to
// start, metrics, stopping) is tested in internal/server, on a stand-in.

// mebibyte is a request or message size unit of these tests.
const mebibyte = 1 << 20

// parseCLI parses args as the binary does, defaults and environment
// included. TLS_SERVER_CERTS_DIR is cleared unless the test sets it.
func parseCLI(t *testing.T, args ...string) *CLI {
	t.Helper()
	c := &CLI{}
	k, err := kong.New(c, kong.Exit(func(code int) { t.Fatalf("kong exited with %d parsing %v", code, args) }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Parse(args); err != nil {
		t.Fatalf("cannot parse %v: %v", args, err)
	}
	return c
}

// startServer serves fn as c says on a 127.0.0.1 port, until the test ends.
func startServer(t *testing.T, c *CLI, fn fnv1.FunctionRunnerServiceServer) string {
	t.Helper()
	s, err := server.New(c.options(), fn, logging.NewNopLogger())
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis, nil) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned an error after it was stopped: %v", err)
			}
		case <-time.After(server.ShutdownGrace + 10*time.Second):
			t.Errorf("the server did not stop")
		}
	})
	return lis.Addr().String()
}

// dial connects to addr, allowing messages of up to 64 MiB each way.
func dial(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64*mebibyte), grpc.MaxCallRecvMsgSize(64*mebibyte)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func callV1(ctx context.Context, conn *grpc.ClientConn, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	return fnv1.NewFunctionRunnerServiceClient(conn).RunFunction(ctx, req)
}

// callV1beta1 sends req to the v1beta1 service (Crossplane 1.16 and
// earlier) and returns the response as v1.
func callV1beta1(ctx context.Context, conn *grpc.ClientConn, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	breq := &v1beta1.RunFunctionRequest{}
	if err := convertProto(req, breq); err != nil {
		return nil, err
	}
	brsp, err := v1beta1.NewFunctionRunnerServiceClient(conn).RunFunction(ctx, breq)
	if err != nil {
		return nil, err
	}
	rsp := &fnv1.RunFunctionResponse{}
	return rsp, convertProto(brsp, rsp)
}

// convertProto converts between the wire-identical v1 and v1beta1 messages.
func convertProto(from, to proto.Message) error {
	b, err := proto.Marshal(from)
	if err != nil {
		return err
	}
	return proto.Unmarshal(b, to)
}

func deterministicBytes(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// namedRequest is one request of the examples.
type namedRequest struct {
	name string
	req  *fnv1.RunFunctionRequest
}

// exampleRequests are every example as a new Database and as a running one.
func exampleRequests(t *testing.T) []namedRequest {
	t.Helper()
	var out []namedRequest
	for _, ex := range allExamples(t) {
		req := xrRequest(readYAMLStruct(t, ex.xr), compositionInput(t, ex.composition))
		running := proto.CloneOf(req)
		running.Observed.Resources = observedFrom(t, runTest(t, req), true)
		out = append(out, namedRequest{ex.name + "/new", req}, namedRequest{ex.name + "/running", running})
	}
	return out
}

func TestFlags(t *testing.T) {
	defaults := CLI{
		Network: "tcp", Address: ":9443", MetricsAddress: ":8080",
		MaxRecvMessageSize: 16, MaxConcurrentStreams: 128, ConnectionTimeout: 10 * time.Second, MaxConnectionAge: 30 * time.Second,
	}
	cases := map[string]struct {
		reason string
		env    string
		args   []string
		want   func(c CLI) CLI
	}{
		"Defaults": {
			reason: "Without flags the function listens on :9443 with mTLS from TLS_SERVER_CERTS_DIR, metrics on :8080 and a 16 MiB request limit.",
			want:   func(c CLI) CLI { return c },
		},
		"CertsDirFromEnvironment": {
			reason: "Crossplane passes the certificates directory in TLS_SERVER_CERTS_DIR.",
			env:    "/tls/server",
			want:   func(c CLI) CLI { c.TLSServerCertsDir = "/tls/server"; return c },
		},
		"Every flag": {
			reason: "Every setting is a flag.",
			args: []string{
				"--debug", "--network=unix", "--address=/run/fn.sock", "--tls-server-certs-dir=/certs", "--insecure",
				"--metrics-address=", "--max-recv-message-size=4", "--max-concurrent-streams=8", "--connection-timeout=3s",
				"--max-connection-age=0",
			},
			want: func(_ CLI) CLI {
				return CLI{
					Debug: true, Network: "unix", Address: "/run/fn.sock", TLSServerCertsDir: "/certs", Insecure: true,
					MaxRecvMessageSize: 4, MaxConcurrentStreams: 8, ConnectionTimeout: 3 * time.Second,
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv("TLS_SERVER_CERTS_DIR", tc.env)
			got := parseCLI(t, tc.args...)
			if d := cmp.Diff(tc.want(defaults), *got); d != "" {
				t.Errorf("%s\nparsed flags (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}

// TestServeConcurrently sends every example, new and running, many times at
// once through the real server, over several connections and both API
// versions: every response must be exactly the one the same request gets
// alone. Run it with -race.
func TestServeConcurrently(t *testing.T) {
	const (
		connections = 4
		goroutines  = 12
		callsEach   = 20
	)
	reqs := exampleRequests(t)
	fn := fuzzFunction() // a constant password: new Databases answer deterministically too
	addr := startServer(t, parseCLI(t, "--insecure", "--metrics-address="), fn)
	conns := make([]*grpc.ClientConn, connections)
	for i := range conns {
		conns[i] = dial(t, addr, insecure.NewCredentials())
	}

	// A bound for a hang only, not a speed limit: under -race, beside the
	// e2e suite on two cores (hack/test.sh runs them together), the 240
	// calls ran at 9 a second and a 50-second bound failed them. Speed is
	// measured by the benchmarks and cmd/loadtest, never by a deadline here.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	want := make([]*fnv1.RunFunctionResponse, len(reqs))
	for i, r := range reqs {
		rsp, err := callV1(ctx, conns[0], r.req)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		direct, err := fn.RunFunction(ctx, proto.CloneOf(r.req))
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(overTheWire(t, direct), rsp, protocmp.Transform()); d != "" {
			t.Fatalf("%s: the server's response differs from RunFunction's (-direct +server):\n%s", r.name, d)
		}
		want[i] = rsp
	}

	start := time.Now()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range callsEach {
				k := (g*7 + i*5) % len(reqs)
				conn := conns[(g+i)%len(conns)]
				call, api := callV1, "v1"
				if i%3 == 2 {
					call, api = callV1beta1, "v1beta1"
				}
				got, err := call(ctx, conn, reqs[k].req)
				if err != nil {
					t.Errorf("goroutine %d call %d (%s, %s): %v", g, i, reqs[k].name, api, err)
					return
				}
				if string(deterministicBytes(t, got)) != string(deterministicBytes(t, want[k])) {
					t.Errorf("goroutine %d call %d (%s, %s): response differs from the serial one (-serial +concurrent):\n%s",
						g, i, reqs[k].name, api, cmp.Diff(want[k], got, protocmp.Transform()))
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := goroutines * callsEach
	t.Logf("%d concurrent calls (%d requests, %d goroutines, %d connections) in %s: %.0f calls/s",
		n, len(reqs), goroutines, connections, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
}

// rawCodec is a client codec that keeps a response's wire bytes as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := proto.Marshal(v.(proto.Message)) //nolint:forcetypeassert // requests are messages
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*(v.(*[]byte)) = data.Materialize() //nolint:forcetypeassert // only used with *[]byte
	return nil
}

func (rawCodec) Name() string { return "proto" }

// TestWireBytesDeterministic: the server's codec is the deterministic one:
// the bytes on the wire are the same on every call, and the same as
// RunFunction's response marshaled by the codec.
func TestWireBytesDeterministic(t *testing.T) {
	fn := fuzzFunction()
	conn := dial(t, startServer(t, parseCLI(t, "--insecure", "--metrics-address="), fn), insecure.NewCredentials())
	for _, r := range exampleRequests(t) {
		direct, err := fn.RunFunction(t.Context(), proto.CloneOf(r.req))
		if err != nil {
			t.Fatal(err)
		}
		want, err := wireBytes(direct)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			var got []byte
			if err := conn.Invoke(t.Context(), fnv1.FunctionRunnerService_RunFunction_FullMethodName, r.req, &got, grpc.ForceCodecV2(rawCodec{})); err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			if !bytes.Equal(want, got) {
				t.Fatalf("%s call %d: %d bytes on the wire differ from the codec's %d", r.name, i, len(got), len(want))
			}
		}
	}
}

// panickingRunner panics outside RunFunction's own recovery, as a bug in the
// serving code around it would.
type panickingRunner struct {
	fnv1.UnimplementedFunctionRunnerServiceServer
}

func (panickingRunner) RunFunction(context.Context, *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	panic("the runner exploded")
}

// callOutcome is what a client sees of one call.
type callOutcome struct {
	Code          codes.Code
	InternalFatal bool // a Fatal result saying "internal error"
	Composed      bool // desired composed resources, no Fatal result
}

func outcomeOf(rsp *fnv1.RunFunctionResponse, err error) callOutcome {
	o := callOutcome{Code: grpcstatus.Code(err)}
	fatal := false
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			fatal = true
			o.InternalFatal = o.InternalFatal || strings.Contains(r.GetMessage(), "internal error")
		}
	}
	o.Composed = !fatal && err == nil && len(rsp.GetDesired().GetResources()) > 0
	return o
}

// TestPanicContainment: a panic answers its own request with an error that
// says so, and the server goes on serving the next ones.
func TestPanicContainment(t *testing.T) {
	passwordPanics := fuzzFunction()
	passwordPanics.password = func() string { panic("the password generator exploded") }

	reqs := exampleRequests(t)
	newDB, runningDB := reqs[0].req, reqs[1].req // medium: a new Database draws passwords, a running one does not

	type call struct {
		name string
		api  func(context.Context, *grpc.ClientConn, *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error)
		req  *fnv1.RunFunctionRequest
		want callOutcome
	}
	cases := map[string]struct {
		reason string
		fn     fnv1.FunctionRunnerServiceServer
		calls  []call
	}{
		"BuilderPanics": {
			reason: "RunFunction recovers a builder's panic into a Fatal result saying internal error, with no Go error.",
			fn:     passwordPanics,
			calls: []call{
				{"new Database (v1)", callV1, newDB, callOutcome{Code: codes.OK, InternalFatal: true}},
				{"running Database (v1)", callV1, runningDB, callOutcome{Code: codes.OK, Composed: true}},
				{"new Database (v1beta1)", callV1beta1, newDB, callOutcome{Code: codes.OK, InternalFatal: true}},
				{"running Database (v1beta1)", callV1beta1, runningDB, callOutcome{Code: codes.OK, Composed: true}},
			},
		},
		"HandlerPanics": {
			reason: "The server recovers a panic outside RunFunction into an Internal error for that request only.",
			fn:     panickingRunner{},
			calls: []call{
				{"v1", callV1, newDB, callOutcome{Code: codes.Internal}},
				{"v1beta1", callV1beta1, newDB, callOutcome{Code: codes.Internal}},
				{"v1 again", callV1, runningDB, callOutcome{Code: codes.Internal}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if f, ok := tc.fn.(*Function); ok {
				rsp, err := f.RunFunction(t.Context(), proto.CloneOf(newDB))
				if d := cmp.Diff(callOutcome{Code: codes.OK, InternalFatal: true}, outcomeOf(rsp, err)); d != "" {
					t.Errorf("%s\ncalled directly (-want +got):\n%s", tc.reason, d)
				}
			}
			conn := dial(t, startServer(t, parseCLI(t, "--insecure", "--metrics-address="), tc.fn), insecure.NewCredentials())
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			for _, c := range tc.calls {
				rsp, err := c.api(ctx, conn, c.req)
				if d := cmp.Diff(c.want, outcomeOf(rsp, err)); d != "" {
					t.Errorf("%s\n%s (-want +got):\n%s\nerror: %v", tc.reason, c.name, d, err)
				}
			}
			h, err := healthgrpc.NewHealthClient(conn).Check(ctx, &healthgrpc.HealthCheckRequest{})
			if err != nil || h.GetStatus() != healthgrpc.HealthCheckResponse_SERVING {
				t.Errorf("after the panics the server's health is %v, %v; want SERVING", h.GetStatus(), err)
			}
		})
	}
}

// TestRunServesUntilCancelled runs the whole serving path of the binary (on
// a unix socket, whose address the test knows) and stops it as SIGTERM does.
func TestRunServesUntilCancelled(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "fn.sock")
	c := parseCLI(t, "--insecure", "--network=unix", "--address="+sock, "--metrics-address=")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.run(ctx, fuzzFunction(), logging.NewNopLogger()) }()
	for i := 0; i < 200; i++ { // wait for the socket, sparing the client a reconnect backoff
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	conn := dial(t, "unix://"+sock, insecure.NewCredentials())
	cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
	defer ccancel()
	h, err := healthgrpc.NewHealthClient(conn).Check(cctx, &healthgrpc.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil || h.GetStatus() != healthgrpc.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", h.GetStatus(), err)
	}
	if rsp, err := callV1(cctx, conn, exampleRequests(t)[0].req); err != nil || len(rsp.GetDesired().GetResources()) == 0 {
		t.Fatalf("RunFunction: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run returned %v after it was stopped; want nil", err)
		}
	case <-time.After(server.ShutdownGrace + 10*time.Second):
		t.Fatal("run did not return after it was stopped")
	}
}

// junkResources are n observed composed resources of about size bytes in
// all, that this function does not compose: another step's, say.
func junkResources(size int) map[string]*fnv1.Resource {
	const each = 64 * 1024
	blob := strings.Repeat("x", each)
	out := map[string]*fnv1.Resource{}
	for i := 0; i*each < size; i++ {
		out[fmt.Sprintf("junk-%04d", i)] = &fnv1.Resource{Resource: &structpb.Struct{Fields: map[string]*structpb.Value{
			"apiVersion": structpb.NewStringValue("v1"),
			"kind":       structpb.NewStringValue("ConfigMap"),
			"metadata": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"name": structpb.NewStringValue(fmt.Sprintf("junk-%04d", i)), "namespace": structpb.NewStringValue("shop"),
			}}),
			"data": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"blob": structpb.NewStringValue(blob)}}),
		}}}
	}
	return out
}

// peakRSS is the process's peak resident memory (VmHWM), or "" off Linux.
func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			return strings.Join(strings.Fields(strings.TrimPrefix(l, "VmHWM:")), " ")
		}
	}
	return ""
}

// TestRequestSizeLimits: a request over --max-recv-message-size is refused
// with ResourceExhausted, promptly and without hurting the connection; a
// large request under it is answered as if the junk were not there.
func TestRequestSizeLimits(t *testing.T) {
	running := exampleRequests(t)[1] // medium, running
	cases := map[string]struct {
		reason string
		args   []string
		junk   int
		want   codes.Code
	}{
		"TenMiBAnswered": {
			reason: "10 MiB of observed resources is well under the 16 MiB default.",
			junk:   10 * mebibyte, want: codes.OK,
		},
		"FifteenMiBAnswered": {
			reason: "15 MiB is still under the 16 MiB default.",
			junk:   15 * mebibyte, want: codes.OK,
		},
		"TwentyMiBRefused": {
			reason: "20 MiB is over the 16 MiB default.",
			junk:   20 * mebibyte, want: codes.ResourceExhausted,
		},
		"FlagLowersTheLimit": {
			reason: "--max-recv-message-size=1 refuses 2 MiB.",
			args:   []string{"--max-recv-message-size=1"},
			junk:   2 * mebibyte, want: codes.ResourceExhausted,
		},
	}
	fn := fuzzFunction()
	plain, err := fn.RunFunction(t.Context(), proto.CloneOf(running.req))
	if err != nil {
		t.Fatal(err)
	}
	plain = overTheWire(t, plain)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			conn := dial(t, startServer(t, parseCLI(t, append([]string{"--insecure", "--metrics-address="}, tc.args...)...), fn), insecure.NewCredentials())
			req := proto.CloneOf(running.req)
			for k, v := range junkResources(tc.junk) {
				req.Observed.Resources[k] = v
			}
			size := proto.Size(req)

			// The bound is the context's: a refusal that took this long
			// would come back as DeadlineExceeded.
			ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
			defer cancel()
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			rsp, err := callV1(ctx, conn, req)
			elapsed := time.Since(start)
			runtime.ReadMemStats(&after)
			if d := cmp.Diff(tc.want, grpcstatus.Code(err)); d != "" {
				t.Fatalf("%s\ncode for a %.1f MiB request (-want +got):\n%s\nerror: %v", tc.reason, float64(size)/mebibyte, d, err)
			}
			t.Logf("%.1f MiB request: %s in %s; allocated %.0f MiB during the call (client and server), heap in use after %.0f MiB, process peak RSS %s",
				float64(size)/mebibyte, grpcstatus.Code(err), elapsed.Round(time.Millisecond),
				float64(after.TotalAlloc-before.TotalAlloc)/mebibyte, float64(after.HeapInuse)/mebibyte, peakRSS())
			if err == nil {
				if d := cmp.Diff(desiredOf(plain), desiredOf(rsp), protocmp.Transform()); d != "" {
					t.Errorf("%s\nthe junk changed the desired resources (-without +with):\n%s", tc.reason, d)
				}
			}

			// The same connection still serves.
			if _, err := callV1(ctx, conn, running.req); err != nil {
				t.Errorf("after a %s request, a small request gets: %v", grpcstatus.Code(err), err)
			}
		})
	}
}
