package lbaas

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// resourceName is the word Octavia uses for a kind in "X <id> not found.".
var resourceName = map[store.Kind]string{
	store.KindLoadBalancer:  "Load Balancer",
	store.KindListener:      "Listener",
	store.KindPool:          "Pool",
	store.KindMember:        "Member",
	store.KindHealthMonitor: "Health Monitor",
	store.KindL7Policy:      "L7 Policy",
	store.KindL7Rule:        "L7 Rule",
}

// notFound is the refusal for a missing object of kind.
func notFound(kind store.Kind, id string) error { return NotFound(resourceName[kind], id) }

// findTreeOf loads the tree holding object (kind, id) in tx, with the
// descendants of the given kinds only (all when nil).
func findTreeOf(tx store.ReadTx, kind store.Kind, id string, kinds []store.Kind) (*Tree, error) {
	rec, err := tx.Get(kind, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound(kind, id)
	}
	if err != nil {
		return nil, err
	}
	lbRec, err := tx.Get(store.KindLoadBalancer, rec.LoadBalancerID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound(kind, id)
	}
	if err != nil {
		return nil, err
	}
	return loadTreeOf(tx, lbRec, kinds)
}

// loadBalancerKinds are the descendants a load balancer's own rendering
// needs (their ids): showing or listing load balancers decodes none of
// their members, monitors or policies, which may be thousands.
var loadBalancerKinds = []store.Kind{store.KindListener, store.KindPool}

// Tree returns the tree holding object (kind, id), if the caller may see it.
func (s *Service) Tree(ctx context.Context, kind store.Kind, id string) (*Tree, error) {
	return s.treeOf(ctx, kind, id, nil)
}

// LoadBalancer returns load balancer id, if the caller may see it, in a
// tree holding only its listeners and pools.
func (s *Service) LoadBalancer(ctx context.Context, id string) (*Tree, error) {
	return s.treeOf(ctx, store.KindLoadBalancer, id, loadBalancerKinds)
}

// LoadBalancerAlone returns load balancer id, if the caller may see it,
// in a tree without descendants: what a show narrowed by fields to the
// load balancer's own attributes needs, such as a client polling its
// provisioning status.
func (s *Service) LoadBalancerAlone(ctx context.Context, id string) (*Tree, error) {
	return s.treeOf(ctx, store.KindLoadBalancer, id, []store.Kind{})
}

func (s *Service) treeOf(ctx context.Context, kind store.Kind, id string, kinds []store.Kind) (*Tree, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	var t *Tree
	err = s.st.View(ctx, func(tx store.ReadTx) error {
		t, err = findTreeOf(tx, kind, id, kinds)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !visible(c, t.LB.ProjectID) {
		return nil, Forbidden()
	}
	return t, nil
}

// TreesOf returns the trees the caller may see of the load balancer with
// id and/or name (an empty one does not filter), loading only those: a
// list narrowed to one load balancer costs an index lookup and one tree,
// whatever the number of load balancers.
func (s *Service) TreesOf(ctx context.Context, id, name string) ([]*Tree, error) {
	return s.treesOf(ctx, id, name, nil)
}

// LoadBalancers is TreesOf in trees holding only listeners and pools:
// what listing load balancers needs. Empty id and name list them all.
func (s *Service) LoadBalancers(ctx context.Context, id, name string) ([]*Tree, error) {
	if id == "" && name == "" {
		return s.trees(ctx, loadBalancerKinds)
	}
	return s.treesOf(ctx, id, name, loadBalancerKinds)
}

func (s *Service) treesOf(ctx context.Context, id, name string, kinds []store.Kind) ([]*Tree, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Tree
	err = s.st.View(ctx, func(tx store.ReadTx) error {
		out, err = namedTrees(tx, c, id, name, kinds)
		return err
	})
	return out, err
}

// namedTrees is treesOf in tx.
func namedTrees(tx store.ReadTx, c identity.Caller, id, name string, kinds []store.Kind) ([]*Tree, error) {
	f := visibleFilter(c)
	// A load balancer's loadbalancer_id column is its own id.
	f.LoadBalancerID, f.Name = id, name
	lbs, err := tx.List(store.KindLoadBalancer, f)
	if err != nil {
		return nil, err
	}
	var out []*Tree
	for _, r := range lbs {
		t, err := loadTreeOf(tx, r, kinds)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Listing reads a list's page in one read transaction, loading whole
// trees only for the page: pick gets the trees the caller may see (in
// Trees' order, or TreesOf's when id or name narrow them) holding only
// the descendants of the kinds shallow (none when empty, all when nil),
// chooses the page from them and returns its load balancers; Listing
// returns their trees, by id, with the descendants of the kinds full.
// pick's error is returned as it is.
func (s *Service) Listing(ctx context.Context, id, name string, shallow, full []store.Kind, pick func([]*Tree) ([]string, error)) (map[string]*Tree, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]*Tree{}
	err = s.st.View(ctx, func(tx store.ReadTx) error {
		var trees []*Tree
		var err error
		narrowed := id != "" || name != ""
		if narrowed {
			trees, err = namedTrees(tx, c, id, name, shallow)
		} else {
			trees, err = visibleTrees(tx, c, shallow)
		}
		if err != nil {
			return err
		}
		ids, err := pick(trees)
		if err != nil {
			return err
		}
		byID := make(map[string]*Tree, len(trees))
		for _, t := range trees {
			byID[t.LB.ID] = t
		}
		same := slices.Equal(shallow, full) && (shallow == nil) == (full == nil)
		for _, id := range ids {
			if t := byID[id]; t != nil {
				if same {
					out[id] = t
				} else {
					out[id] = &Tree{LB: t.LB}
				}
			}
		}
		if same || len(out) == 0 { // an empty filter would select everything
			return nil
		}
		// The children as the trees' own loads filter them: by project
		// across load balancers, by load balancer alone for a narrowed
		// list (loadTreeOf).
		f := store.Filter{}
		if !narrowed {
			f = visibleFilter(c)
		}
		for id := range out {
			f.LoadBalancerIDs = append(f.LoadBalancerIDs, id)
		}
		return loadChildrenOf(tx, f, out, full)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReadFlowTrees reads the trees the data plane serves, as the store's
// reader: of the load balancers ids that exist, or of every load balancer
// when ids is nil, in every project and for no caller (the fan-out serves
// them all, and answers to no one), with the security rules of their VIP
// ports when sec is set.
func ReadFlowTrees(tx store.ReadTx, ids []string, sec PortSecurity) (map[string]*Tree, error) {
	out := map[string]*Tree{}
	if ids != nil && len(ids) == 0 {
		return out, nil // an empty filter would select everything
	}
	f := store.Filter{LoadBalancerIDs: ids}
	lbs, err := tx.List(store.KindLoadBalancer, f)
	if err != nil {
		return nil, err
	}
	for _, r := range lbs {
		lb, err := decode[LoadBalancer](r)
		if err != nil {
			return nil, err
		}
		out[lb.ID] = &Tree{LB: lb}
	}
	if err := loadChildren(tx, f, out); err != nil {
		return nil, err
	}
	return out, loadSecurity(tx, f, out, sec)
}

// Trees returns every tree the caller may see (all projects for admins),
// ordered by creation; list endpoints filter and page over them.
func (s *Service) Trees(ctx context.Context) ([]*Tree, error) { return s.trees(ctx, nil) }

// trees loads every visible tree, with descendants of the given kinds
// only (all when nil).
func (s *Service) trees(ctx context.Context, kinds []store.Kind) ([]*Tree, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Tree
	err = s.st.View(ctx, func(tx store.ReadTx) error {
		out, err = visibleTrees(tx, c, kinds)
		return err
	})
	return out, err
}

// visibleTrees is trees in tx.
func visibleTrees(tx store.ReadTx, c identity.Caller, kinds []store.Kind) ([]*Tree, error) {
	f := visibleFilter(c)
	lbs, err := tx.List(store.KindLoadBalancer, f)
	if err != nil {
		return nil, err
	}
	var out []*Tree
	byLB := map[string]*Tree{}
	for _, r := range lbs {
		lb, err := decode[LoadBalancer](r)
		if err != nil {
			return nil, err
		}
		t := &Tree{LB: lb}
		byLB[lb.ID] = t
		out = append(out, t)
	}
	err = loadChildrenOf(tx, f, byLB, kinds)
	sort.SliceStable(out, func(i, j int) bool { return out[i].LB.CreatedAt < out[j].LB.CreatedAt })
	return out, err
}

// Member returns the member and whether it belongs to the pool.
func (t *Tree) Member(id string) *Member {
	for _, m := range t.Members {
		if m.ID == id {
			return m
		}
	}
	return nil
}

// Monitor returns a health monitor by id.
func (t *Tree) Monitor(id string) *HealthMonitor {
	for _, h := range t.Monitors {
		if h.ID == id {
			return h
		}
	}
	return nil
}

// Policy returns an L7 policy by id.
func (t *Tree) Policy(id string) *L7Policy {
	for _, p := range t.L7Policies {
		if p.ID == id {
			return p
		}
	}
	return nil
}

// Rule returns an L7 rule by id.
func (t *Tree) Rule(id string) *L7Rule {
	for _, r := range t.L7Rules {
		if r.ID == id {
			return r
		}
	}
	return nil
}

// Listener returns a listener by id.
func (t *Tree) Listener(id string) *Listener { return t.listener(id) }

// Pool returns a pool by id.
func (t *Tree) Pool(id string) *Pool { return t.pool(id) }

// PoolMembers returns a pool's members in creation order.
func (t *Tree) PoolMembers(poolID string) []*Member { return t.poolMembers(poolID) }

// PoolMonitor returns a pool's health monitor, or nil.
func (t *Tree) PoolMonitor(poolID string) *HealthMonitor { return t.poolMonitor(poolID) }

// ListenersOfPool returns the listeners that send traffic to the pool.
func (t *Tree) ListenersOfPool(poolID string) []*Listener { return t.listenersOfPool(poolID) }

// ListenerPolicies returns a listener's L7 policies by position.
func (t *Tree) ListenerPolicies(listenerID string) []*L7Policy { return t.listenerPolicies(listenerID) }

// PolicyRules returns an L7 policy's rules.
func (t *Tree) PolicyRules(policyID string) []*L7Rule { return t.policyRules(policyID) }

// PortSecurity is implemented by a VIPAllocator whose VIP ports may have
// security groups.
type PortSecurity interface {
	// VIPSecurity returns, by load balancer, the security rules of the
	// VIP ports of the load balancers f selects; load balancers whose
	// VIP port has no security groups in force are absent.
	VIPSecurity(tx store.ReadTx, f store.Filter) (map[string]*SecurityRules, error)
}

// loadSecurity gives the trees the security rules of their VIP ports
// (none without ps).
func loadSecurity(tx store.ReadTx, f store.Filter, trees map[string]*Tree, ps PortSecurity) error {
	if ps == nil {
		return nil
	}
	rules, err := ps.VIPSecurity(tx, f)
	if err != nil {
		return fmt.Errorf("security groups of VIP ports: %w", err)
	}
	for id, r := range rules {
		if t := trees[id]; t != nil {
			t.Security = r
		}
	}
	return nil
}

// Stats are the statistics of a load balancer or listener the caller may
// see, summed over every node's reports.
func (s *Service) Stats(ctx context.Context, kind store.Kind, id string) (store.Counts, error) {
	if _, err := s.Tree(ctx, kind, id); err != nil {
		return store.Counts{}, err
	}
	if kind == store.KindListener {
		return s.st.ListenerStats(ctx, id)
	}
	return s.st.LoadBalancerStats(ctx, id)
}
