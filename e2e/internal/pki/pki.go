// Package pki makes the certificates the e2e suite's control plane runs on:
// a certificate authority made for one run of the suite ([NewCA]) or loaded
// from one made by someone else ([ParseCA], Crossplane's `core init`),
// certificates it issues ([CA.Issue]), and the control plane's PKI folder
// ([New]): the CA, kube-apiserver's serving certificate, the admin's client
// certificate, the service-account signing key pair, and kubeconfigs that
// reach the API server with them ([PKI.Kubeconfig], [PKI.TokenKubeconfig]).
//
// The suite makes one PKI per cluster; the real nodes' kubelets, the
// registry, the object store and the function get certificates from a CA
// of this package. What it makes is valid for a day and what it writes is
// 0600: it is a test run's, thrown away with the run's temporary folder.
package pki

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

// CA is a certificate authority made for one run of the suite ([NewCA]), or
// one made by someone else the suite issues from ([ParseCA]).
type CA struct {
	// Cert is the CA's certificate, parsed.
	Cert *x509.Certificate
	// Key signs what the CA issues.
	Key crypto.Signer
	// CertPEM is Cert, PEM-encoded: what a client is given to trust.
	CertPEM []byte
	// KeyPEM is Key, PEM-encoded.
	KeyPEM []byte
}

// newKey makes a P-256 key, and its PEM encoding.
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

// serial is a random certificate serial number.
func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// NewCA makes a self-signed CA named cn, valid from an hour ago (clock skew)
// for a day.
func NewCA(cn string) (*CA, error) {
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
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

// ParseCA loads a CA made by someone else (Crossplane's `core init`): a PEM
// certificate and a PEM key, PKCS #1 (RSA), SEC 1 (EC) or PKCS #8 (a key
// that can sign).
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
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
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// CertSpec says what a certificate from [CA.Issue] is: whose (its subject),
// for which names, and for which uses.
type CertSpec struct {
	// CommonName is the subject's CN: a client certificate's user name to
	// Kubernetes (system:node:<name> for a kubelet).
	CommonName string
	// Organizations is the subject's O: a client certificate's groups to
	// Kubernetes (system:masters, system:nodes).
	Organizations []string
	// DNSNames and IPAddresses are the names a serving certificate is valid
	// for.
	DNSNames    []string
	IPAddresses []net.IP
	// Server and Client ask for the serverAuth and clientAuth extended key
	// usages; a certificate may have both.
	Server bool
	Client bool
}

// Issue signs a new key pair; returns the PEM certificate and key. The
// certificate is valid from an hour ago for a day, like the CA's.
func (c *CA) Issue(s CertSpec) (certPEM, keyPEM []byte, err error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: s.CommonName, Organization: s.Organizations},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     s.DNSNames,
		IPAddresses:  s.IPAddresses,
	}
	if s.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if s.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, &key.PublicKey, c.Key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// PKI is what the control plane needs: one CA for serving and client certs,
// plus the service-account signing key pair. The string fields are the
// paths of the files in Dir, for the components' flags; the []byte fields
// are what the suite's own client (client-go) is configured with.
type PKI struct {
	// Dir is the folder the files are in.
	Dir string
	// CA signs kube-apiserver's serving certificate and every client
	// certificate; the suite issues the kubelets' from it too.
	CA *CA
	// CACert and CAKey are the CA's certificate and key (ca.crt, ca.key).
	CACert, CAKey string
	// APIServerCert and APIServerKey are kube-apiserver's serving
	// certificate and key (apiserver.crt, apiserver.key), valid for
	// localhost, kubernetes.default.svc and its short forms, 127.0.0.1 and
	// 10.0.0.1 (the kubernetes Service's address).
	APIServerCert, APIServerKey string
	// AdminCert and AdminKey are the suite's client certificate and key
	// (admin.crt, admin.key): user e2e-admin in group system:masters.
	AdminCert, AdminKey string
	// ServiceAccountKey and ServiceAccountPub are the service-account token
	// signing key pair (sa.key, sa.pub), RSA 2048.
	ServiceAccountKey, ServiceAccountPub string
	// AdminCertPEM and AdminKeyPEM are the contents of AdminCert and
	// AdminKey; CAPEM is the CA's certificate, what a client trusts.
	AdminCertPEM, AdminKeyPEM, CAPEM []byte
}

// New makes a CA ("e2e-ca") and writes the control plane's PKI to dir, made
// (0700) when missing.
func New(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c, err := NewCA("e2e-ca")
	if err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir, CA: c, CAPEM: c.CertPEM}
	write := func(name string, data []byte) (string, error) {
		path := filepath.Join(dir, name)
		return path, os.WriteFile(path, data, 0o600)
	}
	if p.CACert, err = write("ca.crt", c.CertPEM); err != nil {
		return nil, err
	}
	if p.CAKey, err = write("ca.key", c.KeyPEM); err != nil {
		return nil, err
	}
	crt, key, err := c.Issue(CertSpec{
		CommonName:  "kube-apiserver",
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		Server:      true,
	})
	if err != nil {
		return nil, err
	}
	if p.APIServerCert, err = write("apiserver.crt", crt); err != nil {
		return nil, err
	}
	if p.APIServerKey, err = write("apiserver.key", key); err != nil {
		return nil, err
	}
	p.AdminCertPEM, p.AdminKeyPEM, err = c.Issue(CertSpec{CommonName: "e2e-admin", Organizations: []string{"system:masters"}, Client: true})
	if err != nil {
		return nil, err
	}
	if p.AdminCert, err = write("admin.crt", p.AdminCertPEM); err != nil {
		return nil, err
	}
	if p.AdminKey, err = write("admin.key", p.AdminKeyPEM); err != nil {
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
	if p.ServiceAccountKey, err = write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(sa)})); err != nil {
		return nil, err
	}
	if p.ServiceAccountPub, err = write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})); err != nil {
		return nil, err
	}
	return p, nil
}

// Kubeconfig writes an admin kubeconfig for the API server at host
// (<Dir>/admin.kubeconfig, with AdminCert and AdminKey) and returns its
// path.
func (p *PKI) Kubeconfig(host string) (string, error) {
	return p.writeKubeconfig("admin", host, fmt.Sprintf("client-certificate: %s\n    client-key: %s", p.AdminCert, p.AdminKey))
}

// TokenKubeconfig writes a kubeconfig that authenticates with a bearer token
// (a ServiceAccount's, from the TokenRequest API), as a pod's would, to
// <Dir>/<name>.kubeconfig, and returns its path.
func (p *PKI) TokenKubeconfig(name, host, token string) (string, error) {
	return p.writeKubeconfig(name, host, "token: "+token)
}

// writeKubeconfig writes <dir>/<name>.kubeconfig; user is the user entry's
// fields, indented to sit under "user:".
func (p *PKI) writeKubeconfig(name, host, user string) (string, error) {
	path := filepath.Join(p.Dir, name+".kubeconfig")
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
`, host, p.CACert, name, user, name)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}
