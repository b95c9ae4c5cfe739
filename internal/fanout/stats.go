package fanout

import (
	"context"
	"net/netip"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/flowpb"
	"github.com/flowlb/flowlb/internal/store"
)

// StatsSink records what one node counted (store.Stats.AddStats).
type StatsSink func(ctx context.Context, node string, counts []store.ListenerCounts, ttl time.Duration) error

// SetStatsSink makes the hub record its agents' statistics reports with
// sink. Without a sink, reports are ignored.
func (h *Hub) SetStatsSink(sink StatsSink) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.statsSink == nil {
		go h.statsLoop()
	}
	h.statsSink = sink
}

type statsEvent struct {
	node   string
	counts []store.ListenerCounts
	ttl    time.Duration
}

// listenerCounts sums a report's services by listener (a listener is one
// service; a report names each service once, but nothing relies on it),
// and their backends by member. Services without a listener, and
// backends without a member, are left out.
func listenerCounts(r *agentv1.StatsReport) []store.ListenerCounts {
	byListener := map[string]int{}
	var out []store.ListenerCounts
	for _, p := range r.GetServices() {
		s, st := flowpb.StatsFromProto(p)
		if s.ListenerID == "" {
			continue
		}
		i, ok := byListener[s.ListenerID]
		if !ok {
			i = len(out)
			byListener[s.ListenerID] = i
			out = append(out, store.ListenerCounts{ListenerID: s.ListenerID, LoadBalancerID: s.LoadBalancerID})
		}
		c := &out[i].Counts
		c.BytesIn += int64(st.BytesIn)
		c.BytesOut += int64(st.BytesOut)
		c.TotalConnections += int64(st.Connections)
		c.RequestErrors += int64(st.Refused)
		c.ActiveConnections += int64(st.Active)
		for _, b := range s.Backends {
			m, ok := st.Members[netip.AddrPortFrom(b.Address, b.Port)]
			if b.MemberID == "" || !ok {
				continue
			}
			out[i].Members = addMember(out[i].Members, store.MemberCounts{MemberID: b.MemberID, LoadBalancerID: s.LoadBalancerID,
				BytesIn: int64(m.BytesIn), BytesOut: int64(m.BytesOut), TotalConnections: int64(m.Connections)})
		}
	}
	return out
}

// addMember adds m to the member of its id in ms, or appends it.
func addMember(ms []store.MemberCounts, m store.MemberCounts) []store.MemberCounts {
	for i := range ms {
		if ms[i].MemberID == m.MemberID {
			ms[i].BytesIn += m.BytesIn
			ms[i].BytesOut += m.BytesOut
			ms[i].TotalConnections += m.TotalConnections
			return ms
		}
	}
	return append(ms, m)
}

// activeTTL is how long a report's open connections count: three of the
// agent's intervals (10 s when it does not say).
func activeTTL(r *agentv1.StatsReport) time.Duration {
	if ms := r.GetIntervalMs(); ms > 0 {
		return 3 * time.Duration(ms) * time.Millisecond
	}
	return 10 * time.Second
}

// stats queues a node's report for the sink (the stream's receiver
// waits when the queue is full, rather than lose counts).
func (h *Hub) stats(node string, r *agentv1.StatsReport) {
	h.mu.Lock()
	sink := h.statsSink
	h.mu.Unlock()
	if sink == nil {
		return
	}
	h.statsQ <- statsEvent{node: node, counts: listenerCounts(r), ttl: activeTTL(r)}
}

// statsLoop records reports one at a time, in arrival order.
func (h *Hub) statsLoop() {
	for ev := range h.statsQ {
		h.mu.Lock()
		sink := h.statsSink
		h.mu.Unlock()
		if err := sink(context.Background(), ev.node, ev.counts, ev.ttl); err != nil {
			h.m.statsErrors.Inc()
			h.log.Error("record statistics", "node", ev.node, "err", err)
		}
	}
}
