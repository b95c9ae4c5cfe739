package fanout

import (
	"hash/fnv"
	"maps"
	"slices"
	"sync"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flowpb"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// probes assigns every monitored member's probe to one agent of the
// cluster and sends each agent of this replica its list when it changes.
// Its lock is held while a list is sent, so that the last list an agent
// is sent is the last one computed; it asks the acks for the live nodes
// and queues through the streams, whose locks come after its own.
type probes struct {
	mu sync.Mutex
	// byMember is every monitored member's probe, owner the node probing
	// it, byLB each load balancer's probed members.
	byMember map[string]flows.Probe
	owner    map[string]string
	byLB     map[string][]string
	// byOwner are the members each node probes (owner inverted).
	byOwner map[string]map[string]bool
	// known are the nodes the owners were computed among, sorted.
	known []string
	// nodes lists the nodes with an agent on any replica, sorted; send
	// queues the lists of the given nodes.
	nodes func() []string
	send  func(nodes map[string]bool, lists map[string][]*agentv1.Probe)
}

func newProbes(nodes func() []string, send func(map[string]bool, map[string][]*agentv1.Probe)) *probes {
	return &probes{byMember: map[string]flows.Probe{}, owner: map[string]string{}, byLB: map[string][]string{},
		byOwner: map[string]map[string]bool{}, nodes: nodes, send: send}
}

// setOwner gives member id to node own ("": none, or the member is gone).
// Called with p.mu held.
func (p *probes) setOwner(id, own string) {
	if prev, ok := p.owner[id]; ok {
		if ms := p.byOwner[prev]; ms != nil {
			delete(ms, id)
			if len(ms) == 0 {
				delete(p.byOwner, prev)
			}
		}
	}
	if own == "" {
		delete(p.owner, id)
		return
	}
	p.owner[id] = own
	ms := p.byOwner[own]
	if ms == nil {
		ms = map[string]bool{}
		p.byOwner[own] = ms
	}
	ms[id] = true
}

// set replaces load balancers' probes (nil: none) and sends the lists
// that changed.
func (p *probes) set(byLB map[string][]flows.Probe) {
	p.mu.Lock()
	defer p.mu.Unlock()
	nodes := p.nodes()
	touched := map[string]bool{}
	for lbID, ps := range byLB {
		p.setLB(lbID, ps, nodes, touched)
	}
	// The other members follow the nodes too, so that every owner is
	// computed among the same nodes (those just set are already).
	p.follow(nodes, touched)
	p.sendLists(touched)
}

// setLB replaces one load balancer's probes and adds the nodes whose
// assignment changed to touched. Called with p.mu held.
func (p *probes) setLB(lbID string, ps []flows.Probe, nodes []string, touched map[string]bool) {
	keep := map[string]bool{}
	for _, pr := range ps {
		keep[pr.MemberID] = true
	}
	for _, id := range p.byLB[lbID] {
		if !keep[id] {
			touched[p.owner[id]] = true
			delete(p.byMember, id)
			p.setOwner(id, "")
		}
	}
	var ids []string
	for _, pr := range ps {
		id := pr.MemberID
		prev, had := p.byMember[id]
		p.byMember[id] = pr
		ids = append(ids, id)
		own := owner(id, pr.Node, nodes)
		if !had || !sameProbe(prev, pr) || p.owner[id] != own {
			touched[p.owner[id]] = true
			touched[own] = true
		}
		p.setOwner(id, own)
	}
	if len(ids) == 0 {
		delete(p.byLB, lbID)
	} else {
		p.byLB[lbID] = ids
	}
}

// reassign moves the members after the set of agents changed and sends
// the lists that changed, and node's whatever it is (a newcomer always
// gets its list, empty or not; "": none). Only what the change can move
// is looked at (follow).
func (p *probes) reassign(node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	touched := map[string]bool{}
	// The cluster's nodes only when there is a member to assign: listing
	// them sorts every node of the cluster, and agents join and leave
	// by the thousand when a replica dies.
	if len(p.byMember) > 0 {
		p.follow(p.nodes(), touched)
	}
	if node != "" {
		touched[node] = true
	}
	p.sendLists(touched)
}

// reassignAll recomputes every member's owner among the cluster's nodes,
// as after a read of every agent, and sends the lists that changed.
func (p *probes) reassignAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	touched := map[string]bool{}
	if len(p.byMember) > 0 {
		nodes := p.nodes()
		for id, pr := range p.byMember {
			p.move(id, owner(id, pr.Node, nodes), touched)
		}
		p.known = nodes
	}
	p.sendLists(touched)
}

// follow moves the members from the nodes their owners were computed
// among (p.known) to nodes, adding the nodes whose lists changed to
// touched. With rendezvous ownership, a node that joined can only take
// members to itself, and one that left only frees its own: the members
// of the nodes that left are given an owner among nodes, every other
// member is compared with the nodes that joined only. Called with p.mu
// held.
func (p *probes) follow(nodes []string, touched map[string]bool) {
	joined, left := diffSorted(p.known, nodes)
	p.known = nodes
	for _, n := range left {
		for id := range p.byOwner[n] {
			p.move(id, owner(id, p.byMember[id].Node, nodes), touched)
		}
	}
	if len(joined) == 0 {
		return
	}
	isJoined := make(map[string]bool, len(joined))
	for _, n := range joined {
		isJoined[n] = true
	}
	for id, pr := range p.byMember {
		cur := p.owner[id]
		switch {
		case cur == "":
			p.move(id, owner(id, pr.Node, nodes), touched)
		case cur == pr.Node:
			// Its own node's agent probes it, whoever joins.
		case isJoined[pr.Node]:
			p.move(id, pr.Node, touched)
		default:
			best, bestScore := cur, memberScore(id, cur)
			for _, n := range joined {
				if s := memberScore(id, n); s > bestScore || s == bestScore && n < best {
					best, bestScore = n, s
				}
			}
			p.move(id, best, touched)
		}
	}
}

// move gives member id to own, adding both nodes to touched if that
// changes its owner. Called with p.mu held.
func (p *probes) move(id, own string, touched map[string]bool) {
	if prev := p.owner[id]; prev != own {
		touched[prev] = true
		touched[own] = true
		p.setOwner(id, own)
	}
}

// diffSorted returns the strings of the sorted list b not in the sorted
// list a (joined), and those of a not in b (left).
func diffSorted(a, b []string) (joined, left []string) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i] < b[j]:
			left = append(left, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			joined = append(joined, b[j])
			j++
		default:
			i++
			j++
		}
	}
	return joined, left
}

// sendLists sends their full probe lists to the agents of the touched
// nodes. Called with p.mu held.
func (p *probes) sendLists(touched map[string]bool) {
	delete(touched, "")
	if len(touched) == 0 {
		return
	}
	lists := map[string][]*agentv1.Probe{}
	for n := range touched {
		for id := range p.byOwner[n] {
			lists[n] = append(lists[n], flowpb.ProbeToProto(p.byMember[id]))
		}
	}
	p.send(touched, lists)
}

// ownerOf is the node probing a member ("": none).
func (p *probes) ownerOf(memberID string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.owner[memberID]
}

// owners returns, for each member probed, the node probing it.
func (p *probes) owners() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.owner)
}

// byStatus counts the probed members by the server's verdict (UNKNOWN
// before the first).
func (p *probes) byStatus() map[string]int {
	counts := map[string]int{lbaas.Online: 0, lbaas.OpError: 0, "UNKNOWN": 0}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.byMember {
		st := pr.InitialStatus
		if st == "" {
			st = "UNKNOWN"
		}
		counts[st]++
	}
	return counts
}

// sameProbe compares what an agent is told to probe a member, leaving out
// the server's current verdict (InitialStatus), which the agent owning
// the member already knows better, and the member's node, which agents
// are not told.
func sameProbe(a, b flows.Probe) bool {
	a.InitialStatus, b.InitialStatus = "", ""
	a.Node, b.Node = "", ""
	return a == b
}

// owner picks the agent that probes a member: the agent of the member's
// own node when it is connected, else the highest rendezvous hash of
// member and node among the connected agents, so that an agent leaving
// moves only its own members and every other assignment stays put.
func owner(memberID, node string, nodes []string) string {
	if node != "" && slices.Contains(nodes, node) {
		return node
	}
	best, bestScore := "", uint64(0)
	for _, n := range nodes {
		if s := memberScore(memberID, n); best == "" || s > bestScore {
			best, bestScore = n, s
		}
	}
	return best
}

// memberScore is node's rendezvous hash for memberID.
func memberScore(memberID, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(memberID))
	h.Write([]byte{0})
	h.Write([]byte(node))
	return mix64(h.Sum64())
}

// mix64 is splitmix64's finaliser: FNV alone barely changes its high bits
// with the last bytes (the node name), which skews the ranking.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
