package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// AnnounceTable is the routing table in which the lab's flowlb agents
// announce the VIPs their node can serve (flowlb agent --announce-table;
// docs/kubernetes.md).
const AnnounceTable = 200

// ProcRoutes is the name of the process that plays the routing sessions
// (ReflectAnnouncements) on the router.
const ProcRoutes = "routes"

// Announcements plays what BGP sessions between the nodes and the router
// would do: every prefix a node holds in its announcement table is routed
// by the router to the nodes announcing it (ECMP, next hop the node's
// fabric address), and withdrawn when no node announces it any more.
// These routes are more specific than the external VIP range's, which
// keeps going to every node (SetNextHops). The router's routes are marked
// proto bgp.
type Announcements struct {
	lab   *Lab
	table int
}

// Announcements returns the reflector of the nodes' table table.
func (l *Lab) Announcements(table int) *Announcements { return &Announcements{lab: l, table: table} }

// Routes returns the router's announced routes: prefix → node indices.
func (a *Announcements) Routes() (map[netip.Prefix][]int, error) {
	h, err := Handle(NSName(a.lab.name, HostRouter))
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return routerRoutes(h)
}

func routerRoutes(h *netlink.Handle) (map[netip.Prefix][]int, error) {
	rs, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: unix.RTPROT_BGP}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, err
	}
	out := map[netip.Prefix][]int{}
	for _, r := range rs {
		p, ok := PrefixOf(r.Dst)
		if !ok {
			continue
		}
		var gws []net.IP
		if r.Gw != nil {
			gws = append(gws, r.Gw)
		}
		for _, nh := range r.MultiPath {
			gws = append(gws, nh.Gw)
		}
		var nodes []int
		for _, gw := range gws {
			if a, ok := netip.AddrFromSlice(gw); ok {
				if i, ok := NodeIndex(a); ok {
					nodes = append(nodes, i)
				}
			}
		}
		slices.Sort(nodes)
		out[p] = nodes
	}
	return out, nil
}

// PrefixOf is n as a masked prefix (false: none).
func PrefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}

// ByNodes reads every node's announcement table: prefix → nodes. It is
// what the nodes announce now; Routes is what the router has taken from
// them, a moment later.
func (a *Announcements) ByNodes() map[netip.Prefix][]int {
	out := map[netip.Prefix][]int{}
	for _, n := range a.lab.snapshot().Nodes {
		h, err := Handle(NSName(a.lab.name, NodeName(n.Index)))
		if err != nil {
			continue // a node going away announces nothing
		}
		rs, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: a.table}, netlink.RT_FILTER_TABLE)
		h.Close()
		if err != nil {
			continue
		}
		for _, r := range rs {
			if p, ok := PrefixOf(r.Dst); ok && !slices.Contains(out[p], n.Index) {
				out[p] = append(out[p], n.Index)
			}
		}
	}
	for p := range out {
		slices.Sort(out[p])
	}
	return out
}

// Sync makes the router's announced routes match the nodes' tables once.
func (a *Announcements) Sync() error {
	want := a.ByNodes()
	h, err := Handle(NSName(a.lab.name, HostRouter))
	if err != nil {
		return err
	}
	defer h.Close()
	have, err := routerRoutes(h)
	if err != nil {
		return err
	}
	var errs []error
	for p, nodes := range want {
		if slices.Equal(have[p], nodes) {
			continue
		}
		r := ecmpRoute(p, nodes)
		r.Protocol = unix.RTPROT_BGP
		if err := h.RouteReplace(r); err != nil {
			errs = append(errs, fmt.Errorf("route %s via nodes %v: %w", p, nodes, err))
		}
	}
	for p := range have {
		if _, ok := want[p]; ok {
			continue
		}
		if err := h.RouteDel(&netlink.Route{Dst: ipnet(p), Protocol: unix.RTPROT_BGP}); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("withdraw %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// Run keeps the router in step with the nodes' tables until ctx ends: at
// once after any route change in a node, and every second regardless.
func (a *Announcements) Run(ctx context.Context) error {
	kick := make(chan struct{}, 1)
	notify := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	done := make(chan struct{})
	defer close(done)
	for _, n := range a.lab.snapshot().Nodes {
		ns, err := netns.GetFromPath(NSPath(NSName(a.lab.name, NodeName(n.Index))))
		if err != nil {
			return err
		}
		updates := make(chan netlink.RouteUpdate, 64)
		err = netlink.RouteSubscribeWithOptions(updates, done, netlink.RouteSubscribeOptions{Namespace: &ns, ErrorCallback: func(error) { notify() }})
		ns.Close()
		if err != nil {
			return fmt.Errorf("watch routes of %s: %w", NodeName(n.Index), err)
		}
		go func() {
			for u := range updates {
				if u.Table == a.table {
					notify()
				}
			}
		}()
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if err := a.Sync(); err != nil {
			a.lab.log.Warn("announced routes", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-tick.C:
		}
	}
}

// ecmpRoute routes dst to the given nodes' addresses of its family, over
// all of them (ECMP) when there are several.
func ecmpRoute(dst netip.Prefix, nodes []int) *netlink.Route {
	addr := NodeAddr
	if dst.Addr().Is6() {
		addr = NodeAddr6
	}
	r := &netlink.Route{Dst: ipnet(dst)}
	if len(nodes) == 1 {
		r.Gw = addr(nodes[0]).AsSlice()
		return r
	}
	for _, n := range nodes {
		r.MultiPath = append(r.MultiPath, &netlink.NexthopInfo{Gw: addr(n).AsSlice()})
	}
	return r
}
