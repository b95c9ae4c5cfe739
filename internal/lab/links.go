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
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
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

// upAddr brings link name up in h's namespace with address a/bits.
func upAddr(h *netlink.Handle, name string, a netip.Addr, bits int) (netlink.Link, error) {
	link, err := h.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("link %s: %w", name, err)
	}
	if err := h.AddrAdd(link, &netlink.Addr{IPNet: pfx(a, bits)}); err != nil {
		return nil, fmt.Errorf("address %s on %s: %w", a, name, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return nil, err
	}
	return link, nil
}

func routeVia(h *netlink.Handle, dst netip.Prefix, gw netip.Addr) error {
	if err := h.RouteReplace(&netlink.Route{Dst: ipnet(dst), Gw: gw.AsSlice()}); err != nil {
		return fmt.Errorf("route %s via %s: %w", dst, gw, err)
	}
	return nil
}
