package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
	"github.com/flowlb/flowlb/internal/shared/ids"
)

// tree is the rows of one fully populated load balancer as a create writes
// them: the load balancer, a listener and a pool under it, ten members and
// a health monitor under the pool, each with a document of about the size
// the API writes.
func tree(project string) []store.Record {
	lb := ids.New()
	pool := ids.New()
	doc := `{"pad":"` + strings.Repeat("x", 420) + `"}`
	r := func(kind store.Kind, id, parent string) store.Record {
		return store.Record{Kind: kind, ID: id, ProjectID: project, LoadBalancerID: lb, ParentID: parent, Data: []byte(doc), CreatedAt: time.Now()}
	}
	out := []store.Record{r(store.KindLoadBalancer, lb, ""), r(store.KindListener, ids.New(), lb), r(store.KindPool, pool, lb)}
	out[0].Name = "svc-" + lb[len(lb)-6:]
	for range 10 {
		out = append(out, r(store.KindMember, ids.New(), pool))
	}
	return append(out, r(store.KindHealthMonitor, ids.New(), pool))
}

// TestCreateWritesFewPages: on SQLite a create's rows and index entries
// sit side by side, so that its commit writes few pages to the log (each
// page is a write of its own, and a page per kind in every index was most
// of what a create cost). Measured as the log's growth over many creates
// in a database that already holds thousands of trees, with checkpoints
// off so that the log only grows.
func TestCreateWritesFewPages(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flowlb.db")
	st, err := store.Open(ctx, path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=wal_autocheckpoint(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	insert := func(rs []store.Record) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		for _, r := range rs {
			if _, err := tx.ExecContext(ctx, "INSERT INTO objects (kind, id, project_id, loadbalancer_id, parent_id, name, data, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
				string(r.Kind), r.ID, r.ProjectID, r.LoadBalancerID, r.ParentID, r.Name, string(r.Data), r.CreatedAt.UnixMicro()); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// Thousands of trees already there, in a few transactions.
	for range 20 {
		var batch []store.Record
		for range 100 {
			batch = append(batch, tree("p1")...)
		}
		insert(batch)
	}
	if _, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	walSize := func() int64 {
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := walSize()
	const creates = 200
	for range creates {
		insert(tree("p1"))
	}
	const frame = 4096 + 24 // a page and its frame header
	perCreate := float64(walSize()-before) / frame / creates
	t.Logf("%.1f pages written to the log per create", perCreate)
	// About 22: the table's pages, a page per kind in the project index
	// (which lists and quotas read by kind), a page or two of each other
	// index, and their splits. With the kind first in every key it was
	// 40: a page per kind in each of four indexes.
	if perCreate > 28 {
		t.Errorf("%.1f pages per create, want at most 28: a create's entries are spread over the indexes", perCreate)
	}
}

// TestObjectKeysMigrated: a database whose objects were keyed by kind
// first gets the keys that lead with the id, the load balancer and the
// parent, its rows intact.
func TestObjectKeysMigrated(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			rows := tree("p1")
			if _, err := e.Store.Update(ctx, func(tx store.Tx) error { return tx.InsertMany(rows) }); err != nil {
				t.Fatal(err)
			}
			driver, dsn := "sqlite", "file:"+e.DSN
			// The keys as they were before.
			old := []string{
				"CREATE TABLE objects_old (kind TEXT NOT NULL, id TEXT NOT NULL, project_id TEXT NOT NULL DEFAULT '', loadbalancer_id TEXT NOT NULL DEFAULT '', parent_id TEXT NOT NULL DEFAULT '', data TEXT NOT NULL, created_at BIGINT NOT NULL, name TEXT NOT NULL DEFAULT '', PRIMARY KEY (kind, id))",
				"INSERT INTO objects_old SELECT kind, id, project_id, loadbalancer_id, parent_id, data, created_at, name FROM objects",
				"DROP TABLE objects",
				"ALTER TABLE objects_old RENAME TO objects",
				"CREATE INDEX objects_project ON objects (kind, project_id)",
				"CREATE INDEX objects_loadbalancer ON objects (kind, loadbalancer_id)",
				"CREATE INDEX objects_parent ON objects (kind, parent_id)",
				"CREATE INDEX objects_lb_name ON objects (name) WHERE kind = 'loadbalancer'",
			}
			keys := "SELECT group_concat(name, ',') FROM pragma_index_info((SELECT name FROM pragma_index_list('objects') WHERE origin = 'pk'))"
			lbIndex := "SELECT group_concat(name, ',') FROM pragma_index_info('objects_loadbalancer')"
			if e.Name == "postgres" {
				driver, dsn = "pgx", e.DSN
				old = []string{
					"ALTER TABLE objects DROP CONSTRAINT objects_pkey",
					"ALTER TABLE objects ADD PRIMARY KEY (kind, id)",
					"DROP INDEX objects_loadbalancer",
					"CREATE INDEX objects_loadbalancer ON objects (kind, loadbalancer_id)",
				}
				keys = "SELECT string_agg(a.attname, ',' ORDER BY k.n) FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(att, n) JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.att WHERE i.indexrelid = 'objects_pkey'::regclass"
				lbIndex = strings.ReplaceAll(keys, "objects_pkey", "objects_loadbalancer")
			}
			db, err := sql.Open(driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, q := range append(old, "DELETE FROM schema_migrations WHERE version = 13") {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			read := func(q string) string {
				var s string
				if err := db.QueryRowContext(ctx, q).Scan(&s); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				return s
			}
			if got := read(keys); got != "kind,id" {
				t.Fatalf("the old primary key is on %s, want kind,id", got)
			}
			again, err := store.Open(ctx, e.DSN, log)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			if got := read(keys); got != "id,kind" {
				t.Errorf("primary key on %s, want id,kind", got)
			}
			if got := read(lbIndex); got != "loadbalancer_id,kind" {
				t.Errorf("objects_loadbalancer on %s, want loadbalancer_id,kind", got)
			}
			var got []string
			if err := again.View(ctx, func(tx store.ReadTx) error {
				rs, err := tx.ListKinds([]store.Kind{store.KindLoadBalancer, store.KindListener, store.KindPool, store.KindMember, store.KindHealthMonitor}, store.Filter{LoadBalancerID: rows[0].ID})
				for _, r := range rs {
					got = append(got, fmt.Sprintf("%s/%s/%s/%d", r.Kind, r.ID, r.ParentID, len(r.Data)))
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(rows) {
				t.Fatalf("after the migration %d rows of the tree, want %d: %v", len(got), len(rows), got)
			}
			for _, r := range rows {
				want := fmt.Sprintf("%s/%s/%s/%d", r.Kind, r.ID, r.ParentID, len(r.Data))
				if !strings.Contains(strings.Join(got, " "), want) {
					t.Errorf("row %s missing after the migration", want)
				}
			}
		})
	}
}
