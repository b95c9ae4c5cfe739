package lbaas

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/flowlb/flowlb/internal/server/store"
)

// The flow data plane is flat: every node serves every load balancer,
// keyed by VIP address, transport protocol and port, whatever network the
// VIP is on. Octavia refuses a second listener on one port of a load
// balancer (checkListener); here listeners of different load balancers
// must not meet on one VIP either. Addresses are unique where the VIP
// allocator makes them so (the Neutron subset), and then nothing is read;
// where two load balancers may hold one address, a change that creates
// listeners reads the other holders' listeners. A listener holds its port
// whatever its admin state, so enabling one never makes a conflict.

// VIPSharing is implemented by a VIPAllocator that can tell whether an
// address it gave out may be another load balancer's VIP too. With an
// allocator that does not implement it, every address may be shared.
type VIPSharing interface {
	MayBeShared(tx store.ReadTx, address string) (bool, error)
}

// vipPort is what the data plane keys a service by.
type vipPort struct {
	address   string
	transport string
	port      int
}

// checkVIPPorts refuses a change that gives a new listener of t a VIP
// address, transport and port that a listener of another load balancer
// has.
func (s *Service) checkVIPPorts(tx store.ReadTx, t *Tree) error {
	var added []*Listener
	for _, l := range t.Listeners {
		if t.created[l.ID] {
			added = append(added, l)
		}
	}
	if len(added) == 0 {
		return nil
	}
	shared, err := s.sharedVIPs(tx, vipAddresses(t.LB))
	if err != nil || len(shared) == 0 {
		return err
	}
	taken, err := portsOfOthers(tx, t.LB.ID, shared)
	if err != nil {
		return err
	}
	for _, l := range added {
		for _, a := range shared {
			if taken[vipPort{a, transport(l.Protocol), l.ProtocolPort}] {
				return Conflict("Another Load Balancer's Listener is already using protocol %s and protocol_port %d on VIP address %s", l.Protocol, l.ProtocolPort, a)
			}
		}
	}
	return nil
}

// vipAddresses lists a load balancer's VIP and additional VIPs, in the
// form the data plane compares (netip's).
func vipAddresses(lb *LoadBalancer) []string {
	var out []string
	for _, a := range append([]string{lb.VIPAddress}, additionalAddresses(lb)...) {
		if addr, err := netip.ParseAddr(a); err == nil {
			out = append(out, addr.String())
		}
	}
	return out
}

func additionalAddresses(lb *LoadBalancer) []string {
	out := make([]string, 0, len(lb.AdditionalVIPs))
	for _, av := range lb.AdditionalVIPs {
		out = append(out, av.IPAddress)
	}
	return out
}

// sharedVIPs keeps the addresses another load balancer may hold too.
func (s *Service) sharedVIPs(tx store.ReadTx, addresses []string) ([]string, error) {
	sharing, ok := s.vips.(VIPSharing)
	if !ok {
		return addresses, nil
	}
	var out []string
	for _, a := range addresses {
		maybe, err := sharing.MayBeShared(tx, a)
		if err != nil {
			return nil, fmt.Errorf("is VIP %s shared: %w", a, err)
		}
		if maybe {
			out = append(out, a)
		}
	}
	return out, nil
}

// portsOfOthers reads the listeners that load balancers other than lbID
// have on any of addresses.
func portsOfOthers(tx store.ReadTx, lbID string, addresses []string) (map[vipPort]bool, error) {
	lbs, err := listKind[LoadBalancer](tx, store.KindLoadBalancer, store.Filter{})
	if err != nil {
		return nil, err
	}
	taken := map[vipPort]bool{}
	for _, lb := range lbs {
		var common []string
		for _, a := range vipAddresses(lb) {
			if lb.ID != lbID && slices.Contains(addresses, a) {
				common = append(common, a)
			}
		}
		if len(common) == 0 {
			continue
		}
		listeners, err := listKind[Listener](tx, store.KindListener, store.Filter{LoadBalancerID: lb.ID})
		if err != nil {
			return nil, err
		}
		for _, l := range listeners {
			for _, a := range common {
				taken[vipPort{a, transport(l.Protocol), l.ProtocolPort}] = true
			}
		}
	}
	return taken, nil
}
