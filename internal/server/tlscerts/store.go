package tlscerts

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Store reads certificates for the API, as each caller, and keeps what
// it read, by reference and in memory only, for the data plane, which
// reads what it lacks as the server's service user.
type Store struct {
	Barbican *Barbican
	// ServiceToken is a token of the server's service user.
	ServiceToken func(ctx context.Context) (string, error)

	mu      sync.Mutex
	certs   map[string]flows.L7Certificate
	secrets map[string][]byte
}

// NewStore reads from b, as callers and as the service user.
func NewStore(b *Barbican, serviceToken func(ctx context.Context) (string, error)) *Store {
	return &Store{Barbican: b, ServiceToken: serviceToken, certs: map[string]flows.L7Certificate{}, secrets: map[string][]byte{}}
}

// CheckTLS reads, as the caller, every reference a request names: it
// grants the service user read access, reads the certificate (or the
// client CA and CRL) and checks it; what cannot be read is refused with
// Octavia's "Could not retrieve certificate: [...]", what does not hold
// a usable certificate with Octavia's text for it.
func (s *Store) CheckTLS(ctx context.Context, refs lbaas.TLSRefs) error {
	c, _ := identity.FromContext(ctx)
	token := string(c.Token)
	var bad []string
	for _, ref := range refs.Certificates {
		err := s.Barbican.Grant(ctx, ref, token)
		var cert flows.L7Certificate
		if err == nil {
			cert, err = s.Barbican.Certificate(ctx, ref, token)
		}
		if r, ok := err.(Refusal); ok {
			return lbaas.Invalid("%s", r)
		}
		if err != nil {
			bad = append(bad, ref)
			continue
		}
		s.keepCert(ref, cert)
	}
	var ca, crl []byte
	for _, ref := range []string{refs.ClientCA, refs.ClientCRL} {
		if ref == "" {
			continue
		}
		err := s.Barbican.Grant(ctx, ref, token)
		var data []byte
		if err == nil {
			data, err = s.Barbican.Secret(ctx, ref, token)
		}
		if err != nil {
			bad = append(bad, ref)
			continue
		}
		if ref == refs.ClientCA {
			ca = data
		} else {
			crl = data
		}
	}
	if len(bad) > 0 {
		return lbaas.Invalid("Could not retrieve certificate: %s", pyList(bad))
	}
	if err := checkCAAndCRL(ca, crl, refs.ClientCA != ""); err != nil {
		return err
	}
	if ca != nil {
		s.keepSecret(refs.ClientCA, ca)
	}
	if crl != nil {
		s.keepSecret(refs.ClientCRL, crl)
	}
	return nil
}

// checkCAAndCRL checks a client CA and CRL as Octavia does, with its
// texts.
func checkCAAndCRL(ca, crl []byte, hasCA bool) error {
	if !hasCA {
		return nil
	}
	caCert, err := firstCert(ca)
	if err != nil {
		return lbaas.Validation("The client authentication CA certificate is invalid. It must be a valid x509 PEM format certificate. Error: %v", err)
	}
	if crl == nil {
		return nil
	}
	b, _ := pem.Decode(crl)
	if b == nil {
		return lbaas.Validation("The client authentication certificate revocation list is invalid. It must be a valid x509 PEM format certificate revocation list. Error: no PEM data")
	}
	list, err := x509.ParseRevocationList(b.Bytes)
	if err != nil {
		return lbaas.Validation("The client authentication certificate revocation list is invalid. It must be a valid x509 PEM format certificate revocation list. Error: %v", err)
	}
	if list.CheckSignatureFrom(caCert) != nil {
		return lbaas.Validation("The CRL specified is not valid for client certificate authority reference supplied.")
	}
	return nil
}

// pyList writes references as Octavia's message does: a Python list.
func pyList(refs []string) string {
	q := make([]string, len(refs))
	for i, r := range refs {
		q[i] = "'" + r + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func (s *Store) keepCert(ref string, c flows.L7Certificate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.certs[ref] = c
}

func (s *Store) keepSecret(ref string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secrets[ref] = data
}

// Certificate is the certificate of a reference for the data plane: the
// one read last, else read now as the service user.
func (s *Store) Certificate(ctx context.Context, ref string) (flows.L7Certificate, error) {
	s.mu.Lock()
	c, ok := s.certs[ref]
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	token, err := s.ServiceToken(ctx)
	if err != nil {
		return flows.L7Certificate{}, err
	}
	if c, err = s.Barbican.Certificate(ctx, ref, token); err != nil {
		return flows.L7Certificate{}, fmt.Errorf("certificate %s: %w", ref, err)
	}
	s.keepCert(ref, c)
	return c, nil
}

// Secret is a client CA's or CRL's payload for the data plane, as
// Certificate.
func (s *Store) Secret(ctx context.Context, ref string) ([]byte, error) {
	s.mu.Lock()
	d, ok := s.secrets[ref]
	s.mu.Unlock()
	if ok {
		return d, nil
	}
	token, err := s.ServiceToken(ctx)
	if err != nil {
		return nil, err
	}
	if d, err = s.Barbican.Secret(ctx, ref, token); err != nil {
		return nil, fmt.Errorf("secret %s: %w", ref, err)
	}
	s.keepSecret(ref, d)
	return d, nil
}

// Refresh reads again, as the service user, every reference the store
// keeps, and returns those whose content changed (a certificate renewed
// in Barbican); a reference that cannot be read keeps what it had.
func (s *Store) Refresh(ctx context.Context) ([]string, error) {
	token, err := s.ServiceToken(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	certRefs := slices.Collect(maps.Keys(s.certs))
	secretRefs := slices.Collect(maps.Keys(s.secrets))
	s.mu.Unlock()
	var changed []string
	var errs []error
	for _, ref := range certRefs {
		c, err := s.Barbican.Certificate(ctx, ref, token)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.mu.Lock()
		if old := s.certs[ref]; !bytes.Equal(old.Chain, c.Chain) || !bytes.Equal(old.Key, c.Key) {
			s.certs[ref] = c
			changed = append(changed, ref)
		}
		s.mu.Unlock()
	}
	for _, ref := range secretRefs {
		d, err := s.Barbican.Secret(ctx, ref, token)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.mu.Lock()
		if !bytes.Equal(s.secrets[ref], d) {
			s.secrets[ref] = d
			changed = append(changed, ref)
		}
		s.mu.Unlock()
	}
	slices.Sort(changed)
	return changed, errors.Join(errs...)
}
