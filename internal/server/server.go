// Package server serves a composition function over gRPC, as function-sdk-go's
// function.Serve does (reflection, the v1 and v1beta1 RunFunction services,
// health, Prometheus metrics, mTLS from a certificates directory or plain
// text), with what function.Serve (v0.7.1) lacks:
//   - limits: keepalive pings and their enforcement, concurrent streams per
//     connection, request header size, the TLS handshake's timeout;
//   - a maximum connection age, so that a replica on a dead node leaves
//     Crossplane's balancer (MaxConnectionAge below);
//   - a stop: Serve returns when its context is done, after draining the
//     requests in flight, and serves on listeners it is given (function.Serve
//     blocks until an error, listens itself, and cannot be stopped);
//   - failures seen: a metrics port that cannot be bound is an error (the SDK
//     ignores it and serves no metrics), and a panic in any handler becomes an
//     Internal error for that request instead of a dead process;
//   - a process-local metrics registry, so that servers can run one after
//     another in one process, as the tests do (function.Serve defaults to the
//     global one; WithMetricsRegistry can change that, not the rest).
//
// Importing it replaces grpc's default codec with wire.Codec (deterministic
// bytes from pooled buffers).
package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	grpcprometheus "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	grpcstatus "google.golang.org/grpc/status"

	function "github.com/crossplane/function-sdk-go"
	"github.com/crossplane/function-sdk-go/errors"
	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/proto/v1beta1"

	"github.com/example/function-database/internal/wire"
)

const (
	mebibyte = 1 << 20

	// maxHeaderListSize bounds the request metadata. Crossplane sends a few
	// hundred bytes; grpc's default allows 16 MiB per stream.
	maxHeaderListSize = 1 * mebibyte

	// The server pings a connection idle for keepaliveTime and closes it if
	// the ping is not answered within keepaliveTimeout: a Crossplane pod
	// that vanished without closing its connection does not hold it (and its
	// buffers) forever. Crossplane's client sends no pings itself.
	keepaliveTime    = 2 * time.Minute
	keepaliveTimeout = 20 * time.Second
	// keepaliveMinTime is the shortest ping interval a client may use before
	// the server answers with GOAWAY (too_many_pings): ping floods are cut
	// off, while clients that keep idle connections alive are accepted, down
	// to grpc-go's smallest client interval (10 s) with room for jitter.
	// grpc's default, 5 minutes and no pings without a request in flight,
	// would disconnect such clients.
	keepaliveMinTime = 5 * time.Second

	// maxConnectionAgeGrace is how long a connection told to go away (its
	// MaxConnectionAge reached) may finish the requests it has in flight:
	// RunFunction takes milliseconds, and Crossplane bounds a whole
	// reconcile at two minutes.
	maxConnectionAgeGrace = time.Minute

	// ShutdownGrace is how long a stopping server waits for requests in
	// flight (RunFunction takes milliseconds) before closing connections;
	// below Kubernetes' default 30 s termination grace period.
	ShutdownGrace = 15 * time.Second
)

// Options are how to serve: the function's command-line flags.
type Options struct {
	// Network and Address to listen on for gRPC.
	Network, Address string
	// TLSServerCertsDir holds tls.crt, tls.key and ca.crt for mTLS.
	TLSServerCertsDir string
	// Insecure serves plain text, for development; it wins over
	// TLSServerCertsDir.
	Insecure bool
	// MetricsAddress serves Prometheus metrics over HTTP; empty turns them off.
	MetricsAddress string
	// MaxRecvMessageSize is the largest request accepted, in MiB.
	MaxRecvMessageSize int
	// MaxConcurrentStreams is the most requests served at once on one
	// connection.
	MaxConcurrentStreams uint32
	// ConnectionTimeout bounds a new connection's TLS handshake.
	ConnectionTimeout time.Duration
	// MaxConnectionAge is how long a client connection lives before the
	// server asks the client (HTTP/2 GOAWAY) to connect again; 0 keeps
	// connections forever, as function.Serve does.
	//
	// Why: Crossplane core (v2.3) keeps one connection per function to
	// every address of its headless Service, balanced round-robin, with no
	// keepalive pings, and asks DNS again only when one of those
	// connections closes. A replica whose node dies closes nothing: its
	// connection stays ready, about every other call is sent to it and
	// hangs until the reconcile's 2-minute timeout, for as long as the
	// kernel retransmits (about 15 minutes), failovers included. A live
	// replica that closes its connections every MaxConnectionAge makes
	// core resolve again; the dead replica's address, gone from DNS once
	// its node is NotReady, is dropped and no new call is sent to it (a
	// call already in flight on it still waits for its deadline: grpc
	// closes a dropped connection gracefully). It should also let new
	// replicas receive calls (core otherwise keeps the addresses of its
	// first lookup; not tested). TestDeadReplicaLeavesTheBalancer proves
	// the first with core's own client settings.
	MaxConnectionAge time.Duration
}

// credentials returns the transport credentials the options ask for: mTLS
// from the certificates directory, as the SDK loads it (TLS 1.2 or later,
// a client certificate signed by ca.crt required), or plain text with
// --insecure, which wins when both are given, as with the SDK. Having
// neither is an error: a server that fell back to plain text in a cluster
// would answer any client.
func (c *Options) credentials() (credentials.TransportCredentials, error) {
	if c.Insecure {
		return insecure.NewCredentials(), nil
	}
	if c.TLSServerCertsDir == "" {
		return nil, errors.New("no transport security configured: pass --tls-server-certs-dir (or set TLS_SERVER_CERTS_DIR) to a directory holding tls.crt, tls.key and ca.crt to serve mTLS, or --insecure to serve plain text for local development")
	}
	o := &function.ServeOptions{}
	if err := function.MTLSCertificates(c.TLSServerCertsDir)(o); err != nil {
		return nil, errors.Wrapf(err, "cannot load the mTLS certificates from %s (TLS_SERVER_CERTS_DIR)", c.TLSServerCertsDir)
	}
	return o.Credentials, nil
}

// Server is a function's gRPC server with its health service and, when
// metrics are on, its Prometheus handler.
type Server struct {
	grpc    *grpc.Server
	health  *health.Server
	metrics http.Handler
	log     logging.Logger
}

// New builds the gRPC server the options describe, serving fn. It checks
// the options and loads the certificates, and listens on nothing yet.
func New(c Options, fn fnv1.FunctionRunnerServiceServer, log logging.Logger) (*Server, error) {
	creds, err := c.credentials()
	if err != nil {
		return nil, err
	}
	if c.MaxRecvMessageSize < 1 || c.MaxRecvMessageSize > 2047 {
		return nil, errors.Errorf("--max-recv-message-size must be between 1 and 2047 MiB, not %d", c.MaxRecvMessageSize)
	}
	if c.MaxConcurrentStreams < 1 {
		return nil, errors.New("--max-concurrent-streams must be at least 1")
	}
	if c.ConnectionTimeout <= 0 {
		return nil, errors.Errorf("--connection-timeout must be positive, not %s", c.ConnectionTimeout)
	}
	if c.MaxConnectionAge < 0 {
		return nil, errors.Errorf("--max-connection-age must be 0 (connections kept forever) or positive, not %s", c.MaxConnectionAge)
	}
	params := keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}
	if c.MaxConnectionAge > 0 {
		params.MaxConnectionAge, params.MaxConnectionAgeGrace = c.MaxConnectionAge, maxConnectionAgeGrace
	}

	s := &Server{health: health.NewServer(), log: log}
	var interceptors []grpc.UnaryServerInterceptor
	var m *grpcprometheus.ServerMetrics
	if c.MetricsAddress != "" {
		// The registry the SDK's global one would be: Go runtime, process
		// and gRPC server metrics.
		m = grpcprometheus.NewServerMetrics()
		reg := prometheus.NewRegistry()
		if err := reg.Register(m); err != nil {
			return nil, errors.Wrap(err, "cannot register the gRPC metrics")
		}
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		interceptors = append(interceptors, m.UnaryServerInterceptor())
		s.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	// Innermost, so that a recovered panic is counted as codes.Internal.
	interceptors = append(interceptors, recoverPanics(log))

	s.grpc = grpc.NewServer(
		grpc.Creds(creds),
		grpc.MaxRecvMsgSize(c.MaxRecvMessageSize*mebibyte),
		grpc.MaxConcurrentStreams(c.MaxConcurrentStreams),
		grpc.MaxHeaderListSize(maxHeaderListSize),
		grpc.ConnectionTimeout(c.ConnectionTimeout),
		grpc.KeepaliveParams(params),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(interceptors...),
	)
	reflection.Register(s.grpc)
	fnv1.RegisterFunctionRunnerServiceServer(s.grpc, fn)
	v1beta1.RegisterFunctionRunnerServiceServer(s.grpc, function.ServeBeta(fn))
	healthgrpc.RegisterHealthServer(s.grpc, s.health)
	if m != nil {
		m.InitializeMetrics(s.grpc)
	}
	return s, nil
}

// recoverPanics turns a panic in any handler into an Internal error for that
// request: grpc does not recover handler panics, so one would kill the
// server and every request in flight. RunFunction recovers its own panics
// into a Fatal result; this catches the rest (the v1beta1 adapter, health).
func recoverPanics(log logging.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (rsp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Info("Recovered from a panic serving a request", "method", info.FullMethod, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				rsp, err = nil, grpcstatus.Errorf(codes.Internal, "internal error serving %s (please report it): %v", info.FullMethod, r)
			}
		}()
		return handler(ctx, req)
	}
}

// Serve serves gRPC on lis, and metrics on mlis unless it is nil, until ctx
// is done; then it stops taking requests, drains those in flight for up to
// ShutdownGrace and returns nil. If the metrics server fails, it stops the
// same way and returns why. It closes both listeners.
func (s *Server) Serve(ctx context.Context, lis, mlis net.Listener) error {
	var metrics *http.Server
	metricsErr := make(chan error, 1)
	if mlis != nil && s.metrics != nil {
		metrics = &http.Server{Handler: s.metrics, ReadHeaderTimeout: 30 * time.Second}
		go func() { metricsErr <- metrics.Serve(mlis) }()
	} else if mlis != nil {
		_ = mlis.Close()
	}

	stopped := make(chan struct{})
	var stopErr error // set before stopped is closed
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
		case err := <-metricsErr:
			// Stop, and exit non-zero, rather than serve without metrics.
			stopErr = errors.Wrap(err, "cannot serve metrics")
		}
		s.health.Shutdown()
		if metrics != nil {
			// ctx is done: drain with a deadline of its own.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownGrace)
			_ = metrics.Shutdown(sctx)
			cancel()
		}
		drained := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(ShutdownGrace):
			s.grpc.Stop()
		}
	}()

	s.log.Debug("Serving", "address", lis.Addr().String())
	err := s.grpc.Serve(lis)
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) { // stopped before it began serving: no error
		// Serve failed on its own (not stopped): stop the rest too.
		s.grpc.Stop()
		if metrics != nil {
			_ = metrics.Close()
		}
		return errors.Wrap(err, "cannot serve gRPC connections")
	}
	<-stopped
	return stopErr
}

// Run serves fn as the options say until ctx is done. Transport security is
// checked before anything listens, so a misconfigured server fails at once
// with a clear error instead of serving.
func Run(ctx context.Context, c Options, fn fnv1.FunctionRunnerServiceServer, log logging.Logger) error {
	s, err := New(c, fn, log)
	if err != nil {
		return err
	}
	lc := &net.ListenConfig{}
	lis, err := lc.Listen(ctx, c.Network, c.Address)
	if err != nil {
		return errors.Wrapf(err, "cannot listen for %s connections at address %q", c.Network, c.Address)
	}
	var mlis net.Listener
	if c.MetricsAddress != "" {
		// A metrics port in use is a misconfiguration to see, not to ignore
		// (the SDK ignores it, and serves no metrics).
		if mlis, err = lc.Listen(ctx, "tcp", c.MetricsAddress); err != nil {
			_ = lis.Close()
			return errors.Wrapf(err, "cannot listen for metrics at address %q (--metrics-address= turns metrics off)", c.MetricsAddress)
		}
	}
	if c.Insecure {
		log.Info("Serving plain-text gRPC without mTLS (--insecure): for development only", "address", lis.Addr().String())
	}
	return s.Serve(ctx, lis, mlis)
}

// wire.Codec replaces grpc's default codec for this process: deterministic
// bytes from pooled buffers.
func init() { //nolint:gochecknoinits // codecs are registered at init, as grpc's own.
	encoding.RegisterCodecV2(wire.Codec{})
}
