package nftables

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/flows"
)

var protoNum = map[flows.Protocol]byte{flows.TCP: unix.IPPROTO_TCP, flows.UDP: unix.IPPROTO_UDP, flows.SCTP: unix.IPPROTO_SCTP}

// key encodes daddr . l4proto . dport, each field padded to 4 bytes as
// nftables concatenations are. Every per-service element starts with it.
func key(k flows.Key) []byte {
	b := make([]byte, 12)
	a := k.VIP.As4()
	copy(b[0:4], a[:])
	b[4] = protoNum[k.Protocol]
	binary.BigEndian.PutUint16(b[8:10], k.Port)
	return b
}

func parseKey(b []byte) (flows.Key, bool) {
	if len(b) < 12 {
		return flows.Key{}, false
	}
	a, _ := netip.AddrFromSlice(b[0:4])
	for p, n := range protoNum {
		if n == b[4] {
			return flows.Key{VIP: a, Protocol: p, Port: binary.BigEndian.Uint16(b[8:10])}, true
		}
	}
	return flows.Key{}, false
}

func slotKey(k flows.Key, slot int) []byte {
	// The slot register comes from numgen or jhash: host byte order.
	return append(key(k), binaryutil.NativeEndian.PutUint32(uint32(slot))...)
}

func slotOf(b []byte) int { return int(binaryutil.NativeEndian.Uint32(b[12:16])) }

// backendVal encodes address . port (the slots map's and the affinity
// map's data, and the tail of a members element).
func backendVal(b backend) []byte {
	v := make([]byte, 8)
	a := b.addr.As4()
	copy(v[0:4], a[:])
	binary.BigEndian.PutUint16(v[4:6], b.port)
	return v
}

func parseBackend(v []byte) backend {
	a, _ := netip.AddrFromSlice(v[0:4])
	return backend{addr: a, port: binary.BigEndian.Uint16(v[4:6])}
}

// intervals encodes IPv4 prefixes as interval set elements: start, and
// the first address after the end marked as an interval end.
func intervals(nets []netip.Prefix) []nftables.SetElement {
	var out []nftables.SetElement
	for _, p := range nets {
		p = p.Masked()
		if !p.Addr().Is4() {
			continue
		}
		start := p.Addr().As4()
		end := binary.BigEndian.Uint32(start[:]) + uint32(1)<<(32-p.Bits())
		out = append(out, nftables.SetElement{Key: start[:]})
		if end != 0 { // a prefix ending at 255.255.255.255 has no end marker
			out = append(out, nftables.SetElement{Key: binary.BigEndian.AppendUint32(nil, end), IntervalEnd: true})
		}
	}
	return out
}

// aclRange encodes a service . source-range element's start and
// inclusive end, as concatenated ranges are.
func aclRange(k flows.Key, p netip.Prefix) (start, end []byte) {
	s := p.Addr().As4()
	last := binary.BigEndian.Uint32(s[:]) | (uint32(1)<<(32-p.Bits()) - 1)
	if p.Bits() == 0 {
		last = ^uint32(0)
	}
	return append(key(k), s[:]...), binary.BigEndian.AppendUint32(key(k), last)
}

// aclPrefix decodes an acl_allow element back into its prefix.
func aclPrefix(start, end []byte) netip.Prefix {
	first := binary.BigEndian.Uint32(start[12:16])
	last := binary.BigEndian.Uint32(end[12:16])
	return netip.PrefixFrom(netip.AddrFrom4([4]byte(start[12:16])), 32-bitsLen(last-first))
}

// bitsLen is the number of host bits of a range of size span+1.
func bitsLen(span uint32) int {
	n := 0
	for span > 0 {
		n++
		span >>= 1
	}
	return n
}

func pair(a netip.Addr) []byte {
	b := a.As4()
	return append(b[:], b[:]...)
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
