package lbaas

import (
	"context"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// CreatePool adds a pool to a listener (as its default pool) or to an LB,
// with its nested members and monitor.
func (s *Service) CreatePool(ctx context.Context, req PoolCreate) (*Tree, *Pool, error) {
	lbID, listenerID := req.LoadBalancerID, req.ListenerID
	if lbID == "" && listenerID == "" {
		return nil, nil, Validation("loadbalancer_id or listener_id must be specified.")
	}
	if err := checkOwner(ctx, req.Owner); err != nil {
		return nil, nil, err
	}
	if err := s.checkCiphers(req.TLSCiphers); err != nil {
		return nil, nil, err
	}
	if err := s.checkPoolTLS(ctx, nil, &req.PoolUpdate); err != nil {
		return nil, nil, err
	}
	if listenerID != "" {
		lid, err := s.lbOf(ctx, store.KindListener, listenerID)
		if err != nil {
			return nil, nil, Validation("Listener %s not found.", listenerID)
		}
		if lbID != "" && lid != lbID {
			return nil, nil, Validation("Listener %s is not on Load Balancer %s.", listenerID, lbID)
		}
		lbID = lid
	}
	var out *Pool
	t, err := s.lockedChange(ctx, lbID, func(t *Tree, _ identity.Caller) error {
		var l *Listener
		if listenerID != "" {
			if l = t.listener(listenerID); l == nil {
				return Validation("Listener %s not found.", listenerID)
			}
			t.pendingUpdate(l)
		}
		p, err := s.addPool(t, &req, l)
		out = p
		return err
	})
	return t, out, err
}

// buildPool makes a pool of t from its request (members and monitor are
// added by the caller). listener, if not nil, gets it as default pool.
func (s *Service) buildPool(t *Tree, req *PoolCreate, listener *Listener) (*Pool, error) {
	p := &Pool{Base: s.newBase(t.LB.ProjectID), LoadBalancerID: t.LB.ID, Protocol: req.Protocol, TLSVersions: []string{}, ALPNProtocols: []string{}}
	if err := t.takeID(p, req.ID); err != nil {
		return nil, err
	}
	if err := s.checkCiphers(req.TLSCiphers); err != nil {
		return nil, err
	}
	req.PoolUpdate.apply(p)
	p.Tags = nonNil(p.Tags)
	if p.Protocol == "" && listener != nil {
		p.Protocol = listener.Protocol
	}
	if p.Protocol == "" {
		return nil, Invalid("Invalid input for field/attribute protocol. Value: 'Unset'. Mandatory field missing.")
	}
	if p.LBAlgorithm == "" {
		return nil, Invalid("Invalid input for field/attribute lb_algorithm. Value: 'Unset'. Mandatory field missing.")
	}
	if listener != nil {
		if listener.DefaultPoolID != nil && *listener.DefaultPoolID != "" {
			return nil, Conflict("This listener already has a default pool")
		}
		if err := compatible(listener.Protocol, p.Protocol); err != nil {
			return nil, err
		}
		p.ListenerID = listener.ID
		id := p.ID
		listener.DefaultPoolID = &id
		t.markDirty(listener)
	}
	if err := checkPersistence(p); err != nil {
		return nil, err
	}
	if err := checkPoolCRL(p, nil, nil); err != nil {
		return nil, err
	}
	return p, nil
}

// checkPersistence enforces the cookie rules of session persistence.
// Octavia accepts persistence_timeout and persistence_granularity for
// every protocol; flowlb applies the timeout to every SOURCE_IP pool.
func checkPersistence(p *Pool) error {
	sp := p.SessionPersistence
	if sp == nil {
		return nil
	}
	switch sp.Type {
	case "APP_COOKIE":
		if sp.CookieName == nil || *sp.CookieName == "" {
			return Validation("A cookie_name must be provided with APP_COOKIE session persistence.")
		}
	case "HTTP_COOKIE", "SOURCE_IP":
		if sp.CookieName != nil && *sp.CookieName != "" {
			return Validation("Cookie names are not supported for %s persistence.", sp.Type)
		}
	}
	return nil
}

// UpdatePool changes a pool's mutable attributes.
func (s *Service) UpdatePool(ctx context.Context, id string, req PoolUpdate) (*Tree, *Pool, error) {
	if err := s.checkCiphers(req.TLSCiphers); err != nil {
		return nil, nil, err
	}
	var storedCA *string
	if req.CRLContainerRef.Set && !req.CATLSContainerRef.Set && s.cfg.Certificates != nil {
		// The CRL is checked against the CA the pool has.
		if t, err := s.Tree(ctx, store.KindPool, id); err == nil {
			if p := t.Pool(id); p != nil {
				storedCA = p.CATLSContainerRef
			}
		}
	}
	if err := s.checkPoolTLS(ctx, storedCA, &req); err != nil {
		return nil, nil, err
	}
	var out *Pool
	t, err := s.childChange(ctx, store.KindPool, id, func(t *Tree, _ identity.Caller) error {
		p := t.pool(id)
		if p == nil {
			return notFound(store.KindPool, id)
		}
		oldCA := p.CATLSContainerRef
		req.apply(p)
		p.Tags = nonNil(p.Tags)
		if err := checkPersistence(p); err != nil {
			return err
		}
		if err := checkPoolCRL(p, &req, oldCA); err != nil {
			return err
		}
		s.touchUpdated(&p.Base)
		t.setStatus(p, PendingUpdate)
		t.markDirty(p)
		t.lockPoolParents(id)
		out = p
		return nil
	})
	return t, out, err
}

// DeletePool deletes a pool with its members and monitor.
func (s *Service) DeletePool(ctx context.Context, id string) error {
	_, err := s.childChange(ctx, store.KindPool, id, func(t *Tree, _ identity.Caller) error {
		p := t.pool(id)
		if p == nil {
			return notFound(store.KindPool, id)
		}
		for _, pol := range t.L7Policies {
			if pol.RedirectPoolID != nil && *pol.RedirectPoolID == id && pol.ProvisioningStatus != PendingDelete {
				return Conflict("Pool %s is in use by L7 policy %s", id, pol.ID)
			}
		}
		for _, l := range t.Listeners {
			if l.DefaultPoolID != nil && *l.DefaultPoolID == id {
				l.DefaultPoolID = nil
				t.pendingUpdate(l)
				t.markDirty(l)
			}
		}
		t.markDeleted(p)
		return nil
	})
	return err
}
