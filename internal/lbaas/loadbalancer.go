package lbaas

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/octavia/fault"
	"github.com/flowlb/flowlb/internal/store"
)

// CreateLoadBalancer creates a load balancer, and with it every listener,
// pool, member, monitor, L7 policy and rule nested in attrs (Octavia's
// single-call "fully populated" create), in one transaction.
func (s *Service) CreateLoadBalancer(ctx context.Context, attrs map[string]any) (*Tree, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	project, err := projectFor(c, attrs)
	if err != nil {
		return nil, err
	}
	var tree *Tree
	rev, err := s.st.Update(ctx, func(tx store.Tx) error {
		t, err := s.buildTree(tx, project, attrs)
		if err != nil {
			return err
		}
		if err := s.commitChange(tx, t); err != nil {
			return err
		}
		tree = t
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.realize(tree.LB.ID, tree.LB.Provider, rev)
	return tree, nil
}

func (s *Service) buildTree(tx store.Tx, project string, attrs map[string]any) (*Tree, error) {
	lb := &LoadBalancer{Base: s.newBase(project, attrs), VIPSGIDs: []string{}, AdditionalVIPs: []AdditionalVIP{}}
	base := lb.Base
	if err := apply(lb, without(attrs, "project_id", "tenant_id", "listeners", "pools", "vip_address", "vip_port_id", "vip_subnet_id", "vip_network_id", "additional_vips")); err != nil {
		return nil, err
	}
	lb.ID, lb.ProjectID, lb.ProvisioningStatus, lb.OperatingStatus, lb.CreatedAt = base.ID, project, PendingCreate, Offline, base.CreatedAt
	if lb.Tags == nil {
		lb.Tags = []string{}
	}
	if lb.VIPSGIDs == nil {
		lb.VIPSGIDs = []string{}
	}
	if lb.VIPVnicType == "" {
		lb.VIPVnicType = "normal"
	}
	if err := s.chooseProvider(tx, lb); err != nil {
		return nil, err
	}
	if err := s.allocateVIPs(tx, lb, attrs); err != nil {
		return nil, err
	}
	t := &Tree{LB: lb, created: map[string]bool{lb.ID: true}}
	if err := s.buildGraph(t, attrs); err != nil {
		return nil, err
	}
	return t, nil
}

// chooseProvider resolves provider, flavor and availability zone.
func (s *Service) chooseProvider(tx store.ReadTx, lb *LoadBalancer) error {
	if lb.FlavorID != nil && *lb.FlavorID != "" {
		f, prof, err := readFlavor(tx, *lb.FlavorID)
		if err != nil {
			return err
		}
		if !f.Enabled {
			return fault.BadRequest("The selected flavor is not allowed in this deployment: %s", f.ID)
		}
		if lb.Provider != "" && lb.Provider != prof.ProviderName {
			return fault.BadRequest("Flavor '%s' is not compatible with provider '%s'", f.ID, lb.Provider)
		}
		lb.Provider = prof.ProviderName
	}
	if lb.AvailabilityZone != nil && *lb.AvailabilityZone != "" {
		az, prof, err := readAZ(tx, *lb.AvailabilityZone)
		if err != nil {
			return err
		}
		if !az.Enabled {
			return fault.BadRequest("The selected availability_zone is not allowed in this deployment: %s", az.Name)
		}
		if lb.Provider != "" && lb.Provider != prof.ProviderName {
			return fault.BadRequest("Availability zone '%s' is not compatible with provider '%s'", az.Name, lb.Provider)
		}
		lb.Provider = prof.ProviderName
	}
	if lb.Provider == "" {
		lb.Provider = s.cfg.DefaultProvider
	}
	_, err := s.Provider(lb.Provider)
	return err
}

func (s *Service) allocateVIPs(tx store.Tx, lb *LoadBalancer, attrs map[string]any) error {
	str := func(k string) string { v, _ := attrs[k].(string); return v }
	req := VIPRequest{ProjectID: lb.ProjectID, LoadBalancerID: lb.ID, SubnetID: str("vip_subnet_id"), NetworkID: str("vip_network_id"), PortID: str("vip_port_id"), Address: str("vip_address")}
	if req.SubnetID == "" && req.NetworkID == "" && req.PortID == "" {
		return fault.BadRequest("Validation failure: VIP must contain one of: vip_port_id, vip_network_id, vip_subnet_id.")
	}
	if s.vips == nil {
		return fault.New(http.StatusInternalServerError, "no VIP allocator configured")
	}
	vip, err := s.vips.Allocate(tx, req)
	if err != nil {
		return err
	}
	lb.VIPAddress, lb.VIPPortID, lb.VIPSubnetID, lb.VIPNetworkID, lb.OwnsVIPPort = vip.Address, vip.PortID, vip.SubnetID, vip.NetworkID, vip.Owned
	avs, _ := attrs["additional_vips"].([]any)
	for _, a := range avs {
		m, _ := a.(map[string]any)
		sub, _ := m["subnet_id"].(string)
		ip, _ := m["ip_address"].(string)
		port, _ := m["port_id"].(string)
		if sub == lb.VIPSubnetID {
			return fault.Validation("Duplicate VIP subnet(s) specified. Only one IP can be bound per subnet.")
		}
		v, err := s.vips.Allocate(tx, VIPRequest{ProjectID: lb.ProjectID, LoadBalancerID: lb.ID, SubnetID: sub, Address: ip, PortID: port})
		if err != nil {
			return err
		}
		lb.AdditionalVIPs = append(lb.AdditionalVIPs, AdditionalVIP{SubnetID: v.SubnetID, IPAddress: v.Address, PortID: v.PortID})
	}
	return nil
}

// buildGraph adds the nested objects of a single-call create. Pools are
// named; a pool is defined once (in pools[], a listener's default_pool or an
// L7 policy's redirect_pool) and referenced elsewhere by name only.
func (s *Service) buildGraph(t *Tree, attrs map[string]any) error {
	defs := map[string]map[string]any{}
	define := func(p map[string]any) error {
		name, _ := p["name"].(string)
		if name == "" {
			return fault.Validation("Pools must be named when creating a fully populated loadbalancer.")
		}
		if len(p) > 1 {
			if _, dup := defs[name]; dup {
				return fault.Validation("Pool %s is defined more than once.", name)
			}
			defs[name] = p
		}
		return nil
	}
	pools, _ := attrs["pools"].([]any)
	listeners, _ := attrs["listeners"].([]any)
	for _, p := range pools {
		if err := define(p.(map[string]any)); err != nil {
			return err
		}
	}
	for _, l := range listeners {
		lm := l.(map[string]any)
		if dp, ok := lm["default_pool"].(map[string]any); ok {
			if err := define(dp); err != nil {
				return err
			}
		}
		pols, _ := lm["l7policies"].([]any)
		for _, pol := range pols {
			if rp, ok := pol.(map[string]any)["redirect_pool"].(map[string]any); ok {
				if err := define(rp); err != nil {
					return err
				}
			}
		}
	}
	built := map[string]*Pool{}
	pool := func(name string, listener *Listener) (*Pool, error) {
		if p := built[name]; p != nil {
			if listener != nil {
				if err := compatible(listener.Protocol, p.Protocol); err != nil {
					return nil, err
				}
				id := p.ID
				listener.DefaultPoolID = &id
			}
			return p, nil
		}
		def, ok := defs[name]
		if !ok {
			return nil, fault.BadRequest("Missing details for Pool object: %s", name)
		}
		p, err := s.buildPool(t, def, listener)
		if err != nil {
			return nil, err
		}
		t.add(p)
		built[name] = p
		if ms, ok := def["members"].([]any); ok {
			for _, m := range ms {
				mem, err := s.buildMember(t, p, m.(map[string]any))
				if err != nil {
					return nil, err
				}
				t.add(mem)
			}
		}
		if hm, ok := def["healthmonitor"].(map[string]any); ok {
			h, err := s.buildMonitor(t, p, hm)
			if err != nil {
				return nil, err
			}
			t.add(h)
		}
		return p, nil
	}
	for _, l := range listeners {
		lm := l.(map[string]any)
		ln, err := s.buildListener(t, lm)
		if err != nil {
			return err
		}
		t.add(ln)
		if dp, ok := lm["default_pool"].(map[string]any); ok {
			if _, err := pool(dp["name"].(string), ln); err != nil {
				return err
			}
		}
		pols, _ := lm["l7policies"].([]any)
		for _, pl := range pols {
			pm := pl.(map[string]any)
			if rp, ok := pm["redirect_pool"].(map[string]any); ok {
				p, err := pool(rp["name"].(string), nil)
				if err != nil {
					return err
				}
				pm = without(pm, "redirect_pool")
				pm["redirect_pool_id"] = p.ID
			}
			pol, err := s.buildPolicy(t, ln, pm)
			if err != nil {
				return err
			}
			t.add(pol)
			rules, _ := pm["rules"].([]any)
			for _, r := range rules {
				rule, err := s.buildRule(t, pol, r.(map[string]any))
				if err != nil {
					return err
				}
				t.add(rule)
			}
		}
	}
	for _, p := range pools {
		if _, err := pool(p.(map[string]any)["name"].(string), nil); err != nil {
			return err
		}
	}
	return nil
}

// UpdateLoadBalancer changes the mutable attributes of a load balancer.
func (s *Service) UpdateLoadBalancer(ctx context.Context, id string, attrs map[string]any) (*Tree, error) {
	return s.lbChange(ctx, id, PendingUpdate, func(t *Tree, _ identity.Caller) error {
		if q, ok := attrs["vip_qos_policy_id"]; ok && q != nil {
			return fault.NotImplemented(t.LB.Provider, "VIP QoS policies are not supported")
		}
		st := t.LB.ProvisioningStatus
		if err := apply(t.LB, attrs); err != nil {
			return err
		}
		t.LB.ProvisioningStatus = st
		if t.LB.Tags == nil {
			t.LB.Tags = []string{}
		}
		if t.LB.VIPSGIDs == nil {
			t.LB.VIPSGIDs = []string{}
		}
		s.touchUpdated(&t.LB.Base)
		t.markDirty(t.LB)
		return nil
	})
}

// DeleteLoadBalancer deletes a load balancer; with cascade its whole tree.
func (s *Service) DeleteLoadBalancer(ctx context.Context, id string, cascade bool) error {
	_, err := s.lbChange(ctx, id, PendingDelete, func(t *Tree, _ identity.Caller) error {
		if t.hasChildren() && !cascade {
			return fault.Validation("Cannot delete Load Balancer %s - it has children", id)
		}
		for _, o := range t.objects()[1:] {
			t.setStatus(o, PendingDelete)
		}
		return nil
	})
	return err
}

// lbChange is the lock for operations on the LB itself: Octavia allows an
// update only from ACTIVE and a delete from ACTIVE or ERROR, with a 409
// "Invalid state" otherwise.
func (s *Service) lbChange(ctx context.Context, id, to string, fn func(t *Tree, c identity.Caller) error) (*Tree, error) {
	return s.withLock(ctx, id, to, func(st string) error {
		if st != Active && !(to == PendingDelete && st == Error) {
			return invalidState(st, "loadbalancer", id)
		}
		return nil
	}, fn)
}

// Failover is refused: a flow provider has no amphora to replace. It is
// an admin action on any project's load balancer (Octavia checks the admin
// rule against the LB's project, not the caller's visibility), so a
// load-balancer_admin reaches the provider's refusal.
func (s *Service) Failover(ctx context.Context, id string) error {
	c, err := caller(ctx)
	if err != nil {
		return err
	}
	t, err := s.Tree(identity.WithCaller(ctx, identity.Caller{IsAdmin: true}), store.KindLoadBalancer, id)
	if err != nil {
		return err
	}
	if !c.Allow(identity.RuleAdmin, t.LB.ProjectID) {
		return fault.Forbidden()
	}
	return fault.New(http.StatusNotImplemented, "Provider '%s' does not support a requested action: loadbalancer failover", t.LB.Provider)
}

// lbOf returns the load balancer id of an object, for the lock.
func (s *Service) lbOf(ctx context.Context, kind store.Kind, id string) (string, error) {
	var lbID string
	err := s.st.View(ctx, func(tx store.ReadTx) error {
		rec, err := tx.Get(kind, id)
		if errors.Is(err, store.ErrNotFound) {
			return notFound(kind, id)
		}
		if err != nil {
			return fmt.Errorf("get %s %s: %w", kind, id, err)
		}
		lbID = rec.LoadBalancerID
		return nil
	})
	return lbID, err
}
