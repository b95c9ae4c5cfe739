package fanout

import (
	"net/netip"
	"slices"
	"strings"
	"sync"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
)

// sendQueue bounds the updates queued for one agent; one that falls
// further behind is cut off and catches up when it reconnects. Every
// agent's queue is allocated whole (8 bytes a slot): 1,024 slots are
// 8 KiB an agent, and more than a second of the tail's updates at full
// churn (each update is a batch of up to tailBatch entries).
const sendQueue = 1024

// agent is one agent connected to this replica.
type agent struct {
	node     string
	send     chan *agentv1.Update
	gone     chan struct{}
	goneOnce sync.Once
	// sent is the revision of the last update queued for it (streams'
	// lock): a probe list goes with it, since the agent takes every
	// update's revision as programmed.
	sent int64
	// acked is the revision it acknowledged (acks' lock).
	acked int64
	// noProbes: it takes no probes and answers for no VIP (Hello).
	noProbes bool
}

func newAgent(node string, queue int) *agent {
	return &agent{node: node, send: make(chan *agentv1.Update, queue), gone: make(chan struct{})}
}

// drop cuts off an agent that cannot keep up; it reconnects and catches up.
func (a *agent) drop() { a.goneOnce.Do(func() { close(a.gone) }) }

// streams are this replica's agents and what is queued for them: the
// broadcaster. Its lock is taken last (after the table's and the probes'):
// it only queues, never waits.
type streams struct {
	mu     sync.Mutex
	epoch  string
	agents map[*agent]bool
	// byNode are the agents of each node (two while one reconnects), so
	// that a list for a few nodes costs no walk over every agent.
	byNode map[string][]*agent
}

func newStreams(epoch string) *streams {
	return &streams{epoch: epoch, agents: map[*agent]bool{}, byNode: map[string][]*agent{}}
}

// add registers an agent with the first update it gets (nil: none) and
// the revision its queue then holds.
func (s *streams) add(a *agent, first *agentv1.Update, rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if first != nil {
		a.send <- first // a new queue has room
	}
	a.sent = rev
	s.agents[a] = true
	s.byNode[a.node] = append(s.byNode[a.node], a)
}

// remove forgets an agent and returns how many are left.
func (s *streams) remove(a *agent) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.agents, a)
	if rest := slices.DeleteFunc(s.byNode[a.node], func(x *agent) bool { return x == a }); len(rest) > 0 {
		s.byNode[a.node] = rest
	} else {
		delete(s.byNode, a.node)
	}
	return len(s.agents)
}

// count is the number of agents connected.
func (s *streams) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.agents)
}

// broadcast queues u for every agent, cutting off those whose queue is
// full.
func (s *streams) broadcast(u *agentv1.Update) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for a := range s.agents {
		if queue(a, u) {
			a.sent = u.GetRevision()
		}
	}
}

// sendProbes queues for the agents of each node in nodes its probe list
// from lists (none: an empty list), sorted by member, at the revision
// its queue holds.
func (s *streams) sendProbes(nodes map[string]bool, lists map[string][]*agentv1.Probe) {
	if len(nodes) == 0 {
		return
	}
	for _, ps := range lists {
		slices.SortFunc(ps, func(x, y *agentv1.Probe) int { return strings.Compare(x.GetMemberId(), y.GetMemberId()) })
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := range nodes {
		for _, a := range s.byNode[n] {
			queue(a, &agentv1.Update{Revision: a.sent, Epoch: s.epoch, ProbesSet: true, Probes: lists[a.node]})
		}
	}
}

// sendL2 queues for the agents of each node in nodes its list of L2 VIPs
// from lists (none: an empty list), at the revision its queue holds.
func (s *streams) sendL2(nodes map[string]bool, lists map[string][]netip.Addr) {
	if len(nodes) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := range nodes {
		for _, a := range s.byNode[n] {
			u := &agentv1.Update{Revision: a.sent, Epoch: s.epoch, L2Set: true}
			for _, v := range lists[a.node] {
				u.L2Vips = append(u.L2Vips, v.AsSlice())
			}
			queue(a, u)
		}
	}
}

// queue puts msg in a's queue, or cuts a off when it is full.
func queue(a *agent, msg *agentv1.Update) bool {
	select {
	case a.send <- msg:
		return true
	default:
		a.drop()
		return false
	}
}
