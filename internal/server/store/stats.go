package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// AddStats adds a node's report: deltas to the counters, and its open
// connections in place of those it reported before.
func (s *SQL) AddStats(ctx context.Context, node string, counts []ListenerCounts, ttl time.Duration) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return unavailable(err)
	}
	defer tx.Rollback()
	// Counts of a listener deleted since (a report in flight) are
	// dropped: they would make a row nothing reads or removes.
	add := s.eng.rebind("INSERT INTO listener_stats (listener_id, loadbalancer_id, bytes_in, bytes_out, total_connections, request_errors) " +
		"SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM objects WHERE kind = 'listener' AND id = ?) " +
		"ON CONFLICT (listener_id) DO UPDATE SET loadbalancer_id = excluded.loadbalancer_id, " +
		"bytes_in = listener_stats.bytes_in + excluded.bytes_in, bytes_out = listener_stats.bytes_out + excluded.bytes_out, " +
		"total_connections = listener_stats.total_connections + excluded.total_connections, " +
		"request_errors = listener_stats.request_errors + excluded.request_errors")
	addMember := s.eng.rebind("INSERT INTO member_stats (member_id, loadbalancer_id, bytes_in, bytes_out, total_connections) " +
		"SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM objects WHERE kind = 'member' AND id = ?) " +
		"ON CONFLICT (member_id) DO UPDATE SET loadbalancer_id = excluded.loadbalancer_id, " +
		"bytes_in = member_stats.bytes_in + excluded.bytes_in, bytes_out = member_stats.bytes_out + excluded.bytes_out, " +
		"total_connections = member_stats.total_connections + excluded.total_connections")
	active := s.eng.rebind("INSERT INTO listener_active (listener_id, node, loadbalancer_id, active, fresh_until) VALUES (?, ?, ?, ?, " + s.eng.now() + " + ?)")
	if _, err := tx.ExecContext(ctx, s.eng.rebind("DELETE FROM listener_active WHERE node = ?"), node); err != nil {
		return unavailable(fmt.Errorf("stats of %s: %w", node, err))
	}
	for _, c := range counts {
		if c.BytesIn|c.BytesOut|c.TotalConnections|c.RequestErrors != 0 {
			if _, err := tx.ExecContext(ctx, add, c.ListenerID, c.LoadBalancerID, c.BytesIn, c.BytesOut, c.TotalConnections, c.RequestErrors, c.ListenerID); err != nil {
				return unavailable(fmt.Errorf("stats of listener %s: %w", c.ListenerID, err))
			}
		}
		if c.ActiveConnections != 0 {
			if _, err := tx.ExecContext(ctx, active, c.ListenerID, node, c.LoadBalancerID, c.ActiveConnections, ttl.Microseconds()); err != nil {
				return unavailable(fmt.Errorf("open connections of listener %s: %w", c.ListenerID, err))
			}
		}
		for _, m := range c.Members {
			if m.BytesIn|m.BytesOut|m.TotalConnections == 0 {
				continue
			}
			if _, err := tx.ExecContext(ctx, addMember, m.MemberID, m.LoadBalancerID, m.BytesIn, m.BytesOut, m.TotalConnections, m.MemberID); err != nil {
				return unavailable(fmt.Errorf("stats of member %s: %w", m.MemberID, err))
			}
		}
	}
	return unavailable(tx.Commit())
}

// ListenerStats sums one listener's statistics.
func (s *SQL) ListenerStats(ctx context.Context, listenerID string) (Counts, error) {
	return s.counts(ctx, "listener_id", listenerID)
}

// LoadBalancerStats sums a load balancer's listeners' statistics.
func (s *SQL) LoadBalancerStats(ctx context.Context, lbID string) (Counts, error) {
	return s.counts(ctx, "loadbalancer_id", lbID)
}

// counts sums the rows of the existing listeners whose column is id.
func (s *SQL) counts(ctx context.Context, column, id string) (Counts, error) {
	var c Counts
	var in, out, total, errs, active sql.NullInt64
	exists := " AND EXISTS (SELECT 1 FROM objects o WHERE o.kind = 'listener' AND o.id = listener_id)"
	q := s.eng.rebind("SELECT SUM(bytes_in), SUM(bytes_out), SUM(total_connections), SUM(request_errors) FROM listener_stats WHERE " + column + " = ?" + exists)
	if err := s.reader.QueryRowContext(ctx, q, id).Scan(&in, &out, &total, &errs); err != nil {
		return c, unavailable(fmt.Errorf("stats: %w", err))
	}
	q = s.eng.rebind("SELECT SUM(active) FROM listener_active WHERE " + column + " = ? AND fresh_until > " + s.eng.now() + exists)
	if err := s.reader.QueryRowContext(ctx, q, id).Scan(&active); err != nil {
		return c, unavailable(fmt.Errorf("stats: %w", err))
	}
	return Counts{BytesIn: in.Int64, BytesOut: out.Int64, TotalConnections: total.Int64, RequestErrors: errs.Int64, ActiveConnections: active.Int64}, nil
}

// AllStats lists every existing listener's statistics, by listener id.
func (s *SQL) AllStats(ctx context.Context) ([]ListenerCounts, error) {
	rows, err := s.reader.QueryContext(ctx, "SELECT s.listener_id, s.loadbalancer_id, s.bytes_in, s.bytes_out, s.total_connections, s.request_errors, "+
		"COALESCE((SELECT SUM(a.active) FROM listener_active a WHERE a.listener_id = s.listener_id AND a.fresh_until > "+s.eng.now()+"), 0) "+
		"FROM listener_stats s WHERE EXISTS (SELECT 1 FROM objects o WHERE o.kind = 'listener' AND o.id = s.listener_id) ORDER BY s.listener_id")
	if err != nil {
		return nil, unavailable(fmt.Errorf("stats: %w", err))
	}
	defer rows.Close()
	var out []ListenerCounts
	for rows.Next() {
		var c ListenerCounts
		if err := rows.Scan(&c.ListenerID, &c.LoadBalancerID, &c.BytesIn, &c.BytesOut, &c.TotalConnections, &c.RequestErrors, &c.ActiveConnections); err != nil {
			return nil, unavailable(err)
		}
		out = append(out, c)
	}
	return out, unavailable(rows.Err())
}

// MemberStats lists a load balancer's existing members' statistics, by
// member id.
func (s *SQL) MemberStats(ctx context.Context, lbID string) ([]MemberCounts, error) {
	return s.memberCounts(ctx, "WHERE m.loadbalancer_id = ? AND ", lbID)
}

// AllMemberStats lists every existing member's statistics, by member id.
func (s *SQL) AllMemberStats(ctx context.Context) ([]MemberCounts, error) {
	return s.memberCounts(ctx, "WHERE ")
}

func (s *SQL) memberCounts(ctx context.Context, where string, args ...any) ([]MemberCounts, error) {
	rows, err := s.reader.QueryContext(ctx, s.eng.rebind("SELECT m.member_id, m.loadbalancer_id, m.bytes_in, m.bytes_out, m.total_connections FROM member_stats m "+
		where+"EXISTS (SELECT 1 FROM objects o WHERE o.kind = 'member' AND o.id = m.member_id) ORDER BY m.member_id"), args...)
	if err != nil {
		return nil, unavailable(fmt.Errorf("member stats: %w", err))
	}
	defer rows.Close()
	var out []MemberCounts
	for rows.Next() {
		var c MemberCounts
		if err := rows.Scan(&c.MemberID, &c.LoadBalancerID, &c.BytesIn, &c.BytesOut, &c.TotalConnections); err != nil {
			return nil, unavailable(err)
		}
		out = append(out, c)
	}
	return out, unavailable(rows.Err())
}
