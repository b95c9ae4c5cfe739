package announce

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// KernelTable is a routing table of the current network namespace holding
// one blackhole host route per announced VIP, of protocol Protocol. The
// table is only read by a routing daemon: no rule looks packets up in it,
// so the routes change nothing in forwarding.
type KernelTable struct {
	h     *netlink.Handle
	table int
}

// OpenTable opens routing table table (1–2^32-1, not main's 254 or
// local's 255) of the current network namespace.
func OpenTable(table int) (*KernelTable, error) {
	if table <= 0 || table == unix.RT_TABLE_MAIN || table == unix.RT_TABLE_LOCAL || table == unix.RT_TABLE_DEFAULT {
		return nil, fmt.Errorf("announcement table %d: use a table of its own (not main, local or default)", table)
	}
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, err
	}
	return &KernelTable{h: h, table: table}, nil
}

// Close releases the netlink handle; the routes stay (fail-static).
func (k *KernelTable) Close() { k.h.Close() }

func (k *KernelTable) route(v netip.Addr) *netlink.Route {
	return &netlink.Route{Dst: &net.IPNet{IP: v.AsSlice(), Mask: net.CIDRMask(v.BitLen(), v.BitLen())},
		Table: k.table, Type: unix.RTN_BLACKHOLE, Protocol: Protocol}
}

// List returns the VIPs of the table's announcement routes.
func (k *KernelTable) List() ([]netip.Addr, error) {
	rs, err := k.h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: k.table, Protocol: Protocol}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, r := range rs {
		if r.Dst == nil {
			continue
		}
		ones, bits := r.Dst.Mask.Size()
		if a, ok := netip.AddrFromSlice(r.Dst.IP); ok && ones == bits {
			out = append(out, a.Unmap())
		}
	}
	return out, nil
}

// Add announces v.
func (k *KernelTable) Add(v netip.Addr) error { return k.h.RouteReplace(k.route(v)) }

// Del withdraws v; withdrawing what is not there is no error.
func (k *KernelTable) Del(v netip.Addr) error {
	err := k.h.RouteDel(k.route(v))
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}
