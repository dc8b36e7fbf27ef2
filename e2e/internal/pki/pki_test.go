package pki

import (
	"bytes"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"
)

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("not a PEM certificate: %q", certPEM)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func pool(c *CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.Cert)
	return p
}

func TestIssue(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.IsCA || ca.Cert.Subject.CommonName != "test-ca" {
		t.Fatalf("NewCA: IsCA %v, CN %q", ca.Cert.IsCA, ca.Cert.Subject.CommonName)
	}
	other, err := NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	serverAuth := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	clientAuth := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	cases := []struct {
		name string
		spec CertSpec
		// verify: the chain is checked against roots, for a name (DNS or
		// IP, empty: none) and a use; wantOK says whether it must verify.
		roots  *x509.CertPool
		host   string
		usage  []x509.ExtKeyUsage
		wantOK bool
	}{
		{"server for its DNS name", CertSpec{CommonName: "reg", DNSNames: []string{"xpkg.example.test"}, Server: true}, pool(ca), "xpkg.example.test", serverAuth, true},
		{"server for its IP", CertSpec{CommonName: "reg", IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, Server: true}, pool(ca), "127.0.0.1", serverAuth, true},
		{"server, another name", CertSpec{CommonName: "reg", DNSNames: []string{"xpkg.example.test"}, Server: true}, pool(ca), "evil.example.test", serverAuth, false},
		{"server, another IP", CertSpec{CommonName: "reg", IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, Server: true}, pool(ca), "10.0.0.1", serverAuth, false},
		{"server used as a client", CertSpec{CommonName: "reg", DNSNames: []string{"reg"}, Server: true}, pool(ca), "", clientAuth, false},
		{"client", CertSpec{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}, Client: true}, pool(ca), "", clientAuth, true},
		{"client used as a server", CertSpec{CommonName: "e2e-admin", Client: true}, pool(ca), "", serverAuth, false},
		{"both uses, as a server", CertSpec{CommonName: "fn", DNSNames: []string{"fn"}, Server: true, Client: true}, pool(ca), "fn", serverAuth, true},
		{"both uses, as a client", CertSpec{CommonName: "fn", DNSNames: []string{"fn"}, Server: true, Client: true}, pool(ca), "", clientAuth, true},
		{"another CA's trust", CertSpec{CommonName: "reg", DNSNames: []string{"reg"}, Server: true}, pool(other), "reg", serverAuth, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			certPEM, keyPEM, err := ca.Issue(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			cert := parseCert(t, certPEM)
			if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
				t.Errorf("the key is not the certificate's: %v", err)
			}
			if cert.Subject.CommonName != c.spec.CommonName || !slices.Equal(cert.Subject.Organization, c.spec.Organizations) {
				t.Errorf("subject %s, want CN=%s O=%v", cert.Subject, c.spec.CommonName, c.spec.Organizations)
			}
			if cert.IsCA {
				t.Error("an issued certificate is a CA")
			}
			now := time.Now()
			if !cert.NotBefore.Before(now.Add(-50*time.Minute)) || cert.NotAfter.Before(now.Add(23*time.Hour)) {
				t.Errorf("valid %s to %s, want from about an hour ago for a day", cert.NotBefore, cert.NotAfter)
			}
			_, err = cert.Verify(x509.VerifyOptions{Roots: c.roots, DNSName: c.host, KeyUsages: c.usage})
			if c.wantOK && err != nil {
				t.Errorf("does not verify: %v", err)
			}
			if !c.wantOK && err == nil {
				t.Error("verifies, want it not to")
			}
		})
	}
	a, _, err := ca.Issue(CertSpec{CommonName: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := ca.Issue(CertSpec{CommonName: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if parseCert(t, a).SerialNumber.Cmp(parseCert(t, b).SerialNumber) == 0 {
		t.Error("two certificates with one serial number")
	}
}

// selfSigned is a CA certificate for key, PEM-encoded, as another tool
// (Crossplane's core init) would write it.
func selfSigned(t *testing.T, key any, pub any) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(7),
		Subject:               pkix.Name{CommonName: "foreign-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func keyPEM(t *testing.T, typ string, der []byte, err error) []byte {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func TestParseCA(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	xKey, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	own, err := NewCA("own")
	if err != nil {
		t.Fatal(err)
	}
	rsaCert := selfSigned(t, rsaKey, &rsaKey.PublicKey)
	pkcs8 := func(k any) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		return keyPEM(t, "PRIVATE KEY", der, err)
	}
	cases := []struct {
		name     string
		certPEM  []byte
		keyPEM   []byte
		wantErr  string // empty: it parses, and issues certificates that verify
		wantType string
	}{
		{"PKCS #1 RSA (Crossplane's)", rsaCert, keyPEM(t, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey), nil), "", "*rsa.PrivateKey"},
		{"SEC 1 EC (NewCA's own)", own.CertPEM, own.KeyPEM, "", "*ecdsa.PrivateKey"},
		{"PKCS #8 RSA", rsaCert, pkcs8(rsaKey), "", "*rsa.PrivateKey"},
		{"PKCS #8 Ed25519", selfSigned(t, edKey, pub), pkcs8(edKey), "", "ed25519.PrivateKey"},
		{"PKCS #8, a key that cannot sign", rsaCert, pkcs8(xKey), "unsupported key type *ecdh.PrivateKey", ""},
		{"no PEM certificate", []byte("garbage"), own.KeyPEM, "no PEM certificate", ""},
		{"a PEM block that is no certificate", keyPEM(t, "CERTIFICATE", []byte{1, 2, 3}, nil), own.KeyPEM, "x509:", ""},
		{"no PEM key", own.CertPEM, nil, "no PEM key", ""},
		{"a PEM key of no known form", own.CertPEM, keyPEM(t, "PRIVATE KEY", []byte{1, 2, 3}, nil), "cannot parse CA key", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ca, err := ParseCA(c.certPEM, c.keyPEM)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("ParseCA = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := typeName(ca.Key); got != c.wantType {
				t.Errorf("key type %s, want %s", got, c.wantType)
			}
			if !bytes.Equal(ca.CertPEM, c.certPEM) || !bytes.Equal(ca.KeyPEM, c.keyPEM) {
				t.Error("CertPEM/KeyPEM are not the PEM given")
			}
			// What the suite does with it: issue the function's serving
			// certificate, which Crossplane (trusting its CA) verifies.
			crt, _, err := ca.Issue(CertSpec{CommonName: "fn", DNSNames: []string{"fn"}, Server: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := parseCert(t, crt).Verify(x509.VerifyOptions{Roots: pool(ca), DNSName: "fn"}); err != nil {
				t.Errorf("issued certificate does not verify: %v", err)
			}
		})
	}
}

func typeName(k any) string {
	switch k.(type) {
	case *rsa.PrivateKey:
		return "*rsa.PrivateKey"
	case *ecdsa.PrivateKey:
		return "*ecdsa.PrivateKey"
	case ed25519.PrivateKey:
		return "ed25519.PrivateKey"
	default:
		return "other"
	}
}

func TestNew(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	p, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"ca.crt": p.CACert, "ca.key": p.CAKey, "apiserver.crt": p.APIServerCert, "apiserver.key": p.APIServerKey,
		"admin.crt": p.AdminCert, "admin.key": p.AdminKey, "sa.key": p.ServiceAccountKey, "sa.pub": p.ServiceAccountPub,
	} {
		if path != filepath.Join(dir, name) {
			t.Errorf("%s at %s, want %s", name, path, filepath.Join(dir, name))
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Error(err)
			continue
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	read := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if !bytes.Equal(read(p.CACert), p.CAPEM) || !bytes.Equal(read(p.AdminCert), p.AdminCertPEM) || !bytes.Equal(read(p.AdminKey), p.AdminKeyPEM) {
		t.Error("the PEM fields differ from the files")
	}

	// kube-apiserver's certificate is valid for every name a client uses.
	api := parseCert(t, read(p.APIServerCert))
	for _, host := range []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "127.0.0.1", "10.0.0.1"} {
		if _, err := api.Verify(x509.VerifyOptions{Roots: pool(p.CA), DNSName: host}); err != nil {
			t.Errorf("apiserver.crt for %s: %v", host, err)
		}
	}
	admin := parseCert(t, p.AdminCertPEM)
	if admin.Subject.CommonName != "e2e-admin" || !slices.Equal(admin.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("admin.crt subject %s, want CN=e2e-admin,O=system:masters", admin.Subject)
	}

	// The suite's client reaches kube-apiserver over mTLS with these.
	serverPair, err := tls.LoadX509KeyPair(p.APIServerCert, p.APIServerKey)
	if err != nil {
		t.Fatal(err)
	}
	clientPair, err := tls.X509KeyPair(p.AdminCertPEM, p.AdminKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(p.CAPEM) {
		t.Fatal("CAPEM holds no certificate")
	}
	cConn, sConn := net.Pipe()
	srv := tls.Server(sConn, &tls.Config{Certificates: []tls.Certificate{serverPair}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	cli := tls.Client(cConn, &tls.Config{Certificates: []tls.Certificate{clientPair}, RootCAs: roots, ServerName: "kubernetes.default.svc", MinVersion: tls.VersionTLS12})
	done := make(chan error, 1)
	go func() { done <- srv.Handshake() }()
	if err := cli.Handshake(); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	if got := srv.ConnectionState().PeerCertificates[0].Subject.CommonName; got != "e2e-admin" {
		t.Errorf("the server saw client %q", got)
	}
	// The raw ends: tls.Conn.Close would send close_notify into a
	// synchronous pipe nobody reads, and wait 5 s for it.
	cConn.Close()
	sConn.Close()

	// sa.pub is sa.key's public half.
	kb, _ := pem.Decode(read(p.ServiceAccountKey))
	sa, err := x509.ParsePKCS1PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := pem.Decode(read(p.ServiceAccountPub))
	pub, err := x509.ParsePKIXPublicKey(pb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !sa.PublicKey.Equal(pub) {
		t.Error("sa.pub is not sa.key's public key")
	}
}

func TestKubeconfig(t *testing.T) {
	p, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const host = "https://127.0.0.1:6443"
	cases := []struct {
		name  string
		write func() (string, error)
		file  string
		user  clientcmdv1.AuthInfo
	}{
		{"admin", func() (string, error) { return p.Kubeconfig(host) }, "admin.kubeconfig",
			clientcmdv1.AuthInfo{ClientCertificate: p.AdminCert, ClientKey: p.AdminKey}},
		{"token", func() (string, error) { return p.TokenKubeconfig("crossplane", host, "tok.en-123") }, "crossplane.kubeconfig",
			clientcmdv1.AuthInfo{Token: "tok.en-123"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path, err := c.write()
			if err != nil {
				t.Fatal(err)
			}
			if path != filepath.Join(p.Dir, c.file) {
				t.Errorf("written to %s, want %s", path, filepath.Join(p.Dir, c.file))
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var cfg clientcmdv1.Config
			if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
				t.Fatalf("not a kubeconfig: %v\n%s", err, b)
			}
			if cfg.CurrentContext != "e2e" || len(cfg.Contexts) != 1 || len(cfg.Clusters) != 1 || len(cfg.AuthInfos) != 1 {
				t.Fatalf("want one context e2e, one cluster, one user:\n%s", b)
			}
			ctx, cl, u := cfg.Contexts[0], cfg.Clusters[0], cfg.AuthInfos[0]
			if ctx.Name != "e2e" || ctx.Context.Cluster != cl.Name || ctx.Context.AuthInfo != u.Name {
				t.Errorf("context %+v does not join cluster %s and user %s", ctx, cl.Name, u.Name)
			}
			if u.Name != strings.TrimSuffix(c.file, ".kubeconfig") {
				t.Errorf("user %s, want %s", u.Name, strings.TrimSuffix(c.file, ".kubeconfig"))
			}
			if cl.Cluster.Server != host || cl.Cluster.CertificateAuthority != p.CACert {
				t.Errorf("cluster %+v, want server %s, CA %s", cl.Cluster, host, p.CACert)
			}
			if u.AuthInfo.ClientCertificate != c.user.ClientCertificate || u.AuthInfo.ClientKey != c.user.ClientKey || u.AuthInfo.Token != c.user.Token {
				t.Errorf("user %+v, want %+v", u.AuthInfo, c.user)
			}
		})
	}
}
