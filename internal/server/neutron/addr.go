package neutron

import (
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
)

// u128 is an address as a 128-bit integer (IPv4 in the low 32 bits of the
// IPv4-mapped form), for range arithmetic on both families.
type u128 struct{ hi, lo uint64 }

func toU128(a netip.Addr) u128 {
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

func (v u128) addr(is4 bool) netip.Addr {
	if is4 {
		return netip.AddrFrom4([4]byte{byte(v.lo >> 24), byte(v.lo >> 16), byte(v.lo >> 8), byte(v.lo)})
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], v.hi)
	binary.BigEndian.PutUint64(b[8:], v.lo)
	return netip.AddrFrom16(b)
}

func (v u128) cmp(w u128) int {
	switch {
	case v.hi < w.hi || (v.hi == w.hi && v.lo < w.lo):
		return -1
	case v == w:
		return 0
	}
	return 1
}

func (v u128) inc() u128 {
	lo, c := bits.Add64(v.lo, 1, 0)
	return u128{v.hi + c, lo}
}

func (v u128) dec() u128 {
	lo, b := bits.Sub64(v.lo, 1, 0)
	return u128{v.hi - b, lo}
}

// size is last-first+1, saturated to MaxUint64 (an IPv6 pool is "enough").
func size(first, last u128) uint64 {
	lo, b := bits.Sub64(last.lo, first.lo, 0)
	hi := last.hi - first.hi - b
	if hi != 0 || lo == math.MaxUint64 {
		return math.MaxUint64
	}
	return lo + 1
}

// add returns v+n (within the 128 bits; callers stay inside a prefix).
func (v u128) add(n uint64) u128 {
	lo, c := bits.Add64(v.lo, n, 0)
	return u128{v.hi + c, lo}
}

type span struct{ first, last u128 }

func (s span) contains(v u128) bool { return s.first.cmp(v) <= 0 && v.cmp(s.last) <= 0 }

// prefixBounds returns the first and last address of a prefix.
func prefixBounds(p netip.Prefix) span {
	first := toU128(p.Masked().Addr())
	hostBits := p.Addr().BitLen() - p.Bits()
	last := first
	switch {
	case hostBits >= 128:
		last = u128{math.MaxUint64, math.MaxUint64}
	case hostBits >= 64:
		last.lo = math.MaxUint64
		last.hi |= (uint64(1) << (hostBits - 64)) - 1
	case hostBits > 0:
		last.lo |= (uint64(1) << hostBits) - 1
	}
	return span{first, last}
}

// reserved reports whether a is the network or broadcast address of an
// IPv4 prefix that has them (/30 and shorter).
func reserved(p netip.Prefix, a netip.Addr) bool {
	if !a.Is4() || p.Bits() > 30 {
		return false
	}
	b := prefixBounds(p)
	v := toU128(a)
	return v == b.first || v == b.last
}
