package neutron

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

// VIPRequest asks for a load balancer's address. One of PortID, SubnetID or
// NetworkID must be set; Address optionally asks for a specific address.
// ProjectID is the load balancer's project: it may use its own networks and
// shared or external ones; empty skips that check.
type VIPRequest struct{ ProjectID, LoadBalancerID, SubnetID, NetworkID, PortID, Address string }

// VIP is an allocated load balancer address and the port that holds it.
type VIP struct{ Address, PortID, SubnetID, NetworkID string }

// AllocateVIP gives a load balancer its address inside the caller's
// transaction:
//   - PortID: the existing port's fixed IP (the one on SubnetID or equal to
//     Address, if given, else the first); the port must not be bound to a
//     device. The port is bound to the load balancer, not copied.
//   - SubnetID: a new port with Address, or the next free pool address.
//   - NetworkID only: a new port on the subnet containing Address, or on the
//     first subnet of the network with a free address.
//
// Refusals are the load balancer domain's (lbaas.Error), in Octavia's
// wording.
func AllocateVIP(tx store.Tx, r VIPRequest) (VIP, error) { return allocateVIP(tx, processHints, r) }

func allocateVIP(tx store.Tx, hints *hintTable, r VIPRequest) (VIP, error) {
	var addr netip.Addr
	if r.Address != "" {
		var err error
		if addr, err = netip.ParseAddr(r.Address); err != nil {
			return VIP{}, lbaas.Invalid("The IP Address %s is invalid.", r.Address)
		}
		addr = addr.Unmap()
	}
	if r.PortID != "" {
		return bindPort(tx, r, addr)
	}

	a := newAllocator(tx, hints)
	net, m, err := vipSubnet(tx, a, r, addr)
	if err != nil {
		return VIP{}, err
	}
	// Without a subnet (a network and no address), allocate picks the
	// first subnet with room.
	fixed := FixedIP{}
	resource, id := "Network", r.NetworkID
	if m != nil {
		fixed.SubnetID = m.doc.ID
		resource, id = "Subnet", m.doc.ID
	}
	if addr.IsValid() {
		fixed.IPAddress = addr.String()
	}
	p, err := createPort(tx, a, net, Port{
		Name:         "octavia-lb-" + r.LoadBalancerID,
		DeviceOwner:  DeviceOwnerLB,
		DeviceID:     r.LoadBalancerID,
		ProjectID:    r.ProjectID,
		AdminStateUp: true,
		// As Neutron makes ports, so that security groups may be set on
		// it (Terraform's security_group_ids); none are, so nothing is
		// filtered until they are.
		PortSecurityEnabled: true,
	}, []FixedIP{fixed}, true, r.LoadBalancerID)
	if err != nil {
		return VIP{}, domainErr(err, resource, id)
	}
	return VIP{Address: p.FixedIPs[0].IPAddress, PortID: p.ID, SubnetID: p.FixedIPs[0].SubnetID, NetworkID: net.ID}, nil
}

// vipSubnet finds the network of a new VIP port and, if the request names
// a subnet or an address, the subnet; refusals are the domain's.
func vipSubnet(tx store.Tx, a *allocator, r VIPRequest, addr netip.Addr) (Network, *ipam, error) {
	if r.SubnetID != "" {
		m, err := a.subnet(r.SubnetID)
		if err != nil {
			return Network{}, nil, domainErr(err, "Subnet", r.SubnetID)
		}
		net, err := getNetwork(tx, m.doc.NetworkID)
		if err != nil {
			return Network{}, nil, domainErr(err, "Subnet", r.SubnetID)
		}
		if !usable(net, m.doc.ProjectID, r.ProjectID) || (r.NetworkID != "" && r.NetworkID != net.ID) {
			return Network{}, nil, lbaas.Invalid("Subnet %s not found.", r.SubnetID)
		}
		return net, m, nil
	}
	net, err := getNetwork(tx, r.NetworkID)
	if err != nil {
		return Network{}, nil, domainErr(err, "Network", r.NetworkID)
	}
	if !usable(net, net.ProjectID, r.ProjectID) {
		return Network{}, nil, lbaas.Invalid("Network %s not found.", r.NetworkID)
	}
	if len(net.Subnets) == 0 {
		return Network{}, nil, lbaas.Validation("Supplied network does not contain a subnet.")
	}
	if !addr.IsValid() {
		return net, nil, nil
	}
	m, err := a.containing(net, addr)
	var ne *Error
	if errors.As(err, &ne) && ne.Type == "InvalidIpForNetwork" {
		return Network{}, nil, lbaas.Validation("Supplied network does not contain a subnet for VIP address specified.")
	}
	if err != nil {
		return Network{}, nil, domainErr(err, "Network", r.NetworkID)
	}
	return net, m, nil
}

// bindPort lends a user's port to a load balancer.
func bindPort(tx store.Tx, r VIPRequest, addr netip.Addr) (VIP, error) {
	d, err := getPortDoc(tx, r.PortID)
	if err != nil {
		return VIP{}, domainErr(err, "Port", r.PortID)
	}
	if r.ProjectID != "" && d.ProjectID != r.ProjectID {
		return VIP{}, lbaas.Invalid("Port %s not found.", r.PortID)
	}
	if d.DeviceID != "" {
		return VIP{}, lbaas.Validation("Port %s is already used by device %s", d.ID, d.DeviceID)
	}
	if r.NetworkID != "" && r.NetworkID != d.NetworkID {
		return VIP{}, lbaas.Validation("Port %s is not on network %s.", d.ID, r.NetworkID)
	}
	ip, err := portVIP(d.FixedIPs, r.SubnetID, addr)
	if err != nil {
		return VIP{}, err
	}
	d.PrevDeviceOwner = d.DeviceOwner
	d.DeviceOwner = DeviceOwnerLB
	d.DeviceID = r.LoadBalancerID
	d.RevisionNumber++
	d.UpdatedAt = now()
	if err := putPort(tx, d, false); err != nil {
		return VIP{}, fmt.Errorf("bind port %s: %w", d.ID, err)
	}
	// Its floating IPs are the load balancer's to serve now.
	if err := followPort(tx, d); err != nil {
		return VIP{}, err
	}
	return VIP{Address: ip.IPAddress, PortID: d.ID, SubnetID: ip.SubnetID, NetworkID: d.NetworkID}, nil
}

// portVIP picks the fixed IP of a user's port that becomes the VIP, as
// Octavia does: the first on the requested subnet, else the one equal to
// the requested address, else the port's only one. A port on a network of
// both families has one of each, so it needs a subnet or an address.
func portVIP(ips []FixedIP, subnetID string, addr netip.Addr) (*FixedIP, error) {
	switch {
	case subnetID != "":
		for i, f := range ips {
			if f.SubnetID == subnetID {
				return &ips[i], nil
			}
		}
		return nil, lbaas.Validation("No VIP address found on the specified VIP port within the specified subnet.")
	case addr.IsValid():
		for i, f := range ips {
			if a, err := netip.ParseAddr(f.IPAddress); err == nil && a.Unmap() == addr {
				return &ips[i], nil
			}
		}
		return nil, lbaas.Validation("Specified VIP address not found on the specified VIP port.")
	case len(ips) == 1:
		return &ips[0], nil
	}
	return nil, lbaas.Validation("VIP port's subnet could not be determined. Please specify either a VIP subnet or address.")
}

// usable reports whether project may put a port on a network (or its
// subnet, owned by owner). An empty project is the system and may.
func usable(net Network, owner, project string) bool {
	return project == "" || owner == project || net.ProjectID == project || net.Shared || net.RouterExternal
}

// domainErr turns a refusal of the subset into the load balancer
// domain's, as Octavia words what Neutron answered it: a missing object
// is an invalid sub-resource, a taken address a VIP address conflict;
// others keep their kind and message.
func domainErr(err error, resource, id string) error {
	var ne *Error
	if !errors.As(err, &ne) {
		return err
	}
	switch ne.Type {
	case "NetworkNotFound", "SubnetNotFound", "PortNotFound":
		return lbaas.Invalid("%s %s not found.", resource, id)
	case "IpAddressAlreadyAllocated":
		return lbaas.Conflict("The VIP IP address is already in use: %s", ne.Message)
	case "InvalidIpForSubnet":
		return lbaas.Validation("%s", ne.Message)
	}
	switch ne.Kind {
	case KindNotFound:
		return lbaas.NotFound(resource, id)
	case KindConflict:
		return lbaas.Conflict("%s", ne.Message)
	case KindForbidden:
		return lbaas.Forbidden()
	}
	return lbaas.Invalid("%s", ne.Message)
}

// ReleaseVIP undoes AllocateVIP: a port created for the load balancer is
// deleted and its address freed; a user's port is unbound and kept. A port
// that no longer exists is not an error, so a release can be retried.
func ReleaseVIP(tx store.Tx, portID string) error { return releaseVIP(tx, processHints, portID) }

func releaseVIP(tx store.Tx, hints *hintTable, portID string) error {
	d, err := getPortDoc(tx, portID)
	var ne *Error
	if errors.As(err, &ne) && ne.Kind == KindNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if d.CreatedFor != "" {
		return deletePort(tx, hints, d)
	}
	if d.DeviceOwner != DeviceOwnerLB {
		return nil // not bound by us
	}
	d.DeviceOwner, d.PrevDeviceOwner = d.PrevDeviceOwner, ""
	d.DeviceID = ""
	d.RevisionNumber++
	d.UpdatedAt = now()
	if err := putPort(tx, d, false); err != nil {
		return err
	}
	// The port keeps its floating IPs; no load balancer serves them.
	return followPort(tx, d)
}

// GetSubnet returns a subnet, or the domain's invalid "Subnet <id> not found.".
func GetSubnet(tx store.ReadTx, id string) (Subnet, error) {
	d, err := getSubnetDoc(tx, id, noLock)
	if err != nil {
		return Subnet{}, domainErr(err, "Subnet", id)
	}
	return d.Subnet, nil
}

// EnsureDefault makes sure an admin-owned shared network called name with
// a subnet of cidr exists, creating what is missing, and returns both. The
// subnet is called name-subnet, or name-subnet6 if cidr is IPv6. It is
// idempotent, so the server calls it at every start; calling it with another
// name makes a second network.
func EnsureDefault(ctx context.Context, s store.Store, name, cidr string) (Network, Subnet, error) {
	return ensureDefault(ctx, s, name, cidr, false)
}

// EnsureExternal is EnsureDefault for the network of external VIPs and
// floating IPs: it is router:external too, and made so if it was not
// (networks made before floating IPs were served).
func EnsureExternal(ctx context.Context, s store.Store, name, cidr string) (Network, Subnet, error) {
	return ensureDefault(ctx, s, name, cidr, true)
}

func ensureDefault(ctx context.Context, s store.Store, name, cidr string, external bool) (Network, Subnet, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return Network{}, Subnet{}, fmt.Errorf("VIP CIDR %q: %w", cidr, err)
	}
	p = p.Masked()
	var net Network
	var sub Subnet
	_, err = s.Update(ctx, func(tx store.Tx) error {
		net, sub = Network{}, Subnet{}
		// Replicas starting together on a new database: the first makes
		// the network and subnet, the others wait and find them.
		if err := lockSubnetSet(tx); err != nil {
			return err
		}
		recs, err := tx.List(store.KindNetwork, store.Filter{ProjectID: AdminProject})
		if err != nil {
			return err
		}
		found := false
		for _, rec := range recs {
			n, err := getNetwork(tx, rec.ID)
			if err != nil {
				return err
			}
			if n.Name == name {
				net, found = n, true
				break
			}
		}
		if !found {
			if net, err = createNetwork(tx, Network{Name: name, ProjectID: AdminProject, AdminStateUp: true, Shared: true,
				RouterExternal: external, Description: "flowlb VIP network", PortSecurityEnabled: true}); err != nil {
				return err
			}
		}
		if external && !net.RouterExternal {
			net.RouterExternal = true
			net.RevisionNumber++
			net.UpdatedAt = now()
			if err := putNetwork(tx, net, false); err != nil {
				return fmt.Errorf("make network %s external: %w", net.ID, err)
			}
		}
		for _, sid := range net.Subnets {
			d, err := getSubnetDoc(tx, sid, noLock)
			if err != nil {
				return err
			}
			if d.CIDR == p.String() {
				sub = d.Subnet
				return nil
			}
		}
		subName := name + "-subnet"
		if p.Addr().Is6() {
			subName += "6"
		}
		sub, err = createSubnet(tx, subnetSpec{Subnet: Subnet{Name: subName, NetworkID: net.ID, CIDR: p.String(), ProjectID: AdminProject}})
		if err != nil {
			return fmt.Errorf("network %s (%s): %w", name, net.ID, err)
		}
		net, err = getNetwork(tx, net.ID)
		return err
	})
	if err != nil {
		return Network{}, Subnet{}, fmt.Errorf("ensure VIP network %s %s: %w", name, cidr, err)
	}
	return net, sub, nil
}
