package fanout

import (
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/server/store"
)

// ChangeTrace is the path of one log entry as this replica saw it: written
// by the API call's transaction, taken into this replica's table (it was
// committed and numbered), programmed by each node, and turned ACTIVE if
// this replica completed it.
type ChangeTrace struct {
	LoadBalancerID string
	Entry          int64 // the change log entry
	Revision       int64
	Written        time.Time // the entry's time, in the writer's transaction
	Applied        time.Time // this replica's table took it
	// Programmed is, per node, when this replica first saw an ack at or
	// past Revision (for a node of another replica: read from the store).
	Programmed map[string]time.Time
	// Settled is when the change's wait for the agents ended on this
	// replica (zero: another replica drove it, or it still waits).
	Settled time.Time
}

// HealthTransition is a member verdict that changed its health, as
// recorded by this replica (from one of its agents).
type HealthTransition struct {
	At             time.Time // the agent's verdict
	MemberID       string
	LoadBalancerID string
	Status         string
	Reason         string
	Node           string // the agent that probed
}

// KernelStatus is a node's kernel as its agent last reported it: whether
// it refuses the agent's writes, and the repairs of other processes'
// changes to it (agentv1.KernelStatus).
type KernelStatus struct {
	// Refusal is the last refusal's error ("" while the kernel takes the
	// agent's writes); since when, and how many attempts so far.
	Refusal         string
	RefusingSince   time.Time
	RefusedAttempts uint64
	// Repairs counts the objects repaired since the agent started; the
	// last repair, when and what.
	Repairs        uint64
	LastRepair     time.Time
	LastRepairWhat string
	// Reported is when this replica received it.
	Reported time.Time
}

// kernelStatusOf is the report as the hub keeps it.
func kernelStatusOf(m *agentv1.KernelStatus, now time.Time) KernelStatus {
	ks := KernelStatus{Refusal: m.GetRefusal(), RefusedAttempts: m.GetRefusedAttempts(), Repairs: m.GetRepairs(), LastRepairWhat: m.GetLastRepair(), Reported: now}
	if ms := m.GetRefusingSinceUnixMs(); ms != 0 {
		ks.RefusingSince = time.UnixMilli(ms)
	}
	if ms := m.GetLastRepairUnixMs(); ms != 0 {
		ks.LastRepair = time.UnixMilli(ms)
	}
	return ks
}

// Announcements are what a node announces of the external VIPs as its
// agent last reported it (agentv1.AnnounceStatus).
type Announcements struct {
	// Mode is "table" or "bgp".
	Mode string
	// Ranges are the prefixes within which the node announces the VIPs
	// it can serve; VIPs are sorted, each once.
	Ranges []netip.Prefix
	VIPs   []netip.Addr
	// Sessions are the BGP sessions (mode "bgp").
	Sessions []BGPSession
	// Reported is when this replica received it.
	Reported time.Time
}

// BGPSession is one of a node's BGP sessions.
type BGPSession struct {
	Peer  string
	ASN   uint32
	State string
	Since time.Time // zero: never established
	BFD   string
}

// Has reports whether the node announces v.
func (a Announcements) Has(v netip.Addr) bool {
	_, found := slices.BinarySearchFunc(a.VIPs, v, netip.Addr.Compare)
	return found
}

// Covers reports whether v is within the node's ranges.
func (a Announcements) Covers(v netip.Addr) bool {
	return slices.ContainsFunc(a.Ranges, func(p netip.Prefix) bool { return p.Contains(v) })
}

// Established counts the established sessions.
func (a Announcements) Established() int {
	n := 0
	for _, s := range a.Sessions {
		if s.State == "established" {
			n++
		}
	}
	return n
}

// announcementsOf is the report as the hub keeps it; addresses that do
// not parse are left out.
func announcementsOf(m *agentv1.AnnounceStatus, now time.Time) Announcements {
	a := Announcements{Mode: m.GetMode(), Reported: now}
	for _, b := range m.GetVips() {
		if v, ok := netip.AddrFromSlice(b); ok {
			a.VIPs = append(a.VIPs, v.Unmap())
		}
	}
	slices.SortFunc(a.VIPs, netip.Addr.Compare)
	a.VIPs = slices.Compact(a.VIPs)
	for _, r := range m.GetRanges() {
		if p, err := netip.ParsePrefix(r); err == nil {
			a.Ranges = append(a.Ranges, p.Masked())
		}
	}
	for _, s := range m.GetSessions() {
		bs := BGPSession{Peer: s.GetPeer(), ASN: s.GetAsn(), State: s.GetState(), BFD: s.GetBfd()}
		if ms := s.GetSinceUnixMs(); ms != 0 {
			bs.Since = time.UnixMilli(ms)
		}
		a.Sessions = append(a.Sessions, bs)
	}
	return a
}

// journal keeps what the dashboard shows of the hub's recent past, in
// bounded rings, and this replica's nodes' kernel status. Its lock is
// taken last: it calls nothing.
type journal struct {
	mu      sync.Mutex
	changes []ChangeTrace
	health  []HealthTransition
	kernel  map[string]KernelStatus
	// announce are the nodes' announcements, as their agents last said.
	announce map[string]Announcements
	// progress are, per node, the revisions it acknowledged and when,
	// oldest first; a change's per-node time is the first at or past it.
	progress map[string][]ackPoint
}

type ackPoint struct {
	rev int64
	at  time.Time
}

const (
	journalChanges = 32
	journalHealth  = 64
	journalAcks    = 128
)

// applied records the entries the table took at now.
func (j *journal) applied(es []store.LogEntry, now time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(es) > journalChanges {
		es = es[len(es)-journalChanges:]
	}
	for _, e := range es {
		j.changes = appendBounded(j.changes, ChangeTrace{LoadBalancerID: e.LoadBalancerID, Entry: e.ID,
			Revision: e.Revision, Written: e.At, Applied: now}, journalChanges)
	}
}

// acked records that node is at rev at now; only raises are kept.
func (j *journal) acked(node string, rev int64, now time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ack(node, rev, now)
}

// ack is acked with j.mu held.
func (j *journal) ack(node string, rev int64, now time.Time) {
	if j.progress == nil {
		j.progress = map[string][]ackPoint{}
	}
	ps := j.progress[node]
	if n := len(ps); n > 0 && ps[n-1].rev >= rev {
		return
	}
	j.progress[node] = appendBounded(ps, ackPoint{rev, now}, journalAcks)
}

// settled records that the wait for entry ended at now.
func (j *journal) settled(entry int64, now time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := range j.changes {
		if j.changes[i].Entry == entry && j.changes[i].Settled.IsZero() {
			j.changes[i].Settled = now
		}
	}
}

// kernelReport keeps a node's last kernel status.
func (j *journal) kernelReport(node string, ks KernelStatus) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.kernel == nil {
		j.kernel = map[string]KernelStatus{}
	}
	j.kernel[node] = ks
}

// forgetKernel forgets the kernel status and announcements of a node
// that left.
func (j *journal) forgetKernel(node string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.kernel, node)
	delete(j.announce, node)
}

// announceReport keeps a node's last announcements.
func (j *journal) announceReport(node string, a Announcements) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.announce == nil {
		j.announce = map[string]Announcements{}
	}
	j.announce[node] = a
}

// announcements are the nodes' last announcements.
func (j *journal) announcements() map[string]Announcements {
	j.mu.Lock()
	defer j.mu.Unlock()
	return maps.Clone(j.announce)
}

// kernelStatuses are the nodes' last kernel statuses.
func (j *journal) kernelStatuses() map[string]KernelStatus {
	j.mu.Lock()
	defer j.mu.Unlock()
	return maps.Clone(j.kernel)
}

func (j *journal) transition(t HealthTransition) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.health = appendBounded(j.health, t, journalHealth)
}

// traces returns the recorded changes, newest first, each with the time
// every node in nodes programmed it (absent: not yet).
func (j *journal) traces(nodes map[string]int64) []ChangeTrace {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]ChangeTrace, 0, len(j.changes))
	for i := len(j.changes) - 1; i >= 0; i-- {
		c := j.changes[i]
		c.Programmed = map[string]time.Time{}
		for n, rev := range nodes {
			if rev < c.Revision {
				continue
			}
			if at, ok := firstAt(j.progress[n], c.Revision); ok {
				c.Programmed[n] = at
			}
		}
		out = append(out, c)
	}
	return out
}

// firstAt is when the first point at or past rev was seen.
func firstAt(ps []ackPoint, rev int64) (time.Time, bool) {
	for _, p := range ps {
		if p.rev >= rev {
			return p.at, true
		}
	}
	return time.Time{}, false
}

// appendBounded appends v, dropping the oldest beyond limit.
func appendBounded[T any](s []T, v T, limit int) []T {
	if len(s) >= limit {
		s = append(s[:0], s[len(s)-limit+1:]...)
	}
	return append(s, v)
}

// healthTransitions are the recorded health transitions, oldest first.
func (j *journal) healthTransitions() []HealthTransition {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]HealthTransition(nil), j.health...)
}

// Changes returns the last log entries this replica applied, newest
// first, with the time each live agent programmed them.
func (h *Hub) Changes() []ChangeTrace { return h.journal.traces(h.acks.revisions()) }

// HealthTransitions returns the last member health changes recorded
// through this replica's agents, oldest first.
func (h *Hub) HealthTransitions() []HealthTransition { return h.journal.healthTransitions() }

// KernelStatuses returns, for each node connected to this replica, its
// kernel's status as its agent last reported it (agents that report none
// are left out).
func (h *Hub) KernelStatuses() map[string]KernelStatus { return h.journal.kernelStatuses() }

// Announcements are what each node connected to this replica announces
// of the external VIPs, as its agent last said (nodes that announce
// nothing are absent).
func (h *Hub) Announcements() map[string]Announcements { return h.journal.announcements() }

// Probed returns, per node, the members it probes (Probers inverted).
func (h *Hub) Probed() map[string][]string {
	out := map[string][]string{}
	for id, n := range h.Probers() {
		out[n] = append(out[n], id)
	}
	return out
}

// noteCluster records the other replicas' agents' acks, as the store
// has the cluster's agents (all), and forgets the nodes that are gone
// from the cluster, but for those streaming to this replica (replica).
func (j *journal) noteCluster(all []store.AgentAck, replica string, streaming map[string]bool, now time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	live := make(map[string]bool, len(all))
	for _, c := range all {
		live[c.Node] = true
		if c.Replica != replica {
			j.ack(c.Node, c.Revision, now)
		}
	}
	for n := range j.progress {
		if !live[n] && !streaming[n] {
			delete(j.progress, n)
		}
	}
}

// noteChanges records what a read of the agents changed (ch): after a
// full read, as noteCluster; else the other replicas' agents' new acks,
// and the nodes that left them forgotten but for those streaming to this
// replica.
func (j *journal) noteChanges(ch clusterChange, replica string, streaming map[string]bool, now time.Time) {
	if ch.all != nil {
		j.noteCluster(ch.all, replica, streaming, now)
		return
	}
	if len(ch.acked) == 0 && len(ch.left) == 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, c := range ch.acked {
		j.ack(c.Node, c.Revision, now)
	}
	for _, n := range ch.left {
		if !streaming[n] {
			delete(j.progress, n)
		}
	}
}
