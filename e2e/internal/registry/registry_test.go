package registry

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/example/function-database/e2e/internal/pki"
	"github.com/example/function-database/e2e/internal/proc"
)

// The names the suite gives its packages, as an ImageConfig rewrites them.
const (
	host   = "xpkg.example.test"
	prefix = host + "/"
	fnRepo = "acme/function-database"
	fnTag  = "v1.0.0"
)

// start starts a registry in a temporary folder laid out as the suite's
// (<dir>/logs made beforehand); it is stopped when the test ends.
func start(t *testing.T) (*Registry, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r, dir
}

// trusting is a pool holding only the CA certificate in the PEM file at path.
func trusting(t *testing.T, path string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		t.Fatalf("%s holds no PEM certificate", path)
	}
	return p
}

// client speaks to the registry as a pull or a push would, offering HTTP/2.
// With dialTo set every connection goes there, whatever the URL's host (a
// hosts file that points the name at it).
func client(roots *x509.CertPool, serverName, dialTo string) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
	}
	if dialTo != "" {
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, dialTo)
		}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// answer is what do reads of a response.
type answer struct {
	StatusCode int
	Status     string
	Proto      string
	Header     http.Header
	TLS        *tls.ConnectionState
}

// do sends a request and returns the answer and its body.
func do(cl *http.Client, method, url, contentType string, body []byte) (*answer, []byte, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json")
	resp, err := cl.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return &answer{resp.StatusCode, resp.Status, resp.Proto, resp.Header, resp.TLS}, b, err
}

// blob is one blob of an image: its digest and bytes.
type blob struct {
	digest v1.Hash
	data   []byte
}

// blobs are img's config and compressed layers.
func blobs(t *testing.T, img v1.Image) []blob {
	t.Helper()
	cfg, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	out := []blob{{cfgName, cfg}}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, blob{d, b})
	}
	return out
}

// push pushes img to the repository ref names (its registry the URL's
// host) through the distribution API: each blob in one request, then the
// manifest under ref's tag.
func push(t *testing.T, cl *http.Client, ref name.Reference, img v1.Image) {
	t.Helper()
	base := "https://" + ref.Context().RegistryStr() + "/v2/" + ref.Context().RepositoryStr()
	for _, b := range blobs(t, img) {
		resp, body, err := do(cl, http.MethodPost, base+"/blobs/uploads/?digest="+b.digest.String(), "application/octet-stream", b.data)
		if err != nil {
			t.Fatalf("upload %s: %v", b.digest, err)
		}
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("upload %s: %s: %s", b.digest, resp.Status, body)
		}
	}
	manifest, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	mt, err := img.MediaType()
	if err != nil {
		t.Fatal(err)
	}
	resp, body, err := do(cl, http.MethodPut, base+"/manifests/"+ref.Identifier(), string(mt), manifest)
	if err != nil {
		t.Fatalf("put manifest: %v", err)
	}
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("put manifest: %s: %s", resp.Status, body)
	}
}

// pull pulls what ref names and checks it is img, byte for byte: the
// manifest (and the digest the registry says it has) and every blob. It
// returns the manifest's answer, for its protocol and TLS state.
func pull(t *testing.T, cl *http.Client, ref name.Reference, img v1.Image) *answer {
	t.Helper()
	base := "https://" + ref.Context().RegistryStr() + "/v2/" + ref.Context().RepositoryStr()
	resp, manifest, err := do(cl, http.MethodGet, base+"/manifests/"+ref.Identifier(), "", nil)
	if err != nil {
		t.Fatalf("get manifest of %s: %v", ref, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("get manifest of %s: %s: %s", ref, resp.Status, manifest)
	}
	want, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(manifest, want) {
		t.Errorf("manifest of %s = %s, want %s", ref, manifest, want)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("Docker-Content-Digest"); got != digest.String() {
		t.Errorf("manifest of %s: Docker-Content-Digest %s, want %s", ref, got, digest)
	}
	for _, b := range blobs(t, img) {
		bresp, data, err := do(cl, http.MethodGet, base+"/blobs/"+b.digest.String(), "", nil)
		if err != nil {
			t.Fatalf("get blob %s: %v", b.digest, err)
		}
		if bresp.StatusCode != http.StatusOK || !bytes.Equal(data, b.data) {
			t.Errorf("get blob %s: %s, %d bytes, want 200 and the %d bytes pushed", b.digest, bresp.Status, len(data), len(b.data))
		}
	}
	return resp
}

// TestRegistry is the suite's use of the registry: started on loopback, an
// image pushed over TLS verified with the registry's CA, pulled back by the
// name the ImageConfig rewrites the package's to, then stopped.
func TestRegistry(t *testing.T) {
	r, dir := start(t)
	if host, _, err := net.SplitHostPort(r.Addr()); err != nil || host != "127.0.0.1" {
		t.Fatalf("Addr() = %q, want 127.0.0.1:PORT", r.Addr())
	}
	if want := filepath.Join(dir, "registry", "ca.crt"); r.CAFile() != want {
		t.Errorf("CAFile() = %s, want %s", r.CAFile(), want)
	}
	caPEM, err := os.ReadFile(r.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := pem.Decode(caPEM)
	if pb == nil {
		t.Fatalf("CAFile holds no PEM: %q", caPEM)
	}
	ca, err := x509.ParseCertificate(pb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || ca.Subject.CommonName != "e2e-registry-ca" {
		t.Errorf("the CA: IsCA %v, CN %q; want a CA named e2e-registry-ca", ca.IsCA, ca.Subject.CommonName)
	}

	img, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Pushed as the suite's push does, to the mirror of the package's name.
	mirror := r.Mirror(prefix, prefix+fnRepo+":"+fnTag)
	if want := r.Addr() + "/" + fnRepo + ":" + fnTag; mirror != want {
		t.Fatalf("Mirror = %q, want %q", mirror, want)
	}
	ref, err := name.ParseReference(mirror, name.StrictValidation)
	if err != nil {
		t.Fatalf("the mirror %q is not a reference: %v", mirror, err)
	}
	if ref.Context().RegistryStr() != r.Addr() || ref.Context().RepositoryStr() != fnRepo || ref.Identifier() != fnTag {
		t.Fatalf("the mirror %q names registry %s, repository %s, tag %s", mirror, ref.Context().RegistryStr(), ref.Context().RepositoryStr(), ref.Identifier())
	}
	roots := trusting(t, r.CAFile())
	push(t, client(roots, "", ""), ref, img)

	// Blobs are on disk, under <dir>/registry/blobs.
	for _, b := range blobs(t, img) {
		if _, err := os.Stat(filepath.Join(dir, "registry", "blobs", b.digest.Algorithm, b.digest.Hex)); err != nil {
			t.Errorf("blob %s not on disk: %v", b.digest, err)
		}
	}

	other, err := pki.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(other.Cert)
	cases := []struct {
		name string
		cl   *http.Client
		// want is how a pull goes: nil, or an error of this type.
		want any
	}{
		{name: "trusting the registry's CA", cl: client(roots, "", "")},
		{name: "trusting another CA", cl: client(otherRoots, "", ""), want: x509.UnknownAuthorityError{}},
		{name: "trusting the system's roots", cl: client(nil, "", ""), want: x509.UnknownAuthorityError{}},
		{name: "by a name the certificate lacks", cl: client(roots, "localhost", ""), want: x509.HostnameError{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.want == nil {
				resp := pull(t, c.cl, ref, img)
				if resp.Proto != "HTTP/1.1" {
					t.Errorf("spoke %s, want HTTP/1.1 only (the client offered h2)", resp.Proto)
				}
				if cert := resp.TLS.PeerCertificates[0]; len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
					t.Errorf("the serving certificate names %v, want 127.0.0.1", cert.IPAddresses)
				}
				return
			}
			_, _, err := do(c.cl, http.MethodGet, "https://"+r.Addr()+"/v2/", "", nil)
			switch c.want.(type) {
			case x509.UnknownAuthorityError:
				var e x509.UnknownAuthorityError
				if !errors.As(err, &e) {
					t.Errorf("pull: %v, want an unknown authority", err)
				}
			case x509.HostnameError:
				var e x509.HostnameError
				if !errors.As(err, &e) {
					t.Errorf("pull: %v, want a hostname mismatch", err)
				}
			}
		})
	}
	t.Run("plain HTTP", func(t *testing.T) {
		resp, body, err := do(&http.Client{Timeout: 10 * time.Second}, http.MethodGet, "http://"+r.Addr()+"/v2/", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS") {
			t.Errorf("plain HTTP: %s %q, want 400 (an HTTP request to an HTTPS server)", resp.Status, body)
		}
	})

	r.Stop()
	if c, err := net.DialTimeout("tcp", r.Addr(), time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after Stop", r.Addr())
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after Stop: %v, want connection refused", err)
	}
	log := proc.ReadFrom(filepath.Join(dir, "logs", "registry.log"), 0)
	for _, w := range []string{
		"POST /v2/" + fnRepo + "/blobs/uploads/?digest=",
		"PUT /v2/" + fnRepo + "/manifests/" + fnTag,
		"GET /v2/" + fnRepo + "/manifests/" + fnTag,
		"http: TLS handshake error", // the untrusting clients'
	} {
		if !strings.Contains(log, w) {
			t.Errorf("registry.log lacks %q:\n%s", w, log)
		}
	}
	stopped := make(chan struct{})
	go func() {
		r.Stop() // a second time
		var none *Registry
		none.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("a second Stop, or Stop of a nil Registry, does not return")
	}
}

func TestStartNeedsLogs(t *testing.T) {
	dir := t.TempDir()
	r, err := Start(dir) // no <dir>/logs
	if err == nil {
		r.Stop()
		t.Fatal("Start without <dir>/logs: no error")
	}
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join("logs", "registry.log")) {
		t.Errorf("Start without <dir>/logs: %v, want registry.log not found", err)
	}
}

// TestServeAs serves the registry under the packages' own host name, as
// README's install sees it through a hosts file, on a free port rather
// than 443 (ServeAs's).
func TestServeAs(t *testing.T) {
	r, _ := start(t)
	roots := trusting(t, r.CAFile())
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(r.Mirror(prefix, prefix+fnRepo+":"+fnTag), name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	push(t, client(roots, "", ""), ref, img)

	addr, err := r.serveAs(host, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	byName, err := name.ParseReference(prefix+fnRepo+":"+fnTag, name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		serverName string // what the client checks the certificate for: the URL's host when empty
		wantErr    bool
	}{
		{name: "as " + host},
		{name: "as another name", serverName: "other.example.test", wantErr: true},
		{name: "as the loopback address", serverName: "127.0.0.1", wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := client(roots, c.serverName, addr)
			if !c.wantErr {
				// The same repositories as on Addr: what was pushed there.
				if resp := pull(t, cl, byName, img); resp.Proto != "HTTP/1.1" {
					t.Errorf("spoke %s, want HTTP/1.1 only", resp.Proto)
				}
				return
			}
			_, _, err := do(cl, http.MethodGet, "https://"+host+"/v2/", "", nil)
			var e x509.HostnameError
			if !errors.As(err, &e) {
				t.Errorf("pull: %v, want a hostname mismatch", err)
			}
		})
	}

	// ServeAs listens on ip:443.
	if err := r.ServeAs(host, "192.0.2.1"); err == nil || !strings.Contains(err.Error(), "192.0.2.1:443") {
		t.Errorf("ServeAs on an address not the machine's: %v, want an error listening on 192.0.2.1:443", err)
	}

	r.Stop()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("ServeAs's %s still accepts connections after Stop", addr)
	}
}

func TestMirror(t *testing.T) {
	r := &Registry{addr: "127.0.0.1:5000"}
	cases := []struct {
		name, prefix, ref, want string
	}{
		{"a repository", prefix, prefix + fnRepo, "127.0.0.1:5000/" + fnRepo},
		{"a tag kept", prefix, prefix + fnRepo + ":v0.1.0", "127.0.0.1:5000/" + fnRepo + ":v0.1.0"},
		{"a digest kept", prefix, prefix + fnRepo + "@sha256:" + strings.Repeat("a", 64), "127.0.0.1:5000/" + fnRepo + "@sha256:" + strings.Repeat("a", 64)},
		{"another host: not rewritten", prefix, "ghcr.io/acme/x:v1", "ghcr.io/acme/x:v1"},
		{"a host that only begins like it: not rewritten", prefix, "xpkg.example.testing/acme/x", "xpkg.example.testing/acme/x"},
		{"a prefix with a path", prefix + "acme/", prefix + "acme/x:v1", "127.0.0.1:5000/x:v1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := r.Mirror(c.prefix, c.ref); got != c.want {
				t.Errorf("Mirror(%q, %q) = %q, want %q", c.prefix, c.ref, got, c.want)
			}
		})
	}
}

// fakeScript writes root/hack/<name>, a script that records its folder,
// arguments and the environment the package gives it (the variables that
// are not empty) into out/record, says
// something on stderr, and exits with code.
func fakeScript(t *testing.T, root, name string, code int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, "hack"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`#!/bin/sh
{
	echo "pwd=$(pwd)"
	for a in "$@"; do echo "arg=$a"; done
	for v in CROSSPLANE_BIN CRANE_BIN OUTPUT_DIR EXAMPLE_DIR FUNCTION_PACKAGE SSL_CERT_FILE; do
		eval "x=\${$v:-}"
		if [ -n "$x" ]; then echo "$v=$x"; fi
	done
} >"$OUTPUT_DIR/record"
echo "%s says hello" >&2
exit %d
`, name, code)
	if err := os.WriteFile(filepath.Join(root, "hack", name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestScripts runs Packages and Push against stand-ins for hack/package.sh
// and hack/push.sh: what each is given, where its output goes, and what a
// failure says.
func TestScripts(t *testing.T) {
	// Only what Packages or Push sets reaches the scripts.
	for _, v := range []string{"CROSSPLANE_BIN", "CRANE_BIN", "OUTPUT_DIR", "EXAMPLE_DIR", "FUNCTION_PACKAGE", "SSL_CERT_FILE"} {
		t.Setenv(v, "")
	}
	r := &Registry{addr: "127.0.0.1:5000", caFile: "/run/registry/ca.crt"}
	ref := r.Mirror(prefix, prefix+fnRepo+":"+fnTag)
	cases := []struct {
		name   string
		script string
		code   int
		run    func(ctx context.Context, root, out, logDir string) error
		log    string
		// want are the lines the script recorded, in order; wantErr the
		// error's beginning (empty: none).
		want    []string
		wantErr string
	}{
		{
			name: "Packages", script: "package.sh", log: "package.log",
			run: func(ctx context.Context, root, out, logDir string) error {
				return Packages(ctx, root, out, "/src/example", logDir, "/bin/crossplane", "/bin/crane", prefix+fnRepo)
			},
			want: []string{
				"CROSSPLANE_BIN=/bin/crossplane", "CRANE_BIN=/bin/crane", "OUTPUT_DIR=<out>",
				"EXAMPLE_DIR=/src/example", "FUNCTION_PACKAGE=" + prefix + fnRepo,
			},
		},
		{
			name: "Packages failing", script: "package.sh", code: 3, log: "package.log",
			run: func(ctx context.Context, root, out, logDir string) error {
				return Packages(ctx, root, out, "/src/example", logDir, "/bin/crossplane", "/bin/crane", prefix+fnRepo)
			},
			wantErr: "hack/package.sh: exit status 3\n",
		},
		{
			name: "Push, one reference", script: "push.sh", log: "push.log",
			run: func(ctx context.Context, root, out, logDir string) error {
				return r.Push(ctx, root, out, logDir, "/bin/crossplane", ref)
			},
			want: []string{"arg=" + ref, "CROSSPLANE_BIN=/bin/crossplane", "OUTPUT_DIR=<out>", "SSL_CERT_FILE=/run/registry/ca.crt"},
		},
		{
			name: "Push, the function and the Configuration", script: "push.sh", log: "push.log",
			run: func(ctx context.Context, root, out, logDir string) error {
				return r.Push(ctx, root, out, logDir, "/bin/crossplane", ref, "127.0.0.1:5000/acme/configuration-database:v1")
			},
			want: []string{"arg=" + ref, "arg=127.0.0.1:5000/acme/configuration-database:v1", "CROSSPLANE_BIN=/bin/crossplane", "OUTPUT_DIR=<out>", "SSL_CERT_FILE=/run/registry/ca.crt"},
		},
		{
			name: "Push failing", script: "push.sh", code: 4, log: "push.log",
			run: func(ctx context.Context, root, out, logDir string) error {
				return r.Push(ctx, root, out, logDir, "/bin/crossplane", ref)
			},
			wantErr: "hack/push.sh [" + ref + "]: exit status 4\n",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root, out, logDir := t.TempDir(), t.TempDir(), t.TempDir()
			fakeScript(t, root, c.script, c.code)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := c.run(ctx, root, out, logDir)
			logPath := filepath.Join(logDir, c.log)
			log := proc.ReadFrom(logPath, 0)
			if !strings.Contains(log, c.script+" says hello") {
				t.Errorf("%s lacks the script's output:\n%s", c.log, log)
			}
			if c.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), c.wantErr) {
					t.Fatalf("error = %v, want %q...", err, c.wantErr)
				}
				// The error quotes the log's end.
				if !strings.HasSuffix(err.Error(), proc.TailFile(logPath, 30)) {
					t.Errorf("error = %q, want it to end with the log's last lines", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rec, err := os.ReadFile(filepath.Join(out, "record"))
			if err != nil {
				t.Fatal(err)
			}
			want := append([]string{"pwd=" + root}, c.want...)
			for i := range want {
				want[i] = strings.ReplaceAll(want[i], "<out>", out)
			}
			if got := strings.Split(strings.TrimSuffix(string(rec), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("the script was given\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
