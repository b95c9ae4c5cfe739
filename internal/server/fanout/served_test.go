package fanout

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/flowlb/flowlb/internal/server/compiler"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

func lbSvc(lb, vip string) flows.Service {
	return flows.Service{Key: flows.Key{VIP: netip.MustParseAddr(vip), Protocol: flows.TCP, Port: 80}, LoadBalancerID: lb}
}

func step(rev int64, lbs ...string) []store.LogEntry {
	var es []store.LogEntry
	for _, lb := range lbs {
		es = append(es, store.LogEntry{ID: 100 + rev, Revision: rev, LoadBalancerID: lb})
	}
	return es
}

// The served table: each step is one update to every agent with the load
// balancers it replaced; a step at or below the table's revision is
// none; an agent joining gets a snapshot (another epoch, or too old),
// the load balancers changed since its revision, or nothing (up to date
// or ahead), is told the revision it holds, and what it got is told the
// metrics.
func TestServedStepsAndJoins(t *testing.T) {
	s := newServed("e", newStreams("e"))
	s.load(0, 2, []store.LogEntry{{ID: 1, Revision: 1, LoadBalancerID: "a"}, {ID: 2, Revision: 2, LoadBalancerID: "b"}},
		[]change{{lbID: "a", services: []flows.Service{lbSvc("a", "198.19.0.1")}}, {lbID: "b", services: []flows.Service{lbSvc("b", "198.19.0.2")}}})
	old := newAgent("old", 8)
	if held, sent, size := s.join(old, "e", 1); held != 1 || sent != entries || size != 1 {
		t.Fatalf("old holds %d, was sent %d of size %d", held, sent, size)
	}
	if got := drain(old); len(got) != 1 || got[0].GetRevision() != 2 || len(got[0].GetLoadbalancers()) != 1 || got[0].GetLoadbalancers()[0].GetLoadbalancerId() != "b" {
		t.Fatalf("catch-up from 1: %v", got)
	}
	stranger := newAgent("stranger", 8)
	if held, sent, size := s.join(stranger, "other", 9); held != 0 || sent != snapshot || size != 2 {
		t.Fatalf("an agent of another database holds %d, was sent %d of size %d", held, sent, size)
	}
	if got := drain(stranger); len(got) != 1 || !got[0].GetSnapshot() || len(got[0].GetUpserts()) != 2 {
		t.Fatalf("another epoch: %v", got)
	}
	ahead := newAgent("ahead", 8)
	if held, sent, _ := s.join(ahead, "e", 5); held != 2 || sent != upToDate || len(drain(ahead)) != 0 {
		t.Fatalf("an agent ahead of this replica holds %d, was sent %d", held, sent)
	}
	current := newAgent("current", 8)
	if held, sent, _ := s.join(current, "e", 2); held != 2 || sent != upToDate || len(drain(current)) != 0 {
		t.Fatalf("an agent up to date holds %d, was sent %d", held, sent)
	}
	a, ok := s.apply(step(3, "a"), []change{{lbID: "a", gone: true}})
	if !ok || len(a.changed) != 1 || a.changed[0] != "a" {
		t.Fatalf("step 3: %+v %v", a, ok)
	}
	if _, ok := s.apply(step(3, "b"), []change{{lbID: "b", gone: true}}); ok {
		t.Fatal("a step at the table's revision was taken")
	}
	for _, ag := range []*agent{old, stranger, ahead, current} {
		got := drain(ag)
		if len(got) != 1 || got[0].GetRevision() != 3 || got[0].GetLoadbalancers()[0].GetLoadbalancerId() != "a" || len(got[0].GetLoadbalancers()[0].GetServices()) != 0 {
			t.Fatalf("%s got %v", ag.node, got)
		}
	}
	if rev, ok := s.revisionOf(103); !ok || rev != 3 || s.revision() != 3 {
		t.Fatalf("entry 103 at %d %v, table at %d", rev, ok, s.revision())
	}
	if tb := s.table(); len(tb.Services) != 1 || tb.Revision != 3 {
		t.Fatalf("table %v", tb)
	}
}

// A contested key taken by a senior load balancer: the junior one is
// replaced in the same update, and named for agents catching up.
func TestServedContestedKeyMoves(t *testing.T) {
	s := newServed("e", newStreams("e"))
	s.load(0, 1, nil, []change{{lbID: "young", seniority: compiler.Seniority{CreatedAt: "2", ID: "young"}, services: []flows.Service{lbSvc("young", "198.19.0.1")}}})
	a, ok := s.apply(step(2, "old"), []change{{lbID: "old", seniority: compiler.Seniority{CreatedAt: "1", ID: "old"}, services: []flows.Service{lbSvc("old", "198.19.0.1")}}})
	if !ok || len(a.changed) != 2 || a.changed[1] != "young" || len(a.reports) != 1 || len(a.reports[0].moves) != 1 {
		t.Fatalf("%+v", a)
	}
	if since := s.changedSince(1); len(since) != 2 {
		t.Fatalf("an agent catching up is sent %v", since)
	}
}

// Agents join while the tail takes steps: each one's queue holds every
// revision from its catch-up on, in order, none twice.
func TestServedJoinDuringSteps(t *testing.T) {
	s := newServed("e", newStreams("e"))
	s.load(0, 0, nil, nil)
	const steps = 300
	var wg sync.WaitGroup
	agents := make([]*agent, 20)
	wg.Go(func() {
		for r := int64(1); r <= steps; r++ {
			s.apply(step(r, "a"), []change{{lbID: "a", services: []flows.Service{lbSvc("a", "198.19.0.1")}}})
		}
	})
	for i := range agents {
		wg.Go(func() {
			agents[i] = newAgent("n", steps+2)
			s.join(agents[i], "e", 0)
		})
	}
	wg.Wait()
	for i, a := range agents {
		prev := int64(-1)
		for _, u := range drain(a) {
			if prev != -1 && u.GetRevision() != prev+1 {
				t.Fatalf("agent %d: revision %d after %d", i, u.GetRevision(), prev)
			}
			prev = u.GetRevision()
		}
		if prev != steps {
			t.Fatalf("agent %d ends at %d", i, prev)
		}
	}
}
