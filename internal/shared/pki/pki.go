// Package pki is the agent stream's identities: a certificate authority
// that the server replicas share, the certificates it issues to nodes (one
// identity per node, asked for with the bootstrap token once and renewed
// with the certificate itself) and to server replicas, and how each side
// reads the other's identity from a verified certificate.
//
// Identities are URIs in the certificates' subject alternative names,
// flowlb://node/<name> and flowlb://server/<replica>, with the extended key
// usage of the side (client for nodes, server for replicas): the CA issues
// nothing else, so the role and the name are all a peer needs to check, and
// no certificate has to name the addresses a replica happens to listen on.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Role is the side a certificate identifies.
type Role string

const (
	RoleNode   Role = "node"
	RoleServer Role = "server"
)

// caLifetime is the CA's validity; rotating the CA is a planned operation
// (docs/operations.md), not an automatic one.
const caLifetime = 10 * 365 * 24 * time.Hour

// clockSkew backdates certificates so that a peer whose clock is a little
// behind accepts them at once.
const clockSkew = 5 * time.Minute

// CA issues the identities.
type CA struct {
	Cert *x509.Certificate
	key  crypto.Signer
	// PEM is the CA certificate, what peers trust.
	PEM []byte
}

// LoadOrCreateCA reads the CA from its two PEM files, or creates both if
// neither exists (one without the other is an error: replicas share the
// pair, and a half-copied pair must not silently become a new CA).
func LoadOrCreateCA(certFile, keyFile string) (*CA, error) {
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	switch {
	case certErr == nil && keyErr == nil:
		return LoadCA(certFile, keyFile)
	case errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist):
		ca, keyPEM, err := NewCA("flowlb agent CA")
		if err != nil {
			return nil, err
		}
		if err := writeFiles(map[string][]byte{keyFile: keyPEM, certFile: ca.PEM}); err != nil {
			return nil, err
		}
		return ca, nil
	case certErr != nil && !errors.Is(certErr, os.ErrNotExist):
		return nil, certErr
	case keyErr != nil && !errors.Is(keyErr, os.ErrNotExist):
		return nil, keyErr
	}
	return nil, fmt.Errorf("CA: %s and %s must both exist or both be absent", certFile, keyFile)
}

// NewCA creates a CA and returns it with its key in PEM.
func NewCA(name string) (*CA, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := KeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return &CA{Cert: cert, key: key, PEM: CertPEM(der)}, keyPEM, nil
}

// LoadCA reads a CA from its PEM files.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	cert, err := ParseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate %s: %w", certFile, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("CA certificate %s is not a CA", certFile)
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key %s: %w", keyFile, err)
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, fmt.Errorf("CA key %s does not belong to %s", keyFile, certFile)
	}
	return &CA{Cert: cert, key: key, PEM: CertPEM(cert.Raw)}, nil
}

// Pool is a certificate pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// SignNode issues a node's identity from its certificate request, which
// must be signed by the key it carries and name the node.
func (ca *CA) SignNode(csrDER []byte, node string, ttl time.Duration) ([]byte, error) {
	if err := checkName(node); err != nil {
		return nil, err
	}
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("certificate request signature: %w", err)
	}
	if csr.Subject.CommonName != node {
		return nil, fmt.Errorf("certificate request names %q, not node %q", csr.Subject.CommonName, node)
	}
	return ca.issue(csr.PublicKey, RoleNode, node, ttl)
}

// issue signs a leaf certificate of role and name for pub.
func (ca *CA) issue(pub crypto.PublicKey, role Role, name string, ttl time.Duration) ([]byte, error) {
	usage := x509.ExtKeyUsageClientAuth
	if role == RoleServer {
		usage = x509.ExtKeyUsageServerAuth
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		URIs:         []*url.URL{IdentityURI(role, name)},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(ttl),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	return x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
}

// IdentityURI is the subject alternative name of an identity.
func IdentityURI(role Role, name string) *url.URL {
	return &url.URL{Scheme: "flowlb", Host: string(role), Path: "/" + name}
}

// Identity reads the role and name of a certificate the CA issued.
func Identity(cert *x509.Certificate) (Role, string, error) {
	for _, u := range cert.URIs {
		if u.Scheme != "flowlb" {
			continue
		}
		name := strings.TrimPrefix(u.Path, "/")
		if err := checkName(name); err != nil {
			return "", "", err
		}
		switch Role(u.Host) {
		case RoleNode, RoleServer:
			return Role(u.Host), name, nil
		}
	}
	return "", "", errors.New("the certificate carries no flowlb identity")
}

// checkName refuses names that cannot be an identity.
func checkName(name string) error {
	if name == "" || len(name) > 253 {
		return fmt.Errorf("identity name %q: empty or too long", name)
	}
	for _, r := range name {
		if r <= ' ' || r == '/' || r == 0x7f {
			return fmt.Errorf("identity name %q: control characters, spaces and slashes are not allowed", name)
		}
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // the system's random source failed: nothing is safe
	}
	return n
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ka, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ka.Equal(b)
}

// writeFiles writes files readable by their owner only, each through a
// temporary file and a rename so that a reader never sees half of one.
func writeFiles(files map[string][]byte) error {
	for path, data := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
	}
	return nil
}

// CertPEM encodes a DER certificate.
func CertPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// KeyPEM encodes a private key (PKCS #8).
func KeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseCertPEM reads the first certificate of a PEM block list.
func ParseCertPEM(data []byte) (*x509.Certificate, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("no certificate in PEM data")
		}
		if b.Type == "CERTIFICATE" {
			return x509.ParseCertificate(b.Bytes)
		}
	}
}

// ParseKeyPEM reads a private key (PKCS #8, EC or PKCS #1).
func ParseKeyPEM(data []byte) (crypto.Signer, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("no private key in PEM data")
		}
		var key any
		var err error
		switch b.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
		s, ok := key.(crypto.Signer)
		if !ok {
			return nil, errors.New("the private key cannot sign")
		}
		return s, nil
	}
}

// IssueServerCert issues a plain TLS server certificate, for addresses
// and names a client dials (the API's, in the lab and in tests), with its
// key, both in PEM.
func (ca *CA) IssueServerCert(name string, ips []net.IP, dnsNames []string, ttl time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := ca.issueHost(key.Public(), name, ips, dnsNames, ttl)
	if err != nil {
		return nil, nil, err
	}
	if keyPEM, err = KeyPEM(key); err != nil {
		return nil, nil, err
	}
	return CertPEM(der), keyPEM, nil
}

// issueHost signs a plain TLS server certificate for pub, valid for the
// addresses and DNS names a client dials.
func (ca *CA) issueHost(pub crypto.PublicKey, name string, ips []net.IP, dnsNames []string, ttl time.Duration) ([]byte, error) {
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		IPAddresses:  ips,
		DNSNames:     dnsNames,
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(ttl),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	return x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
}

// WriteFiles writes PEM files readable by their owner only, each whole
// (through a temporary file and a rename).
func WriteFiles(files map[string][]byte) error { return writeFiles(files) }
