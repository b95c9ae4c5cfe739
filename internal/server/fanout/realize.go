package fanout

import (
	"context"
	"errors"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
)

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
	// The table's revisions are read, and the waiter registered, before
	// the tail can take the change's entry without seeing the waiter:
	// the tail tells the acks of its entries after taking them.
	rev, ok := h.served.revisionOf(change)
	switch {
	case change == 0:
		w.rev = max(h.served.revision(), 1)
	case ok:
		w.rev = rev
	}
	h.acks.add(w) // w is the acks' from here on
	if change != 0 && !ok {
		go h.lookUp(w)
	}
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
	if rev != 0 {
		h.acks.known(w, rev)
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
			h.acks.settle()
		}
	}
}
