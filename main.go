// Package main implements function-database, a Crossplane composition function
// that turns one small Database resource into a production PostgreSQL stack.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	function "github.com/crossplane/function-sdk-go"
	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/example/function-database/internal/server"
)

// CLI of this Function.
type CLI struct {
	Debug bool `help:"Emit debug logs in addition to info logs." short:"d"`

	Network            string `default:"tcp"   help:"Network on which to listen for gRPC connections."`
	Address            string `default:":9443" help:"Address at which to listen for gRPC connections."`
	TLSServerCertsDir  string `env:"TLS_SERVER_CERTS_DIR" help:"Directory containing server certs (tls.key, tls.crt) and the CA used to verify client certificates (ca.crt)."`
	Insecure           bool   `help:"Run without mTLS credentials. For development and render only: Crossplane always dials with mTLS."`
	MetricsAddress     string `default:":8080" help:"Address of the Prometheus metrics endpoint; empty turns it off."`
	MaxRecvMessageSize int    `default:"16"    help:"Largest request accepted, in MiB."`

	MaxConcurrentStreams uint32        `default:"128" help:"Most requests served at once on one connection; more wait for a free slot. Bounds memory at about this times --max-recv-message-size per connection."`
	ConnectionTimeout    time.Duration `default:"10s" help:"How long a new connection may take to complete its TLS handshake before it is closed."`
	MaxConnectionAge     time.Duration `default:"30s" help:"How long a client connection lives before the client is asked to connect again (and so to look the function's replicas up again: a replica on a dead node then leaves Crossplane's balancer); 0 keeps connections forever."`
}

// Run this Function until SIGINT or SIGTERM, then drain in-flight requests.
func (c *CLI) Run() error {
	log, err := newLogger(c.Debug)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return c.run(ctx, NewFunction(log), log)
}

// run serves fn as the flags say until ctx is done (internal/server: the
// SDK's function.Serve cannot be stopped nor set the server's limits).
func (c *CLI) run(ctx context.Context, fn fnv1.FunctionRunnerServiceServer, log logging.Logger) error {
	return server.Run(ctx, c.options(), fn, log)
}

// options are the server's options the flags set.
func (c *CLI) options() server.Options {
	return server.Options{
		Network:              c.Network,
		Address:              c.Address,
		TLSServerCertsDir:    c.TLSServerCertsDir,
		Insecure:             c.Insecure,
		MetricsAddress:       c.MetricsAddress,
		MaxRecvMessageSize:   c.MaxRecvMessageSize,
		MaxConcurrentStreams: c.MaxConcurrentStreams,
		ConnectionTimeout:    c.ConnectionTimeout,
		MaxConnectionAge:     c.MaxConnectionAge,
	}
}

func newLogger(debug bool) (logging.Logger, error) {
	return function.NewLogger(debug)
}

func main() {
	ctx := kong.Parse(&CLI{}, kong.Description("A Crossplane composition function that composes a PostgreSQL stack from a Database."))
	ctx.FatalIfErrorf(ctx.Run())
}
