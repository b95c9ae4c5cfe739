package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
)

// logEntry is an entry as the tests show it: revision:load balancer.
type logEntry struct {
	store.LogEntry
}

func (e logEntry) String() string { return fmt.Sprintf("%d:%s", e.Revision, e.LoadBalancerID) }

// logged sequences what is committed and returns the log after a
// revision.
func logged(t testing.TB, s store.Store, after int64) []logEntry {
	t.Helper()
	ctx := context.Background()
	for {
		n, err := s.Sequence(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	es, err := s.Log(ctx, after, 100000)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]logEntry, len(es))
	for i, e := range es {
		out[i] = logEntry{e}
	}
	return out
}

func touch(ctx context.Context, s store.Store, lb string) (int64, error) {
	c, err := s.Update(ctx, func(tx store.Tx) error { tx.Touch(lb); return nil })
	return c.Changes[lb], err
}

// TestLogFollowsCommitOrder: an entry inserted first (its id the lowest)
// by a transaction that commits last gets the later revision, and a
// reader that has read the log past the others before it committed still
// reads it: nothing ever appears below a revision already read. A log
// numbered by insertion (a sequence taken before commit) fails this test.
func TestLogFollowsCommitOrder(t *testing.T) {
	ctx := context.Background()
	for _, e := range storetest.Engines(t) {
		if e.Name == "sqlite" {
			// One writer at a time: nothing can commit while a writer is
			// open, so there is no interleaving to test.
			continue
		}
		t.Run(e.Name, func(t *testing.T) {
			s := e.Store
			db, err := sql.Open("pgx", e.DSN)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			// A slow writer, its entry written early in its transaction.
			slow, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var slowID int64
			if err := slow.QueryRowContext(ctx, "INSERT INTO change_log (loadbalancer_id, at) VALUES ('slow', 0) RETURNING id").Scan(&slowID); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 5; i++ {
				id, err := touch(ctx, s, fmt.Sprintf("fast%d", i))
				if err != nil {
					t.Fatal(err)
				}
				if id < slowID {
					t.Fatalf("fast entry %d below the slow one %d: the test proves nothing", id, slowID)
				}
			}
			seen := logged(t, s, 0)
			if got := fmt.Sprint(seen); got != "[1:fast0 2:fast1 3:fast2 4:fast3 5:fast4]" {
				t.Fatalf("log with the slow transaction open: %s", got)
			}
			if err := slow.Commit(); err != nil {
				t.Fatal(err)
			}
			more := logged(t, s, seen[len(seen)-1].Revision)
			if got := fmt.Sprint(more); got != "[6:slow]" {
				t.Fatalf("after the slow commit the reader reads %s, want [6:slow]", got)
			}
		})
	}
}

// TestLogInterleavedWriters: many writers whose transactions are slow and
// fast at random, sequencers running on two connections (two replicas),
// and a reader following the log as it grows: the reader sees every
// committed entry exactly once, in dense revision order, and nothing
// below what it has already read ever appears.
func TestLogInterleavedWriters(t *testing.T) {
	ctx := context.Background()
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			other := e.Store
			if e.Name == "postgres" {
				other = storetest.Reopen(t, e)
			}
			const writers, each = 8, 25
			committed := make(chan int64, writers*each)
			var wg sync.WaitGroup
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for i := 0; i < each; i++ {
						lb := fmt.Sprintf("w%d-%d", w, i)
						c, err := e.Store.Update(ctx, func(tx store.Tx) error {
							tx.Touch(lb)
							if (w+i)%3 == 0 {
								time.Sleep(time.Duration(1+(w*7+i)%5) * time.Millisecond)
							}
							return nil
						})
						if err != nil {
							t.Error(err)
							return
						}
						committed <- c.Changes[lb]
					}
				}(w)
			}
			stop := make(chan struct{})
			var seqWG sync.WaitGroup
			for _, s := range []store.Store{e.Store, other} {
				seqWG.Add(1)
				go func(s store.Store) {
					defer seqWG.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						if _, err := s.Sequence(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				}(s)
			}
			var read []store.LogEntry
			var last int64
			follow := func() {
				es, err := other.Log(ctx, last, 1000)
				if err != nil {
					t.Fatal(err)
				}
				for _, en := range es {
					if en.Revision != last+1 {
						t.Fatalf("read revision %d after %d: a gap", en.Revision, last)
					}
					last = en.Revision
					read = append(read, en)
				}
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
		reading:
			for {
				select {
				case <-done:
					break reading
				default:
					follow()
				}
			}
			close(stop)
			seqWG.Wait()
			logged(t, e.Store, last) // sequence the rest
			follow()
			close(committed)
			seen := map[int64]bool{}
			for _, en := range read {
				if seen[en.ID] {
					t.Errorf("entry %d read twice", en.ID)
				}
				seen[en.ID] = true
			}
			n := 0
			for id := range committed {
				n++
				if !seen[id] {
					t.Errorf("committed entry %d never read", id)
				}
			}
			if len(read) != n || n != writers*each {
				t.Errorf("read %d entries of %d committed, want %d", len(read), n, writers*each)
			}
		})
	}
}

func TestLogCompaction(t *testing.T) {
	ctx := context.Background()
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			s := e.Store
			var ids []int64
			for i := 0; i < 5; i++ {
				id, err := touch(ctx, s, fmt.Sprintf("lb%d", i))
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			logged(t, s, 0)
			if rev, err := s.EntryRevision(ctx, ids[3]); err != nil || rev != 4 {
				t.Errorf("entry %d: revision %d (%v), want 4", ids[3], rev, err)
			}
			if err := s.Compact(ctx, 3); err != nil {
				t.Fatal(err)
			}
			oldest, head, err := s.LogBounds(ctx)
			if err != nil || oldest != 3 || head != 5 {
				t.Errorf("bounds %d, %d (%v), want 3, 5", oldest, head, err)
			}
			if got := fmt.Sprint(logged(t, s, 0)); got != "[4:lb3 5:lb4]" {
				t.Errorf("log after compaction: %s", got)
			}
			if _, err := s.EntryRevision(ctx, ids[0]); err == nil {
				t.Error("a compacted entry still has a revision")
			}
			if ep, err := s.Epoch(ctx); err != nil || ep == "" {
				t.Errorf("epoch %q, %v", ep, err)
			}
		})
	}
}

// TestSQLiteNumbersOwnEntries: on SQLite a commit's entries have their
// revisions when the commit returns, dense after the head, with no
// sequencing left to do; an entry an older server left without a
// revision is numbered when the store opens, before any new one.
func TestSQLiteNumbersOwnEntries(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flowlb.db")
	s, err := store.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Update(ctx, func(tx store.Tx) error { tx.Touch("b"); tx.Touch("a"); return nil })
	if err != nil {
		t.Fatal(err)
	}
	for _, lb := range []string{"a", "b"} {
		if rev, err := s.EntryRevision(ctx, c.Changes[lb]); err != nil || rev == 0 {
			t.Errorf("entry of %s: revision %d (%v) when the commit returned, want one", lb, rev, err)
		}
	}
	if n, err := s.Sequence(ctx); err != nil || n != 0 {
		t.Errorf("Sequence after a commit: %d (%v), want nothing to number", n, err)
	}
	if _, err := touch(ctx, s, "c"); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(logged(t, s, 0)); got != "[1:a 2:b 3:c]" {
		t.Errorf("log %s, want [1:a 2:b 3:c]", got)
	}
	s.Close()

	// An entry without a revision, as a server before self-numbering
	// left one committed but not yet sequenced.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO change_log (loadbalancer_id, at) VALUES ('old', 0)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err = store.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := touch(ctx, s, "new"); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(logged(t, s, 3)); got != "[4:old 5:new]" {
		t.Errorf("after reopening: log %s, want [4:old 5:new]", got)
	}
}
