package store_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
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
			// The load balancer sums its existing listeners, as Octavia
			// does: not what its deleted listener counted.
			check("lb", got, err, store.Counts{BytesIn: 1111, BytesOut: 2222, TotalConnections: 9, RequestErrors: 1, ActiveConnections: 6})
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

// TestMemberStats: members' counts from several nodes and listeners add
// up per member, grow monotonically with each report (an agent restarted
// sends deltas, never totals), and are listed per load balancer; a
// deleted member's, or one never created, are not.
func TestMemberStats(t *testing.T) {
	ctx := context.Background()
	engines := append(storetest.Engines(t), storetest.Engine{Name: "memstore", Store: memstore.New()})
	for _, e := range engines {
		t.Run(e.Name, func(t *testing.T) {
			s := e.Store
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			_, err := s.Update(ctx, func(tx store.Tx) error {
				for _, r := range []store.Record{rec(store.KindListener, "l1", "lb", "{}"), rec(store.KindListener, "l2", "lb", "{}"),
					rec(store.KindListener, "l3", "lb2", "{}"), rec(store.KindMember, "m1", "lb", "{}"), rec(store.KindMember, "m2", "lb", "{}"),
					rec(store.KindMember, "m3", "lb2", "{}"), rec(store.KindMember, "gone", "lb", "{}")} {
					if err := tx.Insert(r); err != nil {
						return err
					}
				}
				return nil
			})
			must(err)
			mc := func(id, lb string, in, out, total int64) store.MemberCounts {
				return store.MemberCounts{MemberID: id, LoadBalancerID: lb, BytesIn: in, BytesOut: out, TotalConnections: total}
			}
			report := func(node, l, lb string, ms ...store.MemberCounts) {
				t.Helper()
				must(s.AddStats(ctx, node, []store.ListenerCounts{{ListenerID: l, LoadBalancerID: lb, Members: ms}}, time.Minute))
			}
			if got, err := s.MemberStats(ctx, "lb"); err != nil || len(got) != 0 {
				t.Errorf("no reports: %+v %v", got, err)
			}
			report("n1", "l1", "lb", mc("m1", "lb", 100, 1000, 2), mc("m2", "lb", 10, 20, 1), mc("gone", "lb", 5, 5, 5), mc("never", "lb", 1, 1, 1))
			report("n2", "l1", "lb", mc("m1", "lb", 1, 2, 1))
			report("n2", "l2", "lb", mc("m1", "lb", 7, 7, 7)) // another listener to the same member
			report("n1", "l3", "lb2", mc("m3", "lb2", 3, 4, 5))
			_, err = s.Update(ctx, func(tx store.Tx) error { return tx.Delete(store.KindMember, "gone") })
			must(err)
			report("n1", "l1", "lb", mc("gone", "lb", 5, 5, 5))
			// n1's agent restarted: its next report is what the kernel
			// counted since the last read, added on.
			report("n1", "l1", "lb", mc("m2", "lb", 1, 1, 1))
			want := []store.MemberCounts{mc("m1", "lb", 108, 1009, 10), mc("m2", "lb", 11, 21, 2)}
			if got, err := s.MemberStats(ctx, "lb"); err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("lb: %+v %v, want %+v", got, err, want)
			}
			want = append(want, mc("m3", "lb2", 3, 4, 5))
			if got, err := s.AllMemberStats(ctx); err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("all: %+v %v, want %+v", got, err, want)
			}
			// The listeners' own counters are untouched by members'.
			if got, err := s.LoadBalancerStats(ctx, "lb"); err != nil || got != (store.Counts{}) {
				t.Errorf("lb counts %+v %v, want zeros", got, err)
			}
		})
	}
}
