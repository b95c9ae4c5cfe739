package announce

import (
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/flowlb/flowlb/internal/node/bgp"
)

// Modes of Status.
const (
	ModeNone  = "none"
	ModeTable = "table"
	ModeBGP   = "bgp"
)

// Status is what the node announces now: the "announcements" part of
// the agent's /status, which `flowlb agent dump` prints. The JSON names
// are documented in docs/operations.md; keep them.
type Status struct {
	// Mode is ModeNone (no --announce-cidrs), ModeTable or ModeBGP.
	Mode string `json:"mode"`
	// Table is the routing table of ModeTable.
	Table int `json:"table,omitempty"`
	// Prefixes are the prefixes announced, sorted by address then
	// length: the host routes of flowlb's protocol in the table, or
	// what the BGP speaker advertises (host routes and whole ranges, with
	// their communities and local preference).
	Prefixes []bgp.Advert `json:"prefixes"`
	// Error says why the table could not be read (Prefixes unknown).
	Error string `json:"error,omitempty"`
	// Sessions are the BGP speaker's sessions, in configuration order.
	Sessions []bgp.Session `json:"sessions,omitempty"`
}

// NoneStatus is the status of a node that announces nothing.
func NoneStatus() Status { return Status{Mode: ModeNone, Prefixes: []bgp.Advert{}} }

// TableStatus is the status of the routing-table mode: table holds the
// host routes of vips, or could not be read (err).
func TableStatus(table int, vips []netip.Addr, err error) Status {
	s := Status{Mode: ModeTable, Table: table, Prefixes: []bgp.Advert{}}
	if err != nil {
		s.Error = err.Error()
		return s
	}
	vips = slices.Clone(vips)
	slices.SortFunc(vips, netip.Addr.Compare)
	for _, v := range slices.Compact(vips) {
		s.Prefixes = append(s.Prefixes, bgp.Advert{Prefix: netip.PrefixFrom(v, v.BitLen()).String()})
	}
	return s
}

// BGPStatus is the status of the BGP mode: what the speaker advertises
// (bgp.Speaker.Advertised, sorted) and its sessions.
func BGPStatus(adverts []bgp.Advert, sessions []bgp.Session) Status {
	if adverts == nil {
		adverts = []bgp.Advert{}
	}
	return Status{Mode: ModeBGP, Prefixes: adverts, Sessions: sessions}
}

// Write renders the status for `flowlb agent dump`: a summary line, a
// line per BGP session, a line per prefix. A status without a mode (an
// agent older than the announcements part) writes nothing.
func (s Status) Write(w io.Writer) {
	switch s.Mode {
	case "":
		return
	case ModeNone:
		fmt.Fprintln(w, "announce: nothing (no --announce-cidrs)")
		return
	case ModeTable:
		if s.Error != "" {
			fmt.Fprintf(w, "announce: routing table %d: unreadable: %s\n", s.Table, s.Error)
			return
		}
		fmt.Fprintf(w, "announce: routing table %d holds %d %s, for a routing daemon to export\n", s.Table, len(s.Prefixes), plural(len(s.Prefixes), "VIP", "VIPs"))
	case ModeBGP:
		up := 0
		for _, ss := range s.Sessions {
			if ss.State == "established" {
				up++
			}
		}
		fmt.Fprintf(w, "announce: BGP, %d of %d %s established, %d %s advertised\n", up, len(s.Sessions), plural(len(s.Sessions), "session", "sessions"),
			len(s.Prefixes), plural(len(s.Prefixes), "prefix", "prefixes"))
		for _, ss := range s.Sessions {
			fmt.Fprintf(w, "announce: peer %s\n", sessionLine(ss))
		}
	default:
		fmt.Fprintf(w, "announce: mode %q\n", s.Mode)
	}
	for _, p := range s.Prefixes {
		line := p.Prefix
		if len(p.Communities) > 0 {
			line += " communities " + strings.Join(p.Communities, ",")
		}
		if p.LocalPref > 0 {
			line += fmt.Sprintf(" local-preference %d", p.LocalPref)
		}
		fmt.Fprintf(w, "announce:   %s\n", line)
	}
}

// sessionLine is a session in one line: address, AS, state and since
// when, BFD, prefixes per family, updates.
func sessionLine(s bgp.Session) string {
	b := &strings.Builder{}
	fmt.Fprintf(b, "%s AS %d %s", s.Peer, s.ASN, s.State)
	if s.Since != "" {
		fmt.Fprintf(b, " since %s", s.Since)
	}
	if s.BFD != "" {
		fmt.Fprintf(b, ", BFD %s", s.BFD)
	}
	for _, f := range s.Families {
		fmt.Fprintf(b, ", %s %d advertised %d received", f.Family, f.Advertised, f.Received)
	}
	fmt.Fprintf(b, "; updates %d sent %d received", s.Sent, s.Received)
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
