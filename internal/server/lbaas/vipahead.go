package lbaas

import (
	"context"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// VIPPortsAhead is implemented by a VIPAllocator that can make a load
// balancer's VIP ports before the load balancer exists: for another
// Octavia's provider driver (octavia-lib's create_vip_port), when the
// ports must be made this allocator's way rather than by Octavia's
// network driver (neutronapi.PortsOVN: ports OVN's load balancers can
// serve). The create that follows names them as vip_port_id, and the
// allocator takes them as its own again.
type VIPPortsAhead interface {
	MakesPortsAhead() bool
}

// VIPPortsRequest asks for a load balancer's VIP ports ahead of its
// create: the VIP's subnet or network and address, and each additional
// VIP's subnet and address.
type VIPPortsRequest struct {
	LoadBalancerID, ProjectID    string
	SubnetID, NetworkID, Address string
	Additional                   []AdditionalVIP
}

// MakeVIPPorts makes the VIP ports of a load balancer not created yet,
// or refuses (501) when the allocator leaves them to the caller.
func (s *Service) MakeVIPPorts(ctx context.Context, r VIPPortsRequest) (VIP, []VIP, error) {
	ahead, ok := s.vips.(VIPPortsAhead)
	if !ok || !ahead.MakesPortsAhead() {
		return VIP{}, nil, Unsupported(flows.ProviderName, "flowlb uses the VIP port Octavia makes.")
	}
	if r.LoadBalancerID == "" {
		return VIP{}, nil, Validation("loadbalancer_id is required.")
	}
	if r.SubnetID == "" && r.NetworkID == "" {
		return VIP{}, nil, Validation("VIP must contain one of: vip_network_id, vip_subnet_id.")
	}
	var vip VIP
	var more []VIP
	// Nothing is written to the store: the transaction gives the
	// allocator its reads (the address checks), and a retry finds the
	// ports made by name.
	_, err := s.st.Update(ctx, func(tx store.Tx) error {
		v, err := s.vips.Allocate(tx, VIPRequest{ProjectID: r.ProjectID, LoadBalancerID: r.LoadBalancerID,
			SubnetID: r.SubnetID, NetworkID: r.NetworkID, Address: r.Address})
		if err != nil {
			return err
		}
		vip = v
		more, err = s.allocateAdditional(tx, r.ProjectID, r.LoadBalancerID, v, r.Additional, "")
		return err
	})
	if err != nil {
		// What was made goes again (the orphan sweep would take it
		// later otherwise); a port the allocator did not make stays.
		for _, v := range append([]VIP{vip}, more...) {
			if v.Owned && v.PortID != "" {
				_ = s.vips.Release(nil, v.PortID)
			}
		}
		return VIP{}, nil, err
	}
	return vip, more, nil
}
