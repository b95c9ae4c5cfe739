package neutron

import (
	"hash/fnv"
	"net/netip"

	"github.com/google/uuid"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

// NoopAllocator is the counterpart of Octavia's noop network driver, for
// API conformance runs (octavia-tempest-plugin with test_with_noop): any
// subnet, network or port ID is taken as given, nothing is allocated or
// checked, and the address is the one asked for or one derived from the
// load balancer's ID in 198.19.255.0/24. Addresses are not unique: never
// use it with agents.
type NoopAllocator struct{}

var (
	_ lbaas.VIPAllocator = NoopAllocator{}
	_ lbaas.VIPSharing   = NoopAllocator{}
)

// Allocate answers the request as it is.
func (NoopAllocator) Allocate(_ store.Tx, r lbaas.VIPRequest) (lbaas.VIP, error) {
	v := lbaas.VIP{Address: r.Address, SubnetID: r.SubnetID, NetworkID: r.NetworkID, PortID: r.PortID}
	if v.NetworkID == "" {
		// As Octavia's noop driver: every subnet is on the network of
		// the load balancer's VIP.
		v.NetworkID = r.VIPNetworkID
	}
	if v.Address == "" {
		h := fnv.New32a()
		h.Write([]byte(r.LoadBalancerID))
		v.Address = netip.AddrFrom4([4]byte{198, 19, 255, byte(1 + h.Sum32()%254)}).String()
	}
	for _, id := range []*string{&v.SubnetID, &v.NetworkID, &v.PortID} {
		if *id == "" {
			*id = uuid.NewString()
		}
	}
	return v, nil
}

// Release has nothing to free.
func (NoopAllocator) Release(store.Tx, string) error { return nil }

// MayBeShared says no: as under Octavia's noop network driver, nothing
// about addresses is checked, so the domain does not look for other load
// balancers' listeners on a VIP either (conformance suites reuse
// addresses, and no data plane serves them).
func (NoopAllocator) MayBeShared(store.ReadTx, string) (bool, error) { return false, nil }
