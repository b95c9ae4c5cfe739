package lbaas

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/octavia/fault"
	"github.com/flowlb/flowlb/internal/store"
)

// VIPAllocator gives load balancers their addresses, inside the caller's
// transaction so that an LB and its VIP commit or fail together.
type VIPAllocator interface {
	Allocate(tx store.Tx, r VIPRequest) (VIP, error)
	Release(tx store.Tx, portID string) error
}

// VIPRequest asks for an address on a subnet, network or existing port.
type VIPRequest struct {
	ProjectID, LoadBalancerID, SubnetID, NetworkID, PortID, Address string
}

// VIP is an allocated address.
type VIP struct {
	Address, PortID, SubnetID, NetworkID string
	// Owned is true when the port was created for this LB and must be
	// released with it.
	Owned bool
}

// Config holds the service's settings.
type Config struct {
	// DefaultProvider names the provider used when a create names none.
	DefaultProvider string
	// QuotaDefaults apply to projects without their own quota; -1 is unlimited.
	QuotaDefaults Quota
	// Unmeasured says that no data plane serves the VIPs (the noop network
	// of conformance runs): operating statuses then stay as created,
	// OFFLINE and members NO_MONITOR, as under Octavia's noop drivers,
	// instead of claiming ONLINE for traffic nothing forwards.
	Unmeasured bool
}

// Service implements the LBaaS operations.
type Service struct {
	st        store.Store
	vips      VIPAllocator
	providers map[string]Provider
	cfg       Config
	log       *slog.Logger
	now       func() time.Time

	mu       sync.Mutex
	waiters  map[string][]chan struct{}
	inflight sync.WaitGroup
}

// New builds a service; providers must include cfg.DefaultProvider.
func New(st store.Store, vips VIPAllocator, providers []Provider, cfg Config, log *slog.Logger) (*Service, error) {
	s := &Service{st: st, vips: vips, providers: map[string]Provider{}, cfg: cfg, log: log, now: time.Now, waiters: map[string][]chan struct{}{}}
	for _, p := range providers {
		s.providers[p.Name()] = p
	}
	if _, ok := s.providers[cfg.DefaultProvider]; !ok {
		return nil, fmt.Errorf("default provider %q is not configured", cfg.DefaultProvider)
	}
	return s, nil
}

// Providers lists the enabled providers, sorted by name.
func (s *Service) Providers() []Provider {
	out := make([]Provider, 0, len(s.providers))
	for _, p := range s.providers {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// Provider returns a provider by name, with Octavia's 400 when unknown.
func (s *Service) Provider(name string) (Provider, error) {
	p, ok := s.providers[name]
	if !ok {
		return nil, fault.BadRequest("Provider '%s' is not enabled.", name)
	}
	return p, nil
}

func (s *Service) timestamp() string { return s.now().UTC().Format(TimeFormat) }

func newID() string { return uuid.NewString() }

// caller returns the request's principal; a context without one is a
// programming error in the HTTP layer, answered as 500.
func caller(ctx context.Context) (identity.Caller, error) {
	c, ok := identity.FromContext(ctx)
	if !ok {
		return identity.Caller{}, errors.New("no caller in context")
	}
	return c, nil
}

// projectFor picks the project of a new object: the body's project_id if the
// caller may set it, else the caller's.
func projectFor(c identity.Caller, attrs map[string]any) (string, error) {
	p, _ := attrs["project_id"].(string)
	if p == "" {
		p, _ = attrs["tenant_id"].(string)
	}
	if p != "" && p != c.ProjectID && !c.IsAdmin {
		return "", fault.Forbidden()
	}
	if p == "" {
		p = c.ProjectID
	}
	if p == "" {
		return "", fault.BadRequest("Missing project ID in request where one is required.")
	}
	return p, nil
}

// visible reports whether the caller may see an object of project p;
// writable whether it may change one. Another project's object is
// forbidden (403), not hidden, as Octavia's policy checks answer.
func visible(c identity.Caller, p string) bool { return c.IsAdmin || c.ReadAll || c.ProjectID == p }

func writable(c identity.Caller, p string) bool { return c.IsAdmin || c.ProjectID == p }

// visibleFilter narrows a list to what the caller may see: its own
// project, or everything for those who read across projects (as visible).
func visibleFilter(c identity.Caller) store.Filter {
	if c.IsAdmin || c.ReadAll {
		return store.Filter{}
	}
	return store.Filter{ProjectID: c.ProjectID}
}

// apply sets attrs onto v through its JSON form: a present key replaces the
// field, an explicit null clears it. Keys that are not fields are ignored,
// so callers strip nested objects first.
func apply(v any, attrs map[string]any) error {
	cur, err := json.Marshal(v)
	if err != nil {
		return err
	}
	m := map[string]any{}
	if err := json.Unmarshal(cur, &m); err != nil {
		return err
	}
	maps.Copy(m, attrs)
	merged, err := json.Marshal(m)
	if err != nil {
		return err
	}
	// Unmarshal into a zeroed value so that nulls clear fields.
	rv := v
	switch x := rv.(type) {
	case *LoadBalancer:
		*x = LoadBalancer{}
	case *Listener:
		*x = Listener{}
	case *Pool:
		*x = Pool{}
	case *Member:
		lb := x.LoadBalancerID
		*x = Member{LoadBalancerID: lb}
	case *HealthMonitor:
		lb := x.LoadBalancerID
		*x = HealthMonitor{LoadBalancerID: lb}
	case *L7Policy:
		lb := x.LoadBalancerID
		*x = L7Policy{LoadBalancerID: lb}
	case *L7Rule:
		lb := x.LoadBalancerID
		*x = L7Rule{LoadBalancerID: lb}
	}
	if err := json.Unmarshal(merged, rv); err != nil {
		return fault.BadRequest("Invalid input: %v", err)
	}
	return nil
}

// without returns attrs minus the given keys.
func without(attrs map[string]any, keys ...string) map[string]any {
	out := maps.Clone(attrs)
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

// newBase fills the common fields of a new object.
func (s *Service) newBase(project string, attrs map[string]any) Base {
	b := Base{ID: newID(), ProjectID: project, ProvisioningStatus: PendingCreate, OperatingStatus: Offline, AdminStateUp: true, CreatedAt: s.timestamp(), Tags: []string{}}
	if v, ok := attrs["admin_state_up"].(bool); ok {
		b.AdminStateUp = v
	}
	return b
}

// touchUpdated stamps updated_at.
func (s *Service) touchUpdated(b *Base) {
	ts := s.timestamp()
	b.UpdatedAt = &ts
}

// lockedChange runs fn on the tree of lbID after the atomic test-and-set
// of the LB from ACTIVE to PENDING_UPDATE, the lock every child change
// takes; anything but ACTIVE is Octavia's "immutable" 409.
func (s *Service) lockedChange(ctx context.Context, lbID string, fn func(t *Tree, c identity.Caller) error) (*Tree, error) {
	return s.withLock(ctx, lbID, PendingUpdate, func(st string) error {
		if st != Active {
			return immutable(lbID)
		}
		return nil
	}, fn)
}

// withLock is every change's transaction: lock the LB row, load its tree,
// check that the caller may see it and that its status allows the change,
// move it to status `to`, apply fn, commit; then hand the committed
// revision to the provider.
func (s *Service) withLock(ctx context.Context, lbID, to string, allowed func(status string) error, fn func(t *Tree, c identity.Caller) error) (*Tree, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	var tree *Tree
	rev, err := s.st.Update(ctx, func(tx store.Tx) error {
		rec, err := tx.GetForUpdate(store.KindLoadBalancer, lbID)
		if errors.Is(err, store.ErrNotFound) {
			return fault.NotFound("Load Balancer", lbID)
		}
		if err != nil {
			return err
		}
		t, err := loadTree(tx, rec)
		if err != nil {
			return err
		}
		if !writable(c, t.LB.ProjectID) {
			return fault.Forbidden()
		}
		if err := allowed(t.LB.ProvisioningStatus); err != nil {
			return err
		}
		t.setStatus(t.LB, to)
		if err := fn(t, c); err != nil {
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

// commitChange is the end of every change: the provider refuses what it
// cannot serve (a delete needs no check), quotas are enforced on what the
// change creates, and the tree is written.
func (s *Service) commitChange(tx store.Tx, t *Tree) error {
	if t.LB.ProvisioningStatus != PendingDelete {
		p, err := s.Provider(t.LB.Provider)
		if err != nil {
			return err
		}
		if err := p.Check(t); err != nil {
			return err
		}
	}
	if err := s.checkQuotas(tx, t); err != nil {
		return err
	}
	return t.save(tx)
}

// realize hands a committed revision to the LB's provider and completes
// the tree when the provider reports back.
func (s *Service) realize(lbID, provider string, rev int64) {
	p := s.providers[provider]
	if p == nil {
		s.log.Error("load balancer names a provider that is not enabled", "loadbalancer", lbID, "provider", provider)
		return
	}
	s.inflight.Add(1)
	p.Realize(lbID, rev, func(err error) {
		defer s.inflight.Done()
		// A completion that fails (database busy or gone for a moment) is
		// retried; one that never lands is resumed at the next start.
		backoff := 10 * time.Millisecond
		for attempt := 1; ; attempt++ {
			cerr := s.complete(context.Background(), lbID, err)
			if cerr == nil {
				return
			}
			if attempt == 5 {
				s.log.Error("complete provisioning", "loadbalancer", lbID, "revision", rev, "err", cerr)
				return
			}
			time.Sleep(backoff)
			backoff *= 4
		}
	})
}

// complete moves a tree out of PENDING_*: created and updated objects become
// ACTIVE (ERROR if the provider failed), deleted ones are removed, and
// operating statuses are recomputed.
func (s *Service) complete(ctx context.Context, lbID string, perr error) error {
	_, err := s.st.Update(ctx, func(tx store.Tx) error {
		rec, err := tx.GetForUpdate(store.KindLoadBalancer, lbID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		t, err := loadTree(tx, rec)
		if err != nil {
			return err
		}
		final := Active
		if perr != nil {
			final = Error
			s.log.Warn("provider failed", "loadbalancer", lbID, "err", perr)
		}
		if t.LB.ProvisioningStatus == PendingDelete && perr == nil {
			return s.purge(tx, t)
		}
		for _, o := range t.objects() {
			switch o.base().ProvisioningStatus {
			case PendingDelete:
				if perr == nil {
					t.remove(o)
				} else {
					t.setStatus(o, Error)
				}
			case PendingCreate, PendingUpdate:
				// Octavia stamps updated_at when the driver reports.
				t.setStatus(o, final)
				s.touchUpdated(o.base())
			}
		}
		s.rollUp(t)
		return t.save(tx)
	})
	if err == nil {
		s.notify(lbID)
	}
	return err
}

// purge removes a deleted LB's whole tree and releases its VIP ports.
func (s *Service) purge(tx store.Tx, t *Tree) error {
	for _, o := range t.objects()[1:] {
		t.remove(o)
	}
	if err := t.save(tx); err != nil {
		return err
	}
	if t.LB.OwnsVIPPort && s.vips != nil {
		if err := s.vips.Release(tx, t.LB.VIPPortID); err != nil {
			return fmt.Errorf("release VIP port of %s: %w", t.LB.ID, err)
		}
	}
	for _, av := range t.LB.AdditionalVIPs {
		if av.PortID != "" && s.vips != nil {
			if err := s.vips.Release(tx, av.PortID); err != nil {
				return fmt.Errorf("release additional VIP port of %s: %w", t.LB.ID, err)
			}
		}
	}
	return tx.Delete(store.KindLoadBalancer, t.LB.ID)
}

// WaitSettled blocks until the LB has been completed at least once after the
// call, or ctx ends. Tests and benchmarks use it instead of polling.
func (s *Service) WaitSettled(ctx context.Context, lbID string) error {
	ch := make(chan struct{})
	s.mu.Lock()
	s.waiters[lbID] = append(s.waiters[lbID], ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Service) notify(lbID string) {
	s.mu.Lock()
	ws := s.waiters[lbID]
	delete(s.waiters, lbID)
	s.mu.Unlock()
	for _, ch := range ws {
		close(ch)
	}
}

// Drain waits until every change handed to a provider has completed, or
// ctx ends; a server calls it before closing the store on shutdown. A
// change still pending then stays PENDING_* in the store and is completed
// by Resume at the next start.
func (s *Service) Drain(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// CountByStatus counts objects by kind, provisioning and operating status.
func (s *Service) CountByStatus(ctx context.Context) (map[[3]string]int, error) {
	ctx = identity.WithCaller(ctx, identity.Caller{IsAdmin: true})
	trees, err := s.Trees(ctx)
	if err != nil {
		return nil, err
	}
	out := map[[3]string]int{}
	for _, t := range trees {
		for _, o := range t.objects() {
			b := o.base()
			out[[3]string{string(o.kind()), b.ProvisioningStatus, b.OperatingStatus}]++
		}
	}
	return out, nil
}

// Resume hands every tree left in a PENDING_* state (a server stopped
// between commit and completion) back to its provider, so no change is
// stuck after a restart.
func (s *Service) Resume(ctx context.Context) (int, error) {
	var pending []*Tree
	var rev int64
	err := s.st.View(ctx, func(tx store.ReadTx) error {
		recs, err := tx.List(store.KindLoadBalancer, store.Filter{})
		if err != nil {
			return err
		}
		for _, r := range recs {
			lb, err := decode[LoadBalancer](r)
			if err != nil {
				return err
			}
			switch lb.ProvisioningStatus {
			case PendingCreate, PendingUpdate, PendingDelete:
				pending = append(pending, &Tree{LB: lb})
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if rev, err = s.st.Revision(ctx); err != nil {
		return 0, err
	}
	for _, t := range pending {
		s.realize(t.LB.ID, t.LB.Provider, rev)
	}
	return len(pending), nil
}
