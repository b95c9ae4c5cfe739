package l7proxy

import (
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// terminator is a listener's TLS termination ready to serve: its
// certificates parsed, its client CAs and revocation lists loaded.
type terminator struct {
	certs  []*tls.Certificate
	config *tls.Config
	roots  *x509.CertPool
	crls   []*x509.RevocationList
	// hsts is the Strict-Transport-Security value ("": none).
	hsts string
}

// tlsVersions are Octavia's names of the versions Go's TLS serves.
var tlsVersions = map[string]uint16{"TLSv1": tls.VersionTLS10, "TLSv1.1": tls.VersionTLS11, "TLSv1.2": tls.VersionTLS12, "TLSv1.3": tls.VersionTLS13}

// compileTLS checks and prepares a listener's TLS; an error names what
// cannot be served (a key that does not match its certificate, a
// version Go does not offer, versions with a gap).
func compileTLS(t flows.L7TLS) (*terminator, error) {
	if len(t.Certificates) == 0 {
		return nil, errors.New("TLS termination without a certificate")
	}
	out := &terminator{}
	for i, c := range t.Certificates {
		pair, err := tls.X509KeyPair(c.Chain, c.Key)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", i+1, err)
		}
		out.certs = append(out.certs, &pair)
	}
	// CipherSuites: those of TLS 1.2 and older (none: Go's defaults). Go
	// picks among them by its own preference, not their order.
	cfg := &tls.Config{GetCertificate: out.certificate, NextProtos: t.ALPN, MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS13,
		CipherSuites: slices.Clone(t.CipherSuites)}
	if err := versionRange(cfg, t.Versions); err != nil {
		return nil, err
	}
	switch t.ClientAuth {
	case "", "NONE":
		cfg.ClientAuth = tls.NoClientCert
	case "OPTIONAL", "MANDATORY":
		if len(t.ClientCA) == 0 {
			return nil, fmt.Errorf("client authentication %s without a client CA", t.ClientAuth)
		}
		out.roots = x509.NewCertPool()
		if !out.roots.AppendCertsFromPEM(t.ClientCA) {
			return nil, errors.New("the client CA holds no certificate")
		}
		crls, err := parseCRLs(t.ClientCRL)
		if err != nil {
			return nil, err
		}
		out.crls = crls
		// Verified here, not by Go's TLS, to check the revocation
		// lists too; a certificate that does not verify ends the
		// handshake in both modes, as HAProxy's "verify optional" and
		// "verify required" do.
		cfg.ClientAuth = tls.RequestClientCert
		if t.ClientAuth == "MANDATORY" {
			cfg.ClientAuth = tls.RequireAnyClientCert
		}
		cfg.VerifyPeerCertificate = out.verifyClient
	default:
		return nil, fmt.Errorf("client authentication %q", t.ClientAuth)
	}
	if t.HSTSMaxAge >= 0 {
		out.hsts = "max-age=" + strconv.Itoa(t.HSTSMaxAge)
		if t.HSTSIncludeSubdomains {
			out.hsts += "; includeSubDomains"
		}
		if t.HSTSPreload {
			out.hsts += "; preload"
		}
	}
	out.config = cfg
	return out, nil
}

// versionRange sets cfg's versions to those named (Octavia's names), a
// range without a gap; none leaves cfg's.
func versionRange(cfg *tls.Config, names []string) error {
	if len(names) == 0 {
		return nil
	}
	var vs []uint16
	for _, name := range names {
		v, ok := tlsVersions[name]
		if !ok {
			return fmt.Errorf("TLS version %q is not supported", name)
		}
		vs = append(vs, v)
	}
	slices.Sort(vs)
	vs = slices.Compact(vs)
	if int(vs[len(vs)-1]-vs[0]) != len(vs)-1 {
		return fmt.Errorf("TLS versions %v leave a gap: only a range is supported", names)
	}
	cfg.MinVersion, cfg.MaxVersion = vs[0], vs[len(vs)-1]
	return nil
}

func parseCRLs(data []byte) ([]*x509.RevocationList, error) {
	var out []*x509.RevocationList
	for len(data) > 0 {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "X509 CRL" {
			continue
		}
		crl, err := x509.ParseRevocationList(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CRL: %w", err)
		}
		out = append(out, crl)
	}
	return out, nil
}

// certificate picks the certificate for a client's server name: the
// first whose names cover it (SNI), else the default.
func (t *terminator) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if hello.ServerName != "" {
		for _, c := range t.certs {
			if c.Leaf != nil && c.Leaf.VerifyHostname(hello.ServerName) == nil {
				return c, nil
			}
		}
	}
	return t.certs[0], nil
}

// verifyClient verifies a client's certificate against the client CAs
// and the revocation lists; none is fine (MANDATORY asks Go's TLS to
// refuse that).
func (t *terminator) verifyClient(raw [][]byte, _ [][]*x509.Certificate) error {
	if len(raw) == 0 {
		return nil
	}
	var chain []*x509.Certificate
	for _, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return err
		}
		chain = append(chain, c)
	}
	return verifyChain(chain, t.roots, t.crls, x509.ExtKeyUsageClientAuth, "client")
}

// verifyChain verifies a peer's certificate chain (its own first)
// against roots, for usage, without a host name, and its certificate
// against the revocation lists of its issuer; whose names the peer in an
// error.
func verifyChain(chain []*x509.Certificate, roots *x509.CertPool, crls []*x509.RevocationList, usage x509.ExtKeyUsage, whose string) error {
	if len(chain) == 0 {
		return fmt.Errorf("the %s sent no certificate", whose)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return err
	}
	for _, crl := range crls {
		if crl.CheckSignatureFrom(issuerOf(chain[0], roots, chain)) != nil {
			continue
		}
		for _, r := range crl.RevokedCertificateEntries {
			if r.SerialNumber.Cmp(chain[0].SerialNumber) == 0 {
				return fmt.Errorf("%s certificate %s is revoked", whose, chain[0].SerialNumber)
			}
		}
	}
	return nil
}

// issuerOf finds the certificate that issued c among the chain the peer
// sent and the CAs; the CRL of that issuer applies.
func issuerOf(c *x509.Certificate, roots *x509.CertPool, chain []*x509.Certificate) *x509.Certificate {
	for _, cand := range chain[1:] {
		if c.CheckSignatureFrom(cand) == nil {
			return cand
		}
	}
	chains, err := c.Verify(x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err == nil && len(chains) > 0 && len(chains[0]) > 1 {
		return chains[0][1]
	}
	return c
}

// sslHeaders are the X-SSL-* headers a TERMINATED_HTTPS listener may
// insert, with their values as the amphora's HAProxy writes them.
var sslHeaders = map[string]func(cs *tls.ConnectionState) string{
	// A certificate that does not verify ends the handshake, so a
	// request's is 0 (X509_V_OK), as is that of no certificate.
	"X-Ssl-Client-Verify": func(*tls.ConnectionState) string { return "0" },
	"X-Ssl-Client-Has-Cert": func(cs *tls.ConnectionState) string {
		return map[bool]string{true: "1", false: "0"}[len(cs.PeerCertificates) > 0]
	},
	"X-Ssl-Client-Dn": clientField(func(c *x509.Certificate) string { return onelineDN(c.Subject) }),
	"X-Ssl-Client-Cn": clientField(func(c *x509.Certificate) string { return c.Subject.CommonName }),
	"X-Ssl-Issuer":    clientField(func(c *x509.Certificate) string { return onelineDN(c.Issuer) }),
	"X-Ssl-Client-Sha1": clientField(func(c *x509.Certificate) string {
		s := sha1.Sum(c.Raw)
		return strings.ToUpper(hex.EncodeToString(s[:]))
	}),
	"X-Ssl-Client-Not-Before": clientField(func(c *x509.Certificate) string { return asn1Time(c.NotBefore) }),
	"X-Ssl-Client-Not-After":  clientField(func(c *x509.Certificate) string { return asn1Time(c.NotAfter) }),
}

// clientField is a quoted field of the client's certificate ("" when it
// sent none, and the header is not set).
func clientField(f func(*x509.Certificate) string) func(*tls.ConnectionState) string {
	return func(cs *tls.ConnectionState) string {
		if len(cs.PeerCertificates) == 0 {
			return ""
		}
		return strconv.Quote(f(cs.PeerCertificates[0]))
	}
}

// onelineDN is OpenSSL's one-line form of a name, as HAProxy's
// ssl_c_s_dn gives it: /C=../O=../CN=.., in the certificate's order.
func onelineDN(n pkix.Name) string {
	var b strings.Builder
	for _, a := range n.Names {
		name := a.Type.String()
		for short, oid := range dnOIDs {
			if oid.Equal(a.Type) {
				name = short
				break
			}
		}
		fmt.Fprintf(&b, "/%s=%v", name, a.Value)
	}
	return b.String()
}

// asn1Time is a certificate's time as HAProxy gives it: UTCTime,
// YYMMDDhhmmssZ.
func asn1Time(t time.Time) string { return t.UTC().Format("060102150405") + "Z" }

// hstsWriter sets Strict-Transport-Security on every answer, the
// member's or the proxy's own, replacing a member's.
type hstsWriter struct {
	http.ResponseWriter
	value string
}

func (w hstsWriter) WriteHeader(code int) {
	w.Header().Set("Strict-Transport-Security", w.value)
	w.ResponseWriter.WriteHeader(code)
}

func (w hstsWriter) Write(b []byte) (int, error) {
	if w.Header().Get("Strict-Transport-Security") != w.value {
		w.Header().Set("Strict-Transport-Security", w.value)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w hstsWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
