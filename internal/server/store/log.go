package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The change log. A write transaction inserts its entries without a
// revision; the sequencer numbers committed entries afterwards, in its
// own short transactions, one at a time cluster-wide (an advisory lock on
// PostgreSQL; SQLite has one writer anyway). An entry that commits after
// a later-inserted one simply gets a later revision, so a reader that
// follows revisions never skips an entry that was not yet visible: what a
// reader has seen up to revision r is final. And no write transaction
// locks a row that every other write locks: only the sequencer writes the
// log's head. That is PostgreSQL's case. On SQLite, whose one writer
// holds its lock from the start of each write transaction, writes commit
// in the order they run, so each numbers its own entries after the head
// and moves it (logChanges): a commit is one transaction, not two.

// sequenceBatch bounds the entries one sequencing transaction numbers.
const sequenceBatch = 5000

// sequencerLock is the advisory lock (PostgreSQL) that makes the
// sequencer one at a time across replicas.
const sequencerLock = 735302

// Sequence numbers the committed entries without a revision. On SQLite,
// once Open has numbered what it found, each write numbers its own
// entries and there is nothing to do.
func (s *SQL) Sequence(ctx context.Context) (int, error) {
	if s.numbered {
		return 0, nil
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return 0, unavailable(fmt.Errorf("begin sequencing: %w", err))
	}
	defer tx.Rollback()
	if s.eng.name() == "postgres" {
		var ours bool
		if err := tx.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1)", sequencerLock).Scan(&ours); err != nil {
			return 0, unavailable(fmt.Errorf("sequencer lock: %w", err))
		}
		if !ours {
			return 0, nil // another replica is numbering right now
		}
	}
	var head int64
	if err := tx.QueryRowContext(ctx, "SELECT head FROM log_head WHERE id = 1").Scan(&head); err != nil {
		return 0, unavailable(fmt.Errorf("log head: %w", err))
	}
	res, err := tx.ExecContext(ctx, s.eng.rebind(`UPDATE change_log SET revision = n.rev FROM (
		SELECT id, ? + row_number() OVER (ORDER BY id) AS rev FROM change_log WHERE revision IS NULL ORDER BY id LIMIT ?
	) AS n WHERE change_log.id = n.id`), head, sequenceBatch)
	if err != nil {
		return 0, unavailable(fmt.Errorf("sequence: %w", err))
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, s.eng.rebind("UPDATE log_head SET head = ? WHERE id = 1"), head+n); err != nil {
		return 0, unavailable(fmt.Errorf("advance log head: %w", err))
	}
	if err := tx.Commit(); err != nil {
		return 0, unavailable(fmt.Errorf("commit sequencing: %w", err))
	}
	s.Notify(ctx, TopicLog)
	return int(n), nil
}

// Log returns sequenced entries after a revision.
func (s *SQL) Log(ctx context.Context, after int64, limit int) ([]LogEntry, error) {
	rows, err := s.reader.QueryContext(ctx, s.eng.rebind("SELECT id, revision, loadbalancer_id, at FROM change_log WHERE revision > ? ORDER BY revision LIMIT ?"), after, limit)
	if err != nil {
		return nil, unavailable(fmt.Errorf("read log: %w", err))
	}
	defer rows.Close()
	var out []LogEntry
	for rows.Next() {
		var e LogEntry
		var at int64
		if err := rows.Scan(&e.ID, &e.Revision, &e.LoadBalancerID, &at); err != nil {
			return nil, unavailable(fmt.Errorf("read log: %w", err))
		}
		e.At = time.UnixMicro(at)
		out = append(out, e)
	}
	return out, unavailable(rows.Err())
}

// LogBounds returns the oldest held and the newest revision.
func (s *SQL) LogBounds(ctx context.Context) (oldest, head int64, err error) {
	err = s.reader.QueryRowContext(ctx, "SELECT oldest, head FROM log_head WHERE id = 1").Scan(&oldest, &head)
	return oldest, head, unavailable(err)
}

// EntryRevision returns an entry's revision, 0 while it has none;
// ErrNotFound once it is compacted away (or never was).
func (s *SQL) EntryRevision(ctx context.Context, id int64) (int64, error) {
	var rev sql.NullInt64
	err := s.reader.QueryRowContext(ctx, s.eng.rebind("SELECT revision FROM change_log WHERE id = ?"), id).Scan(&rev)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, unavailable(fmt.Errorf("entry %d: %w", id, err))
	}
	return rev.Int64, nil
}

// Compact drops the entries at or below upTo.
func (s *SQL) Compact(ctx context.Context, upTo int64) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return unavailable(fmt.Errorf("begin compaction: %w", err))
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, s.eng.rebind("DELETE FROM change_log WHERE revision <= ?"), upTo); err != nil {
		return unavailable(fmt.Errorf("compact log: %w", err))
	}
	if _, err := tx.ExecContext(ctx, s.eng.rebind("UPDATE log_head SET oldest = ? WHERE id = 1 AND oldest < ?"), upTo, upTo); err != nil {
		return unavailable(fmt.Errorf("compact log: %w", err))
	}
	return unavailable(tx.Commit())
}

// Epoch is the database's identity, made by its first migration and read
// at Open.
func (s *SQL) Epoch(context.Context) (string, error) { return s.epoch, nil }

func (s *SQL) readEpoch(ctx context.Context) error {
	if err := s.reader.QueryRowContext(ctx, "SELECT epoch FROM cluster WHERE id = 1").Scan(&s.epoch); err != nil {
		return fmt.Errorf("epoch: %w", err)
	}
	return nil
}
