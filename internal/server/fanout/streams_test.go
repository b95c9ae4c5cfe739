package fanout

import (
	"testing"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
)

// drain returns what is queued for an agent.
func drain(a *agent) []*agentv1.Update {
	var out []*agentv1.Update
	for {
		select {
		case u := <-a.send:
			out = append(out, u)
		default:
			return out
		}
	}
}

// The broadcaster queues every update for every agent, cuts off the one
// whose queue is full, and sends a probe list at the revision the
// agent's queue holds (an agent takes every update's revision as
// programmed), sorted by member, to the agents of the nodes named only.
func TestStreams(t *testing.T) {
	s := newStreams("e")
	a, b, c := newAgent("n1", 4), newAgent("n2", 4), newAgent("n1", 1)
	s.add(a, &agentv1.Update{Revision: 3, Epoch: "e", Snapshot: true}, 3)
	s.add(b, nil, 3)
	s.add(c, nil, 3)
	s.broadcast(&agentv1.Update{Revision: 4, Epoch: "e"})
	s.broadcast(&agentv1.Update{Revision: 5, Epoch: "e"})
	select {
	case <-c.gone:
	default:
		t.Fatal("an agent whose queue is full is not cut off")
	}
	for _, ag := range []*agent{a, b} {
		select {
		case <-ag.gone:
			t.Fatalf("%s cut off", ag.node)
		default:
		}
	}
	s.sendProbes(map[string]bool{"n1": true}, map[string][]*agentv1.Probe{"n1": {{MemberId: "m2"}, {MemberId: "m1"}}})
	got := drain(a)
	if len(got) != 4 || !got[0].GetSnapshot() || got[1].GetRevision() != 4 || got[2].GetRevision() != 5 {
		t.Fatalf("n1 got %v", got)
	}
	if p := got[3]; !p.GetProbesSet() || p.GetRevision() != 5 || p.GetEpoch() != "e" ||
		len(p.GetProbes()) != 2 || p.GetProbes()[0].GetMemberId() != "m1" {
		t.Fatalf("n1's probe list: %v", p)
	}
	if got := drain(b); len(got) != 2 {
		t.Fatalf("n2, whose list did not change, got %v", got)
	}
	// A node named without a list gets an empty one.
	s.sendProbes(map[string]bool{"n2": true}, nil)
	if got := drain(b); len(got) != 1 || !got[0].GetProbesSet() || len(got[0].GetProbes()) != 0 {
		t.Fatalf("n2 got %v", got)
	}
	if left := s.remove(c); left != 2 || s.count() != 2 {
		t.Fatalf("%d agents left", left)
	}
	// The node's other stream still gets its lists; one removed does not.
	drain(c)
	s.sendProbes(map[string]bool{"n1": true}, nil)
	if got := drain(a); len(got) != 1 || !got[0].GetProbesSet() {
		t.Fatalf("n1's remaining stream got %v", got)
	}
	if got := drain(c); len(got) != 0 {
		t.Fatalf("a removed stream got %v", got)
	}
	s.remove(a)
	if len(s.byNode) != 1 || len(s.byNode["n2"]) != 1 {
		t.Fatalf("streams by node after n1 left: %v", s.byNode)
	}
}
