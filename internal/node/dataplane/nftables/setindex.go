package nftables

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
)

// setReader gives a trace the elements the table holds, read from the
// connection once per set and trace.
type setReader struct {
	conn Conn
	decl map[string]*nftables.Set
	// podnets, when set, stands for the podnets set's elements.
	podnets []nftables.SetElement
	cache   map[string]*setIndex
}

func newSetReader(conn Conn, t *nftables.Table, podNets []netip.Prefix) *setReader {
	f := tableFamily(t)
	if len(podNets) == 0 {
		podNets = []netip.Prefix{f.prefix()}
	}
	return &setReader{conn: conn, decl: setsByName(setSpecs(t)), podnets: f.intervals(podNets), cache: map[string]*setIndex{}}
}

func (r *setReader) index(name string) (*setIndex, error) {
	if idx, ok := r.cache[name]; ok {
		return idx, nil
	}
	decl := r.decl[name]
	if decl == nil {
		return nil, fmt.Errorf("no set %s in the table's layout", name)
	}
	els := r.podnets
	if name != podNetsSet {
		var err error
		// Read with the declared types, as adopt does.
		if els, err = r.conn.GetSetElements(decl); err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
	}
	idx := newSetIndex(decl, els)
	r.cache[name] = idx
	return idx, nil
}

// setIndex finds elements as the kernel's set types do: exact keys, or
// intervals (start elements and end markers), or concatenated ranges
// (each 4-byte field between the element's key and key end).
type setIndex struct {
	decl   *nftables.Set
	exact  map[string]nftables.SetElement
	bounds []nftables.SetElement
	ranges []nftables.SetElement
}

func newSetIndex(decl *nftables.Set, els []nftables.SetElement) *setIndex {
	idx := &setIndex{decl: decl}
	switch {
	case decl.Interval && decl.Concatenation:
		idx.ranges = els
	case decl.Interval:
		idx.bounds = slices.Clone(els)
		// An end marker and a start at the same address: the start wins.
		slices.SortFunc(idx.bounds, func(a, b nftables.SetElement) int {
			if c := bytes.Compare(a.Key, b.Key); c != 0 {
				return c
			}
			switch {
			case a.IntervalEnd == b.IntervalEnd:
				return 0
			case a.IntervalEnd:
				return -1
			}
			return 1
		})
	default:
		idx.exact = make(map[string]nftables.SetElement, len(els))
		for _, e := range els {
			idx.exact[string(e.Key)] = e
		}
	}
	return idx
}

func (s *setIndex) find(key []byte) (nftables.SetElement, bool) {
	switch {
	case s.exact != nil:
		e, ok := s.exact[string(key)]
		return e, ok
	case s.ranges != nil:
		for _, e := range s.ranges {
			if inRange(key, e.Key, e.KeyEnd) {
				return e, true
			}
		}
		return nftables.SetElement{}, false
	}
	// The last bound at or below the key decides: a start matches.
	i, _ := slices.BinarySearchFunc(s.bounds, key, func(e nftables.SetElement, k []byte) int {
		if bytes.Compare(e.Key, k) <= 0 {
			return -1
		}
		return 1
	})
	if i == 0 || s.bounds[i-1].IntervalEnd {
		return nftables.SetElement{}, false
	}
	return s.bounds[i-1], true
}

// inRange reports whether every 4-byte field of key lies between start's
// and end's. An IPv6 address is four such fields: as the ranges flowlb
// writes are prefixes, comparing its words one by one decides as
// comparing the whole address does.
func inRange(key, start, end []byte) bool {
	if len(start) != len(key) || len(end) != len(key) {
		return false
	}
	for i := 0; i < len(key); i += 4 {
		j := min(i+4, len(key))
		if bytes.Compare(key[i:j], start[i:j]) < 0 || bytes.Compare(key[i:j], end[i:j]) > 0 {
			return false
		}
	}
	return true
}
