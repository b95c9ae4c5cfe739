package fanout

import (
	"context"
	"time"

	"github.com/flowlb/flowlb/internal/server/compiler"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/shared/flows"
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

// applyEntries compiles the load balancers a batch of entries touched
// and sends every agent, at the batch's last revision, the services each
// of them has now, then the probe lists that changed. Each tree is the
// one its last entry's write handed over (written.go) or, failing that,
// read from the store after the entries, so that the table holds at
// least what the entries committed.
func (h *Hub) applyEntries(ctx context.Context, es []store.LogEntry) error {
	var ids []string
	entries := map[string][]int64{}
	for _, e := range es {
		if _, seen := entries[e.LoadBalancerID]; !seen {
			ids = append(ids, e.LoadBalancerID)
		}
		entries[e.LoadBalancerID] = append(entries[e.LoadBalancerID], e.ID)
	}
	ws := h.written.take(es)
	// What the table does not have yet may be taken after this step
	// began, or never: forgotten too once the step is done.
	defer h.written.take(es)
	prev := h.served.inputsOf(ids)
	sources := map[string]*source{}
	var read []string
	for _, id := range ids {
		if src := sourceOf(entries[id], ws, prev[id]); src != nil {
			sources[id] = src
		} else {
			read = append(read, id)
		}
	}
	var trees map[string]*lbaas.Tree
	var readEnd time.Time
	if len(read) > 0 {
		var err error
		if trees, err = h.src.TreesByID(ctx, read); err != nil {
			return err
		}
		readEnd = time.Now()
	}
	h.m.trees.WithLabelValues("write").Add(float64(len(sources)))
	h.m.trees.WithLabelValues("store").Add(float64(len(read)))
	cs := make([]change, 0, len(ids))
	probed := make(map[string][]flows.Probe, len(ids))
	for _, id := range ids {
		var t *lbaas.Tree
		var in *lbInput
		if src := sources[id]; src != nil {
			t = withNeutron(src.w.Tree, src.neutron)
			in = &lbInput{floatingIPs: src.neutron.floatingIPs, security: src.neutron.security, readEnd: src.neutron.readEnd}
		} else if t = trees[id]; t != nil {
			in = &lbInput{floatingIPs: t.FloatingIPs, security: t.Security, readEnd: readEnd}
		}
		if t == nil {
			cs = append(cs, change{lbID: id, gone: true})
			probed[id] = nil
			continue
		}
		c, probes := compile(t, in, h.o.Certificates)
		cs = append(cs, c)
		probed[id] = probes
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
	if h.l2 != nil {
		h.l2.set(a.services)
	}
	h.journal.applied(es, now)
	h.acks.tableAt(last.Revision, es)
	return nil
}

// compile is a load balancer's change of a step and its probes: t
// compiled (its TLS listeners' certificates from certs), with in, what
// it was compiled from, and its digest.
func compile(t *lbaas.Tree, in *lbInput, certs compiler.Certificates) (change, []flows.Probe) {
	out := compiler.OfWith(t, certs)
	in.digest = out.Digest()
	return change{lbID: t.LB.ID, seniority: compiler.SeniorityOf(t.LB), services: out.Services, input: in}, out.Probes
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
