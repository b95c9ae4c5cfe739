package nftables

import (
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// What operators read: `flowlb agent dump` and `flowlb agent trace` print
// these, and the scenario tests compare them.

// WriteDump writes programmed services as `agent dump` shows them: one
// line per service with its picking and options, then its slot table.
func WriteDump(w io.Writer, services []ServiceDump) {
	fmt.Fprintf(w, "%d services\n", len(services))
	for _, s := range services {
		alg := string(s.Algorithm)
		if s.Refused {
			alg = "REFUSED (no usable backend)"
		}
		fmt.Fprintf(w, "%s %s %s", s.Key.Protocol, netip.AddrPortFrom(s.Key.VIP, s.Key.Port), alg)
		if extra := dumpOptions(s); len(extra) > 0 {
			fmt.Fprintf(w, " [%s]", strings.Join(extra, "; "))
		}
		fmt.Fprintln(w)
		writeSlots(w, "  ", s.Slots)
		writeSlots(w, "  local ", s.Local)
	}
}

// dumpOptions lists what a service does besides picking a backend.
func dumpOptions(s ServiceDump) []string {
	var extra []string
	if s.OwnVIP {
		extra = append(extra, "own VIP: other ports closed")
	}
	if s.Persistence > 0 {
		extra = append(extra, "persistence "+s.Persistence.String())
	}
	if s.Limit > 0 {
		extra = append(extra, fmt.Sprintf("limit %d/node", s.Limit))
	}
	if len(s.AllowedCIDRs) > 0 {
		var cidrs []string
		for _, p := range s.AllowedCIDRs {
			cidrs = append(cidrs, p.String())
		}
		extra = append(extra, "allowed "+strings.Join(cidrs, ","))
	}
	if s.AllowNone {
		extra = append(extra, "allowed none: every source dropped")
	}
	if s.Zonal {
		extra = append(extra, "prefer-close: this node's or zone's backends")
	}
	if s.NoLocal {
		extra = append(extra, "local-only: no local backend, outside traffic dropped")
	}
	if len(s.KeepClient) > 0 {
		extra = append(extra, "client address kept to "+strings.Join(s.KeepClient, ","))
	}
	return extra
}

func writeSlots(w io.Writer, prefix string, slots map[string]int) {
	for _, b := range slices.Sorted(maps.Keys(slots)) {
		fmt.Fprintf(w, "%s-> %-22s %2d/%d slots\n", prefix, b, slots[b], Slots)
	}
}

// Write writes a verdict as `agent trace` shows it.
func (v Verdict) Write(w io.Writer) {
	fmt.Fprintf(w, "%s: %s\n", v.Action, v.Reason)
	if v.Backend.IsValid() {
		fmt.Fprintf(w, "backend %s\n", v.Backend)
	}
	for _, b := range slices.SortedFunc(maps.Keys(v.Candidates), func(a, b netip.AddrPort) int { return a.Compare(b) }) {
		fmt.Fprintf(w, "candidate %-22s %.1f%%\n", b, 100*v.Candidates[b])
	}
	if v.Masquerade {
		fmt.Fprintln(w, "source masqueraded to the node")
	}
	if v.Persistence > 0 {
		fmt.Fprintf(w, "SOURCE_IP persistence %s: a backend this client used in that time wins\n", v.Persistence)
	}
	if v.Limit > 0 {
		fmt.Fprintf(w, "refused when this node has %d connections to the service\n", v.Limit)
	}
}
