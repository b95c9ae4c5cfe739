package ovn

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flowlb/flowlb/internal/node/ovn/nbdb"
)

// topo is a Neutron-like topology: network A (switch sA) with the VIP
// port and a router port of router r1; network B (sB) with a port of
// router r1 and one of r2; network C (sC) with no router; the external
// network (sExt) with r1's gateway port.
func topo() Topology {
	return Topology{
		SwitchPorts: []nbdb.LogicalSwitchPort{
			{UUID: "pVIP", Addresses: []string{"fa:16:3e:00:00:01 198.18.0.10"}},
			{UUID: "pVIP6", PortSecurity: []string{"fa:16:3e:00:00:06 2001:2::10/64"}},
			{UUID: "pArtr1", Type: "router", Addresses: []string{"router"}, Options: map[string]string{"router-port": "lrp-a1"}},
			{UUID: "pBrtr1", Type: "router", Options: map[string]string{"router-port": "lrp-b1"}},
			{UUID: "pBrtr2", Type: "router", Options: map[string]string{"router-port": "lrp-b2"}},
			{UUID: "pC", Addresses: []string{"fa:16:3e:00:00:03 198.18.0.30"}},
			{UUID: "pExtrtr1", Type: "router", Options: map[string]string{"router-port": "lrp-gw1"}},
			{UUID: "pOrphan", Addresses: []string{"fa:16:3e:00:00:04 198.18.0.40"}},
		},
		Switches: []nbdb.LogicalSwitch{
			{UUID: "sA", Ports: []string{"pVIP", "pArtr1"}},
			{UUID: "sB", Ports: []string{"pVIP6", "pBrtr1", "pBrtr2"}},
			{UUID: "sC", Ports: []string{"pC"}},
			{UUID: "sExt", Ports: []string{"pExtrtr1"}},
		},
		Routers: []nbdb.LogicalRouter{
			{UUID: "r1", Ports: []string{"lrpA1", "lrpB1", "lrpGW1"}},
			{UUID: "r2", Ports: []string{"lrpB2"}},
		},
		RouterPorts: []nbdb.LogicalRouterPort{{UUID: "lrpA1", Name: "lrp-a1"}, {UUID: "lrpB1", Name: "lrp-b1"}, {UUID: "lrpB2", Name: "lrp-b2"},
			{UUID: "lrpGW1", Name: "lrp-gw1", GatewayChassis: []string{"gc1"}}},
	}
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestAttach(t *testing.T) {
	tests := []struct {
		name  string
		addrs []netip.Addr
		want  Attachment
	}{
		// r1's other switch, sB, balances its VMs before r1 (r2,
		// behind sB only, is not attached: one hop from the VIP), but
		// not the external network's, behind r1's gateway port: that
		// one is External, for the guards.
		{"the VIP port's switch, its router and the router's switches", addrs("198.18.0.10"), Attachment{Switches: []string{"sA", "sB"}, Routers: []string{"r1"}, External: []string{"sExt"}}},
		{"IPv6 in port_security, two routers", addrs("2001:2::10"), Attachment{Switches: []string{"sA", "sB"}, Routers: []string{"r1", "r2"}, External: []string{"sExt"}}},
		{"both families: the union", addrs("198.18.0.10", "2001:2::10"), Attachment{Switches: []string{"sA", "sB"}, Routers: []string{"r1", "r2"}, External: []string{"sExt"}}},
		{"a switch with no router", addrs("198.18.0.30"), Attachment{Switches: []string{"sC"}}},
		{"no port holds the VIP", addrs("198.18.0.50"), Attachment{Missing: addrs("198.18.0.50")}},
		{"a port on no switch", addrs("198.18.0.40"), Attachment{Missing: addrs("198.18.0.40")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Attach(topo(), map[string]Row{"r": {Name: "r", Addrs: tc.addrs}})["r"]
			if d := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
