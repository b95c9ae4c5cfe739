package store

import "fmt"

// Claims: keys held once per space, in their own table with the pair as
// primary key, so that the database, not a lock on some shared row,
// keeps two transactions from holding the same key.

func (t *sqlTx) Claim(space, key string) error {
	// ON CONFLICT DO NOTHING, not a caught unique violation: on
	// PostgreSQL a failed statement aborts the whole transaction, and the
	// caller goes on to try another key.
	res, err := t.tx.ExecContext(t.ctx, t.q("INSERT INTO claims (space, item) VALUES (?, ?) ON CONFLICT DO NOTHING"), space, key)
	if err != nil {
		return fmt.Errorf("claim %s in %s: %w", key, space, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrConflict
	}
	return nil
}

func (t *sqlTx) Unclaim(space, key string) error {
	res, err := t.tx.ExecContext(t.ctx, t.q("DELETE FROM claims WHERE space = ? AND item = ?"), space, key)
	if err != nil {
		return fmt.Errorf("unclaim %s in %s: %w", key, space, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

func (t *sqlTx) Claimed(space, from string, limit int) ([]string, error) {
	rows, err := t.tx.QueryContext(t.ctx, t.q("SELECT item FROM claims WHERE space = ? AND item >= ? ORDER BY item LIMIT ?"), space, from, limit)
	if err != nil {
		return nil, fmt.Errorf("claims of %s: %w", space, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("claims of %s: %w", space, err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

func (t *sqlTx) CountClaimed(space, from, to string) (int, error) {
	var n int
	err := t.tx.QueryRowContext(t.ctx, t.q("SELECT COUNT(*) FROM claims WHERE space = ? AND item >= ? AND item <= ?"), space, from, to).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count claims of %s: %w", space, err)
	}
	return n, nil
}
