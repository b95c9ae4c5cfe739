package lbaas

import (
	"errors"
	"sync"
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// TestCreatesThroughAGroupedStore: creates made at once through a store
// that groups its changes (a Grouped memstore; SQLite groups its own)
// each get their own answer: the domain's conflict for those whose VIP
// subnet is exhausted, found only in the transaction, and for the others
// a load balancer pending with this replica as owner, which completes.
func TestCreatesThroughAGroupedStore(t *testing.T) {
	eachEngine(t, func(t *testing.T, st store.Store) {
		if _, ok := st.(*memstore.Store); ok {
			st = store.NewGrouped(st, nil)
		}
		e := newEnv(t, false, st)
		const n = 24
		bad := func(i int) bool { return i%7 == 3 }
		trees := make([]*Tree, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			r := fullLB(t)
			if bad(i) {
				r.VIPSubnetID = "exhausted"
			}
			wg.Go(func() { trees[i], errs[i] = e.svc.CreateLoadBalancer(e.ctx, r) })
		}
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
			if _, err := st.Update(e.ctx, func(tx store.Tx) error {
				p, ok, err := tx.Pending(id)
				if err == nil && (!ok || p.Owner != e.svc.cfg.Replica) {
					t.Errorf("%s: pending %+v (%v), want one of this replica", id, p, ok)
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		e.prov.finish(nil)
		for id := range ids {
			e.waitActive(id)
		}
	})
}
