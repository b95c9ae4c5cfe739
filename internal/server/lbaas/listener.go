package lbaas

import (
	"context"
	"slices"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// Defaults for fields whose Octavia default comes from configuration.
const (
	DefaultTimeoutClientData    = 50000
	DefaultTimeoutMemberConnect = 5000
	DefaultTimeoutMemberData    = 50000
	DefaultTimeoutTCPInspect    = 0
)

// CreateListener adds a listener (with nested default_pool and l7policies).
func (s *Service) CreateListener(ctx context.Context, req ListenerCreate) (*Tree, *Listener, error) {
	if err := checkOwner(ctx, req.Owner); err != nil {
		return nil, nil, err
	}
	if err := s.checkCiphers(req.TLSCiphers); err != nil {
		return nil, nil, err
	}
	if err := s.checkTLS(ctx, &req.ListenerUpdate); err != nil {
		return nil, nil, err
	}
	if err := s.checkPoolTLS(ctx, nil, nestedPools([]ListenerCreate{req}, nil)...); err != nil {
		return nil, nil, err
	}
	var out *Listener
	t, err := s.lockedChange(ctx, req.LoadBalancerID, func(t *Tree, _ identity.Caller) error {
		l, err := s.addListener(t, &req, s.newPools)
		if err != nil {
			return err
		}
		// A default pool taken from the load balancer's pools changes.
		if id := req.DefaultPoolID.Value; id != nil && *id != "" {
			if p := t.pool(*id); p != nil {
				t.pendingUpdate(p)
			}
		}
		out = l
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return t, out, nil
}

// MaxListenersPerLoadBalancer bounds a load balancer's tree, and with it
// the work of every change to it.
const MaxListenersPerLoadBalancer = 1000

// buildListener makes a listener of t from its request (nested objects
// are added by the caller).
func (s *Service) buildListener(t *Tree, req *ListenerCreate) (*Listener, error) {
	if len(t.Listeners) >= MaxListenersPerLoadBalancer {
		return nil, Validation("A load balancer can have at most %d listeners.", MaxListenersPerLoadBalancer)
	}
	l := &Listener{
		Base:                 s.newBase(t.LB.ProjectID),
		LoadBalancerID:       t.LB.ID,
		Protocol:             req.Protocol,
		ProtocolPort:         req.ProtocolPort,
		ConnectionLimit:      -1,
		ClientAuthentication: "NONE",
		TimeoutClientData:    DefaultTimeoutClientData,
		TimeoutMemberConnect: DefaultTimeoutMemberConnect,
		TimeoutMemberData:    DefaultTimeoutMemberData,
		TimeoutTCPInspect:    DefaultTimeoutTCPInspect,
		InsertHeaders:        map[string]string{},
		AllowedCIDRs:         []string{},
		SNIContainerRefs:     []string{},
		TLSVersions:          []string{},
		ALPNProtocols:        []string{},
	}
	if err := t.takeID(l, req.ID); err != nil {
		return nil, err
	}
	if err := s.checkCiphers(req.TLSCiphers); err != nil {
		return nil, err
	}
	req.ListenerUpdate.apply(l)
	l.Tags = nonNil(l.Tags)
	if err := s.checkListener(t, l); err != nil {
		return nil, err
	}
	return l, nil
}

// checkListener enforces the rules that span objects.
func (s *Service) checkListener(t *Tree, l *Listener) error {
	for _, o := range t.Listeners {
		if o.ID != l.ID && o.ProtocolPort == l.ProtocolPort && transport(o.Protocol) == transport(l.Protocol) {
			return Conflict("Another Listener on this Load Balancer is already using protocol %s and protocol_port %d", l.Protocol, l.ProtocolPort)
		}
	}
	if len(l.InsertHeaders) > 0 && l.Protocol != "HTTP" && l.Protocol != "TERMINATED_HTTPS" {
		return Validation("The insert_headers option is only available for HTTP and TERMINATED_HTTPS listeners.")
	}
	if l.Protocol == "TERMINATED_HTTPS" && (l.DefaultTLSContainerRef == nil || *l.DefaultTLSContainerRef == "") {
		return Validation("An SNI or default certificate container reference must be provided for TERMINATED_HTTPS listeners.")
	}
	if err := checkAllowedCIDRs(t.LB, l.AllowedCIDRs); err != nil {
		return err
	}
	if l.DefaultPoolID != nil && *l.DefaultPoolID != "" {
		p := t.pool(*l.DefaultPoolID)
		if p == nil {
			return Invalid("Pool %s not found.", *l.DefaultPoolID)
		}
		if err := compatible(l.Protocol, p.Protocol); err != nil {
			return err
		}
	}
	return nil
}

// transport groups protocols by the transport they ride on, for port
// clashes: HTTP, HTTPS and TCP all take a TCP port.
func transport(protocol string) string {
	switch protocol {
	case "UDP", "SCTP":
		return protocol
	default:
		return "TCP"
	}
}

// poolProtocols are the pool protocols Octavia allows behind each
// listener protocol.
var poolProtocols = map[string][]string{
	"HTTP":             {"HTTP", "PROXY", "PROXYV2"},
	"HTTPS":            {"HTTPS", "PROXY", "PROXYV2", "TCP"},
	"TCP":              {"HTTP", "HTTPS", "PROXY", "PROXYV2", "TCP"},
	"TERMINATED_HTTPS": {"HTTP", "PROXY", "PROXYV2"},
	"UDP":              {"UDP"},
	"SCTP":             {"SCTP"},
	"PROMETHEUS":       {},
}

// compatible enforces Octavia's listener/pool protocol combinations.
func compatible(listener, pool string) error {
	if slices.Contains(poolProtocols[listener], pool) {
		return nil
	}
	return Validation("The pool protocol '%s' is invalid while the listener protocol is '%s'.", pool, listener)
}

// UpdateListener changes a listener's mutable attributes.
func (s *Service) UpdateListener(ctx context.Context, id string, req ListenerUpdate) (*Tree, *Listener, error) {
	if err := s.checkCiphers(req.TLSCiphers); err != nil {
		return nil, nil, err
	}
	if err := s.checkTLS(ctx, &req); err != nil {
		return nil, nil, err
	}
	var out *Listener
	t, err := s.childChange(ctx, store.KindListener, id, func(t *Tree, _ identity.Caller) error {
		l := t.listener(id)
		if l == nil {
			return notFound(store.KindListener, id)
		}
		oldPool := l.DefaultPoolID
		req.apply(l)
		l.Tags, l.AllowedCIDRs = nonNil(l.Tags), nonNil(l.AllowedCIDRs)
		if err := s.checkListener(t, l); err != nil {
			return err
		}
		if oldPool != nil && (l.DefaultPoolID == nil || *l.DefaultPoolID != *oldPool) {
			if p := t.pool(*oldPool); p != nil {
				t.pendingUpdate(p)
			}
		}
		s.touchUpdated(&l.Base)
		t.setStatus(l, PendingUpdate)
		t.markDirty(l)
		out = l
		return nil
	})
	return t, out, err
}

// DeleteListener deletes a listener and its L7 policies; its default pool
// stays on the load balancer.
func (s *Service) DeleteListener(ctx context.Context, id string) error {
	_, err := s.childChange(ctx, store.KindListener, id, func(t *Tree, _ identity.Caller) error {
		l := t.listener(id)
		if l == nil {
			return notFound(store.KindListener, id)
		}
		t.markDeleted(l)
		return nil
	})
	return err
}
