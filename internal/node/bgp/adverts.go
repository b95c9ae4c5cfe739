package bgp

import (
	"fmt"
	"net/netip"
	"slices"
)

// Attrs are the attributes a prefix is advertised with.
type Attrs struct {
	Communities []uint32 // sorted
	LocalPref   uint32   // 0: none
}

func (a Attrs) equal(b Attrs) bool {
	return a.LocalPref == b.LocalPref && slices.Equal(a.Communities, b.Communities)
}

// maxAggregateBits bounds an aggregated range: every address of it must
// be a served VIP before it is advertised, so larger ones never are.
const maxAggregateBits = 16

// rangeSpec is a Range read.
type rangeSpec struct {
	prefix    netip.Prefix
	attrs     Attrs
	aggregate bool
}

// size is the number of addresses of an aggregated range.
func (r rangeSpec) size() int { return 1 << (r.prefix.Addr().BitLen() - r.prefix.Bits()) }

// rangeTable finds the most specific range of a VIP.
type rangeTable []rangeSpec

func compileRanges(rs []Range) (rangeTable, error) {
	var t rangeTable
	for _, r := range rs {
		p, err := r.prefix()
		if err != nil {
			return nil, err
		}
		if r.Aggregate && p.Addr().BitLen()-p.Bits() > maxAggregateBits {
			return nil, fmt.Errorf("range %s: aggregate holds at most %d addresses", p, 1<<maxAggregateBits)
		}
		s := rangeSpec{prefix: p, aggregate: r.Aggregate, attrs: Attrs{LocalPref: r.LocalPreference}}
		for _, c := range r.Communities {
			v, err := ParseCommunity(c)
			if err != nil {
				return nil, err
			}
			s.attrs.Communities = append(s.attrs.Communities, v)
		}
		slices.Sort(s.attrs.Communities)
		s.attrs.Communities = slices.Compact(s.attrs.Communities)
		t = append(t, s)
	}
	// Most specific first, so the first match is the one.
	slices.SortStableFunc(t, func(a, b rangeSpec) int { return b.prefix.Bits() - a.prefix.Bits() })
	return t, nil
}

// of returns the index of the most specific range holding v, or -1.
func (t rangeTable) of(v netip.Addr) int {
	for i, r := range t {
		if r.prefix.Contains(v) {
			return i
		}
	}
	return -1
}

func host(v netip.Addr) netip.Prefix { return netip.PrefixFrom(v, v.BitLen()) }

// Desired is what to advertise for the announced VIPs: a host route per
// VIP with the attributes of its range (none outside every range), and,
// for an aggregated range of which every address is announced, the range
// alone.
func Desired(vips map[netip.Addr]bool, t rangeTable) map[netip.Prefix]Attrs {
	out := map[netip.Prefix]Attrs{}
	count := make([]int, len(t))
	for v := range vips {
		if i := t.of(v); i >= 0 {
			count[i]++
		}
	}
	for v := range vips {
		i := t.of(v)
		switch {
		case i < 0:
			out[host(v)] = Attrs{}
		case t[i].aggregate && count[i] == t[i].size():
			out[t[i].prefix] = t[i].attrs
		default:
			out[host(v)] = t[i].attrs
		}
	}
	return out
}
