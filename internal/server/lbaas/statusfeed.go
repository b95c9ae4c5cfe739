package lbaas

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
)

// StatusFeed is what changed in the load balancers after a position of
// the change log: each changed load balancer's objects with their
// statuses, or that it is gone. A provider driver of another Octavia
// follows it to mirror flowlb's statuses (operating statuses from the
// distributed health checks above all) into that Octavia's database,
// reading only the load balancers that changed.
//
// A completion that leaves the data plane's flows as they were writes
// no log entry (Config.FlowsUnchanged), so a load balancer the feed
// shows in PENDING_* may settle without a further entry: a follower
// reads such load balancers again on its own.
type StatusFeed struct {
	// Epoch names the database; positions of another epoch mean
	// nothing here.
	Epoch string
	// Revision is the log position the answer covers: ask for what
	// follows it next.
	Revision int64
	// Full is set when every load balancer is listed, because the
	// position asked for was 0, compacted away or of another epoch: a
	// follower then treats every load balancer it knows and the answer
	// lacks as gone.
	Full bool
	// More is set when the log holds more entries after Revision.
	More          bool
	LoadBalancers []TreeStatus
}

// TreeStatus is one load balancer's objects and statuses, as Octavia's
// driver status reports list them.
type TreeStatus struct {
	ID string
	// Gone: the load balancer no longer exists (Objects is empty).
	Gone    bool
	Objects []ObjectStatus
}

// ObjectStatus is one object's statuses.
type ObjectStatus struct {
	Kind                          store.Kind
	ID                            string
	ProvisioningStatus, Operating string
}

// statusOf lists a tree's objects and statuses, the load balancer first.
func statusOf(t *Tree) TreeStatus {
	ts := TreeStatus{ID: t.LB.ID}
	for _, o := range t.objects() {
		b := o.base()
		ts.Objects = append(ts.Objects, ObjectStatus{Kind: o.kind(), ID: b.ID, ProvisioningStatus: b.ProvisioningStatus, Operating: b.OperatingStatus})
	}
	return ts
}

// StatusChanges answers the feed after position after of epoch, with at
// most limit log entries (their load balancers each listed once, as
// they are now). Admins only: it shows every project.
func (s *Service) StatusChanges(ctx context.Context, epoch string, after int64, limit int) (StatusFeed, error) {
	c, err := caller(ctx)
	if err != nil {
		return StatusFeed{}, err
	}
	if !c.IsAdmin {
		return StatusFeed{}, Forbidden()
	}
	if limit <= 0 {
		limit = 1000
	}
	cur, err := s.st.Epoch(ctx)
	if err != nil {
		return StatusFeed{}, err
	}
	oldest, head, err := s.st.LogBounds(ctx)
	if err != nil {
		return StatusFeed{}, err
	}
	feed := StatusFeed{Epoch: cur}
	if after <= 0 || epoch != cur || after < oldest || after > head {
		// Every load balancer as of now; entries after head may show
		// some of them again, which a follower takes as it takes any.
		feed.Full, feed.Revision = true, head
		trees, err := s.trees(ctx, nil)
		if err != nil {
			return StatusFeed{}, err
		}
		for _, t := range trees {
			feed.LoadBalancers = append(feed.LoadBalancers, statusOf(t))
		}
		return feed, nil
	}
	entries, err := s.st.Log(ctx, after, limit+1)
	if err != nil {
		return StatusFeed{}, err
	}
	if len(entries) > limit {
		entries, feed.More = entries[:limit], true
	}
	feed.Revision = after
	seen := map[string]bool{}
	var ids []string
	for _, e := range entries {
		feed.Revision = e.Revision
		if e.LoadBalancerID != "" && !seen[e.LoadBalancerID] {
			seen[e.LoadBalancerID] = true
			ids = append(ids, e.LoadBalancerID)
		}
	}
	sort.Strings(ids)
	feed.LoadBalancers, err = s.treeStatuses(ctx, ids)
	if err != nil {
		return StatusFeed{}, err
	}
	return feed, nil
}

// StatusesOf answers the load balancers with the given ids as they are
// now, those that do not exist as gone: what a follower of the feed
// reads of the load balancers it saw in PENDING_*. Admins only.
func (s *Service) StatusesOf(ctx context.Context, ids []string) ([]TreeStatus, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if !c.IsAdmin {
		return nil, Forbidden()
	}
	return s.treeStatuses(ctx, ids)
}

// treeStatuses reads each load balancer's tree on its own: a tree is
// consistent within itself, and one read per load balancer bounds a
// transaction whatever the number asked for.
func (s *Service) treeStatuses(ctx context.Context, ids []string) ([]TreeStatus, error) {
	out := []TreeStatus{}
	for _, id := range ids {
		var t *Tree
		err := s.st.View(ctx, func(tx store.ReadTx) error {
			rec, err := tx.Get(store.KindLoadBalancer, id)
			if err != nil {
				return err
			}
			t, err = loadTree(tx, rec)
			return err
		})
		switch {
		case errors.Is(err, store.ErrNotFound):
			out = append(out, TreeStatus{ID: id, Gone: true})
		case err != nil:
			return nil, err
		default:
			out = append(out, statusOf(t))
		}
	}
	return out, nil
}

// WaitForLog returns once the change log's head is past after, the
// wait d has passed or ctx ends, whichever comes first. It reads the
// head once per signal of new revisions (from this replica or, on
// PostgreSQL, from the others), not in a loop.
func (s *Service) WaitForLog(ctx context.Context, after int64, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		news := s.logNews.next(s.st)
		_, head, err := s.st.LogBounds(ctx)
		if err != nil || head > after {
			return err
		}
		select {
		case <-news:
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Statistics lists every listener's statistics summed over the nodes,
// for a provider driver to hand to another Octavia. Admins only.
func (s *Service) Statistics(ctx context.Context) ([]store.ListenerCounts, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if !c.IsAdmin {
		return nil, Forbidden()
	}
	return s.st.AllStats(ctx)
}

// broadcast turns the store's signal of a topic, a channel of one
// reader, into a channel closed for every waiter at each signal: the
// store has no way to stop watching, so one watch serves all of them.
type broadcast struct {
	once sync.Once
	mu   sync.Mutex
	ch   chan struct{}
}

// next is closed at the next signal of new log revisions after the call.
func (b *broadcast) next(st store.Store) <-chan struct{} {
	b.once.Do(func() {
		b.ch = make(chan struct{})
		news := st.Watch(store.TopicLog)
		go func() {
			for range news {
				b.mu.Lock()
				close(b.ch)
				b.ch = make(chan struct{})
				b.mu.Unlock()
			}
		}()
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}
