package lbaas

import (
	"context"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// CreatePolicy adds an L7 policy (with nested rules) to a listener.
func (s *Service) CreatePolicy(ctx context.Context, req L7PolicyCreate) (*Tree, *L7Policy, error) {
	if err := checkOwner(ctx, req.Owner); err != nil {
		return nil, nil, err
	}
	if req.RedirectPool != nil && req.RedirectPool.Def != nil {
		if err := s.checkPoolTLS(ctx, nil, &req.RedirectPool.Def.PoolUpdate); err != nil {
			return nil, nil, err
		}
	}
	var out *L7Policy
	t, err := s.childChange(ctx, store.KindListener, req.ListenerID, func(t *Tree, _ identity.Caller) error {
		l := t.listener(req.ListenerID)
		if l == nil {
			return notFound(store.KindListener, req.ListenerID)
		}
		t.pendingUpdate(l)
		p, err := s.addPolicy(t, l, &req, s.newPools)
		out = p
		return err
	})
	return t, out, err
}

// buildPolicy makes an L7 policy of listener l, and makes room for it at
// its position.
func (s *Service) buildPolicy(t *Tree, l *Listener, req *L7PolicyCreate) (*L7Policy, error) {
	pol := &L7Policy{Base: s.newBase(t.LB.ProjectID), LoadBalancerID: t.LB.ID, ListenerID: l.ID, Position: 2147483647}
	if err := t.takeID(pol, req.ID); err != nil {
		return nil, err
	}
	req.L7PolicyUpdate.apply(pol)
	pol.Tags = nonNil(pol.Tags)
	if err := checkPolicy(t, l, pol); err != nil {
		return nil, err
	}
	// Positions are dense from 1; a new policy goes where asked and pushes
	// the rest down.
	others := t.listenerPolicies(l.ID)
	if pol.Position > len(others)+1 {
		pol.Position = len(others) + 1
	}
	for _, o := range others {
		if o.Position >= pol.Position {
			o.Position++
			t.markDirty(o)
		}
	}
	return pol, nil
}

// checkPolicy enforces what each action needs, and clears what it does not
// use.
func checkPolicy(t *Tree, l *Listener, p *L7Policy) error {
	switch p.Action {
	case "REDIRECT_TO_POOL":
		if p.RedirectPoolID == nil || *p.RedirectPoolID == "" {
			return Invalid("Invalid L7 Policy arguments: redirect_pool_id or redirect_pool must not be None")
		}
		pool := t.pool(*p.RedirectPoolID)
		if pool == nil {
			return Invalid("Pool %s not found.", *p.RedirectPoolID)
		}
		if err := compatible(l.Protocol, pool.Protocol); err != nil {
			return err
		}
		p.RedirectURL, p.RedirectPrefix, p.RedirectHTTPCode = nil, nil, nil
	case "REDIRECT_TO_URL":
		if p.RedirectURL == nil || *p.RedirectURL == "" {
			return Invalid("Invalid L7 Policy arguments: redirect_url must not be None")
		}
		p.RedirectPoolID, p.RedirectPrefix = nil, nil
		defaultRedirectCode(p)
	case "REDIRECT_PREFIX":
		if p.RedirectPrefix == nil || *p.RedirectPrefix == "" {
			return Invalid("Invalid L7 Policy arguments: redirect_prefix must not be None")
		}
		p.RedirectPoolID, p.RedirectURL = nil, nil
		defaultRedirectCode(p)
	case "REJECT":
		p.RedirectPoolID, p.RedirectURL, p.RedirectPrefix, p.RedirectHTTPCode = nil, nil, nil, nil
	}
	if l.Protocol == "UDP" || l.Protocol == "SCTP" || l.Protocol == "TCP" {
		return Invalid("Protocol %s listeners cannot have child objects.", l.Protocol)
	}
	return nil
}

func defaultRedirectCode(p *L7Policy) {
	if p.RedirectHTTPCode == nil {
		c := 302
		p.RedirectHTTPCode = &c
	}
}

// UpdatePolicy changes an L7 policy.
func (s *Service) UpdatePolicy(ctx context.Context, id string, req L7PolicyUpdate) (*Tree, *L7Policy, error) {
	var out *L7Policy
	t, err := s.childChange(ctx, store.KindL7Policy, id, func(t *Tree, _ identity.Caller) error {
		p := t.Policy(id)
		if p == nil {
			return notFound(store.KindL7Policy, id)
		}
		req.apply(p)
		p.Tags = nonNil(p.Tags)
		l := t.listener(p.ListenerID)
		if err := checkPolicy(t, l, p); err != nil {
			return err
		}
		if req.Position.Set {
			reposition(t, p)
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
func reposition(t *Tree, p *L7Policy) {
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
}

// densePolicies numbers a listener's policies from 1 in their order.
func (t *Tree) densePolicies(listenerID string) {
	for i, p := range t.listenerPolicies(listenerID) {
		if p.Position != i+1 {
			p.Position = i + 1
			t.markDirty(p)
		}
	}
}

// DeletePolicy removes an L7 policy and its rules; the listener's other
// policies are renumbered once the provider has removed it (settle).
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
func (s *Service) CreateRule(ctx context.Context, policyID string, req L7RuleCreate) (*Tree, *L7Rule, error) {
	var out *L7Rule
	t, err := s.childChange(ctx, store.KindL7Policy, policyID, func(t *Tree, _ identity.Caller) error {
		p := t.Policy(policyID)
		if p == nil {
			return notFound(store.KindL7Policy, policyID)
		}
		r, err := s.buildRule(t, p, &req)
		if err != nil {
			return err
		}
		t.add(r)
		t.lockPolicyParents(p)
		out = r
		return nil
	})
	return t, out, err
}

// buildRule makes an L7 rule of policy pol.
func (s *Service) buildRule(t *Tree, pol *L7Policy, req *L7RuleCreate) (*L7Rule, error) {
	if len(t.policyRules(pol.ID)) >= 50 {
		return nil, Conflict("Too many rules on L7 policy %s", pol.ID)
	}
	r := &L7Rule{Base: s.newBase(t.LB.ProjectID), LoadBalancerID: t.LB.ID, L7PolicyID: pol.ID}
	if err := t.takeID(r, req.ID); err != nil {
		return nil, err
	}
	req.L7RuleUpdate.apply(r)
	r.Tags = nonNil(r.Tags)
	if err := checkRule(r); err != nil {
		return nil, err
	}
	return r, nil
}

func checkRule(r *L7Rule) error {
	needsKey := r.Type == "HEADER" || r.Type == "COOKIE" || r.Type == "SSL_DN_FIELD"
	if needsKey && (r.Key == nil || *r.Key == "") {
		return Invalid("Error parsing L7Rule: key must be specified for %s rules.", r.Type)
	}
	switch r.Type {
	case "FILE_TYPE":
		if r.CompareType != "REGEX" && r.CompareType != "EQUAL_TO" {
			return Invalid("Error parsing L7Rule: invalid compare type for file type rule.")
		}
	case "SSL_CONN_HAS_CERT":
		if r.CompareType != "EQUAL_TO" || r.Value != "True" {
			return Invalid("Error parsing L7Rule: L7rule type SSL_CONN_HAS_CERT only supports EQUAL_TO comparison with value 'True'.")
		}
	}
	return nil
}

// UpdateRule changes an L7 rule.
func (s *Service) UpdateRule(ctx context.Context, policyID, id string, req L7RuleUpdate) (*Tree, *L7Rule, error) {
	var out *L7Rule
	t, err := s.childChange(ctx, store.KindL7Policy, policyID, func(t *Tree, _ identity.Caller) error {
		r := t.Rule(id)
		if r == nil || r.L7PolicyID != policyID {
			return notFound(store.KindL7Rule, id)
		}
		req.apply(r)
		r.Tags = nonNil(r.Tags)
		if err := checkRule(r); err != nil {
			return err
		}
		s.touchUpdated(&r.Base)
		t.setStatus(r, PendingUpdate)
		t.markDirty(r)
		t.lockPolicyParents(t.Policy(policyID))
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
		t.lockPolicyParents(t.Policy(policyID))
		return nil
	})
	return err
}
