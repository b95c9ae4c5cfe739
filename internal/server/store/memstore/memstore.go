// Package memstore is an in-memory store.Store for unit tests of the
// layers above the store: same semantics (one writer at a time, the change
// log, pending changes, replicas and agents, rollback on error), no
// durability. Entries get their revisions at commit: with one writer,
// commit order is the order of the transactions.
package memstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
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
	log     []store.LogEntry
	nextID  int64
	head    int64
	oldest  int64
	pending map[string]store.Pending
	cluster
	stats
	watchers
}

// New returns an empty store.
func New() *Store {
	return &Store{objs: map[key]store.Record{}, claims: map[string][]string{}, pending: map[string]store.Pending{},
		cluster: newCluster(), watchers: watchers{subs: map[store.Topic][]chan struct{}{}}}
}

type tx struct {
	s       *Store
	writes  map[key]*store.Record // nil value: deleted
	claims  map[claim]bool        // false: unclaimed
	touched map[string]bool
	pend    map[string]string
	settled map[string]bool
	// onRollback is called if fn of Update fails.
	onRollback []func()
}

func newTx(s *Store) *tx {
	return &tx{s: s, writes: map[key]*store.Record{}, claims: map[claim]bool{}, touched: map[string]bool{},
		pend: map[string]string{}, settled: map[string]bool{}}
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

// Lock needs nothing: Update holds the store's lock for the whole
// transaction.
func (t *tx) Lock(string) error { return nil }

func match(r store.Record, f store.Filter) bool {
	return (f.ProjectID == "" || r.ProjectID == f.ProjectID) &&
		(f.LoadBalancerID == "" || r.LoadBalancerID == f.LoadBalancerID) &&
		(f.ParentID == "" || r.ParentID == f.ParentID) &&
		(f.Name == "" || r.Name == f.Name) &&
		(len(f.LoadBalancerIDs) == 0 || slices.Contains(f.LoadBalancerIDs, r.LoadBalancerID))
}

func (t *tx) List(kind store.Kind, f store.Filter) ([]store.Record, error) {
	return t.ListKinds([]store.Kind{kind}, f)
}

func (t *tx) ListKinds(kinds []store.Kind, f store.Filter) ([]store.Record, error) {
	seen := map[key]bool{}
	var out []store.Record
	for k, w := range t.writes {
		seen[k] = true
		if w != nil && slices.Contains(kinds, k.kind) && match(*w, f) {
			out = append(out, *w)
		}
	}
	for k, r := range t.s.objs {
		if !seen[k] && slices.Contains(kinds, k.kind) && match(r, f) {
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

func (t *tx) CountGrouped(kinds []store.Kind, fields []string) ([]store.GroupCount, error) {
	recs, err := t.ListKinds(kinds, store.Filter{})
	if err != nil {
		return nil, err
	}
	counts := map[string]*store.GroupCount{}
	var out []*store.GroupCount
	for _, r := range recs {
		var doc map[string]any
		if err := json.Unmarshal(r.Data, &doc); err != nil {
			return nil, fmt.Errorf("count %s %s: %w", r.Kind, r.ID, err)
		}
		g := store.GroupCount{Kind: r.Kind, Values: make([]string, len(fields))}
		for i, f := range fields {
			switch v := doc[f].(type) {
			case nil:
			case string:
				g.Values[i] = v
			default:
				b, _ := json.Marshal(v)
				g.Values[i] = string(b)
			}
		}
		k := string(r.Kind) + "\x00" + strings.Join(g.Values, "\x00")
		if counts[k] == nil {
			counts[k] = &g
			out = append(out, &g)
		}
		counts[k].N++
	}
	res := make([]store.GroupCount, len(out))
	for i, g := range out {
		res[i] = *g
	}
	return res, nil
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
		old, ok := t.lookup(key{r.Kind, r.ID})
		if !ok {
			return store.ErrNotFound
		}
		// The SQL stores keep a record's placement in UpdateMany: a
		// caller that moves one is a bug the API tests should see.
		if old.ProjectID != r.ProjectID || old.LoadBalancerID != r.LoadBalancerID || old.ParentID != r.ParentID {
			return fmt.Errorf("memstore: UpdateMany would move %s %s (project %q→%q, load balancer %q→%q, parent %q→%q)",
				r.Kind, r.ID, old.ProjectID, r.ProjectID, old.LoadBalancerID, r.LoadBalancerID, old.ParentID, r.ParentID)
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

func (t *tx) DeleteMany(kind store.Kind, ids []string) error {
	for _, id := range ids {
		if err := t.Delete(kind, id); err != nil && err != store.ErrNotFound {
			return err
		}
	}
	return nil
}

func (t *tx) Touch(lbID string) {
	if lbID != "" {
		t.touched[lbID] = true
	}
}

func (t *tx) OnRollback(fn func()) { t.onRollback = append(t.onRollback, fn) }

func (t *tx) Pend(lbID, owner string) {
	t.Touch(lbID)
	t.pend[lbID] = owner
}

func (t *tx) Pending(lbID string) (store.Pending, bool, error) {
	if t.settled[lbID] {
		return store.Pending{}, false, nil
	}
	p, ok := t.s.pending[lbID]
	return p, ok, nil
}

func (t *tx) Settle(p store.Pending) error {
	if cur, ok, _ := t.Pending(p.LoadBalancerID); !ok || cur != p {
		return store.ErrConflict
	}
	t.settled[p.LoadBalancerID] = true
	return nil
}

// Update runs fn with the store locked and applies its writes on success,
// with a change-log entry, already sequenced, per load balancer touched.
func (s *Store) Update(ctx context.Context, fn func(tx store.Tx) error) (store.Commit, error) {
	if err := ctx.Err(); err != nil {
		return store.Commit{}, err
	}
	c, err := s.update(fn)
	if err == nil && len(c.Changes) > 0 {
		s.Notify(ctx, store.TopicLog)
	}
	return c, err
}

func (s *Store) update(fn func(tx store.Tx) error) (store.Commit, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := newTx(s)
	if err := fn(t); err != nil {
		for _, undo := range t.onRollback {
			undo()
		}
		return store.Commit{}, err
	}
	for k, w := range t.writes {
		if w == nil {
			delete(s.objs, k)
		} else {
			s.objs[k] = *w
		}
	}
	s.applyClaims(t.claims)
	for lb := range t.settled {
		delete(s.pending, lb)
	}
	c := store.Commit{Changes: map[string]int64{}}
	ids := make([]string, 0, len(t.touched))
	for id := range t.touched {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	now := time.Now()
	for _, id := range ids {
		s.nextID++
		s.head++
		s.log = append(s.log, store.LogEntry{ID: s.nextID, Revision: s.head, LoadBalancerID: id, At: now})
		c.Changes[id] = s.nextID
	}
	for lb, owner := range t.pend {
		s.pending[lb] = store.Pending{LoadBalancerID: lb, Owner: owner, Change: c.Changes[lb]}
	}
	return c, nil
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

// Log returns entries after a revision.
func (s *Store) Log(_ context.Context, after int64, limit int) ([]store.LogEntry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := sort.Search(len(s.log), func(i int) bool { return s.log[i].Revision > after })
	return append([]store.LogEntry(nil), s.log[i:min(len(s.log), i+limit)]...), nil
}

// LogBounds returns the oldest held and the newest revision.
func (s *Store) LogBounds(context.Context) (oldest, head int64, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.oldest, s.head, nil
}

// EntryRevision returns an entry's revision.
func (s *Store) EntryRevision(_ context.Context, id int64) (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, e := range s.log {
		if e.ID == id {
			return e.Revision, nil
		}
	}
	return 0, store.ErrNotFound
}

// Sequence has nothing to do: entries are numbered at commit.
func (s *Store) Sequence(context.Context) (int, error) { return 0, nil }

// Compact drops entries at or below upTo.
func (s *Store) Compact(_ context.Context, upTo int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.log), func(i int) bool { return s.log[i].Revision > upTo })
	s.log = append([]store.LogEntry(nil), s.log[i:]...)
	s.oldest = max(s.oldest, upTo)
	return nil
}

// Epoch is fixed: a memstore is one database for its life.
func (s *Store) Epoch(context.Context) (string, error) { return "memstore", nil }

// Close does nothing.
func (s *Store) Close() error { return nil }

var _ store.Store = (*Store)(nil)
