package fanout

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

func l2svc(vip string, local bool, nodes ...string) flows.Service {
	s := flows.Service{Key: flows.Key{VIP: netip.MustParseAddr(vip), Protocol: flows.TCP, Port: 80}, LocalOnly: local}
	for i, n := range nodes {
		s.Backends = append(s.Backends, flows.Backend{Address: netip.AddrFrom4([4]byte{198, 18, 17, byte(i + 2)}), Port: 8080, Weight: 1, Node: n})
	}
	return s
}

// TestL2Owners: each L2 VIP goes to one node that can serve it, a
// local-only one to a node with a backend; VIPs outside the ranges are
// nobody's; a node leaving moves only its own VIPs; a load balancer gone
// takes its VIP's owner with it; every node whose list changed is sent
// its whole list, a newcomer always.
func TestL2Owners(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	sent := map[string][]netip.Addr{}
	l := newL2([]netip.Prefix{netip.MustParsePrefix("198.19.250.0/24")}, func() []string { return nodes },
		func(touched map[string]bool, lists map[string][]netip.Addr) {
			for n := range touched {
				sent[n] = lists[n]
			}
		})
	local, many, outside := netip.MustParseAddr("198.19.250.1"), netip.MustParseAddr("198.19.250.2"), netip.MustParseAddr("198.19.128.9")
	l.set(map[string][]flows.Service{
		"a": {l2svc("198.19.250.1", true, "n2")},
		"b": {l2svc("198.19.250.2", false, "n1")},
		"c": {l2svc("198.19.128.9", false, "n1")},
	})
	owners := l.owners()
	if owners[local] != "n2" {
		t.Errorf("the local-only VIP went to %q, want n2 (its backend's node)", owners[local])
	}
	if owners[many] == "" {
		t.Error("the cluster VIP has no owner")
	}
	if _, ok := owners[outside]; ok || len(owners) != 2 {
		t.Errorf("owners %v: want the two VIPs of the range only", owners)
	}
	for n, vs := range sent {
		for _, v := range vs {
			if owners[v] != n {
				t.Errorf("%s was sent %s, owned by %s", n, v, owners[v])
			}
		}
	}
	// The cluster VIP's owner leaves: the VIP moves, the local-only one
	// stays with n2 unless n2 left.
	gone := owners[many]
	nodes = slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == gone })
	clear(sent)
	l.reassign("")
	after := l.owners()
	if after[many] == gone || after[many] == "" {
		t.Errorf("the cluster VIP stayed with %q after it left (now %q)", gone, after[many])
	}
	if gone != "n2" && after[local] != "n2" {
		t.Errorf("the local-only VIP moved to %q although n2 stayed", after[local])
	}
	if _, ok := sent[after[many]]; !ok {
		t.Errorf("the new owner %s was not sent its list: %v", after[many], sent)
	}
	// n2's backend goes: the local-only VIP has nobody who can serve it.
	clear(sent)
	l.set(map[string][]flows.Service{"a": {l2svc("198.19.250.1", true, "n9")}})
	if own, ok := l.owners()[local]; ok {
		t.Errorf("the local-only VIP without a backend on a live node is %s's", own)
	}
	if vs, ok := sent["n2"]; !ok || slices.Contains(vs, local) {
		t.Errorf("n2 was not told it lost the VIP: %v", sent)
	}
	// Load balancer b is deleted.
	l.set(map[string][]flows.Service{"b": nil})
	if len(l.owners()) != 0 {
		t.Errorf("owners after the deletes: %v", l.owners())
	}
	// A newcomer gets its list, empty or not.
	clear(sent)
	nodes = append(nodes, "n4")
	l.reassign("n4")
	if _, ok := sent["n4"]; !ok {
		t.Errorf("the newcomer got no list: %v", slices.Collect(maps.Keys(sent)))
	}
}

// TestL2OwnerSpread: the cluster VIPs spread over the nodes.
func TestL2OwnerSpread(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	count := map[string]int{}
	for i := range 300 {
		v := netip.AddrFrom4([4]byte{198, 19, 250, byte(i)})
		if i > 255 {
			v = netip.AddrFrom4([4]byte{198, 19, 251, byte(i - 256)})
		}
		count[l2Owner(v, []flows.Service{l2svc(v.String(), false, "n1")}, nodes)]++
	}
	for _, n := range nodes {
		if count[n] < 60 {
			t.Errorf("%s owns %d of 300 VIPs: %v", n, count[n], count)
		}
	}
}
