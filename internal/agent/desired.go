package agent

import (
	"maps"
	"net/netip"
	"sync"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/flows"
)

// desired is what the node's kernel should hold: the table as received
// from the server, the same flattened for this node (flat.held), and the
// revision they come from. The stream writes it (updates, and the node's
// addresses); the reconciler reads it and makes the kernel match. No I/O
// happens here: an update is taken at once, whatever the kernel does.
type desired struct {
	mu       sync.Mutex
	epoch    string
	rev      int64
	snapshot bool      // a snapshot has been received
	table    *table    // as received
	flat     *flatView // flat.held: as the kernel should hold it
	// version moves with every change of the revision or of flat.held,
	// so that the reconciler can tell it has caught up.
	version uint64
	// dirty are the keys of flat.held changed since the reconciler last
	// took them; full says it must take everything (a snapshot came).
	dirty map[flows.Key]struct{}
	full  bool
	// changed wakes the reconciler (capacity 1).
	changed chan struct{}
}

func newDesired(node, zone string) *desired {
	return &desired{table: newTable(), flat: newFlatView(node, zone, nil), dirty: map[flows.Key]struct{}{}, changed: make(chan struct{}, 1)}
}

// receive takes one (merged) update: a snapshot replaces the table, a
// delta changes what it names.
func (d *desired) receive(u *agentv1.Update) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if u.GetSnapshot() {
		next := newTable()
		next.apply(plan(next, u))
		held := d.flat.all(next.services)
		d.table = next
		d.flat.reset(next, held)
		d.full, d.snapshot = true, true
	} else {
		c := plan(d.table, u)
		kc := d.flat.translate(d.table, c)
		d.flat.commit(d.table, c, kc)
		d.table.apply(c)
		d.mark(kc)
	}
	d.epoch, d.rev = u.GetEpoch(), u.GetRevision()
	d.version++
	d.wake()
}

// setAddresses flattens the table again for the node's new node-port
// addresses; it reports whether they changed.
func (d *desired) setAddresses(node, zone string, addrs []netip.Addr) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.flat.sameAddresses(addrs) {
		return false
	}
	v := newFlatView(node, zone, addrs)
	held := v.all(d.table.services)
	d.mark(diffAll(d.flat.held, held))
	v.reset(d.table, held)
	d.flat = v
	d.version++
	d.wake()
	return true
}

func (d *desired) mark(c change) {
	for _, s := range c.upserts {
		d.dirty[s.Key] = struct{}{}
	}
	for _, k := range c.deletes {
		d.dirty[k] = struct{}{}
	}
}

func (d *desired) wake() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// work is what the reconciler takes to write: everything (full), or the
// keys changed since it last took them, each with its service as it
// should be (nil: gone); and the revision and version that writing it
// reaches.
type work struct {
	full     bool
	services map[flows.Key]flows.Service // full
	next     map[flows.Key]*flows.Service
	epoch    string
	rev      int64
	version  uint64
	snapshot bool
}

// take hands the reconciler what changed; force asks for everything (a
// write failed: the kernel's state is uncertain).
func (d *desired) take(force bool) work {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := work{epoch: d.epoch, rev: d.rev, version: d.version, snapshot: d.snapshot}
	if force || d.full {
		w.full, w.services = true, maps.Clone(d.flat.held)
	} else {
		w.next = make(map[flows.Key]*flows.Service, len(d.dirty))
		for k := range d.dirty {
			if s, ok := d.flat.held[k]; ok {
				w.next[k] = &s
			} else {
				w.next[k] = nil
			}
		}
	}
	d.full, d.dirty = false, map[flows.Key]struct{}{}
	return w
}

// at returns the revision and version of what is desired now.
func (d *desired) at() (epoch string, rev int64, version uint64, snapshot bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.epoch, d.rev, d.version, d.snapshot
}

// services calls fn with the table as received, if version is still the
// desired one (a newer one will come with its own call); fn must not
// keep the map.
func (d *desired) services(version uint64, fn func(map[flows.Key]flows.Service)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.version == version {
		fn(d.table.services)
	}
}
