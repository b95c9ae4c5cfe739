package flows

import (
	"net/netip"
	"testing"
)

// TestForZone: which backends a node of a zone uses for a PreferClose
// service (kube-proxy's rule for topology hints: only when every
// endpoint has them, and at least one is for the node's zone).
func TestForZone(t *testing.T) {
	b := func(last byte, zones ...string) Backend {
		return Backend{Address: netip.AddrFrom4([4]byte{198, 18, 17, last}), Port: 8080, Weight: 1, Zones: zones}
	}
	a1, a2, b1, ab := b(1, "zone-a"), b(2, "zone-a"), b(3, "zone-b"), b(4, "zone-a", "zone-b")
	none := b(5)
	cases := []struct {
		name        string
		preferClose bool
		backends    []Backend
		zone        string
		want        []Backend
		zonal       bool
	}{
		{"not PreferClose: every backend", false, []Backend{a1, b1}, "zone-a", []Backend{a1, b1}, false},
		{"the zone's backends", true, []Backend{a1, a2, b1}, "zone-a", []Backend{a1, a2}, true},
		{"the other zone's", true, []Backend{a1, a2, b1}, "zone-b", []Backend{b1}, true},
		{"a backend for two zones serves both", true, []Backend{a1, ab, b1}, "zone-b", []Backend{ab, b1}, true},
		{"none for this zone: every backend", true, []Backend{a1, a2}, "zone-b", []Backend{a1, a2}, false},
		{"a backend without a zone: every backend", true, []Backend{a1, none, b1}, "zone-a", []Backend{a1, none, b1}, false},
		{"a node that does not know its zone: every backend", true, []Backend{a1, b1}, "", []Backend{a1, b1}, false},
		{"no backends", true, nil, "zone-a", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := Service{PreferClose: tc.preferClose, Backends: tc.backends}
			got, zonal := s.ForZone(tc.zone)
			if zonal != tc.zonal || len(got) != len(tc.want) {
				t.Fatalf("got %v (zonal %v), want %v (zonal %v)", got, zonal, tc.want, tc.zonal)
			}
			for i := range got {
				if !SameBackend(got[i], tc.want[i]) {
					t.Errorf("backend %d: %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestNear: which backends a node uses for a PreferClose service whose
// endpoints may carry node hints (trafficDistribution PreferSameNode):
// the node's own first, then its zone's, then every backend, each level
// only when every backend has hints of that level (kube-proxy's rule).
func TestNear(t *testing.T) {
	b := func(last byte, node string, zone string) Backend {
		be := Backend{Address: netip.AddrFrom4([4]byte{198, 18, 17, last}), Port: 8080, Weight: 1, Node: node}
		if node != "" {
			be.ForNodes = []string{node}
		}
		if zone != "" {
			be.Zones = []string{zone}
		}
		return be
	}
	n1a, n1b, n2, n3 := b(1, "n1", "zone-a"), b(2, "n1", "zone-a"), b(3, "n2", "zone-b"), b(4, "n3", "zone-a")
	noNodeHint := b(5, "", "zone-b")
	zoneOnly := func(be Backend) Backend { be.ForNodes = nil; return be }
	cases := []struct {
		name        string
		preferClose bool
		backends    []Backend
		node, zone  string
		want        []Backend
		narrowed    bool
	}{
		{"the node's own backends", true, []Backend{n1a, n1b, n2, n3}, "n1", "zone-a", []Backend{n1a, n1b}, true},
		{"none on the node: its zone's", true, []Backend{n1a, n2, n3}, "n4", "zone-a", []Backend{n1a, n3}, true},
		{"none on the node nor in its zone: every backend", true, []Backend{n1a, n3}, "n2", "zone-b", []Backend{n1a, n3}, false},
		{"a backend without a node hint: the zone level", true, []Backend{n1a, n3, noNodeHint}, "n1", "zone-a", []Backend{n1a, n3}, true},
		{"zone hints only (PreferClose): the zone level", true, []Backend{zoneOnly(n1a), zoneOnly(n2)}, "n1", "zone-a", []Backend{zoneOnly(n1a)}, true},
		{"a backend hinted for two nodes serves both", true, []Backend{{Address: n2.Address, Port: 8080, Weight: 1, ForNodes: []string{"n1", "n2"}}, n3}, "n1", "",
			[]Backend{{Address: n2.Address, Port: 8080, Weight: 1, ForNodes: []string{"n1", "n2"}}}, true},
		{"not PreferClose: every backend", false, []Backend{n1a, n2}, "n1", "zone-a", []Backend{n1a, n2}, false},
		{"a node that does not know its name: the zone level", true, []Backend{n1a, n2, n3}, "", "zone-a", []Backend{n1a, n3}, true},
		{"no backends", true, nil, "n1", "zone-a", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := Service{PreferClose: tc.preferClose, Backends: tc.backends}
			got, narrowed := s.Near(tc.node, tc.zone)
			if narrowed != tc.narrowed || len(got) != len(tc.want) {
				t.Fatalf("got %v (narrowed %v), want %v (narrowed %v)", got, narrowed, tc.want, tc.narrowed)
			}
			for i := range got {
				if !SameBackend(got[i], tc.want[i]) {
					t.Errorf("backend %d: %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}
