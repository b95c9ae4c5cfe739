package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
)

// GetForShare lets sharers and plain updates through and holds off a
// delete until the sharer ends.
func TestGetForShare(t *testing.T) {
	ctx := context.Background()
	for _, e := range everyStore(t) {
		t.Run(e.Name, func(t *testing.T) {
			if _, err := e.Store.Update(ctx, func(tx store.Tx) error { return tx.Insert(rec(store.KindSubnet, "x", "", "v1")) }); err != nil {
				t.Fatal(err)
			}
			if e.Name != "postgres" {
				// One writer at a time: a plain read of the record.
				_, err := e.Store.Update(ctx, func(tx store.Tx) error {
					r, err := tx.GetForShare(store.KindSubnet, "x")
					if err == nil && string(r.Data) != "v1" {
						err = fmt.Errorf("read %q", r.Data)
					}
					if _, err := tx.GetForShare(store.KindSubnet, "nope"); !errors.Is(err, store.ErrNotFound) {
						return fmt.Errorf("missing record: %v", err)
					}
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			started, release, doneA := held(e.Store, func(tx store.Tx) error {
				_, err := tx.GetForShare(store.KindSubnet, "x")
				return err
			}, false)
			<-started
			// A second sharer that also updates the record does not wait.
			shareCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if _, err := e.Store.Update(shareCtx, func(tx store.Tx) error {
				r, err := tx.GetForShare(store.KindSubnet, "x")
				if err != nil {
					return err
				}
				r.Data = []byte("v2")
				return tx.Update(r)
			}); err != nil {
				t.Fatalf("second sharer: %v", err)
			}
			doneC := make(chan error, 1)
			go func() {
				_, err := e.Store.Update(ctx, func(tx store.Tx) error { return tx.Delete(store.KindSubnet, "x") })
				doneC <- err
			}()
			waitForLockWait(t, e.DSN)
			notDone(t, doneC, "the delete")
			close(release)
			if err := <-doneA; err != nil {
				t.Fatal(err)
			}
			if err := <-doneC; err != nil {
				t.Fatalf("delete after the sharer ended: %v", err)
			}
		})
	}
}

func TestOnRollback(t *testing.T) {
	ctx := context.Background()
	for _, e := range everyStore(t) {
		t.Run(e.Name, func(t *testing.T) {
			var undone []string
			boom := errors.New("boom")
			_, err := e.Store.Update(ctx, func(tx store.Tx) error {
				tx.OnRollback(func() { undone = append(undone, "failed") })
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatal(err)
			}
			if _, err := e.Store.Update(ctx, func(tx store.Tx) error {
				tx.OnRollback(func() { undone = append(undone, "committed") })
				return tx.Claim("s", "k")
			}); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(undone) != "[failed]" {
				t.Fatalf("rollback hooks called: %v, want only the failed transaction's", undone)
			}
		})
	}
}
