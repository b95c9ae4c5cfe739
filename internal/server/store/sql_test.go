package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func rec(kind store.Kind, id, lb, data string) store.Record {
	return store.Record{Kind: kind, ID: id, ProjectID: "p1", LoadBalancerID: lb, Data: []byte(data)}
}

func TestCRUDAndLog(t *testing.T) {
	ctx := context.Background()
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			s := e.Store
			first, err := s.Update(ctx, func(tx store.Tx) error {
				for i, id := range []string{"b", "a", "c"} {
					r := rec(store.KindListener, id, "lb1", fmt.Sprintf(`{"n":%d}`, i))
					if id == "c" {
						r.LoadBalancerID = "lb2"
					}
					if err := tx.Insert(r); err != nil {
						return err
					}
				}
				tx.Touch("lb1")
				tx.Touch("lb1")
				tx.Touch("lb2")
				return nil
			})
			if err != nil || len(first.Changes) != 2 {
				t.Fatalf("first update: %+v, %v; want an entry for lb1 and one for lb2", first, err)
			}
			// A failed transaction changes nothing and logs nothing.
			boom := errors.New("boom")
			_, err = s.Update(ctx, func(tx store.Tx) error {
				if err := tx.Insert(rec(store.KindListener, "d", "lb1", "{}")); err != nil {
					return err
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("rollback error: %v", err)
			}
			_, err = s.Update(ctx, func(tx store.Tx) error {
				for _, tc := range []struct {
					err  error
					want error
				}{
					{tx.Insert(rec(store.KindListener, "a", "lb1", "{}")), store.ErrConflict},
					{tx.Update(rec(store.KindListener, "zz", "lb1", "{}")), store.ErrNotFound},
					{tx.Delete(store.KindListener, "zz"), store.ErrNotFound},
				} {
					if !errors.Is(tc.err, tc.want) {
						t.Errorf("got %v, want %v", tc.err, tc.want)
					}
				}
				if _, err := tx.Get(store.KindPool, "a"); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("kind is part of the key: %v", err)
				}
				r := rec(store.KindListener, "a", "lb1", `{"n":"updated"}`)
				if err := tx.Update(r); err != nil {
					return err
				}
				tx.Touch("lb1")
				return tx.Delete(store.KindListener, "b")
			})
			if err != nil {
				t.Fatal(err)
			}
			err = s.View(ctx, func(tx store.ReadTx) error {
				got, err := tx.List(store.KindListener, store.Filter{LoadBalancerID: "lb1"})
				if err != nil {
					return err
				}
				if len(got) != 1 || got[0].ID != "a" || string(got[0].Data) != `{"n":"updated"}` {
					t.Errorf("lb1 listeners: %+v", got)
				}
				n, err := tx.Count(store.KindListener, store.Filter{ProjectID: "p1"})
				if n != 2 || err != nil {
					t.Errorf("count %d %v, want 2", n, err)
				}
				_, err = tx.Get(store.KindListener, "d")
				if !errors.Is(err, store.ErrNotFound) {
					t.Errorf("rolled-back insert visible: %v", err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(logged(t, s, 0)); got != "[1:lb1 2:lb2 3:lb1]" {
				t.Errorf("log: %s, want [1:lb1 2:lb2 3:lb1]", got)
			}
			if got := fmt.Sprint(logged(t, s, 2)); got != "[3:lb1]" {
				t.Errorf("log after 2: %s, want [3:lb1]", got)
			}
		})
	}
}

func TestListOrderIsCreation(t *testing.T) {
	ctx := context.Background()
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			for i := 0; i < 20; i++ {
				id := fmt.Sprintf("id-%02d", 19-i) // ids sort opposite to creation
				if _, err := e.Store.Update(ctx, func(tx store.Tx) error { return tx.Insert(rec(store.KindPool, id, "lb", "{}")) }); err != nil {
					t.Fatal(err)
				}
			}
			err := e.Store.View(ctx, func(tx store.ReadTx) error {
				got, err := tx.List(store.KindPool, store.Filter{})
				for i, r := range got {
					if want := fmt.Sprintf("id-%02d", 19-i); r.ID != want {
						t.Errorf("position %d: %s, want %s", i, r.ID, want)
					}
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTestAndSetSerialises is the LBaaS lock: many writers read a status,
// and only one may move it from ACTIVE.
func TestTestAndSetSerialises(t *testing.T) {
	ctx := context.Background()
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			if _, err := e.Store.Update(ctx, func(tx store.Tx) error {
				return tx.Insert(rec(store.KindLoadBalancer, "lb", "lb", "ACTIVE"))
			}); err != nil {
				t.Fatal(err)
			}
			const writers = 16
			var wg sync.WaitGroup
			var mu sync.Mutex
			wins, busy := 0, 0
			for i := 0; i < writers; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := e.Store.Update(ctx, func(tx store.Tx) error {
						r, err := tx.GetForUpdate(store.KindLoadBalancer, "lb")
						if err != nil {
							return err
						}
						if string(r.Data) != "ACTIVE" {
							return errBusy
						}
						r.Data = []byte("PENDING_UPDATE")
						return tx.Update(r)
					})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						wins++
					case errors.Is(err, errBusy):
						busy++
					default:
						t.Errorf("writer: %v", err)
					}
				}()
			}
			wg.Wait()
			if wins != 1 || busy != writers-1 {
				t.Errorf("%d winners and %d refused, want 1 and %d", wins, busy, writers-1)
			}
		})
	}
}

var errBusy = errors.New("busy")

func TestConcurrentWritersAllLogged(t *testing.T) {
	ctx := context.Background()
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			const n = 40
			ids := make(chan int64, n)
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					lb := fmt.Sprintf("lb%d", i)
					c, err := e.Store.Update(ctx, func(tx store.Tx) error {
						tx.Touch(lb)
						return tx.Insert(rec(store.KindMember, fmt.Sprintf("m%d", i), lb, "{}"))
					})
					if err != nil {
						t.Error(err)
					}
					ids <- c.Changes[lb]
				}(i)
			}
			wg.Wait()
			close(ids)
			entries := logged(t, e.Store, 0)
			byID := map[int64]int64{}
			for i, en := range entries {
				if en.Revision != int64(i+1) {
					t.Errorf("entry %d has revision %d: revisions must be dense from 1", i, en.Revision)
				}
				byID[en.ID] = en.Revision
			}
			for id := range ids {
				if byID[id] == 0 {
					t.Errorf("committed entry %d missing from the log", id)
				}
			}
			if len(entries) != n {
				t.Errorf("%d entries, want %d", len(entries), n)
			}
		})
	}
}

func TestSQLiteSurvivesReopenAndMigratesOnce(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	path := filepath.Join(t.TempDir(), "flowlb.db")
	s, err := store.Open(ctx, path, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, func(tx store.Tx) error { return tx.Insert(rec(store.KindFlavor, "f", "", `{"x":1}`)) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = store.Open(ctx, "sqlite://"+path, log)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if _, err := s.Sequence(ctx); err != nil {
		t.Fatal(err)
	}
	if _, head, err := s.LogBounds(ctx); err != nil || head != 0 {
		t.Errorf("log head after reopen %d (%v), want 0: the flavor touched no load balancer", head, err)
	}
	err = s.View(ctx, func(tx store.ReadTx) error {
		r, err := tx.Get(store.KindFlavor, "f")
		if err == nil && string(r.Data) != `{"x":1}` {
			t.Errorf("data after reopen: %s", r.Data)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestInsertMany(t *testing.T) {
	ctx := context.Background()
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			var batch []store.Record
			for i := 0; i < 1200; i++ { // more than one chunk
				batch = append(batch, rec(store.KindMember, fmt.Sprintf("m%04d", i), "lb", "{}"))
			}
			if _, err := e.Store.Update(ctx, func(tx store.Tx) error { return tx.InsertMany(batch) }); err != nil {
				t.Fatal(err)
			}
			_, err := e.Store.Update(ctx, func(tx store.Tx) error {
				return tx.InsertMany([]store.Record{rec(store.KindMember, "new", "lb", "{}"), rec(store.KindMember, "m0001", "lb", "{}")})
			})
			if !errors.Is(err, store.ErrConflict) {
				t.Fatalf("batch with an existing id: %v, want ErrConflict", err)
			}
			for i := range batch {
				batch[i].Data = []byte(fmt.Sprintf(`{"i":%d}`, i))
			}
			if _, err := e.Store.Update(ctx, func(tx store.Tx) error { return tx.UpdateMany(batch) }); err != nil {
				t.Fatalf("update many: %v", err)
			}
			_, err = e.Store.Update(ctx, func(tx store.Tx) error {
				return tx.UpdateMany([]store.Record{rec(store.KindMember, "m0001", "lb", "{}"), rec(store.KindMember, "missing", "lb", "{}")})
			})
			if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("update of a missing record: %v, want ErrNotFound", err)
			}
			// UpdateMany keeps a record's placement: a record sent with
			// another load balancer and parent stays where it was.
			moved := rec(store.KindMember, "m0002", "other-lb", `{"i":2}`)
			moved.ParentID = "other-pool"
			if _, err := e.Store.Update(ctx, func(tx store.Tx) error { return tx.UpdateMany([]store.Record{moved}) }); err != nil {
				t.Fatalf("update many with another placement: %v", err)
			}
			err = e.Store.View(ctx, func(tx store.ReadTx) error {
				if n, err := tx.Count(store.KindMember, store.Filter{ParentID: "other-pool"}); err != nil || n != 0 {
					t.Errorf("members under the other parent: %d, %v; want 0", n, err)
				}
				got, err := tx.List(store.KindMember, store.Filter{LoadBalancerID: "lb"})
				if len(got) != 1200 {
					t.Errorf("%d members, want 1200 (the failed batch must add none)", len(got))
				}
				for i, r := range got {
					if want := fmt.Sprintf("m%04d", i); r.ID != want {
						t.Fatalf("position %d: %s, want %s (input order)", i, r.ID, want)
					}
					if want := fmt.Sprintf(`{"i":%d}`, i); string(r.Data) != want {
						t.Fatalf("%s: data %s, want %s", r.ID, r.Data, want)
					}
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestManyInOneTransaction: batches of a few rows and of many (which
// PostgreSQL writes by COPY): a conflicting InsertMany gives ErrConflict
// and, its transaction abandoned, adds none; two UpdateMany in one
// transaction, and one after rolled-back transactions on the same
// connections, each update their own rows only (PostgreSQL stages many
// rows in a temporary table); DeleteMany takes any number of ids.
func TestManyInOneTransaction(t *testing.T) {
	ctx := context.Background()
	for _, e := range storetest.Engines(t) {
		for _, n := range []int{2, 100} {
			t.Run(fmt.Sprintf("%s/%d", e.Name, n), func(t *testing.T) {
				s := e.Store
				lb := fmt.Sprintf("lb%d", n)
				batch := func(prefix, data string) []store.Record {
					var rs []store.Record
					for i := range n {
						rs = append(rs, rec(store.KindMember, fmt.Sprintf("%s-%s%03d", lb, prefix, i), lb, data))
					}
					return rs
				}
				if _, err := s.Update(ctx, func(tx store.Tx) error { return tx.InsertMany(batch("a", `{"v":0}`)) }); err != nil {
					t.Fatal(err)
				}
				conflicting := append(batch("c", "{}"), batch("a", "{}")[n-1])
				if _, err := s.Update(ctx, func(tx store.Tx) error { return tx.InsertMany(conflicting) }); !errors.Is(err, store.ErrConflict) {
					t.Fatalf("batch with an existing id: %v, want ErrConflict", err)
				}
				if _, err := s.Update(ctx, func(tx store.Tx) error {
					if err := tx.InsertMany(batch("d", `{"v":0}`)); err != nil {
						return err
					}
					if err := tx.UpdateMany(batch("a", `{"v":1}`)); err != nil {
						return err
					}
					return tx.UpdateMany(batch("d", `{"v":2}`))
				}); err != nil {
					t.Fatal(err)
				}
				// Rolled back: their staged rows must not reach a later
				// update on the same connection.
				failed := errors.New("roll back")
				for range 3 {
					if _, err := s.Update(ctx, func(tx store.Tx) error {
						if err := tx.UpdateMany(batch("a", `{"v":9}`)); err != nil {
							return err
						}
						return failed
					}); !errors.Is(err, failed) {
						t.Fatalf("rolled-back update: %v", err)
					}
				}
				if _, err := s.Update(ctx, func(tx store.Tx) error { return tx.UpdateMany(batch("d", `{"v":3}`)) }); err != nil {
					t.Fatal(err)
				}
				missing := append(batch("d", "{}"), rec(store.KindMember, "missing", lb, "{}"))
				if _, err := s.Update(ctx, func(tx store.Tx) error { return tx.UpdateMany(missing) }); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("update with a missing record: %v, want ErrNotFound", err)
				}
				list := func() map[string]string {
					got := map[string]string{}
					if err := s.View(ctx, func(tx store.ReadTx) error {
						rs, err := tx.List(store.KindMember, store.Filter{LoadBalancerID: lb})
						for _, r := range rs {
							got[r.ID] = string(r.Data)
						}
						return err
					}); err != nil {
						t.Fatal(err)
					}
					return got
				}
				want := map[string]string{}
				for _, r := range batch("a", `{"v":1}`) {
					want[r.ID] = string(r.Data)
				}
				for _, r := range batch("d", `{"v":3}`) {
					want[r.ID] = string(r.Data)
				}
				if got := list(); !maps.Equal(got, want) {
					t.Errorf("members %v, want %v (the conflicting batch adds none)", got, want)
				}
				var ids []string
				for _, r := range batch("d", "") {
					ids = append(ids, r.ID)
					delete(want, r.ID)
				}
				if _, err := s.Update(ctx, func(tx store.Tx) error { return tx.DeleteMany(store.KindMember, append(ids, "gone")) }); err != nil {
					t.Fatal(err)
				}
				if got := list(); !maps.Equal(got, want) {
					t.Errorf("after deleting the d batch: %v, want %v", got, want)
				}
			})
		}
	}
}

// TestPostgresObjectsLayout: on PostgreSQL the objects' pages are filled
// to half (room for heap-only updates) and the parent index leaves
// members out, yet a lookup by parent of another kind still uses it.
func TestPostgresObjectsLayout(t *testing.T) {
	ctx := context.Background()
	for _, e := range storetest.Engines(t) {
		if e.Name != "postgres" {
			continue
		}
		db, err := sql.Open("pgx", e.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var opts string
		if err := db.QueryRowContext(ctx, "SELECT array_to_string(reloptions, ',') FROM pg_class WHERE relname = 'objects'").Scan(&opts); err != nil {
			t.Fatal(err)
		}
		if opts != "fillfactor=50" {
			t.Errorf("objects' options %q, want fillfactor=50", opts)
		}
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// Any usable index beats a scan; the parent index is the one
		// that matches both conditions.
		if _, err := conn.ExecContext(ctx, "SET enable_seqscan = off"); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			kind store.Kind
			uses bool
		}{{store.KindPort, true}, {store.KindSecurityGroupRule, true}, {store.KindMember, false}} {
			var plan strings.Builder
			rows, err := conn.QueryContext(ctx, "EXPLAIN SELECT id FROM objects WHERE kind = '"+string(tc.kind)+"' AND parent_id = $1", "x")
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan.WriteString(line + "\n")
			}
			rows.Close()
			if got := strings.Contains(plan.String(), "objects_parent"); got != tc.uses {
				t.Errorf("%s by parent uses objects_parent: %v, want %v\n%s", tc.kind, got, tc.uses, plan.String())
			}
		}
	}
}

// TestNameFilter: a load balancer's name is a column, so that a lookup by
// name is an index lookup; a database from before the column gets it
// filled from the documents when it is opened.
func TestNameFilter(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			lb := func(id, name string) store.Record {
				r := rec(store.KindLoadBalancer, id, id, `{"name":"`+name+`"}`)
				r.Name = name
				return r
			}
			if _, err := e.Store.Update(ctx, func(tx store.Tx) error {
				return tx.InsertMany([]store.Record{lb("lb1", "web"), lb("lb2", "db"), lb("lb3", "web")})
			}); err != nil {
				t.Fatal(err)
			}
			renamed := lb("lb2", "web")
			if _, err := e.Store.Update(ctx, func(tx store.Tx) error { return tx.UpdateMany([]store.Record{renamed}) }); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Store.Update(ctx, func(tx store.Tx) error { return tx.Update(lb("lb3", "cache")) }); err != nil {
				t.Fatal(err)
			}
			names := func(s store.Store, f store.Filter) []string {
				var ids []string
				err := s.View(ctx, func(tx store.ReadTx) error {
					rs, err := tx.List(store.KindLoadBalancer, f)
					for _, r := range rs {
						ids = append(ids, r.ID+"="+r.Name)
					}
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				return ids
			}
			for _, tc := range []struct {
				f    store.Filter
				want string
			}{
				{store.Filter{Name: "web"}, "[lb1=web lb2=web]"},
				{store.Filter{Name: "cache"}, "[lb3=cache]"},
				{store.Filter{Name: "db"}, "[]"},
				{store.Filter{Name: "web", LoadBalancerID: "lb2"}, "[lb2=web]"},
				{store.Filter{Name: "web", ProjectID: "p2"}, "[]"},
			} {
				if got := fmt.Sprint(names(e.Store, tc.f)); got != tc.want {
					t.Errorf("filter %+v: %s, want %s", tc.f, got, tc.want)
				}
			}

			// A database from before the name column: the column empty and
			// the backfill migration not applied.
			driver, dsn := "sqlite", "file:"+e.DSN
			if e.Name == "postgres" {
				driver, dsn = "pgx", e.DSN
			}
			db, err := sql.Open(driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"UPDATE objects SET name = ''", "DELETE FROM schema_migrations WHERE version = 3"} {
				if _, err := db.Exec(q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			db.Close()
			again, err := store.Open(ctx, e.DSN, log)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			if got := fmt.Sprint(names(again, store.Filter{Name: "web"})); got != "[lb1=web lb2=web]" {
				t.Errorf("after the backfill: %s, want [lb1=web lb2=web]", got)
			}
		})
	}
}

// Writers that count and then insert under one lock key keep the count
// bounded exactly; a writer holding a key does not hold up another key
// (PostgreSQL; SQLite has one writer anyway).
func TestLockSerialisesCountThenInsert(t *testing.T) {
	ctx := context.Background()
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			const writers, bound = 24, 5
			var wg sync.WaitGroup
			for i := range writers {
				wg.Go(func() {
					_, err := e.Store.Update(ctx, func(tx store.Tx) error {
						if err := tx.Lock("quota:p1"); err != nil {
							return err
						}
						n, err := tx.Count(store.KindListener, store.Filter{ProjectID: "p1"})
						if err != nil || n >= bound {
							return err
						}
						return tx.Insert(rec(store.KindListener, fmt.Sprint("l", i), "lb", "{}"))
					})
					if err != nil {
						t.Errorf("writer %d: %v", i, err)
					}
				})
			}
			wg.Wait()
			var n int
			if err := e.Store.View(ctx, func(tx store.ReadTx) (err error) {
				n, err = tx.Count(store.KindListener, store.Filter{ProjectID: "p1"})
				return err
			}); err != nil || n != bound {
				t.Fatalf("%d listeners (%v), want exactly %d", n, err, bound)
			}
			if e.Name != "postgres" {
				return
			}
			held, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				_, err := e.Store.Update(ctx, func(tx store.Tx) error {
					if err := tx.Lock("a"); err != nil {
						return err
					}
					close(held)
					<-release
					return nil
				})
				if err != nil {
					t.Errorf("holder: %v", err)
				}
			}()
			<-held
			// The holder ends before the test does (the store closes after).
			defer func() { close(release); <-done }()
			bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if _, err := e.Store.Update(bctx, func(tx store.Tx) error { return tx.Lock("b") }); err != nil {
				t.Fatalf("lock b while a is held: %v", err)
			}
		})
	}
}

// BenchmarkInsertThenUpdateMany: 20,000 members written in one
// transaction and rewritten in another (a batch member update and its
// completion), on every engine.
func BenchmarkInsertThenUpdateMany(b *testing.B) {
	ctx := context.Background()
	data := `{"address":"198.18.16.2","protocol_port":8080,"weight":1,"admin_state_up":true,"provisioning_status":"PENDING_CREATE","operating_status":"OFFLINE"}`
	for _, e := range storetest.Engines(b) {
		b.Run(e.Name, func(b *testing.B) {
			for range b.N {
				// Benchmarks run several times on one store: fresh ids each.
				n := rand.Int64()
				batch := make([]store.Record, 20000)
				for i := range batch {
					batch[i] = rec(store.KindMember, fmt.Sprintf("b%d-m%05d", n, i), fmt.Sprintf("lb%d", n), data)
				}
				if _, err := e.Store.Update(ctx, func(tx store.Tx) error { return tx.InsertMany(batch) }); err != nil {
					b.Fatal(err)
				}
				if _, err := e.Store.Update(ctx, func(tx store.Tx) error { return tx.UpdateMany(batch) }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestUpdatePanics: a transaction whose fn panics is rolled back and its
// connection returned, so that the next write gets one (SQLite has a
// single writer connection).
func TestUpdatePanics(t *testing.T) {
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			func() {
				defer func() {
					if recover() == nil {
						t.Error("the panic did not come through")
					}
				}()
				_, _ = e.Store.Update(context.Background(), func(tx store.Tx) error {
					if err := tx.Insert(rec(store.KindMember, "panicked", "lb", "{}")); err != nil {
						return err
					}
					panic("in the transaction")
				})
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := e.Store.Update(ctx, func(tx store.Tx) error { return tx.Insert(rec(store.KindMember, "next", "lb", "{}")) }); err != nil {
				t.Fatalf("the write after the panic: %v", err)
			}
			if err := e.Store.View(ctx, func(tx store.ReadTx) error {
				if _, err := tx.Get(store.KindMember, "panicked"); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("the panicked transaction's insert: %v, want it rolled back", err)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
