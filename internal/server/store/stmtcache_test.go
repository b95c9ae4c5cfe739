package store

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
)

// countingConn is a driver connection that counts prepares and closes.
type countingConn struct {
	prepared, closed int
}

type countingStmt struct{ c *countingConn }

func (s countingStmt) Close() error                               { s.c.closed++; return nil }
func (s countingStmt) NumInput() int                              { return -1 }
func (s countingStmt) Exec([]driver.Value) (driver.Result, error) { return driver.RowsAffected(0), nil }
func (s countingStmt) Query([]driver.Value) (driver.Rows, error)  { return nil, fmt.Errorf("no rows") }
func (countingStmt) ExecContext(context.Context, []driver.NamedValue) (driver.Result, error) {
	return driver.RowsAffected(0), nil
}
func (countingStmt) QueryContext(context.Context, []driver.NamedValue) (driver.Rows, error) {
	return nil, fmt.Errorf("no rows")
}

func (c *countingConn) Prepare(q string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), q)
}
func (c *countingConn) PrepareContext(context.Context, string) (driver.Stmt, error) {
	c.prepared++
	return countingStmt{c}, nil
}
func (c *countingConn) Close() error              { return nil }
func (c *countingConn) Begin() (driver.Tx, error) { return nil, fmt.Errorf("no tx") }
func (c *countingConn) BeginTx(context.Context, driver.TxOptions) (driver.Tx, error) {
	return nil, fmt.Errorf("no tx")
}

func TestCachingConnPreparesEachQueryOnce(t *testing.T) {
	inner := &countingConn{}
	c, err := newCachingConn(inner)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	use := func(q string) driver.Stmt {
		s, err := c.PrepareContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for range 5 {
		use("SELECT 1").Close()
	}
	if inner.prepared != 1 || inner.closed != 0 {
		t.Fatalf("5 uses of one query: %d prepares, %d finalized; want 1, 0", inner.prepared, inner.closed)
	}

	// The same query while its statement is in use gets one of its own,
	// finalized when closed; the cached one stays.
	held := use("SELECT 1")
	use("SELECT 1").Close()
	if inner.prepared != 2 || inner.closed != 1 {
		t.Fatalf("nested use: %d prepares, %d finalized; want 2, 1", inner.prepared, inner.closed)
	}
	held.Close()
	use("SELECT 1").Close()
	if inner.prepared != 2 {
		t.Fatalf("after the nested use: %d prepares, want still 2", inner.prepared)
	}

	// Beyond the bound, statements are prepared and finalized each time.
	for i := range maxCachedStmts + 10 {
		use(fmt.Sprintf("SELECT %d", i+2)).Close()
	}
	if len(c.stmts) != maxCachedStmts {
		t.Fatalf("%d statements cached, want the bound %d", len(c.stmts), maxCachedStmts)
	}
	before := inner.closed
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := inner.closed - before; got != maxCachedStmts {
		t.Fatalf("closing the connection finalized %d statements, want %d", got, maxCachedStmts)
	}
}

// TestCachingSQLiteNestedQueries: on real SQLite, a query run again
// while the rows of its first run are open gives both their own rows,
// and cached statements see data written after they were prepared.
func TestCachingSQLiteNestedQueries(t *testing.T) {
	db, err := openCachingSQLite("file:" + filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (k INTEGER)"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	const q = "SELECT k FROM t WHERE k >= ? ORDER BY k"
	for k := 1; k <= 3; k++ {
		if _, err := tx.ExecContext(ctx, "INSERT INTO t (k) VALUES (?)", k); err != nil {
			t.Fatal(err)
		}
	}
	outer, err := tx.QueryContext(ctx, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for outer.Next() {
		var a int
		if err := outer.Scan(&a); err != nil {
			t.Fatal(err)
		}
		inner, err := tx.QueryContext(ctx, q, a)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for inner.Next() {
			n++
		}
		inner.Close()
		got = append(got, fmt.Sprintf("%d:%d", a, n))
	}
	if err := outer.Err(); err != nil {
		t.Fatal(err)
	}
	outer.Close()
	if want := "[1:3 2:2 3:1]"; fmt.Sprint(got) != want {
		t.Fatalf("nested runs of one query: %v, want %s", got, want)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO t (k) VALUES (?)", 4); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM t WHERE k >= ?", 1).Scan(&n); err != nil || n != 4 {
		t.Fatalf("count after a later insert: %d, %v; want 4", n, err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM t WHERE k >= ?", 1).Scan(&n); err != nil || n != 4 {
		t.Fatalf("count again from the cached statement: %d, %v; want 4", n, err)
	}
}

// TestSQLiteReadersStayOpen: the four reader connections stay open after
// concurrent reads (database/sql would keep two and reopen the others,
// with their pragmas and without their prepared statements).
func TestSQLiteReadersStayOpen(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "flowlb.db"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 3 {
		var all sync.WaitGroup
		all.Add(4)
		errs := make(chan error, 4)
		for range 4 {
			go func() {
				errs <- s.View(t.Context(), func(tx ReadTx) error {
					_, err := tx.List(KindLoadBalancer, Filter{})
					all.Done()
					all.Wait() // all four at once
					return err
				})
			}()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	st := s.reader.Stats()
	if st.OpenConnections != 4 || st.MaxIdleClosed != 0 {
		t.Errorf("readers: %d open, %d closed for being idle beyond the limit; want 4 open, none closed", st.OpenConnections, st.MaxIdleClosed)
	}
}
