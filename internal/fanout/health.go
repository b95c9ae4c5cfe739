package fanout

import (
	"context"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/flowpb"
	"github.com/flowlb/flowlb/internal/flows"
	"github.com/flowlb/flowlb/internal/lbaas"
)

// SetHealthSink makes the hub record agents' health verdicts with sink
// and push the resulting flow changes. Without a sink, reports are
// ignored.
func (h *Hub) SetHealthSink(sink HealthSink) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sink == nil {
		go h.healthLoop()
	}
	h.sink = sink
}

// HealthSink records a member's health verdict and reports its load
// balancer and the change's log entry, 0 when nothing changed
// (lbaas.Service.SetMemberHealth). The tail then carries the change to
// every replica's agents.
type HealthSink func(ctx context.Context, memberID, health string) (lbID string, change int64, err error)

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

// connectedNodes lists the nodes with an agent connected to any replica:
// members are assigned among all of them, and each replica tells its own
// agents theirs. Called with h.mu held.
func (h *Hub) connectedNodes() []string { return h.acks.nodes() }

// setLBProbes replaces one load balancer's probes and returns the nodes
// whose assignment changed. Called with h.mu held.
func (h *Hub) setLBProbes(lbID string, probes []flows.Probe) map[string]bool {
	touched := map[string]bool{}
	nodes := h.connectedNodes()
	old := h.lbProbes[lbID]
	keep := map[string]bool{}
	for _, p := range probes {
		keep[p.MemberID] = true
	}
	for _, id := range old {
		if !keep[id] {
			touched[h.probeOwner[id]] = true
			delete(h.probes, id)
			delete(h.probeOwner, id)
		}
	}
	var ids []string
	for _, p := range probes {
		id := p.MemberID
		prev, had := h.probes[id]
		h.probes[id] = p
		ids = append(ids, id)
		own := owner(id, p.Node, nodes)
		if !had || !sameProbe(prev, p) || h.probeOwner[id] != own {
			touched[h.probeOwner[id]] = true
			touched[own] = true
		}
		h.probeOwner[id] = own
	}
	if len(ids) == 0 {
		delete(h.lbProbes, lbID)
	} else {
		h.lbProbes[lbID] = ids
	}
	delete(touched, "")
	return touched
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

// reassign recomputes every owner after the set of agents changed and
// returns the nodes whose assignment changed. Called with h.mu held.
func (h *Hub) reassign() map[string]bool {
	touched := map[string]bool{}
	nodes := h.connectedNodes()
	for id, p := range h.probes {
		own := owner(id, p.Node, nodes)
		if own != h.probeOwner[id] {
			touched[h.probeOwner[id]] = true
			touched[own] = true
			h.probeOwner[id] = own
		}
	}
	delete(touched, "")
	return touched
}

// sendProbes sends their full probe list to the agents of the given
// nodes. Called with h.mu held.
func (h *Hub) sendProbes(nodes map[string]bool) {
	if len(nodes) == 0 {
		return
	}
	lists := map[string][]*agentv1.Probe{}
	for id, own := range h.probeOwner {
		if nodes[own] {
			lists[own] = append(lists[own], flowpb.ProbeToProto(h.probes[id]))
		}
	}
	for a := range h.acks.local {
		if !nodes[a.node] {
			continue
		}
		ps := lists[a.node]
		slices.SortFunc(ps, func(x, y *agentv1.Probe) int { return strings.Compare(x.GetMemberId(), y.GetMemberId()) })
		msg := &agentv1.Update{Revision: h.rev, Epoch: h.epoch, ProbesSet: true, Probes: ps}
		select {
		case a.send <- msg:
		default:
			a.drop()
		}
	}
}

// Probers returns, for each member probed, the node probing it.
func (h *Hub) Probers() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]string, len(h.probeOwner))
	for id, n := range h.probeOwner {
		out[id] = n
	}
	return out
}

// report handles an agent's health transitions: verdicts from the agent
// that currently owns the member are recorded; a change of the member's
// state reaches the flows through the log.
func (h *Hub) report(node string, r *agentv1.HealthReport) {
	for _, res := range r.GetResults() {
		h.mu.Lock()
		own, sink := h.probeOwner[res.GetMemberId()], h.sink
		h.mu.Unlock()
		if own != node || sink == nil {
			continue // a report from an agent the member was taken from
		}
		h.healthQ <- healthEvent{member: res.GetMemberId(), status: res.GetStatus(), reason: res.GetReason(),
			at: time.UnixMilli(res.GetAtUnixMs()), node: node}
	}
}

type healthEvent struct {
	member, status, reason, node string
	at                           time.Time
}

// healthLoop records verdicts one at a time, in arrival order.
func (h *Hub) healthLoop() {
	for ev := range h.healthQ {
		ctx := context.Background()
		h.mu.Lock()
		sink := h.sink
		h.mu.Unlock()
		lbID, change, err := sink(ctx, ev.member, ev.status)
		if err != nil {
			h.log.Error("record member health", "member", ev.member, "status", ev.status, "err", err)
			continue
		}
		h.m.healthResults.WithLabelValues(ev.status).Inc()
		if change == 0 {
			continue
		}
		h.mu.Lock()
		h.journal.transition(HealthTransition{At: ev.at, MemberID: ev.member, LoadBalancerID: lbID, Status: ev.status, Reason: ev.reason, Node: ev.node})
		h.mu.Unlock()
		h.log.Info("member health changed", "member", ev.member, "status", ev.status, "reason", ev.reason, "probed_from", ev.node, "loadbalancer", lbID)
		at := ev.at
		h.wait(lbID, change, func([]string) { h.m.healthReaction.Observe(time.Since(at).Seconds()) })
	}
}

// memberCollector exports flowlb_health_members: monitored members by
// their current verdict (UNKNOWN before the first).
type memberCollector struct {
	h    *Hub
	desc *prometheus.Desc
}

func (c memberCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c memberCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{lbaas.Online: 0, lbaas.OpError: 0, "UNKNOWN": 0}
	c.h.mu.Lock()
	for _, p := range c.h.probes {
		st := p.InitialStatus
		if st == "" {
			st = "UNKNOWN"
		}
		counts[st]++
	}
	c.h.mu.Unlock()
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), st)
	}
}
