package server

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	grpcstatus "google.golang.org/grpc/status"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// coreServiceConfig is the service config Crossplane core (v2.3.4,
// internal/xfn/function_runner.go) dials every function with: round robin
// over the addresses of the function's headless Service, and calls that
// wait for a ready connection instead of failing. Core sets no keepalive and
// no per-call deadline but the reconcile's (two minutes).
const coreServiceConfig = `{
	"loadBalancingConfig": [{"round_robin": {}}],
	"methodConfig": [{"name": [{}], "waitForReady": true}]
}`

// countingRunner answers as echoRunner and counts the requests it served.
type countingRunner struct {
	echoRunner
	served atomic.Int64
}

func (r *countingRunner) RunFunction(ctx context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	r.served.Add(1)
	return r.echoRunner.RunFunction(ctx, req)
}

// deadNode stands between the client and one replica, forwarding bytes
// until die: from then on it forwards nothing either way and closes
// nothing, as a node that lost its power (no FIN, no RST: the client's
// connection stays open and its requests go unanswered). It counts the
// client connections the client closed after the death: the client gave
// the replica up.
type deadNode struct {
	lis     net.Listener
	dead    atomic.Bool
	dropped atomic.Int64
	mu      sync.Mutex
	conns   []net.Conn
}

func newDeadNode(t *testing.T, target string) *deadNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &deadNode{lis: lis}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			n.mu.Lock()
			n.conns = append(n.conns, c, b)
			n.mu.Unlock()
			go n.pipe(b, c, true)
			go n.pipe(c, b, false)
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, c := range n.conns {
			_ = c.Close()
		}
	})
	return n
}

// pipe copies from src to dst while the node lives, and swallows what
// arrives after it died. fromClient: src is the client's connection.
func (n *deadNode) pipe(dst, src net.Conn, fromClient bool) {
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 && !n.dead.Load() {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			if !n.dead.Load() { // a dead node closes nothing
				_ = dst.Close()
			} else if fromClient {
				n.dropped.Add(1)
			}
			return
		}
	}
}

func (n *deadNode) addr() string { return n.lis.Addr().String() }
func (n *deadNode) die()         { n.dead.Store(true) }

// serviceDNS is what the headless Service's name resolves to: the test's
// stand-in for DNS, which drops a replica once its node is NotReady.
type serviceDNS struct {
	mu    sync.Mutex
	addrs []string
	asked atomic.Int64 // how often the client asked to resolve again
}

func (d *serviceDNS) set(addrs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.addrs = addrs
}

func (d *serviceDNS) state() resolver.State {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := resolver.State{}
	for _, a := range d.addrs {
		s.Addresses = append(s.Addresses, resolver.Address{Addr: a})
	}
	return s
}

// TestDeadReplicaLeavesTheBalancer: two replicas of the function, dialed as
// Crossplane core dials them, and the node of one dies (its connection goes
// silent, and DNS no longer lists it). With connections kept forever (the
// SDK's function.Serve) the dead replica's connection stays ready and every
// other call hangs on it until its deadline; with a maximum connection age,
// the live replica's periodic GOAWAY makes the client resolve again, the
// dead replica leaves the balancer, and no call is sent to it. (A call
// already in flight on the dead replica when it leaves still waits for its
// deadline: grpc closes a dropped connection gracefully, letting its calls
// finish. docs/operating.md says what that means for a reconcile.)
func TestDeadReplicaLeavesTheBalancer(t *testing.T) {
	// A call's deadline, standing in for core's two-minute reconcile
	// timeout: far beyond what a call to a live replica takes.
	const deadline = 5 * time.Second
	cases := map[string]struct {
		reason string
		age    time.Duration
		// hangs: whether some call waits out its deadline on the dead
		// replica.
		hangs bool
	}{
		"ConnectionsKeptForever": {
			reason: "Without a maximum connection age nothing closes the dead replica's connection: round robin keeps sending it calls, and each hangs until its deadline.",
			hangs:  true,
		},
		"MaximumConnectionAge": {
			reason: "The live replica's GOAWAY makes the client resolve again; the dead replica leaves the balancer and no call waits for its deadline.",
			age:    300 * time.Millisecond,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			edit := func(o *Options) { o.Insecure, o.MaxConnectionAge = true, tc.age }
			live, doomed := &countingRunner{}, &countingRunner{}
			liveAddr := startServer(t, options(edit), live)
			node := newDeadNode(t, startServer(t, options(edit), doomed))

			dns := &serviceDNS{}
			dns.set(liveAddr, node.addr())
			r := manual.NewBuilderWithScheme("function")
			r.InitialState(dns.state())
			r.ResolveNowCallback = func(resolver.ResolveNowOptions) {
				dns.asked.Add(1)
				go r.UpdateState(dns.state())
			}
			conn, err := grpc.NewClient("function:///acme-function-database.crossplane-system:9443",
				grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(coreServiceConfig))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })

			call := func() (time.Duration, error) {
				ctx, cancel := context.WithTimeout(t.Context(), deadline)
				defer cancel()
				start := time.Now()
				_, err := callV1(ctx, conn, testRequest)
				return time.Since(start), err
			}
			// Both replicas serve before the node dies.
			for i := 0; live.served.Load() == 0 || doomed.served.Load() == 0; i++ {
				if i == 20 {
					t.Fatalf("20 calls did not reach both replicas (live %d, doomed %d)", live.served.Load(), doomed.served.Load())
				}
				if _, err := call(); err != nil {
					t.Fatalf("call before the node died: %v", err)
				}
			}

			node.die()
			dns.set(liveAddr)
			servedBefore := doomed.served.Load()

			if !tc.hangs {
				// The dead replica leaves the balancer with no call sent:
				// the client closes its connection to it once the live
				// replica's GOAWAY made it resolve again.
				for start := time.Now(); node.dropped.Load() == 0; time.Sleep(10 * time.Millisecond) {
					if time.Since(start) > deadline {
						t.Fatalf("%s\nthe client kept its connection to the dead replica for %s (asked to resolve again %d times)", tc.reason, deadline, dns.asked.Load())
					}
				}
			}
			// Round robin alternates: of four calls, two reach the dead
			// replica while it is in the balancer.
			hung := 0
			for i := range 4 {
				took, err := call()
				switch grpcstatus.Code(err) {
				case codes.OK:
				case codes.DeadlineExceeded:
					hung++
					t.Logf("call %d hung for %s (its deadline) on the dead replica", i, took.Round(time.Millisecond))
				default:
					t.Errorf("call %d failed after %s: %v", i, took.Round(time.Millisecond), err)
				}
			}
			if got := hung > 0; got != tc.hangs {
				t.Errorf("%s\ncalls of four that hung until their deadline after the node died: %d", tc.reason, hung)
			}
			if n := doomed.served.Load() - servedBefore; n != 0 {
				t.Errorf("the dead replica served %d calls after its node died", n)
			}
			if tc.hangs && node.dropped.Load() != 0 {
				t.Errorf("%s\nthe client closed its connection to the dead replica", tc.reason)
			}
		})
	}
}
