package compiler

import (
	"context"
	"time"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/tlsciphers"
)

const terminatedHTTPS = "TERMINATED_HTTPS"

// Certificates gives the compiler a TLS listener's key material by
// reference (tlscerts.Store on the server).
type Certificates interface {
	Certificate(ctx context.Context, ref string) (flows.L7Certificate, error)
	Secret(ctx context.Context, ref string) ([]byte, error)
}

// certsTimeout bounds the reading of one listener's certificates.
const certsTimeout = 10 * time.Second

// tlsOf is a TERMINATED_HTTPS listener's TLS: its default certificate,
// then its SNI ones, its client CA and CRL, ALPN, versions, cipher suites
// and HSTS; nil when a certificate cannot be had, or its tls_ciphers
// cannot be served (the flow provider refuses those).
func tlsOf(l *lbaas.Listener, certs Certificates) *flows.L7TLS {
	if certs == nil || l.DefaultTLSContainerRef == nil {
		return nil
	}
	suites, err := tlsciphers.Suites(deref(l.TLSCiphers), l.TLSVersions)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), certsTimeout)
	defer cancel()
	out := &flows.L7TLS{ClientAuth: l.ClientAuthentication, ALPN: l.ALPNProtocols, Versions: l.TLSVersions, CipherSuites: suites,
		HSTSMaxAge: -1, HSTSIncludeSubdomains: l.HSTSIncludeSubdomains, HSTSPreload: l.HSTSPreload}
	if l.HSTSMaxAge != nil {
		out.HSTSMaxAge = *l.HSTSMaxAge
	}
	refs := append([]string{*l.DefaultTLSContainerRef}, l.SNIContainerRefs...)
	for i, ref := range refs {
		if i > 0 && ref == refs[0] {
			continue
		}
		c, err := certs.Certificate(ctx, ref)
		if err != nil {
			return nil
		}
		out.Certificates = append(out.Certificates, c)
	}
	if r := l.ClientCATLSContainerRef; r != nil && *r != "" {
		if out.ClientCA, err = certs.Secret(ctx, *r); err != nil {
			return nil
		}
	}
	if r := l.ClientCRLContainerRef; r != nil && *r != "" {
		if out.ClientCRL, err = certs.Secret(ctx, *r); err != nil {
			return nil
		}
	}
	return out
}

// poolTLSOf is a tls_enabled pool's TLS to its members: the CA and CRL
// its members' certificates are checked against, the certificate it
// presents, its ALPN, versions and cipher suites; false when a
// reference it names cannot be read (or there is nothing to read it
// from), or its tls_ciphers cannot be served.
func poolTLSOf(p *lbaas.Pool, certs Certificates) (*flows.L7PoolTLS, bool) {
	suites, err := tlsciphers.Suites(deref(p.TLSCiphers), p.TLSVersions)
	if err != nil {
		return nil, false
	}
	out := &flows.L7PoolTLS{ALPN: p.ALPNProtocols, Versions: p.TLSVersions, CipherSuites: suites}
	ref := func(r *string) string {
		if r == nil {
			return ""
		}
		return *r
	}
	cert, ca, crl := ref(p.TLSContainerRef), ref(p.CATLSContainerRef), ref(p.CRLContainerRef)
	if cert == "" && ca == "" && crl == "" {
		return out, true
	}
	if certs == nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), certsTimeout)
	defer cancel()
	if cert != "" {
		c, err := certs.Certificate(ctx, cert)
		if err != nil {
			return nil, false
		}
		out.Certificate = &c
	}
	if ca != "" {
		if out.CA, err = certs.Secret(ctx, ca); err != nil {
			return nil, false
		}
	}
	if crl != "" {
		if out.CRL, err = certs.Secret(ctx, crl); err != nil {
			return nil, false
		}
	}
	return out, true
}
