package memstore

import (
	"slices"

	"github.com/flowlb/flowlb/internal/server/store"
)

type claim struct{ space, key string }

func (t *tx) held(c claim) bool {
	if v, ok := t.claims[c]; ok {
		return v
	}
	_, found := slices.BinarySearch(t.s.claims[c.space], c.key)
	return found
}

func (t *tx) Claim(space, key string) error {
	c := claim{space, key}
	if t.held(c) {
		return store.ErrConflict
	}
	t.claims[c] = true
	return nil
}

func (t *tx) Unclaim(space, key string) error {
	c := claim{space, key}
	if !t.held(c) {
		return store.ErrNotFound
	}
	t.claims[c] = false
	return nil
}

// Claimed merges the first limit committed keys still held with the keys
// this transaction claimed.
func (t *tx) Claimed(space, from string, limit int) ([]string, error) {
	var out []string
	for c, held := range t.claims {
		if held && c.space == space && c.key >= from {
			out = append(out, c.key)
		}
	}
	committed := t.s.claims[space]
	i, _ := slices.BinarySearch(committed, from)
	for n := 0; i < len(committed) && n < limit; i++ {
		if held, changed := t.claims[claim{space, committed[i]}]; changed && !held {
			continue
		}
		out = append(out, committed[i])
		n++
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return out[:min(limit, len(out))], nil
}

// CountClaimed counts the committed keys in range, corrected by this
// transaction's changes.
func (t *tx) CountClaimed(space, from, to string) (int, error) {
	committed := t.s.claims[space]
	i, _ := slices.BinarySearch(committed, from)
	j, found := slices.BinarySearch(committed, to)
	if found {
		j++
	}
	n := max(j-i, 0)
	for c, held := range t.claims {
		if c.space != space || c.key < from || c.key > to {
			continue
		}
		_, was := slices.BinarySearch(committed, c.key)
		switch {
		case held && !was:
			n++
		case !held && was:
			n--
		}
	}
	return n, nil
}

// applyClaims commits a transaction's claims, keeping each space sorted.
func (s *Store) applyClaims(changes map[claim]bool) {
	for c, held := range changes {
		keys := s.claims[c.space]
		i, found := slices.BinarySearch(keys, c.key)
		switch {
		case held && !found:
			keys = slices.Insert(keys, i, c.key)
		case !held && found:
			keys = slices.Delete(keys, i, i+1)
		}
		if len(keys) == 0 {
			delete(s.claims, c.space)
			continue
		}
		s.claims[c.space] = keys
	}
}
