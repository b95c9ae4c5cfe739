package fanout

import (
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/server/compiler"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/shared/flowpb"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// ringSize bounds the log entries kept for agents' catch-up; an agent
// further behind gets a snapshot.
const ringSize = 100000

// served is what this replica serves its agents: the flow table at a log
// revision and the recent entries, for agents that catch up. Only the
// tail changes it. Its lock orders each change with the update broadcast
// for it (streams, taken inside) and with the agents that join, so that
// a joining agent's catch-up and the updates after it miss no revision.
type served struct {
	mu       sync.RWMutex
	epoch    string
	rev      int64 // the table holds every entry up to rev
	services *serviceTable
	ring     ring
	// inputs are what each load balancer's services were compiled from
	// (written.go).
	inputs map[string]*lbInput
	out    *streams
	// revNow is rev, for readers that need no consistent view.
	revNow atomic.Int64
}

func newServed(epoch string, out *streams) *served {
	return &served{epoch: epoch, services: newServiceTable(), inputs: map[string]*lbInput{}, out: out}
}

// load fills an empty table at revision head: the recent entries, those
// after start, and every load balancer's services, given senior first
// (so that a contested key goes to its holder at once and only the
// claims that lose are reported).
func (s *served) load(start, head int64, es []store.LogEntry, cs []change) []replaced {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring.start = start
	for _, e := range es {
		s.ring.add(e)
	}
	var reports []replaced
	for _, c := range cs {
		reports = append(reports, s.services.set(c.lbID, c.seniority, c.services))
		s.inputs[c.lbID] = c.input
	}
	s.rev = head
	s.revNow.Store(head)
	return reports
}

// change is one load balancer's part of a step of the tail: what it
// compiles to now, and from what, or gone.
type change struct {
	lbID      string
	gone      bool
	seniority compiler.Seniority
	services  []flows.Service
	input     *lbInput
}

// applied is what a step did to the table.
type applied struct {
	// changed are the load balancers whose services the update replaced:
	// those of the step, then those whose contested keys moved.
	changed []string
	// reports are what each replacement did to contested keys.
	reports []replaced
	// services are the changed load balancers' services as they end up
	// (the table's: read only).
	services map[string][]flows.Service
}

// apply takes a step of the tail, the entries es and the load balancers'
// changes, into the table at es' last revision, and broadcasts the
// update: every load balancer whose services changed, also by a key
// taken from it or handed to it, is replaced as it ends up. false: the
// table is already at that revision.
func (s *served) apply(es []store.LogEntry, cs []change) (applied, bool) {
	last := es[len(es)-1]
	s.mu.Lock()
	defer s.mu.Unlock()
	if last.Revision <= s.rev {
		return applied{}, false // another step got there first
	}
	var a applied
	for _, c := range cs {
		a.changed = append(a.changed, c.lbID)
	}
	for _, c := range cs {
		var r replaced
		if c.gone {
			r = s.services.drop(c.lbID)
			delete(s.inputs, c.lbID)
		} else {
			r = s.services.set(c.lbID, c.seniority, c.services)
			s.inputs[c.lbID] = c.input
		}
		a.reports = append(a.reports, r)
		for _, other := range r.others {
			if !slices.Contains(a.changed, other) {
				a.changed = append(a.changed, other)
			}
		}
	}
	u := &agentv1.Update{Revision: last.Revision, Epoch: s.epoch}
	a.services = make(map[string][]flows.Service, len(a.changed))
	for _, id := range a.changed {
		u.Loadbalancers = append(u.Loadbalancers, flowpb.LoadBalancerServicesToProto(id, s.services.byLB[id]))
		a.services[id] = s.services.byLB[id]
	}
	for _, e := range es {
		s.ring.add(e)
	}
	for _, id := range a.changed[len(cs):] {
		// So that an agent catching up gets their replacement too.
		s.ring.add(store.LogEntry{Revision: last.Revision, LoadBalancerID: id})
	}
	s.rev = last.Revision
	s.revNow.Store(s.rev)
	s.out.broadcast(u)
	return a, true
}

// caughtUp is what an agent that joined was sent to catch up.
type caughtUp int

const (
	// upToDate: nothing, it held the table's revision or more.
	upToDate caughtUp = iota
	// entries: the services of the load balancers changed since its
	// revision.
	entries
	// snapshot: the whole table (another database's revision, or one
	// older than the recent entries kept).
	snapshot
)

// join registers an agent that programmed revision rev of epoch with
// what it needs to catch up, and returns the revision it then holds at
// least (0 for another epoch's), what it was sent, and how many load
// balancers that named (entries) or services it held (snapshot).
func (s *served) join(a *agent, epoch string, rev int64) (held int64, sent caughtUp, size int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	u := s.catchUp(epoch, rev)
	s.out.add(a, u, s.rev)
	switch {
	case u == nil:
		sent = upToDate
	case u.GetSnapshot():
		sent, size = snapshot, len(u.GetUpserts())
	default:
		sent, size = entries, len(u.GetLoadbalancers())
	}
	if epoch != s.epoch {
		return 0, sent, size
	}
	// What it programmed holds at least up to the revision it names, or
	// up to this replica's, if this one lags behind.
	return min(rev, s.rev), sent, size
}

// catchUp is what an agent that programmed revision rev of epoch needs:
// the services now of the load balancers changed since, or a snapshot
// when its revision is of another database or older than the recent
// entries kept. Called with s.mu held.
func (s *served) catchUp(epoch string, rev int64) *agentv1.Update {
	if epoch == s.epoch && rev >= s.rev {
		return nil // up to date, or ahead of this replica's tail
	}
	if epoch == s.epoch && rev >= s.ring.start {
		u := &agentv1.Update{Revision: s.rev, Epoch: s.epoch}
		for _, id := range s.ring.since(rev) {
			u.Loadbalancers = append(u.Loadbalancers, flowpb.LoadBalancerServicesToProto(id, s.services.byLB[id]))
		}
		return u
	}
	snap := &agentv1.Update{Revision: s.rev, Epoch: s.epoch, Snapshot: true}
	for _, sv := range s.services.byKey {
		snap.Upserts = append(snap.Upserts, flowpb.ServiceToProto(sv))
	}
	return snap
}

// revision is the log revision the table holds.
func (s *served) revision() int64 { return s.revNow.Load() }

// table is a copy of the flow table at its revision.
func (s *served) table() flows.Table {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return flows.Table{Revision: s.rev, Services: maps.Clone(s.services.byKey)}
}

// addressesOf lists the addresses load balancer lbID's flows are served
// on, sorted, each once; node ports (served on the node's addresses) are
// left out.
func (s *served) addressesOf(lbID string) []netip.Addr {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []netip.Addr
	for _, svc := range s.services.byLB[lbID] {
		if v := svc.Key.VIP; v.IsValid() && !v.IsUnspecified() {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// servicesByLB are every load balancer's services (the table's: read
// only).
func (s *served) servicesByLB() map[string][]flows.Service {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.services.byLB)
}

// revisionOf is the revision of a recent entry the table took.
func (s *served) revisionOf(entry int64) (int64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	rev, ok := s.ring.revOf[entry]
	return rev, ok
}

// inputsOf returns what the table has of the load balancers ids (absent:
// nothing). The tail, the only writer, reads them for its next step.
func (s *served) inputsOf(ids []string) map[string]*lbInput {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]*lbInput, len(ids))
	for _, id := range ids {
		if in := s.inputs[id]; in != nil {
			out[id] = in
		}
	}
	return out
}

// inputOf returns what a load balancer's services were compiled from, if
// the table has taken its change-log entry change.
func (s *served) inputOf(lbID string, change int64) (*lbInput, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	in := s.inputs[lbID]
	if _, taken := s.ring.revOf[change]; !taken || in == nil {
		return nil, false
	}
	return in, true
}

// waitingClaims counts the claims that do not hold their key.
func (s *served) waitingClaims() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.services.waitingClaims()
}

// changedSince lists the load balancers an agent catching up from rev
// is sent (tests).
func (s *served) changedSince(rev int64) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ring.since(rev)
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
