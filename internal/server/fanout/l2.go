package fanout

import (
	"hash/fnv"
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// l2 gives every external VIP within the L2 ranges to one node that can
// serve it (flows.Service.Servable), among the cluster's agents, and
// sends each agent of this replica the VIPs it answers ARP and neighbour
// discovery for when they change. Every replica computes the same owners
// from the same table and the same agents (the store's), so a VIP has one
// owner across the cluster once the replicas have read the same; an owner
// leaving moves only its own VIPs (rendezvous hashing). Its lock comes
// after the table's and before the acks' and the streams'.
type l2 struct {
	mu     sync.Mutex
	ranges []netip.Prefix
	// byLB are the services of each load balancer within the ranges;
	// byVIP the same by VIP, then load balancer; owner each VIP's node
	// ("" or absent: none).
	byLB  map[string][]flows.Service
	byVIP map[netip.Addr]map[string][]flows.Service
	owner map[netip.Addr]string
	// known are the nodes the owners were computed among, sorted.
	known []string
	nodes func() []string
	send  func(nodes map[string]bool, lists map[string][]netip.Addr)
}

func newL2(ranges []netip.Prefix, nodes func() []string, send func(map[string]bool, map[string][]netip.Addr)) *l2 {
	return &l2{ranges: ranges, byLB: map[string][]flows.Service{}, byVIP: map[netip.Addr]map[string][]flows.Service{},
		owner: map[netip.Addr]string{}, nodes: nodes, send: send}
}

// within reports whether v is an L2 VIP.
func (l *l2) within(v netip.Addr) bool {
	return slices.ContainsFunc(l.ranges, func(p netip.Prefix) bool { return p.Contains(v) })
}

// set replaces load balancers' services (none: gone) and sends the lists
// that changed.
func (l *l2) set(byLB map[string][]flows.Service) {
	l.mu.Lock()
	defer l.mu.Unlock()
	touchedVIPs := map[netip.Addr]bool{}
	for id, ss := range byLB {
		for _, s := range l.byLB[id] {
			touchedVIPs[s.Key.VIP] = true
			if byID := l.byVIP[s.Key.VIP]; byID != nil {
				delete(byID, id)
				if len(byID) == 0 {
					delete(l.byVIP, s.Key.VIP)
				}
			}
		}
		var mine []flows.Service
		for _, s := range ss {
			if !l.within(s.Key.VIP) {
				continue
			}
			mine = append(mine, s)
			touchedVIPs[s.Key.VIP] = true
			byID := l.byVIP[s.Key.VIP]
			if byID == nil {
				byID = map[string][]flows.Service{}
				l.byVIP[s.Key.VIP] = byID
			}
			byID[id] = append(byID[id], s)
		}
		if len(mine) == 0 {
			delete(l.byLB, id)
		} else {
			l.byLB[id] = mine
		}
	}
	nodes := l.nodes()
	touched := map[string]bool{}
	for v := range touchedVIPs {
		l.assign(v, nodes, touched)
	}
	// The other VIPs follow the nodes too, so that every owner is
	// computed among the same nodes (those just assigned are already).
	l.follow(nodes, touched)
	l.sendLists(touched)
}

// load replaces the whole table's services (a snapshot of the table).
func (l *l2) load(byLB map[string][]flows.Service) {
	all := maps.Clone(byLB)
	l.mu.Lock()
	for id := range l.byLB {
		if _, ok := all[id]; !ok {
			all[id] = nil
		}
	}
	l.mu.Unlock()
	l.set(all)
}

// reassign moves the VIPs after the set of agents changed and sends the
// lists that changed, and node's whatever it is (a newcomer always gets
// its list; "": none). Only what the change can move is looked at
// (follow).
func (l *l2) reassign(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	touched := map[string]bool{}
	// The cluster's nodes only when there is a VIP to assign (as
	// probes.reassign).
	if len(l.byVIP) > 0 {
		l.follow(l.nodes(), touched)
	}
	if node != "" {
		touched[node] = true
	}
	l.sendLists(touched)
}

// reassignAll recomputes every VIP's owner among the cluster's nodes, as
// after a read of every agent, and sends the lists that changed.
func (l *l2) reassignAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	touched := map[string]bool{}
	if len(l.byVIP) > 0 {
		nodes := l.nodes()
		for v := range l.byVIP {
			l.assign(v, nodes, touched)
		}
		l.known = nodes
	}
	l.sendLists(touched)
}

// follow moves the VIPs from the nodes their owners were computed among
// (l.known) to nodes, adding the nodes whose lists changed to touched: a
// VIP whose owner left, or that had none, is assigned among nodes; any
// other is compared with the nodes that joined only (rendezvous hashing:
// a newcomer can only take VIPs to itself). Called with l.mu held.
func (l *l2) follow(nodes []string, touched map[string]bool) {
	joined, left := diffSorted(l.known, nodes)
	l.known = nodes
	if len(joined) == 0 && len(left) == 0 {
		return
	}
	isLeft := make(map[string]bool, len(left))
	for _, n := range left {
		isLeft[n] = true
	}
	for v := range l.byVIP {
		cur := l.owner[v]
		if isLeft[cur] {
			l.assign(v, nodes, touched)
			continue
		}
		if len(joined) == 0 {
			continue
		}
		// No owner: none of the other nodes can serve it.
		services := l.services(v)
		best, bestScore := cur, uint64(0)
		if cur != "" {
			bestScore = vipScore(v, cur)
		}
		for _, n := range joined {
			if !slices.ContainsFunc(services, func(s flows.Service) bool { return s.Servable(n) }) {
				continue
			}
			if s := vipScore(v, n); best == "" || s > bestScore || s == bestScore && n < best {
				best, bestScore = n, s
			}
		}
		if best != cur {
			touched[cur] = true
			touched[best] = true
			l.owner[v] = best
		}
	}
}

// services are v's services. Called with l.mu held.
func (l *l2) services(v netip.Addr) []flows.Service {
	var services []flows.Service
	for _, ss := range l.byVIP[v] {
		services = append(services, ss...)
	}
	return services
}

// assign recomputes v's owner among nodes, adding the nodes whose list
// changed to touched. Called with l.mu held.
func (l *l2) assign(v netip.Addr, nodes []string, touched map[string]bool) {
	own := l2Owner(v, l.services(v), nodes)
	if prev := l.owner[v]; prev != own {
		touched[prev] = true
		touched[own] = true
	}
	if own == "" {
		delete(l.owner, v)
	} else {
		l.owner[v] = own
	}
}

// sendLists sends their whole lists to the agents of the touched nodes.
// Called with l.mu held.
func (l *l2) sendLists(touched map[string]bool) {
	delete(touched, "")
	if len(touched) == 0 {
		return
	}
	lists := map[string][]netip.Addr{}
	for v, own := range l.owner {
		if touched[own] {
			lists[own] = append(lists[own], v)
		}
	}
	for _, vs := range lists {
		slices.SortFunc(vs, netip.Addr.Compare)
	}
	l.send(touched, lists)
}

// ownerOf is the node answering for v ("": none).
func (l *l2) ownerOf(v netip.Addr) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owner[v]
}

// owners returns each L2 VIP's node.
func (l *l2) owners() map[netip.Addr]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.owner)
}

// l2Owner picks the node that answers for v: among nodes, those that can
// serve one of v's services, the highest rendezvous hash of VIP and node
// ("": none can).
func l2Owner(v netip.Addr, services []flows.Service, nodes []string) string {
	best, bestScore := "", uint64(0)
	for _, n := range nodes {
		if !slices.ContainsFunc(services, func(s flows.Service) bool { return s.Servable(n) }) {
			continue
		}
		if s := vipScore(v, n); best == "" || s > bestScore {
			best, bestScore = n, s
		}
	}
	return best
}

// vipScore is node's rendezvous hash for v.
func vipScore(v netip.Addr, node string) uint64 {
	h := fnv.New64a()
	b, _ := v.MarshalBinary()
	h.Write(b)
	h.Write([]byte{0})
	h.Write([]byte(node))
	return mix64(h.Sum64())
}
