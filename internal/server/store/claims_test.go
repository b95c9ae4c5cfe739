package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// everyStore is every engine plus the in-memory store, which the layers
// above test against and so must behave the same.
func everyStore(t *testing.T) []storetest.Engine {
	return append(storetest.Engines(t), storetest.Engine{Name: "memstore", Store: memstore.New()})
}

func claimed(t *testing.T, s store.Store, space, from string, limit int) []string {
	t.Helper()
	var got []string
	if err := s.View(context.Background(), func(tx store.ReadTx) (err error) {
		got, err = tx.Claimed(space, from, limit)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestClaims(t *testing.T) {
	ctx := context.Background()
	for _, e := range everyStore(t) {
		t.Run(e.Name, func(t *testing.T) {
			s := e.Store
			// Bytewise order whatever the database's locale: "0" < "B" < "_" < "a".
			if _, err := s.Update(ctx, func(tx store.Tx) error {
				for _, k := range []string{"a", "_", "B", "0"} {
					if err := tx.Claim("s1", k); err != nil {
						return err
					}
				}
				return tx.Claim("s2", "a") // spaces are separate
			}); err != nil {
				t.Fatal(err)
			}
			if got := claimed(t, s, "s1", "", 10); !slices.Equal(got, []string{"0", "B", "_", "a"}) {
				t.Fatalf("claimed in s1: %q", got)
			}
			if got := claimed(t, s, "s1", "C", 1); !slices.Equal(got, []string{"_"}) {
				t.Fatalf("first claimed from C: %q", got)
			}
			// A conflict leaves the transaction usable; a rollback undoes claims.
			boom := errors.New("boom")
			_, err := s.Update(ctx, func(tx store.Tx) error {
				if err := tx.Claim("s1", "a"); !errors.Is(err, store.ErrConflict) {
					t.Errorf("claiming a held key: %v", err)
				}
				if err := tx.Claim("s1", "b"); err != nil {
					return err
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatal(err)
			}
			if got := claimed(t, s, "s1", "a", 10); !slices.Equal(got, []string{"a"}) {
				t.Fatalf("after rollback: %q", got)
			}
			_, err = s.Update(ctx, func(tx store.Tx) error {
				if err := tx.Claim("s1", "a"); !errors.Is(err, store.ErrConflict) {
					return fmt.Errorf("claiming a held key: %v", err)
				}
				if err := tx.Insert(rec(store.KindPool, "after-conflict", "lb", "{}")); err != nil {
					return fmt.Errorf("write after a conflict: %w", err)
				}
				if err := tx.Unclaim("s1", "B"); err != nil {
					return err
				}
				if err := tx.Unclaim("s1", "B"); !errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("unclaiming a free key: %v", err)
				}
				if err := tx.Claim("s1", "c"); err != nil {
					return err
				}
				// The transaction sees its own changes.
				got, err := tx.Claimed("s1", "", 10)
				if err == nil && !slices.Equal(got, []string{"0", "_", "a", "c"}) {
					err = fmt.Errorf("claimed inside the transaction: %q", got)
				}
				if n, cerr := tx.CountClaimed("s1", "", "z"); err == nil && (n != 4 || cerr != nil) {
					err = fmt.Errorf("count inside the transaction: %d %v", n, cerr)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := claimed(t, s, "s1", "", 10); !slices.Equal(got, []string{"0", "_", "a", "c"}) {
				t.Fatalf("after commit: %q", got)
			}
			if got := claimed(t, s, "s2", "", 10); !slices.Equal(got, []string{"a"}) {
				t.Fatalf("s2: %q", got)
			}
			for _, tc := range []struct {
				space, from, to string
				want            int
			}{
				{"s1", "", "z", 4}, {"s1", "0", "a", 3}, {"s1", "1", "b", 2}, {"s1", "b", "a", 0}, {"s2", "a", "a", 1}, {"s3", "", "z", 0},
			} {
				var n int
				err := s.View(ctx, func(tx store.ReadTx) (err error) {
					n, err = tx.CountClaimed(tc.space, tc.from, tc.to)
					return err
				})
				if err != nil || n != tc.want {
					t.Errorf("count %s [%s, %s]: %d %v, want %d", tc.space, tc.from, tc.to, n, err, tc.want)
				}
			}
		})
	}
}

// held runs fn in a transaction that stays open until release is closed,
// then commits, or rolls back if rollback is set. started is closed once
// fn has run.
func held(s store.Store, fn func(tx store.Tx) error, rollback bool) (started, release chan struct{}, done chan error) {
	started, release, done = make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := s.Update(context.Background(), func(tx store.Tx) error {
			if err := fn(tx); err != nil {
				return err
			}
			close(started)
			<-release
			if rollback {
				return errRolledBack
			}
			return nil
		})
		done <- err
	}()
	return started, release, done
}

var errRolledBack = errors.New("rolled back on purpose")

// waitForLockWait waits until a session of the database waits on a lock.
func waitForLockWait(t *testing.T, dsn string) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	testutil.Eventually(t, 10*time.Second, "a session waiting on a lock", func() (bool, string) {
		var n int
		err := db.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&n)
		return err == nil && n > 0, fmt.Sprintf("%d waiting, %v", n, err)
	})
}

func notDone(t *testing.T, done chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s finished while it should wait: %v", what, err)
	default:
	}
}

// On PostgreSQL a claim of a key that another transaction claimed but has
// not committed waits for it, then conflicts (commit) or succeeds
// (rollback); either way the waiting transaction goes on.
func TestClaimWaitsForConcurrentClaimer(t *testing.T) {
	for _, e := range storetest.Engines(t) {
		if e.Name != "postgres" {
			continue // SQLite has one writer at a time: nothing to wait for
		}
		for _, rollback := range []bool{false, true} {
			t.Run(fmt.Sprintf("first rolls back %v", rollback), func(t *testing.T) {
				key := fmt.Sprint("k-", rollback)
				started, release, doneA := held(e.Store, func(tx store.Tx) error { return tx.Claim("s", key) }, rollback)
				<-started
				doneB := make(chan error, 1)
				var first error
				go func() {
					_, err := e.Store.Update(context.Background(), func(tx store.Tx) error {
						first = tx.Claim("s", key)
						return tx.Claim("s", key+"-next")
					})
					doneB <- err
				}()
				waitForLockWait(t, e.DSN)
				notDone(t, doneB, "the second claim")
				close(release)
				if err := <-doneA; (err != nil) != rollback {
					t.Fatalf("first transaction: %v", err)
				}
				if err := <-doneB; err != nil {
					t.Fatalf("second transaction: %v", err)
				}
				if rollback != (first == nil) || (!rollback && !errors.Is(first, store.ErrConflict)) {
					t.Fatalf("second claim after the first transaction ended (rolled back %v): %v", rollback, first)
				}
				if got := claimed(t, e.Store, "s", key, 10); !slices.Equal(got, []string{key, key + "-next"}) {
					t.Fatalf("claimed: %q", got)
				}
			})
		}
	}
}
