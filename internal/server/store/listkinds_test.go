package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
)

// TestListKinds: one query over several kinds gives what List gives kind
// by kind, merged in creation order, on every engine (the memstore too,
// which the API tests run on), including records written earlier in the
// same transaction.
func TestListKinds(t *testing.T) {
	ctx := context.Background()
	engines := append(storetest.Engines(t), storetest.Engine{Name: "memstore", Store: memstore.New()})
	kinds := []store.Kind{store.KindListener, store.KindPool, store.KindMember}
	for _, e := range engines {
		t.Run(e.Name, func(t *testing.T) {
			var want []string
			for i := range 12 {
				kind := kinds[i%3]
				lb := []string{"lb1", "lb2"}[i%2]
				id := fmt.Sprintf("%s-%02d", kind, 11-i) // ids sort opposite to creation
				if _, err := e.Store.Update(ctx, func(tx store.Tx) error { return tx.Insert(rec(kind, id, lb, "{}")) }); err != nil {
					t.Fatal(err)
				}
				if lb == "lb1" && kind != store.KindMember {
					want = append(want, id)
				}
			}
			// A health monitor of lb1 is not asked for.
			if _, err := e.Store.Update(ctx, func(tx store.Tx) error {
				return tx.Insert(rec(store.KindHealthMonitor, "hm", "lb1", "{}"))
			}); err != nil {
				t.Fatal(err)
			}
			ids := func(rs []store.Record) []string {
				var out []string
				for _, r := range rs {
					out = append(out, r.ID)
				}
				return out
			}
			f := store.Filter{LoadBalancerID: "lb1"}
			if err := e.Store.View(ctx, func(tx store.ReadTx) error {
				got, err := tx.ListKinds([]store.Kind{store.KindListener, store.KindPool}, f)
				if err != nil {
					return err
				}
				if !slices.Equal(ids(got), want) {
					t.Errorf("ListKinds = %v, want %v", ids(got), want)
				}
				for _, k := range []store.Kind{store.KindListener, store.KindPool} {
					one, err := tx.List(k, f)
					if err != nil {
						return err
					}
					var sub []string
					for _, r := range got {
						if r.Kind == k {
							sub = append(sub, r.ID)
						}
					}
					if !slices.Equal(ids(one), sub) {
						t.Errorf("List(%s) = %v, ListKinds gives %v", k, ids(one), sub)
					}
				}
				none, err := tx.ListKinds(nil, f)
				if err != nil || len(none) != 0 {
					t.Errorf("ListKinds(no kinds) = %v, %v", none, err)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			// Within a write transaction its own inserts are seen.
			if _, err := e.Store.Update(ctx, func(tx store.Tx) error {
				if err := tx.Insert(rec(store.KindPool, "pool-new", "lb1", "{}")); err != nil {
					return err
				}
				got, err := tx.ListKinds([]store.Kind{store.KindPool, store.KindHealthMonitor}, f)
				if err != nil {
					return err
				}
				if n := len(got); n == 0 || got[n-1].ID != "pool-new" || !slices.Contains(ids(got), "hm") {
					t.Errorf("in the writing transaction: %v", ids(got))
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
