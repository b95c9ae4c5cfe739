package lbaas

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// A change's life: one transaction locks the load balancer (moving it out
// of ACTIVE, Octavia's only lock), applies the change to its tree, has the
// provider check it, enforces quotas and commits, recording the change as
// pending with this replica as its owner; the provider then realizes it
// and reports, and a second transaction completes the tree (PENDING_* to
// ACTIVE, or removed) if the change is still this replica's. A replica
// that dies leaves its pending changes to the others (Resume).

// change edits a locked tree; c is the caller.
type change func(t *Tree, c identity.Caller) error

// lockedChange runs fn on the tree of lbID after the atomic test-and-set
// of the LB from ACTIVE to PENDING_UPDATE, the lock every child change
// takes; anything but ACTIVE is Octavia's "immutable" conflict.
func (s *Service) lockedChange(ctx context.Context, lbID string, fn change) (*Tree, error) {
	return s.withLock(ctx, lbID, PendingUpdate, func(st string) error {
		if st != Active {
			return immutable(lbID)
		}
		return nil
	}, fn)
}

// childChange locks the LB of (kind, id) and runs fn; a vanished object
// is not found.
func (s *Service) childChange(ctx context.Context, kind store.Kind, id string, fn change) (*Tree, error) {
	lbID, err := s.lbOf(ctx, kind, id)
	if err != nil {
		return nil, err
	}
	return s.lockedChange(ctx, lbID, fn)
}

// lbChange is the lock for operations on the LB itself: Octavia allows an
// update only from ACTIVE and a delete from ACTIVE or ERROR, with an
// "Invalid state" conflict otherwise.
func (s *Service) lbChange(ctx context.Context, id, to string, fn change) (*Tree, error) {
	return s.withLock(ctx, id, to, func(st string) error {
		if st != Active && !(to == PendingDelete && st == ProvisioningError) {
			return invalidState(st, "loadbalancer", id)
		}
		return nil
	}, fn)
}

// withLock is every change's transaction: lock the LB row, load its tree,
// check that the caller may change it and that its status allows the
// change, move it to status `to`, apply fn, commit; then hand the change
// to the provider.
func (s *Service) withLock(ctx context.Context, lbID, to string, allowed func(status string) error, fn change) (*Tree, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	return s.commit(ctx, func(tx store.Tx) (*Tree, error) {
		rec, err := tx.GetForUpdate(store.KindLoadBalancer, lbID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, NotFound(resourceName[store.KindLoadBalancer], lbID)
		}
		if err != nil {
			return nil, err
		}
		t, err := loadTree(tx, rec)
		if err != nil {
			return nil, err
		}
		if !writable(c, t.LB.ProjectID) {
			return nil, Forbidden()
		}
		if err := allowed(t.LB.ProvisioningStatus); err != nil {
			return nil, err
		}
		t.namesIDs = c.IsAdmin
		t.setStatus(t.LB, to)
		return t, fn(t, c)
	})
}

// commit is one change's transaction: build yields the changed tree, which
// the provider checks, quotas bound and the store keeps, pending with this
// replica as owner; once committed, the provider realizes it. The store
// runs the change its way (store.Changes: alone, or sharing a transaction
// with the changes beside it, each as if alone) and may keep the tree for
// the change's completion.
func (s *Service) commit(ctx context.Context, build func(tx store.Tx) (*Tree, error)) (*Tree, error) {
	began := time.Now()
	changes := store.ChangesOf(s.st)
	var tree *Tree
	c, err := changes.Change(ctx, func(tx store.Tx) error {
		t, err := s.commitIn(ctx, tx, build)
		tree = t // a change run again builds it again
		return err
	})
	if err != nil {
		return nil, err
	}
	p := store.Pending{LoadBalancerID: tree.LB.ID, Owner: s.cfg.Replica, Change: c.Changes[tree.LB.ID]}
	changes.Keep(p, func() any { return tree.clone() })
	if s.cfg.Written != nil && p.Change != 0 {
		s.cfg.Written(Written{Entry: p.Change, Tree: tree, Began: began, FreshPorts: tree.freshPorts})
	}
	s.realize(p, tree.LB.Provider, tree)
	return tree, nil
}

// commitIn is a change's work within tx; ctx is its request's.
func (s *Service) commitIn(ctx context.Context, tx store.Tx, build func(tx store.Tx) (*Tree, error)) (*Tree, error) {
	who, _ := identity.FromContext(ctx)
	t, err := build(tx)
	if err != nil {
		return nil, err
	}
	if err := t.checkNamedIDs(tx); err != nil {
		return nil, err
	}
	if err := s.checkMemberSubnets(tx, t, who); err != nil {
		return nil, err
	}
	if err := s.commitChange(tx, t); err != nil {
		return nil, err
	}
	tx.Pend(t.LB.ID, s.cfg.Replica)
	return t, nil
}

// commitChange is the end of every change: the provider refuses what it
// cannot serve (a delete needs no check), quotas are enforced on what the
// change creates, new listeners may not take another load balancer's VIP
// port (vipports.go), and the tree is written.
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
	if err := s.checkVIPPorts(tx, t); err != nil {
		return err
	}
	return t.save(tx)
}

// A completion is tried completeAttempts times, and more while the
// database is unavailable, at most completeBackoff apart.
const (
	completeAttempts = 5
	completeBackoff  = 500 * time.Millisecond
)

// realize hands a pending change to the LB's provider and completes the
// tree when the provider reports back. t is the change's tree: its VIP
// ports' security group is brought to its listeners meanwhile, and a
// failure there fails the change as the provider's would.
func (s *Service) realize(p store.Pending, provider string, t *Tree) {
	prov := s.providers[provider]
	if prov == nil {
		s.log.Error("load balancer names a provider that is not enabled", "loadbalancer", p.LoadBalancerID, "provider", provider)
		return
	}
	s.inflight.Add(1)
	s.realizingMu.Lock()
	s.realizing[p] = struct{}{}
	s.realizingMu.Unlock()
	group := s.syncVIPGroup(t)
	prov.Realize(p.LoadBalancerID, p.Change, func(err error) {
		defer s.inflight.Done()
		defer func() {
			s.realizingMu.Lock()
			delete(s.realizing, p)
			s.realizingMu.Unlock()
		}()
		if group != nil {
			err = errors.Join(err, <-group)
		}
		// A completion that fails (database busy) is retried, and retried
		// for as long as the database is unreachable: nobody else would
		// complete it, since Resume takes over only the changes of
		// replicas that died, and this one lives on. One that fails
		// otherwise stays pending, with this replica as owner, until a
		// replica takes it over.
		backoff := 10 * time.Millisecond
		for attempt := 1; ; attempt++ {
			cerr := s.completeGrouped(context.Background(), p, err)
			if cerr == nil {
				return
			}
			if attempt >= completeAttempts && !errors.Is(cerr, store.ErrUnavailable) {
				s.log.Error("complete provisioning", "loadbalancer", p.LoadBalancerID, "err", cerr)
				return
			}
			if attempt == completeAttempts {
				s.log.Warn("complete provisioning: database unavailable, retrying until it is back", "loadbalancer", p.LoadBalancerID, "err", cerr)
			}
			time.Sleep(backoff)
			backoff = min(4*backoff, completeBackoff)
		}
	})
}

// complete moves a tree out of PENDING_*, if its pending change is still
// p: created and updated objects become ACTIVE (ERROR if the provider
// failed), deleted ones are removed, and operating statuses are
// recomputed. A change another replica has taken over is its to complete.
func (s *Service) complete(ctx context.Context, p store.Pending, perr error) error {
	_, err := s.st.Update(ctx, func(tx store.Tx) error { return s.completeIn(tx, p, perr) })
	return err
}

// completeIn is complete's work within tx. It starts from the tree p
// built if the store kept it and nothing changed the load balancer since
// (taken first, so that a completion that returns early leaves nothing
// kept), else from the tree read back.
func (s *Service) completeIn(tx store.Tx, p store.Pending, perr error) error {
	kept, fromBuilt := store.ChangesOf(s.st).Built(tx, p)
	t, _ := kept.(*Tree)
	fromBuilt = fromBuilt && t != nil
	rec, err := tx.GetForUpdate(store.KindLoadBalancer, p.LoadBalancerID)
	gone := errors.Is(err, store.ErrNotFound)
	if err != nil && !gone {
		return err
	}
	cur, ok, err := tx.Pending(p.LoadBalancerID)
	if err != nil {
		return err
	}
	if !ok || cur != p {
		s.log.Info("pending change no longer ours; not completing", "loadbalancer", p.LoadBalancerID, "change", p.Change, "now", cur)
		return nil
	}
	if err := tx.Settle(p); err != nil || gone {
		return err
	}
	if !fromBuilt {
		if t, err = loadTree(tx, rec); err != nil {
			return err
		}
	}
	if perr != nil {
		s.log.Warn("provider failed", "loadbalancer", p.LoadBalancerID, "err", perr)
	}
	if t.LB.ProvisioningStatus == PendingDelete && perr == nil {
		return s.purge(tx, t)
	}
	s.settle(t, perr)
	s.rollUp(t)
	if s.cfg.FlowsUnchanged != nil && s.cfg.FlowsUnchanged(p.LoadBalancerID, p.Change, t) {
		return t.saveUnlogged(tx)
	}
	return t.save(tx)
}

// settle ends the pending states of a tree whose change the provider
// realized (perr nil) or failed.
func (s *Service) settle(t *Tree, perr error) {
	final := Active
	if perr != nil {
		final = ProvisioningError
	}
	var gone []object
	for _, o := range t.objects() {
		switch o.base().ProvisioningStatus {
		case PendingDelete:
			if perr == nil {
				gone = append(gone, o)
			} else {
				t.setStatus(o, ProvisioningError)
			}
		case PendingCreate, PendingUpdate:
			// Octavia stamps updated_at when the driver reports.
			t.setStatus(o, final)
			s.touchUpdated(o.base())
		}
	}
	t.remove(gone...)
	// Octavia renumbers a listener's policies once one of them is
	// deleted: positions stay dense from 1, in the same order.
	for _, o := range gone {
		if p, ok := o.(*L7Policy); ok && t.listener(p.ListenerID) != nil {
			t.densePolicies(p.ListenerID)
		}
	}
}

// purge removes a deleted LB's whole tree and releases its VIP ports.
func (s *Service) purge(tx store.Tx, t *Tree) error {
	t.remove(t.objects()[1:]...)
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
	if err := s.releaseVIPGroup(tx, t.LB); err != nil {
		return err
	}
	return tx.Delete(store.KindLoadBalancer, t.LB.ID)
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

// Resume takes over the pending changes of replicas that are gone (or,
// at a restart, of this process's earlier life) and hands them to their
// providers, so that no change stays pending because its owner died. It
// returns how many it took.
func (s *Service) Resume(ctx context.Context) (int, error) {
	taken, err := s.st.TakeOver(ctx, s.cfg.Replica)
	if err != nil || len(taken) == 0 {
		return 0, err
	}
	// The trees as their changes committed them: the load balancers
	// stay locked until the changes complete.
	trees := map[string]*Tree{}
	err = s.st.View(ctx, func(tx store.ReadTx) error {
		for _, p := range taken {
			rec, err := tx.Get(store.KindLoadBalancer, p.LoadBalancerID)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			t, err := loadTreeOf(tx, rec, []store.Kind{store.KindListener})
			if err != nil {
				return err
			}
			trees[p.LoadBalancerID] = t
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	resumed := 0
	for _, p := range taken {
		if s.isRealizing(p) {
			// Its own change, taken back after this replica's lease
			// lapsed (a stalled database writer, a starved process): its
			// provider has it and its completion is on the way.
			continue
		}
		resumed++
		t, ok := trees[p.LoadBalancerID]
		if !ok {
			// The load balancer is gone: nothing to realize, only the
			// pending record to close.
			if err := s.complete(ctx, p, nil); err != nil {
				return 0, err
			}
			continue
		}
		s.log.Info("resuming a pending change", "loadbalancer", p.LoadBalancerID, "change", p.Change)
		s.realize(p, t.LB.Provider, t)
	}
	return resumed, nil
}

// isRealizing says whether this process handed p to a provider and has
// not completed it yet.
func (s *Service) isRealizing(p store.Pending) bool {
	s.realizingMu.Lock()
	defer s.realizingMu.Unlock()
	_, ok := s.realizing[p]
	return ok
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

// immutable is Octavia's conflict for a child change while the LB is busy.
func immutable(lbID string) error {
	return Conflict("Load Balancer %s is immutable and cannot be updated.", lbID)
}

func invalidState(status, resource, id string) error {
	return Conflict("Invalid state %s of %s resource %s", status, resource, id)
}
