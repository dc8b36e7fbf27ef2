//go:build e2e

package e2e

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// ca is a certificate authority made for one run of the suite.
type ca struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func newCA(cn string) (*ca, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &ca{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM: keyPEM}, nil
}

// caFromPEM loads a CA made by someone else (Crossplane's `core init`).
func caFromPEM(certPEM, keyPEM []byte) (*ca, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil {
		return nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("no PEM key")
	}
	var key crypto.Signer
	if k, err := x509.ParsePKCS1PrivateKey(kb.Bytes); err == nil {
		key = k
	} else if k, err := x509.ParseECPrivateKey(kb.Bytes); err == nil {
		key = k
	} else if k, err := x509.ParsePKCS8PrivateKey(kb.Bytes); err == nil {
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("unsupported key type %T", k)
		}
		key = s
	} else {
		return nil, errors.New("cannot parse CA key")
	}
	return &ca{cert: cert, key: key, certPEM: certPEM, keyPEM: keyPEM}, nil
}

type certSpec struct {
	cn     string
	orgs   []string
	dns    []string
	ips    []net.IP
	server bool
	client bool
}

// issue signs a new key pair; returns the PEM certificate and key.
func (c *ca) issue(s certSpec) ([]byte, []byte, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     s.dns,
		IPAddresses:  s.ips,
	}
	if s.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if s.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// pki is what the control plane needs: one CA for serving and client certs,
// plus the service-account signing key pair.
type pki struct {
	dir                               string
	ca                                *ca
	caCrt, caKey                      string
	apiCrt, apiKey                    string
	adminCrt, adminKey                string
	saKey, saPub                      string
	adminCertPEM, adminKeyPEM, caPEMs []byte
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c, err := newCA("e2e-ca")
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, ca: c, caPEMs: c.certPEM}
	write := func(name string, data []byte) (string, error) {
		path := filepath.Join(dir, name)
		return path, os.WriteFile(path, data, 0o600)
	}
	if p.caCrt, err = write("ca.crt", c.certPEM); err != nil {
		return nil, err
	}
	if p.caKey, err = write("ca.key", c.keyPEM); err != nil {
		return nil, err
	}
	crt, key, err := c.issue(certSpec{
		cn:     "kube-apiserver",
		dns:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		ips:    []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		server: true,
	})
	if err != nil {
		return nil, err
	}
	if p.apiCrt, err = write("apiserver.crt", crt); err != nil {
		return nil, err
	}
	if p.apiKey, err = write("apiserver.key", key); err != nil {
		return nil, err
	}
	p.adminCertPEM, p.adminKeyPEM, err = c.issue(certSpec{cn: "e2e-admin", orgs: []string{"system:masters"}, client: true})
	if err != nil {
		return nil, err
	}
	if p.adminCrt, err = write("admin.crt", p.adminCertPEM); err != nil {
		return nil, err
	}
	if p.adminKey, err = write("admin.key", p.adminKeyPEM); err != nil {
		return nil, err
	}
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, err
	}
	if p.saKey, err = write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(sa)})); err != nil {
		return nil, err
	}
	if p.saPub, err = write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})); err != nil {
		return nil, err
	}
	return p, nil
}

// kubeconfig writes an admin kubeconfig for the API server at host.
func (p *pki) kubeconfig(host string) (string, error) {
	return p.writeKubeconfig("admin", host, fmt.Sprintf("client-certificate: %s\n    client-key: %s", p.adminCrt, p.adminKey))
}

// tokenKubeconfig writes a kubeconfig that authenticates with a bearer token
// (a ServiceAccount's, from the TokenRequest API), as a pod's would.
func (p *pki) tokenKubeconfig(name, host, token string) (string, error) {
	return p.writeKubeconfig(name, host, "token: "+token)
}

// writeKubeconfig writes <dir>/<name>.kubeconfig; user is the user entry's
// fields, indented to sit under "user:".
func (p *pki) writeKubeconfig(name, host, user string) (string, error) {
	path := filepath.Join(p.dir, name+".kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    %s
contexts:
- name: e2e
  context:
    cluster: e2e
    user: %s
current-context: e2e
`, host, p.caCrt, name, user, name)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}
