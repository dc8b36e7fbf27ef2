// Command coredns is CoreDNS with only the plugins the e2e real node needs:
// cluster DNS for *.svc.cluster.local from the API server. The stock binary
// links every plugin (cloud DNS providers among them), which costs minutes
// of build on two cores for nothing the suite uses; CoreDNS supports this
// kind of build (a main that imports coremain and chosen plugins).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// The order in which plugins see a query, as in CoreDNS's own
	// zdirectives.go, restricted to the plugins linked above.
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}
}

func main() {
	coremain.Run()
}
