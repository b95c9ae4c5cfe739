package lbaas

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/store"
	"github.com/flowlb/flowlb/internal/store/memstore"
	"github.com/flowlb/flowlb/internal/store/storetest"
	"github.com/flowlb/flowlb/internal/testutil"
)

// gatedStore is a single-writer store whose first write transaction
// waits for open, and which counts its write transactions.
type gatedStore struct {
	store.Store
	open    chan struct{}
	first   sync.Once
	updates atomic.Int64
}

func (g *gatedStore) SingleWriter() bool { return true }

func (g *gatedStore) Update(ctx context.Context, fn func(tx store.Tx) error) (store.Commit, error) {
	g.updates.Add(1)
	g.first.Do(func() { <-g.open })
	return g.Store.Update(ctx, fn)
}

// TestSingleWriterGroupsCommits: on a single-writer store, changes that
// wait for the writer together are committed in one transaction, each
// with its own pending change; one that fails there (its VIP subnet
// exhausted, found only in the transaction) gets its own error and the
// others of its group commit.
func TestSingleWriterGroupsCommits(t *testing.T) {
	engines := []struct {
		name string
		st   store.Store
	}{{"memory", memstore.New()}}
	for _, e := range storetest.Engines(t) {
		if e.Name == "sqlite" {
			engines = append(engines, struct {
				name string
				st   store.Store
			}{e.Name, e.Store})
		}
	}
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			g := &gatedStore{Store: eng.st, open: make(chan struct{})}
			e := newEnv(t, false, g)
			// Two fail, both in the first group: it is retried one by one,
			// the second group commits at once.
			const n, failing = 24, 2
			bad := func(i int) bool { return i == 5 || i == 10 }
			trees := make([]*Tree, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			// The first takes the writer and holds it until every other
			// change waits in the queue.
			wg.Go(func() { trees[0], errs[0] = e.svc.CreateLoadBalancer(e.ctx, fullLB(t)) })
			testutil.Eventually(t, 5*time.Second, "the first commit under way", func() (bool, string) {
				return g.updates.Load() == 1, ""
			})
			for i := 1; i < n; i++ {
				r := fullLB(t)
				if bad(i) {
					r.VIPSubnetID = "exhausted"
				}
				wg.Go(func() { trees[i], errs[i] = e.svc.CreateLoadBalancer(e.ctx, r) })
				// One at a time, so that the queue's order is theirs.
				testutil.Eventually(t, 5*time.Second, "change queued", func() (bool, string) {
					e.svc.commits.mu.Lock()
					defer e.svc.commits.mu.Unlock()
					return len(e.svc.commits.queue) == i, ""
				})
			}
			close(g.open)
			wg.Wait()

			ids := map[string]bool{}
			for i := range n {
				if bad(i) {
					if !errors.Is(errs[i], ErrConflict) {
						t.Errorf("create %d on an exhausted subnet: %v, want its conflict", i, errs[i])
					}
					continue
				}
				if errs[i] != nil {
					t.Fatalf("create %d: %v", i, errs[i])
				}
				id := trees[i].LB.ID
				if ids[id] {
					t.Fatalf("load balancer %s answered twice", id)
				}
				ids[id] = true
				if got := e.status(store.KindLoadBalancer, id); got != PendingCreate {
					t.Errorf("%s is %s, want PENDING_CREATE", id, got)
				}
				if _, err := g.Store.Update(context.Background(), func(tx store.Tx) error { // not counted
					p, ok, err := tx.Pending(id)
					if err == nil && (!ok || p.Owner != e.svc.cfg.Replica) {
						t.Errorf("%s: pending %+v (%v), want one of this replica", id, p, ok)
					}
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			// The first alone, then a group of 16 that failed and its 16
			// one by one, then a group of 7: 19.
			if u := g.updates.Load(); u != 19 {
				t.Errorf("%d write transactions for %d changes, want 19", u, n)
			}
			var stored int
			if err := g.View(context.Background(), func(tx store.ReadTx) (err error) {
				stored, err = tx.Count(store.KindLoadBalancer, store.Filter{})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if stored != n-failing {
				t.Errorf("%d load balancers stored, want %d", stored, n-failing)
			}
			// Each completes as usual.
			e.prov.finish(nil)
			for id := range ids {
				e.waitActive(id)
			}
		})
	}
}

// TestQueuedCommitPanicStaysWithItsRequest: a change whose work panics in
// a shared transaction panics in its own request's goroutine (where
// net/http would recover it), not in the runner's, and the changes
// beside it commit.
func TestQueuedCommitPanicStaysWithItsRequest(t *testing.T) {
	g := &gatedStore{Store: memstore.New(), open: make(chan struct{})}
	e := newEnv(t, true, g)
	var wg sync.WaitGroup
	var first, after *Tree
	var firstErr, afterErr error
	wg.Go(func() { first, firstErr = e.svc.CreateLoadBalancer(e.ctx, lbReq(t, "")) })
	testutil.Eventually(t, 5*time.Second, "the first commit under way", func() (bool, string) {
		return g.updates.Load() == 1, ""
	})
	queued := func(n int) {
		testutil.Eventually(t, 5*time.Second, "change queued", func() (bool, string) {
			e.svc.commits.mu.Lock()
			defer e.svc.commits.mu.Unlock()
			return len(e.svc.commits.queue) == n, ""
		})
	}
	var recovered any
	wg.Go(func() {
		defer func() { recovered = recover() }()
		_, _ = e.svc.commit(e.ctx, func(store.Tx) (*Tree, error) { panic("boom") })
	})
	queued(1)
	wg.Go(func() { after, afterErr = e.svc.CreateLoadBalancer(e.ctx, lbReq(t, "")) })
	queued(2)
	close(g.open)
	wg.Wait()
	if recovered != "boom" {
		t.Errorf("the panicking change's goroutine recovered %v, want boom", recovered)
	}
	if firstErr != nil || afterErr != nil {
		t.Fatalf("the other changes: %v, %v", firstErr, afterErr)
	}
	e.waitActive(first.LB.ID)
	e.waitActive(after.LB.ID)
}
