package neutron

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"

	"github.com/flowlb/flowlb/internal/server/store"
)

// IP address management.
//
// Every allocated address is a claim in the store (space: the subnet, key:
// the address), and the database's unique key on the pair is what keeps an
// address from being given twice, by concurrent transactions and server
// replicas alike. No row is written by every allocation in a subnet, so
// allocations proceed in parallel. An automatic allocation starts at this
// process's hint for the subnet (hints.go) and takes the first address
// there or after that no committed claim holds, reading the claims in
// ordered pages; if a concurrent transaction claimed it first, its claim
// conflicts and the search starts again at a random pool address. The
// subnet row is only share-locked, so that it is not deleted under an
// allocation.

// Claims are read a page at a time, starting small: usually the first
// address looked at is free.
const (
	firstPage = 16
	maxPage   = 1024
)

// exhaustedType is Neutron's refusal when a subnet or network is full.
const exhaustedType = "IpAddressGenerationFailure"

// ipam is one subnet's allocator within a transaction.
type ipam struct {
	tx     store.Tx
	hint   *hint
	doc    subnetDoc
	prefix netip.Prefix
	gw     netip.Addr
	pools  []span
	// counted: this search has counted the pools' claims (see full).
	counted bool
}

func newIPAM(tx store.Tx, h *hint, doc subnetDoc) (*ipam, error) {
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
	return &ipam{tx: tx, hint: h, doc: doc, prefix: p, gw: gw, pools: pools}, nil
}

// claimSpace is where a subnet's addresses are claimed.
func claimSpace(subnetID string) string { return "subnet:" + subnetID }

// addrKey is an address as a claim key: its bytes in hex, 8 digits for
// IPv4 and 32 for IPv6, so that the store's bytewise order of keys is the
// order of addresses.
func addrKey(a netip.Addr) string { return hex.EncodeToString(a.Unmap().AsSlice()) }

func (m *ipam) is4() bool     { return m.prefix.Addr().Is4() }
func (m *ipam) space() string { return claimSpace(m.doc.ID) }

func (m *ipam) key(v u128) string { return addrKey(v.addr(m.is4())) }

func (m *ipam) parseKey(k string) (u128, error) {
	b, err := hex.DecodeString(k)
	a, ok := netip.AddrFromSlice(b)
	if err != nil || !ok || a.Is4() != m.is4() {
		return u128{}, fmt.Errorf("subnet %s: bad address claim %q", m.doc.ID, k)
	}
	return toU128(a), nil
}

func (m *ipam) exhausted() *Error {
	return refuse(KindConflict, exhaustedType, "No more IP addresses available on network %s.", m.doc.NetworkID)
}

// maxJumps bounds the fresh starts after lost races; after that a search
// walks on from where it lost, so that it ends, and finds exhaustion, for
// sure.
const maxJumps = 4

// outcome is how a search of (part of) the pools ended.
type outcome int

const (
	noneFree outcome = iota // every address searched is claimed
	claimed                 // the address returned is now this transaction's
	lostRace                // a concurrent transaction claimed it first
)

// allocateAny gives out a free pool address: the first at or after this
// process's hint, wrapping around the pools. After a lost race (most
// likely to another replica walking the same addresses) the search starts
// again at the hint, which the loss moved to a random pool address.
func (m *ipam) allocateAny() (netip.Addr, error) {
	if len(m.pools) == 0 {
		return netip.Addr{}, m.exhausted()
	}
	m.counted = false
	for jumps := 0; ; jumps++ {
		start := m.hint.take(m.pools)
		v, out, err := m.search(start, jumps < maxJumps)
		if err != nil {
			return netip.Addr{}, err
		}
		switch out {
		case claimed:
			m.hint.settle(m.pools, start, v)
			m.tx.OnRollback(func() { m.hint.rewind(v) })
			return v.addr(m.is4()), nil
		case noneFree:
			return netip.Addr{}, m.exhausted()
		}
	}
}

// search walks the pools once from start and claims the first free
// address; with jump, it stops at the first lost race.
func (m *ipam) search(start u128, jump bool) (u128, outcome, error) {
	for _, seg := range cyclicFrom(m.pools, start) {
		v, out, err := m.claimFirstFree(seg, jump)
		if err != nil || out != noneFree {
			return v, out, err
		}
	}
	return u128{}, noneFree, nil
}

// claimFirstFree claims the first address of seg that nobody holds. A lost
// race scatters the hint, and ends the search if jump is set.
func (m *ipam) claimFirstFree(seg span, jump bool) (u128, outcome, error) {
	from := seg.first
	for {
		v, ok, err := m.firstUnclaimed(from, seg.last)
		if err != nil || !ok {
			return u128{}, noneFree, err
		}
		err = m.tx.Claim(m.space(), m.key(v))
		if err == nil {
			return v, claimed, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return u128{}, noneFree, fmt.Errorf("subnet %s: %w", m.doc.ID, err)
		}
		m.hint.scatter(m.pools)
		if jump {
			return u128{}, lostRace, nil
		}
		if v == seg.last {
			return u128{}, noneFree, nil
		}
		from = v.inc()
	}
}

// firstUnclaimed returns the first address in [from, last] that no
// committed claim holds, reading claims in pages that grow as it goes.
func (m *ipam) firstUnclaimed(from, last u128) (u128, bool, error) {
	limit := firstPage
	for {
		keys, err := m.tx.Claimed(m.space(), m.key(from), limit)
		if err != nil {
			return u128{}, false, fmt.Errorf("subnet %s: %w", m.doc.ID, err)
		}
		for _, k := range keys {
			v, err := m.parseKey(k)
			if err != nil {
				return u128{}, false, err
			}
			if v != from { // keys come in order from `from` on: a gap
				return from, true, nil
			}
			if from == last {
				return u128{}, false, nil
			}
			from = from.inc()
		}
		if len(keys) < limit {
			return from, true, nil
		}
		if !m.counted {
			m.counted = true
			full, err := m.full()
			if err != nil {
				return u128{}, false, err
			}
			if full {
				return u128{}, false, m.exhausted()
			}
		}
		limit = min(2*limit, maxPage)
	}
}

// full reports whether every pool address is claimed. A search that meets
// a page of taken addresses asks once: counting is much cheaper than
// reading every claim of a full subnet.
func (m *ipam) full() (bool, error) {
	for _, p := range m.pools {
		n, err := m.tx.CountClaimed(m.space(), m.key(p.first), m.key(p.last))
		if err != nil {
			return false, fmt.Errorf("subnet %s: %w", m.doc.ID, err)
		}
		if uint64(n) < size(p.first, p.last) {
			return false, nil
		}
	}
	return true, nil
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
	err := m.tx.Claim(m.space(), addrKey(a))
	if errors.Is(err, store.ErrConflict) {
		return taken
	}
	if err != nil {
		return fmt.Errorf("subnet %s: %w", m.doc.ID, err)
	}
	return nil
}

// release frees an address; freeing a free address is a no-op so that a
// release can be retried.
func (m *ipam) release(a netip.Addr) error {
	a = a.Unmap()
	if !m.prefix.Contains(a) {
		return nil
	}
	err := m.tx.Unclaim(m.space(), addrKey(a))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("subnet %s: %w", m.doc.ID, err)
	}
	return nil
}

// inUse reports whether any address of a subnet is allocated.
func inUse(tx store.ReadTx, subnetID string) (bool, error) {
	keys, err := tx.Claimed(claimSpace(subnetID), "", 1)
	if err != nil {
		return false, fmt.Errorf("subnet %s: %w", subnetID, err)
	}
	return len(keys) > 0, nil
}
