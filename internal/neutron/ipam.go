package neutron

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"sort"

	"github.com/google/uuid"

	"github.com/flowlb/flowlb/internal/store"
)

// IP address management.
//
// Allocated addresses are kept in bitmap chunks of chunkBits consecutive
// addresses, one store record per chunk that has ever held an address, keyed
// by a name-based UUID of (subnet, chunk base). Finding and taking an address
// therefore touches the subnet record (lock, cursor, counters) and one or two
// chunk records, whatever the number of ports: a constant number of
// primary-key operations, O(log n) in SQL. Chunks are sparse, so an IPv6 /64
// costs only what is in use.

const chunkBits = 1024

// chunkNamespace derives chunk record ids (UUIDv5), so that a chunk is found
// by Get without an index of chunks.
var chunkNamespace = uuid.MustParse("6f0c5a3e-7f1e-4c1a-9d0b-2f4d8e1b7a10")

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

func (v u128) chunkBase() u128 { return u128{v.hi, v.lo &^ (chunkBits - 1)} }
func (v u128) chunkLast() u128 { return u128{v.hi, v.lo | (chunkBits - 1)} }
func (v u128) chunkOff() int   { return int(v.lo & (chunkBits - 1)) }

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

type chunkDoc struct {
	SubnetID string `json:"subnet_id"`
	Base     string `json:"base"`
	Bits     []byte `json:"bits"`
}

type chunk struct {
	base   u128
	words  [chunkBits / 64]uint64
	exists bool
	dirty  bool
}

func (c *chunk) get(off int) bool { return c.words[off/64]&(1<<(off%64)) != 0 }
func (c *chunk) set(off int)      { c.words[off/64] |= 1 << (off % 64); c.dirty = true }
func (c *chunk) clear(off int)    { c.words[off/64] &^= 1 << (off % 64); c.dirty = true }

func (c *chunk) empty() bool {
	for _, w := range c.words {
		if w != 0 {
			return false
		}
	}
	return true
}

// firstFree returns the first clear bit in [from, to].
func (c *chunk) firstFree(from, to int) (int, bool) {
	for w := from / 64; w <= to/64; w++ {
		free := ^c.words[w]
		if w == from/64 {
			free &= math.MaxUint64 << (from % 64)
		}
		if w == to/64 && to%64 != 63 {
			free &= (uint64(1) << (to%64 + 1)) - 1
		}
		if free != 0 {
			return w*64 + bits.TrailingZeros64(free), true
		}
	}
	return 0, false
}

// ipam is one subnet's allocator for the duration of a transaction. The
// caller holds the subnet's row lock and calls save at the end.
type ipam struct {
	tx     store.Tx
	doc    *subnetDoc
	prefix netip.Prefix
	gw     netip.Addr
	pools  []span
	chunks map[u128]*chunk
}

func newIPAM(tx store.Tx, doc *subnetDoc) (*ipam, error) {
	p, err := netip.ParsePrefix(doc.CIDR)
	if err != nil {
		return nil, fmt.Errorf("subnet %s: bad cidr %q: %w", doc.ID, doc.CIDR, err)
	}
	var gw netip.Addr
	if doc.GatewayIP != nil {
		gw, _ = netip.ParseAddr(*doc.GatewayIP)
	}
	pools, err := parsePools(p, gw, doc.AllocationPools)
	if err != nil {
		return nil, fmt.Errorf("subnet %s: stored pools: %w", doc.ID, err)
	}
	return &ipam{tx: tx, doc: doc, prefix: p, gw: gw, pools: pools, chunks: map[u128]*chunk{}}, nil
}

func (m *ipam) is4() bool { return m.prefix.Addr().Is4() }

func (m *ipam) chunkID(base u128) string {
	return uuid.NewSHA1(chunkNamespace, []byte(m.doc.ID+"|"+base.addr(m.is4()).String())).String()
}

func (m *ipam) load(base u128) (*chunk, error) {
	if c, ok := m.chunks[base]; ok {
		return c, nil
	}
	c := &chunk{base: base}
	rec, err := m.tx.Get(store.KindSubnet, m.chunkID(base))
	switch {
	case err == nil:
		var d chunkDoc
		if err := json.Unmarshal(rec.Data, &d); err != nil {
			return nil, fmt.Errorf("decode IPAM chunk %s of subnet %s: %w", d.Base, m.doc.ID, err)
		}
		for i := range c.words {
			if len(d.Bits) >= (i+1)*8 {
				c.words[i] = binary.LittleEndian.Uint64(d.Bits[i*8:])
			}
		}
		c.exists = true
	case !isNotFound(err):
		return nil, fmt.Errorf("get IPAM chunk of subnet %s: %w", m.doc.ID, err)
	}
	m.chunks[base] = c
	return c, nil
}

func (m *ipam) capacity() uint64 {
	var n uint64
	for _, p := range m.pools {
		s := size(p.first, p.last)
		if n > math.MaxUint64-s {
			return math.MaxUint64
		}
		n += s
	}
	return n
}

func (m *ipam) inPool(v u128) bool {
	for _, p := range m.pools {
		if p.contains(v) {
			return true
		}
	}
	return false
}

func (m *ipam) exhausted() *Error {
	return refuse(KindConflict, "IpAddressGenerationFailure", "No more IP addresses available on network %s.", m.doc.NetworkID)
}

// take marks v allocated; the caller checked it is free.
func (m *ipam) take(c *chunk, v u128) {
	c.set(v.chunkOff())
	m.doc.IPAM.Used++
	if m.inPool(v) {
		m.doc.IPAM.InPool++
	}
}

// allocateAny gives out the next free pool address at or after the cursor
// (next-fit, wrapping around), and moves the cursor past it.
func (m *ipam) allocateAny() (netip.Addr, error) {
	if len(m.pools) == 0 || m.doc.IPAM.InPool >= m.capacity() {
		return netip.Addr{}, m.exhausted()
	}
	cur := m.pools[0].first
	if a, err := netip.ParseAddr(m.doc.IPAM.Cursor); err == nil && a.Is4() == m.is4() {
		cur = toU128(a)
	}
	start := -1
	for i, p := range m.pools {
		if p.last.cmp(cur) >= 0 {
			start = i
			break
		}
	}
	if start < 0 {
		start, cur = 0, m.pools[0].first
	}
	if cur.cmp(m.pools[start].first) < 0 {
		cur = m.pools[start].first
	}
	// Visiting the start pool twice covers the part before the cursor.
	for i := 0; i <= len(m.pools); i++ {
		pi := (start + i) % len(m.pools)
		p := m.pools[pi]
		a := p.first
		if i == 0 {
			a = cur
		}
		for {
			c, err := m.load(a.chunkBase())
			if err != nil {
				return netip.Addr{}, err
			}
			end := a.chunkLast()
			if p.last.cmp(end) < 0 {
				end = p.last
			}
			if off, ok := c.firstFree(a.chunkOff(), end.chunkOff()); ok {
				v := u128{a.hi, a.chunkBase().lo | uint64(off)}
				m.take(c, v)
				next := v.inc()
				if v == p.last {
					next = m.pools[(pi+1)%len(m.pools)].first
				}
				m.doc.IPAM.Cursor = next.addr(m.is4()).String()
				return v.addr(m.is4()), nil
			}
			if end == p.last {
				break
			}
			a = end.inc()
		}
	}
	// The counters said there was room: they are wrong, but the bitmap is
	// the truth, so report exhaustion rather than hand out a duplicate.
	return netip.Addr{}, m.exhausted()
}

// allocateAddr takes a requested address; it may lie outside the pools but
// must be inside the subnet and not its network, broadcast or gateway address.
func (m *ipam) allocateAddr(a netip.Addr) error {
	a = a.Unmap()
	if !m.prefix.Contains(a) || reserved(m.prefix, a) {
		return refuse(KindInvalid, "InvalidIpForSubnet", "IP address %s is not a valid IP for the specified subnet.", a)
	}
	taken := refuse(KindConflict, "IpAddressAlreadyAllocated", "IP address %s already allocated in subnet %s", a, m.doc.ID)
	if m.gw.IsValid() && a == m.gw {
		return taken
	}
	v := toU128(a)
	c, err := m.load(v.chunkBase())
	if err != nil {
		return err
	}
	if c.get(v.chunkOff()) {
		return taken
	}
	m.take(c, v)
	return nil
}

// release frees an address; freeing a free address is a no-op so that a
// release can be retried.
func (m *ipam) release(a netip.Addr) error {
	a = a.Unmap()
	if !m.prefix.Contains(a) {
		return nil
	}
	v := toU128(a)
	c, err := m.load(v.chunkBase())
	if err != nil {
		return err
	}
	if !c.get(v.chunkOff()) {
		return nil
	}
	c.clear(v.chunkOff())
	if m.doc.IPAM.Used > 0 {
		m.doc.IPAM.Used--
	}
	if m.inPool(v) && m.doc.IPAM.InPool > 0 {
		m.doc.IPAM.InPool--
	}
	return nil
}

// save writes the changed chunks (deleting emptied ones, so chunks stay
// sparse) and the subnet document with its counters and cursor.
func (m *ipam) save() error {
	for _, c := range m.chunks {
		if !c.dirty {
			continue
		}
		id := m.chunkID(c.base)
		if c.empty() {
			if c.exists {
				if err := m.tx.Delete(store.KindSubnet, id); err != nil {
					return fmt.Errorf("delete IPAM chunk of subnet %s: %w", m.doc.ID, err)
				}
			}
			c.exists, c.dirty = false, false
			continue
		}
		b := make([]byte, chunkBits/8)
		for i, w := range c.words {
			binary.LittleEndian.PutUint64(b[i*8:], w)
		}
		data, err := json.Marshal(chunkDoc{SubnetID: m.doc.ID, Base: c.base.addr(m.is4()).String(), Bits: b})
		if err != nil {
			return err
		}
		rec := store.Record{Kind: store.KindSubnet, ID: id, ProjectID: ipamProject, ParentID: m.doc.ID, Data: data}
		if c.exists {
			err = m.tx.Update(rec)
		} else {
			err = m.tx.Insert(rec)
		}
		if err != nil {
			return fmt.Errorf("write IPAM chunk of subnet %s: %w", m.doc.ID, err)
		}
		c.exists, c.dirty = true, false
	}
	return putSubnet(m.tx, *m.doc, false)
}
