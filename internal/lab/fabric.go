package lab

// The fabric: the bridge that joins the nodes, the control address and the
// router, and the router's link to the external client.

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// buildFabric creates the bridge, plugs every node and the router into it,
// and wires the router to the client.
func (l *Lab) buildFabric(s *State) error {
	if err := l.buildBridge(s); err != nil {
		return err
	}
	if err := l.buildRouter(s); err != nil {
		return err
	}
	return l.buildClient()
}

// buildBridge creates br0 in the fabric namespace with the control
// address, plugs every node and the router into it, and routes the pod
// networks and the client network, so that the control address reaches
// pods and the client like any fabric host.
func (l *Lab) buildBridge(s *State) error {
	fab, err := Handle(NSName(l.name, HostFabric))
	if err != nil {
		return err
	}
	defer fab.Close()
	if err := fab.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}); err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	br, err := upAddr(fab, "br0", hostAddr(ControlAddr, FabricCIDR), hostAddr(ControlAddr6, FabricCIDR6))
	if err != nil {
		return err
	}
	brIdx := br.Attrs().Index
	for _, n := range s.Nodes {
		if err := veth(fab, NodeName(n.Index), "eth0", NSName(l.name, NodeName(n.Index)), brIdx); err != nil {
			return err
		}
	}
	if err := veth(fab, "rtr", "eth0", NSName(l.name, HostRouter), brIdx); err != nil {
		return err
	}
	return routeFabricHost(fab, s)
}

// routeFabricHost routes, from a host on the fabric, every node's pod
// CIDRs via that node and the client network via the router, in both
// families.
func routeFabricHost(h *netlink.Handle, s *State) error {
	for _, n := range s.Nodes {
		if err := routesVia(h, NodeAddr(n.Index), NodeAddr6(n.Index), PodCIDR(n.Index), PodCIDR6(n.Index)); err != nil {
			return err
		}
	}
	return routesVia(h, RouterFabricAddr, RouterFabricAddr6, ClientCIDR, ClientCIDR6)
}

// buildRouter addresses the router on the fabric, links it to the client
// and points the external VIP range at the next hops of s.
func (l *Lab) buildRouter(s *State) error {
	rtr, err := Handle(NSName(l.name, HostRouter))
	if err != nil {
		return err
	}
	defer rtr.Close()
	if _, err := upAddr(rtr, "eth0", hostAddr(RouterFabricAddr, FabricCIDR), hostAddr(RouterFabricAddr6, FabricCIDR6)); err != nil {
		return err
	}
	if err := veth(rtr, "eth1", "eth0", NSName(l.name, HostClient), 0); err != nil {
		return err
	}
	if _, err := upAddr(rtr, "eth1", hostAddr(RouterClientAddr, ClientCIDR), hostAddr(RouterClientAddr6, ClientCIDR6)); err != nil {
		return err
	}
	return setNextHops(rtr, s.NextHops)
}

// buildClient addresses the client and gives it a default route via the
// router.
func (l *Lab) buildClient() error {
	cl, err := Handle(NSName(l.name, HostClient))
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := upAddr(cl, "eth0", hostAddr(ClientAddr, ClientCIDR), hostAddr(ClientAddr6, ClientCIDR6)); err != nil {
		return err
	}
	return routesVia(cl, RouterClientAddr, RouterClientAddr6, defaultDst(RouterClientAddr), defaultDst(RouterClientAddr6))
}

// setNextHops points the external VIP ranges of both families at the
// given nodes (ECMP); with no nodes the routes are removed and the router
// answers unreachable.
func setNextHops(h *netlink.Handle, nodes []int) error {
	for _, vips := range []netip.Prefix{ExternalVIPs, ExternalVIPs6} {
		if len(nodes) == 0 {
			if err := h.RouteDel(&netlink.Route{Dst: ipnet(vips)}); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("delete external VIP route %s: %w", vips, err)
			}
			continue
		}
		if err := h.RouteReplace(ecmpRoute(vips, nodes)); err != nil {
			return fmt.Errorf("external VIP route %s via nodes %v: %w", vips, nodes, err)
		}
	}
	return nil
}

// SetNextHops changes, at run time, which nodes the router sends the
// external VIP range to.
func (l *Lab) SetNextHops(nodes ...int) error {
	for _, n := range nodes {
		if !l.hasNode(n) {
			return fmt.Errorf("no node %d", n)
		}
	}
	return l.update(func(s *State) error {
		h, err := Handle(NSName(l.name, HostRouter))
		if err != nil {
			return err
		}
		defer h.Close()
		if err := setNextHops(h, nodes); err != nil {
			return err
		}
		s.NextHops = slices.Clone(nodes)
		return nil
	})
}
