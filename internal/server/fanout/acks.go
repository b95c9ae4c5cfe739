package fanout

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
)

// acks is what this replica knows of the agents' acknowledged revisions,
// its own agents' as they come and the cluster's as the store last had
// them, and the changes waiting for them (waiters). One lock: a waiter
// settles on a consistent view of the acks.
type acks struct {
	mu      sync.Mutex
	replica string
	timeout time.Duration

	local map[*agent]bool
	// perNode counts this replica's streams of each node (a reconnection
	// may come before the old stream is torn down).
	perNode map[string]int
	// rows are the agents' rows of every replica, live or not, as the
	// store holds them (folded from the changes read: readDone), and
	// live the live replicas; this replica's own rows there are older
	// than local. remote are the other live replicas' agents, by node.
	rows   map[string]store.AgentAck
	live   map[string]bool
	remote map[string]int64
	// noProbes are the nodes whose agents take no probes and answer for
	// no VIP: this replica's (localNoProbes, from their Hello) and the
	// other live replicas' (remoteNoProbes, from their rows).
	localNoProbes  map[string]bool
	remoteNoProbes map[string]bool
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

	// tableRev is the revision this replica's table holds: a change
	// settles once it is there too.
	tableRev int64
	// waiting are the changes waiting for the agents.
	waiting map[*waiter]bool
	// readsStarted counts the reads of the cluster's agents begun,
	// readsDone is the number of the last one finished: a waiter settles
	// only on a view of the agents read after it came.
	readsStarted, readsDone int64
	readNow                 chan struct{}
	// alone: no other replica's agents exist (Options.Alone), so a
	// waiter needs no read after it came.
	alone bool
	// settled is told of each waiter that settles (metrics, journal),
	// under the lock: it must not call back.
	settled func(w *waiter, now time.Time)
}

func newAcks(replica string, timeout time.Duration) *acks {
	return &acks{replica: replica, timeout: timeout,
		local: map[*agent]bool{}, perNode: map[string]int{}, rows: map[string]store.AgentAck{}, live: map[string]bool{}, remote: map[string]int64{},
		localNoProbes: map[string]bool{}, remoteNoProbes: map[string]bool{},
		dirty: map[string]int64{}, gone: map[string]bool{}, flush: make(chan struct{}, 1),
		waiting: map[*waiter]bool{}, readNow: make(chan struct{}, 1), settled: func(*waiter, time.Time) {}}
}

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

// join adds one of this replica's agents, at the revision it holds.
func (a *acks) join(l *agent, acked int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l.acked = acked
	a.local[l] = true
	a.perNode[l.node]++
	if l.noProbes {
		a.localNoProbes[l.node] = true
	} else {
		delete(a.localNoProbes, l.node)
	}
	a.lowOK = false
	a.note(l.node, l.acked)
}

// part removes one of this replica's agents; it reports whether the node
// has no other stream here.
func (a *acks) part(l *agent) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	defer a.settleReady()
	delete(a.local, l)
	a.lowOK = false
	if a.perNode[l.node]--; a.perNode[l.node] > 0 {
		return false
	}
	delete(a.perNode, l.node)
	delete(a.localNoProbes, l.node)
	a.leave(l.node)
	return true
}

// raise records that one of this replica's agents acknowledged rev, and
// returns the revision it held before and holds now.
func (a *acks) raise(l *agent, rev int64) (before, now int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	before = l.acked
	if rev <= l.acked {
		return before, before
	}
	held := max(l.acked, a.remote[l.node])
	l.acked = rev
	a.note(l.node, rev)
	switch {
	case !a.lowOK:
	case a.perNode[l.node] > 1:
		a.lowOK = false // the node's revision is the highest of its streams'
	case held == a.low && max(rev, a.remote[l.node]) > held:
		if a.atLow--; a.atLow == 0 {
			a.lowOK = false
		}
	}
	a.settleReady()
	return before, rev
}

// clusterChange is what a read of the agents changed in the other
// replicas' live agents.
type clusterChange struct {
	// nodes: their set changed (a node joined or left them), or that of
	// those among them that take probes (a node's no_probes changed).
	nodes bool
	// acked are the rows of the other live replicas' agents that are new
	// or moved, left the nodes no longer among them.
	acked []store.AgentAck
	left  []string
	// all, after a full read (or a change of the live replicas), are the
	// rows of every live replica's agents, this replica's too.
	all []store.AgentAck
}

// fold takes the agents' rows read from the store: every row (d.Full) or
// the rows changed since the last read. Called with a.mu held.
func (a *acks) fold(d store.AgentChanges) clusterChange {
	live := make(map[string]bool, len(d.Live))
	for _, r := range d.Live {
		live[r] = true
	}
	liveChanged := !maps.Equal(live, a.live)
	a.live = live
	if d.Full {
		a.rows = make(map[string]store.AgentAck, len(d.Acks))
		for _, c := range d.Acks {
			a.rows[c.Node] = c
		}
		return a.rebuild()
	}
	for _, g := range d.Gone {
		delete(a.rows, g.Node)
	}
	for _, c := range d.Acks {
		a.rows[c.Node] = c
	}
	if liveChanged {
		return a.rebuild()
	}
	var ch clusterChange
	for _, rs := range [][]store.AgentAck{d.Gone, d.Acks} {
		for _, c := range rs {
			a.refold(c.Node, &ch)
		}
	}
	return ch
}

// remoteOf is a node's revision among the other live replicas' agents.
// Called with a.mu held.
func (a *acks) remoteOf(node string) (int64, bool) {
	c, ok := a.rows[node]
	if !ok || c.Replica == a.replica || !a.live[c.Replica] {
		return 0, false
	}
	return c.Revision, true
}

// refold brings remote and remoteNoProbes up to date with node's row,
// and the lowest revision with them. Called with a.mu held.
func (a *acks) refold(node string, ch *clusterChange) {
	old, had := a.remote[node]
	rev, has := a.remoteOf(node)
	wasNP, isNP := a.remoteNoProbes[node], has && a.rows[node].NoProbes
	if wasNP != isNP {
		// The node starts or stops taking probes: for their assignment
		// it joins or leaves.
		if isNP {
			a.remoteNoProbes[node] = true
		} else {
			delete(a.remoteNoProbes, node)
		}
		ch.nodes = true
	}
	if had == has && old == rev {
		return
	}
	if has {
		a.remote[node] = rev
		ch.acked = append(ch.acked, a.rows[node])
	} else {
		delete(a.remote, node)
		ch.left = append(ch.left, node)
	}
	if had != has {
		ch.nodes = true
	}
	switch {
	case !a.lowOK:
	case a.perNode[node] > 0:
		a.lowOK = false // the node's revision is the highest of its streams' and its row's
	case had && old == a.low && a.atLow == 1 && !(has && rev <= old):
		a.lowOK = false // the last node at the lowest moves up or leaves
	default:
		if had && old == a.low {
			a.atLow--
		}
		if has {
			switch {
			case a.atLow == 0 || rev < a.low:
				a.low, a.atLow = rev, 1
			case rev == a.low:
				a.atLow++
			}
		}
	}
}

// rebuild recomputes remote and remoteNoProbes from every row. Called
// with a.mu held.
func (a *acks) rebuild() clusterChange {
	var ch clusterChange
	remote := make(map[string]int64, len(a.remote))
	noProbes := map[string]bool{}
	for n, c := range a.rows {
		if !a.live[c.Replica] {
			continue
		}
		ch.all = append(ch.all, c)
		if c.Replica == a.replica {
			continue
		}
		remote[n] = c.Revision
		if c.NoProbes {
			noProbes[n] = true
		}
		if old, ok := a.remote[n]; !ok || old != c.Revision {
			ch.acked = append(ch.acked, c)
		}
		if _, ok := a.remote[n]; !ok {
			ch.nodes = true
		}
	}
	for n := range a.remote {
		if _, ok := remote[n]; !ok {
			ch.left = append(ch.left, n)
			ch.nodes = true
		}
	}
	if !maps.Equal(noProbes, a.remoteNoProbes) {
		ch.nodes = true
	}
	if ch.all == nil {
		ch.all = []store.AgentAck{}
	}
	a.remote, a.remoteNoProbes, a.lowOK = remote, noProbes, false
	return ch
}

// note records an agent's ack for the next flush. Called with a.mu held.
func (a *acks) note(node string, rev int64) {
	delete(a.gone, node)
	a.dirty[node] = rev
	a.signal()
}

// leave records that an agent left this replica. Called with a.mu held.
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

// takeDirty returns the acks and departures the store has not yet and
// forgets them; requeue gives back those a failed write did not store.
func (a *acks) takeDirty() ([]store.AgentAck, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var batch []store.AgentAck
	for n, rev := range a.dirty {
		batch = append(batch, store.AgentAck{Node: n, Revision: rev, NoProbes: a.localNoProbes[n]})
	}
	var gone []string
	for n := range a.gone {
		gone = append(gone, n)
	}
	a.dirty, a.gone = map[string]int64{}, map[string]bool{}
	return batch, gone
}

func (a *acks) requeue(batch []store.AgentAck, gone []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range batch {
		if _, newer := a.dirty[c.Node]; !newer {
			a.dirty[c.Node] = c.Revision
		}
	}
	for _, n := range gone {
		a.gone[n] = true
	}
	a.signal()
}

// startRead numbers a read of the cluster's agents that begins.
func (a *acks) startRead() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.readsStarted++
	return a.readsStarted
}

// readDone takes the agents' rows read by read number ticket (every row,
// or those changed since the last read), and returns what changed in the
// other replicas' agents.
func (a *acks) readDone(ticket int64, d store.AgentChanges) clusterChange {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.readsDone = ticket
	ch := a.fold(d)
	a.settleReady()
	return ch
}

// revisions returns every live agent's acknowledged revision: this
// replica's from its connections, the others' from the store.
func (a *acks) revisions() map[string]int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.allRevisions()
}

func (a *acks) allRevisions() map[string]int64 {
	out := maps.Clone(a.remote)
	for l := range a.local {
		if rev, ok := out[l.node]; !ok || l.acked > rev {
			out[l.node] = l.acked
		}
	}
	return out
}

// localRevisions returns this replica's agents' acknowledged revisions
// (a node with two streams: the higher).
func (a *acks) localRevisions() map[string]int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]int64{}
	for l := range a.local {
		if rev, ok := out[l.node]; !ok || l.acked > rev {
			out[l.node] = l.acked
		}
	}
	return out
}

// streaming is the set of nodes streaming to this replica.
func (a *acks) streaming() map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]bool, len(a.perNode))
	for n := range a.perNode {
		out[n] = true
	}
	return out
}

// lowest returns the lowest revision a live agent acknowledged, false
// with no agent. Called with a.mu held.
func (a *acks) lowest() (int64, bool) {
	if !a.lowOK {
		a.low, a.atLow = 0, 0
		for _, r := range a.allRevisions() {
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

// probers lists the nodes with a live agent anywhere that take probes
// and L2 VIPs, sorted: all but those whose agents said they take none
// (an OVN data plane's). A node streaming to this replica is as its
// agent here says, whatever the store still has.
func (a *acks) probers() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.remote)+len(a.perNode))
	for n := range a.allRevisions() {
		if a.perNode[n] > 0 {
			if a.localNoProbes[n] {
				continue
			}
		} else if a.remoteNoProbes[n] {
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// add registers a waiter whose revision is rev (0: not known yet), and
// asks for a read of the cluster's agents.
func (a *acks) add(w *waiter) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w.read = a.readsStarted
	if !a.alone {
		select {
		case a.readNow <- struct{}{}:
		default:
		}
	}
	a.waiting[w] = true
	a.settleReady()
}

// known gives a waiter the revision the store says its entry has.
func (a *acks) known(w *waiter, rev int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w.rev == 0 {
		w.rev = rev
	}
	a.settleReady()
}

// tableAt records that the table holds revision rev now, having taken
// the entries es: their waiters learn their revisions.
func (a *acks) tableAt(rev int64, es []store.LogEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tableRev = rev
	for w := range a.waiting {
		if w.rev != 0 {
			continue
		}
		for _, e := range es {
			if e.ID == w.change {
				w.rev = e.Revision
			}
		}
	}
	a.settleReady()
}

// settle ends the waits that are ready or whose time is up.
func (a *acks) settle() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.settleReady()
}

// pending counts the changes waiting.
func (a *acks) pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.waiting)
}

// settleReady calls the waiters whose revision every live agent has
// programmed (and this replica's table holds), or whose time is up.
// Called with a.mu held; the callbacks run outside it.
func (a *acks) settleReady() {
	if len(a.waiting) == 0 {
		return
	}
	low, anyAgent := a.lowest()
	var revs map[string]int64
	now := time.Now()
	for w := range a.waiting {
		expired := now.Sub(w.start) >= a.timeout
		read := a.alone || a.readsDone > w.read
		ready := w.rev != 0 && a.tableRev >= w.rev && read && (!anyAgent || low >= w.rev)
		if !ready && !expired {
			continue
		}
		delete(a.waiting, w)
		var behind []string
		if !ready {
			if revs == nil {
				revs = a.allRevisions()
			}
			for n, r := range revs {
				if w.rev == 0 || r < w.rev {
					behind = append(behind, n)
				}
			}
			slices.Sort(behind)
		}
		a.settled(w, now)
		go w.done(behind)
	}
}
