package lbaas

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/flowlb/flowlb/internal/server/store"
)

// maxCompletionGroup bounds the changes completed in one transaction, so
// that one transaction holds few load balancers' locks for little time.
const maxCompletionGroup = 64

// maxCompletionRunners bounds the groups committed at once: PostgreSQL
// completes several groups in parallel on its connections (one runner
// would make every completion of the replica wait in one line); SQLite's
// single writer takes them in turn anyway.
const maxCompletionRunners = 4

// completionGroups commit the completions that become ready together in
// one transaction: the fan-out settles the waiters of one acknowledged
// revision at once, and a commit (its WAL write on SQLite, its round
// trips on PostgreSQL) cost as much as the completion itself.
type completionGroups struct {
	mu    sync.Mutex
	queue []*completion
	// running counts the runners; another starts when completions wait
	// while every runner is busy.
	running int
}

type completion struct {
	p    store.Pending
	perr error
	done chan error
}

// completeGrouped completes p like complete, in a transaction shared with
// the completions queued beside it. Where the database has one writer
// (SQLite), that is the transaction of the store's changes (creates,
// updates and completions alike): they would wait for each other anyway,
// and a create and the completions beside it write the same pages (the
// newest rows, the change log), which one commit then writes once.
func (s *Service) completeGrouped(ctx context.Context, p store.Pending, perr error) error {
	if ch := store.ChangesOf(s.st); ch.Shared() {
		_, err := ch.Change(ctx, func(tx store.Tx) error { return s.completeIn(tx, p, perr) })
		return err
	}
	c := &completion{p: p, perr: perr, done: make(chan error, 1)}
	g := &s.completions
	g.mu.Lock()
	g.queue = append(g.queue, c)
	if g.running == 0 || (len(g.queue) > 1 && g.running < maxCompletionRunners) {
		g.running++
		go s.runCompletions(ctx)
	}
	g.mu.Unlock()
	return <-c.done
}

// runCompletions commits groups from the queue until it is empty.
func (s *Service) runCompletions(ctx context.Context) {
	g := &s.completions
	for {
		g.mu.Lock()
		n := min(len(g.queue), maxCompletionGroup)
		if n == 0 {
			g.running--
			g.mu.Unlock()
			return
		}
		group := slices.Clone(g.queue[:n])
		g.queue = slices.Delete(g.queue, 0, n)
		g.mu.Unlock()
		s.completeGroup(ctx, group)
	}
}

// completeGroup commits a group in one transaction. If that fails, each
// is tried alone, so that one that cannot complete holds no other back.
func (s *Service) completeGroup(ctx context.Context, group []*completion) {
	if len(group) > 1 {
		// One lock order for every group, so two groups (of two
		// replicas, or a takeover) never wait for each other in a cycle.
		slices.SortFunc(group, func(a, b *completion) int {
			return strings.Compare(a.p.LoadBalancerID, b.p.LoadBalancerID)
		})
		_, err := s.st.Update(ctx, func(tx store.Tx) error {
			for _, c := range group {
				if err := s.completeIn(tx, c.p, c.perr); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil {
			for _, c := range group {
				c.done <- nil
			}
			return
		}
		s.log.Debug("grouped completion failed; completing one by one", "changes", len(group), "err", err)
	}
	for _, c := range group {
		c.done <- s.complete(ctx, c.p, c.perr)
	}
}
