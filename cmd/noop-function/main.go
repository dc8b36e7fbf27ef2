// Command noop-function is the performance baseline for function-database: a
// composition function built from the same function-sdk-go version and served
// with the same options as the real function, whose RunFunction only echoes
// the request (response.To(req, response.DefaultTTL)).
//
// cmd/loadtest starts it next to the real function and reports the real
// function's CPU time per request and peak RSS relative to this binary.
//
//	go build -trimpath -ldflags='-s -w' -o _output/noop-function ./cmd/noop-function
//	_output/noop-function --insecure --address=127.0.0.1:9443 --metrics-address=
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"google.golang.org/grpc/health"

	"github.com/crossplane/function-sdk-go"
	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/response"
)

// Function echoes every request.
type Function struct {
	fnv1.UnimplementedFunctionRunnerServiceServer

	log logging.Logger
}

// RunFunction returns the request's desired state and context unchanged, with
// the default TTL. It deliberately does no logging per request: the baseline
// is "the SDK's gRPC server plus protobuf (un)marshalling" and nothing else.
func (f *Function) RunFunction(_ context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	return response.To(req, response.DefaultTTL), nil
}

func main() {
	fs := flag.NewFlagSet("noop-function", flag.ExitOnError)
	network := fs.String("network", function.DefaultNetwork, "Network on which to listen for gRPC connections.")
	address := fs.String("address", function.DefaultAddress, "Address at which to listen for gRPC connections.")
	insecure := fs.Bool("insecure", false, "Run without mTLS credentials (dev/benchmarks only).")
	tlsDir := fs.String("tls-server-certs-dir", os.Getenv("TLS_SERVER_CERTS_DIR"), "Directory containing tls.crt, tls.key and ca.crt.")
	metrics := fs.String("metrics-address", "", "Address for the Prometheus metrics server; empty turns it off.")
	debug := fs.Bool("debug", false, "Emit debug logs.")
	maxRecv := fs.Int("max-recv-message-size", 16, "Largest request accepted, in MiB.")
	_ = fs.Parse(os.Args[1:])

	// Same construction as the real function (main.go, internal/server): a
	// zap logger, then function.Serve with Listen, MTLSCertificates,
	// Insecure, MaxRecvMessageSize, WithMetricsServer and a gRPC health
	// server, so startup cost and baseline RSS are comparable.
	log, err := function.NewLogger(*debug)
	if err != nil {
		fmt.Fprintln(os.Stderr, "noop-function: cannot create logger:", err)
		os.Exit(1)
	}
	if err := function.Serve(&Function{log: log},
		function.Listen(*network, *address),
		function.MTLSCertificates(*tlsDir),
		function.Insecure(*insecure),
		function.MaxRecvMessageSize(*maxRecv<<20),
		function.WithMetricsServer(*metrics),
		function.WithHealthServer(health.NewServer()),
	); err != nil {
		fmt.Fprintln(os.Stderr, "noop-function:", err)
		os.Exit(1)
	}
}
