package server

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// The tests serve a stand-in function: the server's transport does not
// depend on what the function answers (the root package's main_test.go
// serves the real one).

// echoRunner answers every request with one desired composed resource, so
// that a client sees that its request got through.
type echoRunner struct {
	fnv1.UnimplementedFunctionRunnerServiceServer
}

func (echoRunner) RunFunction(context.Context, *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	cm, err := structpb.NewStruct(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "answer"}})
	if err != nil {
		return nil, err
	}
	return &fnv1.RunFunctionResponse{Desired: &fnv1.State{Resources: map[string]*fnv1.Resource{"answer": {Resource: cm}}}}, nil
}

// testRequest is any request: echoRunner does not read it.
var testRequest = &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "test"}}

// options are the binary's flag defaults (main.go, pinned by the root's
// TestFlags) with metrics off, changed by edit.
func options(edit func(o *Options)) Options {
	o := Options{Network: "tcp", Address: ":9443", MaxRecvMessageSize: 16, MaxConcurrentStreams: 128, ConnectionTimeout: 10 * time.Second, MaxConnectionAge: 30 * time.Second}
	if edit != nil {
		edit(&o)
	}
	return o
}

// startServer serves fn as o says on a 127.0.0.1 port, until the test ends.
func startServer(t *testing.T, o Options, fn fnv1.FunctionRunnerServiceServer) string {
	t.Helper()
	s, err := New(o, fn, logging.NewNopLogger())
	if err != nil {
		t.Fatalf("New: %v", err)
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
		case <-time.After(ShutdownGrace + 10*time.Second):
			t.Errorf("the server did not stop")
		}
	})
	return lis.Addr().String()
}

// dial connects to addr.
func dial(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func callV1(ctx context.Context, conn *grpc.ClientConn, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	return fnv1.NewFunctionRunnerServiceClient(conn).RunFunction(ctx, req)
}

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var certSerial int64 = 1

// newCert signs tmpl (given a serial number and key here) with parent's key,
// or self-signs it when parent is nil.
func newCert(t *testing.T, tmpl *x509.Certificate, parent *testCA) (der []byte, key *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	certSerial++
	tmpl.SerialNumber = big.NewInt(certSerial)
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	der, key := newCert(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a leaf certificate for 127.0.0.1, valid between the times.
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage, notBefore, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	der, key := newCert(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		DNSNames:    []string{name},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}, ca)
	k, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k})
}

func (ca *testCA) keyPair(t *testing.T, name string, usage x509.ExtKeyUsage, notBefore, notAfter time.Time) tls.Certificate {
	t.Helper()
	c, k := ca.issue(t, name, usage, notBefore, notAfter)
	kp, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// serverCertsDir writes what Crossplane mounts at TLS_SERVER_CERTS_DIR: the
// server's certificate and key, and the CA that signs clients.
func serverCertsDir(t *testing.T, ca *testCA) string {
	t.Helper()
	dir := t.TempDir()
	c, k := ca.issue(t, "function-database", x509.ExtKeyUsageServerAuth, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	for name, b := range map[string][]byte{"tls.crt": c, "tls.key": k, "ca.crt": ca.pem} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func clientTLS(ca *testCA, certs []tls.Certificate, edit func(*tls.Config)) credentials.TransportCredentials {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	cfg := &tls.Config{RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12}
	if edit != nil {
		edit(cfg)
	}
	return credentials.NewTLS(cfg)
}

// TestTransportSecurity is the mTLS matrix: with TLS_SERVER_CERTS_DIR only
// clients presenting a certificate of the CA in ca.crt get an answer; with
// --insecure only plain-text clients do.
func TestTransportSecurity(t *testing.T) {
	ca, otherCA := newTestCA(t, "crossplane-root-ca"), newTestCA(t, "some-other-ca")
	now := time.Now()
	good := ca.keyPair(t, "crossplane", x509.ExtKeyUsageClientAuth, now.Add(-time.Hour), now.Add(time.Hour))
	expired := ca.keyPair(t, "crossplane", x509.ExtKeyUsageClientAuth, now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	serverOnly := ca.keyPair(t, "crossplane", x509.ExtKeyUsageServerAuth, now.Add(-time.Hour), now.Add(time.Hour))
	foreign := otherCA.keyPair(t, "crossplane", x509.ExtKeyUsageClientAuth, now.Add(-time.Hour), now.Add(time.Hour))

	certs := serverCertsDir(t, ca)
	mtls := startServer(t, options(func(o *Options) { o.TLSServerCertsDir = certs }), echoRunner{})
	plain := startServer(t, options(func(o *Options) { o.Insecure = true }), echoRunner{})

	req := testRequest
	cases := map[string]struct {
		reason string
		addr   string
		creds  credentials.TransportCredentials
		want   codes.Code
	}{
		"MTLSClientCertOfTheCA": {
			reason: "Crossplane's client certificate, signed by the CA in ca.crt, is served.",
			addr:   mtls, creds: clientTLS(ca, []tls.Certificate{good}, nil), want: codes.OK,
		},
		"MTLSNoClientCert": {
			reason: "A TLS client without a certificate is refused.",
			addr:   mtls, creds: clientTLS(ca, nil, nil), want: codes.Unavailable,
		},
		"MTLSClientCertOfAnotherCA": {
			reason: "A client certificate of another CA is refused. (Sent whatever the server asks: Go's client would not send it otherwise.)",
			addr:   mtls, creds: clientTLS(ca, nil, func(c *tls.Config) {
				c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &foreign, nil }
			}), want: codes.Unavailable,
		},
		"MTLSExpiredClientCert": {
			reason: "An expired client certificate of the CA is refused.",
			addr:   mtls, creds: clientTLS(ca, []tls.Certificate{expired}, nil), want: codes.Unavailable,
		},
		"MTLSClientCertNotForClientAuth": {
			reason: "A certificate of the CA not issued for client authentication is refused.",
			addr:   mtls, creds: clientTLS(ca, []tls.Certificate{serverOnly}, nil), want: codes.Unavailable,
		},
		"MTLSOldTLSVersion": {
			reason: "TLS below 1.2 is refused, whatever the certificate.",
			addr:   mtls, creds: clientTLS(ca, []tls.Certificate{good}, func(c *tls.Config) { c.MinVersion, c.MaxVersion = tls.VersionTLS10, tls.VersionTLS11 }), want: codes.Unavailable,
		},
		"MTLSPlainTextClient": {
			reason: "A plain-text client is refused by an mTLS server.",
			addr:   mtls, creds: insecure.NewCredentials(), want: codes.Unavailable,
		},
		"InsecurePlainTextClient": {
			reason: "With --insecure a plain-text client is served.",
			addr:   plain, creds: insecure.NewCredentials(), want: codes.OK,
		},
		"InsecureTLSClient": {
			reason: "With --insecure there is no TLS: a TLS client cannot connect.",
			addr:   plain, creds: clientTLS(ca, []tls.Certificate{good}, nil), want: codes.Unavailable,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			start := time.Now()
			rsp, err := callV1(ctx, dial(t, tc.addr, tc.creds), req)
			if d := cmp.Diff(tc.want, grpcstatus.Code(err)); d != "" {
				t.Errorf("%s\ncode (-want +got):\n%s\nerror: %v", tc.reason, d, err)
			}
			if err == nil && len(rsp.GetDesired().GetResources()) == 0 {
				t.Errorf("%s\nno desired resources in the answer", tc.reason)
			}
			t.Logf("%s after %s: %v", grpcstatus.Code(err), time.Since(start).Round(time.Millisecond), grpcstatus.Convert(err).Message())
		})
	}

	// The refusals did not hurt the server.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := callV1(ctx, dial(t, mtls, clientTLS(ca, []tls.Certificate{good}, nil)), req); err != nil {
		t.Errorf("after the refused clients, a good client gets: %v", err)
	}
}

// TestHandshakeTimeout: a connection that never completes its TLS handshake
// is closed after --connection-timeout instead of being held open.
func TestHandshakeTimeout(t *testing.T) {
	ca := newTestCA(t, "crossplane-root-ca")
	certs := serverCertsDir(t, ca)
	addr := startServer(t, options(func(o *Options) { o.TLSServerCertsDir, o.ConnectionTimeout = certs, time.Second }), echoRunner{})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if err := conn.SetReadDeadline(start.Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server held a silent connection open for %s", time.Since(start).Round(time.Millisecond))
	}
	t.Logf("a connection that sent nothing was closed after %s (error: %v)", time.Since(start).Round(time.Millisecond), err)
}

// TestRefusesToStart: a misconfigured server fails at once, with an error
// that says what to do, before it listens.
func TestRefusesToStart(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldAddr := held.Addr().String()
	emptyDir := t.TempDir()
	badCA := serverCertsDir(t, newTestCA(t, "ca"))
	if err := os.WriteFile(filepath.Join(badCA, "ca.crt"), []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := map[string]struct {
		reason string
		edit   func(o *Options)
		want   []string
	}{
		"NoTransportSecurity": {
			reason: "Neither --insecure nor a certificates directory: refuse to serve plain text by accident.",
			edit:   func(o *Options) { o.Address = heldAddr },
			want:   []string{"no transport security configured", "--tls-server-certs-dir", "TLS_SERVER_CERTS_DIR", "--insecure"},
		},
		"EmptyCertsDir": {
			reason: "A certificates directory without tls.crt and tls.key.",
			edit:   func(o *Options) { o.Address, o.TLSServerCertsDir = heldAddr, emptyDir },
			want:   []string{"cannot load the mTLS certificates from " + emptyDir, "tls.crt"},
		},
		"InvalidCA": {
			reason: "A ca.crt that holds no certificate.",
			edit:   func(o *Options) { o.Address, o.TLSServerCertsDir = heldAddr, badCA },
			want:   []string{"invalid CA certificate"},
		},
		"NoRequestSize": {
			reason: "A request limit of 0 MiB would refuse every request.",
			edit:   func(o *Options) { o.Address, o.Insecure, o.MaxRecvMessageSize = heldAddr, true, 0 },
			want:   []string{"--max-recv-message-size must be between 1 and 2047 MiB"},
		},
		"NegativeConnectionAge": {
			reason: "A negative connection age means nothing; 0 is the way to keep connections.",
			edit:   func(o *Options) { o.Address, o.Insecure, o.MaxConnectionAge = heldAddr, true, -time.Second },
			want:   []string{"--max-connection-age must be 0 (connections kept forever) or positive, not -1s"},
		},
		"AddressInUse": {
			reason: "The gRPC address is taken.",
			edit:   func(o *Options) { o.Address, o.Insecure = heldAddr, true },
			want:   []string{"cannot listen for tcp connections at address", "address already in use"},
		},
		"MetricsAddressInUse": {
			reason: "The metrics address is taken: say so instead of serving without metrics.",
			edit:   func(o *Options) { o.Address, o.MetricsAddress, o.Insecure = "127.0.0.1:0", heldAddr, true },
			want:   []string{"cannot listen for metrics", "--metrics-address= turns metrics off"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- Run(t.Context(), options(tc.edit), echoRunner{}, logging.NewNopLogger()) }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("%s\nrun returned no error", tc.reason)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s\nerror %q does not say %q", tc.reason, err, w)
					}
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s\nrun did not fail: it serves", tc.reason)
			}
		})
	}
}

// TestMetrics: with --metrics-address the server exports the SDK's gRPC
// server metrics, plus the Go runtime's and the process's.
func TestMetrics(t *testing.T) {
	s, err := New(options(func(o *Options) { o.Insecure, o.MetricsAddress = true, "127.0.0.1:0" }), echoRunner{}, logging.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis, mlis) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	if _, err := callV1(ctx, dial(t, lis.Addr().String(), insecure.NewCredentials()), testRequest); err != nil {
		t.Fatal(err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+mlis.Addr().String()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	rsp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	defer rsp.Body.Close()
	found := map[string]bool{}
	want := map[string]bool{
		`grpc_server_handled_total{grpc_code="OK",grpc_method="RunFunction",grpc_service="apiextensions.fn.proto.v1.FunctionRunnerService",grpc_type="unary"} 1`: true,
		`grpc_server_started_total{grpc_method="RunFunction",grpc_service="apiextensions.fn.proto.v1beta1.FunctionRunnerService",grpc_type="unary"} 0`:           true,
		"go_goroutines":                 true,
		"process_resident_memory_bytes": true,
	}
	sc := bufio.NewScanner(rsp.Body)
	for sc.Scan() {
		for w := range want {
			if strings.HasPrefix(sc.Text(), w) {
				found[w] = true
			}
		}
	}
	if d := cmp.Diff(want, found); d != "" {
		t.Errorf("metrics found (-want +got):\n%s", d)
	}
}

// TestServeStops: serve returns nil when stopped, even before it began
// serving, and an error when its metrics server fails (so the process exits
// non-zero and is restarted instead of serving without metrics).
func TestServeStops(t *testing.T) {
	cases := map[string]struct {
		reason  string
		metrics bool
		stop    func(cancel context.CancelFunc, mlis net.Listener)
		want    string
	}{
		"CancelledBeforeServing": {
			reason: "A SIGTERM during start-up stops the server cleanly.",
			stop:   func(cancel context.CancelFunc, _ net.Listener) { cancel() },
		},
		"MetricsListenerFails": {
			reason:  "A failed metrics server stops the function with an error.",
			metrics: true,
			stop:    func(_ context.CancelFunc, mlis net.Listener) { _ = mlis.Close() },
			want:    "cannot serve metrics",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := options(func(o *Options) { o.Insecure = true })
			if tc.metrics {
				o.MetricsAddress = "127.0.0.1:0"
			}
			s, err := New(o, echoRunner{}, logging.NewNopLogger())
			if err != nil {
				t.Fatal(err)
			}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var mlis net.Listener
			if tc.metrics {
				if mlis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			tc.stop(cancel, mlis)
			done := make(chan error, 1)
			go func() { done <- s.Serve(ctx, lis, mlis) }()
			select {
			case err := <-done:
				got := ""
				if err != nil {
					got = err.Error()
				}
				if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
					t.Errorf("%s\nserve returned %q, want an error saying %q", tc.reason, got, tc.want)
				}
			case <-time.After(ShutdownGrace + 10*time.Second):
				t.Fatalf("%s\nserve did not return", tc.reason)
			}
		})
	}
}
