// Package registry is the e2e suite's OCI registry: go-containerregistry's
// registry, in the test binary, serving HTTPS on 127.0.0.1 with a
// certificate from a CA of its own, which Crossplane core, the crossplane
// CLI and the real nodes' containerd are told to trust (nothing else does);
// and the two scripts that build the project's packages and push them there
// (hack/package.sh, hack/push.sh).
//
// The suite builds both packages with [Packages] while the control plane
// starts, starts the registry with [Start] and pushes the function to it
// with [Registry.Push]. Core pulls through an ImageConfig that rewrites the
// packages' own registry host to the registry's address ([Registry.Addr]);
// [Registry.Mirror] is what that rewrite makes of a package's name, the
// name the suite expects the package manager to resolve. README's Install
// section pushes to the packages' own registry host, which the registry
// answers for, with a certificate for that name, on a second address
// ([Registry.ServeAs]). Whatever must trust the registry is given its CA's
// certificate, [Registry.CAFile]. [Registry.Stop] stops it at the end.
//
// Blobs are kept on disk, in the run's temporary folder; manifests in
// memory. The registry speaks HTTP/1.1 only (see [Start]).
package registry

import (
	"context"
	"crypto/tls"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	ggcr "github.com/google/go-containerregistry/pkg/registry"

	"github.com/example/function-database/e2e/internal/pki"
	"github.com/example/function-database/e2e/internal/proc"
)

// Registry is go-containerregistry's registry serving HTTPS on 127.0.0.1
// with a certificate from a CA of its own, made by [Start].
type Registry struct {
	addr   string // 127.0.0.1:PORT
	caFile string // the CA's certificate, PEM
	ca     *pki.CA
	srv    *http.Server
	done   chan struct{} // closed when srv has stopped serving
	stop   sync.Once

	mu sync.Mutex
	// named serves the same repositories under a registry's own name (the
	// README's install pushes to it), when asked (ServeAs).
	named *http.Server
}

// Start starts a registry on a free port of 127.0.0.1, with its files under
// <dir>/registry: the blobs (blobs/) and its CA's certificate (ca.crt, for
// whatever must trust it). It logs every request, and the HTTP server's
// errors, to <dir>/logs/registry.log, a folder that must exist. The CA
// ("e2e-registry-ca") is made for this registry alone, and its certificate
// names 127.0.0.1.
//
// It speaks HTTP/1.1 only: the registry reads an upload's body while
// holding its one lock, and over HTTP/2 the crossplane CLI's parallel
// uploads share one connection, where a stream waiting for the lock can
// fill the connection's flow-control window so that the stream holding it
// never gets the rest of its body: the push hangs (seen in the suite).
func Start(dir string) (*Registry, error) {
	dir = filepath.Join(dir, "registry")
	if err := os.MkdirAll(filepath.Join(dir, "blobs"), 0o755); err != nil {
		return nil, err
	}
	authority, err := pki.NewCA("e2e-registry-ca")
	if err != nil {
		return nil, err
	}
	r := &Registry{caFile: filepath.Join(dir, "ca.crt"), ca: authority, done: make(chan struct{})}
	if err := os.WriteFile(r.caFile, authority.CertPEM, 0o644); err != nil {
		return nil, err
	}
	crt, key, err := authority.Issue(pki.CertSpec{CommonName: "e2e-registry", IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "..", "logs", "registry.log"))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = logFile.Close()
		return nil, err
	}
	r.addr = ln.Addr().String()
	r.srv = &http.Server{
		Handler: ggcr.New(
			ggcr.Logger(log.New(logFile, "", log.LstdFlags)),
			ggcr.WithBlobHandler(ggcr.NewDiskBlobHandler(filepath.Join(dir, "blobs"))),
		),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		// HTTP/1.1 only (see above).
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(logFile, "http: ", log.LstdFlags),
	}
	go func() {
		defer close(r.done)
		defer logFile.Close()
		_ = r.srv.ServeTLS(ln, "", "") // http.ErrServerClosed once stopped
	}()
	return r, nil
}

// Addr is where the registry listens: 127.0.0.1:PORT, the host of the
// references it is pushed to and pulled from.
func (r *Registry) Addr() string { return r.addr }

// CAFile is the path of the registry's CA certificate (PEM): what a client
// is told to trust (SSL_CERT_FILE for the crossplane CLI, Crossplane core's
// CA bundle, containerd's hosts.toml).
func (r *Registry) CAFile() string { return r.caFile }

// Stop stops the registry, and the server [Registry.ServeAs] started,
// giving the requests under way 5 s in all to finish, and returns once the
// registry's server has ended. A nil Registry (one that never started) and
// a second Stop do nothing.
func (r *Registry) Stop() {
	if r == nil {
		return
	}
	r.stop.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.mu.Lock()
		named := r.named
		r.mu.Unlock()
		if named != nil {
			_ = named.Shutdown(ctx)
		}
		_ = r.srv.Shutdown(ctx)
		<-r.done
	})
}

// ServeAs serves the same repositories on ip:443 under the name host, with a
// certificate for that name from the registry's CA: what a client that
// resolves host to ip (a hosts file) and trusts the CA sees as the real
// registry. Listening on port 443 takes the privilege to (root,
// CAP_NET_BIND_SERVICE, or a low net.ipv4.ip_unprivileged_port_start). Its
// errors after the start land in the registry's log. It is meant to be
// called once.
func (r *Registry) ServeAs(host, ip string) error {
	_, err := r.serveAs(host, net.JoinHostPort(ip, "443"))
	return err
}

// serveAs is ServeAs on any address; it returns the address it listens on.
func (r *Registry) serveAs(host, addr string) (string, error) {
	crt, key, err := r.ca.Issue(pki.CertSpec{CommonName: host, DNSNames: []string{host}, Server: true})
	if err != nil {
		return "", err
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	named := &http.Server{
		Handler:           r.srv.Handler,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		TLSNextProto:      r.srv.TLSNextProto, // HTTP/1.1 only, as the registry's
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          r.srv.ErrorLog,
	}
	r.mu.Lock()
	r.named = named
	r.mu.Unlock()
	go func() { _ = named.ServeTLS(ln, "", "") }()
	return ln.Addr().String(), nil
}

// Mirror is where the registry holds what ref names when an ImageConfig
// rewrites prefix (a registry host and a slash, "xpkg.example.test/") to
// the registry's address and a slash: ref with prefix replaced by
// [Registry.Addr] and a slash, or ref as it is when it does not begin with
// prefix (the rewrite does not apply). A tag or digest in ref is kept.
func (r *Registry) Mirror(prefix, ref string) string {
	rest, ok := strings.CutPrefix(ref, prefix)
	if !ok {
		return ref
	}
	return r.addr + "/" + rest
}

// Push pushes the packages hack/package.sh built into out with root's
// hack/push.sh (the crossplane CLI at crossplaneBin) over HTTPS, trusting
// the registry's CA alone: the function's packages as one index under the
// first of refs, the Configuration under the second when there is one
// (refs are given to the script as they are; see [Registry.Mirror]). The
// script's output is appended to <logDir>/push.log, whose end a failure's
// error quotes.
func (r *Registry) Push(ctx context.Context, root, out, logDir, crossplaneBin string, refs ...string) error {
	logPath := filepath.Join(logDir, "push.log")
	env := []string{
		"CROSSPLANE_BIN=" + crossplaneBin,
		"OUTPUT_DIR=" + out,
		// Go reads its roots from here alone when it is set: nothing but
		// this CA is trusted, so a push that skipped verification or fell
		// back to plain HTTP could not pass unnoticed (the server speaks
		// TLS only).
		"SSL_CERT_FILE=" + r.caFile,
	}
	if err := proc.Run(ctx, logPath, root, env, filepath.Join(root, "hack", "push.sh"), refs...); err != nil {
		return fmt.Errorf("hack/push.sh %v: %w\n%s", refs, err, proc.TailFile(logPath, 30))
	}
	return nil
}

// Packages builds both packages with root's hack/package.sh into out, as
// the project ships them: the function for the script's platforms
// (linux/amd64 and linux/arm64 unless PLATFORMS says otherwise), the
// Configuration from the examples in the folder examples (its xrd.yaml and
// composition.yaml), depending on the function package fnPackage (a
// repository: registry host and path, no tag). crossplaneBin and craneBin
// are the tools the script runs. Its output is appended to
// <logDir>/package.log, whose end a failure's error quotes.
func Packages(ctx context.Context, root, out, examples, logDir, crossplaneBin, craneBin, fnPackage string) error {
	logPath := filepath.Join(logDir, "package.log")
	env := []string{
		"CROSSPLANE_BIN=" + crossplaneBin,
		"CRANE_BIN=" + craneBin,
		"OUTPUT_DIR=" + out,
		"EXAMPLE_DIR=" + examples,
		"FUNCTION_PACKAGE=" + fnPackage,
	}
	if err := proc.Run(ctx, logPath, root, env, filepath.Join(root, "hack", "package.sh")); err != nil {
		return fmt.Errorf("hack/package.sh: %w\n%s", err, proc.TailFile(logPath, 30))
	}
	return nil
}
