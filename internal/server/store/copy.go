package store

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// PostgreSQL writes many rows in few round trips. A few rows go in one
// statement of a constant text whose columns are arrays, unnested on the
// server. From copyMin rows on, they go by COPY, PostgreSQL's bulk path:
// the rows stream in binary and go into the heap a page at a time.
// Profiled with 20,000 members, an INSERT … SELECT FROM unnest(…) cost
// the server three times the CPU of a COPY of the same rows (the function
// scan stores the arrays' elements before the insert reads them), and an
// UPDATE … FROM unnest(…) twice that of a COPY into a temporary table and
// an UPDATE … FROM it. A COPY costs two or three round trips more, which
// a few rows do not earn back.
const copyMin = 32

// copyCols are the columns COPY writes, in Record's order.
var copyCols = strings.Split(cols, ", ")

// pgInsertMany adds rs (stamped).
func (t *sqlTx) pgInsertMany(rs []Record) error {
	if len(rs) >= copyMin {
		return t.insertCopy(rs)
	}
	return t.insertArrays(rs)
}

// pgUpdateMany rewrites rs.
func (t *sqlTx) pgUpdateMany(rs []Record) error {
	if len(rs) >= copyMin {
		return t.updateCopy(rs)
	}
	return t.updateArrays(rs)
}

// columns are the objects columns of rs as arrays, in cols' order (rs
// stamped: every created_at set).
func columns(rs []Record) (kinds, ids, projects, lbs, parents, names, data []string, created []int64) {
	for _, r := range rs {
		kinds = append(kinds, string(r.Kind))
		ids = append(ids, r.ID)
		projects = append(projects, r.ProjectID)
		lbs = append(lbs, r.LoadBalancerID)
		parents = append(parents, r.ParentID)
		names = append(names, r.Name)
		data = append(data, string(r.Data))
		created = append(created, r.CreatedAt.UnixMicro())
	}
	return
}

func (t *sqlTx) insertArrays(rs []Record) error {
	if len(rs) == 0 {
		return nil
	}
	kinds, ids, projects, lbs, parents, names, data, created := columns(rs)
	res, err := t.tx.ExecContext(t.ctx, "INSERT INTO objects ("+cols+") "+
		"SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[]) "+
		"ON CONFLICT DO NOTHING", kinds, ids, projects, lbs, parents, names, data, created)
	if err != nil {
		return fmt.Errorf("insert %d records: %w", len(rs), err)
	}
	if got, _ := res.RowsAffected(); got != int64(len(rs)) {
		return ErrConflict // the caller abandons the transaction
	}
	return nil
}

func (t *sqlTx) updateArrays(rs []Record) error {
	if len(rs) == 0 {
		return nil
	}
	kinds, ids, _, _, _, names, data, _ := columns(rs)
	res, err := t.tx.ExecContext(t.ctx, "UPDATE objects SET name = v.n, data = v.d "+
		"FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS v(k, i, n, d) "+
		"WHERE objects.kind = v.k AND objects.id = v.i", kinds, ids, names, data)
	if err != nil {
		return fmt.Errorf("update %d records: %w", len(rs), err)
	}
	if got, _ := res.RowsAffected(); got != int64(len(rs)) {
		return ErrNotFound
	}
	return nil
}

// recordRows feeds records to CopyFrom, one row of cols per record.
type recordRows struct {
	rs  []Record
	i   int
	row [8]any
}

func (r *recordRows) Next() bool { r.i++; return r.i <= len(r.rs) }

func (r *recordRows) Values() ([]any, error) {
	rec := &r.rs[r.i-1]
	r.row = [8]any{string(rec.Kind), rec.ID, rec.ProjectID, rec.LoadBalancerID, rec.ParentID, rec.Name, string(rec.Data), rec.CreatedAt.UnixMicro()}
	return r.row[:], nil
}

func (r *recordRows) Err() error { return nil }

// copyInto copies rs into table on the transaction's connection, inside
// the transaction.
func (t *sqlTx) copyInto(table string, rs []Record) error {
	return t.conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("copy into %s: connection is a %T, not pgx's", table, dc)
		}
		_, err := c.Conn().CopyFrom(t.ctx, pgx.Identifier{table}, copyCols, &recordRows{rs: rs})
		return err
	})
}

// insertCopy adds rs (stamped) by COPY, which has no ON CONFLICT: a
// duplicate key fails it, and with it the transaction, which the caller
// abandons on ErrConflict anyway.
func (t *sqlTx) insertCopy(rs []Record) error {
	if err := t.copyInto("objects", rs); err != nil {
		if pgCode(err) == "23505" { // unique_violation
			return ErrConflict
		}
		return fmt.Errorf("insert %d records: %w", len(rs), err)
	}
	return nil
}

// updateCopy copies the new rows into a temporary table of the session
// (made once per connection, emptied at each commit) and updates the
// objects from it in one statement.
func (t *sqlTx) updateCopy(rs []Record) error {
	if t.batched {
		// An earlier batch of this transaction left its rows. (DELETE:
		// a TRUNCATE would give the table a new file, a catalog update.)
		if _, err := t.tx.ExecContext(t.ctx, "DELETE FROM objects_batch"); err != nil {
			return fmt.Errorf("update %d records: %w", len(rs), err)
		}
	} else if _, err := t.tx.ExecContext(t.ctx, "CREATE TEMPORARY TABLE IF NOT EXISTS objects_batch (LIKE objects) ON COMMIT DELETE ROWS"); err != nil {
		return fmt.Errorf("update %d records: %w", len(rs), err)
	}
	t.batched = true
	if err := t.copyInto("objects_batch", rs); err != nil {
		return fmt.Errorf("update %d records: %w", len(rs), err)
	}
	res, err := t.tx.ExecContext(t.ctx, "UPDATE objects SET name = v.name, data = v.data "+
		"FROM objects_batch AS v WHERE objects.kind = v.kind AND objects.id = v.id")
	if err != nil {
		return fmt.Errorf("update %d records: %w", len(rs), err)
	}
	if got, _ := res.RowsAffected(); got != int64(len(rs)) {
		return ErrNotFound
	}
	return nil
}
