package ebpf

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// table is one family's services map and this process's record of what
// it holds; stale after a failed write, until read again. The record
// points into the batches written (no copy of each 0.5–1.2 KiB value).
type table[K, V comparable] struct {
	m      *ebpf.Map
	kernel map[K]*V
	stale  bool
	// deleted, if set, is told the services a write deleted.
	deleted func([]K) error
	// replaced, if set, is told each entry a write replaced or deleted
	// (now nil), with its value before.
	replaced func(k K, old, now *V)
}

// read makes kernel what the map holds.
func (t *table[K, V]) read() error {
	kernel := map[K]*V{}
	var k K
	it := t.m.Iterate()
	for v := new(V); it.Next(&k, v); v = new(V) {
		kernel[k] = v
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read the services map: %w", err)
	}
	t.kernel, t.stale = kernel, false
	return nil
}

// batch is what one change stores in and deletes from a table.
type batch[K, V comparable] struct {
	keys []K
	vals []V
	dels []K
	gone map[K]bool // dels, to delete each once
}

// set stores k unless the map holds v for it already.
func (t *table[K, V]) set(b *batch[K, V], k K, v V) {
	if old, ok := t.kernel[k]; !ok || *old != v {
		b.keys, b.vals = append(b.keys, k), append(b.vals, v)
	}
}

// del deletes k if the map holds it.
func (t *table[K, V]) del(b *batch[K, V], k K) {
	if _, ok := t.kernel[k]; !ok || b.gone[k] {
		return
	}
	if b.gone == nil {
		b.gone = map[K]bool{}
	}
	b.gone[k] = true
	b.dels = append(b.dels, k)
}

// write stores and deletes b's entries, one batch each, and returns how
// many it wrote.
func (t *table[K, V]) write(b batch[K, V]) (int, error) {
	if len(b.keys) > 0 {
		if _, err := t.m.BatchUpdate(b.keys, b.vals, nil); err != nil {
			t.stale = true
			return 0, fmt.Errorf("write %d services: %w", len(b.keys), err)
		}
		if len(t.kernel) == 0 {
			t.kernel = make(map[K]*V, len(b.keys))
		}
		for i, k := range b.keys {
			if old, ok := t.kernel[k]; ok && t.replaced != nil {
				t.replaced(k, old, &b.vals[i])
			}
			t.kernel[k] = &b.vals[i]
		}
	}
	if len(b.dels) > 0 {
		if _, err := t.m.BatchDelete(b.dels, nil); err != nil {
			t.stale = true
			return len(b.keys), fmt.Errorf("delete %d services: %w", len(b.dels), err)
		}
		for _, k := range b.dels {
			if old, ok := t.kernel[k]; ok && t.replaced != nil {
				t.replaced(k, old, nil)
			}
			delete(t.kernel, k)
		}
		if t.deleted != nil {
			if err := t.deleted(b.dels); err != nil {
				return len(b.keys) + len(b.dels), fmt.Errorf("forget the counters of %d deleted services: %w", len(b.dels), err)
			}
		}
	}
	return len(b.keys) + len(b.dels), nil
}

// sync makes the table hold exactly the carried entries of ss, encoded
// on every CPU (their Maglev tables are most of a full load's time).
func (t *table[K, V]) sync(ss []flows.Service, enc func(flows.Service) (K, V, bool), workers int) (int, error) {
	if t.stale {
		if err := t.read(); err != nil {
			return 0, err
		}
	}
	type entry struct {
		k  K
		v  V
		ok bool
	}
	out := make([]entry, len(ss))
	workers = min(workers, len(ss)/1000+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(ss); i += workers {
				out[i].k, out[i].v, out[i].ok = enc(ss[i])
			}
		})
	}
	wg.Wait()
	b := batch[K, V]{keys: make([]K, 0, len(ss)), vals: make([]V, 0, len(ss))}
	want := make(map[K]bool, len(ss))
	for _, e := range out {
		if e.ok {
			want[e.k] = true
			t.set(&b, e.k, e.v)
		}
	}
	for k := range t.kernel {
		if !want[k] {
			b.dels = append(b.dels, k)
		}
	}
	return t.write(b)
}
