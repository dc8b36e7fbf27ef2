//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/example/function-database/e2e/internal/pki"
	"github.com/example/function-database/e2e/internal/proc"
)

const (
	// pkgVersion is the release README's install pushes; pkgBeyond is a tag of the
	// same function outside the Configuration's constraint (">=v0.1.0,
	// <v1.0.0"), which the package manager must not pick.
	pkgVersion = "v0.1.0"
	pkgBeyond  = "v1.0.0"
	// The packages' own names, as a platform's registry would hold them: the
	// Configuration is built to depend on fnPackage, and an ImageConfig
	// rewrites pkgHost to the loopback registry, as for a mirror.
	pkgHost    = "xpkg.example.test/"
	fnPackage  = pkgHost + "acme/function-database"
	cfgPackage = pkgHost + "acme/configuration-database"
)

// ociRegistry is go-containerregistry's registry serving HTTPS on 127.0.0.1
// with a certificate from a CA of its own, which Crossplane core and the
// crossplane CLI are told to trust (nothing else does).
type ociRegistry struct {
	addr   string // 127.0.0.1:PORT
	caFile string // the CA's certificate, PEM
	ca     *pki.CA
	srv    *http.Server
	done   chan error
	// named serves the same repositories under a registry's own name (the
	// README's install pushes to it), when asked.
	named *http.Server
}

func startRegistry(dir string) (*ociRegistry, error) {
	dir = filepath.Join(dir, "registry")
	if err := os.MkdirAll(filepath.Join(dir, "blobs"), 0o755); err != nil {
		return nil, err
	}
	authority, err := pki.NewCA("e2e-registry-ca")
	if err != nil {
		return nil, err
	}
	r := &ociRegistry{caFile: filepath.Join(dir, "ca.crt"), ca: authority, done: make(chan error, 1)}
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
		logFile.Close()
		return nil, err
	}
	r.addr = ln.Addr().String()
	r.srv = &http.Server{
		Handler: registry.New(
			registry.Logger(log.New(logFile, "", log.LstdFlags)),
			registry.WithBlobHandler(registry.NewDiskBlobHandler(filepath.Join(dir, "blobs"))),
		),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		// HTTP/1.1 only. The registry reads an upload's body while holding
		// its one lock; over HTTP/2 the CLI's parallel uploads share one
		// connection, and a stream waiting for the lock can fill the
		// connection's flow-control window so the stream holding it never
		// gets the rest of its body: the push hangs (seen here).
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(logFile, "http: ", log.LstdFlags),
	}
	go func() {
		defer logFile.Close()
		err := r.srv.ServeTLS(ln, "", "")
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		r.done <- err
	}()
	return r, nil
}

func (r *ociRegistry) stop() {
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r.named != nil {
		_ = r.named.Shutdown(ctx)
	}
	_ = r.srv.Shutdown(ctx)
	<-r.done
}

// serveAs serves the same repositories on ip:443 under the name host, with
// a certificate for that name from the registry's CA: what a client that
// resolves host to ip (a hosts file) and trusts the CA sees as the real
// registry. Its errors after the start land in the registry's log.
func (r *ociRegistry) serveAs(host, ip string) error {
	crt, key, err := r.ca.Issue(pki.CertSpec{CommonName: host, DNSNames: []string{host}, Server: true})
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "443"))
	if err != nil {
		return err
	}
	r.named = &http.Server{
		Handler:           r.srv.Handler,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		TLSNextProto:      r.srv.TLSNextProto, // HTTP/1.1 only, as above
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          r.srv.ErrorLog,
	}
	go func() { _ = r.named.ServeTLS(ln, "", "") }()
	return nil
}

// mirror is where the registry holds what names ref (a package under
// pkgHost), as the ImageConfig rewrites it.
func (r *ociRegistry) mirror(ref string) string {
	return r.addr + "/" + ref[len(pkgHost):]
}

// packages builds both packages with hack/package.sh (the function for
// linux/amd64 and linux/arm64, the Configuration from the examples in dir)
// into out, as the project ships them.
func packages(ctx context.Context, root, out, examples, logDir, crossplaneBin, craneBin string) error {
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

// push pushes the packages with hack/push.sh (the crossplane CLI) over
// HTTPS, trusting the registry's CA: the function's index as pkgBeyond
// (pkgVersion of both is README's install's to push).
func (r *ociRegistry) push(ctx context.Context, root, out, logDir, crossplaneBin string) error {
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
	// pkgVersion of both comes from README's install (readmeInstall),
	// pushed under the packages' own names.
	for _, args := range [][]string{
		{r.mirror(fnPackage) + ":" + pkgBeyond},
	} {
		if err := proc.Run(ctx, logPath, root, env, filepath.Join(root, "hack", "push.sh"), args...); err != nil {
			return fmt.Errorf("hack/push.sh %v: %w\n%s", args, err, proc.TailFile(logPath, 30))
		}
	}
	return nil
}
