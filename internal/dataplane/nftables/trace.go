package nftables

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"

	"github.com/flowlb/flowlb/internal/flows"
)

// ServiceDump is a programmed service as the kernel holds it.
type ServiceDump struct {
	Key       flows.Key
	Algorithm flows.Algorithm // empty when Refused
	// Refused: no usable backend, new connections get a reset or an
	// ICMP port unreachable.
	Refused bool
	// Slots counts the slots of each backend ("address:port"); Local the
	// local-only table's (for clients from outside the pod networks).
	Slots map[string]int
	Local map[string]int
	// NoLocal: local-only without a backend on this node: traffic from
	// outside the pod networks is dropped.
	NoLocal bool
	// LocalOnly: the local table serves traffic from outside the pod
	// networks; InternalLocal: it serves the pod networks and the node
	// (NoInternalLocal: there is none, such traffic is dropped).
	LocalOnly, InternalLocal, NoInternalLocal bool
	// Zonal: a PreferClose service whose main table holds only the
	// backends for this node's zone.
	Zonal        bool
	AllowedCIDRs []netip.Prefix
	Persistence  time.Duration
	Limit        int
}

// Dump describes every programmed service from its kernel elements,
// sorted by key.
func (d *Dataplane) Dump() []ServiceDump {
	var out []ServiceDump
	for _, k := range d.Programmed() {
		out = append(out, describe(k, d.footprint(d.programmed[k])))
	}
	return out
}

func describe(k flows.Key, fp footprint) ServiceDump {
	s := ServiceDump{Key: k, Slots: map[string]int{}, Local: map[string]int{}}
	for _, e := range fp {
		switch e.set {
		case slotsMap:
			b := parseBackend(e.val)
			name := netip.AddrPortFrom(b.addr, b.port).String()
			if slotOf(e.key) >= localSlot {
				s.Local[name]++
			} else {
				s.Slots[name]++
			}
		case emptySet:
			s.Refused = true
		case localOnSet:
			s.LocalOnly = true
		case localNoneSet:
			s.LocalOnly, s.NoLocal = true, true
		case iLocalOnSet:
			s.InternalLocal = true
		case iLocalNoneSet:
			s.InternalLocal, s.NoInternalLocal = true, true
		case zoneOnSet:
			s.Zonal = true
		case aclAllowSet:
			s.AllowedCIDRs = append(s.AllowedCIDRs, aclPrefix(e.key, e.keyEnd))
		case persistMap:
			n, _ := chainParam(e.jump, persistPrefix)
			s.Persistence = time.Duration(n) * time.Second
		case limitsMap:
			n, _ := chainParam(e.jump, limitPrefix)
			s.Limit = int(n)
		default:
			for alg, set := range pickNames {
				if e.set == set {
					s.Algorithm = alg
				}
			}
		}
	}
	slices.SortFunc(s.AllowedCIDRs, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return s
}

// Packet is the first packet of a connection, for Trace.
type Packet struct {
	Src      netip.Addr
	SrcPort  uint16
	Dst      netip.Addr
	Protocol flows.Protocol
	DstPort  uint16
	// Local: sent by the node itself (output hook) rather than received.
	Local bool
}

// Verdict is what the table does with a packet.
type Verdict struct {
	// Action: "accept" (not a service: untouched), "dnat", "drop" or
	// "refuse".
	Action string
	Reason string
	// Backend is the DNAT target, when it is determined by the packet
	// (SOURCE_IP, SOURCE_IP_PORT); Candidates lists every backend with
	// its chance for ROUND_ROBIN.
	Backend    netip.AddrPort
	Candidates map[netip.AddrPort]float64
	// Masquerade: the source is rewritten to the node's address.
	Masquerade bool
	// Persistence and Limit apply on top of the choice: a remembered
	// backend wins for this long; over Limit connections are refused.
	Persistence time.Duration
	Limit       int
}

// Trace follows a new connection's first packet through the table's
// rules, evaluated in Go over the elements the kernel holds (jhash as the
// kernel computes it), so that an operator, or a test, can tell which
// backend a client reaches and why.
func (d *Dataplane) Trace(p Packet, podNets []netip.Prefix) Verdict {
	k := flows.Key{VIP: p.Dst, Protocol: p.Protocol, Port: p.DstPort}
	e, ok := d.programmed[k]
	if !ok {
		return Verdict{Action: "accept", Reason: "not a service"}
	}
	fp := d.footprint(e)
	s := describe(k, fp)
	outside := !slices.ContainsFunc(podNets, func(n netip.Prefix) bool { return n.Contains(p.Src) })
	if len(podNets) == 0 {
		outside = false
	}
	if len(s.AllowedCIDRs) > 0 && !slices.ContainsFunc(s.AllowedCIDRs, func(n netip.Prefix) bool { return n.Contains(p.Src) }) {
		return Verdict{Action: "drop", Reason: "source outside allowed_cidrs"}
	}
	v := Verdict{Limit: s.Limit}
	external := outside && !p.Local
	if s.NoLocal && external {
		v.Action, v.Reason = "drop", "local-only service without a backend on this node"
		return v
	}
	if s.NoInternalLocal && !external {
		v.Action, v.Reason = "drop", "internal-local service without a backend on this node"
		return v
	}
	if s.Refused {
		v.Action, v.Reason = "refuse", "no usable backend"
		return v
	}
	v.Action = "dnat"
	offset := 0
	switch {
	case s.LocalOnly && external:
		offset = localSlot
		v.Reason = "local-only: this node's backends, client address kept"
	case s.InternalLocal && !external:
		offset = localSlot
		v.Reason = "internal-local: this node's backends"
	default:
		v.Persistence = s.Persistence
		v.Masquerade = outside
		v.Reason = "every backend"
		if s.Zonal {
			v.Reason = "prefer-close: the backends for this node's zone"
		}
	}
	table := map[int]backend{}
	for _, el := range fp {
		if el.set == slotsMap {
			table[slotOf(el.key)] = parseBackend(el.val)
		}
	}
	switch s.Algorithm {
	case flows.RoundRobin:
		v.Candidates = map[netip.AddrPort]float64{}
		for i := 0; i < Slots; i++ {
			b := table[offset+i]
			v.Candidates[netip.AddrPortFrom(b.addr, b.port)] += 1.0 / Slots
		}
		return v
	case flows.SourceIP:
		a := p.Src.As4()
		b := table[offset+slot(jhash(a[:], hashSeed))]
		v.Backend = netip.AddrPortFrom(b.addr, b.port)
	default:
		a := p.Src.As4()
		b := table[offset+slot(jhash(binary.BigEndian.AppendUint16(a[:], p.SrcPort), hashSeed))]
		v.Backend = netip.AddrPortFrom(b.addr, b.port)
	}
	if v.Backend.Addr() == p.Src {
		v.Masquerade, v.Reason = true, v.Reason+"; hairpin"
	}
	return v
}

// slot scales a hash to [0, Slots) as the kernel's reciprocal_scale does.
func slot(h uint32) int { return int(uint64(h) * Slots >> 32) }

// jhash is the kernel's jhash() (include/linux/jhash.h), which nft's
// "jhash" expression runs over the key's bytes.
func jhash(k []byte, initval uint32) uint32 {
	n := uint32(len(k))
	a := 0xdeadbeef + n + initval
	b, c := a, a
	for len(k) > 12 {
		a += binary.NativeEndian.Uint32(k[0:])
		b += binary.NativeEndian.Uint32(k[4:])
		c += binary.NativeEndian.Uint32(k[8:])
		a, b, c = mix(a, b, c)
		k = k[12:]
	}
	if len(k) == 0 {
		return c
	}
	var tail [12]byte
	copy(tail[:], k)
	// Bytes are added in little-endian significance, whatever the CPU.
	a += binary.LittleEndian.Uint32(tail[0:])
	b += binary.LittleEndian.Uint32(tail[4:])
	c += binary.LittleEndian.Uint32(tail[8:])
	return final(a, b, c)
}

func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func final(a, b, c uint32) uint32 {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}

// PodNetworks reads the pod networks the table holds.
func (d *Dataplane) PodNetworks() ([]netip.Prefix, error) {
	els, err := d.conn.GetSetElements(d.sets[podNetsSet])
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", podNetsSet, err)
	}
	// Interval elements come back as starts and end markers, in any order.
	var starts, ends []uint32
	for _, e := range els {
		if len(e.Key) != 4 {
			continue
		}
		v := binary.BigEndian.Uint32(e.Key)
		if e.IntervalEnd {
			ends = append(ends, v)
		} else {
			starts = append(starts, v)
		}
	}
	slices.Sort(starts)
	slices.Sort(ends)
	var out []netip.Prefix
	for _, s := range starts {
		end := uint64(1) << 32
		for _, e := range ends {
			if e > s {
				end = uint64(e)
				break
			}
		}
		size := end - uint64(s)
		out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, s))), 32-bits.Len64(size-1)))
	}
	return out, nil
}

// Open reads the table of a network namespace without changing it, for
// dumps and traces; it fails if there is no table.
func Open(netnsFd int) (*Dataplane, error) {
	opts := []nftables.ConnOption{}
	if netnsFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(netnsFd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	d := &Dataplane{conn: c, netns: netnsFd, programmed: map[flows.Key]entry{}, refs: map[netip.Addr]int{}, chainRefs: map[string]int{}}
	ok, err := d.adopt()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("no flowlb table of this version in the namespace")
	}
	return d, nil
}
