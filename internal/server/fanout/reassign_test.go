package fanout

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// randomNodes moves a random sorted set of nodes on by one step: a few
// nodes join or leave (sometimes many, as when a replica dies).
func randomNodes(rng *rand.Rand, live map[string]bool, universe int) []string {
	k := 1
	if rng.IntN(10) == 0 {
		k = 1 + rng.IntN(universe/2)
	}
	for range k {
		n := fmt.Sprintf("n%02d", rng.IntN(universe))
		live[n] = !live[n]
	}
	var out []string
	for n, ok := range live {
		if ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Random joins and leaves (seeded): after each, the owners the probes
// part moved to are those a full recompute gives, and exactly the nodes
// whose list changed (and the newcomer named) are sent one; the
// members change between some of the steps.
func TestReassignEqualsFullRecompute(t *testing.T) {
	for seed := range uint64(5) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 34))
			var nodes []string
			var sent map[string][]string
			p := newProbes(func() []string { return nodes }, func(touched map[string]bool, lists map[string][]*agentv1.Probe) {
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
			live := map[string]bool{}
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
				nodes = randomNodes(rng, live, 40)
				newcomer := ""
				if len(nodes) > 0 && rng.IntN(2) == 0 {
					newcomer = nodes[rng.IntN(len(nodes))]
				}
				sent = map[string][]string{}
				if rng.IntN(15) == 0 {
					p.set(members())
				} else {
					p.reassign(newcomer)
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
					if n != newcomer && slices.Equal(before[n], after[n]) {
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
		})
	}
}

// The same for the L2 VIPs: each among the nodes that can serve it.
func TestL2ReassignEqualsFullRecompute(t *testing.T) {
	for seed := range uint64(5) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 35))
			var nodes []string
			var sent map[string][]netip.Addr
			l := newL2([]netip.Prefix{netip.MustParsePrefix("198.19.250.0/24")}, func() []string { return nodes },
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
			live := map[string]bool{}
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
				nodes = randomNodes(rng, live, 40)
				newcomer := ""
				if len(nodes) > 0 && rng.IntN(2) == 0 {
					newcomer = nodes[rng.IntN(len(nodes))]
				}
				sent = map[string][]netip.Addr{}
				if rng.IntN(15) == 0 {
					l.load(services())
				} else {
					l.reassign(newcomer)
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
					if n != newcomer && slices.Equal(before[n], after[n]) {
						t.Fatalf("step %d: %s sent its unchanged list %v", step, n, after[n])
					}
				}
				for n := range after {
					if _, ok := sent[n]; !ok && !slices.Equal(before[n], after[n]) {
						t.Fatalf("step %d: %s's list changed from %v to %v, not sent", step, n, before[n], after[n])
					}
				}
			}
		})
	}
}
