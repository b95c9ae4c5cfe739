package neutron

import (
	"math/rand/v2"
	"sync"
)

// Where this process starts looking for a free address in each subnet.
//
// A hint is only a starting point; the claims decide. It moves past each
// address handed out (next-fit), as soon as the search starts, so that
// concurrent allocations of one process try different addresses and a
// filling subnet is not rescanned from its start; it moves back to an
// address whose transaction rolled back. After a lost race it jumps to a
// random pool address, so that replicas allocating from one subnet spread
// out instead of meeting on the same addresses. A subnet this process has
// not allocated from starts at its first pool address, so one server hands
// addresses out in order.

type hint struct {
	mu   sync.Mutex
	next u128
	set  bool
	// converted: the subnet is known to be free of bitmap records
	// (ipam_legacy.go), so its first read can take the shared lock.
	converted bool
}

// hintTable maps subnet ids to their hints. processHints serves the
// package's functions and the zero Allocator; NewAllocator makes a table
// of its own, as a separate server process has.
type hintTable struct{ m sync.Map }

var processHints = &hintTable{}

func (t *hintTable) of(subnetID string) *hint {
	if h, ok := t.m.Load(subnetID); ok {
		return h.(*hint)
	}
	h, _ := t.m.LoadOrStore(subnetID, &hint{})
	return h.(*hint)
}

func (t *hintTable) forget(subnetID string) { t.m.Delete(subnetID) }

func (h *hint) isConverted() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.converted
}

func (h *hint) markConverted() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.converted = true
}

// take returns where an allocation starts and moves the hint past it.
func (h *hint) take(pools []span) u128 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.set || poolIndex(pools, h.next) < 0 {
		h.next, h.set = pools[0].first, true
	}
	start := h.next
	h.next = successor(pools, start)
	return start
}

// settle moves the hint past got, the address an allocation that started
// at start found, unless another allocation moved the hint meanwhile.
func (h *hint) settle(pools []span, start, got u128) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if got != start && h.next == successor(pools, start) {
		h.next = successor(pools, got)
	}
}

// rewind makes v, given out by a transaction that rolled back, the next
// address tried.
func (h *hint) rewind(v u128) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next, h.set = v, true
}

// seed starts a hint that is not yet set at v (a converted cursor).
func (h *hint) seed(v u128) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.set {
		h.next, h.set = v, true
	}
}

// scatter moves the hint to a random pool address: a random pool, then a
// random address in it.
func (h *hint) scatter(pools []span) {
	p := pools[rand.IntN(len(pools))]
	off := rand.Uint64N(size(p.first, p.last)) // size saturates: fine for a huge pool
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next, h.set = p.first.add(off), true
}

// poolIndex is the index of the pool holding v, or -1.
func poolIndex(pools []span, v u128) int {
	for i, p := range pools {
		if p.contains(v) {
			return i
		}
	}
	return -1
}

// successor is the pool address after v, wrapping from the last pool to
// the first; v must be in a pool.
func successor(pools []span, v u128) u128 {
	i := poolIndex(pools, v)
	if v == pools[i].last {
		return pools[(i+1)%len(pools)].first
	}
	return v.inc()
}

// cyclicFrom is the order a search from start visits the pools in: the
// rest of start's pool, the pools after it, those before it, and the part
// of start's pool before start.
func cyclicFrom(pools []span, start u128) []span {
	i := poolIndex(pools, start)
	out := []span{{start, pools[i].last}}
	for j := 1; j < len(pools); j++ {
		out = append(out, pools[(i+j)%len(pools)])
	}
	if start != pools[i].first {
		out = append(out, span{pools[i].first, start.dec()})
	}
	return out
}
