package lbaas

import (
	"context"
	"net/netip"

	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/octavia/fault"
	"github.com/flowlb/flowlb/internal/store"
)

// pendingUpdate marks an object as changing, unless it is new in this
// change or already being deleted.
func (t *Tree) pendingUpdate(o object) {
	switch o.base().ProvisioningStatus {
	case PendingCreate, PendingDelete:
		return
	}
	t.setStatus(o, PendingUpdate)
}

// lockPoolParents marks the listeners of a pool as changing, as Octavia
// does for pool, member and monitor operations.
func (t *Tree) lockPoolParents(poolID string) {
	for _, l := range t.listenersOfPool(poolID) {
		t.pendingUpdate(l)
	}
}

// markDeleted sets o and everything under it PENDING_DELETE.
func (t *Tree) markDeleted(o object) {
	t.setStatus(o, PendingDelete)
	switch v := o.(type) {
	case *Listener:
		for _, p := range t.listenerPolicies(v.ID) {
			t.markDeleted(p)
		}
	case *Pool:
		for _, m := range t.poolMembers(v.ID) {
			t.setStatus(m, PendingDelete)
		}
		if h := t.poolMonitor(v.ID); h != nil {
			t.setStatus(h, PendingDelete)
		}
	case *L7Policy:
		for _, r := range t.policyRules(v.ID) {
			t.setStatus(r, PendingDelete)
		}
	}
}

// childChange locks the LB of (kind, id) and runs fn; a vanished object
// gives Octavia's 404.
func (s *Service) childChange(ctx context.Context, kind store.Kind, id string, fn func(t *Tree, c identity.Caller) error) (*Tree, error) {
	lbID, err := s.lbOf(ctx, kind, id)
	if err != nil {
		return nil, err
	}
	return s.lockedChange(ctx, lbID, fn)
}

func str(attrs map[string]any, k string) string { v, _ := attrs[k].(string); return v }

// CreateListener adds a listener (with nested default_pool and l7policies).
func (s *Service) CreateListener(ctx context.Context, attrs map[string]any) (*Tree, *Listener, error) {
	var out *Listener
	lbID := str(attrs, "loadbalancer_id")
	if err := s.checkParentProject(ctx, attrs); err != nil {
		return nil, nil, err
	}
	t, err := s.lockedChange(ctx, lbID, func(t *Tree, c identity.Caller) error {
		l, err := s.buildListener(t, attrs)
		if err != nil {
			return err
		}
		t.add(l)
		out = l
		if dp, ok := attrs["default_pool"].(map[string]any); ok {
			p, err := s.buildPool(t, dp, l)
			if err != nil {
				return err
			}
			t.add(p)
			if err := s.addPoolChildren(t, p, dp); err != nil {
				return err
			}
		}
		if pid, ok := attrs["default_pool_id"].(string); ok && pid != "" {
			if p := t.pool(pid); p != nil {
				t.pendingUpdate(p)
			}
		}
		pols, _ := attrs["l7policies"].([]any)
		for _, pl := range pols {
			if err := s.addPolicyTree(t, l, pl.(map[string]any)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return t, out, nil
}

// checkParentProject refuses a body project_id that names another project
// than the caller's unless the caller is admin.
func (s *Service) checkParentProject(ctx context.Context, attrs map[string]any) error {
	c, err := caller(ctx)
	if err != nil {
		return err
	}
	_, err = projectFor(identity.Caller{ProjectID: c.ProjectID, IsAdmin: c.IsAdmin, Roles: c.Roles}, attrs)
	if err != nil && c.ProjectID == "" {
		return nil
	}
	return err
}

func (s *Service) addPoolChildren(t *Tree, p *Pool, attrs map[string]any) error {
	ms, _ := attrs["members"].([]any)
	for _, m := range ms {
		mem, err := s.buildMember(t, p, m.(map[string]any))
		if err != nil {
			return err
		}
		t.add(mem)
	}
	if hm, ok := attrs["healthmonitor"].(map[string]any); ok {
		h, err := s.buildMonitor(t, p, hm)
		if err != nil {
			return err
		}
		t.add(h)
	}
	return nil
}

func (s *Service) addPolicyTree(t *Tree, l *Listener, attrs map[string]any) error {
	if rp, ok := attrs["redirect_pool"].(map[string]any); ok {
		p, err := s.buildPool(t, rp, nil)
		if err != nil {
			return err
		}
		t.add(p)
		if err := s.addPoolChildren(t, p, rp); err != nil {
			return err
		}
		attrs = without(attrs, "redirect_pool")
		attrs["redirect_pool_id"] = p.ID
	}
	pol, err := s.buildPolicy(t, l, attrs)
	if err != nil {
		return err
	}
	t.add(pol)
	rules, _ := attrs["rules"].([]any)
	for _, r := range rules {
		rule, err := s.buildRule(t, pol, r.(map[string]any))
		if err != nil {
			return err
		}
		t.add(rule)
	}
	return nil
}

// UpdateListener changes a listener's mutable attributes.
func (s *Service) UpdateListener(ctx context.Context, id string, attrs map[string]any) (*Tree, *Listener, error) {
	var out *Listener
	t, err := s.childChange(ctx, store.KindListener, id, func(t *Tree, _ identity.Caller) error {
		l := t.listener(id)
		if l == nil {
			return notFound(store.KindListener, id)
		}
		old := *l
		if err := apply(l, attrs); err != nil {
			return err
		}
		keepIdentity(&l.Base, old.Base)
		l.LoadBalancerID, l.Protocol, l.ProtocolPort = old.LoadBalancerID, old.Protocol, old.ProtocolPort
		if l.AllowedCIDRs == nil {
			l.AllowedCIDRs = []string{}
		}
		if err := s.checkListener(t, l); err != nil {
			return err
		}
		if old.DefaultPoolID != nil && (l.DefaultPoolID == nil || *l.DefaultPoolID != *old.DefaultPoolID) {
			if p := t.pool(*old.DefaultPoolID); p != nil {
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

// keepIdentity restores what an update may never change: ids, statuses
// and timestamps. Mutable common fields (admin_state_up, tags) stay.
func keepIdentity(b *Base, old Base) {
	b.ID, b.ProjectID, b.ProvisioningStatus, b.OperatingStatus, b.CreatedAt, b.UpdatedAt = old.ID, old.ProjectID, old.ProvisioningStatus, old.OperatingStatus, old.CreatedAt, old.UpdatedAt
	if b.Tags == nil {
		b.Tags = []string{}
	}
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

// CreatePool adds a pool to a listener (as its default pool) or to an LB.
func (s *Service) CreatePool(ctx context.Context, attrs map[string]any) (*Tree, *Pool, error) {
	lbID, listenerID := str(attrs, "loadbalancer_id"), str(attrs, "listener_id")
	if lbID == "" && listenerID == "" {
		return nil, nil, fault.Validation("loadbalancer_id or listener_id must be specified.")
	}
	if err := s.checkParentProject(ctx, attrs); err != nil {
		return nil, nil, err
	}
	if listenerID != "" {
		lid, err := s.lbOf(ctx, store.KindListener, listenerID)
		if err != nil {
			return nil, nil, fault.Validation("Listener %s not found.", listenerID)
		}
		if lbID != "" && lid != lbID {
			return nil, nil, fault.Validation("Listener %s is not on Load Balancer %s.", listenerID, lbID)
		}
		lbID = lid
	}
	var out *Pool
	t, err := s.lockedChange(ctx, lbID, func(t *Tree, _ identity.Caller) error {
		var l *Listener
		if listenerID != "" {
			if l = t.listener(listenerID); l == nil {
				return fault.Validation("Listener %s not found.", listenerID)
			}
			t.pendingUpdate(l)
		}
		p, err := s.buildPool(t, attrs, l)
		if err != nil {
			return err
		}
		t.add(p)
		out = p
		return s.addPoolChildren(t, p, attrs)
	})
	return t, out, err
}

// UpdatePool changes a pool's mutable attributes.
func (s *Service) UpdatePool(ctx context.Context, id string, attrs map[string]any) (*Tree, *Pool, error) {
	var out *Pool
	t, err := s.childChange(ctx, store.KindPool, id, func(t *Tree, _ identity.Caller) error {
		p := t.pool(id)
		if p == nil {
			return notFound(store.KindPool, id)
		}
		old := *p
		if err := apply(p, attrs); err != nil {
			return err
		}
		keepIdentity(&p.Base, old.Base)
		p.LoadBalancerID, p.ListenerID, p.Protocol = old.LoadBalancerID, old.ListenerID, old.Protocol
		if err := checkPersistence(p); err != nil {
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
				return fault.Conflict("Pool %s is in use by L7 policy %s", id, pol.ID)
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

// CreateMember adds a member to a pool.
func (s *Service) CreateMember(ctx context.Context, poolID string, attrs map[string]any) (*Tree, *Member, error) {
	var out *Member
	if err := s.checkParentProject(ctx, attrs); err != nil {
		return nil, nil, err
	}
	t, err := s.childChange(ctx, store.KindPool, poolID, func(t *Tree, _ identity.Caller) error {
		p := t.pool(poolID)
		if p == nil {
			return notFound(store.KindPool, poolID)
		}
		m, err := s.buildMember(t, p, attrs)
		if err != nil {
			return err
		}
		t.add(m)
		t.pendingUpdate(p)
		t.lockPoolParents(poolID)
		out = m
		return nil
	})
	return t, out, err
}

// UpdateMember changes a member's mutable attributes.
func (s *Service) UpdateMember(ctx context.Context, poolID, id string, attrs map[string]any) (*Tree, *Member, error) {
	var out *Member
	t, err := s.childChange(ctx, store.KindPool, poolID, func(t *Tree, _ identity.Caller) error {
		m := t.Member(id)
		if m == nil || m.PoolID != poolID {
			return notFound(store.KindMember, id)
		}
		if err := s.updateMember(t, m, attrs); err != nil {
			return err
		}
		out = m
		return nil
	})
	return t, out, err
}

func (s *Service) updateMember(t *Tree, m *Member, attrs map[string]any) error {
	old := *m
	if err := apply(m, without(attrs, "address", "protocol_port", "subnet_id", "project_id", "request_sriov")); err != nil {
		return err
	}
	keepIdentity(&m.Base, old.Base)
	m.PoolID, m.Address, m.ProtocolPort, m.SubnetID, m.VnicType = old.PoolID, old.Address, old.ProtocolPort, old.SubnetID, old.VnicType
	s.touchUpdated(&m.Base)
	t.setStatus(m, PendingUpdate)
	t.markDirty(m)
	if p := t.pool(m.PoolID); p != nil {
		t.pendingUpdate(p)
	}
	t.lockPoolParents(m.PoolID)
	return nil
}

// DeleteMember removes a member.
func (s *Service) DeleteMember(ctx context.Context, poolID, id string) error {
	_, err := s.childChange(ctx, store.KindPool, poolID, func(t *Tree, _ identity.Caller) error {
		m := t.Member(id)
		if m == nil || m.PoolID != poolID {
			return notFound(store.KindMember, id)
		}
		t.setStatus(m, PendingDelete)
		if p := t.pool(poolID); p != nil {
			t.pendingUpdate(p)
		}
		t.lockPoolParents(poolID)
		return nil
	})
	return err
}

// BatchUpdateMembers makes a pool's members match the list, matching on
// (address, protocol_port): new entries are created, matches updated and,
// unless additiveOnly, the rest deleted. It reports false when nothing
// needed to change (Octavia then returns early without locking).
func (s *Service) BatchUpdateMembers(ctx context.Context, poolID string, members []map[string]any, additiveOnly bool) error {
	type key struct {
		addr netip.Addr
		port int
	}
	keyOf := func(addr string, port int) (key, error) {
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return key{}, fault.New(400, "The IP Address %s is invalid.", addr)
		}
		return key{a, port}, nil
	}
	_, err := s.childChange(ctx, store.KindPool, poolID, func(t *Tree, _ identity.Caller) error {
		p := t.pool(poolID)
		if p == nil {
			return notFound(store.KindPool, poolID)
		}
		existing := map[key]*Member{}
		for _, m := range t.poolMembers(poolID) {
			k, err := keyOf(m.Address, m.ProtocolPort)
			if err != nil {
				return err
			}
			existing[k] = m
		}
		seen := map[key]bool{}
		for _, attrs := range members {
			port, _ := attrs["protocol_port"].(int64)
			k, err := keyOf(str(attrs, "address"), int(port))
			if err != nil {
				return err
			}
			if seen[k] {
				return fault.Validation("Member address/port pairs must be unique; %s:%d appears more than once.", k.addr, k.port)
			}
			seen[k] = true
			if m := existing[k]; m != nil {
				if err := s.updateMember(t, m, attrs); err != nil {
					return err
				}
				continue
			}
			m, err := s.buildMember(t, p, attrs)
			if err != nil {
				return err
			}
			t.add(m)
		}
		if !additiveOnly {
			for k, m := range existing {
				if !seen[k] {
					t.setStatus(m, PendingDelete)
				}
			}
		}
		t.pendingUpdate(p)
		t.lockPoolParents(poolID)
		return nil
	})
	return err
}

// CreateMonitor adds the health monitor of a pool.
func (s *Service) CreateMonitor(ctx context.Context, attrs map[string]any) (*Tree, *HealthMonitor, error) {
	poolID := str(attrs, "pool_id")
	if err := s.checkParentProject(ctx, attrs); err != nil {
		return nil, nil, err
	}
	var out *HealthMonitor
	t, err := s.childChange(ctx, store.KindPool, poolID, func(t *Tree, _ identity.Caller) error {
		p := t.pool(poolID)
		if p == nil {
			return notFound(store.KindPool, poolID)
		}
		h, err := s.buildMonitor(t, p, attrs)
		if err != nil {
			return err
		}
		t.add(h)
		t.pendingUpdate(p)
		t.lockPoolParents(poolID)
		out = h
		return nil
	})
	return t, out, err
}

// UpdateMonitor changes a health monitor's mutable attributes.
func (s *Service) UpdateMonitor(ctx context.Context, id string, attrs map[string]any) (*Tree, *HealthMonitor, error) {
	var out *HealthMonitor
	t, err := s.childChange(ctx, store.KindHealthMonitor, id, func(t *Tree, _ identity.Caller) error {
		h := t.Monitor(id)
		if h == nil {
			return notFound(store.KindHealthMonitor, id)
		}
		old := *h
		if err := apply(h, attrs); err != nil {
			return err
		}
		keepIdentity(&h.Base, old.Base)
		h.PoolID, h.Type = old.PoolID, old.Type
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

// CreatePolicy adds an L7 policy (with nested rules) to a listener.
func (s *Service) CreatePolicy(ctx context.Context, attrs map[string]any) (*Tree, *L7Policy, error) {
	listenerID := str(attrs, "listener_id")
	if err := s.checkParentProject(ctx, attrs); err != nil {
		return nil, nil, err
	}
	var out *L7Policy
	t, err := s.childChange(ctx, store.KindListener, listenerID, func(t *Tree, _ identity.Caller) error {
		l := t.listener(listenerID)
		if l == nil {
			return notFound(store.KindListener, listenerID)
		}
		t.pendingUpdate(l)
		n := len(t.L7Policies)
		if err := s.addPolicyTree(t, l, attrs); err != nil {
			return err
		}
		for _, p := range t.L7Policies[n:] {
			out = p
		}
		return nil
	})
	return t, out, err
}

// UpdatePolicy changes an L7 policy.
func (s *Service) UpdatePolicy(ctx context.Context, id string, attrs map[string]any) (*Tree, *L7Policy, error) {
	var out *L7Policy
	t, err := s.childChange(ctx, store.KindL7Policy, id, func(t *Tree, _ identity.Caller) error {
		p := t.Policy(id)
		if p == nil {
			return notFound(store.KindL7Policy, id)
		}
		old := *p
		if err := apply(p, attrs); err != nil {
			return err
		}
		keepIdentity(&p.Base, old.Base)
		p.ListenerID = old.ListenerID
		l := t.listener(p.ListenerID)
		if err := checkPolicy(t, l, p); err != nil {
			return err
		}
		if _, moved := attrs["position"]; moved {
			reposition(t, p, old.Position)
		}
		s.touchUpdated(&p.Base)
		t.setStatus(p, PendingUpdate)
		t.markDirty(p)
		t.pendingUpdate(l)
		out = p
		return nil
	})
	return t, out, err
}

// reposition keeps a listener's policy positions dense after p moved.
func reposition(t *Tree, p *L7Policy, from int) {
	others := []*L7Policy{}
	for _, o := range t.listenerPolicies(p.ListenerID) {
		if o.ID != p.ID {
			others = append(others, o)
		}
	}
	to := min(max(p.Position, 1), len(others)+1)
	ordered := append([]*L7Policy{}, others[:to-1]...)
	ordered = append(ordered, p)
	ordered = append(ordered, others[to-1:]...)
	for i, o := range ordered {
		if o.Position != i+1 {
			o.Position = i + 1
			t.markDirty(o)
		}
	}
	_ = from
}

// DeletePolicy removes an L7 policy and its rules.
func (s *Service) DeletePolicy(ctx context.Context, id string) error {
	_, err := s.childChange(ctx, store.KindL7Policy, id, func(t *Tree, _ identity.Caller) error {
		p := t.Policy(id)
		if p == nil {
			return notFound(store.KindL7Policy, id)
		}
		t.markDeleted(p)
		if l := t.listener(p.ListenerID); l != nil {
			t.pendingUpdate(l)
		}
		return nil
	})
	return err
}

// CreateRule adds a rule to an L7 policy.
func (s *Service) CreateRule(ctx context.Context, policyID string, attrs map[string]any) (*Tree, *L7Rule, error) {
	var out *L7Rule
	t, err := s.childChange(ctx, store.KindL7Policy, policyID, func(t *Tree, _ identity.Caller) error {
		p := t.Policy(policyID)
		if p == nil {
			return notFound(store.KindL7Policy, policyID)
		}
		r, err := s.buildRule(t, p, attrs)
		if err != nil {
			return err
		}
		t.add(r)
		t.pendingUpdate(p)
		if l := t.listener(p.ListenerID); l != nil {
			t.pendingUpdate(l)
		}
		out = r
		return nil
	})
	return t, out, err
}

// UpdateRule changes an L7 rule.
func (s *Service) UpdateRule(ctx context.Context, policyID, id string, attrs map[string]any) (*Tree, *L7Rule, error) {
	var out *L7Rule
	t, err := s.childChange(ctx, store.KindL7Policy, policyID, func(t *Tree, _ identity.Caller) error {
		r := t.Rule(id)
		if r == nil || r.L7PolicyID != policyID {
			return notFound(store.KindL7Rule, id)
		}
		old := *r
		if err := apply(r, attrs); err != nil {
			return err
		}
		keepIdentity(&r.Base, old.Base)
		r.L7PolicyID = old.L7PolicyID
		if err := checkRule(r); err != nil {
			return err
		}
		s.touchUpdated(&r.Base)
		t.setStatus(r, PendingUpdate)
		t.markDirty(r)
		p := t.Policy(policyID)
		t.pendingUpdate(p)
		if l := t.listener(p.ListenerID); l != nil {
			t.pendingUpdate(l)
		}
		out = r
		return nil
	})
	return t, out, err
}

// DeleteRule removes an L7 rule.
func (s *Service) DeleteRule(ctx context.Context, policyID, id string) error {
	_, err := s.childChange(ctx, store.KindL7Policy, policyID, func(t *Tree, _ identity.Caller) error {
		r := t.Rule(id)
		if r == nil || r.L7PolicyID != policyID {
			return notFound(store.KindL7Rule, id)
		}
		t.setStatus(r, PendingDelete)
		p := t.Policy(policyID)
		t.pendingUpdate(p)
		if l := t.listener(p.ListenerID); l != nil {
			t.pendingUpdate(l)
		}
		return nil
	})
	return err
}
