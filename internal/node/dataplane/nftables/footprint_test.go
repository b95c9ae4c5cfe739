package nftables

import (
	"net/netip"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// TestFootprintHelpers: what TestPlan's golden plans do not show.
func TestFootprintHelpers(t *testing.T) {
	b := func(a string, zones ...string) flows.Backend {
		return flows.Backend{Address: netip.MustParseAddr(a), Port: 8080, Weight: 1, Zones: zones}
	}
	// A prefer-close table in zone-a holds only zone-a's backend; in a
	// zone with none, or on a node without a zone, every backend.
	preferClose := flows.Service{Key: vipKey, Algorithm: flows.RoundRobin, PreferClose: true,
		Backends: []flows.Backend{b("198.18.17.2", "zone-a"), b("198.18.18.2", "zone-b")}}
	for zone, want := range map[string]int{"zone-a": 1, "zone-c": 2, "": 2} {
		if got := len(footprintOf(preferClose, "n1", zone).backends(ipv4)); got != want {
			t.Errorf("prefer-close in zone %q: %d backends in the table, want %d", zone, got, want)
		}
	}
	// With node hints (PreferSameNode), n1's table holds n1's backend;
	// a node with none falls back to its zone's.
	sameNode := preferClose
	sameNode.Backends = []flows.Backend{b("198.18.17.2", "zone-a"), b("198.18.18.2", "zone-b")}
	sameNode.Backends[0].ForNodes, sameNode.Backends[1].ForNodes = []string{"n1"}, []string{"n2"}
	for node, want := range map[string]string{"n1": "198.18.17.2", "n2": "198.18.18.2", "n3": "198.18.17.2"} {
		if got := footprintOf(sameNode, node, "zone-a").backends(ipv4); len(got) != 1 || !got[netip.MustParseAddr(want)] {
			t.Errorf("prefer-same-node on %s: %v in the table, want %s", node, got, want)
		}
	}
	v6 := flows.Service{Key: flows.Key{VIP: netip.MustParseAddr("2001:2::10"), Protocol: flows.TCP, Port: 80}}
	if programmable(ipv4, v6) || !programmable(ipv6, v6) {
		t.Error("an IPv6 VIP is programmable in the ip table, or not in the ip6 table")
	}
	if n, ok := chainParam(persistChain(90*time.Second), persistPrefix); !ok || n != 90 {
		t.Errorf("persist chain %q parameter %d %v", persistChain(90*time.Second), n, ok)
	}
	if n, ok := chainParam(limitChain(7), limitPrefix); !ok || n != 7 {
		t.Errorf("limit chain parameter %d %v", n, ok)
	}
	if _, ok := chainParam("persist_x", persistPrefix); ok {
		t.Error("persist_x has a parameter")
	}
}

// TestFootprintSize: the size a footprint's map is made with covers
// every element footprintWith puts in it, so that the map never grows
// while it is filled, for every kind of service, and is not many times
// more than it (a pool of many backends fills no more slots).
func TestFootprintSize(t *testing.T) {
	backends := func(n int, node string) []flows.Backend {
		var out []flows.Backend
		for i := range n {
			out = append(out, flows.Backend{Address: netip.AddrFrom4([4]byte{198, 18, 17, byte(2 + i)}), Port: 8080, Weight: 1, Node: node, KeepClient: true})
		}
		return out
	}
	plain := flows.Service{Key: vipKey, Algorithm: flows.RoundRobin, Backends: backends(10, "n2")}
	local := plain
	local.LocalOnly, local.InternalLocal, local.Backends = true, true, backends(10, "n1")
	persist := plain
	persist.Persistence = &flows.Persistence{Type: "SOURCE_IP", Timeout: time.Minute}
	acl := plain
	acl.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24"), netip.MustParsePrefix("198.18.5.0/24")}
	acl.ConnectionLimit = 10
	own := plain
	own.OwnVIP = true
	for name, s := range map[string]flows.Service{"plain": plain, "local-only": local, "persistent": persist, "ACL and limit": acl, "own VIP": own,
		"no backend": {Key: vipKey}, "one backend": {Key: vipKey, Backends: backends(1, "n1")}, "many backends": {Key: vipKey, Backends: backends(250, "n1")}} {
		for _, lazy := range []bool{false, true} {
			got, size := len(footprintWith(s, "n1", "", lazy)), footprintSize(s, lazy)
			if got > size {
				t.Errorf("%s (lazy %v): %d elements, the map made for %d", name, lazy, got, size)
			}
			if len(s.Backends) > 0 && size > 2*got {
				t.Errorf("%s (lazy %v): %d elements, the map made for %d", name, lazy, got, size)
			}
		}
	}
}
