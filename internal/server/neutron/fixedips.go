package neutron

import (
	"errors"
	"net/netip"
	"slices"

	"github.com/flowlb/flowlb/internal/server/store"
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
// network, in the network's order, that has one free, IPv4 subnets first
// (as Octavia picks the subnet of a VIP given by its network alone).
func (a *allocator) allocateFirst(net Network) (*ipam, netip.Addr, error) {
	m, addr, err := a.allocateFamily(net, true)
	var ne *Error
	if errors.As(err, &ne) && ne.Type == exhaustedType {
		return a.allocateFamily(net, false)
	}
	return m, addr, err
}

// allocateFamily gives out a pool address of the first subnet of the
// network of the family (IPv4 if is4) that has one free.
func (a *allocator) allocateFamily(net Network, is4 bool) (*ipam, netip.Addr, error) {
	var last error = refuse(KindConflict, exhaustedType, "No more IP addresses available on network %s.", net.ID)
	for _, sid := range net.Subnets {
		m, err := a.subnet(sid)
		if err != nil {
			return nil, netip.Addr{}, err
		}
		if m.is4() != is4 {
			continue
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

// families reports which address families the network has subnets of.
func (a *allocator) families(net Network) (has4, has6 bool, err error) {
	for _, sid := range net.Subnets {
		m, err := a.subnet(sid)
		if err != nil {
			return false, false, err
		}
		has4 = has4 || m.is4()
		has6 = has6 || !m.is4()
	}
	return has4, has6, nil
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

// allocate fills in fixed IPs for a port on net. Each entry of a request
// may name a subnet, an address or both. Without a request the port gets,
// as in Neutron, one address of each family the network has subnets of,
// from the first subnet of that family with room (none if the network
// has no subnets).
func (a *allocator) allocate(net Network, req []FixedIP, given bool) ([]FixedIP, error) {
	if !given {
		has4, has6, err := a.families(net)
		if err != nil {
			return nil, err
		}
		out := []FixedIP{}
		for _, f := range []struct{ has, is4 bool }{{has4, true}, {has6, false}} {
			if !f.has {
				continue
			}
			m, addr, err := a.allocateFamily(net, f.is4)
			if err != nil {
				return nil, err
			}
			out = append(out, FixedIP{SubnetID: m.doc.ID, IPAddress: addr.Unmap().String()})
		}
		return out, nil
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
