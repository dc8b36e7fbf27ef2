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

func main() {
	ctx := kong.Parse(&CLI{}, kong.Description("A Crossplane composition function that composes a PostgreSQL stack from a Database."))
	ctx.FatalIfErrorf(ctx.Run())
}
