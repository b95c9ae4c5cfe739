package store_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/store"
	"github.com/flowlb/flowlb/internal/store/memstore"
	"github.com/flowlb/flowlb/internal/store/storetest"
	"github.com/flowlb/flowlb/internal/testutil"
)

// TestStats: reports from several nodes add up per listener and load
// balancer; a node's later report replaces its open connections, and a
// stale one stops counting.
func TestStats(t *testing.T) {
	ctx := context.Background()
	engines := append(storetest.Engines(t), storetest.Engine{Name: "memstore", Store: memstore.New()})
	for _, e := range engines {
		t.Run(e.Name, func(t *testing.T) {
			s := e.Store
			lc := func(l, lb string, in, out, total, errs, active int64) store.ListenerCounts {
				return store.ListenerCounts{ListenerID: l, LoadBalancerID: lb, Counts: store.Counts{BytesIn: in, BytesOut: out, TotalConnections: total, RequestErrors: errs, ActiveConnections: active}}
			}
			check := func(what string, got store.Counts, err error, want store.Counts) {
				t.Helper()
				if err != nil || got != want {
					t.Errorf("%s: %+v (%v), want %+v", what, got, err, want)
				}
			}
			if got, err := s.ListenerStats(ctx, "l1"); err != nil || got != (store.Counts{}) {
				t.Errorf("no reports: %+v %v", got, err)
			}
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			_, err := s.Update(ctx, func(tx store.Tx) error {
				for _, l := range []string{"l1", "l2", "gone"} {
					if err := tx.Insert(rec(store.KindListener, l, "lb", "{}")); err != nil {
						return err
					}
				}
				return nil
			})
			must(err)
			must(s.AddStats(ctx, "n1", []store.ListenerCounts{lc("l1", "lb", 100, 200, 3, 1, 2), lc("l2", "lb", 10, 20, 1, 0, 0),
				lc("gone", "lb", 1, 1, 1, 0, 0)}, time.Minute))
			// A listener deleted: its counts no longer show, and a report
			// in flight for it is dropped.
			_, err = s.Update(ctx, func(tx store.Tx) error { return tx.Delete(store.KindListener, "gone") })
			must(err)
			must(s.AddStats(ctx, "n2", []store.ListenerCounts{lc("gone", "lb", 1, 1, 1, 0, 0)}, time.Minute))
			must(s.AddStats(ctx, "n2", []store.ListenerCounts{lc("l1", "lb", 1, 2, 1, 0, 5)}, time.Minute))
			must(s.AddStats(ctx, "n1", []store.ListenerCounts{lc("l1", "lb", 1000, 2000, 4, 0, 1)}, time.Minute))
			got, err := s.ListenerStats(ctx, "l1")
			check("l1", got, err, store.Counts{BytesIn: 1101, BytesOut: 2202, TotalConnections: 8, RequestErrors: 1, ActiveConnections: 6})
			got, err = s.LoadBalancerStats(ctx, "lb")
			// The load balancer keeps what its deleted listener counted:
			// its counters never go back.
			check("lb", got, err, store.Counts{BytesIn: 1112, BytesOut: 2223, TotalConnections: 10, RequestErrors: 1, ActiveConnections: 6})
			got, err = s.LoadBalancerStats(ctx, "other")
			check("other", got, err, store.Counts{})
			all, err := s.AllStats(ctx)
			if want := []store.ListenerCounts{lc("l1", "lb", 1101, 2202, 8, 1, 6), lc("l2", "lb", 10, 20, 1, 0, 0)}; err != nil || !reflect.DeepEqual(all, want) {
				t.Errorf("all: %+v %v, want %+v", all, err, want)
			}
			// n2 reports nothing open, n1's report goes stale.
			must(s.AddStats(ctx, "n2", nil, time.Minute))
			must(s.AddStats(ctx, "n1", []store.ListenerCounts{lc("l1", "lb", 0, 0, 0, 0, 7)}, time.Millisecond))
			testutil.Eventually(t, 5*time.Second, "stale open connections", func() (bool, string) {
				got, err := s.ListenerStats(ctx, "l1")
				return err == nil && got.ActiveConnections == 0 && got.TotalConnections == 8, fmt.Sprintf("%+v %v", got, err)
			})
		})
	}
}
