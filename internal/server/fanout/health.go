package fanout

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
)

// HealthSink records a member's health verdict and reports its load
// balancer and the change's log entry, 0 when nothing changed
// (lbaas.Service.SetMemberHealth). The tail then carries the change to
// every replica's agents.
type HealthSink func(ctx context.Context, memberID, health string) (lbID string, change int64, err error)

// healthQueue bounds the verdicts waiting to be recorded; a stream whose
// verdict finds it full waits for room (or for its own end).
const healthQueue = 4096

// verdicts are the agents' health verdicts on their way to the sink, in
// arrival order. They are recorded one at a time by the hub's health
// loop, which ends with the hub's Run. Verdicts still queued then are
// dropped: the agents that probe those members report them again, since
// every agent reports, on its next probe list (from whichever replica it
// streams from next), each member whose verdict differs from the
// server's.
type verdicts struct {
	q    chan healthEvent
	sink atomic.Pointer[HealthSink]
}

type healthEvent struct {
	member, status, reason, node string
	at                           time.Time
}

func newVerdicts(size int) *verdicts { return &verdicts{q: make(chan healthEvent, size)} }

// SetHealthSink makes the hub record agents' health verdicts with sink
// and push the resulting flow changes. Without a sink, reports are
// ignored.
func (h *Hub) SetHealthSink(sink HealthSink) { h.verdicts.sink.Store(&sink) }

// report queues an agent's health transitions for the members it owns,
// until ctx (its stream's) ends: verdicts from an agent a member was
// taken from are dropped.
func (h *Hub) report(ctx context.Context, node string, r *agentv1.HealthReport) error {
	if h.verdicts.sink.Load() == nil {
		return nil
	}
	for _, res := range r.GetResults() {
		if h.probes.ownerOf(res.GetMemberId()) != node {
			continue // a report from an agent the member was taken from
		}
		ev := healthEvent{member: res.GetMemberId(), status: res.GetStatus(), reason: res.GetReason(),
			at: time.UnixMilli(res.GetAtUnixMs()), node: node}
		if err := enqueue(ctx, h.verdicts.q, ev); err != nil {
			return err
		}
	}
	return nil
}

// healthLoop records verdicts one at a time, in arrival order, until ctx
// ends.
func (h *Hub) healthLoop(ctx context.Context) {
	for {
		var ev healthEvent
		select {
		case <-ctx.Done():
		case ev = <-h.verdicts.q:
		}
		if ctx.Err() != nil {
			if n := len(h.verdicts.q); n > 0 {
				h.log.Info("health verdicts not recorded at shutdown; their agents report them again", "verdicts", n)
			}
			return
		}
		h.record(ctx, ev)
	}
}

// record writes one verdict and has the hub time the flow change it
// makes.
func (h *Hub) record(ctx context.Context, ev healthEvent) {
	sink := h.verdicts.sink.Load()
	if sink == nil {
		return
	}
	lbID, change, err := (*sink)(ctx, ev.member, ev.status)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Error("record member health", "member", ev.member, "status", ev.status, "err", err)
		}
		return
	}
	h.m.healthResults.WithLabelValues(ev.status).Inc()
	if change == 0 {
		return
	}
	h.journal.transition(HealthTransition{At: ev.at, MemberID: ev.member, LoadBalancerID: lbID, Status: ev.status, Reason: ev.reason, Node: ev.node})
	h.log.Info("member health changed", "member", ev.member, "status", ev.status, "reason", ev.reason, "probed_from", ev.node, "loadbalancer", lbID)
	at := ev.at
	h.wait(lbID, change, func([]string) { h.m.healthReaction.Observe(time.Since(at).Seconds()) })
}

// enqueue puts v in q, waiting for room until ctx ends.
func enqueue[T any](ctx context.Context, q chan<- T, v T) error {
	select {
	case q <- v:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// memberCollector exports flowlb_health_members: monitored members by
// their current verdict (UNKNOWN before the first).
type memberCollector struct {
	p    *probes
	desc *prometheus.Desc
}

func (c memberCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c memberCollector) Collect(ch chan<- prometheus.Metric) {
	for st, n := range c.p.byStatus() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), st)
	}
}
