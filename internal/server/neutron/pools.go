package neutron

import (
	"net/netip"
	"sort"
)

// defaultPools is the whole prefix minus the network address, the IPv4
// broadcast address and the gateway, as Neutron computes it.
func defaultPools(p netip.Prefix, gw netip.Addr) []AllocationPool {
	b := prefixBounds(p)
	is4 := p.Addr().Is4()
	if is4 && p.Bits() <= 30 {
		b.first, b.last = b.first.inc(), b.last.dec()
	} else if !is4 && p.Bits() < 128 {
		b.first = b.first.inc() // the subnet-router anycast address
	}
	spans := []span{b}
	if gw.IsValid() {
		g := toU128(gw)
		if b.contains(g) {
			spans = spans[:0]
			if g != b.first {
				spans = append(spans, span{b.first, g.dec()})
			}
			if g != b.last {
				spans = append(spans, span{g.inc(), b.last})
			}
		}
	}
	out := make([]AllocationPool, 0, len(spans))
	for _, s := range spans {
		out = append(out, AllocationPool{Start: s.first.addr(is4).String(), End: s.last.addr(is4).String()})
	}
	return out
}

// parsePools validates pools against the subnet and returns them sorted.
func parsePools(p netip.Prefix, gw netip.Addr, pools []AllocationPool) ([]span, error) {
	bounds := prefixBounds(p)
	out := make([]span, 0, len(pools))
	for _, ap := range pools {
		s, err1 := netip.ParseAddr(ap.Start)
		e, err2 := netip.ParseAddr(ap.End)
		if err1 != nil || err2 != nil || s.Is4() != p.Addr().Is4() || e.Is4() != p.Addr().Is4() || e.Less(s) {
			return nil, refuse(KindInvalid, "InvalidAllocationPool", "The allocation pool %s-%s is not valid.", ap.Start, ap.End)
		}
		sp := span{toU128(s), toU128(e)}
		if !bounds.contains(sp.first) || !bounds.contains(sp.last) {
			return nil, refuse(KindInvalid, "OutOfBoundsAllocationPool", "The allocation pool %s-%s spans beyond the subnet cidr %s.", ap.Start, ap.End, p)
		}
		if gw.IsValid() && sp.contains(toU128(gw)) {
			return nil, refuse(KindConflict, "GatewayConflictWithAllocationPools", "Gateway ip %s conflicts with allocation pool %s-%s.", gw, ap.Start, ap.End)
		}
		out = append(out, sp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].first.cmp(out[j].first) < 0 })
	for i := 1; i < len(out); i++ {
		if out[i].first.cmp(out[i-1].last) <= 0 {
			return nil, refuse(KindConflict, "OverlappingAllocationPools", "Found overlapping allocation pools: %s-%s %s-%s for subnet %s.",
				out[i-1].first.addr(p.Addr().Is4()), out[i-1].last.addr(p.Addr().Is4()), out[i].first.addr(p.Addr().Is4()), out[i].last.addr(p.Addr().Is4()), p)
		}
	}
	return out, nil
}
