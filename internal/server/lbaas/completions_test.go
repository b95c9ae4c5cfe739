package lbaas

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// countingStore counts write transactions; with failFirst the first one
// fails as a deadlock would.
type countingStore struct {
	store.Store
	updates   atomic.Int32
	failFirst bool
}

func (c *countingStore) Update(ctx context.Context, fn func(tx store.Tx) error) (store.Commit, error) {
	if c.updates.Add(1) == 1 && c.failFirst {
		return store.Commit{}, errors.New("deadlock detected")
	}
	return c.Store.Update(ctx, fn)
}

// TestCompletionsReadyTogetherShareATransaction: changes the provider
// reports realized together (from one goroutine each, as the fan-out
// does) are completed in one transaction; when that transaction fails,
// each is completed alone and none is left pending.
func TestCompletionsReadyTogetherShareATransaction(t *testing.T) {
	eachEngine(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, false, st)
		for _, fail := range []bool{false, true} {
			const n = 20
			var ids []string
			e.svc.st = st
			for range n {
				tree, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t))
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, tree.LB.ID)
			}
			// Completions from here on go through the counting store.
			cs := &countingStore{Store: st, failFirst: fail}
			e.svc.st = cs
			e.prov.mu.Lock()
			dones := e.prov.queue
			e.prov.queue = nil
			e.prov.mu.Unlock()
			if len(dones) != n {
				t.Fatalf("%d changes to realize, want %d", len(dones), n)
			}
			// Hold the runner back until all n are queued, so that the
			// test does not depend on how the goroutines are scheduled.
			g := &e.svc.completions
			g.mu.Lock()
			g.running = maxCompletionRunners
			g.mu.Unlock()
			var wg sync.WaitGroup
			for _, done := range dones {
				wg.Add(1)
				go func() { defer wg.Done(); done(nil) }()
			}
			testutil.Eventually(t, 5*time.Second, "all completions queued", func() (bool, string) {
				g.mu.Lock()
				defer g.mu.Unlock()
				return len(g.queue) == n, fmt.Sprint(len(g.queue))
			})
			go e.svc.runCompletions(context.Background())
			wg.Wait()
			testutil.Eventually(t, 5*time.Second, "the runner ended", func() (bool, string) {
				g.mu.Lock()
				defer g.mu.Unlock()
				if g.running == maxCompletionRunners-1 {
					g.running = 0 // the stand-ins for busy runners go too
					return true, ""
				}
				return false, fmt.Sprint(g.running)
			})
			for _, id := range ids {
				if got := e.status(store.KindLoadBalancer, id); got != Active {
					t.Fatalf("failGroup=%v: LB %s is %s, want ACTIVE", fail, id, got)
				}
			}
			want := int32(1)
			if fail {
				want = 1 + n // the group failed: then each alone
			}
			if got := cs.updates.Load(); got != want {
				t.Errorf("failGroup=%v: %d completion transactions for %d changes, want %d", fail, got, n, want)
			}
		}
	})
}

// loggingStore records which load balancers each write transaction logged.
type loggingStore struct {
	store.Store
	mu     sync.Mutex
	logged [][]string
}

func (l *loggingStore) Update(ctx context.Context, fn func(tx store.Tx) error) (store.Commit, error) {
	c, err := l.Store.Update(ctx, fn)
	if err == nil {
		l.mu.Lock()
		var ids []string
		for id := range c.Changes {
			ids = append(ids, id)
		}
		l.logged = append(l.logged, ids)
		l.mu.Unlock()
	}
	return c, err
}

// take returns how many transactions since the last call logged a change.
func (l *loggingStore) take() (commits, logged int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ids := range l.logged {
		if len(ids) > 0 {
			logged++
		}
	}
	commits = len(l.logged)
	l.logged = nil
	return commits, logged
}

// TestCompletionThatChangesNoFlowsIsNotLogged: each change hands its
// tree to Written, with its entry; with FlowsUnchanged set, a successful
// completion (PENDING_* to ACTIVE) writes no change-log entry, so the
// fan-out sends nothing for it; a failed one, whose PENDING_DELETE
// member becomes ERROR and live again, is logged. Without FlowsUnchanged
// every completion is logged.
func TestCompletionThatChangesNoFlowsIsNotLogged(t *testing.T) {
	eachEngine(t, func(t *testing.T, st store.Store) {
		ls := &loggingStore{Store: st}
		e := newEnv(t, false, ls)
		// What the data plane would see: the live members' addresses,
		// as the fan-out keeps them from each change's tree.
		live := func(tr *Tree) []string {
			var out []string
			for _, m := range tr.Members {
				if m.ProvisioningStatus != PendingDelete {
					out = append(out, m.Address)
				}
			}
			return out
		}
		var mu sync.Mutex
		kept := map[string][]string{}
		var written []Written
		e.svc.cfg.Written = func(w Written) {
			mu.Lock()
			defer mu.Unlock()
			kept[w.Tree.LB.ID] = live(w.Tree)
			written = append(written, w)
		}
		e.svc.cfg.FlowsUnchanged = func(lbID string, _ int64, tr *Tree) bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.Equal(kept[lbID], live(tr))
		}
		tree, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t))
		if err != nil {
			t.Fatal(err)
		}
		e.prov.finish(nil)
		e.waitActive(tree.LB.ID)
		if commits, logged := ls.take(); commits != 2 || logged != 1 {
			t.Fatalf("create and its completion: %d commits, %d logged; want 2, 1 (the create's)", commits, logged)
		}
		if len(written) != 1 || written[0].Tree != tree || written[0].Entry == 0 || !written[0].FreshPorts || written[0].Began.IsZero() {
			t.Fatalf("the create handed over %+v", written)
		}

		m := tree.Members[0]
		if err := e.svc.DeleteMember(e.ctx, m.PoolID, m.ID); err != nil {
			t.Fatal(err)
		}
		e.prov.finish(errors.New("data plane refused"))
		testutil.Eventually(t, 5*time.Second, "the failed delete completed", func() (bool, string) {
			st := e.status(store.KindMember, m.ID)
			return st == ProvisioningError, st
		})
		if commits, logged := ls.take(); commits != 2 || logged != 2 {
			t.Fatalf("failed delete and its completion: %d commits, %d logged; want 2, 2", commits, logged)
		}
		if len(written) != 2 || written[1].Entry <= written[0].Entry || written[1].FreshPorts {
			t.Fatalf("the delete handed over %+v", written[1:])
		}

		e.svc.cfg.FlowsUnchanged = nil
		second, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t))
		if err != nil {
			t.Fatal(err)
		}
		e.prov.finish(nil)
		e.waitActive(second.LB.ID)
		if commits, logged := ls.take(); commits != 2 || logged != 2 {
			t.Fatalf("without FlowsUnchanged: %d commits, %d logged; want 2, 2", commits, logged)
		}
	})
}

// A create on a user's port, which may have security groups and floating
// IPs, is no create on fresh ports.
func TestWrittenFreshPorts(t *testing.T) {
	for _, tc := range []struct {
		req  LoadBalancerCreate
		want bool
	}{
		{LoadBalancerCreate{VIPSubnetID: "s"}, true},
		{LoadBalancerCreate{VIPPortID: "p"}, false},
		{LoadBalancerCreate{VIPSubnetID: "s", AdditionalVIPs: []AdditionalVIP{{SubnetID: "s2"}}}, true},
		{LoadBalancerCreate{VIPSubnetID: "s", AdditionalVIPs: []AdditionalVIP{{SubnetID: "s2", PortID: "p2"}}}, false},
	} {
		if got := freshPorts(tc.req); got != tc.want {
			t.Errorf("%+v: fresh %v, want %v", tc.req, got, tc.want)
		}
	}
}

// changeCounter is a SQL store that counts the changes run through it.
type changeCounter struct {
	*store.SQL
	changes atomic.Int64
}

func (c *changeCounter) Change(ctx context.Context, fn func(tx store.Tx) error) (store.Commit, error) {
	c.changes.Add(1)
	return c.SQL.Change(ctx, fn)
}

// TestCompletionsJoinTheChangesOnASingleWriter: on SQLite, whose one
// writer takes a transaction at a time, a completion runs as one of the
// store's changes, in the transaction that the creates and updates
// waiting beside it share; on PostgreSQL, whose writers run in parallel,
// completions keep their own groups. Either way every load balancer ends
// ACTIVE.
func TestCompletionsJoinTheChangesOnASingleWriter(t *testing.T) {
	for _, eng := range storetest.Engines(t) {
		t.Run(eng.Name, func(t *testing.T) {
			cc := &changeCounter{SQL: eng.Store.(*store.SQL)}
			e := newEnv(t, false, cc)
			const n = 10
			var ids []string
			for range n {
				tree, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t))
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, tree.LB.ID)
			}
			created := cc.changes.Load()
			e.prov.finish(nil)
			for _, id := range ids {
				if got := e.status(store.KindLoadBalancer, id); got != Active {
					t.Fatalf("LB %s is %s, want ACTIVE", id, got)
				}
			}
			want := int64(0)
			if cc.SingleWriter() {
				want = n
			}
			if got := cc.changes.Load() - created; got != want {
				t.Errorf("%d completions ran as the store's changes, want %d", got, want)
			}
		})
	}
}
