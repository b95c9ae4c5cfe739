package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
)

// TestLastChange: on SQLite, the one writer, every logged change of a
// load balancer is its last change, also one that touched several, and
// one that did not touch it leaves it; PostgreSQL never claims to know,
// since other replicas write too.
func TestLastChange(t *testing.T) {
	ctx := context.Background()
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			s := e.Store.(*store.SQL)
			touch := func(lbs ...string) store.Commit {
				t.Helper()
				c, err := s.Update(ctx, func(tx store.Tx) error {
					for _, lb := range lbs {
						tx.Touch(lb)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			first := touch("a", "b")
			second := touch("b")
			if _, err := s.Update(ctx, func(tx store.Tx) error {
				tx.Touch("a")
				return errors.New("refused")
			}); err == nil {
				t.Fatal("a refused transaction committed")
			}
			want := map[string]int64{"a": first.Changes["a"], "b": second.Changes["b"]}
			for lb, c := range want {
				got, known := s.LastChange(lb)
				if e.Name == "sqlite" && (!known || got != c) {
					t.Errorf("%s: last change %d (%v), want %d", lb, got, known, c)
				}
				if e.Name != "sqlite" && known {
					t.Errorf("%s: last change %d known on %s", lb, got, e.Name)
				}
			}
			if _, known := s.LastChange("never"); known {
				t.Error("a load balancer never changed has a last change")
			}
		})
	}
}
