package lbaas

import (
	"context"
	"slices"
)

// TLSRefs are the certificate references a request gives a listener
// (its default and SNI certificates, its client CA and CRL) or a pool
// (the certificate it presents to its members, as Certificates, and the
// CA and CRL their certificates are checked with, as ClientCA and
// ClientCRL: Octavia reads and checks both alike).
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

// poolTLSRefs are the references an update gives a pool. storedCA is
// the pool's CA before the update: with a CRL the update names alone, it
// is read again so that the CRL is checked against it, as Octavia does.
func poolTLSRefs(u *PoolUpdate, storedCA *string) TLSRefs {
	var out TLSRefs
	if v := u.TLSContainerRef.Value; u.TLSContainerRef.Set && v != nil && *v != "" {
		out.Certificates = []string{*v}
	}
	if v := u.CATLSContainerRef.Value; u.CATLSContainerRef.Set && v != nil {
		out.ClientCA = *v
	}
	if v := u.CRLContainerRef.Value; u.CRLContainerRef.Set && v != nil && *v != "" {
		out.ClientCRL = *v
		if !u.CATLSContainerRef.Set && storedCA != nil {
			out.ClientCA = *storedCA
		}
	}
	return out
}

// checkPoolTLS reads the references of each pool update, as checkTLS
// does a listener's.
func (s *Service) checkPoolTLS(ctx context.Context, storedCA *string, updates ...*PoolUpdate) error {
	if s.cfg.Certificates == nil {
		return nil
	}
	for _, u := range updates {
		if refs := poolTLSRefs(u, storedCA); !refs.empty() {
			if err := s.cfg.Certificates.CheckTLS(ctx, refs); err != nil {
				return err
			}
		}
	}
	return nil
}

// nestedPools are the pool definitions a create nests: listeners'
// default pools, their L7 policies' redirect pools, and pools beside
// the listeners.
func nestedPools(listeners []ListenerCreate, pools []NestedPool) []*PoolUpdate {
	var out []*PoolUpdate
	add := func(n *NestedPool) {
		if n != nil && n.Def != nil {
			out = append(out, &n.Def.PoolUpdate)
		}
	}
	for i := range pools {
		add(&pools[i])
	}
	for i := range listeners {
		add(listeners[i].DefaultPool)
		for j := range listeners[i].L7Policies {
			add(listeners[i].L7Policies[j].RedirectPool)
		}
	}
	return out
}

// checkPoolCRL enforces Octavia's rule that a pool's CRL comes with a
// CA: on a create (update nil), and on an update that leaves a CRL
// without its CA (oldCA is the CA before it).
func checkPoolCRL(p *Pool, update *PoolUpdate, oldCA *string) error {
	if !nonEmpty(p.CRLContainerRef) || nonEmpty(p.CATLSContainerRef) {
		return nil
	}
	if update == nil {
		return Validation("A CA certificate reference is required to specify a revocation list.")
	}
	if update.CATLSContainerRef.Set && nonEmpty(oldCA) {
		return Validation("A CA reference cannot be removed when a certificate revocation list is present.")
	}
	return Validation("A CA reference is required to specify a certificate revocation list.")
}

func nonEmpty(s *string) bool { return s != nil && *s != "" }
