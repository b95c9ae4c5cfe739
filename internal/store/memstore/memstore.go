// Package memstore is an in-memory store.Store for unit tests of the
// layers above the store: same semantics (one writer at a time, revisions,
// change log, rollback on error), no durability.
package memstore

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/flowlb/flowlb/internal/store"
)

type key struct {
	kind store.Kind
	id   string
}

// Store keeps records in maps guarded by one lock; Update holds it for the
// whole transaction, which is the strictest isolation there is.
type Store struct {
	mu      sync.RWMutex
	objs    map[key]store.Record
	claims  map[string][]string // space → held keys, sorted
	rev     int64
	changes []store.Change
}

// New returns an empty store.
func New() *Store { return &Store{objs: map[key]store.Record{}, claims: map[string][]string{}} }

type tx struct {
	s       *Store
	writes  map[key]*store.Record // nil value: deleted
	claims  map[claim]bool        // false: unclaimed
	touched map[string]bool
	// onRollback is called if fn of Update fails.
	onRollback []func()
}

func newTx(s *Store) *tx {
	return &tx{s: s, writes: map[key]*store.Record{}, claims: map[claim]bool{}, touched: map[string]bool{}}
}

func (t *tx) lookup(k key) (store.Record, bool) {
	if w, ok := t.writes[k]; ok {
		if w == nil {
			return store.Record{}, false
		}
		return *w, true
	}
	r, ok := t.s.objs[k]
	return r, ok
}

func (t *tx) Get(kind store.Kind, id string) (store.Record, error) {
	r, ok := t.lookup(key{kind, id})
	if !ok {
		return store.Record{}, store.ErrNotFound
	}
	r.Data = append([]byte(nil), r.Data...)
	return r, nil
}

func (t *tx) GetForUpdate(kind store.Kind, id string) (store.Record, error) { return t.Get(kind, id) }

func (t *tx) GetForShare(kind store.Kind, id string) (store.Record, error) { return t.Get(kind, id) }

func match(r store.Record, f store.Filter) bool {
	return (f.ProjectID == "" || r.ProjectID == f.ProjectID) &&
		(f.LoadBalancerID == "" || r.LoadBalancerID == f.LoadBalancerID) &&
		(f.ParentID == "" || r.ParentID == f.ParentID) &&
		(f.Name == "" || r.Name == f.Name)
}

func (t *tx) List(kind store.Kind, f store.Filter) ([]store.Record, error) {
	seen := map[key]bool{}
	var out []store.Record
	for k, w := range t.writes {
		seen[k] = true
		if w != nil && k.kind == kind && match(*w, f) {
			out = append(out, *w)
		}
	}
	for k, r := range t.s.objs {
		if !seen[k] && k.kind == kind && match(r, f) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

func (t *tx) Count(kind store.Kind, f store.Filter) (int, error) {
	l, err := t.List(kind, f)
	return len(l), err
}

func (t *tx) Insert(r store.Record) error {
	k := key{r.Kind, r.ID}
	if _, ok := t.lookup(k); ok {
		return store.ErrConflict
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = time.Now()
	}
	r.Data = append([]byte(nil), r.Data...)
	t.writes[k] = &r
	return nil
}

func (t *tx) InsertMany(rs []store.Record) error {
	for _, r := range rs {
		if _, ok := t.lookup(key{r.Kind, r.ID}); ok {
			return store.ErrConflict
		}
	}
	for _, r := range rs {
		if err := t.Insert(r); err != nil {
			return err
		}
	}
	return nil
}

func (t *tx) Update(r store.Record) error {
	k := key{r.Kind, r.ID}
	old, ok := t.lookup(k)
	if !ok {
		return store.ErrNotFound
	}
	r.CreatedAt = old.CreatedAt
	r.Data = append([]byte(nil), r.Data...)
	t.writes[k] = &r
	return nil
}

func (t *tx) UpdateMany(rs []store.Record) error {
	for _, r := range rs {
		if _, ok := t.lookup(key{r.Kind, r.ID}); !ok {
			return store.ErrNotFound
		}
	}
	for _, r := range rs {
		if err := t.Update(r); err != nil {
			return err
		}
	}
	return nil
}

func (t *tx) Delete(kind store.Kind, id string) error {
	k := key{kind, id}
	if _, ok := t.lookup(k); !ok {
		return store.ErrNotFound
	}
	t.writes[k] = nil
	return nil
}

func (t *tx) Touch(lbID string) { t.touched[lbID] = true }

func (t *tx) OnRollback(fn func()) { t.onRollback = append(t.onRollback, fn) }

// Update runs fn with the store locked and applies its writes on success.
func (s *Store) Update(ctx context.Context, fn func(tx store.Tx) error) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := newTx(s)
	if err := fn(t); err != nil {
		for _, undo := range t.onRollback {
			undo()
		}
		return 0, err
	}
	s.rev++
	for k, w := range t.writes {
		if w == nil {
			delete(s.objs, k)
		} else {
			s.objs[k] = *w
		}
	}
	s.applyClaims(t.claims)
	ids := make([]string, 0, len(t.touched))
	for id := range t.touched {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s.changes = append(s.changes, store.Change{Revision: s.rev, LoadBalancerID: id})
	}
	return s.rev, nil
}

// View runs fn under the read lock.
func (s *Store) View(ctx context.Context, fn func(tx store.ReadTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return fn(newTx(s))
}

// Revision returns the last committed revision.
func (s *Store) Revision(context.Context) (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rev, nil
}

// Changes returns, per load balancer, the latest revision after `after`
// that touched it, ordered by revision.
func (s *Store) Changes(_ context.Context, after int64) ([]store.Change, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	latest := map[string]int64{}
	for _, c := range s.changes {
		if c.Revision > after {
			latest[c.LoadBalancerID] = c.Revision
		}
	}
	out := make([]store.Change, 0, len(latest))
	for id, rev := range latest {
		out = append(out, store.Change{Revision: rev, LoadBalancerID: id})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Revision != out[j].Revision {
			return out[i].Revision < out[j].Revision
		}
		return out[i].LoadBalancerID < out[j].LoadBalancerID
	})
	return out, nil
}

// Close does nothing.
func (s *Store) Close() error { return nil }

var _ store.Store = (*Store)(nil)
