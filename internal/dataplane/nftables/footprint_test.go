package nftables

import (
	"net/netip"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/flows"
)

// TestPlan: what each kind of service puts into which set, without a
// kernel: the diff → netlink layer only ever sends footprint differences.
func TestPlan(t *testing.T) {
	b := func(a, node string) flows.Backend {
		return flows.Backend{Address: netip.MustParseAddr(a), Port: 8080, Weight: 1, Node: node}
	}
	two := []flows.Backend{b("198.18.17.2", "n1"), b("198.18.18.2", "n2")}
	zoned := []flows.Backend{b("198.18.17.2", "n1"), b("198.18.18.2", "n2")}
	zoned[0].Zones, zoned[1].Zones = []string{"zone-a"}, []string{"zone-b"}
	cases := []struct {
		name string
		svc  flows.Service
		want map[string]int // elements per set
	}{
		{"no backends: refused", flows.Service{}, map[string]int{emptySet: 1}},
		{"round robin", flows.Service{Algorithm: flows.RoundRobin, Backends: two}, map[string]int{rrSet: 1, slotsMap: Slots}},
		{"unknown algorithm defaults to SOURCE_IP_PORT", flows.Service{Algorithm: "LEAST_CONNECTIONS", Backends: two}, map[string]int{srcPortSet: 1, slotsMap: Slots}},
		{"local-only with a local backend", flows.Service{Algorithm: flows.SourceIP, Backends: two, LocalOnly: true},
			map[string]int{srcSet: 1, slotsMap: 2 * Slots, localOnSet: 1}},
		{"local-only without", flows.Service{Algorithm: flows.SourceIP, Backends: two[1:], LocalOnly: true},
			map[string]int{srcSet: 1, slotsMap: Slots, localNoneSet: 1}},
		{"persistence", flows.Service{Algorithm: flows.SourceIP, Backends: two, Persistence: &flows.Persistence{Type: "SOURCE_IP", Timeout: time.Hour}},
			map[string]int{srcSet: 1, slotsMap: Slots, persistMap: 1, membersSet: 2}},
		{"connection limit", flows.Service{Algorithm: flows.SourceIP, Backends: two, ConnectionLimit: 100},
			map[string]int{srcSet: 1, slotsMap: Slots, limitsMap: 1}},
		{"allowed cidrs", flows.Service{Algorithm: flows.SourceIP, Backends: two, AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}},
			map[string]int{srcSet: 1, slotsMap: Slots, aclOnSet: 1, aclAllowSet: 1}},
		{"IPv6 backends are left out", flows.Service{Algorithm: flows.SourceIP, Backends: []flows.Backend{b("2001:db8::1", "")}}, map[string]int{emptySet: 1}},
		{"prefer-close with a backend for this zone", flows.Service{Algorithm: flows.SourceIP, Backends: zoned, PreferClose: true},
			map[string]int{srcSet: 1, slotsMap: Slots, zoneOnSet: 1}},
		{"prefer-close without one", flows.Service{Algorithm: flows.SourceIP, Backends: zoned[1:], PreferClose: true},
			map[string]int{srcSet: 1, slotsMap: Slots}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.svc.Key = vipKey
			got := map[string]int{}
			for _, e := range plan(tc.svc, "n1", "zone-a") {
				got[e.set]++
				if k, ok := parseKey(e.key); !ok || k != vipKey {
					t.Errorf("%s element %x does not start with the service key", e.set, e.key)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("sets %v, want %v", got, tc.want)
			}
			for set, n := range tc.want {
				if got[set] != n {
					t.Errorf("%s: %d elements, want %d (all: %v)", set, got[set], n, got)
				}
			}
		})
	}
	// A prefer-close table in zone-a holds only zone-a's backend; in a
	// zone with none, or on a node without a zone, every backend.
	preferClose := flows.Service{Key: vipKey, Algorithm: flows.RoundRobin, Backends: zoned, PreferClose: true}
	for zone, want := range map[string]int{"zone-a": 1, "zone-c": 2, "": 2} {
		if got := len(plan(preferClose, "n1", zone).backends()); got != want {
			t.Errorf("prefer-close in zone %q: %d backends in the table, want %d", zone, got, want)
		}
	}
	if programmable(flows.Service{Key: flows.Key{VIP: netip.MustParseAddr("2001:db8::10"), Protocol: flows.TCP, Port: 80}}) {
		t.Error("an IPv6 VIP is programmable in the ip table")
	}
	if n, ok := chainParam(persistChain(90*time.Second), persistPrefix); !ok || n != 90 {
		t.Errorf("persist chain %q parameter %d %v", persistChain(90*time.Second), n, ok)
	}
	if n, ok := chainParam(limitChain(7), limitPrefix); !ok || n != 7 {
		t.Errorf("limit chain parameter %d %v", n, ok)
	}
}
