package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// renewAt is the share of a certificate's lifetime after which it is
// replaced: early enough that a renewal failing for a while does not let
// it expire.
const renewAt = 2.0 / 3

// NeedsRenewal reports whether a certificate this package issued has less
// than a third of its lifetime left (or is not yet valid, or expired).
// The lifetime is what was asked for: issuance backdates NotBefore by
// clockSkew, which does not count.
func NeedsRenewal(cert *x509.Certificate, now time.Time) bool {
	life := Lifetime(cert)
	return now.Before(cert.NotBefore) || now.After(cert.NotAfter.Add(-time.Duration(float64(life)*(1-renewAt))))
}

// Lifetime is the lifetime a certificate this package issued was asked
// for (issuance backdates NotBefore by clockSkew).
func Lifetime(cert *x509.Certificate) time.Duration {
	return max(cert.NotAfter.Sub(cert.NotBefore)-clockSkew, 0)
}

// ServerTLS is a replica's TLS for the agent stream: a serving identity it
// issues itself from the CA, kept in memory and replaced before it
// expires, and nodes' identities verified when they present one (the
// enrollment call comes without).
func ServerTLS(ca *CA, replica string, ttl time.Duration) (*tls.Config, error) {
	if err := checkName(replica); err != nil {
		return nil, err
	}
	s := &servingCert{issue: func(pub crypto.PublicKey) ([]byte, error) { return ca.issue(pub, RoleServer, replica, ttl) }}
	if _, err := s.get(time.Now()); err != nil {
		return nil, err
	}
	t, err := newTickets(ca)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.get(time.Now()) },
		ClientAuth:     tls.VerifyClientCertIfGiven,
		ClientCAs:      ca.Pool(),
	}
	t.install(cfg) // sessions resume on every replica of the CA (sessions.go)
	return cfg, nil
}

// APITLS is the API's TLS when the server issues its certificate itself:
// one from the CA for the names and addresses clients dial (hosts, each a
// DNS name or an IP address), kept in memory and replaced past two thirds
// of ttl, TLS 1.2 or later. Clients trust the CA certificate.
func APITLS(ca *CA, hosts []string, ttl time.Duration) (*tls.Config, error) {
	if len(hosts) == 0 {
		return nil, errors.New("no host names for the API certificate")
	}
	var ips []net.IP
	var names []string
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			names = append(names, h)
		}
	}
	s := &servingCert{issue: func(pub crypto.PublicKey) ([]byte, error) {
		return ca.issueHost(pub, "flowlb API", ips, names, ttl)
	}}
	if _, err := s.get(time.Now()); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.get(time.Now()) },
	}, nil
}

// servingCert is a certificate issued in memory, with a new key each
// time, and issued again when it needs renewal.
type servingCert struct {
	issue func(pub crypto.PublicKey) ([]byte, error)
	mu    sync.Mutex
	cur   *tls.Certificate
}

func (s *servingCert) get(now time.Time) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil && !NeedsRenewal(s.cur.Leaf, now) {
		return s.cur, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := s.issue(key.Public())
	if err != nil {
		return nil, fmt.Errorf("issue the serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	s.cur = &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	return s.cur, nil
}

// ClientTLS is a node's TLS to the replicas: the server must hold a
// server identity from the CA (whatever address it is reached at), and
// the node presents its own identity, if it has one yet. With sessions,
// a handshake resumes the node's last session with any replica, made
// with the identity it presents now (sessions.go).
func ClientTLS(roots *x509.CertPool, identity func() *tls.Certificate, sessions *Sessions) *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain and the role are checked in VerifyConnection; host
		// names are not what identifies a replica.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := VerifyPeer(cs, roots, RoleServer)
			return err
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := identity(); c != nil {
				return c, nil
			}
			return &tls.Certificate{}, nil // none yet: enrollment
		},
	}
	if sessions != nil {
		cfg.ServerName = replicasServerName
		cfg.ClientSessionCache = sessionsOf{s: sessions, identity: identity}
	}
	return cfg
}

// VerifyPeer checks that the peer of a TLS connection holds an identity
// of role from the CA in roots, valid now, and returns its name.
func VerifyPeer(cs tls.ConnectionState, roots *x509.CertPool, role Role) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", errors.New("the peer presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	usage := x509.ExtKeyUsageClientAuth
	if role == RoleServer {
		usage = x509.ExtKeyUsageServerAuth
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return "", fmt.Errorf("peer certificate: %w", err)
	}
	got, name, err := Identity(leaf)
	if err != nil {
		return "", err
	}
	if got != role {
		return "", fmt.Errorf("the peer is a %s (%s), not a %s", got, name, role)
	}
	return name, nil
}

// NewNodeRequest makes a node's key and its certificate request.
func NewNodeRequest(node string) (*ecdsa.PrivateKey, []byte, error) {
	if err := checkName(node); err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	csr, err := NodeRequest(key, node)
	if err != nil {
		return nil, nil, err
	}
	return key, csr, nil
}

// NodeRequest makes node's certificate request for a key it has already.
func NodeRequest(key crypto.Signer, node string) ([]byte, error) {
	if err := checkName(node); err != nil {
		return nil, err
	}
	return x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: node}}, key)
}

// KeyID names a public key: the SHA-256 of its DER form
// (SubjectPublicKeyInfo), in hex.
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}
