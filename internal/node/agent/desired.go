package agent

import (
	"net/netip"
	"sync"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// desired is what the node's kernel should hold: the table as received
// from the server, in flow values, and the revision it comes from; how
// this node serves it (flat) is computed when the reconciler takes it.
// The stream writes it (updates, and the node's addresses); the
// reconciler reads it and makes the kernel match. No I/O happens here:
// an update is taken at once, whatever the kernel does.
type desired struct {
	mu       sync.Mutex
	epoch    string
	rev      int64
	snapshot bool      // a snapshot has been received
	table    *table    // as received: the only copy of the services
	flat     *flatView // how this node serves them (keys only)
	// version moves with every change of the revision or of what the
	// kernel should hold, so that the reconciler can tell it has caught
	// up.
	version uint64
	// dirty are the keys whose service as this node serves it may have
	// changed since the reconciler last took them; full says it must
	// take everything (a snapshot came).
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
func (d *desired) receive(u flows.Update) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if u.Snapshot {
		next := newTable()
		next.apply(plan(next, u))
		d.table = next
		d.flat.reset(next)
		d.full, d.snapshot = true, true
		d.dirty = map[flows.Key]struct{}{}
	} else {
		c := plan(d.table, u)
		d.flat.touched(c, d.dirty)
		d.flat.commit(d.table, c)
		d.table.apply(c)
	}
	d.epoch, d.rev = u.Epoch, u.Revision
	d.version++
	d.wake()
}

// setAddresses indexes the table again for the node's new node-port
// addresses, and marks the services they flatten differently: those
// with a backend at an old or a new address. It reports whether they
// changed.
func (d *desired) setAddresses(node, zone string, addrs []netip.Addr) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.flat.sameAddresses(addrs) {
		return false
	}
	v := newFlatView(node, zone, addrs)
	for k, s := range d.table.services {
		if !k.NodePort() && (dependsOnSelf(s, d.flat.self) || dependsOnSelf(s, v.self)) {
			d.dirty[k] = struct{}{}
		}
	}
	v.reset(d.table)
	d.flat = v
	d.version++
	d.wake()
	return true
}

func (d *desired) wake() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// work is what the reconciler takes to write: everything (full), or the
// keys that may have changed since it last took them, each with its
// service as this node serves it (nil: gone); and the revision and
// version that writing it reaches.
type work struct {
	// full: services is the whole table (a snapshot replaced it, or a
	// data plane is to be written whole); replaced: a snapshot did.
	full, replaced bool
	services       map[flows.Key]flows.Service // full
	next           map[flows.Key]*flows.Service
	epoch          string
	rev            int64
	version        uint64
	snapshot       bool
}

// take hands the reconciler what changed; force asks for everything (a
// write failed: the kernel's state is uncertain). The services are
// flattened here, from the table as it is now: what the kernel should
// hold is not kept apart from what it holds.
func (d *desired) take(force bool) work {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := work{epoch: d.epoch, rev: d.rev, version: d.version, snapshot: d.snapshot}
	if force || d.full {
		w.full, w.replaced, w.services = true, d.full, d.flat.all(d.table.services)
	} else {
		w.next = d.flat.of(d.table.services, d.dirty)
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

// healthChecked calls fn with the services of the table as received
// that carry a health-check node port, if version is still the desired
// one (a newer one will come with its own call); fn must not keep the
// map.
func (d *desired) healthChecked(version uint64, fn func(map[flows.Key]flows.Service)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.version == version {
		fn(d.table.health)
	}
}
