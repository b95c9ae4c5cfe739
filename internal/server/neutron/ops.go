package neutron

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/flowlb/flowlb/internal/shared/ids"
	"github.com/google/uuid"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// Domain operations shared by the HTTP handler, the VIP API and
// EnsureDefault. They return *Error for anything the caller did wrong.

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// createNetwork stores n with a new id, defaults and timestamps.
func createNetwork(tx store.Tx, n Network) (Network, error) {
	n.ID = uuid.NewString()
	n.TenantID = n.ProjectID
	n.Status = "ACTIVE"
	n.Subnets = []string{}
	if n.MTU == 0 {
		n.MTU = 1500
	}
	n.AvailabilityZoneHints = orEmpty(n.AvailabilityZoneHints)
	n.AvailabilityZones = []string{}
	n.Tags = orEmpty(n.Tags)
	n.RevisionNumber = 1
	n.CreatedAt = now()
	n.UpdatedAt = n.CreatedAt
	if err := putNetwork(tx, n, true); err != nil {
		return Network{}, fmt.Errorf("create network: %w", err)
	}
	return n, nil
}

// subnetSpec is a subnet to create. GatewayIP nil means the default
// gateway unless NoGateway (the request said gateway_ip: null);
// AllocationPools nil means the default pools.
type subnetSpec struct {
	Subnet
	NoGateway bool
	// NoDHCP is an explicit "enable_dhcp": false.
	NoDHCP bool
}

// createSubnet checks and stores a new subnet under the subnet set's
// lock (overlap.go), which it takes before it reads the network, so that
// the network's list of subnets it rewrites is current.
func createSubnet(tx store.Tx, spec subnetSpec) (Subnet, error) {
	if err := lockSubnetSet(tx); err != nil {
		return Subnet{}, err
	}
	net, err := getNetwork(tx, spec.NetworkID)
	if err != nil {
		return Subnet{}, err
	}
	p, perr := netip.ParsePrefix(spec.CIDR)
	if perr != nil {
		return Subnet{}, badAttr("cidr", "'%s' is not a valid IP subnet", spec.CIDR)
	}
	if p != p.Masked() {
		return Subnet{}, badAttr("cidr", "'%s' isn't a recommended CIDR, it should be '%s'", spec.CIDR, p.Masked())
	}
	version := 4
	if p.Addr().Is6() {
		version = 6
	}
	if spec.IPVersion != 0 && spec.IPVersion != version {
		return Subnet{}, invalidInput("Cidr %s does not match ip_version %d", p, spec.IPVersion)
	}
	if err := checkIPv6Modes(version, p, spec.IPv6RAMode, spec.IPv6AddressMode, spec.NoDHCP); err != nil {
		return Subnet{}, err
	}
	if err := checkOverlap(tx, net.ID, p); err != nil {
		return Subnet{}, err
	}
	var gw netip.Addr
	switch {
	case spec.GatewayIP != nil:
		gw, perr = netip.ParseAddr(*spec.GatewayIP)
		if perr != nil || !p.Contains(gw) || reserved(p, gw) {
			return Subnet{}, invalidInput("Gateway is not valid on subnet")
		}
	case !spec.NoGateway && p.Bits() < p.Addr().BitLen()-1:
		gw = prefixBounds(p).first.inc().addr(version == 4)
	}
	pools := spec.AllocationPools
	if pools == nil {
		pools = defaultPools(p, gw)
	}
	if _, err := parsePools(p, gw, pools); err != nil {
		return Subnet{}, err
	}

	s := spec.Subnet
	s.ID = uuid.NewString()
	s.CIDR = p.String()
	s.IPVersion = version
	s.GatewayIP = nil
	if gw.IsValid() {
		g := gw.String()
		s.GatewayIP = &g
	}
	s.AllocationPools = pools
	s.TenantID = s.ProjectID
	s.DNSNameservers = orEmpty(s.DNSNameservers)
	if s.HostRoutes == nil {
		s.HostRoutes = []HostRoute{}
	}
	s.ServiceTypes = orEmpty(s.ServiceTypes)
	s.Tags = orEmpty(s.Tags)
	s.RevisionNumber = 1
	s.CreatedAt = now()
	s.UpdatedAt = s.CreatedAt
	if err := putSubnet(tx, subnetDoc{Subnet: s}, true); err != nil {
		return Subnet{}, fmt.Errorf("create subnet: %w", err)
	}
	net.Subnets = append(net.Subnets, s.ID)
	net.RevisionNumber++
	net.UpdatedAt = s.CreatedAt
	if err := putNetwork(tx, net, false); err != nil {
		return Subnet{}, fmt.Errorf("add subnet to network %s: %w", net.ID, err)
	}
	return s, nil
}

func deleteSubnet(tx store.Tx, id string) error {
	// The network's list of subnets is rewritten below: no concurrent
	// create or delete may do so meanwhile.
	if err := lockSubnetSet(tx); err != nil {
		return err
	}
	// convertLegacy reads the subnet under its exclusive lock, which waits
	// for allocations in flight (they share it), so that the check below
	// sees their claims; it also drops bitmap records, if any.
	d, err := convertLegacy(tx, processHints.of(id), id)
	if err != nil {
		return err
	}
	used, err := inUse(tx, id)
	if err != nil {
		return err
	}
	if used {
		return refuse(KindConflict, "SubnetInUse", "Unable to complete operation on subnet %s: One or more ports have an IP allocation from this subnet.", id)
	}
	if err := tx.Delete(store.KindSubnet, id); err != nil {
		return fmt.Errorf("delete subnet %s: %w", id, err)
	}
	processHints.forget(id)
	net, err := getNetwork(tx, d.NetworkID)
	if err != nil {
		return err
	}
	net.Subnets = slices.DeleteFunc(net.Subnets, func(s string) bool { return s == id })
	net.RevisionNumber++
	net.UpdatedAt = now()
	return putNetwork(tx, net, false)
}

func deleteNetwork(tx store.Tx, id string) error {
	// A subnet being created on the network would be left without one.
	if err := lockSubnetSet(tx); err != nil {
		return err
	}
	net, err := getNetwork(tx, id)
	if err != nil {
		return err
	}
	ports, err := tx.Count(store.KindPort, store.Filter{ParentID: id})
	if err != nil {
		return err
	}
	if ports > 0 {
		return refuse(KindConflict, "NetworkInUse", "Unable to complete operation on network %s. There are one or more ports still in use on the network.", id)
	}
	if len(net.Subnets) > 0 {
		return refuse(KindConflict, "NetworkInUse", "Unable to complete operation on network %s. There are one or more subnets still on the network; delete them first.", id)
	}
	return tx.Delete(store.KindNetwork, id)
}

// newMAC returns a random unicast, locally administered MAC address. With
// 46 random bits a collision among even millions of ports is negligible, so
// uniqueness is not checked (which would need an index or a scan).
func newMAC() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	b[0] = (b[0] &^ 0x01) | 0x02
	return net.HardwareAddr(b[:]).String()
}

// createPort allocates the port's addresses on net with a (whose subnets
// may already be loaded) and stores the port.
func createPort(tx store.Tx, a *allocator, net Network, p Port, fixed []FixedIP, fixedGiven bool, createdFor string) (Port, error) {
	p.NetworkID = net.ID
	ips, err := a.allocate(net, fixed, fixedGiven)
	if err != nil {
		return Port{}, err
	}
	p.ID = ids.New()
	p.FixedIPs = ips
	if p.MACAddress == "" {
		p.MACAddress = newMAC()
	}
	p.TenantID = p.ProjectID
	if p.Status == "" {
		p.Status = "ACTIVE"
	}
	p.SecurityGroups = orEmpty(p.SecurityGroups)
	if p.AllowedAddressPairs == nil {
		p.AllowedAddressPairs = []AddressPair{}
	}
	if p.VNICType == "" {
		p.VNICType = "normal"
	}
	p.Tags = orEmpty(p.Tags)
	p.RevisionNumber = 1
	p.CreatedAt = now()
	p.UpdatedAt = p.CreatedAt
	if err := putPort(tx, portDoc{Port: p, CreatedFor: createdFor}, true); err != nil {
		return Port{}, fmt.Errorf("create port: %w", err)
	}
	return p, nil
}

// deletePort disassociates the port's floating IPs, frees its addresses
// and removes it.
func deletePort(tx store.Tx, hints *hintTable, d portDoc) error {
	if err := dropPortFIPs(tx, d); err != nil {
		return err
	}
	if err := setPortGroups(tx, identity.Caller{IsAdmin: true}, &d, nil); err != nil {
		return err
	}
	a := newAllocator(tx, hints)
	if err := a.releaseAll(d.FixedIPs); err != nil {
		return err
	}
	if err := tx.Delete(store.KindPort, d.ID); err != nil {
		return fmt.Errorf("delete port %s: %w", d.ID, err)
	}
	return nil
}
