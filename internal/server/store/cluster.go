package store

import (
	"context"
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
	for _, q := range []string{
		"DELETE FROM replicas WHERE id = ?",
		"DELETE FROM agent_acks WHERE replica = ?",
		"UPDATE pending_changes SET owner = '' WHERE owner = ?",
	} {
		if _, err := tx.ExecContext(ctx, s.eng.rebind(q), replica); err != nil {
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

// agentChunk bounds the rows of one statement (4 parameters a row).
const agentChunk = 1000

// RecordAgents upserts a replica's agents' acknowledged revisions and
// removes the agents that left it (not those that moved on to another).
func (s *SQL) RecordAgents(ctx context.Context, replica string, acks []AgentAck, gone []string) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return unavailable(err)
	}
	defer tx.Rollback()
	for len(acks) > 0 {
		n := min(len(acks), agentChunk)
		var b strings.Builder
		b.WriteString("INSERT INTO agent_acks (node, replica, revision, no_probes) VALUES ")
		args := make([]any, 0, 4*n)
		for i, a := range acks[:n] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?)")
			args = append(args, a.Node, replica, a.Revision, a.NoProbes)
		}
		b.WriteString(" ON CONFLICT (node) DO UPDATE SET replica = excluded.replica, revision = excluded.revision, no_probes = excluded.no_probes")
		if _, err := tx.ExecContext(ctx, s.eng.rebind(b.String()), args...); err != nil {
			return unavailable(fmt.Errorf("record agents: %w", err))
		}
		acks = acks[n:]
	}
	for _, node := range gone {
		if _, err := tx.ExecContext(ctx, s.eng.rebind("DELETE FROM agent_acks WHERE node = ? AND replica = ?"), node, replica); err != nil {
			return unavailable(fmt.Errorf("forget agent %s: %w", node, err))
		}
	}
	return unavailable(tx.Commit())
}

// Agents lists the agents of live replicas.
func (s *SQL) Agents(ctx context.Context) ([]AgentAck, error) {
	rows, err := s.reader.QueryContext(ctx, "SELECT node, replica, revision, no_probes FROM agent_acks WHERE replica IN ("+s.liveReplicas()+") ORDER BY node")
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
