package lbaas

import (
	"context"
	"slices"
)

// TLSRefs are the certificate references a request gives a listener:
// its default and SNI certificates, its client CA and CRL.
type TLSRefs struct {
	Certificates        []string
	ClientCA, ClientCRL string
}

func (r TLSRefs) empty() bool {
	return len(r.Certificates) == 0 && r.ClientCA == "" && r.ClientCRL == ""
}

// Certificates reads the certificates a request names, as its caller,
// before anything is written, as Octavia's API does: a reference that
// cannot be read or does not hold a usable certificate is refused with
// Octavia's 400 (CertificateRetrievalException), and nothing changes.
type Certificates interface {
	CheckTLS(ctx context.Context, refs TLSRefs) error
}

// tlsRefsOf are the references an update gives a listener.
func tlsRefsOf(u *ListenerUpdate) TLSRefs {
	var out TLSRefs
	if v := u.DefaultTLSContainerRef.Value; u.DefaultTLSContainerRef.Set && v != nil && *v != "" {
		out.Certificates = append(out.Certificates, *v)
	}
	if u.SNIContainerRefs.Set {
		for _, r := range u.SNIContainerRefs.Value {
			if r != "" && !slices.Contains(out.Certificates, r) {
				out.Certificates = append(out.Certificates, r)
			}
		}
	}
	if v := u.ClientCATLSContainerRef.Value; u.ClientCATLSContainerRef.Set && v != nil {
		out.ClientCA = *v
	}
	if v := u.ClientCRLContainerRef.Value; u.ClientCRLContainerRef.Set && v != nil {
		out.ClientCRL = *v
	}
	return out
}

// checkTLS reads the references of each listener update, when the
// server reads certificates at all (Config.Certificates); without it a
// provider that terminates no TLS refuses such listeners.
func (s *Service) checkTLS(ctx context.Context, updates ...*ListenerUpdate) error {
	if s.cfg.Certificates == nil {
		return nil
	}
	for _, u := range updates {
		if refs := tlsRefsOf(u); !refs.empty() {
			if err := s.cfg.Certificates.CheckTLS(ctx, refs); err != nil {
				return err
			}
		}
	}
	return nil
}
