package fanout

import (
	"maps"
	"net/netip"
	"slices"
)

// AnnouncedLB is who announces a load balancer's addresses, as this
// replica knows it: for each address its flows are served on, the nodes
// streaming to this replica that announce it (none: no such node does);
// InRanges, the addresses within some such node's announced ranges;
// Announcing, how many of this replica's nodes announce anything at all;
// Unseen, how many of the cluster's live agents stream to other
// replicas, whose announcements this replica is not told.
type AnnouncedLB struct {
	Addresses  map[netip.Addr][]string
	InRanges   map[netip.Addr]bool
	Announcing int
	Unseen     int
}

// Announced says who announces load balancer lbID's addresses (none
// while the table has no flow of it). Its cost is the load balancer's
// services and, per address, a binary search in each node's list.
func (h *Hub) Announced(lbID string) AnnouncedLB {
	addrs := h.served.addressesOf(lbID)
	byNode := h.journal.announcements()
	out := AnnouncedLB{Addresses: make(map[netip.Addr][]string, len(addrs)), InRanges: map[netip.Addr]bool{}}
	for _, a := range byNode {
		if a.Mode != "" {
			out.Announcing++
		}
	}
	nodes := slices.Sorted(maps.Keys(byNode))
	for _, v := range addrs {
		out.Addresses[v] = []string{}
		for _, n := range nodes {
			if byNode[n].Has(v) {
				out.Addresses[v] = append(out.Addresses[v], n)
			}
			if byNode[n].Covers(v) {
				out.InRanges[v] = true
			}
		}
	}
	// An L2 VIP is announced by the node the hub gave it to, whichever
	// replica that node streams to (every replica computes the same).
	if h.l2 != nil {
		for _, v := range addrs {
			if h.l2.within(v) {
				out.InRanges[v] = true
				if own := h.l2.ownerOf(v); own != "" && !slices.Contains(out.Addresses[v], own) {
					out.Addresses[v] = append(out.Addresses[v], own)
					slices.Sort(out.Addresses[v])
				}
			}
		}
	}
	local := h.acks.streaming()
	for n := range h.acks.revisions() {
		if !local[n] {
			out.Unseen++
		}
	}
	return out
}
