package main

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	"google.golang.org/protobuf/proto"

	function "github.com/crossplane/function-sdk-go"
	"github.com/crossplane/function-sdk-go/logging"
)

const mebibyte = 1 << 20

// serveOptions turns the CLI flags into the SDK's serve options. The gRPC
// health service is always registered so that load tools and probes can tell
// when the server is up without sending a RunFunctionRequest.
func (c *CLI) serveOptions() []function.ServeOption {
	return []function.ServeOption{
		function.Listen(c.Network, c.Address),
		function.MTLSCertificates(c.TLSServerCertsDir),
		function.Insecure(c.Insecure),
		function.MaxRecvMessageSize(c.MaxRecvMessageSize * mebibyte),
		function.WithMetricsServer(c.MetricsAddress),
		function.WithHealthServer(health.NewServer()),
	}
}

func newLogger(debug bool) (logging.Logger, error) {
	return function.NewLogger(debug)
}

// deterministicCodec marshals protobuf messages deterministically (map
// entries sorted), so that the same request gets the same response bytes on
// the wire, not only the same message. Registered under grpc's default
// codec name, it replaces the default for this process.
type deterministicCodec struct{}

func (deterministicCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("cannot marshal %T: not a protobuf message", v)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

func (deterministicCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("cannot unmarshal into %T: not a protobuf message", v)
	}
	return proto.Unmarshal(data, m)
}

func (deterministicCodec) Name() string { return "proto" }

func init() { //nolint:gochecknoinits // codecs are registered at init, as grpc's own.
	encoding.RegisterCodec(deterministicCodec{})
}
