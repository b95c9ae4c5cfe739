package compiler

import (
	"context"
	"time"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
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
// then its SNI ones, its client CA and CRL, ALPN, versions and HSTS; nil
// when a certificate cannot be had.
func tlsOf(l *lbaas.Listener, certs Certificates) *flows.L7TLS {
	if certs == nil || l.DefaultTLSContainerRef == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), certsTimeout)
	defer cancel()
	out := &flows.L7TLS{ClientAuth: l.ClientAuthentication, ALPN: l.ALPNProtocols, Versions: l.TLSVersions,
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
	var err error
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
