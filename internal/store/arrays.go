package store

import "fmt"

// PostgreSQL writes many rows in one statement of a constant text, the
// columns passed as arrays and unnested on the server: one round trip
// and one planned statement for any number of rows, where chunks of
// VALUES lists cost a parse and a round trip per 500 rows (20,000
// members: 40 of each).

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
		// Callers abort the transaction on ErrConflict, which undoes the
		// rows that did go in.
		return ErrConflict
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
