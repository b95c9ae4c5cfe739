package compiler

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// IPv6 and dual-stack load balancers: every VIP keeps the members and
// source ranges of its own family (flows do not translate between
// families), whichever family the VIP and the additional VIPs have.
func TestCompileIPv6(t *testing.T) {
	v6 := func(t *lbaas.Tree) {
		t.LB.VIPAddress = "2001:2:0:8000::10"
		t.Members = []*lbaas.Member{member("m2", "2001:2:0:18::2", 8080, 1), member("m1", "2001:2:0:17::2", 8080, 3)}
	}
	for _, tc := range []struct {
		name string
		edit func(t *lbaas.Tree)
		want string
		// cidrs are each service's allowed_cidrs, by VIP.
		cidrs map[string][]string
	}{
		{"IPv6 VIP, IPv6 members", v6, "TCP 2001:2:0:8000::10:80 -> [2001:2:0:17::2:8080/3 2001:2:0:18::2:8080/1]", nil},
		{"IPv6 VIP written long is the same address", func(t *lbaas.Tree) {
			v6(t)
			t.LB.VIPAddress = "2001:0002:0000:8000:0000:0000:0000:0010"
		}, "TCP 2001:2:0:8000::10:80 -> [2001:2:0:17::2:8080/3 2001:2:0:18::2:8080/1]", nil},
		{"IPv6 VIP with IPv4 members only rejects", func(t *lbaas.Tree) { t.LB.VIPAddress = "2001:2:0:8000::10" },
			"TCP 2001:2:0:8000::10:80 -> []", nil},
		{"IPv4 VIP with IPv6 members only rejects", func(t *lbaas.Tree) {
			t.Members = []*lbaas.Member{member("m6", "2001:2:0:17::2", 8080, 1)}
		}, "TCP 198.19.0.10:80 -> []", nil},
		{"dual stack, IPv6 VIP first: each VIP its family's members", func(t *lbaas.Tree) {
			v6(t)
			t.LB.AdditionalVIPs = []lbaas.AdditionalVIP{{IPAddress: "198.19.0.10"}}
			t.Members = append(t.Members, member("m4", "198.18.17.2", 8080, 2))
		}, "TCP 2001:2:0:8000::10:80 -> [2001:2:0:17::2:8080/3 2001:2:0:18::2:8080/1]; TCP 198.19.0.10:80 -> [198.18.17.2:8080/2]", nil},
		{"IPv4-mapped member address counts as IPv4", func(t *lbaas.Tree) {
			t.LB.AdditionalVIPs = []lbaas.AdditionalVIP{{IPAddress: "2001:2:0:8000::10"}}
			t.Members = []*lbaas.Member{member("m1", "::ffff:198.18.17.2", 8080, 1), member("m6", "2001:2:0:17::2", 8080, 1)}
		}, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/1]; TCP 2001:2:0:8000::10:80 -> [2001:2:0:17::2:8080/1]", nil},
		{"allowed_cidrs split by family on dual stack", func(t *lbaas.Tree) {
			t.LB.AdditionalVIPs = []lbaas.AdditionalVIP{{IPAddress: "2001:2:0:8000::10"}}
			t.Listeners[0].AllowedCIDRs = []string{"198.18.0.0/16", "2001:2:0:17::1/64"}
			t.Members = append(t.Members, member("m6", "2001:2:0:17::2", 8080, 1))
		}, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]; TCP 2001:2:0:8000::10:80 -> [2001:2:0:17::2:8080/1]",
			map[string][]string{"198.19.0.10": {"198.18.0.0/16"}, "2001:2:0:8000::10": {"2001:2:0:17::/64"}}},
		{"IPv6-only allowed_cidrs: the IPv4 VIP does not carry the listener", func(t *lbaas.Tree) {
			t.LB.AdditionalVIPs = []lbaas.AdditionalVIP{{IPAddress: "2001:2:0:8000::10"}}
			t.Listeners[0].AllowedCIDRs = []string{"2001:2::/48"}
		}, "TCP 2001:2:0:8000::10:80 -> []", map[string][]string{"2001:2:0:8000::10": {"2001:2::/48"}}},
		{"IPv6 external IP of a listener", func(t *lbaas.Tree) {
			v6(t)
			t.Listeners[0].Tags = []string{flows.TagExternalIPPrefix + "2001:2:0:8000:8000::7"}
		}, "TCP 2001:2:0:8000::10:80 -> [2001:2:0:17::2:8080/3 2001:2:0:18::2:8080/1]; TCP 2001:2:0:8000:8000::7:80 -> [2001:2:0:17::2:8080/3 2001:2:0:18::2:8080/1]", nil},
		{"IPv4 floating IP of the IPv4 VIP on a dual-stack LB", func(t *lbaas.Tree) {
			t.LB.AdditionalVIPs = []lbaas.AdditionalVIP{{IPAddress: "2001:2:0:8000::10"}}
			t.FloatingIPs = []*lbaas.FloatingIP{fip("f1", "198.19.128.7", "198.19.0.10")}
		}, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]; TCP 2001:2:0:8000::10:80 -> []; TCP 198.19.128.7:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := sample()
			tc.edit(tr)
			got := Compile(tr)
			if b := brief(got); b != tc.want {
				t.Fatalf("got  %s\nwant %s", b, tc.want)
			}
			for _, s := range got {
				var cidrs []string
				for _, p := range s.AllowedCIDRs {
					cidrs = append(cidrs, p.String())
				}
				if want := tc.cidrs[s.Key.VIP.String()]; !reflect.DeepEqual(cidrs, want) {
					t.Fatalf("allowed_cidrs of %s: %v, want %v", s.Key.VIP, cidrs, want)
				}
			}
		})
	}
}

// A member's IPv6 address, or IPv6 monitor address, is probed as it is.
func TestProbesIPv6(t *testing.T) {
	tr := monitored()
	tr.Members = tr.Members[1:]
	tr.Members[0].Address = "2001:2:0:17::2"
	want := tcpProbe("m1", "2001:2:0:17::2")
	if got := Probes(tr); !reflect.DeepEqual(got, []flows.Probe{want}) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	mon := "2001:2:0:17::9"
	tr.Members[0].MonitorAddress = &mon
	want.Address = netip.MustParseAddr(mon)
	if got := Probes(tr); !reflect.DeepEqual(got, []flows.Probe{want}) {
		t.Fatalf("monitor address: got %+v, want %+v", got, want)
	}
}
