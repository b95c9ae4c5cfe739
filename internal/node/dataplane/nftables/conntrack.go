package nftables

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// lostBackend is a backend address that no longer takes a UDP service's
// flows.
type lostBackend struct {
	key  flows.Key
	addr netip.Addr
}

type conntrackCleaner interface {
	forget([]lostBackend) error
}

// netlinkConntrack deletes conntrack entries in a network namespace.
type netlinkConntrack struct{ netns int }

// forget deletes the UDP conntrack entries from a service's VIP (for a
// node port, any of the node's addresses) and port to each lost
// backend: UDP has no end of connection, so without this a client that
// keeps sending would go on reaching a backend that left.
func (c netlinkConntrack) forget(lost []lostBackend) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	defer h.Close()
	for _, f := range families {
		var filters []netlink.CustomConntrackFilter
		for _, l := range lost {
			if familyOf(l.key.VIP) != f {
				continue
			}
			cf, err := lostFilter(l)
			if err != nil {
				return err
			}
			filters = append(filters, cf)
		}
		if len(filters) == 0 {
			continue
		}
		if _, err := h.ConntrackDeleteFilters(netlink.ConntrackTable, netlink.InetFamily(f.af), filters...); err != nil {
			return fmt.Errorf("delete UDP conntrack entries: %w", err)
		}
	}
	return nil
}

// lostFilter matches the UDP flows from a service's VIP and port to a
// backend it lost.
func lostFilter(l lostBackend) (netlink.CustomConntrackFilter, error) {
	f := &netlink.ConntrackFilter{}
	if err := f.AddProtocol(unix.IPPROTO_UDP); err != nil {
		return nil, err
	}
	// A node port's entries hold the node address the client used, not
	// the node-port VIP (the rewrite comes after conntrack): any address.
	if !l.key.NodePort() {
		if err := f.AddIP(netlink.ConntrackOrigDstIP, l.key.VIP.AsSlice()); err != nil {
			return nil, err
		}
	}
	if err := f.AddPort(netlink.ConntrackOrigDstPort, l.key.Port); err != nil {
		return nil, err
	}
	if err := f.AddIP(netlink.ConntrackReplySrcIP, l.addr.AsSlice()); err != nil {
		return nil, err
	}
	return f, nil
}

func (c netlinkConntrack) handle() (*netlink.Handle, error) {
	if c.netns < 0 {
		return netlink.NewHandle(unix.NETLINK_NETFILTER)
	}
	return netlink.NewHandleAt(netns.NsHandle(c.netns), unix.NETLINK_NETFILTER)
}
