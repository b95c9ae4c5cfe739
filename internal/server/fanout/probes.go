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
	// nodes lists the nodes with an agent on any replica, sorted; send
	// queues the lists of the given nodes.
	nodes func() []string
	send  func(nodes map[string]bool, lists map[string][]*agentv1.Probe)
}

func newProbes(nodes func() []string, send func(map[string]bool, map[string][]*agentv1.Probe)) *probes {
	return &probes{byMember: map[string]flows.Probe{}, owner: map[string]string{}, byLB: map[string][]string{}, nodes: nodes, send: send}
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
			delete(p.owner, id)
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
		p.owner[id] = own
	}
	if len(ids) == 0 {
		delete(p.byLB, lbID)
	} else {
		p.byLB[lbID] = ids
	}
}

// reassign recomputes every owner after the set of agents changed and
// sends the lists that changed, and node's whatever it is (a newcomer
// always gets its list, empty or not; "": none).
func (p *probes) reassign(node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	touched := map[string]bool{}
	// The cluster's nodes only when there is a member to assign: listing
	// them sorts every node of the cluster, and agents join and leave
	// by the thousand when a replica dies.
	var nodes []string
	if len(p.byMember) > 0 {
		nodes = p.nodes()
	}
	for id, pr := range p.byMember {
		own := owner(id, pr.Node, nodes)
		if own != p.owner[id] {
			touched[p.owner[id]] = true
			touched[own] = true
			p.owner[id] = own
		}
	}
	if node != "" {
		touched[node] = true
	}
	p.sendLists(touched)
}

// sendLists sends their full probe lists to the agents of the touched
// nodes. Called with p.mu held.
func (p *probes) sendLists(touched map[string]bool) {
	delete(touched, "")
	if len(touched) == 0 {
		return
	}
	lists := map[string][]*agentv1.Probe{}
	for id, own := range p.owner {
		if touched[own] {
			lists[own] = append(lists[own], flowpb.ProbeToProto(p.byMember[id]))
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
		h := fnv.New64a()
		h.Write([]byte(memberID))
		h.Write([]byte{0})
		h.Write([]byte(n))
		if s := mix64(h.Sum64()); best == "" || s > bestScore {
			best, bestScore = n, s
		}
	}
	return best
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
