package fanout

import (
	"context"
	"slices"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/compiler"
	"github.com/flowlb/flowlb/internal/flowpb"
	"github.com/flowlb/flowlb/internal/flows"
	"github.com/flowlb/flowlb/internal/lbaas"
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
	changed, probes := h.recompile(ids, trees)
	// Every load balancer whose services changed, also by a key taken
	// from it or handed to it, is replaced as it ends up.
	u := &agentv1.Update{Revision: last.Revision, Epoch: h.epoch}
	for _, id := range changed {
		u.Loadbalancers = append(u.Loadbalancers, flowpb.LoadBalancerServicesToProto(id, h.services.byLB[id]))
	}
	for _, e := range es {
		h.ring.add(e)
	}
	for _, id := range changed[len(ids):] {
		// So that an agent catching up gets their replacement too.
		h.ring.add(store.LogEntry{Revision: last.Revision, LoadBalancerID: id})
	}
	h.rev = last.Revision
	h.taken.add(last.Revision, time.Now())
	h.m.tailed(last)
	h.broadcast(u)
	h.sendProbes(probes)
	h.journal.applied(es, time.Now())
	h.resolve(es)
	h.settleReady()
	return nil
}

// recompile puts the trees of ids (nil: gone) into the table and their
// probes into the assignment. It returns ids, followed by the other load
// balancers whose services changed (contested keys taken from them or
// handed to them), and the nodes whose probes changed. Called with h.mu
// held.
func (h *Hub) recompile(ids []string, trees map[string]*lbaas.Tree) ([]string, map[string]bool) {
	probes := map[string]bool{}
	changed := slices.Clone(ids)
	for _, id := range ids {
		var r replaced
		var probed []flows.Probe
		if t := trees[id]; t != nil {
			r = h.services.set(id, compiler.SeniorityOf(t.LB), compiler.Compile(t))
			probed = compiler.Probes(t)
		} else {
			r = h.services.drop(id)
		}
		h.reportContested(r)
		for _, other := range r.others {
			if !slices.Contains(changed, other) {
				changed = append(changed, other)
			}
		}
		for n := range h.setLBProbes(id, probed) {
			probes[n] = true
		}
	}
	return changed, probes
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
			u.Loadbalancers = append(u.Loadbalancers, flowpb.LoadBalancerServicesToProto(id, h.services.byLB[id]))
		}
		return u
	}
	snap := &agentv1.Update{Revision: h.rev, Epoch: h.epoch, Snapshot: true}
	for _, s := range h.services.byKey {
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

// add appends an entry; one without an id (0: the log's ids start at 1)
// only names a load balancer whose services changed at that revision.
func (r *ring) add(e store.LogEntry) {
	if r.revOf == nil {
		r.revOf = map[int64]int64{}
	}
	r.entries = append(r.entries, e)
	if e.ID != 0 {
		r.revOf[e.ID] = e.Revision
	}
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
