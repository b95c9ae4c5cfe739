package lbaas

import (
	"sync"
	"sync/atomic"

	"github.com/flowlb/flowlb/internal/store"
)

// LastChanges is what a store says when it knows, for every load
// balancer, the change-log entry of the last transaction that changed it
// (SQLite, whose one writer is this process: store.SQL.LastChange).
type LastChanges interface {
	LastChange(lbID string) (int64, bool)
}

// maxBuiltTrees bounds the trees kept for completion.
const maxBuiltTrees = 4096

// builtTrees keep, on a store that knows every load balancer's last
// change, a copy of the tree each change committed, for its completion:
// a change's completion then need not read back the tree it wrote, which
// was a tenth of SQLite's serial write time in a burst of creates. The
// copy is used only if nothing changed the load balancer since (its last
// change is still the pending one: a health verdict, for one, writes its
// members and logs a change); otherwise the tree is read.
type builtTrees struct {
	mu sync.Mutex
	m  map[store.Pending]*Tree
	// used counts the completions made from a kept tree (tests).
	used atomic.Int64
}

// keep stores a copy of t, as change p committed it.
func (b *builtTrees) keep(p store.Pending, t *Tree) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[store.Pending]*Tree{}
	}
	if len(b.m) >= maxBuiltTrees {
		return
	}
	b.m[p] = t.clone()
}

// take removes and returns the tree kept for p: a completion uses it at
// most once, since it changes it (and a failed transaction would leave it
// changed).
func (b *builtTrees) take(p store.Pending) (*Tree, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.m[p]
	delete(b.m, p)
	return t, ok
}

// keepsBuilt says whether committed trees are kept for their completion:
// on a single writer that knows every load balancer's last change.
func (s *Service) keepsBuilt() bool {
	sw, ok := s.st.(SingleWriter)
	_, knows := s.st.(LastChanges)
	return ok && knows && sw.SingleWriter()
}

// builtTree is the tree p committed, if it was kept and nothing changed
// its load balancer since.
func (s *Service) builtTree(p store.Pending) (*Tree, bool) {
	t, ok := s.built.take(p)
	lc, knows := s.st.(LastChanges)
	if !ok || !knows {
		return nil, false
	}
	if c, ok := lc.LastChange(p.LoadBalancerID); !ok || c != p.Change {
		return nil, false
	}
	s.built.used.Add(1)
	return t, true
}

// clone copies the tree and each of its objects, so that a completion
// changing their statuses and removing them shares nothing it writes
// with the tree the request answers from. The objects' slices and maps
// (tags, CIDRs, headers) are shared: no completion writes them. Floating
// IPs and security rules are read only.
func (t *Tree) clone() *Tree {
	lb := *t.LB
	return &Tree{
		LB:          &lb,
		Listeners:   cloneAll(t.Listeners),
		Pools:       cloneAll(t.Pools),
		Members:     cloneAll(t.Members),
		Monitors:    cloneAll(t.Monitors),
		L7Policies:  cloneAll(t.L7Policies),
		L7Rules:     cloneAll(t.L7Rules),
		FloatingIPs: append([]*FloatingIP(nil), t.FloatingIPs...),
		Security:    t.Security,
	}
}

func cloneAll[T any](xs []*T) []*T {
	out := make([]*T, len(xs))
	for i, x := range xs {
		v := *x
		out[i] = &v
	}
	return out
}
