package lab

// Building the lab's network: one namespace per host, then the fabric,
// the server hosts, the nodes and their routed pods.

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/vishvananda/netlink"
	"golang.org/x/sync/errgroup"
)

// newHostNS creates the namespace of host with its sysctls and loopback up.
func (l *Lab) newHostNS(host string) error {
	kind, _, _, err := ParseHost(host)
	if err != nil {
		return err
	}
	return createNS(NSName(l.name, host), func() error {
		if err := setSysctls(sysctlsFor(kind)); err != nil {
			return err
		}
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		return h.LinkSetUp(lo)
	})
}

// parallelism bounds concurrent kernel work; namespace and veth creation
// mostly wait on RCU grace periods, so more workers than CPUs pays off.
const parallelism = 16

func (l *Lab) build(ctx context.Context) error {
	s := l.snapshot()
	hosts := []string{HostFabric, HostRouter, HostClient}
	for _, k := range s.Servers {
		hosts = append(hosts, ServerName(k))
	}
	for _, n := range s.Nodes {
		hosts = append(hosts, NodeName(n.Index))
		for _, j := range n.Pods {
			hosts = append(hosts, PodName(n.Index, j))
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelism)
	for _, h := range hosts {
		g.Go(func() error {
			if gctx.Err() != nil {
				return gctx.Err()
			}
			return l.newHostNS(h)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := l.buildFabric(s); err != nil {
		return err
	}
	if err := l.buildServers(s); err != nil {
		return err
	}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(parallelism)
	for _, n := range s.Nodes {
		g.Go(func() error {
			if err := l.buildNode(s, n.Index); err != nil {
				return err
			}
			for _, j := range n.Pods {
				if gctx.Err() != nil {
					return gctx.Err()
				}
				if err := l.buildPod(n.Index, j); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// buildNode addresses node i on the fabric (both families) and routes
// the other nodes' pod CIDRs and the client network.
func (l *Lab) buildNode(s *State, i int) error {
	h, err := Handle(NSName(l.name, NodeName(i)))
	if err != nil {
		return err
	}
	defer h.Close()
	if _, err := upAddr(h, "eth0", hostAddr(NodeAddr(i), FabricCIDR), hostAddr(NodeAddr6(i), FabricCIDR6)); err != nil {
		return err
	}
	for _, n := range s.Nodes {
		if n.Index != i {
			if err := routesVia(h, NodeAddr(n.Index), NodeAddr6(n.Index), PodCIDR(n.Index), PodCIDR6(n.Index)); err != nil {
				return err
			}
		}
	}
	return routesVia(h, RouterFabricAddr, RouterFabricAddr6, ClientCIDR, ClientCIDR6)
}

// buildPod wires pod j of node i: a veth pJ on the node carrying the
// gateways (the IPv4 one as a /32, the IPv6 one link-local) and host
// routes to the pod; in the pod, eth0 with the pod's /32 and /128 and
// default routes via the gateways (routed, Calico style: no bridge, no
// ARP or neighbour discovery between pods).
func (l *Lab) buildPod(i, j int) error {
	node, err := Handle(NSName(l.name, NodeName(i)))
	if err != nil {
		return err
	}
	defer node.Close()
	dev := "p" + strconv.Itoa(j)
	podNS := NSName(l.name, PodName(i, j))
	if err := veth(node, dev, "eth0", podNS, 0); err != nil {
		return err
	}
	link, err := upAddr(node, dev, single(PodGateway(i)), netip.PrefixFrom(PodGateway6(), 64))
	if err != nil {
		return err
	}
	for _, a := range []netip.Addr{PodAddr(i, j), PodAddr6(i, j)} {
		if err := node.RouteReplace(&netlink.Route{Dst: ipnet(single(a)), LinkIndex: link.Attrs().Index, Scope: netlink.SCOPE_LINK}); err != nil {
			return fmt.Errorf("route to pod %s: %w", PodName(i, j), err)
		}
	}
	pod, err := Handle(podNS)
	if err != nil {
		return err
	}
	defer pod.Close()
	eth, err := upAddr(pod, "eth0", single(PodAddr(i, j)), single(PodAddr6(i, j)))
	if err != nil {
		return err
	}
	if err := pod.RouteReplace(&netlink.Route{Dst: ipnet(single(PodGateway(i))), LinkIndex: eth.Attrs().Index, Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("pod %s gateway route: %w", PodName(i, j), err)
	}
	if err := pod.RouteReplace(&netlink.Route{Dst: ipnet(defaultDst(PodGateway(i))), Gw: PodGateway(i).AsSlice()}); err != nil {
		return fmt.Errorf("pod %s default route: %w", PodName(i, j), err)
	}
	// A link-local gateway needs the device named.
	if err := pod.RouteReplace(&netlink.Route{Dst: ipnet(defaultDst(PodGateway6())), Gw: PodGateway6().AsSlice(), LinkIndex: eth.Attrs().Index}); err != nil {
		return fmt.Errorf("pod %s IPv6 default route: %w", PodName(i, j), err)
	}
	return nil
}
