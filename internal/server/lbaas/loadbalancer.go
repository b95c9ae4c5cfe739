package lbaas

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// CreateLoadBalancer creates a load balancer, and with it every listener,
// pool, member, monitor, L7 policy and rule the request nests (Octavia's
// single-call "fully populated" create), in one transaction.
func (s *Service) CreateLoadBalancer(ctx context.Context, req LoadBalancerCreate) (*Tree, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	project, err := projectFor(c, req.Owner)
	if err != nil {
		return nil, err
	}
	for i := range req.Listeners.Value {
		if err := s.checkTLS(ctx, &req.Listeners.Value[i].ListenerUpdate); err != nil {
			return nil, err
		}
	}
	if err := s.checkPoolTLS(ctx, nil, nestedPools(req.Listeners.Value, req.Pools.Value)...); err != nil {
		return nil, err
	}
	return s.commit(ctx, func(tx store.Tx) (*Tree, error) { return s.buildTree(tx, project, req, c) })
}

// buildTree makes the load balancer and the tree its create nests; an
// admin caller may name the objects' ids (takeID).
func (s *Service) buildTree(tx store.Tx, project string, req LoadBalancerCreate, c identity.Caller) (*Tree, error) {
	lb := &LoadBalancer{Base: s.newBase(project), VIPSGIDs: []string{}, AdditionalVIPs: []AdditionalVIP{}, VIPVnicType: "normal",
		Provider: req.Provider, FlavorID: req.FlavorID, AvailabilityZone: req.AvailabilityZone}
	t := &Tree{LB: lb, freshPorts: freshPorts(req), namesIDs: c.IsAdmin}
	if err := t.takeID(lb, req.ID); err != nil {
		return nil, err
	}
	t.created = map[string]bool{lb.ID: true}
	req.LoadBalancerUpdate.apply(lb)
	lb.Tags, lb.VIPSGIDs = nonNil(lb.Tags), nonNil(lb.VIPSGIDs)
	if req.UniqueName {
		if err := nameFree(tx, lb.Name); err != nil {
			return nil, err
		}
	}
	if err := s.chooseProvider(tx, lb); err != nil {
		return nil, err
	}
	if err := s.allocateVIPs(tx, lb, req, c.Token); err != nil {
		return nil, err
	}
	if err := s.addGraph(t, req.Listeners.Value, req.Pools.Value); err != nil {
		return nil, err
	}
	return t, nil
}

// nameLocks is how many locks the conditional creates' names hash to:
// creates of one name serialise on PostgreSQL (SQLite has one writer),
// and the locks table keeps a row per lock, not per name.
const nameLocks = 256

// nameFree refuses a create conditional on its name when a load balancer
// of that name exists in any project. An empty name is not checked.
func nameFree(tx store.Tx, name string) error {
	if name == "" {
		return nil
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	if err := tx.Lock("loadbalancer-name/" + strconv.Itoa(int(h.Sum32()%nameLocks))); err != nil {
		return err
	}
	recs, err := tx.List(store.KindLoadBalancer, store.Filter{Name: name})
	if err != nil {
		return err
	}
	if len(recs) > 0 {
		return NameTaken(name, recs[0].ID)
	}
	return nil
}

// freshPorts reports whether a create allocates every VIP port rather
// than taking a user's, which may have security groups and floating IPs.
func freshPorts(req LoadBalancerCreate) bool {
	if req.VIPPortID != "" {
		return false
	}
	for _, av := range req.AdditionalVIPs {
		if av.PortID != "" {
			return false
		}
	}
	return true
}

// sameProvider reports whether two names (or aliases) are one provider.
func (s *Service) sameProvider(a, b string) bool {
	pa, pb := s.providers[a], s.providers[b]
	return a == b || (pa != nil && pb != nil && pa.Name() == pb.Name())
}

// chooseProvider resolves provider, flavor and availability zone. The
// load balancer keeps the name it asked for, an alias included.
func (s *Service) chooseProvider(tx store.ReadTx, lb *LoadBalancer) error {
	if lb.FlavorID != nil && *lb.FlavorID != "" {
		f, prof, err := readFlavor(tx, *lb.FlavorID)
		if err != nil {
			return err
		}
		if !f.Enabled {
			return Invalid("The selected flavor is not allowed in this deployment: %s", f.ID)
		}
		if lb.Provider != "" && !s.sameProvider(lb.Provider, prof.ProviderName) {
			return Invalid("Flavor '%s' is not compatible with provider '%s'", f.ID, lb.Provider)
		}
		if lb.Provider == "" {
			lb.Provider = prof.ProviderName
		}
	}
	if lb.AvailabilityZone != nil && *lb.AvailabilityZone != "" {
		az, prof, err := readAZ(tx, *lb.AvailabilityZone)
		if err != nil {
			return err
		}
		if !az.Enabled {
			return Invalid("The selected availability_zone is not allowed in this deployment: %s", az.Name)
		}
		if lb.Provider != "" && !s.sameProvider(lb.Provider, prof.ProviderName) {
			return Invalid("Availability zone '%s' is not compatible with provider '%s'", az.Name, lb.Provider)
		}
		if lb.Provider == "" {
			lb.Provider = prof.ProviderName
		}
	}
	if lb.Provider == "" {
		lb.Provider = s.cfg.DefaultProvider
	}
	_, err := s.Provider(lb.Provider)
	return err
}

// allocateVIPs allocates the VIP and the additional VIPs of a create;
// token is the caller's.
func (s *Service) allocateVIPs(tx store.Tx, lb *LoadBalancer, req LoadBalancerCreate, token identity.Token) error {
	vr := VIPRequest{ProjectID: lb.ProjectID, LoadBalancerID: lb.ID, SubnetID: req.VIPSubnetID, NetworkID: req.VIPNetworkID, PortID: req.VIPPortID, Address: req.VIPAddress,
		Token: token}
	if vr.SubnetID == "" && vr.NetworkID == "" && vr.PortID == "" {
		return Validation("VIP must contain one of: vip_port_id, vip_network_id, vip_subnet_id.")
	}
	if s.vips == nil {
		return errNoAllocator
	}
	vip, err := s.vips.Allocate(tx, vr)
	if err != nil {
		return err
	}
	lb.VIPAddress, lb.VIPPortID, lb.VIPSubnetID, lb.VIPNetworkID, lb.OwnsVIPPort = vip.Address, vip.PortID, vip.SubnetID, vip.NetworkID, vip.Owned
	if err := checkVIPSubnets(lb.VIPSubnetID, req.AdditionalVIPs); err != nil {
		return err
	}
	// Octavia looks up every additional VIP's subnet before it allocates
	// any, and words a missing one as a validation failure.
	if lookup, ok := s.vips.(SubnetLookup); ok {
		for _, av := range req.AdditionalVIPs {
			if err := lookup.CheckSubnet(tx, Access{Project: lb.ProjectID, Token: token}, av.SubnetID); errors.Is(err, ErrInvalid) {
				return Validation("Subnet %s not found", av.SubnetID)
			} else if err != nil {
				return err
			}
		}
	}
	more, err := s.allocateAdditional(tx, lb.ProjectID, lb.ID, VIP{NetworkID: lb.VIPNetworkID, Owned: lb.OwnsVIPPort}, req.AdditionalVIPs, token)
	if err != nil {
		return err
	}
	for _, v := range more {
		lb.AdditionalVIPs = append(lb.AdditionalVIPs, AdditionalVIP{SubnetID: v.SubnetID, IPAddress: v.Address, PortID: v.PortID})
	}
	return nil
}

// allocateAdditional allocates the additional VIPs of a load balancer
// whose VIP is vip; token is the caller's.
func (s *Service) allocateAdditional(tx store.Tx, projectID, lbID string, vip VIP, avs []AdditionalVIP, token identity.Token) ([]VIP, error) {
	var out []VIP
	for _, av := range avs {
		v, err := s.vips.Allocate(tx, VIPRequest{ProjectID: projectID, LoadBalancerID: lbID, SubnetID: av.SubnetID, Address: av.IPAddress, PortID: av.PortID,
			VIPNetworkID: vip.NetworkID, VIPOwned: vip.Owned, Token: token})
		if err != nil {
			return out, err
		}
		// Octavia's rule: every VIP of a load balancer is on one network
		// (a port there carries them all); the families may differ.
		if v.NetworkID != vip.NetworkID {
			return append(out, v), Validation("All VIP subnets must belong to the same network.")
		}
		out = append(out, v)
	}
	return out, nil
}

var errNoAllocator = errors.New("no VIP allocator configured")

// UpdateLoadBalancer changes the mutable attributes of a load balancer.
func (s *Service) UpdateLoadBalancer(ctx context.Context, id string, req LoadBalancerUpdate) (*Tree, error) {
	return s.lbChange(ctx, id, PendingUpdate, func(t *Tree, _ identity.Caller) error {
		if req.VIPQoSPolicyID.Value != nil {
			return Unsupported(t.LB.Provider, "VIP QoS policies are not supported")
		}
		req.apply(t.LB)
		t.LB.Tags, t.LB.VIPSGIDs = nonNil(t.LB.Tags), nonNil(t.LB.VIPSGIDs)
		s.touchUpdated(&t.LB.Base)
		t.markDirty(t.LB)
		return nil
	})
}

// DeleteLoadBalancer deletes a load balancer; with cascade its whole tree.
func (s *Service) DeleteLoadBalancer(ctx context.Context, id string, cascade bool) error {
	_, err := s.lbChange(ctx, id, PendingDelete, func(t *Tree, _ identity.Caller) error {
		if t.hasChildren() && !cascade {
			return Validation("Cannot delete Load Balancer %s - it has children", id)
		}
		for _, o := range t.objects()[1:] {
			t.setStatus(o, PendingDelete)
		}
		return nil
	})
	return err
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
		return Forbidden()
	}
	return UnsupportedAction(t.LB.Provider, "loadbalancer failover")
}
