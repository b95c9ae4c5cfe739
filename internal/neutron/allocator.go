package neutron

import (
	"github.com/flowlb/flowlb/internal/lbaas"
	"github.com/flowlb/flowlb/internal/store"
)

// Allocator gives load balancers their VIPs from this Neutron subset; it
// implements lbaas.VIPAllocator.
type Allocator struct{}

var _ lbaas.VIPAllocator = Allocator{}

// Allocate allocates in the caller's transaction.
func (Allocator) Allocate(tx store.Tx, r lbaas.VIPRequest) (lbaas.VIP, error) {
	v, err := AllocateVIP(tx, VIPRequest{ProjectID: r.ProjectID, LoadBalancerID: r.LoadBalancerID, SubnetID: r.SubnetID, NetworkID: r.NetworkID, PortID: r.PortID, Address: r.Address})
	if err != nil {
		return lbaas.VIP{}, err
	}
	// ReleaseVIP knows which ports were created for load balancers and
	// only unbinds a user's own port, so the domain may always release.
	return lbaas.VIP{Address: v.Address, PortID: v.PortID, SubnetID: v.SubnetID, NetworkID: v.NetworkID, Owned: true}, nil
}

// Release frees a VIP port in the caller's transaction.
func (Allocator) Release(tx store.Tx, portID string) error { return ReleaseVIP(tx, portID) }
