package fanout

import (
	"context"
	"net/netip"
	"sync/atomic"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/shared/flowpb"
)

// StatsSink records what one node counted (store.Stats.AddStats).
type StatsSink func(ctx context.Context, node string, counts []store.ListenerCounts, ttl time.Duration) error

// statsQueue bounds the reports waiting to be recorded; a stream whose
// report finds it full waits for room (or for its own end), rather than
// lose counts.
const statsQueue = 1024

// statsDrain bounds how long the reports still queued when the hub stops
// are given to be recorded: the agents report what they counted since
// their last report, so a report dropped is counts lost.
const statsDrain = 2 * time.Second

// statsReports are the agents' statistics reports on their way to the
// sink, recorded one at a time by the hub's statistics loop, which ends
// with the hub's Run after writing what is still queued (for at most
// statsDrain).
type statsReports struct {
	q    chan statsEvent
	sink atomic.Pointer[StatsSink]
}

func newStatsReports(size int) *statsReports { return &statsReports{q: make(chan statsEvent, size)} }

// SetStatsSink makes the hub record its agents' statistics reports with
// sink. Without a sink, reports are ignored.
func (h *Hub) SetStatsSink(sink StatsSink) { h.stats.sink.Store(&sink) }

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

// reportStats queues a node's report for the sink, waiting for room
// until ctx (its stream's) ends.
func (h *Hub) reportStats(ctx context.Context, node string, r *agentv1.StatsReport) error {
	if h.stats.sink.Load() == nil {
		return nil
	}
	return enqueue(ctx, h.stats.q, statsEvent{node: node, counts: listenerCounts(r), ttl: activeTTL(r)})
}

// statsLoop records reports one at a time, in arrival order, until ctx
// ends; then those still queued, for at most statsDrain.
func (h *Hub) statsLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			h.drainStats(nil)
			return
		case ev := <-h.stats.q:
			if ctx.Err() != nil {
				h.drainStats(&ev)
				return
			}
			h.recordStats(ctx, ev)
		}
	}
}

// drainStats records the reports queued when the hub stops, first taken
// already (nil: none).
func (h *Hub) drainStats(first *statsEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), statsDrain)
	defer cancel()
	if first != nil {
		h.recordStats(ctx, *first)
	}
	for {
		select {
		case ev := <-h.stats.q:
			h.recordStats(ctx, ev)
		default:
			return
		}
	}
}

func (h *Hub) recordStats(ctx context.Context, ev statsEvent) {
	sink := h.stats.sink.Load()
	if sink == nil {
		return
	}
	if err := (*sink)(ctx, ev.node, ev.counts, ev.ttl); err != nil {
		h.m.statsErrors.Inc()
		h.log.Error("record statistics", "node", ev.node, "err", err)
	}
}
