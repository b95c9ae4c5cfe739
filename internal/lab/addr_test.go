package lab

import (
	"net/netip"
	"testing"
)

func TestAddressPlan(t *testing.T) {
	cases := []struct {
		name string
		got  netip.Addr
		want string
	}{
		{"node 1", NodeAddr(1), "198.18.0.1"},
		{"node 200", NodeAddr(MaxNodes), "198.18.0.200"},
		{"pod gateway n1", PodGateway(1), "198.18.17.1"},
		{"pod n1-p1", PodAddr(1, 1), "198.18.17.2"},
		{"pod n3-p10", PodAddr(3, 10), "198.18.19.11"},
		{"last pod", PodAddr(MaxNodes, MaxPodsPerNode), "198.18.216.251"},
		{"server 1", ServerAddr(1), "198.18.0.241"},
		{"server 9", ServerAddr(MaxServers), "198.18.0.249"},
		{"database", DBAddr, "198.18.0.239"},
	}
	for _, c := range cases {
		if c.got.String() != c.want {
			t.Errorf("%s: %s, want %s", c.name, c.got, c.want)
		}
	}
	if got := PodCIDR(2).String(); got != "198.18.18.0/24" {
		t.Errorf("PodCIDR(2) = %s", got)
	}
	// Everything must stay in 198.18.0.0/15 and off the VIP ranges, and
	// node addresses must stay below the fixed fabric hosts.
	lab := netip.MustParsePrefix("198.18.0.0/15")
	for _, a := range []netip.Addr{NodeAddr(MaxNodes), PodAddr(MaxNodes, MaxPodsPerNode), ControlAddr, RouterFabricAddr, RouterClientAddr, ClientAddr, DBAddr, ServerAddr(1), ServerAddr(MaxServers)} {
		if !lab.Contains(a) || ServiceVIPs.Contains(a) || ExternalVIPs.Contains(a) {
			t.Errorf("%s outside the lab range or inside a VIP range", a)
		}
	}
	// On the fabric: nodes, then the database, the servers, the control
	// address and the router, in that order and without overlap.
	fabric := []netip.Addr{NodeAddr(MaxNodes), DBAddr, ServerAddr(1), ServerAddr(MaxServers), ControlAddr, RouterFabricAddr}
	for k := 1; k < len(fabric); k++ {
		if fabric[k-1].Compare(fabric[k]) >= 0 {
			t.Errorf("fabric address %s not below %s", fabric[k-1], fabric[k])
		}
	}
	for _, a := range fabric {
		if !FabricCIDR.Contains(a) {
			t.Errorf("%s is not on the fabric %s", a, FabricCIDR)
		}
	}
}

// TestAddressPlan6: the IPv6 plan mirrors the IPv4 one with the same
// decimal digits, keeps every pod in one prefix, stays inside 2001:2::/48
// and off its VIP ranges, and NodeIndex reads a node's fabric address of
// either family back.
func TestAddressPlan6(t *testing.T) {
	cases := []struct {
		name string
		got  netip.Addr
		want string
	}{
		{"node 1", NodeAddr6(1), "2001:2::1"},
		{"node 12", NodeAddr6(12), "2001:2::12"},
		{"node 200", NodeAddr6(MaxNodes), "2001:2::200"},
		{"pod n1-p1", PodAddr6(1, 1), "2001:2:0:4001::2"},
		{"pod n3-p10", PodAddr6(3, 10), "2001:2:0:4003::11"},
		{"pod n12-p3", PodAddr6(12, 3), "2001:2:0:4012::4"},
		{"last pod", PodAddr6(MaxNodes, MaxPodsPerNode), "2001:2:0:4200::251"},
		{"server 1", ServerAddr6(1), "2001:2::241"},
		{"server 9", ServerAddr6(MaxServers), "2001:2::249"},
	}
	for _, c := range cases {
		if c.got.String() != c.want {
			t.Errorf("%s: %s, want %s", c.name, c.got, c.want)
		}
	}
	// Every IPv4 host address has its IPv6 twin.
	for _, h := range []struct{ v4, v6 netip.Addr }{
		{NodeAddr(7), NodeAddr6(7)}, {PodAddr(3, 10), PodAddr6(3, 10)}, {PodAddr(MaxNodes, MaxPodsPerNode), PodAddr6(MaxNodes, MaxPodsPerNode)},
		{ServerAddr(2), ServerAddr6(2)}, {DBAddr, DBAddr6}, {ControlAddr, ControlAddr6}, {RouterFabricAddr, RouterFabricAddr6},
		{RouterClientAddr, RouterClientAddr6}, {ClientAddr, ClientAddr6},
	} {
		if got, ok := Twin6(h.v4); !ok || got != h.v6 {
			t.Errorf("Twin6(%s) = %s %v, want %s", h.v4, got, ok, h.v6)
		}
	}
	for _, a := range []string{"198.19.64.1", "198.19.128.5", "10.0.0.1", "2001:2::1", "198.18.17.1", "198.18.16.2", "198.18.2.2"} {
		if got, ok := Twin6(netip.MustParseAddr(a)); ok {
			t.Errorf("Twin6(%s) = %s, want none", a, got)
		}
	}
	if got := PodCIDR6(2).String(); got != "2001:2:0:4002::/64" {
		t.Errorf("PodCIDR6(2) = %s", got)
	}
	for i := 1; i <= MaxNodes; i++ {
		for _, a := range []netip.Addr{NodeAddr(i), NodeAddr6(i)} {
			if n, ok := NodeIndex(a); !ok || n != i {
				t.Errorf("NodeIndex(%s) = %d %v, want %d", a, n, ok, i)
			}
		}
		if !PodCIDR6(i).Contains(PodAddr6(i, MaxPodsPerNode)) || PodCIDR6(i).Overlaps(PodCIDR6(i+1)) || !PodCIDRs6.Contains(PodCIDR6(i).Addr()) {
			t.Errorf("pod CIDR %s: last pod outside, overlaps the next node's, or outside %s", PodCIDR6(i), PodCIDRs6)
		}
	}
	for _, a := range []netip.Addr{ControlAddr6, RouterFabricAddr6, DBAddr6, ServerAddr6(1), ClientAddr6, PodAddr6(1, 1),
		netip.MustParseAddr("2001:2::a"), netip.MustParseAddr("2001:2::1:1"), ControlAddr, ClientAddr} {
		if n, ok := NodeIndex(a); ok {
			t.Errorf("NodeIndex(%s) = %d: not a node's address", a, n)
		}
	}
	fabric := []netip.Addr{NodeAddr6(MaxNodes), DBAddr6, ServerAddr6(1), ServerAddr6(MaxServers), ControlAddr6, RouterFabricAddr6}
	for k := 1; k < len(fabric); k++ {
		if fabric[k-1].Compare(fabric[k]) >= 0 {
			t.Errorf("fabric address %s not below %s", fabric[k-1], fabric[k])
		}
	}
	for _, a := range fabric {
		if !FabricCIDR6.Contains(a) {
			t.Errorf("%s is not on the fabric %s", a, FabricCIDR6)
		}
	}
	for _, a := range append(fabric, PodAddr6(1, 1), PodAddr6(MaxNodes, MaxPodsPerNode), RouterClientAddr6, ClientAddr6) {
		if !Lab6CIDR.Contains(a) || ServiceVIPs6.Contains(a) || ExternalVIPs6.Contains(a) {
			t.Errorf("%s outside 2001:2::/48 or inside a VIP range", a)
		}
		if isPod := a == PodAddr6(1, 1) || a == PodAddr6(MaxNodes, MaxPodsPerNode); PodCIDRs6.Contains(a) != isPod {
			t.Errorf("%s: in the pod networks %s %v, want %v", a, PodCIDRs6, !isPod, isPod)
		}
	}
	for _, p := range []netip.Prefix{ServiceVIPs6, ExternalVIPs6, KubeServiceCIDR6, PodCIDRs6} {
		if !Lab6CIDR.Contains(p.Addr()) || p.Bits() < Lab6CIDR.Bits() {
			t.Errorf("%s outside 2001:2::/48", p)
		}
	}
	if ServiceVIPs6.Overlaps(ExternalVIPs6) || !ServiceVIPs6.Contains(KubeServiceCIDR6.Addr()) || KubeServiceCIDR6.Bits() < ServiceVIPs6.Bits() {
		t.Errorf("VIP ranges: service %s, external %s, Kubernetes services %s", ServiceVIPs6, ExternalVIPs6, KubeServiceCIDR6)
	}
}

func TestParseHost(t *testing.T) {
	cases := []struct {
		in   string
		kind string
		i, j int
		err  bool
	}{
		{in: "client", kind: "client"},
		{in: "router", kind: "router"},
		{in: "fabric", kind: "fabric"},
		{in: "n1", kind: "node", i: 1},
		{in: "n12-p3", kind: "pod", i: 12, j: 3},
		{in: "s1", kind: "server", i: 1},
		{in: "s9", kind: "server", i: 9},
		{in: "db", kind: "db"},
		{in: "s0", err: true},
		{in: "s10", err: true},
		{in: "n0", err: true},
		{in: "n1-p0", err: true},
		{in: "n201", err: true},
		{in: "n1-p251", err: true},
		{in: "p1", err: true},
		{in: "", err: true},
	}
	for _, c := range cases {
		kind, i, j, err := ParseHost(c.in)
		if (err != nil) != c.err {
			t.Errorf("ParseHost(%q) error %v, want error %v", c.in, err, c.err)
			continue
		}
		if !c.err && (kind != c.kind || i != c.i || j != c.j) {
			t.Errorf("ParseHost(%q) = %s %d %d, want %s %d %d", c.in, kind, i, j, c.kind, c.i, c.j)
		}
	}
}

func TestNames(t *testing.T) {
	valid := map[string]bool{"a": true, "demo": true, "t1x2y3": true, "abcdefgh": true,
		"": false, "abcdefghi": false, "a-b": false, "Demo": false, "a_b": false}
	for n, want := range valid {
		if got := ValidName(n) == nil; got != want {
			t.Errorf("ValidName(%q) = %v, want %v", n, got, want)
		}
	}
	owners := map[string]string{
		"flb-demo-n1-p3":  "demo",
		"flb-t1-client":   "t1",
		"flb-t1-s3":       "t1",
		"flb-t1-db":       "t1",
		"flb-demo":        "",
		"dpf-n1":          "",
		"flb-BAD-n1":      "",
		"flb-toolongnm-x": "",
	}
	for ns, want := range owners {
		if got := labOfNS(ns); got != want {
			t.Errorf("labOfNS(%q) = %q, want %q", ns, got, want)
		}
	}
	if got := NSName("demo", PodName(2, 3)); got != "flb-demo-n2-p3" {
		t.Errorf("NSName = %s", got)
	}
}

func TestZone(t *testing.T) {
	for _, tc := range []struct {
		node, zones int
		want        string
	}{{1, 3, "zone-a"}, {2, 3, "zone-b"}, {4, 3, "zone-a"}, {3, 2, "zone-a"}, {2, 2, "zone-b"}, {5, 1, "zone-a"}, {2, 0, "zone-a"}} {
		if got := Zone(tc.node, tc.zones); got != tc.want {
			t.Errorf("Zone(%d, %d) = %s, want %s", tc.node, tc.zones, got, tc.want)
		}
	}
	// A lab whose state records no zones (made before they were) has the
	// default.
	if l := (&Lab{}); l.Zones() != DefaultZones || l.Zone(4) != "zone-a" {
		t.Errorf("zones %d, node 4 in %s", l.Zones(), l.Zone(4))
	}
}
