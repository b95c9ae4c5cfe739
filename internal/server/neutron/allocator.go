package neutron

import (
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

// Allocator gives load balancers their VIPs from this Neutron subset; it
// implements lbaas.VIPAllocator. The zero Allocator shares this process's
// allocation hints with the Neutron API.
type Allocator struct{ hints *hintTable }

var (
	_ lbaas.VIPAllocator = Allocator{}
	_ lbaas.VIPSharing   = Allocator{}
	_ lbaas.SubnetLookup = Allocator{}
)

// NewAllocator returns an Allocator with hints of its own, as a separate
// server process has: for benchmarks and tests that run several servers
// sharing one database in one process.
func NewAllocator() Allocator { return Allocator{hints: &hintTable{}} }

func (a Allocator) table() *hintTable {
	if a.hints == nil {
		return processHints
	}
	return a.hints
}

// Allocate allocates in the caller's transaction.
func (a Allocator) Allocate(tx store.Tx, r lbaas.VIPRequest) (lbaas.VIP, error) {
	v, err := allocateVIP(tx, a.table(), VIPRequest{ProjectID: r.ProjectID, LoadBalancerID: r.LoadBalancerID, SubnetID: r.SubnetID, NetworkID: r.NetworkID, PortID: r.PortID, Address: r.Address})
	if err != nil {
		return lbaas.VIP{}, err
	}
	// ReleaseVIP knows which ports were created for load balancers and
	// only unbinds a user's own port, so the domain may always release.
	return lbaas.VIP{Address: v.Address, PortID: v.PortID, SubnetID: v.SubnetID, NetworkID: v.NetworkID, Owned: true}, nil
}

// Release frees a VIP port in the caller's transaction.
func (a Allocator) Release(tx store.Tx, portID string) error {
	return releaseVIP(tx, a.table(), portID)
}

// MayBeShared reports whether another load balancer may hold address as
// its VIP too: only if the address lies in subnets that overlap, which
// flowlb no longer lets anyone make (overlap.go), since each subnet
// claims an address once.
func (a Allocator) MayBeShared(tx store.ReadTx, address string) (bool, error) {
	return mayBeShared(tx, address)
}

// CheckSubnet refuses a subnet that does not exist or that who's project
// ("": any) may not use, as Octavia reports both: "Subnet <id> not
// found.".
func (a Allocator) CheckSubnet(tx store.ReadTx, who lbaas.Access, subnetID string) error {
	d, err := getSubnetDoc(tx, subnetID, noLock)
	if err != nil {
		return domainErr(err, "Subnet", subnetID)
	}
	net, err := getNetwork(tx, d.NetworkID)
	if err != nil {
		return domainErr(err, "Subnet", subnetID)
	}
	if !usable(net, d.ProjectID, who.Project) {
		return lbaas.Invalid("Subnet %s not found.", subnetID)
	}
	return nil
}
