package neutron

import (
	"errors"
	"net/netip"
	"slices"

	"github.com/flowlb/flowlb/internal/store"
)

// allocator hands out a port's addresses from the subnets of its network
// within one transaction, loading each subnet once.
type allocator struct {
	tx    store.Tx
	hints *hintTable
	ipams map[string]*ipam
}

func newAllocator(tx store.Tx, hints *hintTable) *allocator {
	return &allocator{tx: tx, hints: hints, ipams: map[string]*ipam{}}
}

func (a *allocator) subnet(id string) (*ipam, error) {
	if m, ok := a.ipams[id]; ok {
		return m, nil
	}
	h := a.hints.of(id)
	d, err := loadForIPAM(a.tx, h, id)
	if err != nil {
		return nil, err
	}
	m, err := newIPAM(a.tx, h, d)
	if err != nil {
		return nil, err
	}
	a.ipams[id] = m
	return m, nil
}

// allocateFirst gives out a pool address of the first subnet of the
// network, in the network's order, that has one free.
func (a *allocator) allocateFirst(net Network) (*ipam, netip.Addr, error) {
	var last error = refuse(KindConflict, exhaustedType, "No more IP addresses available on network %s.", net.ID)
	for _, sid := range net.Subnets {
		m, err := a.subnet(sid)
		if err != nil {
			return nil, netip.Addr{}, err
		}
		addr, err := m.allocateAny()
		var ne *Error
		if errors.As(err, &ne) && ne.Type == exhaustedType {
			last = err
			continue
		}
		if err != nil {
			return nil, netip.Addr{}, err
		}
		return m, addr, nil
	}
	return nil, netip.Addr{}, last
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
		ip, err := a.allocateOne(net, f)
		if err != nil {
			return nil, err
		}
		out = append(out, ip)
	}
	return out, nil
}

// allocateOne allocates one requested fixed IP.
func (a *allocator) allocateOne(net Network, f FixedIP) (FixedIP, error) {
	var addr netip.Addr
	if f.IPAddress != "" {
		var err error
		if addr, err = netip.ParseAddr(f.IPAddress); err != nil {
			return FixedIP{}, badAttr("fixed_ips", "'%s' is not a valid IP address", f.IPAddress)
		}
	}
	var m *ipam
	var err error
	switch {
	case f.SubnetID != "":
		if !slices.Contains(net.Subnets, f.SubnetID) {
			return FixedIP{}, invalidInput("Failed to create port on network %s, because fixed_ips included invalid subnet %s", net.ID, f.SubnetID)
		}
		m, err = a.subnet(f.SubnetID)
	case addr.IsValid():
		m, err = a.containing(net, addr)
	default:
		m, addr, err = a.allocateFirst(net)
		if err != nil {
			return FixedIP{}, err
		}
		return FixedIP{SubnetID: m.doc.ID, IPAddress: addr.Unmap().String()}, nil
	}
	if err != nil {
		return FixedIP{}, err
	}
	if addr.IsValid() {
		err = m.allocateAddr(addr)
	} else {
		addr, err = m.allocateAny()
	}
	if err != nil {
		return FixedIP{}, err
	}
	return FixedIP{SubnetID: m.doc.ID, IPAddress: addr.Unmap().String()}, nil
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
