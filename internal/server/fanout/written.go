package fanout

import (
	"sync"
	"time"

	"github.com/flowlb/flowlb/internal/server/compiler"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

// A change is compiled once. The replica whose API wrote it hands the
// tail the tree its transaction wrote (Written), and the tail compiles
// that tree instead of reading it back; another replica, or this one when
// the tree is not known to be the load balancer's whole state, reads it
// from the store. The tail keeps, per load balancer, the digest of what
// it compiled, and a completion compares its settled tree's digest with
// it (FlowsUnchanged) instead of compiling the tree before and after.
//
// A written tree is exact for the LBaaS objects: every write of them
// locks the load balancer first, so a change's tree holds every earlier
// one. Not for the Neutron part (floating IPs, the VIP port's security
// rules), which Neutron writes without that lock and which a write's
// tree does not load whole: the tail takes that part from its last read
// of the store, which every such Neutron write causes (its own log
// entry has no written tree); or, for a load balancer just created on
// ports allocated for it, as empty.

// maxWritten bounds the written trees waiting for the tail; past it the
// tail reads them from the store.
const maxWritten = 4096

// maxWrittenAge is how long a written tree may wait for the tail once
// maxWritten are waiting: the tail takes one within a step of its
// commit, so one older was handed over after the tail took its entry (a
// race Written cannot always see) and would otherwise be kept for ever.
const maxWrittenAge = time.Minute

// written holds the trees handed over, by change-log entry, until the
// tail takes them.
type written struct {
	mu    sync.Mutex
	trees map[int64]lbaas.Written
}

func newWritten() *written { return &written{trees: map[int64]lbaas.Written{}} }

// put keeps w; false when full.
func (k *written) put(w lbaas.Written) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.trees) >= maxWritten {
		cutoff := time.Now().Add(-maxWrittenAge)
		for e, old := range k.trees {
			if old.Began.Before(cutoff) {
				delete(k.trees, e)
			}
		}
		if len(k.trees) >= maxWritten {
			return false
		}
	}
	k.trees[w.Entry] = w
	return true
}

// len is the number of trees kept.
func (k *written) len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.trees)
}

// take returns and forgets the trees of the entries es.
func (k *written) take(es []store.LogEntry) map[int64]lbaas.Written {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[int64]lbaas.Written{}
	for _, e := range es {
		if w, ok := k.trees[e.ID]; ok {
			out[e.ID] = w
			delete(k.trees, e.ID)
		}
	}
	return out
}

// Written hands the hub a change's tree as its transaction wrote it
// (lbaas.Config.Written), for the tail to compile instead of reading it
// back. A tree that comes after the tail took its entry is dropped.
func (h *Hub) Written(w lbaas.Written) {
	if _, taken := h.served.revisionOf(w.Entry); taken {
		return
	}
	if !h.written.put(w) {
		return
	}
	// The tail may have taken the entry meanwhile, and then forgets
	// what it did not find; or it takes it next.
	if _, taken := h.served.revisionOf(w.Entry); taken {
		h.written.take([]store.LogEntry{{ID: w.Entry}})
	}
}

// lbInput is what the tail keeps of each load balancer beside its
// services: what its last compilation was of, and its digest.
type lbInput struct {
	// digest is that of the services and probes compiled last.
	digest compiler.Digest
	// floatingIPs and security are its Neutron part, as the last read of
	// the store had them (none for one created on fresh ports); readEnd
	// is when that read ended (zero: no read since it was created).
	floatingIPs []*lbaas.FloatingIP
	security    *lbaas.SecurityRules
	readEnd     time.Time
}

// withNeutron is t with in's Neutron part: a shallow copy, which compiles
// as the tree with that part would.
func withNeutron(t *lbaas.Tree, in *lbInput) *lbaas.Tree {
	c := *t
	c.FloatingIPs, c.Security = in.floatingIPs, in.security
	return &c
}

// source is where the tail takes a load balancer's tree for a step: the
// tree a write handed over, or a read of the store (w nil).
type source struct {
	w *lbaas.Written
	// neutron is the Neutron part to compile it with.
	neutron *lbInput
}

// sourceOf decides where a load balancer's tree for a step comes from:
// the last of its entries' written trees, if each entry has one, the
// Neutron part is known (the table has the load balancer, or the first
// of them created it on fresh ports) and the last one began after the
// last read of the store (which may have seen later changes than it:
// the written tree would take the table back). Otherwise nil: read the
// store. ids are the load balancer's entries in the step, in order; prev
// what the table has of it (nil: nothing).
func sourceOf(ids []int64, ws map[int64]lbaas.Written, prev *lbInput) *source {
	var last lbaas.Written
	for i, id := range ids {
		w, ok := ws[id]
		if !ok {
			return nil
		}
		if i == 0 && prev == nil && !w.FreshPorts {
			return nil
		}
		last = w
	}
	neutron := &lbInput{}
	if prev != nil {
		if !last.Began.After(prev.readEnd) {
			return nil
		}
		neutron = prev
	}
	return &source{w: &last, neutron: neutron}
}

// FlowsUnchanged says whether t, a load balancer's tree as the
// completion of change leaves it, compiles to what the table serves of
// it: the digest of its services and probes, with the Neutron part the
// table has of it, against the one kept from the table's last
// compilation (lbaas.Config.FlowsUnchanged). False when the table has
// not taken the change.
//
// The table may have compiled the load balancer from a later health
// verdict than the change, or not yet from one that came between; a
// completion moves only provisioning statuses and the operating statuses
// that follow from health, which a verdict changes in the member's
// probe too, so the digests differ whenever either changed what the
// agents get.
func (h *Hub) FlowsUnchanged(lbID string, change int64, t *lbaas.Tree) bool {
	in, ok := h.served.inputOf(lbID, change)
	if !ok {
		return false
	}
	return compiler.OfWith(withNeutron(t, in), h.o.Certificates).Digest() == in.digest
}
