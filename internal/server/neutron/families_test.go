package neutron

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

// On a network with subnets of both families a port without fixed_ips
// gets one address of each (Neutron's IPAM), a VIP given by its network
// alone one address, IPv4 first (Octavia's choice of the VIP subnet);
// each takes the first subnet of the family with room.
func TestAddressFamiliesOfANetwork(t *testing.T) {
	for _, tc := range []struct {
		name    string
		subnets []string // CIDRs in the network's order; "full:" marks one without room
		port    string   // addresses of a port without fixed_ips
		vip     string   // address of a VIP given by the network
	}{
		{"IPv4 only", []string{"10.1.0.0/24"}, "10.1.0.2", "10.1.0.2"},
		{"IPv6 only", []string{"2001:2:0:1::/64"}, "2001:2:0:1::2", "2001:2:0:1::2"},
		{"IPv6 subnet first", []string{"2001:2:0:1::/64", "10.1.0.0/24"}, "10.1.0.2 2001:2:0:1::2", "10.1.0.2"},
		{"two of each", []string{"2001:2:0:1::/64", "10.1.0.0/24", "2001:2:0:2::/64", "10.2.0.0/24"}, "10.1.0.2 2001:2:0:1::2", "10.1.0.2"},
		{"IPv4 full", []string{"full:10.1.0.0/30", "2001:2:0:1::/64", "10.2.0.0/24"}, "10.2.0.2 2001:2:0:1::2", "10.2.0.2"},
		{"every IPv4 full", []string{"full:10.1.0.0/30", "2001:2:0:1::/64"}, "", "2001:2:0:1::2"},
		{"IPv6 full", []string{"full:2001:2:0:1::/127", "10.1.0.0/24"}, "", "10.1.0.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, what := range []string{"port", "vip"} {
				e := newEnv(t)
				n := e.network("p1", false)
				for _, c := range tc.subnets {
					full := strings.HasPrefix(c, "full:")
					s := e.subnet(n.ID, strings.TrimPrefix(c, "full:"))
					if full {
						// Take its one pool address.
						if _, err := e.allocate(VIPRequest{ProjectID: "p1", SubnetID: s.ID, LoadBalancerID: "filler"}); err != nil {
							t.Fatal(err)
						}
					}
				}
				var got string
				var err error
				if what == "port" {
					err = e.update(func(tx store.Tx) error {
						net, err := getNetwork(tx, n.ID)
						if err != nil {
							return err
						}
						p, err := createPort(tx, newAllocator(tx, processHints), net, Port{ProjectID: "p1"}, nil, false, "")
						var addrs []string
						for _, f := range p.FixedIPs {
							addrs = append(addrs, f.IPAddress)
						}
						got = strings.Join(addrs, " ")
						return err
					})
				} else {
					var v VIP
					v, err = e.allocate(VIPRequest{ProjectID: "p1", NetworkID: n.ID, LoadBalancerID: "lb"})
					got = v.Address
				}
				want := map[string]string{"port": tc.port, "vip": tc.vip}[what]
				if want == "" {
					// A family with subnets but no room: Neutron fails the port.
					if err == nil || !strings.Contains(fmt.Sprint(err), "No more IP addresses available") {
						t.Fatalf("%s: got %q %v, want no more addresses", what, got, err)
					}
					continue
				}
				if err != nil || got != want {
					t.Fatalf("%s: got %q %v, want %q", what, got, err, want)
				}
			}
		})
	}
}

// A user's port lent as a VIP: which fixed IP becomes the VIP, in
// Octavia's order and words.
func TestPortVIP(t *testing.T) {
	ips := []FixedIP{{SubnetID: "s4", IPAddress: "10.1.0.5"}, {SubnetID: "s6", IPAddress: "2001:2:0:1::5"}}
	for _, tc := range []struct {
		name   string
		ips    []FixedIP
		subnet string
		addr   string
		want   string // the address, or the refusal
	}{
		{"by subnet", ips, "s6", "", "2001:2:0:1::5"},
		{"by subnet, the address is the subnet's", ips, "s4", "2001:2:0:1::5", "10.1.0.5"},
		{"by address", ips, "", "2001:2:0:1::5", "2001:2:0:1::5"},
		{"by address written long", ips, "", "2001:0002:0:1:0:0:0:5", "2001:2:0:1::5"},
		{"the only one", ips[:1], "", "", "10.1.0.5"},
		{"two families, neither asked", ips, "", "", "Validation failure: VIP port's subnet could not be determined. Please specify either a VIP subnet or address."},
		{"subnet not on the port", ips, "s9", "", "Validation failure: No VIP address found on the specified VIP port within the specified subnet."},
		{"address not on the port", ips, "", "10.1.0.6", "Validation failure: Specified VIP address not found on the specified VIP port."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var addr netip.Addr
			if tc.addr != "" {
				addr = netip.MustParseAddr(tc.addr)
			}
			ip, err := portVIP(tc.ips, tc.subnet, addr)
			got := ""
			var le *lbaas.Error
			switch {
			case errors.As(err, &le) && le.Validation:
				// The API prefixes a validation refusal so.
				got = "Validation failure: " + le.Detail
			case err != nil:
				t.Fatalf("refused otherwise: %v", err)
			default:
				got = ip.IPAddress
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
