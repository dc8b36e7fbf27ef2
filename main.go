// Package main implements function-database, a Crossplane composition function
// that turns one small Database resource into a production PostgreSQL stack.
package main

import (
	"github.com/alecthomas/kong"

	function "github.com/crossplane/function-sdk-go"
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
}

// Run this Function.
func (c *CLI) Run() error {
	log, err := newLogger(c.Debug)
	if err != nil {
		return err
	}
	return function.Serve(NewFunction(log), c.serveOptions()...)
}

func main() {
	ctx := kong.Parse(&CLI{}, kong.Description("A Crossplane composition function that composes a PostgreSQL stack from a Database."))
	ctx.FatalIfErrorf(ctx.Run())
}
