package neutron

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/google/uuid"

	"github.com/flowlb/flowlb/internal/store"
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
}

func createSubnet(tx store.Tx, spec subnetSpec) (Subnet, error) {
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
	for _, sid := range net.Subnets {
		other, err := getSubnetDoc(tx, sid, false)
		if err != nil {
			return Subnet{}, err
		}
		if op, err := netip.ParsePrefix(other.CIDR); err == nil && op.Overlaps(p) {
			return Subnet{}, invalidInput("Requested subnet with cidr: %s for network: %s overlaps with another subnet", p, net.ID)
		}
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
	d, err := getSubnetDoc(tx, id, true)
	if err != nil {
		return err
	}
	if d.IPAM.Used > 0 {
		return refuse(KindConflict, "SubnetInUse", "Unable to complete operation on subnet %s: One or more ports have an IP allocation from this subnet.", id)
	}
	// Emptied chunks are deleted as they empty; this only catches leftovers.
	chunks, err := tx.List(store.KindSubnet, store.Filter{ProjectID: ipamProject, ParentID: id})
	if err != nil {
		return err
	}
	for _, c := range chunks {
		if err := tx.Delete(store.KindSubnet, c.ID); err != nil {
			return err
		}
	}
	if err := tx.Delete(store.KindSubnet, id); err != nil {
		return fmt.Errorf("delete subnet %s: %w", id, err)
	}
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

// allocator hands out addresses from several subnets in one transaction,
// one ipam per subnet, each subnet locked on first use.
type allocator struct {
	tx    store.Tx
	ipams map[string]*ipam
	order []string
}

func newAllocator(tx store.Tx) *allocator { return &allocator{tx: tx, ipams: map[string]*ipam{}} }

func (a *allocator) subnet(id string) (*ipam, error) {
	if m, ok := a.ipams[id]; ok {
		return m, nil
	}
	d, err := getSubnetDoc(a.tx, id, true)
	if err != nil {
		return nil, err
	}
	m, err := newIPAM(a.tx, &d)
	if err != nil {
		return nil, err
	}
	a.ipams[id] = m
	a.order = append(a.order, id)
	return m, nil
}

func (a *allocator) save() error {
	for _, id := range a.order {
		if err := a.ipams[id].save(); err != nil {
			return err
		}
	}
	return nil
}

// firstFree picks the first subnet of the network, in the network's order,
// that has a free pool address and (if version is not 0) that IP version.
func (a *allocator) firstFree(net Network, version int) (*ipam, error) {
	var last *Error
	for _, sid := range net.Subnets {
		m, err := a.subnet(sid)
		if err != nil {
			return nil, err
		}
		if version != 0 && m.doc.IPVersion != version {
			continue
		}
		if m.doc.IPAM.InPool < m.capacity() {
			return m, nil
		}
		last = m.exhausted()
	}
	if last == nil {
		last = refuse(KindConflict, "IpAddressGenerationFailure", "No more IP addresses available on network %s.", net.ID)
	}
	return nil, last
}

// containing finds the subnet of the network that contains addr.
func (a *allocator) containing(net Network, addr netip.Addr) (*ipam, error) {
	for _, sid := range net.Subnets {
		m, err := a.subnet(sid)
		if err != nil {
			return nil, err
		}
		if m.prefix.Contains(addr.Unmap()) {
			return m, nil
		}
	}
	return nil, refuse(KindInvalid, "InvalidIpForNetwork", "IP address %s is not a valid IP for any of the subnets on the specified network.", addr)
}

// allocate fills in fixed IPs for a port on net. An empty request gets one
// address from the first subnet with room (none if the network has no
// subnets, as in Neutron). Each entry may name a subnet, an address or both.
func (a *allocator) allocate(net Network, req []FixedIP, given bool) ([]FixedIP, error) {
	if !given {
		if len(net.Subnets) == 0 {
			return []FixedIP{}, nil
		}
		req = []FixedIP{{}}
	}
	out := make([]FixedIP, 0, len(req))
	for _, f := range req {
		var addr netip.Addr
		if f.IPAddress != "" {
			var err error
			if addr, err = netip.ParseAddr(f.IPAddress); err != nil {
				return nil, badAttr("fixed_ips", "'%s' is not a valid IP address", f.IPAddress)
			}
		}
		var m *ipam
		var err error
		switch {
		case f.SubnetID != "":
			if !slices.Contains(net.Subnets, f.SubnetID) {
				return nil, invalidInput("Failed to create port on network %s, because fixed_ips included invalid subnet %s", net.ID, f.SubnetID)
			}
			m, err = a.subnet(f.SubnetID)
		case addr.IsValid():
			m, err = a.containing(net, addr)
		default:
			m, err = a.firstFree(net, 0)
		}
		if err != nil {
			return nil, err
		}
		if addr.IsValid() {
			err = m.allocateAddr(addr)
		} else {
			addr, err = m.allocateAny()
		}
		if err != nil {
			return nil, err
		}
		out = append(out, FixedIP{SubnetID: m.doc.ID, IPAddress: addr.Unmap().String()})
	}
	return out, nil
}

// releaseAll frees a port's addresses; subnets already gone are skipped.
func (a *allocator) releaseAll(ips []FixedIP) error {
	for _, f := range ips {
		m, err := a.subnet(f.SubnetID)
		var ae *Error
		if errors.As(err, &ae) {
			continue
		}
		if err != nil {
			return err
		}
		addr, err := netip.ParseAddr(f.IPAddress)
		if err != nil {
			continue
		}
		if err := m.release(addr); err != nil {
			return err
		}
	}
	return nil
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
	if err := a.save(); err != nil {
		return Port{}, err
	}
	p.ID = uuid.NewString()
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

// deletePort frees the port's addresses and removes it.
func deletePort(tx store.Tx, d portDoc) error {
	a := newAllocator(tx)
	if err := a.releaseAll(d.FixedIPs); err != nil {
		return err
	}
	if err := a.save(); err != nil {
		return err
	}
	if err := tx.Delete(store.KindPort, d.ID); err != nil {
		return fmt.Errorf("delete port %s: %w", d.ID, err)
	}
	return nil
}
