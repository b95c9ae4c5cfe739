package fanout

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// flipCluster is the agents one replica (r1) of a two-replica cluster
// sees: nodes streaming to it and nodes of r2, read from the store's
// changed rows, some of them taking no probes. Each step some nodes
// join, leave, move between the replicas, or start or stop taking
// probes, through the acks as the hub drives them.
type flipCluster struct {
	a     *acks
	local map[string]*agent
	// remote are r2's nodes, and whether each takes no probes.
	remote map[string]bool
	seq    int64
}

func newFlipCluster() *flipCluster {
	return &flipCluster{a: newAcks("r1", time.Hour), local: map[string]*agent{}, remote: map[string]bool{}}
}

// step moves the cluster on by one step: a node, sometimes many (as when
// a replica dies); it calls reassign as the hub does, with the node of a
// stream that joins and "" after one leaves or after a read of the rows
// whose change says the nodes changed. It returns the nodes named and
// the number of calls.
func (c *flipCluster) step(rng *rand.Rand, universe int, reassign func(node string)) (newcomers []string, calls int) {
	call := func(n string) {
		reassign(n)
		calls++
		if n != "" {
			newcomers = append(newcomers, n)
		}
	}
	k := 1
	if rng.IntN(10) == 0 {
		k = 1 + rng.IntN(universe/2)
	}
	var d store.AgentChanges
	picked := map[string]bool{}
	for range k {
		n := fmt.Sprintf("n%02d", rng.IntN(universe))
		if picked[n] {
			continue
		}
		picked[n] = true
		row := func(replica string, np bool) {
			d.Acks = append(d.Acks, store.AgentAck{Node: n, Replica: replica, Revision: 1, NoProbes: np})
		}
		join := func(np bool) {
			l := &agent{node: n, noProbes: np}
			c.a.join(l, 1)
			call(n)
			if old := c.local[n]; old != nil {
				c.a.part(old) // a reconnection: the old stream goes after
				call("")
			}
			c.local[n] = l
			row("r1", np)
		}
		l, isLocal := c.local[n]
		np, isRemote := c.remote[n]
		switch op := rng.IntN(3); {
		case isLocal && op == 0: // leaves
			c.a.part(l)
			call("")
			delete(c.local, n)
			d.Gone = append(d.Gone, store.AgentAck{Node: n, Replica: "r1"})
		case isLocal && op == 1: // reconnects with the other flag
			join(!l.noProbes)
		case isLocal: // moves to r2
			c.a.part(l)
			call("")
			delete(c.local, n)
			c.remote[n] = l.noProbes
			row("r2", l.noProbes)
		case isRemote && op == 0: // leaves
			delete(c.remote, n)
			d.Gone = append(d.Gone, store.AgentAck{Node: n, Replica: "r2"})
		case isRemote && op == 1: // flips its flag and nothing else
			c.remote[n] = !np
			row("r2", !np)
		case isRemote: // moves to r1
			delete(c.remote, n)
			join(np)
		case op == 0: // joins r1
			join(rng.IntN(3) == 0)
		default: // joins r2
			c.remote[n] = rng.IntN(3) == 0
			row("r2", c.remote[n])
		}
	}
	c.seq++
	d.Seq, d.Live = c.seq, []string{"r1", "r2"}
	if ch := c.a.readDone(c.a.startRead(), d); ch.nodes {
		call("")
	}
	return newcomers, calls
}

// probers are the nodes that take probes, as the test has them.
func (c *flipCluster) probers() []string {
	var out []string
	for n, l := range c.local {
		if !l.noProbes {
			out = append(out, n)
		}
	}
	for n, np := range c.remote {
		if !np {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// check compares the acks' probers with the test's, and counts the
// steps where some node takes no probes.
func (c *flipCluster) check(t *testing.T, step int, mixed *int) []string {
	t.Helper()
	want := c.probers()
	if got := c.a.probers(); !slices.Equal(got, want) {
		t.Fatalf("step %d: probers %v, want %v", step, got, want)
	}
	if len(want) < len(c.local)+len(c.remote) {
		*mixed++
	}
	return want
}

// Random joins and leaves (seeded), through the acks as the hub drives
// them, some of the nodes taking no probes and some starting or stopping
// to (a leave or a join for the probes): after each step, the owners the
// probes part moved to are those a full recompute among the nodes that
// take probes gives, and exactly the nodes whose list changed (and the
// newcomers named) are sent one; the members change between some of the
// steps.
func TestReassignEqualsFullRecompute(t *testing.T) {
	for seed := range uint64(5) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 34))
			c := newFlipCluster()
			var sent map[string][]string
			p := newProbes(c.a.probers, func(touched map[string]bool, lists map[string][]*agentv1.Probe) {
				for n := range touched {
					var ids []string
					for _, pr := range lists[n] {
						ids = append(ids, pr.GetMemberId())
					}
					slices.Sort(ids)
					sent[n] = ids
				}
			})
			members := func() map[string][]flows.Probe {
				byLB := map[string][]flows.Probe{}
				for i := range 40 + rng.IntN(200) {
					pin := ""
					if rng.IntN(3) == 0 {
						pin = fmt.Sprintf("n%02d", rng.IntN(40))
					}
					lb := fmt.Sprint("lb", i%7)
					byLB[lb] = append(byLB[lb], testProbe(fmt.Sprintf("m%d", i), pin))
				}
				return byLB
			}
			sent = map[string][]string{}
			p.set(members())
			mixed := 0
			lists := func() map[string][]string {
				out := map[string][]string{}
				for id, n := range p.owners() {
					out[n] = append(out[n], id)
				}
				for _, ids := range out {
					slices.Sort(ids)
				}
				return out
			}
			for step := range 300 {
				before := lists()
				sent = map[string][]string{}
				newcomers, calls := c.step(rng, 40, p.reassign)
				nodes := c.check(t, step, &mixed)
				if rng.IntN(15) == 0 {
					p.set(members())
					calls++
				}
				p.mu.Lock()
				for id, pr := range p.byMember {
					if want := owner(id, pr.Node, nodes); p.owner[id] != want {
						p.mu.Unlock()
						t.Fatalf("step %d: %s on %q, a full recompute gives %q", step, id, p.owner[id], want)
					}
				}
				if len(p.owner) != len(p.byMember) && len(nodes) > 0 {
					p.mu.Unlock()
					t.Fatalf("step %d: %d owners of %d members", step, len(p.owner), len(p.byMember))
				}
				p.mu.Unlock()
				after := lists()
				for n := range sent {
					// With one call, a list sent is one that changed; with
					// more, it may have changed and changed back.
					if calls == 1 && !slices.Contains(newcomers, n) && slices.Equal(before[n], after[n]) {
						t.Fatalf("step %d: %s sent its unchanged list %v", step, n, after[n])
					}
					if !slices.Equal(sent[n], after[n]) {
						t.Fatalf("step %d: %s sent %v, owns %v", step, n, sent[n], after[n])
					}
				}
				for n := range after {
					if _, ok := sent[n]; !ok && !slices.Equal(before[n], after[n]) {
						t.Fatalf("step %d: %s's list changed from %v to %v, not sent", step, n, before[n], after[n])
					}
				}
				for n := range before {
					if _, ok := sent[n]; !ok && len(after[n]) == 0 && slices.Contains(nodes, n) {
						t.Fatalf("step %d: %s lost its members %v, not told", step, n, before[n])
					}
				}
			}
			if mixed < 150 {
				t.Errorf("%d steps of 300 with nodes both taking probes and not", mixed)
			}
		})
	}
}

// The same for the L2 VIPs: each among the nodes that take probes and
// can serve it.
func TestL2ReassignEqualsFullRecompute(t *testing.T) {
	for seed := range uint64(5) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 35))
			c := newFlipCluster()
			var sent map[string][]netip.Addr
			l := newL2([]netip.Prefix{netip.MustParsePrefix("198.19.250.0/24")}, c.a.probers,
				func(touched map[string]bool, lists map[string][]netip.Addr) {
					for n := range touched {
						sent[n] = lists[n]
					}
				})
			services := func() map[string][]flows.Service {
				byLB := map[string][]flows.Service{}
				for i := range 20 + rng.IntN(100) {
					var backends []string
					for range rng.IntN(3) {
						backends = append(backends, fmt.Sprintf("n%02d", rng.IntN(40)))
					}
					vip := netip.AddrFrom4([4]byte{198, 19, 250, byte(i)})
					byLB[fmt.Sprint("lb", i)] = []flows.Service{l2svc(vip.String(), rng.IntN(2) == 0, backends...)}
				}
				return byLB
			}
			sent = map[string][]netip.Addr{}
			l.load(services())
			mixed := 0
			lists := func() map[string][]netip.Addr {
				out := map[string][]netip.Addr{}
				for v, n := range l.owners() {
					out[n] = append(out[n], v)
				}
				for _, vs := range out {
					slices.SortFunc(vs, netip.Addr.Compare)
				}
				return out
			}
			for step := range 300 {
				before := lists()
				sent = map[string][]netip.Addr{}
				newcomers, calls := c.step(rng, 40, l.reassign)
				nodes := c.check(t, step, &mixed)
				if rng.IntN(15) == 0 {
					l.load(services())
					calls++
				}
				l.mu.Lock()
				want := map[netip.Addr]string{}
				for v := range l.byVIP {
					if own := l2Owner(v, l.services(v), nodes); own != "" {
						want[v] = own
					}
				}
				got := maps.Clone(l.owner)
				l.mu.Unlock()
				if !maps.Equal(got, want) {
					t.Fatalf("step %d: owners %v, a full recompute gives %v", step, got, want)
				}
				after := lists()
				for n := range sent {
					// With one call, a list sent is one that changed; with
					// more, it may have changed and changed back.
					if calls == 1 && !slices.Contains(newcomers, n) && slices.Equal(before[n], after[n]) {
						t.Fatalf("step %d: %s sent its unchanged list %v", step, n, after[n])
					}
				}
				for n := range after {
					if _, ok := sent[n]; !ok && !slices.Equal(before[n], after[n]) {
						t.Fatalf("step %d: %s's list changed from %v to %v, not sent", step, n, before[n], after[n])
					}
				}
			}
			if mixed < 150 {
				t.Errorf("%d steps of 300 with nodes both taking probes and not", mixed)
			}
		})
	}
}
