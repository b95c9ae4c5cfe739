package l2

import (
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// State is what a Responder knows: its interface and the families it can
// serve, the addresses it speaks for and since when, those of the last
// list it could not take and why, when that list came, and what it sent.
type State struct {
	Interface string
	ARP, NDP  bool
	Owned     map[netip.Addr]time.Time
	Refused   map[netip.Addr]string
	ListAt    time.Time
	Counts    Counts
}

// Counts are the messages a Responder sent since it started, by family:
// announcements (gratuitous ARP, unsolicited neighbour advertisements,
// one per address taken) and answers (ARP replies, solicited
// advertisements).
type Counts struct {
	GratuitousARP uint64 `json:"gratuitous_arp"`
	UnsolicitedNA uint64 `json:"unsolicited_na"`
	ARPReplies    uint64 `json:"arp_replies"`
	NDPReplies    uint64 `json:"ndp_replies"`
}

// State is a copy of the responder's state.
func (r *Responder) State() State {
	r.mu.Lock()
	st := State{Interface: r.ifi.Name, ARP: r.arp != nil, NDP: r.ndp != nil, Owned: maps.Clone(r.owned),
		Refused: maps.Clone(r.refused), ListAt: r.listAt}
	r.mu.Unlock()
	st.Counts = Counts{GratuitousARP: r.announced4.Load(), UnsolicitedNA: r.announced6.Load(),
		ARPReplies: r.answered4.Load(), NDPReplies: r.answered6.Load()}
	return st
}

// Lease is the agent's side of the answers: a node without a session to
// a server keeps answering until its lease ends, then answers for none
// (agent.L2Lease). The zero Lease: a server's list holds (a session is
// up, or one gave a list since the last was lost).
type Lease struct {
	// Lost is when the session was lost, Ends when the lease ends (or
	// ended); Ended says it has and the addresses were let go.
	Lost, Ends time.Time
	Ended      bool
}

// Status is the "l2" part of the agent's /status, which `flowlb agent
// dump` prints. The JSON names are documented in docs/operations.md;
// keep them.
type Status struct {
	// Interface is --l2-interface ("": the node answers for nothing).
	Interface string `json:"interface"`
	// ARP and NDP say whether the interface serves IPv4 (it has an IPv4
	// address) and IPv6 (a link-local address).
	ARP bool `json:"arp,omitempty"`
	NDP bool `json:"ndp,omitempty"`
	// VIPs are the addresses answered now, sorted (IPv4 first).
	VIPs []VIP `json:"vips"`
	// Refused are the addresses of the last list that are not answered,
	// and why (the interface lacks the family's address, a send failed).
	Refused []Refusal `json:"refused,omitempty"`
	// ListAt is when the responder was last given a list: a server's, or
	// none at the lease's end (absent: never yet).
	ListAt string `json:"list_at,omitempty"`
	// Lease is absent while a server's list holds.
	Lease *LeaseStatus `json:"lease,omitempty"`
	// Sent counts the messages sent since the agent started.
	Sent Counts `json:"sent"`
}

// VIP is an address answered: by "arp" or "ndp", since when (the list
// that gave it; to the second, UTC).
type VIP struct {
	VIP   string `json:"vip"`
	By    string `json:"by"`
	Since string `json:"since"`
}

// Refusal is an address of the list that is not answered, and why.
type Refusal struct {
	VIP   string `json:"vip"`
	Error string `json:"error"`
}

// LeaseStatus is the lease of a node that lost its server: since when it
// has none, when it stops answering (or stopped: ended).
type LeaseStatus struct {
	ServerLost string `json:"server_lost"`
	Ends       string `json:"ends"`
	Ended      bool   `json:"ended"`
}

// NoneStatus is the status of a node without --l2-interface.
func NoneStatus() Status { return Status{VIPs: []VIP{}} }

// StatusOf is the status of a responder in state st under lease.
func StatusOf(st State, lease Lease) Status {
	s := Status{Interface: st.Interface, ARP: st.ARP, NDP: st.NDP, VIPs: []VIP{}, ListAt: stamp(st.ListAt), Sent: st.Counts}
	for _, v := range slices.SortedFunc(maps.Keys(st.Owned), netip.Addr.Compare) {
		s.VIPs = append(s.VIPs, VIP{VIP: v.String(), By: by(v), Since: stamp(st.Owned[v])})
	}
	for _, v := range slices.SortedFunc(maps.Keys(st.Refused), netip.Addr.Compare) {
		s.Refused = append(s.Refused, Refusal{VIP: v.String(), Error: st.Refused[v]})
	}
	if !lease.Lost.IsZero() {
		s.Lease = &LeaseStatus{ServerLost: stamp(lease.Lost), Ends: stamp(lease.Ends), Ended: lease.Ended}
	}
	return s
}

func by(v netip.Addr) string {
	if v.Is4() {
		return "arp"
	}
	return "ndp"
}

// stamp is t to the second in UTC, "" for the zero time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// Write renders the status for `flowlb agent dump`: a summary line, the
// lease if the node lost its server, a line per address answered and
// per address refused. A status without an interface writes one line.
func (s Status) Write(w io.Writer) {
	if s.Interface == "" {
		fmt.Fprintln(w, "l2: nothing (no --l2-interface)")
		return
	}
	var families []string
	if s.ARP {
		families = append(families, "ARP")
	}
	if s.NDP {
		families = append(families, "NDP")
	}
	line := fmt.Sprintf("l2: %s on %s, %d %s answered", strings.Join(families, " and "), s.Interface, len(s.VIPs), plural(len(s.VIPs), "VIP", "VIPs"))
	if s.ListAt != "" {
		line += ", list of " + s.ListAt
	} else {
		line += ", no list yet"
	}
	fmt.Fprintf(w, "%s; sent %d gratuitous ARP, %d unsolicited NA, %d ARP replies, %d NDP replies\n", line,
		s.Sent.GratuitousARP, s.Sent.UnsolicitedNA, s.Sent.ARPReplies, s.Sent.NDPReplies)
	if l := s.Lease; l != nil {
		if l.Ended {
			fmt.Fprintf(w, "l2: server session lost at %s and no list since: the lease ended at %s, the VIPs were let go\n", l.ServerLost, l.Ends)
		} else {
			fmt.Fprintf(w, "l2: server session lost at %s and no list since: the lease ends at %s, then the VIPs are let go\n", l.ServerLost, l.Ends)
		}
	}
	for _, v := range s.VIPs {
		fmt.Fprintf(w, "l2:   %s %s since %s\n", v.VIP, strings.ToUpper(v.By), v.Since)
	}
	for _, r := range s.Refused {
		fmt.Fprintf(w, "l2:   %s not answered: %s\n", r.VIP, r.Error)
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
