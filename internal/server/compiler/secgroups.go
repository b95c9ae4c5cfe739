package compiler

import (
	"net/netip"
	"slices"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// protoNumbers are the IP protocols of the flow data plane's services.
var protoNumbers = map[flows.Protocol]int{flows.TCP: 6, flows.UDP: 17, flows.SCTP: 132}

// SecuritySources are the sources a VIP port's security groups admit to
// one listener (protocol, port) of a VIP of one address family: the
// sources of the ingress rules of that family that match the protocol and
// port. None is an empty, non-nil list: nobody may connect.
func SecuritySources(sec *lbaas.SecurityRules, proto flows.Protocol, port int, ipv6 bool) []netip.Prefix {
	out := []netip.Prefix{}
	for _, r := range sec.Ingress {
		if r.IPv6 != ipv6 {
			continue
		}
		if r.Protocol != lbaas.AnyProtocol && r.Protocol != protoNumbers[proto] {
			continue
		}
		if (r.PortMin != 0 || r.PortMax != 0) && (port < r.PortMin || port > r.PortMax) {
			continue
		}
		for _, s := range r.Sources {
			if s.Addr().Is6() == ipv6 {
				out = append(out, s.Masked())
			}
		}
	}
	return normalize(out)
}

// Intersect is the sources in both a and b; an empty b (no allowed_cidrs)
// restricts nothing. Two prefixes overlap only when one holds the other,
// and then the smaller is what both admit.
func Intersect(a, b []netip.Prefix) []netip.Prefix {
	if len(b) == 0 {
		return a
	}
	out := []netip.Prefix{}
	for _, x := range a {
		for _, y := range b {
			if x.Addr().Is4() != y.Addr().Is4() || !x.Overlaps(y) {
				continue
			}
			if x.Bits() >= y.Bits() {
				out = append(out, x)
			} else {
				out = append(out, y)
			}
		}
	}
	return normalize(out)
}

// normalize sorts prefixes and drops those another one holds, so that
// equal sets compare equal.
func normalize(ps []netip.Prefix) []netip.Prefix {
	out := []netip.Prefix{}
	for i, p := range ps {
		covered := false
		for j, q := range ps {
			if j != i && q.Bits() <= p.Bits() && q.Contains(p.Addr()) && (q.Bits() < p.Bits() || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	slicesSortPrefixes(out)
	return out
}

func slicesSortPrefixes(ps []netip.Prefix) {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
}
