package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// What the replicas of a cluster share. Leases are in the database's
// clock (engine.now), so that replicas whose clocks differ agree on who
// is alive.

// Renew records that a replica is alive for ttl more.
func (s *SQL) Renew(ctx context.Context, r Replica, ttl time.Duration) error {
	_, err := s.writer.ExecContext(ctx, s.eng.rebind("INSERT INTO replicas (id, address, tail, lease_until) VALUES (?, ?, ?, "+s.eng.now()+" + ?) "+
		"ON CONFLICT (id) DO UPDATE SET address = excluded.address, tail = excluded.tail, lease_until = excluded.lease_until"),
		r.ID, r.Address, r.Tail, ttl.Microseconds())
	return unavailable(err)
}

// Retire removes a stopping replica: its agents and its pending changes
// are free at once.
func (s *SQL) Retire(ctx context.Context, replica string) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return unavailable(err)
	}
	defer tx.Rollback()
	seq, err := nextAgentSeq(ctx, tx, s.eng)
	if err != nil {
		return unavailable(fmt.Errorf("retire replica %s: %w", replica, err))
	}
	for _, q := range []struct {
		q    string
		args []any
	}{
		{"DELETE FROM replicas WHERE id = ?", []any{replica}},
		{"UPDATE agent_acks SET gone = TRUE, seq = ? WHERE replica = ? AND NOT gone", []any{seq, replica}},
		{"UPDATE pending_changes SET owner = '' WHERE owner = ?", []any{replica}},
	} {
		if _, err := tx.ExecContext(ctx, s.eng.rebind(q.q), q.args...); err != nil {
			return unavailable(fmt.Errorf("retire replica %s: %w", replica, err))
		}
	}
	return unavailable(tx.Commit())
}

// liveReplicas is the condition on a replica id of being alive.
func (s *SQL) liveReplicas() string {
	return "SELECT id FROM replicas WHERE lease_until > " + s.eng.now()
}

// Replicas lists the live replicas.
func (s *SQL) Replicas(ctx context.Context) ([]Replica, error) {
	rows, err := s.reader.QueryContext(ctx, "SELECT id, address, tail FROM replicas WHERE lease_until > "+s.eng.now()+" ORDER BY id")
	if err != nil {
		return nil, unavailable(fmt.Errorf("replicas: %w", err))
	}
	defer rows.Close()
	var out []Replica
	for rows.Next() {
		var r Replica
		if err := rows.Scan(&r.ID, &r.Address, &r.Tail); err != nil {
			return nil, unavailable(err)
		}
		out = append(out, r)
	}
	return out, unavailable(rows.Err())
}

// agentChunk bounds the rows of one statement (5 parameters a row).
const agentChunk = 1000

// agentTombstones is how far (in agent_seq steps) a departed agent's
// tombstone is kept behind the sequence before a writer purges it: a
// replica that last read further back than that reads every row again.
// Tombstones are one row per node at most (the node is the key), so
// keeping them long costs little.
const agentTombstones = 100_000

// nextAgentSeq takes the next agent_seq value in tx. The row stays locked
// until tx ends, so writers of agent_acks commit in the order of their
// values: a reader that sees a row at seq s sees every row at seq s or
// below.
func nextAgentSeq(ctx context.Context, tx *sql.Tx, eng engine) (int64, error) {
	var seq int64
	err := tx.QueryRowContext(ctx, eng.rebind("UPDATE agent_seq SET seq = seq + 1 WHERE id = 1 RETURNING seq")).Scan(&seq)
	return seq, err
}

// RecordAgents upserts a replica's agents' acknowledged revisions and
// marks the agents that left it (not those that moved on to another) as
// gone, every row it writes at the next agent_seq value.
func (s *SQL) RecordAgents(ctx context.Context, replica string, acks []AgentAck, gone []string) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return unavailable(err)
	}
	defer tx.Rollback()
	seq, err := nextAgentSeq(ctx, tx, s.eng)
	if err != nil {
		return unavailable(fmt.Errorf("record agents: %w", err))
	}
	for len(acks) > 0 {
		n := min(len(acks), agentChunk)
		var b strings.Builder
		b.WriteString("INSERT INTO agent_acks (node, replica, revision, no_probes, seq, gone) VALUES ")
		args := make([]any, 0, 5*n)
		for i, a := range acks[:n] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?, ?, FALSE)")
			args = append(args, a.Node, replica, a.Revision, a.NoProbes, seq)
		}
		b.WriteString(" ON CONFLICT (node) DO UPDATE SET replica = excluded.replica, revision = excluded.revision, no_probes = excluded.no_probes, seq = excluded.seq, gone = FALSE")
		if _, err := tx.ExecContext(ctx, s.eng.rebind(b.String()), args...); err != nil {
			return unavailable(fmt.Errorf("record agents: %w", err))
		}
		acks = acks[n:]
	}
	for _, node := range gone {
		if _, err := tx.ExecContext(ctx, s.eng.rebind("UPDATE agent_acks SET gone = TRUE, seq = ? WHERE node = ? AND replica = ? AND NOT gone"), seq, node, replica); err != nil {
			return unavailable(fmt.Errorf("forget agent %s: %w", node, err))
		}
	}
	if len(gone) > 0 && seq > agentTombstones {
		if err := purgeAgentTombstones(ctx, tx, s.eng, seq-agentTombstones); err != nil {
			return unavailable(fmt.Errorf("record agents: %w", err))
		}
	}
	return unavailable(tx.Commit())
}

// purgeAgentTombstones deletes the tombstones at or below seq and records
// that readers behind it must read every row again.
func purgeAgentTombstones(ctx context.Context, tx *sql.Tx, eng engine, seq int64) error {
	res, err := tx.ExecContext(ctx, eng.rebind("DELETE FROM agent_acks WHERE gone AND seq <= ?"), seq)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	_, err = tx.ExecContext(ctx, eng.rebind("UPDATE agent_seq SET purged = ? WHERE id = 1 AND purged < ?"), seq, seq)
	return err
}

// Agents lists the agents of live replicas.
func (s *SQL) Agents(ctx context.Context) ([]AgentAck, error) {
	rows, err := s.reader.QueryContext(ctx, "SELECT node, replica, revision, no_probes FROM agent_acks WHERE NOT gone AND replica IN ("+s.liveReplicas()+") ORDER BY node")
	if err != nil {
		return nil, unavailable(fmt.Errorf("agents: %w", err))
	}
	defer rows.Close()
	var out []AgentAck
	for rows.Next() {
		var a AgentAck
		if err := rows.Scan(&a.Node, &a.Replica, &a.Revision, &a.NoProbes); err != nil {
			return nil, unavailable(err)
		}
		out = append(out, a)
	}
	return out, unavailable(rows.Err())
}

// AgentsSince reads the agents' rows written after seq since (0: every
// row), and the live replicas.
func (s *SQL) AgentsSince(ctx context.Context, since int64) (AgentChanges, error) {
	var out AgentChanges
	var err error
	if since > 0 {
		if out, err = s.agentRows(ctx, since); err != nil {
			return AgentChanges{}, err
		}
		// Read after the rows: a purge of a tombstone newer than since
		// that the rows missed shows here.
		var purged int64
		if err := s.reader.QueryRowContext(ctx, "SELECT purged FROM agent_seq WHERE id = 1").Scan(&purged); err != nil {
			return AgentChanges{}, unavailable(fmt.Errorf("agents since %d: %w", since, err))
		}
		if purged > since {
			since = 0
		}
	}
	if since == 0 {
		// The horizon before the rows: every tombstone at or below it is
		// gone, so the rows read after cover the sequence up to it.
		var purged int64
		if err := s.reader.QueryRowContext(ctx, "SELECT purged FROM agent_seq WHERE id = 1").Scan(&purged); err != nil {
			return AgentChanges{}, unavailable(fmt.Errorf("agents: %w", err))
		}
		if out, err = s.agentRows(ctx, 0); err != nil {
			return AgentChanges{}, err
		}
		out.Full, out.Seq, out.Gone = true, max(out.Seq, purged), nil
	}
	out.Seq = max(out.Seq, since)
	rows, err := s.reader.QueryContext(ctx, "SELECT id FROM replicas WHERE lease_until > "+s.eng.now()+" ORDER BY id")
	if err != nil {
		return AgentChanges{}, unavailable(fmt.Errorf("live replicas: %w", err))
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return AgentChanges{}, unavailable(err)
		}
		out.Live = append(out.Live, id)
	}
	return out, unavailable(rows.Err())
}

// agentRows reads the rows of agent_acks past seq since, tombstones
// apart, and sets Seq to the highest read.
func (s *SQL) agentRows(ctx context.Context, since int64) (AgentChanges, error) {
	q := "SELECT node, replica, revision, no_probes, seq, gone FROM agent_acks"
	var args []any
	if since > 0 {
		q += " WHERE seq > ?"
		args = append(args, since)
	}
	rows, err := s.reader.QueryContext(ctx, s.eng.rebind(q+" ORDER BY node"), args...)
	if err != nil {
		return AgentChanges{}, unavailable(fmt.Errorf("agents since %d: %w", since, err))
	}
	defer rows.Close()
	var out AgentChanges
	for rows.Next() {
		var a AgentAck
		var seq int64
		var gone bool
		if err := rows.Scan(&a.Node, &a.Replica, &a.Revision, &a.NoProbes, &seq, &gone); err != nil {
			return AgentChanges{}, unavailable(err)
		}
		out.Seq = max(out.Seq, seq)
		if gone {
			out.Gone = append(out.Gone, a)
		} else {
			out.Acks = append(out.Acks, a)
		}
	}
	return out, unavailable(rows.Err())
}

// TakeOver claims the pending changes of replicas that are not alive.
// Two replicas taking over at once cannot both claim one: the update
// re-checks the owner of a row another transaction just changed.
func (s *SQL) TakeOver(ctx context.Context, replica string) ([]Pending, error) {
	rows, err := s.writer.QueryContext(ctx, s.eng.rebind("UPDATE pending_changes SET owner = ? WHERE owner NOT IN ("+s.liveReplicas()+
		") RETURNING loadbalancer_id, owner, change"), replica)
	if err != nil {
		return nil, unavailable(fmt.Errorf("take over pending changes: %w", err))
	}
	defer rows.Close()
	var out []Pending
	for rows.Next() {
		var p Pending
		if err := rows.Scan(&p.LoadBalancerID, &p.Owner, &p.Change); err != nil {
			return nil, unavailable(err)
		}
		out = append(out, p)
	}
	return out, unavailable(rows.Err())
}

// Owned counts a replica's pending changes.
func (s *SQL) Owned(ctx context.Context, replica string) (int, error) {
	var n int
	err := s.reader.QueryRowContext(ctx, s.eng.rebind("SELECT COUNT(*) FROM pending_changes WHERE owner = ?"), replica).Scan(&n)
	return n, unavailable(err)
}
