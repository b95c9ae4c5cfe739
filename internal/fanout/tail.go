package fanout

import (
	"context"
	"time"

	"github.com/flowlb/flowlb/internal/compiler"
	"github.com/flowlb/flowlb/internal/flows"
	"github.com/flowlb/flowlb/internal/store"
)

// tailBatch bounds the entries one step of the tail reads.
const tailBatch = 1000

// followLog applies the log's new entries as they come: woken by the
// store's notifications, and every Poll besides.
func (h *Hub) followLog(ctx context.Context) {
	news := h.st.Watch(store.TopicLog)
	tick := time.NewTicker(h.o.Poll)
	defer tick.Stop()
	for {
		if err := h.catchUpLog(ctx); err != nil && ctx.Err() == nil {
			h.log.Warn("following the change log", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-news:
		case <-tick.C:
			h.m.observeHead(ctx)
		}
	}
}

// catchUpLog applies entries until the log has no more.
func (h *Hub) catchUpLog(ctx context.Context) error {
	for {
		es, err := h.st.Log(ctx, h.served.revision(), tailBatch)
		if err != nil || len(es) == 0 {
			return err
		}
		if err := h.applyEntries(ctx, es); err != nil {
			return err
		}
	}
}

// applyEntries recompiles the load balancers a batch of entries touched
// and sends every agent, at the batch's last revision, the services each
// of them has now, then the probe lists that changed. The trees are read
// after the entries, so the table holds at least what the entries
// committed.
func (h *Hub) applyEntries(ctx context.Context, es []store.LogEntry) error {
	var ids []string
	seen := map[string]bool{}
	for _, e := range es {
		if !seen[e.LoadBalancerID] {
			seen[e.LoadBalancerID] = true
			ids = append(ids, e.LoadBalancerID)
		}
	}
	trees, err := h.src.TreesByID(ctx, ids)
	if err != nil {
		return err
	}
	cs := make([]change, 0, len(ids))
	probed := make(map[string][]flows.Probe, len(ids))
	for _, id := range ids {
		t := trees[id]
		if t == nil {
			cs = append(cs, change{lbID: id, gone: true})
			probed[id] = nil
			continue
		}
		out := compiler.Of(t)
		cs = append(cs, change{lbID: id, seniority: compiler.SeniorityOf(t.LB), services: out.Services})
		probed[id] = out.Probes
	}
	a, ok := h.served.apply(es, cs)
	if !ok {
		return nil
	}
	last := es[len(es)-1]
	now := time.Now()
	h.taken.add(last.Revision, now)
	h.m.tailed(last)
	for _, r := range a.reports {
		h.reportContested(r)
	}
	h.probes.set(probed)
	h.journal.applied(es, now)
	h.acks.tableAt(last.Revision, es)
	return nil
}

// reportContested logs and counts what a replacement did to contested keys.
func (h *Hub) reportContested(r replaced) {
	for _, c := range r.conflicts {
		h.m.keyConflicts.Inc()
		h.log.Warn("two load balancers claim one VIP, protocol and port; the senior keeps it, the other's service is not programmed",
			"key", c.key, "holder", c.holder, "refused", c.claimant)
	}
	for _, m := range r.moves {
		h.m.keyMoves.Inc()
		h.log.Warn("a contested VIP, protocol and port changed hands", "key", m.key, "from", m.from, "to", m.to)
	}
}
