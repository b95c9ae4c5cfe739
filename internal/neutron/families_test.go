package neutron

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/store"
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
