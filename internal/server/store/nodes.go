package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Bindings of node names to identities (Nodes). Each rule is one upsert
// whose condition the database checks against the row as it is when the
// statement runs, so two replicas enrolling one name at once cannot both
// win.

const nodeCols = "node, public_key, previous_key, ca_key, not_after, issued_at"

func (s *SQL) EnrollNode(ctx context.Context, id NodeIdentity) (NodeIdentity, error) {
	return s.bindNode(ctx, id, "", "node_identities.not_after <= "+s.eng.now()+
		" OR node_identities.public_key = excluded.public_key OR node_identities.ca_key <> excluded.ca_key")
}

func (s *SQL) RenewNode(ctx context.Context, id NodeIdentity, presented string) (NodeIdentity, error) {
	if presented == "" {
		return NodeIdentity{}, errors.New("renew node identity: no key presented")
	}
	return s.bindNode(ctx, id, presented, "node_identities.public_key = excluded.previous_key OR node_identities.previous_key = excluded.previous_key")
}

// bindNode inserts id's binding, or replaces the name's if cond holds
// (excluded is the new row); previous is the key it replaces.
func (s *SQL) bindNode(ctx context.Context, id NodeIdentity, previous, cond string) (NodeIdentity, error) {
	if id.Key == "" {
		return NodeIdentity{}, fmt.Errorf("bind node %s: no key", id.Node)
	}
	res, err := s.writer.ExecContext(ctx, s.eng.rebind("INSERT INTO node_identities ("+nodeCols+") VALUES (?, ?, ?, ?, ?, ?) "+
		"ON CONFLICT (node) DO UPDATE SET public_key = excluded.public_key, previous_key = excluded.previous_key, ca_key = excluded.ca_key, "+
		"not_after = excluded.not_after, issued_at = excluded.issued_at WHERE "+cond),
		id.Node, id.Key, previous, id.CA, id.NotAfter.UnixMicro(), id.Issued.UnixMicro())
	if err != nil {
		return NodeIdentity{}, unavailable(fmt.Errorf("bind node %s: %w", id.Node, err))
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return id, unavailable(err)
	}
	held, err := s.nodeIdentity(ctx, s.reader, id.Node)
	if err != nil {
		return NodeIdentity{}, err
	}
	return held, ErrConflict
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *SQL) nodeIdentity(ctx context.Context, q queryRower, node string) (NodeIdentity, error) {
	n, err := scanNode(q.QueryRowContext(ctx, s.eng.rebind("SELECT "+nodeCols+" FROM node_identities WHERE node = ?"), node))
	if errors.Is(err, sql.ErrNoRows) {
		return NodeIdentity{}, ErrNotFound
	}
	return n, unavailable(err)
}

func scanNode(row interface{ Scan(...any) error }) (NodeIdentity, error) {
	var n NodeIdentity
	var previous string
	var notAfter, issued int64
	if err := row.Scan(&n.Node, &n.Key, &previous, &n.CA, &notAfter, &issued); err != nil {
		return NodeIdentity{}, err
	}
	if notAfter != 0 {
		n.NotAfter = time.UnixMicro(notAfter)
	}
	n.Issued = time.UnixMicro(issued)
	return n, nil
}

func (s *SQL) ForgetNode(ctx context.Context, node string) (NodeIdentity, bool, error) {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return NodeIdentity{}, false, unavailable(err)
	}
	defer tx.Rollback()
	was, err := s.nodeIdentity(ctx, tx, node)
	found := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		return NodeIdentity{}, false, err
	}
	if _, err := tx.ExecContext(ctx, s.eng.rebind("INSERT INTO node_identities ("+nodeCols+") VALUES (?, '', '', '', 0, ?) "+
		"ON CONFLICT (node) DO UPDATE SET public_key = '', previous_key = '', ca_key = '', not_after = 0, issued_at = excluded.issued_at"),
		node, time.Now().UnixMicro()); err != nil {
		return NodeIdentity{}, false, unavailable(fmt.Errorf("forget node %s: %w", node, err))
	}
	if err := tx.Commit(); err != nil {
		return NodeIdentity{}, false, unavailable(err)
	}
	return was, found && !was.Released(), nil
}

func (s *SQL) NodeIdentities(ctx context.Context) ([]NodeIdentity, error) {
	rows, err := s.reader.QueryContext(ctx, "SELECT "+nodeCols+" FROM node_identities ORDER BY node")
	if err != nil {
		return nil, unavailable(fmt.Errorf("node identities: %w", err))
	}
	defer rows.Close()
	var out []NodeIdentity
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, unavailable(err)
		}
		out = append(out, n)
	}
	return out, unavailable(rows.Err())
}
