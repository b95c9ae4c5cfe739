package lbaas

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/flowlb/flowlb/internal/store"
)

// SingleWriter is what a store says when it runs one write transaction at
// a time (SQLite). Its changes that arrive together are then committed in
// one transaction: they would wait for each other anyway, and a commit
// (its log pages, written once for all, and the change log's entry) cost
// as much as a create's own work. A store with concurrent writers
// (PostgreSQL) commits each change alone, in parallel.
type SingleWriter interface {
	SingleWriter() bool
}

// maxCommitGroup bounds the changes committed in one transaction, so that
// one that fails, which has the group retried one by one, costs little.
const maxCommitGroup = 16

// commitGroups queue the changes waiting for the single writer.
type commitGroups struct {
	mu      sync.Mutex
	queue   []*queuedCommit
	running bool
}

type queuedCommit struct {
	ctx   context.Context
	build func(tx store.Tx) (*Tree, error)
	done  chan committed
}

type committed struct {
	tree *Tree
	p    store.Pending
	err  error
	// panicked is what the change's work panicked with, panicked again
	// in its request's goroutine (where net/http recovers it), not in the
	// runner's.
	panicked any
}

// commitQueued commits a change in a transaction shared with the changes
// queued beside it, and returns what commitOne would.
func (s *Service) commitQueued(ctx context.Context, build func(tx store.Tx) (*Tree, error)) (*Tree, store.Pending, error) {
	q := &queuedCommit{ctx: ctx, build: build, done: make(chan committed, 1)}
	g := &s.commits
	g.mu.Lock()
	g.queue = append(g.queue, q)
	if !g.running {
		g.running = true
		go s.runCommits()
	}
	g.mu.Unlock()
	r := <-q.done
	if r.panicked != nil {
		panic(r.panicked)
	}
	return r.tree, r.p, r.err
}

// runCommits commits groups from the queue until it is empty.
func (s *Service) runCommits() {
	g := &s.commits
	for {
		g.mu.Lock()
		n := min(len(g.queue), maxCommitGroup)
		if n == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		group := slices.Clone(g.queue[:n])
		g.queue = slices.Delete(g.queue, 0, n)
		g.mu.Unlock()
		s.commitGroup(group)
	}
}

// commitGroup commits a group in one transaction. If that fails, each is
// committed alone, so that the one that cannot commit (a 409, a quota, a
// validation only the transaction can make) gets its own answer and holds
// no other back.
func (s *Service) commitGroup(group []*queuedCommit) {
	live := group[:0]
	for _, q := range group {
		if err := q.ctx.Err(); err != nil {
			q.done <- committed{err: err}
			continue
		}
		live = append(live, q)
	}
	if len(live) > 1 {
		var trees []*Tree
		// No one request's context: the transaction is every request's.
		c, err := s.st.Update(context.Background(), func(tx store.Tx) (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = fmt.Errorf("panic: %v", v) // each alone says whose
				}
			}()
			trees = trees[:0] // a retried transaction builds them again
			for _, q := range live {
				t, err := s.commitIn(q.ctx, tx, q.build)
				if err != nil {
					return err
				}
				trees = append(trees, t)
			}
			return nil
		})
		if err == nil {
			for i, q := range live {
				t := trees[i]
				q.done <- committed{tree: t, p: store.Pending{LoadBalancerID: t.LB.ID, Owner: s.cfg.Replica, Change: c.Changes[t.LB.ID]}}
			}
			return
		}
		s.log.Debug("grouped commit failed; committing one by one", "changes", len(live), "err", err)
	}
	for _, q := range live {
		q.done <- s.commitAlone(q)
	}
}

// commitAlone is commitOne for a queued change, its panic kept for it.
func (s *Service) commitAlone(q *queuedCommit) (r committed) {
	defer func() {
		if v := recover(); v != nil {
			r = committed{panicked: v}
		}
	}()
	t, p, err := s.commitOne(q.ctx, q.build)
	return committed{tree: t, p: p, err: err}
}
