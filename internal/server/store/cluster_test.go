package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
)

// TestPendingChanges: a change left pending by a transaction is settled by
// its owner only, and one whose owner is gone is taken over by exactly one
// of the replicas that race for it.
func TestPendingChanges(t *testing.T) {
	ctx := context.Background()
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			s := e.Store
			for _, r := range []string{"a", "b", "c"} {
				if err := s.Renew(ctx, store.Replica{ID: r}, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			commits := map[string]store.Commit{}
			for i := 0; i < 10; i++ {
				lb := fmt.Sprintf("lb%d", i)
				c, err := s.Update(ctx, func(tx store.Tx) error { tx.Pend(lb, "a"); return nil })
				if err != nil {
					t.Fatal(err)
				}
				commits[lb] = c
			}
			if n, _ := s.Owned(ctx, "a"); n != 10 {
				t.Fatalf("a owns %d, want 10", n)
			}
			// Only the owner, with the right change, settles.
			_, err := s.Update(ctx, func(tx store.Tx) error {
				p, ok, err := tx.Pending("lb0")
				if err != nil || !ok || p.Owner != "a" || p.Change != commits["lb0"].Changes["lb0"] {
					t.Errorf("pending of lb0: %+v %v %v", p, ok, err)
				}
				stale := p
				stale.Owner = "b"
				if err := tx.Settle(stale); !errors.Is(err, store.ErrConflict) {
					t.Errorf("settled by another owner: %v", err)
				}
				return tx.Settle(p)
			})
			if err != nil {
				t.Fatal(err)
			}
			// Nothing to take over while a is alive.
			if got, _ := s.TakeOver(ctx, "b"); len(got) != 0 {
				t.Errorf("b took %v from a live replica", got)
			}
			// a stops: b and c race; each change goes to one of them.
			if err := s.Retire(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			taken := map[string][]string{}
			var wg sync.WaitGroup
			for _, r := range []string{"b", "c"} {
				wg.Add(1)
				go func(r string) {
					defer wg.Done()
					got, err := s.TakeOver(ctx, r)
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					defer mu.Unlock()
					for _, p := range got {
						taken[p.LoadBalancerID] = append(taken[p.LoadBalancerID], r)
						if p.Owner != r || p.Change != commits[p.LoadBalancerID].Changes[p.LoadBalancerID] {
							t.Errorf("%s took %+v", r, p)
						}
					}
				}(r)
			}
			wg.Wait()
			if len(taken) != 9 {
				t.Errorf("%d changes taken over, want 9: %v", len(taken), taken)
			}
			for lb, by := range taken {
				if len(by) != 1 {
					t.Errorf("%s taken by %v", lb, by)
				}
			}
		})
	}
}

// TestAgentsOfLiveReplicas: acknowledged revisions are shared; an agent
// that moves belongs to its new replica, one that leaves is forgotten
// only by the replica it left, and a replica's agents vanish with its
// lease.
func TestAgentsOfLiveReplicas(t *testing.T) {
	ctx := context.Background()
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			s := e.Store
			if err := s.Renew(ctx, store.Replica{ID: "a", Tail: 7}, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := s.Renew(ctx, store.Replica{ID: "b"}, 300*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if err := s.RecordAgents(ctx, "a", []store.AgentAck{{Node: "n1", Revision: 5}, {Node: "n2", Revision: 6}}, nil); err != nil {
				t.Fatal(err)
			}
			if err := s.RecordAgents(ctx, "b", []store.AgentAck{{Node: "n3", Revision: 4, NoProbes: true}, {Node: "n2", Revision: 7}}, nil); err != nil {
				t.Fatal(err)
			}
			// n2 moved to b: a forgetting it must not drop b's.
			if err := s.RecordAgents(ctx, "a", nil, []string{"n2"}); err != nil {
				t.Fatal(err)
			}
			got, err := s.Agents(ctx)
			if err != nil || fmt.Sprint(got) != "[{n1 a 5 false} {n2 b 7 false} {n3 b 4 true}]" {
				t.Errorf("agents %v (%v)", got, err)
			}
			// The flag follows the agent's last record.
			if err := s.RecordAgents(ctx, "b", []store.AgentAck{{Node: "n3", Revision: 5}}, nil); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Agents(ctx); err != nil || fmt.Sprint(got) != "[{n1 a 5 false} {n2 b 7 false} {n3 b 5 false}]" {
				t.Errorf("agents once n3 took probes again %v (%v)", got, err)
			}
			if rs, _ := s.Replicas(ctx); len(rs) != 2 || rs[0].Tail != 7 {
				t.Errorf("replicas %+v", rs)
			}
			time.Sleep(400 * time.Millisecond) // b's lease runs out
			if got, _ := s.Agents(ctx); fmt.Sprint(got) != "[{n1 a 5 false}]" {
				t.Errorf("agents once b's lease expired: %v", got)
			}
		})
	}
}

// TestNotificationsReachOtherReplicas: news one replica spreads reaches
// another's watchers (PostgreSQL's LISTEN/NOTIFY), and this replica's at
// once.
func TestNotificationsReachOtherReplicas(t *testing.T) {
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			local := e.Store.Watch(store.TopicAgents)
			targets := []<-chan struct{}{local}
			if e.Name == "postgres" {
				other := storetest.Reopen(t, e)
				remote := other.Watch(store.TopicAgents)
				// The listener signals every topic once connected: drain it.
				select {
				case <-remote:
				case <-time.After(5 * time.Second):
					t.Fatal("the listener never connected")
				}
				targets = append(targets, remote)
			}
			e.Store.Notify(context.Background(), store.TopicAgents)
			for i, ch := range targets {
				select {
				case <-ch:
				case <-time.After(5 * time.Second):
					t.Errorf("watcher %d never told", i)
				}
			}
		})
	}
}
