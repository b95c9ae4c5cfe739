package lab

// Netlink helpers shared by the builders: veth pairs made from inside a
// namespace, addresses and routes.

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func pfx(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}
}

func ipnet(p netip.Prefix) *net.IPNet { return pfx(p.Addr(), p.Bits()) }

// veth creates a veth pair from inside h's namespace: name stays there,
// peer goes straight into the namespace at peerNS. Neither end ever
// exists in the root namespace.
func veth(h *netlink.Handle, name, peer, peerNS string, master int) error {
	fd, err := unix.Open(NSPath(peerNS), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	v := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: name, MasterIndex: master},
		PeerName:      peer,
		PeerNamespace: netlink.NsFd(fd),
	}
	if err := h.LinkAdd(v); err != nil {
		return fmt.Errorf("veth %s/%s -> %s: %w", name, peer, peerNS, err)
	}
	link, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	return h.LinkSetUp(link)
}

// upAddr brings link name up in h's namespace with the addresses given
// (IPv4 and IPv6 prefixes; an address's prefix length says its subnet).
func upAddr(h *netlink.Handle, name string, addrs ...netip.Prefix) (netlink.Link, error) {
	link, err := h.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("link %s: %w", name, err)
	}
	for _, a := range addrs {
		if err := addAddr(h, link, a); err != nil {
			return nil, fmt.Errorf("address %s on %s: %w", a, name, err)
		}
	}
	if err := h.LinkSetUp(link); err != nil {
		return nil, err
	}
	return link, nil
}

// addAddr adds a to link; an IPv6 address skips duplicate address
// detection, so that it is usable at once (the plan makes it unique).
func addAddr(h *netlink.Handle, link netlink.Link, a netip.Prefix) error {
	na := &netlink.Addr{IPNet: pfx(a.Addr(), a.Bits())}
	if a.Addr().Is6() {
		na.Flags = unix.IFA_F_NODAD
	}
	return h.AddrAdd(link, na)
}

// hostAddr is a as a prefix of its own subnet's length.
func hostAddr(a netip.Addr, subnet netip.Prefix) netip.Prefix {
	return netip.PrefixFrom(a, subnet.Bits())
}

// single is a as a host prefix (/32 or /128).
func single(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// defaultDst is the default route's destination in a's family.
func defaultDst(a netip.Addr) netip.Prefix {
	if a.Is4() {
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
}

// routesVia routes each destination via the gateway of its family (v4
// or v6).
func routesVia(h *netlink.Handle, v4, v6 netip.Addr, dsts ...netip.Prefix) error {
	for _, d := range dsts {
		gw := v4
		if d.Addr().Is6() {
			gw = v6
		}
		if err := routeVia(h, d, gw); err != nil {
			return err
		}
	}
	return nil
}

func routeVia(h *netlink.Handle, dst netip.Prefix, gw netip.Addr) error {
	if err := h.RouteReplace(&netlink.Route{Dst: ipnet(dst), Gw: gw.AsSlice()}); err != nil {
		return fmt.Errorf("route %s via %s: %w", dst, gw, err)
	}
	return nil
}
