package lbaas

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// listingStore records the kinds its read transactions list.
type listingStore struct {
	store.Store
	mu    sync.Mutex
	kinds []store.Kind
}

type listingTx struct {
	store.ReadTx
	s *listingStore
}

func (l listingTx) List(kind store.Kind, f store.Filter) ([]store.Record, error) {
	l.s.mu.Lock()
	l.s.kinds = append(l.s.kinds, kind)
	l.s.mu.Unlock()
	return l.ReadTx.List(kind, f)
}

func (l listingTx) ListKinds(kinds []store.Kind, f store.Filter) ([]store.Record, error) {
	l.s.mu.Lock()
	l.s.kinds = append(l.s.kinds, kinds...)
	l.s.mu.Unlock()
	return l.ReadTx.ListKinds(kinds, f)
}

func (l *listingStore) View(ctx context.Context, fn func(tx store.ReadTx) error) error {
	return l.Store.View(ctx, func(tx store.ReadTx) error { return fn(listingTx{tx, l}) })
}

func (l *listingStore) take() []store.Kind {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.kinds
	l.kinds = nil
	slices.Sort(k)
	return slices.Compact(k)
}

// TestLoadBalancerReadsNoMembers: showing and listing load balancers
// reads their listeners and pools (whose ids the body holds) and no
// member, monitor or policy, which a large load balancer has thousands
// of; the full tree still reads them all.
func TestLoadBalancerReadsNoMembers(t *testing.T) {
	ls := &listingStore{Store: memstore.New()}
	e := newEnv(t, true, ls)
	tree, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t))
	if err != nil {
		t.Fatal(err)
	}
	ls.take()

	shallow := []store.Kind{store.KindListener, store.KindPool}
	got, err := e.svc.LoadBalancer(e.ctx, tree.LB.ID)
	if err != nil {
		t.Fatal(err)
	}
	if k := ls.take(); !slices.Equal(k, shallow) {
		t.Errorf("showing a load balancer listed %v, want %v", k, shallow)
	}
	if len(got.Listeners) != 1 || len(got.Pools) != 1 || len(got.Members) != 0 || got.LB.ID != tree.LB.ID {
		t.Errorf("shown tree: %d listeners, %d pools, %d members; want 1, 1, 0", len(got.Listeners), len(got.Pools), len(got.Members))
	}
	alone, err := e.svc.LoadBalancerAlone(e.ctx, tree.LB.ID)
	if err != nil {
		t.Fatal(err)
	}
	if k := ls.take(); len(k) != 0 {
		t.Errorf("the load balancer alone listed %v, want nothing", k)
	}
	if alone.LB.ID != tree.LB.ID || alone.LB.VIPAddress != tree.LB.VIPAddress || len(alone.Listeners)+len(alone.Pools) != 0 {
		t.Errorf("the load balancer alone: %+v with %d listeners, %d pools", alone.LB, len(alone.Listeners), len(alone.Pools))
	}
	for _, q := range []struct{ id, name string }{{"", ""}, {tree.LB.ID, ""}} {
		list, err := e.svc.LoadBalancers(e.ctx, q.id, q.name)
		if err != nil {
			t.Fatal(err)
		}
		if k, want := ls.take(), []store.Kind{store.KindListener, store.KindLoadBalancer, store.KindPool}; !slices.Equal(k, want) {
			t.Errorf("listing load balancers (id %q) listed %v, want %v", q.id, k, want)
		}
		if len(list) != 1 || len(list[0].Listeners) != 1 || len(list[0].Pools) != 1 {
			t.Errorf("listing load balancers (id %q): %d trees, want 1 with its listener and pool", q.id, len(list))
		}
	}
	full, err := e.svc.Tree(e.ctx, store.KindLoadBalancer, tree.LB.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(full.Members) != 2 || len(full.Monitors) != 1 {
		t.Errorf("full tree: %d members, %d monitors; want 2, 1", len(full.Members), len(full.Monitors))
	}
	if k := ls.take(); len(k) < 7 {
		t.Errorf("the full tree listed %v, want every kind", k)
	}
}
