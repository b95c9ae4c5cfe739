package fanout

import (
	"context"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/compiler"
	"github.com/flowlb/flowlb/internal/flowpb"
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
		es, err := h.st.Log(ctx, h.Revision(), tailBatch)
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
// of them has now. The trees are read after the entries, so the table
// holds at least what the entries committed.
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
	last := es[len(es)-1]
	h.mu.Lock()
	defer h.mu.Unlock()
	if last.Revision <= h.rev {
		return nil // another step got there first
	}
	u := &agentv1.Update{Revision: last.Revision, Epoch: h.epoch}
	probes := map[string]bool{}
	for _, id := range ids {
		var now []flows.Service
		var probed []flows.Probe
		if t := trees[id]; t != nil {
			now, probed = compiler.Compile(t), compiler.Probes(t)
		}
		c := diffLB(id, h.byLB[id], now, h.table)
		h.setLB(id, c)
		u.Loadbalancers = append(u.Loadbalancers, flowpb.LoadBalancerServicesToProto(id, c.kept))
		for n := range h.setLBProbes(id, probed) {
			probes[n] = true
		}
	}
	for _, e := range es {
		h.ring.add(e)
	}
	h.rev = last.Revision
	h.m.tailed(last)
	h.broadcast(u)
	h.sendProbes(probes)
	h.resolve(es)
	h.settleReady()
	return nil
}

// broadcast queues msg for every agent of this replica, cutting off those
// whose queue is full. Called with h.mu held.
func (h *Hub) broadcast(msg *agentv1.Update) {
	for a := range h.acks.local {
		select {
		case a.send <- msg:
		default:
			a.drop()
		}
	}
}

// catchUp is what an agent that programmed revision rev of epoch needs:
// the services now of the load balancers changed since, or a snapshot
// when its revision is of another database or older than the recent
// entries kept. Called with h.mu held.
func (h *Hub) catchUp(epoch string, rev int64) *agentv1.Update {
	if epoch == h.epoch && rev >= h.rev {
		return nil // up to date, or ahead of this replica's tail
	}
	if epoch == h.epoch && rev >= h.ring.start {
		u := &agentv1.Update{Revision: h.rev, Epoch: h.epoch}
		for _, id := range h.ring.since(rev) {
			u.Loadbalancers = append(u.Loadbalancers, flowpb.LoadBalancerServicesToProto(id, h.byLB[id]))
		}
		return u
	}
	snap := &agentv1.Update{Revision: h.rev, Epoch: h.epoch, Snapshot: true}
	for _, s := range h.table {
		snap.Upserts = append(snap.Upserts, flowpb.ServiceToProto(s))
	}
	return snap
}

// ring keeps the recent log entries: every entry after start.
type ring struct {
	start   int64
	entries []store.LogEntry
	// revOf maps the recent entries' ids to their revisions.
	revOf map[int64]int64
}

func (r *ring) add(e store.LogEntry) {
	if r.revOf == nil {
		r.revOf = map[int64]int64{}
	}
	r.entries = append(r.entries, e)
	r.revOf[e.ID] = e.Revision
	if len(r.entries) > ringSize {
		drop := len(r.entries) - ringSize
		for _, old := range r.entries[:drop] {
			delete(r.revOf, old.ID)
		}
		r.start = r.entries[drop-1].Revision
		r.entries = append([]store.LogEntry(nil), r.entries[drop:]...)
	}
}

// since lists, once each in order, the load balancers of the entries
// after rev.
func (r *ring) since(rev int64) []string {
	var out []string
	seen := map[string]bool{}
	for i := len(r.entries) - 1; i >= 0 && r.entries[i].Revision > rev; i-- {
		id := r.entries[i].LoadBalancerID
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
