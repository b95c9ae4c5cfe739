package lbaas

import (
	"context"
	"strings"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// CreateMonitor adds the health monitor of a pool.
func (s *Service) CreateMonitor(ctx context.Context, req MonitorCreate) (*Tree, *HealthMonitor, error) {
	if err := checkOwner(ctx, req.Owner); err != nil {
		return nil, nil, err
	}
	var out *HealthMonitor
	t, err := s.childChange(ctx, store.KindPool, req.PoolID, func(t *Tree, _ identity.Caller) error {
		p := t.pool(req.PoolID)
		if p == nil {
			return notFound(store.KindPool, req.PoolID)
		}
		h, err := s.buildMonitor(t, p, &req)
		if err != nil {
			return err
		}
		t.add(h)
		t.pendingUpdate(p)
		t.lockPoolParents(p.ID)
		out = h
		return nil
	})
	return t, out, err
}

// buildMonitor makes the health monitor of pool p.
func (s *Service) buildMonitor(t *Tree, p *Pool, req *MonitorCreate) (*HealthMonitor, error) {
	if t.poolMonitor(p.ID) != nil {
		return nil, Conflict("This pool already has a health monitor")
	}
	h := &HealthMonitor{Base: s.newBase(t.LB.ProjectID), LoadBalancerID: t.LB.ID, PoolID: p.ID, Type: req.Type, MaxRetriesDown: 3}
	if err := t.takeID(h, req.ID); err != nil {
		return nil, err
	}
	req.MonitorUpdate.apply(h)
	h.Tags = nonNil(h.Tags)
	if h.Type == "HTTP" || h.Type == "HTTPS" {
		orDefault(&h.HTTPMethod, "GET")
		orDefault(&h.URLPath, "/")
		orDefault(&h.ExpectedCodes, "200")
	}
	if err := checkMonitor(p, h); err != nil {
		return nil, err
	}
	return h, nil
}

func orDefault(p **string, v string) {
	if *p == nil {
		*p = &v
	}
}

// checkMonitor validates a monitor against its pool. A timeout above the
// delay is accepted as Octavia accepts it (its tempest suite creates
// delay 2, timeout 3): probes of a member never overlap, so the interval
// just stretches.
func checkMonitor(p *Pool, h *HealthMonitor) error {
	isHTTP := h.Type == "HTTP" || h.Type == "HTTPS"
	if extra := httpFields(h); !isHTTP && len(extra) > 0 {
		return Validation("The following fields are not valid for %s health monitors: %s.", h.Type, strings.Join(extra, ", "))
	}
	if h.DomainName != nil && (h.HTTPVersion == nil || *h.HTTPVersion < 1.1) {
		return Validation("The domain_name field is only valid with HTTP version 1.1.")
	}
	if p.Protocol == "UDP" || p.Protocol == "SCTP" {
		switch h.Type {
		case "UDP-CONNECT", "SCTP", "HTTP", "TCP":
		default:
			return Validation("The associated pool protocol is %s, so only a UDP-CONNECT, HTTP, TCP or SCTP type health monitor is supported.", p.Protocol)
		}
	} else if h.Type == "UDP-CONNECT" {
		return Validation("The associated pool protocol is %s, so only a HTTP, HTTPS, PING, SCTP, TCP or TLS-HELLO type health monitor is supported.", p.Protocol)
	}
	return nil
}

// httpFields lists the HTTP-only fields a monitor sets.
func httpFields(h *HealthMonitor) []string {
	var out []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"http_method", h.HTTPMethod != nil},
		{"url_path", h.URLPath != nil},
		{"expected_codes", h.ExpectedCodes != nil},
		{"http_version", h.HTTPVersion != nil},
		{"domain_name", h.DomainName != nil},
	} {
		if f.set {
			out = append(out, f.name)
		}
	}
	return out
}

// UpdateMonitor changes a health monitor's mutable attributes.
func (s *Service) UpdateMonitor(ctx context.Context, id string, req MonitorUpdate) (*Tree, *HealthMonitor, error) {
	var out *HealthMonitor
	t, err := s.childChange(ctx, store.KindHealthMonitor, id, func(t *Tree, _ identity.Caller) error {
		h := t.Monitor(id)
		if h == nil {
			return notFound(store.KindHealthMonitor, id)
		}
		req.apply(h)
		h.Tags = nonNil(h.Tags)
		p := t.pool(h.PoolID)
		if err := checkMonitor(p, h); err != nil {
			return err
		}
		s.touchUpdated(&h.Base)
		t.setStatus(h, PendingUpdate)
		t.markDirty(h)
		t.pendingUpdate(p)
		t.lockPoolParents(h.PoolID)
		out = h
		return nil
	})
	return t, out, err
}

// DeleteMonitor removes a health monitor.
func (s *Service) DeleteMonitor(ctx context.Context, id string) error {
	_, err := s.childChange(ctx, store.KindHealthMonitor, id, func(t *Tree, _ identity.Caller) error {
		h := t.Monitor(id)
		if h == nil {
			return notFound(store.KindHealthMonitor, id)
		}
		t.setStatus(h, PendingDelete)
		if p := t.pool(h.PoolID); p != nil {
			t.pendingUpdate(p)
		}
		t.lockPoolParents(h.PoolID)
		return nil
	})
	return err
}
