package fanout

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/flowlb/flowlb/internal/store"
)

// waiter is a change waiting until every live agent has programmed it.
type waiter struct {
	lb     string
	change int64 // its log entry
	rev    int64 // the entry's revision; 0 until known
	start  time.Time
	// read is the number of the agents' reads begun before the waiter
	// came: it settles only once a later one has finished, so that it
	// waits also for an agent that joined another replica just before
	// the change was committed.
	read int64
	done func(behind []string)
}

// Realize makes the flow provider wait for the agents: done is called once
// every live agent of the cluster, on any replica, has programmed the
// revision of the change's log entry (at once with no agent; after the
// ack timeout, with the laggards counted and logged, otherwise).
func (h *Hub) Realize(lbID string, change int64, done func(error)) {
	h.wait(lbID, change, func(behind []string) {
		if len(behind) > 0 {
			h.m.timeouts.Inc()
			h.log.Warn("agents did not acknowledge in time", "loadbalancer", lbID, "change", change, "nodes", behind)
		}
		done(nil)
	})
}

// wait registers a waiter for change (0: whatever the table holds now).
func (h *Hub) wait(lbID string, change int64, done func(behind []string)) {
	w := &waiter{lb: lbID, change: change, start: time.Now(), done: done}
	h.mu.Lock()
	defer h.mu.Unlock()
	w.read = h.readsStarted
	select {
	case h.readNow <- struct{}{}:
	default:
	}
	switch rev, ok := h.ring.revOf[change]; {
	case change == 0:
		w.rev = max(h.rev, 1)
	case ok:
		w.rev = rev
	default:
		go h.lookUp(w)
	}
	h.waiting[w] = true
	h.settleReady()
}

// lookUp asks the store once for the revision of an entry that is not
// among the recent ones the tail passed: one the tail has not reached
// yet (it is resolved as the tail passes it, so a 0 answer changes
// nothing) or an old one, resumed from a replica that died.
func (h *Hub) lookUp(w *waiter) {
	ctx, cancel := context.WithTimeout(context.Background(), h.o.AckTimeout)
	defer cancel()
	rev, err := h.st.EntryRevision(ctx, w.change)
	switch {
	case errors.Is(err, store.ErrNotFound):
		rev = 1 // compacted away: every agent is past it
	case err != nil:
		h.log.Warn("revision of a change", "change", w.change, "err", err)
	}
	if rev == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.rev == 0 {
		w.rev = rev
	}
	h.settleReady()
}

// resolve gives the waiters of a batch's entries their revisions. Called
// with h.mu held.
func (h *Hub) resolve(es []store.LogEntry) {
	for w := range h.waiting {
		if w.rev != 0 {
			continue
		}
		for _, e := range es {
			if e.ID == w.change {
				w.rev = e.Revision
			}
		}
	}
}

// settleReady calls the waiters whose revision every live agent has
// programmed (and this replica's table holds), or whose time is up.
// Called with h.mu held; the callbacks run outside it.
func (h *Hub) settleReady() {
	if len(h.waiting) == 0 {
		return
	}
	low, anyAgent := h.acks.lowest()
	var revs map[string]int64
	now := time.Now()
	for w := range h.waiting {
		expired := now.Sub(w.start) >= h.o.AckTimeout
		ready := w.rev != 0 && h.rev >= w.rev && h.readsDone > w.read && (!anyAgent || low >= w.rev)
		if !ready && !expired {
			continue
		}
		delete(h.waiting, w)
		var behind []string
		if !ready {
			if revs == nil {
				revs = h.acks.revisions()
			}
			for n, r := range revs {
				if w.rev == 0 || r < w.rev {
					behind = append(behind, n)
				}
			}
			slices.Sort(behind)
		}
		h.m.realized.Observe(now.Sub(w.start).Seconds())
		h.journal.settled(w.change, now)
		go w.done(behind)
	}
}

// expire ends the waits whose time is up.
func (h *Hub) expire(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			h.mu.Lock()
			h.settleReady()
			h.mu.Unlock()
		}
	}
}
