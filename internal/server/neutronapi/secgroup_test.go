package neutronapi

import (
	"slices"
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
)

func listener(proto string, port int, cidrs ...string) *lbaas.Listener {
	l := &lbaas.Listener{Protocol: proto, ProtocolPort: port, AllowedCIDRs: cidrs}
	l.ProvisioningStatus = lbaas.Active
	return l
}

func TestWantRules(t *testing.T) {
	v4 := &lbaas.LoadBalancer{VIPAddress: "198.18.225.10"}
	v6 := &lbaas.LoadBalancer{VIPAddress: "2001:2::10"}
	dual := &lbaas.LoadBalancer{VIPAddress: "198.18.225.10", AdditionalVIPs: []lbaas.AdditionalVIP{{IPAddress: "2001:2::10"}}}
	deleting := listener("TCP", 81)
	deleting.ProvisioningStatus = lbaas.PendingDelete
	for _, tc := range []struct {
		name      string
		lb        *lbaas.LoadBalancer
		listeners []*lbaas.Listener
		want      []Rule
	}{
		{"no listener, no ingress rule", v4, nil, nil},
		{"TCP from anywhere", v4, []*lbaas.Listener{listener("TCP", 80)},
			[]Rule{{IPv4, "tcp", 80, ""}}},
		{"UDP and SCTP by their protocol", v4, []*lbaas.Listener{listener("UDP", 53), listener("SCTP", 9000)},
			[]Rule{{IPv4, "sctp", 9000, ""}, {IPv4, "udp", 53, ""}}},
		{"protocols over TCP open tcp", v4, []*lbaas.Listener{listener("HTTP", 8080), listener("TERMINATED_HTTPS", 443)},
			[]Rule{{IPv4, "tcp", 443, ""}, {IPv4, "tcp", 8080, ""}}},
		{"one port, two protocols", v4, []*lbaas.Listener{listener("TCP", 53), listener("UDP", 53)},
			[]Rule{{IPv4, "tcp", 53, ""}, {IPv4, "udp", 53, ""}}},
		{"an IPv6 VIP", v6, []*lbaas.Listener{listener("TCP", 80)},
			[]Rule{{IPv6, "tcp", 80, ""}}},
		{"both families from anywhere", dual, []*lbaas.Listener{listener("TCP", 80)},
			[]Rule{{IPv4, "tcp", 80, ""}, {IPv6, "tcp", 80, ""}}},
		{"allowed_cidrs of both families, masked", dual, []*lbaas.Listener{listener("UDP", 5000, "198.18.0.7/16", "2001:2:0:1::/64")},
			[]Rule{{IPv4, "udp", 5000, "198.18.0.0/16"}, {IPv6, "udp", 5000, "2001:2:0:1::/64"}}},
		{"allowed_cidrs of a family no VIP has open nothing", v4, []*lbaas.Listener{listener("TCP", 80, "2001:2::/48", "198.18.1.0/24")},
			[]Rule{{IPv4, "tcp", 80, "198.18.1.0/24"}}},
		{"a whole family as a range is the family", dual, []*lbaas.Listener{listener("TCP", 80, "0.0.0.0/0")},
			[]Rule{{IPv4, "tcp", 80, ""}}},
		{"a listener being deleted opens nothing", v4, []*lbaas.Listener{deleting, listener("TCP", 80)},
			[]Rule{{IPv4, "tcp", 80, ""}}},
		{"duplicates once", v4, []*lbaas.Listener{listener("TCP", 80, "198.18.1.0/24", "198.18.1.1/24")},
			[]Rule{{IPv4, "tcp", 80, "198.18.1.0/24"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WantRules(tc.lb, tc.listeners); !slices.Equal(got, tc.want) {
				t.Errorf("WantRules = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDiffRules(t *testing.T) {
	egress4 := HaveRule{ID: "e4", Direction: "egress", Ethertype: IPv4}
	egress6 := HaveRule{ID: "e6", Direction: "egress", Ethertype: IPv6}
	tcp80 := HaveRule{ID: "r80", Direction: "ingress", Ethertype: IPv4, Protocol: "tcp", PortMin: 80, PortMax: 80}
	want80 := Rule{IPv4, "tcp", 80, ""}
	for _, tc := range []struct {
		name   string
		want   []Rule
		have   []HaveRule
		create []Rule
		del    []string
	}{
		{"a new group: the defaults stay, the rules are made", []Rule{want80}, []HaveRule{egress4, egress6},
			[]Rule{want80}, nil},
		{"equal: nothing to do", []Rule{want80}, []HaveRule{egress4, tcp80}, nil, nil},
		{"a listener gone: its rule deleted", nil, []HaveRule{egress4, tcp80}, nil, []string{"r80"}},
		{"whole family given as /0 by someone: the same rule", []Rule{want80},
			[]HaveRule{{ID: "z", Direction: "ingress", Ethertype: IPv4, Protocol: "tcp", PortMin: 80, PortMax: 80, RemoteIPPrefix: "0.0.0.0/0"}},
			nil, nil},
		{"allowed_cidrs changed: old range out, new in", []Rule{{IPv4, "tcp", 80, "198.18.2.0/24"}},
			[]HaveRule{{ID: "old", Direction: "ingress", Ethertype: IPv4, Protocol: "tcp", PortMin: 80, PortMax: 80, RemoteIPPrefix: "198.18.1.0/24"}},
			[]Rule{{IPv4, "tcp", 80, "198.18.2.0/24"}}, []string{"old"}},
		{"a port changed", []Rule{{IPv4, "tcp", 81, ""}}, []HaveRule{tcp80},
			[]Rule{{IPv4, "tcp", 81, ""}}, []string{"r80"}},
		{"a second copy is deleted", []Rule{want80}, []HaveRule{tcp80, {ID: "dup", Direction: "ingress", Ethertype: IPv4, Protocol: "TCP", PortMin: 80, PortMax: 80}},
			nil, []string{"dup"}},
		{"a port range is not flowlb's shape: deleted", nil,
			[]HaveRule{{ID: "range", Direction: "ingress", Ethertype: IPv4, Protocol: "udp", PortMin: 1, PortMax: 100}}, nil, []string{"range"}},
		{"rules of other protocols and from groups are left", nil,
			[]HaveRule{{ID: "icmp", Direction: "ingress", Ethertype: IPv4, Protocol: "icmp"},
				{ID: "vrrp", Direction: "ingress", Ethertype: IPv4, Protocol: "112"},
				{ID: "grp", Direction: "ingress", Ethertype: IPv4, Protocol: "tcp", PortMin: 80, PortMax: 80, RemoteGroupID: "g"}},
			nil, nil},
		{"the other family's rule of a family the VIPs lost is deleted", []Rule{want80},
			[]HaveRule{tcp80, {ID: "v6", Direction: "ingress", Ethertype: IPv6, Protocol: "tcp", PortMin: 80, PortMax: 80}},
			nil, []string{"v6"}},
		{"SCTP and UDP kept by protocol", []Rule{{IPv4, "sctp", 9000, ""}, {IPv4, "udp", 53, ""}},
			[]HaveRule{{ID: "s", Direction: "ingress", Ethertype: IPv4, Protocol: "sctp", PortMin: 9000, PortMax: 9000},
				{ID: "u", Direction: "ingress", Ethertype: IPv4, Protocol: "tcp", PortMin: 53, PortMax: 53}},
			[]Rule{{IPv4, "udp", 53, ""}}, []string{"u"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			create, del := DiffRules(tc.want, tc.have)
			if !slices.Equal(create, tc.create) || !slices.Equal(del, tc.del) {
				t.Errorf("DiffRules = create %v, delete %v; want %v, %v", create, del, tc.create, tc.del)
			}
		})
	}
}
