package flows

import (
	"encoding/binary"
	"hash/fnv"
	"sort"
)

// DefaultTableSize is the Maglev lookup-table size for a service: a prime,
// so that every (offset, skip) permutation visits every slot. Maglev's
// disruption bound needs M well above the number of backends (the paper
// and Cilium use M ≥ 100 × N for about 1 % extra movement); each slot is
// one kernel map element per service, so M is a memory trade-off. TableSize
// picks the smallest listed prime that keeps M ≥ 16 × N.
const DefaultTableSize = 251

var tablePrimes = []int{251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521}

// TableSize returns the slot count for n weighted backends: at least 16
// slots per backend, and at least DefaultTableSize.
func TableSize(n int) int {
	for _, p := range tablePrimes {
		if p >= 16*n {
			return p
		}
	}
	return tablePrimes[len(tablePrimes)-1]
}

// maglevKey identifies a backend for hashing: its address and port, not its
// position, so that the table depends on the set and not on its order.
func maglevKey(b Backend) []byte {
	a := b.Address.As16()
	k := make([]byte, 18)
	copy(k, a[:])
	binary.BigEndian.PutUint16(k[16:], b.Port)
	return k
}

func hash64(seed byte, key []byte) uint64 {
	h := fnv.New64a()
	h.Write([]byte{seed})
	h.Write(key)
	return h.Sum64()
}

// Maglev fills a lookup table of size m (a prime) with indexes into
// backends, following Maglev (Eisenbud et al., NSDI 2016): each backend
// walks its own permutation of the slots and claims the next free one in
// turn, with weighted backends taking proportionally more turns. Removing
// one of N equal backends moves about 1/N of the slots. Backends with a
// weight below 1 get no slot. An empty input gives an empty table.
func Maglev(backends []Backend, m int) []int {
	type entry struct {
		idx          int
		offset, skip uint64
		next         uint64
		weight       int
		credit       int
	}
	var es []*entry
	for i, b := range backends {
		if b.Weight < 1 {
			continue
		}
		k := maglevKey(b)
		es = append(es, &entry{idx: i, offset: hash64(1, k) % uint64(m), skip: hash64(2, k)%uint64(m-1) + 1, weight: b.Weight})
	}
	if len(es) == 0 {
		return nil
	}
	// Order by key so that equal sets give equal tables whatever the input order.
	sort.Slice(es, func(i, j int) bool {
		return string(maglevKey(backends[es[i].idx])) < string(maglevKey(backends[es[j].idx]))
	})
	maxW := 0
	for _, e := range es {
		maxW = max(maxW, e.weight)
	}
	table := make([]int, m)
	for i := range table {
		table[i] = -1
	}
	filled := 0
	for filled < m {
		for _, e := range es {
			// Weighted turns: a backend claims a slot each time its credit
			// reaches the largest weight, so claims are proportional to weight.
			e.credit += e.weight
			if e.credit < maxW {
				continue
			}
			e.credit -= maxW
			for {
				slot := (e.offset + e.next*e.skip) % uint64(m)
				e.next++
				if table[slot] < 0 {
					table[slot] = e.idx
					filled++
					break
				}
			}
			if filled == m {
				break
			}
		}
	}
	return table
}
