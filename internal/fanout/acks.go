package fanout

import (
	"context"
	"maps"
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
	// perNode counts this replica's streams of each node (a reconnection
	// may come before the old stream is torn down).
	perNode map[string]int
	// cluster are the agents of every live replica, as the store holds
	// them; this replica's own rows there are older than local. remote
	// are the other replicas' among them, by node.
	cluster []store.AgentAck
	remote  map[string]int64
	// low is the lowest revision any live agent acknowledged and atLow
	// the number of nodes there, kept as acks come, so that an ack costs
	// no walk over every agent; lowOK false: to be counted again.
	low   int64
	atLow int
	lowOK bool
	// dirty are this replica's agents whose acks the store has not yet,
	// gone those that left it since the last flush.
	dirty map[string]int64
	gone  map[string]bool
	flush chan struct{}
}

func newAcks() acks {
	return acks{local: map[*agent]bool{}, perNode: map[string]int{}, remote: map[string]int64{},
		dirty: map[string]int64{}, gone: map[string]bool{}, flush: make(chan struct{}, 1)}
}

// join adds one of this replica's agents.
func (a *acks) join(l *agent) {
	a.local[l] = true
	a.perNode[l.node]++
	a.lowOK = false
	a.note(l.node, l.acked)
}

// part removes one of this replica's agents; it reports whether the node
// has no other stream here.
func (a *acks) part(l *agent) bool {
	delete(a.local, l)
	a.lowOK = false
	if a.perNode[l.node]--; a.perNode[l.node] > 0 {
		return false
	}
	delete(a.perNode, l.node)
	a.leave(l.node)
	return true
}

// raise records that one of this replica's agents acknowledged rev.
func (a *acks) raise(l *agent, rev int64) {
	if rev <= l.acked {
		return
	}
	before := max(l.acked, a.remote[l.node])
	l.acked = rev
	a.note(l.node, rev)
	switch {
	case !a.lowOK:
	case a.perNode[l.node] > 1:
		a.lowOK = false // the node's revision is the highest of its streams'
	case before == a.low && max(rev, a.remote[l.node]) > before:
		if a.atLow--; a.atLow == 0 {
			a.lowOK = false
		}
	}
}

// setCluster takes the cluster's agents as the store has them; it reports
// whether the other replicas' nodes changed.
func (a *acks) setCluster(all []store.AgentAck, replica string) bool {
	remote := make(map[string]int64, len(a.remote))
	for _, c := range all {
		if c.Replica != replica {
			remote[c.Node] = c.Revision
		}
	}
	changed := len(remote) != len(a.remote)
	for n := range remote {
		if _, ok := a.remote[n]; !ok {
			changed = true
			break
		}
	}
	a.cluster, a.remote, a.lowOK = all, remote, false
	return changed
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
func (a *acks) revisions() map[string]int64 {
	out := maps.Clone(a.remote)
	for l := range a.local {
		if rev, ok := out[l.node]; !ok || l.acked > rev {
			out[l.node] = l.acked
		}
	}
	return out
}

// lowest returns the lowest revision a live agent acknowledged, false
// with no agent.
func (a *acks) lowest() (int64, bool) {
	if !a.lowOK {
		a.low, a.atLow = 0, 0
		for _, r := range a.revisions() {
			switch {
			case a.atLow == 0 || r < a.low:
				a.low, a.atLow = r, 1
			case r == a.low:
				a.atLow++
			}
		}
		a.lowOK = true
	}
	return a.low, a.atLow > 0
}

// nodes lists the nodes with a live agent anywhere, sorted.
func (a *acks) nodes() []string {
	return slices.Sorted(maps.Keys(a.revisions()))
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
			h.noteCluster(all, time.Now())
			if h.acks.setCluster(all, h.o.Replica) {
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
