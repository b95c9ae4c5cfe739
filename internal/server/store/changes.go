package store

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
)

// Changes runs the domain's changes. A change is a function over a write
// transaction; the store decides how it runs: alone in a transaction of
// its own where writers run in parallel (PostgreSQL) or nothing is gained
// (memstore), or, on a database with one writer (SQLite), in a
// transaction shared with the changes waiting beside it (Grouped). The
// store also keeps, where it can tell that nothing changed a load
// balancer since, what a change built, so that its completion need not
// read it back.
type Changes interface {
	// Change runs fn as one change and returns the change-log entries of
	// the load balancers fn touched (Touch, Pend), and fn's own error. If
	// the store runs it in a shared transaction, each change's fn runs in
	// turn, exactly as it would alone, and sees the ones before it; if
	// any fails, each is run again alone, so that a refused change gets
	// its own answer, changes nothing and holds no other back. So fn may
	// run more than once (as under Update's retries) and must leave no
	// effect outside tx but what its last run leaves. A panic of fn is
	// raised again in the caller's goroutine.
	Change(ctx context.Context, fn func(tx Tx) error) (Commit, error)
	// Keep offers what pending change p, just committed by Change, built,
	// for p's completion; clone is called only if the store keeps it (its
	// value must share nothing that the caller's answer goes on to use).
	Keep(p Pending, clone func() any)
	// Built takes what Keep kept for p, if p is still its load balancer's
	// last change: nothing was written to the load balancer since (a
	// health verdict, for one, logs a change), neither by an earlier
	// transaction nor by a change before this one in tx, the write
	// transaction the completion runs in (which comes after every
	// earlier write); false, and the completion reads what it needs.
	// What was kept for p is given at most once, since a completion
	// changes it.
	Built(tx Tx, p Pending) (any, bool)
	// Shared says whether Change commits the changes that arrive together
	// in one transaction (a database with one writer): a caller that
	// would otherwise group its own writes to save commits runs them as
	// changes instead.
	Shared() bool
}

// ChangesOf is how changes run on st: st's own way if it has one
// (Changes: SQL, Grouped), else each alone in a transaction of its own,
// nothing kept. A store that wraps another (embedding Store) runs them
// alone through its own Update.
func ChangesOf(st Store) Changes {
	if c, ok := st.(Changes); ok {
		return c
	}
	return alone{st}
}

// alone runs each change in a transaction of its own and keeps nothing.
type alone struct{ st Store }

func (a alone) Change(ctx context.Context, fn func(tx Tx) error) (Commit, error) {
	return a.st.Update(ctx, fn)
}

func (alone) Keep(Pending, func() any) {}

func (alone) Built(Tx, Pending) (any, bool) { return nil, false }

func (alone) Shared() bool { return false }

// maxGroup bounds the changes committed in one transaction, so that one
// that fails, which has the group run again one by one, costs little.
const maxGroup = 16

// maxBuilt bounds the values kept for completions.
const maxBuilt = 4096

// lastChanges is what a store says when it knows, for every load
// balancer, the change-log entry of the last transaction that changed it
// (SQL on SQLite, whose one writer is this process: SQL.LastChange).
type lastChanges interface {
	LastChange(lbID string) (int64, bool)
}

// Grouped decorates a store whose database runs one write transaction at
// a time (SQLite). Its changes that arrive together are committed in one
// transaction: they would wait for each other anyway, and a commit (its
// log pages, written once for all, and the change log's entry) costs as
// much as a create's own work. If the store knows every load balancer's
// last change (lastChanges), it keeps what each change built for its
// completion, which then need not read back the tree it wrote (a tenth of
// SQLite's serial write time in a burst of creates); what is kept is
// used only if its change is still the load balancer's last.
type Grouped struct {
	Store
	last lastChanges // nil: nothing is kept
	log  *slog.Logger

	mu      sync.Mutex
	queue   []*queuedChange
	running bool

	builtMu sync.Mutex
	built   map[Pending]any

	// transactions counts the write transactions the changes took, and
	// builtUsed the values Built gave back (tests).
	transactions atomic.Int64
	builtUsed    atomic.Int64
}

// NewGrouped decorates st, which must run one write transaction at a
// time: grouping changes over concurrent writers would only make them
// wait for each other.
func NewGrouped(st Store, log *slog.Logger) *Grouped {
	if log == nil {
		log = slog.Default()
	}
	g := &Grouped{Store: st, log: log}
	if lc, ok := st.(lastChanges); ok {
		g.last = lc
	}
	return g
}

type queuedChange struct {
	ctx  context.Context
	fn   func(tx Tx) error
	done chan changeResult
}

type changeResult struct {
	commit Commit
	err    error
	// panicked is what the change's fn panicked with, panicked again in
	// its caller's goroutine (where net/http recovers it), not in the
	// runner's.
	panicked any
}

// Change runs fn in a transaction shared with the changes queued beside
// it (see Changes).
func (g *Grouped) Change(ctx context.Context, fn func(tx Tx) error) (Commit, error) {
	q := &queuedChange{ctx: ctx, fn: fn, done: make(chan changeResult, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, q)
	if !g.running {
		g.running = true
		go g.run()
	}
	g.mu.Unlock()
	r := <-q.done
	if r.panicked != nil {
		panic(r.panicked)
	}
	return r.commit, r.err
}

// run commits groups from the queue until it is empty.
func (g *Grouped) run() {
	for {
		g.mu.Lock()
		n := min(len(g.queue), maxGroup)
		if n == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		group := slices.Clone(g.queue[:n])
		g.queue = slices.Delete(g.queue, 0, n)
		g.mu.Unlock()
		g.commitGroup(group)
	}
}

// commitGroup commits a group in one transaction. If that fails, each is
// committed alone, so that the one that cannot commit (a 409, a quota, a
// validation only the transaction can make) gets its own answer and holds
// no other back.
func (g *Grouped) commitGroup(group []*queuedChange) {
	live := group[:0]
	for _, q := range group {
		if err := q.ctx.Err(); err != nil {
			q.done <- changeResult{err: err}
			continue
		}
		live = append(live, q)
	}
	if len(live) > 1 {
		txs := make([]*changeTx, len(live))
		// No one request's context: the transaction is every request's.
		c, err := g.update(context.Background(), func(tx Tx) (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = fmt.Errorf("panic: %v", v) // each alone says whose
				}
			}()
			// A retried transaction runs them all again.
			touched := map[string]bool{}
			for i, q := range live {
				txs[i] = &changeTx{Tx: tx, group: touched}
				if err := q.fn(txs[i]); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil {
			for i, q := range live {
				q.done <- changeResult{commit: txs[i].own(c)}
			}
			return
		}
		g.log.Debug("grouped commit failed; committing one by one", "changes", len(live), "err", err)
	}
	for _, q := range live {
		q.done <- g.alone(q)
	}
}

// alone commits a queued change in a transaction of its own, its panic
// kept for it.
func (g *Grouped) alone(q *queuedChange) (r changeResult) {
	defer func() {
		if v := recover(); v != nil {
			r = changeResult{panicked: v}
		}
	}()
	c, err := g.update(q.ctx, q.fn)
	return changeResult{commit: c, err: err}
}

func (g *Grouped) update(ctx context.Context, fn func(tx Tx) error) (Commit, error) {
	g.transactions.Add(1)
	return g.Store.Update(ctx, fn)
}

// changeTx is one change's part of a shared transaction: it notes the
// load balancers the change touched, whose entries are its answer, and
// those that any change of the transaction touched so far (group), which
// the changes after it did not see committed.
type changeTx struct {
	Tx
	touched []string
	group   map[string]bool
}

func (t *changeTx) Touch(lbID string) {
	t.Tx.Touch(lbID)
	t.touched = append(t.touched, lbID)
	t.group[lbID] = true
}

func (t *changeTx) Pend(lbID, owner string) {
	t.Tx.Pend(lbID, owner)
	t.touched = append(t.touched, lbID)
	t.group[lbID] = true
}

// own is the part of the shared transaction's commit c that is this
// change's.
func (t *changeTx) own(c Commit) Commit {
	out := Commit{Changes: map[string]int64{}}
	for _, lb := range t.touched {
		if e, ok := c.Changes[lb]; ok {
			out.Changes[lb] = e
		}
	}
	return out
}

// Shared: a Grouped commits the changes waiting together in one
// transaction (Changes).
func (g *Grouped) Shared() bool { return true }

// Keep keeps clone() for p's completion, if the store can tell later
// whether p is still its load balancer's last change.
func (g *Grouped) Keep(p Pending, clone func() any) {
	if g.last == nil || p.Change == 0 {
		return
	}
	g.builtMu.Lock()
	defer g.builtMu.Unlock()
	if g.built == nil {
		g.built = map[Pending]any{}
	}
	if len(g.built) >= maxBuilt {
		return
	}
	g.built[p] = clone()
}

// Built takes what was kept for p, if nothing changed its load balancer
// since p: no committed transaction (the store's last change), and no
// change before this one in tx, whose entries are written only when tx
// commits.
func (g *Grouped) Built(tx Tx, p Pending) (any, bool) {
	g.builtMu.Lock()
	v, ok := g.built[p]
	delete(g.built, p)
	g.builtMu.Unlock()
	if !ok || g.last == nil {
		return nil, false
	}
	if ct, shared := tx.(*changeTx); shared && ct.group[p.LoadBalancerID] {
		return nil, false
	}
	if c, ok := g.last.LastChange(p.LoadBalancerID); !ok || c != p.Change {
		return nil, false
	}
	g.builtUsed.Add(1)
	return v, true
}
