package ovn

import (
	"context"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"

	"github.com/flowlb/flowlb/internal/node/ovn/nbdb"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

func TestLSPAddrs(t *testing.T) {
	tests := []struct {
		name string
		port nbdb.LogicalSwitchPort
		want []netip.Addr
	}{
		{"addresses", nbdb.LogicalSwitchPort{Addresses: []string{"fa:16:3e:00:00:01 198.18.0.10"}}, addrs("198.18.0.10")},
		{"Neutron's record only (a VIP port Neutron writes no addresses for)",
			nbdb.LogicalSwitchPort{ExternalIDs: map[string]string{NeutronCIDRsKey: "198.18.0.10/24 2001:2::10/64"}}, addrs("198.18.0.10", "2001:2::10")},
		{"each address once", nbdb.LogicalSwitchPort{Addresses: []string{"fa:16:3e:00:00:01 198.18.0.10"},
			PortSecurity: []string{"fa:16:3e:00:00:01 198.18.0.10"}, ExternalIDs: map[string]string{NeutronCIDRsKey: "198.18.0.10/24"}}, addrs("198.18.0.10")},
		{"none", nbdb.LogicalSwitchPort{Addresses: []string{"unknown"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, lspAddrs(&tc.port), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestFloatingOf(t *testing.T) {
	ports := []nbdb.LogicalSwitchPort{
		{Name: "vip", ExternalIDs: map[string]string{NeutronCIDRsKey: "198.18.0.10/24 2001:2::10/64", NeutronFIPKey: "198.18.2.50"}},
		{Name: "vm", Addresses: []string{"fa:16:3e:00:00:02 198.18.0.11"}, ExternalIDs: map[string]string{NeutronFIPKey: "198.18.2.51"}},
		{Name: "no-fip", Addresses: []string{"fa:16:3e:00:00:03 198.18.0.12"}},
		{Name: "bad", Addresses: []string{"fa:16:3e:00:00:04 198.18.0.13"}, ExternalIDs: map[string]string{NeutronFIPKey: "not-an-address"}},
		{Name: "rtr", Type: "router", ExternalIDs: map[string]string{NeutronFIPKey: "198.18.2.52", NeutronCIDRsKey: "198.18.0.1/24"}},
	}
	want := map[netip.Addr][]netip.Addr{
		// The IPv6 fixed IP gets no IPv4 floating IP.
		netip.MustParseAddr("198.18.0.10"): addrs("198.18.2.50"),
		netip.MustParseAddr("198.18.0.11"): addrs("198.18.2.51"),
	}
	if d := cmp.Diff(want, floatingOf(ports), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestWithFloatingIPs(t *testing.T) {
	fips := map[netip.Addr][]netip.Addr{netip.MustParseAddr("198.18.0.10"): addrs("198.18.2.50")}
	tests := []struct {
		name string
		vips map[string]string
		want map[string]string
	}{
		{"every port of the VIP, with its backends",
			map[string]string{"198.18.0.10:80": "198.18.1.1:8080,198.18.1.2:8080", "198.18.0.10:443": ""},
			map[string]string{"198.18.0.10:80": "198.18.1.1:8080,198.18.1.2:8080", "198.18.0.10:443": "",
				"198.18.2.50:80": "198.18.1.1:8080,198.18.1.2:8080", "198.18.2.50:443": ""}},
		{"a floating IP the server gave is kept as written",
			map[string]string{"198.18.0.10:80": "198.18.1.1:8080", "198.18.2.50:80": "198.18.1.9:8080"},
			map[string]string{"198.18.0.10:80": "198.18.1.1:8080", "198.18.2.50:80": "198.18.1.9:8080"}},
		{"a VIP without one", map[string]string{"198.18.0.20:80": "198.18.1.1:8080"}, map[string]string{"198.18.0.20:80": "198.18.1.1:8080"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows := map[string]Row{"r": {Name: "r", Vips: tc.vips}}
			before := cmp.Diff(nil, rows)
			got := WithFloatingIPs(rows, fips)
			if d := cmp.Diff(tc.want, got["r"].Vips); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			if cmp.Diff(nil, rows) != before {
				t.Errorf("the rows given were changed: %v", rows)
			}
		})
	}
}

// TestFloatingIPFollowed: Neutron associating a floating IP with the VIP
// port (external_ids neutron:port_fip on its switch port, which has no
// addresses, as Neutron writes a load balancer's VIP port) puts the
// floating IP in the row with the VIP's backends, and its release takes
// it out, with no repair counted.
func TestFloatingIPFollowed(t *testing.T) {
	ep := inMemoryNB(t)
	other := nbClient(t, ep)
	testTopology(t, other)
	ctx := context.Background()
	ops, err := other.Create(&nbdb.LogicalSwitchPort{UUID: "vip3", Name: "ovn-lb-vip-lb3",
		ExternalIDs: map[string]string{NeutronCIDRsKey: "198.18.0.30/24"}})
	if err != nil {
		t.Fatal(err)
	}
	sws := []nbdb.LogicalSwitch{}
	if err := other.WhereCache(func(s *nbdb.LogicalSwitch) bool { return s.Name == "net-a" }).List(ctx, &sws); err != nil || len(sws) != 1 {
		t.Fatal(sws, err)
	}
	sw := &sws[0]
	more, err := other.Where(sw).Mutate(sw, model.Mutation{Field: &sw.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{"vip3"}})
	transact(t, other, append(ops, more...), err)

	d, err := New(ctx, Config{NB: ep}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	web := svc("198.18.0.30", 80, "lb3", be("198.18.1.1", 8080, 1))
	if err := d.Sync(ctx, flows.Table{Revision: 1, Services: table(web)}); err != nil {
		t.Fatal(err)
	}
	bare := state{found: true, vips: map[string]string{"198.18.0.30:80": "198.18.1.1:8080"}, switches: []string{"net-a"}, routers: []string{"r1"}}
	expect(t, other, "flowlb-lb3-tcp", bare)

	setFIP := func(fip string) {
		t.Helper()
		var ps []nbdb.LogicalSwitchPort
		if err := other.WhereCache(func(p *nbdb.LogicalSwitchPort) bool { return p.Name == "ovn-lb-vip-lb3" }).List(ctx, &ps); err != nil || len(ps) != 1 {
			t.Fatal(ps, err)
		}
		p := &ps[0]
		p.ExternalIDs = map[string]string{NeutronCIDRsKey: "198.18.0.30/24"}
		if fip != "" {
			p.ExternalIDs[NeutronFIPKey] = fip
		}
		ops, err := other.Where(p).Update(p, &p.ExternalIDs)
		transact(t, other, ops, err)
	}
	setFIP("198.18.2.50")
	expect(t, other, "flowlb-lb3-tcp", state{found: true, vips: map[string]string{"198.18.0.30:80": "198.18.1.1:8080", "198.18.2.50:80": "198.18.1.1:8080"},
		switches: []string{"net-a"}, routers: []string{"r1"}})
	verify(t, d, nil)

	// A member gone: the floating IP's backends follow the VIP's.
	web.Backends = []flows.Backend{be("198.18.1.2", 8080, 1)}
	if err := d.Apply(ctx, []flows.Service{web}, nil); err != nil {
		t.Fatal(err)
	}
	expect(t, other, "flowlb-lb3-tcp", state{found: true, vips: map[string]string{"198.18.0.30:80": "198.18.1.2:8080", "198.18.2.50:80": "198.18.1.2:8080"},
		switches: []string{"net-a"}, routers: []string{"r1"}})

	setFIP("")
	expect(t, other, "flowlb-lb3-tcp", state{found: true, vips: map[string]string{"198.18.0.30:80": "198.18.1.2:8080"},
		switches: []string{"net-a"}, routers: []string{"r1"}})
	verify(t, d, nil)
	if n := d.Unattached(); n != 0 {
		t.Errorf("%d VIPs counted without a port, want 0", n)
	}
}
