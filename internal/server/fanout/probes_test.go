package fanout

import (
	"net/netip"
	"slices"
	"testing"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// probeSends records what the probes part sends.
type probeSends struct {
	nodes []string
	sent  []map[string][]string // per send, node → members
}

func (r *probeSends) live() []string { return r.nodes }

func (r *probeSends) send(nodes map[string]bool, lists map[string][]*agentv1.Probe) {
	out := map[string][]string{}
	for n := range nodes {
		out[n] = []string{}
		for _, p := range lists[n] {
			out[n] = append(out[n], p.GetMemberId())
		}
		slices.Sort(out[n])
	}
	r.sent = append(r.sent, out)
}

func (r *probeSends) last() map[string][]string {
	if len(r.sent) == 0 {
		return nil
	}
	return r.sent[len(r.sent)-1]
}

func testProbe(member, node string) flows.Probe {
	return flows.Probe{MemberID: member, Address: netip.MustParseAddr("198.18.17.2"), Port: 80, Type: flows.MonitorTCP, Node: node}
}

// The assignment: a member goes to its own node's agent when there is
// one, else to one of the live nodes; a change sends the lists that
// changed and no other; a verdict alone (InitialStatus) sends nothing; a
// node that joins gets its list, empty or not; members of a load
// balancer that is gone are let go.
func TestProbeAssignment(t *testing.T) {
	r := &probeSends{}
	p := newProbes(r.live, r.send)
	// No agent anywhere: nothing to send.
	p.set(map[string][]flows.Probe{"lb1": {testProbe("m1", "n1"), testProbe("m2", "")}})
	if len(r.sent) != 0 {
		t.Fatalf("sent with no agent: %v", r.sent)
	}
	r.nodes = []string{"n1"}
	p.reassign("n1")
	if got := r.last(); !slices.Equal(got["n1"], []string{"m1", "m2"}) {
		t.Fatalf("n1 joined: %v", got)
	}
	r.nodes = []string{"n1", "n2"}
	p.reassign("n2")
	owners := p.owners()
	if owners["m1"] != "n1" {
		t.Errorf("m1 runs on n1 but is probed from %s", owners["m1"])
	}
	got := r.last()
	if _, ok := got["n2"]; !ok {
		t.Fatalf("n2 joined and got no list: %v", got)
	}
	sends := len(r.sent)
	// Only the verdict differs: nothing is sent.
	healthy := testProbe("m1", "n1")
	healthy.InitialStatus = lbaas.Online
	p.set(map[string][]flows.Probe{"lb1": {healthy, testProbe("m2", "")}})
	if len(r.sent) != sends {
		t.Fatalf("a verdict alone sent %v", r.sent[sends:])
	}
	if p.byStatus()[lbaas.Online] != 1 || p.byStatus()["UNKNOWN"] != 1 {
		t.Errorf("by status: %v", p.byStatus())
	}
	// The probe of m1 changes: n1's list is sent, n2's is not.
	changed := healthy
	changed.Port = 81
	p.set(map[string][]flows.Probe{"lb1": {changed, testProbe("m2", "")}})
	if got := r.last(); len(got) != 1 || !slices.Contains(got["n1"], "m1") {
		t.Fatalf("m1's probe changed: %v", got)
	}
	// The load balancer is gone: its members' owners get lists without
	// them.
	p.set(map[string][]flows.Probe{"lb1": nil})
	if got := r.last(); len(got["n1"]) != 0 {
		t.Fatalf("gone: %v", got)
	}
	if len(p.owners()) != 0 {
		t.Fatalf("owners left: %v", p.owners())
	}
	// n1 leaves: a member of n1 goes to n2.
	p.set(map[string][]flows.Probe{"lb2": {testProbe("m3", "n1")}})
	r.nodes = []string{"n2"}
	p.reassign("")
	if got := r.last(); !slices.Equal(got["n2"], []string{"m3"}) || p.ownerOf("m3") != "n2" {
		t.Fatalf("n1 left: %v, m3 on %s", got, p.ownerOf("m3"))
	}
}

// With no member to probe, an agent that joins or leaves costs no list
// of the cluster's nodes (which sorts all of them), and the newcomer
// still gets its empty list.
func TestReassignWithoutMembersListsNoNodes(t *testing.T) {
	r := &probeSends{nodes: []string{"n1", "n2"}}
	listed := 0
	p := newProbes(func() []string { listed++; return r.live() }, r.send)
	p.reassign("n1")
	p.reassign("")
	if listed != 0 {
		t.Errorf("the nodes were listed %d times with no member to assign", listed)
	}
	if got := r.last(); len(r.sent) != 1 || got["n1"] == nil || len(got["n1"]) != 0 {
		t.Errorf("the newcomer's list: %v, want one empty list for n1", r.sent)
	}
}
