package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// singleWriters are the stores whose changes share transactions: a
// Grouped memstore, and SQLite, which groups its own.
func singleWriters(t *testing.T) []struct {
	name string
	st   store.Store
	g    *store.Grouped
} {
	g := store.NewGrouped(memstore.New(), nil)
	out := []struct {
		name string
		st   store.Store
		g    *store.Grouped
	}{{"memory", g, g}}
	for _, e := range storetest.Engines(t) {
		if e.Name != "sqlite" {
			continue
		}
		sq := e.Store.(*store.SQL)
		g := store.GroupedOf(sq)
		if g == nil {
			t.Fatal("SQLite runs its changes ungrouped")
		}
		out = append(out, struct {
			name string
			st   store.Store
			g    *store.Grouped
		}{e.Name, sq, g})
	}
	return out
}

// createChange is a change that creates load balancer id, pending with
// owner r1, and notes how many load balancers it saw stored before.
func createChange(id string, seen *int) func(tx store.Tx) error {
	return func(tx store.Tx) error {
		n, err := tx.Count(store.KindLoadBalancer, store.Filter{})
		if err != nil {
			return err
		}
		*seen = n
		if err := tx.Insert(store.Record{Kind: store.KindLoadBalancer, ID: id, LoadBalancerID: id, Data: []byte("{}")}); err != nil {
			return err
		}
		tx.Pend(id, "r1")
		return nil
	}
}

// holdFirst starts a change that takes the writer and holds it until
// release is closed, and returns once it runs, with its answer's channel.
func holdFirst(t *testing.T, ch store.Changes, id string) (release func(), done <-chan error) {
	t.Helper()
	running, open := make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	var seen int
	go func() {
		_, err := ch.Change(context.Background(), func(tx store.Tx) error {
			close(running)
			<-open
			return createChange(id, &seen)(tx)
		})
		errc <- err
	}()
	select {
	case <-running:
	case <-time.After(5 * time.Second):
		t.Fatal("the first change did not start")
	}
	var once sync.Once
	release = func() { once.Do(func() { close(open) }) }
	t.Cleanup(release)
	return release, errc
}

// TestSingleWriterGroupsCommits: on a single-writer store, changes that
// wait for the writer together are committed in one transaction, each
// exactly as alone: it sees the ones before it and gets its own pending
// change and change-log entry, and only its own. One that fails there
// gets its own error and leaves nothing, and the others of its group
// commit.
func TestSingleWriterGroupsCommits(t *testing.T) {
	for _, eng := range singleWriters(t) {
		t.Run(eng.name, func(t *testing.T) {
			ch := store.ChangesOf(eng.st)
			// Two fail, both in the first group: it is retried one by one,
			// the second group commits at once.
			const n, failing = 24, 2
			bad := func(i int) bool { return i == 5 || i == 10 }
			refusal := make([]error, n)
			commits := make([]store.Commit, n)
			errs := make([]error, n)
			seen := make([]int, n)
			id := func(i int) string { return fmt.Sprintf("lb-%02d", i) }
			before := eng.g.Transactions()
			// The first takes the writer and holds it until every other
			// change waits in the queue.
			release, first := holdFirst(t, ch, id(0))
			var wg sync.WaitGroup
			for i := 1; i < n; i++ {
				fn := createChange(id(i), &seen[i])
				if bad(i) {
					refusal[i] = fmt.Errorf("change %d refused", i)
					create := fn
					fn = func(tx store.Tx) error {
						if err := create(tx); err != nil {
							return err
						}
						return refusal[i]
					}
				}
				wg.Go(func() { commits[i], errs[i] = ch.Change(context.Background(), fn) })
				// One at a time, so that the queue's order is theirs.
				testutil.Eventually(t, 5*time.Second, "change queued", func() (bool, string) {
					return eng.g.Waiting() == i, fmt.Sprintf("%d waiting", eng.g.Waiting())
				})
			}
			release()
			wg.Wait()
			if err := <-first; err != nil {
				t.Fatalf("first change: %v", err)
			}

			ok := 1 // the first
			for i := 1; i < n; i++ {
				if bad(i) {
					if errs[i] != refusal[i] {
						t.Errorf("change %d: %v, want its own refusal", i, errs[i])
					}
					continue
				}
				if errs[i] != nil {
					t.Fatalf("change %d: %v", i, errs[i])
				}
				if seen[i] != ok {
					t.Errorf("change %d saw %d load balancers, want the %d committed before it", i, seen[i], ok)
				}
				ok++
				entry, has := commits[i].Changes[id(i)]
				if !has || entry == 0 || len(commits[i].Changes) != 1 {
					t.Errorf("change %d: commit %v, want its own entry alone", i, commits[i].Changes)
				}
				if _, err := eng.st.Update(context.Background(), func(tx store.Tx) error {
					p, has, err := tx.Pending(id(i))
					if err == nil && (!has || p != store.Pending{LoadBalancerID: id(i), Owner: "r1", Change: entry}) {
						t.Errorf("change %d: pending %+v (%v), want its own entry %d", i, p, has, entry)
					}
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			// The first alone, then a group of 16 that failed and its 16
			// one by one, then a group of 7: 19.
			if u := eng.g.Transactions() - before; u != 19 {
				t.Errorf("%d write transactions for %d changes, want 19", u, n)
			}
			var stored int
			if err := eng.st.View(context.Background(), func(tx store.ReadTx) (err error) {
				stored, err = tx.Count(store.KindLoadBalancer, store.Filter{})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if stored != n-failing {
				t.Errorf("%d load balancers stored, want %d", stored, n-failing)
			}
		})
	}
}

// TestQueuedCommitPanicStaysWithItsRequest: a change whose work panics in
// a shared transaction panics in its own caller's goroutine (where
// net/http would recover it), not in the runner's, and the changes
// beside it commit.
func TestQueuedCommitPanicStaysWithItsRequest(t *testing.T) {
	for _, eng := range singleWriters(t) {
		t.Run(eng.name, func(t *testing.T) {
			ch := store.ChangesOf(eng.st)
			before := eng.g.Transactions()
			release, first := holdFirst(t, ch, "first")
			var wg sync.WaitGroup
			var recovered any
			wg.Go(func() {
				defer func() { recovered = recover() }()
				_, _ = ch.Change(context.Background(), func(store.Tx) error { panic("boom") })
			})
			testutil.Eventually(t, 5*time.Second, "change queued", func() (bool, string) { return eng.g.Waiting() == 1, "" })
			var after store.Commit
			var afterErr error
			var seen int
			wg.Go(func() { after, afterErr = ch.Change(context.Background(), createChange("after", &seen)) })
			testutil.Eventually(t, 5*time.Second, "change queued", func() (bool, string) { return eng.g.Waiting() == 2, "" })
			release()
			wg.Wait()
			if recovered != "boom" {
				t.Errorf("the panicking change's goroutine recovered %v, want boom", recovered)
			}
			if err := <-first; err != nil || afterErr != nil {
				t.Fatalf("the other changes: %v, %v", err, afterErr)
			}
			if after.Changes["after"] == 0 {
				t.Errorf("the change after the panic: commit %v", after.Changes)
			}
			// The first, the group that panicked, each of it alone.
			if u := eng.g.Transactions() - before; u != 4 {
				t.Errorf("%d write transactions, want 4", u)
			}
		})
	}
}

// TestChangesRunAloneOnPostgreSQL: PostgreSQL's writers run in parallel,
// so a change does not wait for another to commit.
func TestChangesRunAloneOnPostgreSQL(t *testing.T) {
	for _, e := range storetest.Engines(t) {
		if e.Name != "postgres" {
			continue
		}
		ch := store.ChangesOf(e.Store)
		release, first := holdFirst(t, ch, "slow")
		type answer struct {
			c   store.Commit
			err error
		}
		fast := make(chan answer, 1)
		go func() {
			var seen int
			c, err := ch.Change(context.Background(), createChange("fast", &seen))
			fast <- answer{c, err}
		}()
		select {
		case a := <-fast:
			if a.err != nil {
				t.Fatal(a.err)
			}
			if a.c.Changes["fast"] == 0 || len(a.c.Changes) != 1 {
				t.Errorf("commit %v, want the fast change's own entry", a.c.Changes)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a change waited for another's transaction")
		}
		release()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
	}
}

// TestBuiltWhileLastChange: on SQLite, whose one writer knows every load
// balancer's last change, what a change built is given back to its
// completion once, while nothing changed that load balancer since (a
// change of another does not count); a change in between (a health
// verdict) has the completion read. Stores that cannot tell (memory,
// PostgreSQL, where other replicas write) keep nothing and never copy.
func TestBuiltWhileLastChange(t *testing.T) {
	engines := []storetest.Engine{{Name: "memory", Store: memstore.New()}}
	engines = append(engines, storetest.Engines(t)...)
	ctx := context.Background()
	for _, e := range engines {
		t.Run(e.Name, func(t *testing.T) {
			keeps := e.Name == "sqlite"
			ch := store.ChangesOf(e.Store)
			var clones int
			create := func(lb string) store.Pending {
				t.Helper()
				return createKept(t, ch, lb, func() { clones++ })
			}
			built := func(p store.Pending) (v any, ok bool) {
				t.Helper()
				if _, err := e.Store.Update(ctx, func(tx store.Tx) error {
					v, ok = ch.Built(tx, p)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				return v, ok
			}
			touch := func(lb string) {
				t.Helper()
				if _, err := e.Store.Update(ctx, func(tx store.Tx) error { tx.Touch(lb); return nil }); err != nil {
					t.Fatal(err)
				}
			}

			p := create("x")
			touch("y") // another load balancer's change
			v, ok := built(p)
			if ok != keeps || (keeps && v != "built x") {
				t.Errorf("built after another's change: %v, %v; want kept %v", v, ok, keeps)
			}
			if _, again := built(p); again {
				t.Error("what was kept was given twice")
			}

			p = create("x")
			touch("x") // a verdict, say
			if v, ok := built(p); ok {
				t.Errorf("built after a change of its load balancer: %v", v)
			}

			// A change without an entry cannot be compared: not kept.
			ch.Keep(store.Pending{LoadBalancerID: "z", Owner: "r1"}, func() any { clones++; return "z" })
			if _, ok := built(store.Pending{LoadBalancerID: "z", Owner: "r1"}); ok {
				t.Error("a change without a change-log entry had its tree kept")
			}

			if want := map[bool]int{true: 2, false: 0}[keeps]; clones != want {
				t.Errorf("%d copies made, want %d", clones, want)
			}
			if sq, isSQL := e.Store.(*store.SQL); isSQL && keeps {
				if n := store.GroupedOf(sq).Kept(); n != 0 {
					t.Errorf("%d values kept after every completion", n)
				}
				if n := store.GroupedOf(sq).BuiltUsed(); n != 1 {
					t.Errorf("%d values given back, want 1", n)
				}
			}
		})
	}
}

// TestChangesOfAWrapper: a store that wraps another (embedding Store)
// runs its changes alone through its own Update, whatever the store
// inside does.
func TestChangesOfAWrapper(t *testing.T) {
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			w := &countingStore{Store: e.Store}
			ch := store.ChangesOf(w)
			var seen int
			if _, err := ch.Change(context.Background(), createChange("w", &seen)); err != nil {
				t.Fatal(err)
			}
			if w.updates != 1 {
				t.Errorf("%d write transactions through the wrapper, want 1", w.updates)
			}
			p := store.Pending{LoadBalancerID: "w", Owner: "r1", Change: 1}
			ch.Keep(p, func() any { t.Error("a wrapper's change copied"); return nil })
			if _, ok := ch.Built(nil, p); ok {
				t.Error("a wrapper's change kept")
			}
			if ch.Shared() {
				t.Error("a wrapper's changes said to share transactions")
			}
			// The store itself shares them where it has one writer.
			if got, want := store.ChangesOf(e.Store).Shared(), e.Name == "sqlite"; got != want {
				t.Errorf("%s: changes shared %v, want %v", e.Name, got, want)
			}
		})
	}
}

type countingStore struct {
	store.Store
	updates int
}

func (c *countingStore) Update(ctx context.Context, fn func(tx store.Tx) error) (store.Commit, error) {
	c.updates++
	return c.Store.Update(ctx, fn)
}

// TestBuiltNotAfterAChangeOfTheSameTransaction: a completion that shares
// its transaction with changes before it (SQLite groups every change
// waiting for the writer) is not given the kept tree when one of those
// changes touched its load balancer, whose entry is written only at the
// commit; one that touched another load balancer does not count.
func TestBuiltNotAfterAChangeOfTheSameTransaction(t *testing.T) {
	for _, e := range storetest.Engines(t) {
		if e.Name != "sqlite" {
			continue
		}
		sq := e.Store.(*store.SQL)
		ch := store.ChangesOf(sq)
		ctx := context.Background()
		create := func(lb string) store.Pending { return createKept(t, ch, lb, func() {}) }
		for _, tc := range []struct {
			touched string
			want    bool
		}{{"x", false}, {"y", true}} {
			p := create("x")
			release, first := holdFirst(t, ch, "hold-"+tc.touched)
			var wg sync.WaitGroup
			wg.Go(func() {
				if _, err := ch.Change(ctx, func(tx store.Tx) error { tx.Touch(tc.touched); return nil }); err != nil {
					t.Error(err)
				}
			})
			testutil.Eventually(t, 5*time.Second, "change queued", func() (bool, string) {
				return store.GroupedOf(sq).Waiting() == 1, fmt.Sprint(store.GroupedOf(sq).Waiting())
			})
			var got bool
			before := store.GroupedOf(sq).Transactions()
			wg.Go(func() {
				if _, err := ch.Change(ctx, func(tx store.Tx) error { _, got = ch.Built(tx, p); return nil }); err != nil {
					t.Error(err)
				}
			})
			testutil.Eventually(t, 5*time.Second, "completion queued", func() (bool, string) {
				return store.GroupedOf(sq).Waiting() == 2, fmt.Sprint(store.GroupedOf(sq).Waiting())
			})
			release()
			wg.Wait()
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			if n := store.GroupedOf(sq).Transactions() - before; n != 1 {
				t.Fatalf("the two queued changes took %d transactions, want one shared", n)
			}
			if got != tc.want {
				t.Errorf("kept tree given after a change of %s in the same transaction: %v, want %v", tc.touched, got, tc.want)
			}
		}
	}
}

// createKept commits a change pending on lb and offers its tree ("built
// lb") for the completion; copied is called when the store keeps it.
func createKept(t *testing.T, ch store.Changes, lb string, copied func()) store.Pending {
	t.Helper()
	c, err := ch.Change(context.Background(), func(tx store.Tx) error { tx.Pend(lb, "r1"); return nil })
	if err != nil {
		t.Fatal(err)
	}
	p := store.Pending{LoadBalancerID: lb, Owner: "r1", Change: c.Changes[lb]}
	ch.Keep(p, func() any { copied(); return "built " + lb })
	return p
}
