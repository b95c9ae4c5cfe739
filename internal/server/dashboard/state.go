package dashboard

import (
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/flowlb/flowlb/internal/server/fanout"
	"github.com/flowlb/flowlb/internal/server/lbaas"
)

// State is what GET /dashboard/api/state answers (docs/operations.md,
// Dashboard): the caller's load balancers with their status trees and
// statistics, and, for admins, the agents; the changes and health
// transitions of the load balancers the caller sees.
type State struct {
	GeneratedAt   time.Time      `json:"generated_at"`
	Replica       string         `json:"replica"`
	Revision      int64          `json:"revision"`
	StatsInterval float64        `json:"stats_interval_seconds"`
	LoadBalancers []LoadBalancer `json:"loadbalancers"`
	// Agents is null for callers who may not see the infrastructure.
	Agents            []Agent      `json:"agents"`
	HealthTransitions []Transition `json:"health_transitions"`
	Changes           []Change     `json:"changes"`
}

// Status is an object's two Octavia statuses.
type Status struct {
	ID                 string `json:"id"`
	Name               string `json:"name"`
	ProvisioningStatus string `json:"provisioning_status"`
	OperatingStatus    string `json:"operating_status"`
}

// Stats are Octavia's statistics of a load balancer or listener.
type Stats struct {
	BytesIn           int64 `json:"bytes_in"`
	BytesOut          int64 `json:"bytes_out"`
	ActiveConnections int64 `json:"active_connections"`
	TotalConnections  int64 `json:"total_connections"`
	RequestErrors     int64 `json:"request_errors"`
}

// MemberStats are what the agents counted for a member: connections sent
// to it, IP bytes from clients to it and from it to clients (Octavia's
// API has none).
type MemberStats struct {
	BytesIn          int64 `json:"bytes_in"`
	BytesOut         int64 `json:"bytes_out"`
	TotalConnections int64 `json:"total_connections"`
}

// Sample is one periodic read of an object's statistics.
type Sample struct {
	At time.Time `json:"at"`
	Stats
}

type LoadBalancer struct {
	Status
	ProjectID  string     `json:"project_id"`
	VIPAddress string     `json:"vip_address"`
	Stats      *Stats     `json:"stats"`
	History    []Sample   `json:"history"`
	Listeners  []Listener `json:"listeners"`
	// Pools are those no listener uses.
	Pools []Pool `json:"pools"`
}

type Listener struct {
	Status
	Protocol     string   `json:"protocol"`
	ProtocolPort int      `json:"protocol_port"`
	Stats        *Stats   `json:"stats"`
	History      []Sample `json:"history"`
	Pools        []Pool   `json:"pools"`
}

type Pool struct {
	Status
	Protocol      string   `json:"protocol"`
	LBAlgorithm   string   `json:"lb_algorithm"`
	HealthMonitor *Monitor `json:"healthmonitor"`
	Members       []Member `json:"members"`
}

type Monitor struct {
	Status
	Type       string `json:"type"`
	Delay      int    `json:"delay"`
	Timeout    int    `json:"timeout"`
	MaxRetries int    `json:"max_retries"`
}

type Member struct {
	Status
	Address      string `json:"address"`
	ProtocolPort int    `json:"protocol_port"`
	Weight       int    `json:"weight"`
	Backup       bool   `json:"backup"`
	AdminStateUp bool   `json:"admin_state_up"`
	// Prober is the node whose agent probes the member ("" unmonitored).
	Prober string `json:"prober"`
	// Stats are its counters as last sampled (nil before, or none).
	Stats *MemberStats `json:"stats"`
}

// Agent is one node's agent: the revision it programmed and how far
// behind this replica's table that is, and its kernel as it reported it.
type Agent struct {
	Node     string        `json:"node"`
	Revision int64         `json:"revision"`
	Lag      int64         `json:"lag"`
	Probes   []ProbedEntry `json:"probes"`
	// Kernel is null for a node connected to another replica (or whose
	// agent reports none).
	Kernel *Kernel `json:"kernel"`
	// Announce is what the node announces of the external VIPs; null for
	// a node that announces nothing or is another replica's.
	Announce *Announce `json:"announce"`
	// L2 are the external VIPs the servers give the node to answer ARP
	// and neighbour discovery for, sorted (IPv4 first): the servers'
	// choice, the same on every replica (the node's own view is its
	// agent's /status). Null without L2 ranges (--l2-cidrs).
	L2 []string `json:"l2"`
}

// Announce is what a node announces of the external VIPs: how ("table",
// "bgp"), how many VIPs, and its BGP sessions.
type Announce struct {
	Mode     string       `json:"mode"`
	VIPs     int          `json:"vips"`
	Sessions []BGPSession `json:"sessions"`
}

// BGPSession is one of a node's BGP sessions.
type BGPSession struct {
	Peer  string     `json:"peer"`
	ASN   uint32     `json:"asn"`
	State string     `json:"state"`
	Since *time.Time `json:"since"`
	BFD   string     `json:"bfd"`
}

// announceOf is a node's reported announcements as the page shows them.
func announceOf(a fanout.Announcements) *Announce {
	out := &Announce{Mode: a.Mode, VIPs: len(a.VIPs), Sessions: []BGPSession{}}
	for _, s := range a.Sessions {
		bs := BGPSession{Peer: s.Peer, ASN: s.ASN, State: s.State, BFD: s.BFD}
		if !s.Since.IsZero() {
			t := s.Since
			bs.Since = &t
		}
		out.Sessions = append(out.Sessions, bs)
	}
	return out
}

// Kernel is how a node's kernel stands against its agent's flows: the
// writes it refuses (the agent retries; the node's changes are not
// ACTIVE meanwhile), and the repairs of other processes' changes.
type Kernel struct {
	// Refusal is why the kernel refuses the agent's writes, "" while it
	// takes them.
	Refusal         string     `json:"refusal"`
	RefusingSince   *time.Time `json:"refusing_since"`
	RefusedAttempts uint64     `json:"refused_attempts"`
	Repairs         uint64     `json:"repairs"`
	LastRepair      *time.Time `json:"last_repair"`
	LastRepairWhat  string     `json:"last_repair_what"`
}

// kernelOf is a node's reported kernel status as the page shows it.
func kernelOf(ks fanout.KernelStatus) *Kernel {
	k := &Kernel{Refusal: ks.Refusal, RefusedAttempts: ks.RefusedAttempts, Repairs: ks.Repairs, LastRepairWhat: ks.LastRepairWhat}
	if !ks.RefusingSince.IsZero() {
		t := ks.RefusingSince
		k.RefusingSince = &t
	}
	if !ks.LastRepair.IsZero() {
		t := ks.LastRepair
		k.LastRepair = &t
	}
	return k
}

// ProbedEntry is a member an agent probes.
type ProbedEntry struct {
	MemberID string `json:"member_id"`
	// Label is address:port, when the caller sees the member.
	Label string `json:"label"`
}

// Transition is a member health change.
type Transition struct {
	At               time.Time `json:"at"`
	MemberID         string    `json:"member_id"`
	Member           string    `json:"member"` // name or address:port
	LoadBalancerID   string    `json:"loadbalancer_id"`
	LoadBalancerName string    `json:"loadbalancer_name"`
	Status           string    `json:"status"`
	Reason           string    `json:"reason"`
	Node             string    `json:"node"`
}

// Change is the path of one change: written by the API call's
// transaction, applied (committed and numbered) on this replica, each
// node's programming, ACTIVE.
type Change struct {
	LoadBalancerID   string     `json:"loadbalancer_id"`
	LoadBalancerName string     `json:"loadbalancer_name"`
	Entry            int64      `json:"entry"`
	Revision         int64      `json:"revision"`
	WrittenAt        time.Time  `json:"written_at"`
	AppliedAt        time.Time  `json:"applied_at"`
	ActiveAt         *time.Time `json:"active_at"`
	Nodes            []NodeTime `json:"nodes"`
	// Pending are the live nodes that have not programmed it yet.
	Pending []string `json:"pending"`
}

type NodeTime struct {
	Node string    `json:"node"`
	At   time.Time `json:"at"`
}

// hubView is what the hub said, read once per request.
type hubView struct {
	revision    int64
	agents      map[string]int64
	probed      map[string][]string
	changes     []fanout.ChangeTrace
	transitions []fanout.HealthTransition
	kernels     map[string]fanout.KernelStatus
	announce    map[string]fanout.Announcements
	// l2 is each L2 VIP's owner; nil without L2 ranges.
	l2 map[netip.Addr]string
}

// build is the state for a caller who sees trees; infra says whether the
// caller may see the agents. history holds the sampled statistics by
// object id, oldest first; memberStats the members' latest.
func build(now time.Time, replica string, interval time.Duration, trees []*lbaas.Tree, hub hubView, infra bool, history map[string][]Sample, memberStats map[string]MemberStats) State {
	s := State{GeneratedAt: now, Replica: replica, Revision: hub.revision, StatsInterval: interval.Seconds(),
		LoadBalancers: []LoadBalancer{}, HealthTransitions: []Transition{}, Changes: []Change{}}
	prober := map[string]string{}
	for n, ids := range hub.probed {
		for _, id := range ids {
			prober[id] = n
		}
	}
	lbName := map[string]string{}
	members := map[string]*lbaas.Member{}
	for _, t := range trees {
		lbName[t.LB.ID] = t.LB.Name
		for _, m := range t.Members {
			members[m.ID] = m
		}
		s.LoadBalancers = append(s.LoadBalancers, lbOf(t, prober, history, memberStats))
	}
	if infra {
		s.Agents = agentsOf(hub, members)
	}
	for _, h := range hub.transitions {
		name, ok := lbName[h.LoadBalancerID]
		if !ok {
			continue
		}
		tr := Transition{At: h.At, MemberID: h.MemberID, LoadBalancerID: h.LoadBalancerID, LoadBalancerName: name,
			Status: h.Status, Reason: h.Reason, Node: h.Node}
		if m := members[h.MemberID]; m != nil {
			tr.Member = memberLabel(m)
		}
		s.HealthTransitions = append(s.HealthTransitions, tr)
	}
	// Newest first, as the changes.
	slices.Reverse(s.HealthTransitions)
	for _, c := range hub.changes {
		name, ok := lbName[c.LoadBalancerID]
		if !ok && !infra {
			continue // another project's, or deleted
		}
		ch := Change{LoadBalancerID: c.LoadBalancerID, LoadBalancerName: name, Entry: c.Entry, Revision: c.Revision,
			WrittenAt: c.Written, AppliedAt: c.Applied, Nodes: []NodeTime{}, Pending: []string{}}
		if !c.Settled.IsZero() {
			at := c.Settled
			ch.ActiveAt = &at
		}
		for n, at := range c.Programmed {
			ch.Nodes = append(ch.Nodes, NodeTime{Node: n, At: at})
		}
		sort.Slice(ch.Nodes, func(i, j int) bool { return ch.Nodes[i].Node < ch.Nodes[j].Node })
		if infra {
			for n := range hub.agents {
				if _, ok := c.Programmed[n]; !ok {
					ch.Pending = append(ch.Pending, n)
				}
			}
			sort.Strings(ch.Pending)
		} else {
			ch.Nodes = nil // node names are the infrastructure's
			ch.Pending = nil
		}
		s.Changes = append(s.Changes, ch)
	}
	return s
}

func agentsOf(hub hubView, members map[string]*lbaas.Member) []Agent {
	l2 := l2Of(hub.l2)
	out := []Agent{}
	for n, rev := range hub.agents {
		a := Agent{Node: n, Revision: rev, Lag: max(hub.revision-rev, 0), Probes: []ProbedEntry{}}
		if ks, ok := hub.kernels[n]; ok {
			a.Kernel = kernelOf(ks)
		}
		if an, ok := hub.announce[n]; ok {
			a.Announce = announceOf(an)
		}
		if hub.l2 != nil {
			a.L2 = l2[n]
			if a.L2 == nil {
				a.L2 = []string{}
			}
		}
		for _, id := range hub.probed[n] {
			p := ProbedEntry{MemberID: id}
			if m := members[id]; m != nil {
				p.Label = memberLabel(m)
			}
			a.Probes = append(a.Probes, p)
		}
		sort.Slice(a.Probes, func(i, j int) bool {
			return a.Probes[i].Label+a.Probes[i].MemberID < a.Probes[j].Label+a.Probes[j].MemberID
		})
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// l2Of is each node's L2 VIPs, sorted by address, from each VIP's owner.
func l2Of(owners map[netip.Addr]string) map[string][]string {
	vips := slices.SortedFunc(maps.Keys(owners), netip.Addr.Compare)
	out := map[string][]string{}
	for _, v := range vips {
		out[owners[v]] = append(out[owners[v]], v.String())
	}
	return out
}

func memberLabel(m *lbaas.Member) string {
	addr := m.Address + ":" + strconv.Itoa(m.ProtocolPort)
	if m.Name != "" {
		return m.Name + " " + addr
	}
	return addr
}

func statusOf(b lbaas.Base, name string) Status {
	return Status{ID: b.ID, Name: name, ProvisioningStatus: b.ProvisioningStatus, OperatingStatus: b.OperatingStatus}
}

// lbOf is one load balancer's status tree, as Octavia's
// /loadbalancers/{id}/status nests it, with statistics.
func lbOf(t *lbaas.Tree, prober map[string]string, history map[string][]Sample, memberStats map[string]MemberStats) LoadBalancer {
	lb := LoadBalancer{Status: statusOf(t.LB.Base, t.LB.Name), ProjectID: t.LB.ProjectID, VIPAddress: t.LB.VIPAddress,
		Listeners: []Listener{}, Pools: []Pool{}}
	lb.Stats, lb.History = latest(history[t.LB.ID])
	used := map[string]bool{}
	for _, l := range t.Listeners {
		ln := Listener{Status: statusOf(l.Base, l.Name), Protocol: l.Protocol, ProtocolPort: l.ProtocolPort, Pools: []Pool{}}
		ln.Stats, ln.History = latest(history[l.ID])
		for _, p := range t.Pools {
			if p.ListenerID == l.ID || (l.DefaultPoolID != nil && *l.DefaultPoolID == p.ID) {
				ln.Pools = append(ln.Pools, poolOf(t, p, prober, memberStats))
				used[p.ID] = true
			}
		}
		lb.Listeners = append(lb.Listeners, ln)
	}
	for _, p := range t.Pools {
		if !used[p.ID] {
			lb.Pools = append(lb.Pools, poolOf(t, p, prober, memberStats))
		}
	}
	return lb
}

func poolOf(t *lbaas.Tree, p *lbaas.Pool, prober map[string]string, memberStats map[string]MemberStats) Pool {
	out := Pool{Status: statusOf(p.Base, p.Name), Protocol: p.Protocol, LBAlgorithm: p.LBAlgorithm, Members: []Member{}}
	if hm := t.PoolMonitor(p.ID); hm != nil {
		out.HealthMonitor = &Monitor{Status: statusOf(hm.Base, hm.Name), Type: hm.Type, Delay: hm.Delay, Timeout: hm.Timeout, MaxRetries: hm.MaxRetries}
	}
	for _, m := range t.Members {
		if m.PoolID != p.ID {
			continue
		}
		mem := Member{Status: statusOf(m.Base, m.Name), Address: m.Address, ProtocolPort: m.ProtocolPort,
			Weight: m.Weight, Backup: m.Backup, AdminStateUp: m.AdminStateUp, Prober: prober[m.ID]}
		if st, ok := memberStats[m.ID]; ok {
			mem.Stats = &st
		}
		out.Members = append(out.Members, mem)
	}
	return out
}

// latest is the last sample's statistics (nil before the first) and the
// samples.
func latest(h []Sample) (*Stats, []Sample) {
	if len(h) == 0 {
		return nil, []Sample{}
	}
	s := h[len(h)-1].Stats
	return &s, h
}
