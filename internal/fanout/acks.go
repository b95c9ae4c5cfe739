package fanout

import (
	"context"
	"slices"
	"sync"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/store"
)

// agent is one agent connected to this replica.
type agent struct {
	node     string
	acked    int64
	send     chan *agentv1.Update
	gone     chan struct{}
	goneOnce sync.Once
}

// drop cuts off an agent that cannot keep up; it reconnects and catches up.
func (a *agent) drop() { a.goneOnce.Do(func() { close(a.gone) }) }

// acks is what this replica knows of the agents' acknowledged revisions:
// its own agents' as they come, the cluster's as the store last had them.
// Called with the hub's lock held.
type acks struct {
	local map[*agent]bool
	// cluster are the agents of every live replica, as the store holds
	// them; this replica's own rows there are older than local.
	cluster []store.AgentAck
	// dirty are this replica's agents whose acks the store has not yet,
	// gone those that left it since the last flush.
	dirty map[string]int64
	gone  map[string]bool
	flush chan struct{}
}

func newAcks() acks {
	return acks{local: map[*agent]bool{}, dirty: map[string]int64{}, gone: map[string]bool{}, flush: make(chan struct{}, 1)}
}

// note records an agent's ack for the next flush.
func (a *acks) note(node string, rev int64) {
	delete(a.gone, node)
	a.dirty[node] = rev
	a.signal()
}

// leave records that an agent left this replica.
func (a *acks) leave(node string) {
	delete(a.dirty, node)
	a.gone[node] = true
	a.signal()
}

func (a *acks) signal() {
	select {
	case a.flush <- struct{}{}:
	default:
	}
}

// revisions returns every live agent's acknowledged revision: this
// replica's from its connections, the others' from the store.
func (a *acks) revisions(replica string) map[string]int64 {
	out := map[string]int64{}
	for _, c := range a.cluster {
		if c.Replica != replica {
			out[c.Node] = c.Revision
		}
	}
	for l := range a.local {
		if rev, ok := out[l.node]; !ok || l.acked > rev {
			out[l.node] = l.acked
		}
	}
	return out
}

// nodes lists the nodes with a live agent anywhere, sorted.
func (a *acks) nodes(replica string) []string {
	var out []string
	for n := range a.revisions(replica) {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// flushAcks writes this replica's agents' acks to the store as they come,
// a batch at a time, and tells the other replicas.
func (h *Hub) flushAcks(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.acks.flush:
		}
		h.mu.Lock()
		var batch []store.AgentAck
		for n, rev := range h.acks.dirty {
			batch = append(batch, store.AgentAck{Node: n, Revision: rev})
		}
		var gone []string
		for n := range h.acks.gone {
			gone = append(gone, n)
		}
		h.acks.dirty, h.acks.gone = map[string]int64{}, map[string]bool{}
		h.mu.Unlock()
		if err := h.st.RecordAgents(ctx, h.o.Replica, batch, gone); err != nil {
			if ctx.Err() != nil {
				return
			}
			h.log.Warn("recording the agents' acks", "err", err)
			h.mu.Lock()
			for _, a := range batch {
				if _, newer := h.acks.dirty[a.Node]; !newer {
					h.acks.dirty[a.Node] = a.Revision
				}
			}
			for _, n := range gone {
				h.acks.gone[n] = true
			}
			h.acks.signal()
			h.mu.Unlock()
			time.Sleep(200 * time.Millisecond)
			continue
		}
		h.st.Notify(ctx, store.TopicAgents)
	}
}

// readAgents reads the cluster's agents from the store when a replica
// tells of news, when a change starts waiting, and every few polls
// besides.
func (h *Hub) readAgents(ctx context.Context) {
	news := h.st.Watch(store.TopicAgents)
	tick := time.NewTicker(2 * h.o.Poll)
	defer tick.Stop()
	for {
		h.mu.Lock()
		h.readsStarted++
		ticket := h.readsStarted
		h.mu.Unlock()
		all, err := h.st.Agents(ctx)
		if err != nil && ctx.Err() == nil {
			h.log.Warn("reading the cluster's agents", "err", err)
		}
		if err == nil {
			h.mu.Lock()
			h.readsDone = ticket
			before := h.acks.nodes(h.o.Replica)
			h.acks.cluster = all
			if !slices.Equal(before, h.acks.nodes(h.o.Replica)) {
				h.sendProbes(h.reassign())
			}
			h.settleReady()
			h.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-news:
		case <-h.readNow:
		case <-tick.C:
		}
	}
}
