package nftables

import (
	"encoding/binary"
	"math/bits"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

var protoNum = map[flows.Protocol]byte{flows.TCP: unix.IPPROTO_TCP, flows.UDP: unix.IPPROTO_UDP, flows.SCTP: unix.IPPROTO_SCTP}

// key encodes daddr . l4proto . dport, each field padded to 4 bytes as
// nftables concatenations are. Every per-service element starts with it.
func key(k flows.Key) []byte {
	b := append(k.VIP.AsSlice(), make([]byte, 8)...)
	n := len(b) - 8
	b[n] = protoNum[k.Protocol]
	binary.BigEndian.PutUint16(b[n+4:n+6], k.Port)
	return b
}

// parseKey decodes the key at the start of an element of f's table.
func (f *family) parseKey(b []byte) (flows.Key, bool) {
	n := int(f.addrLen)
	if len(b) < n+8 {
		return flows.Key{}, false
	}
	a, _ := netip.AddrFromSlice(b[:n])
	for p, num := range protoNum {
		if num == b[n] {
			return flows.Key{VIP: a, Protocol: p, Port: binary.BigEndian.Uint16(b[n+4 : n+6])}, true
		}
	}
	return flows.Key{}, false
}

func slotKey(k flows.Key, slot int) []byte {
	// The slot register comes from numgen or jhash: host byte order.
	return append(key(k), binaryutil.NativeEndian.PutUint32(uint32(slot))...)
}

// slotOf is the slot of a slots map key.
func slotOf(b []byte) int { return int(binaryutil.NativeEndian.Uint32(b[len(b)-4:])) }

// backendVal encodes address . port (the slots map's and the affinity
// map's data, and the tail of a members element).
func backendVal(b backend) []byte {
	return append(binary.BigEndian.AppendUint16(b.addr.AsSlice(), b.port), 0, 0)
}

// parseBackend decodes address . port of f's table.
func (f *family) parseBackend(v []byte) backend {
	n := int(f.addrLen)
	a, _ := netip.AddrFromSlice(v[:n])
	return backend{addr: a, port: binary.BigEndian.Uint16(v[n : n+2])}
}

// intervals encodes the prefixes of f as interval set elements: start,
// and the first address after the end marked as an interval end.
func (f *family) intervals(nets []netip.Prefix) []nftables.SetElement {
	var out []nftables.SetElement
	for _, p := range nets {
		p = p.Masked()
		if familyOf(p.Addr()) != f {
			continue
		}
		out = append(out, nftables.SetElement{Key: p.Addr().AsSlice()})
		if next, ok := after(p); ok { // a prefix ending at the last address has no end marker
			out = append(out, nftables.SetElement{Key: next.AsSlice(), IntervalEnd: true})
		}
	}
	return out
}

// last is the last address of a prefix.
func last(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// after is the first address after a prefix, if there is one.
func after(p netip.Prefix) (netip.Addr, bool) {
	n := last(p).Next()
	return n, n.IsValid()
}

// aclRange encodes a service . source-range element's start and
// inclusive end, as concatenated ranges are.
func aclRange(k flows.Key, p netip.Prefix) (start, end []byte) {
	return append(key(k), p.Masked().Addr().AsSlice()...), append(key(k), last(p).AsSlice()...)
}

// aclPrefix decodes an acl_allow element of f's table back into its prefix.
func (f *family) aclPrefix(start, end []byte) netip.Prefix {
	n := int(f.keyLen())
	first, _ := netip.AddrFromSlice(start[n:])
	lastA, _ := netip.AddrFromSlice(end[n:])
	return netip.PrefixFrom(first, first.BitLen()-hostBits(first, lastA))
}

// hostBits is the number of trailing bits in which first and last, the
// ends of a prefix, differ.
func hostBits(first, last netip.Addr) int {
	a, b := first.AsSlice(), last.AsSlice()
	for i := range a {
		if x := a[i] ^ b[i]; x != 0 {
			return (len(a)-i-1)*8 + bits.Len8(x)
		}
	}
	return 0
}

func pair(a netip.Addr) []byte {
	return append(a.AsSlice(), a.AsSlice()...)
}

// maxBatch bounds the elements of one netlink message (attributes are
// limited to 64 KiB).
const maxBatch = 512

func batched(els []nftables.SetElement, fn func([]nftables.SetElement) error) error {
	for len(els) > 0 {
		n := min(len(els), maxBatch)
		if err := fn(els[:n]); err != nil {
			return err
		}
		els = els[n:]
	}
	return nil
}
