package store

import "context"

// What the tests of package store_test look at inside a Grouped.

// Waiting is how many changes wait in g's queue.
func (g *Grouped) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// Transactions is how many write transactions g's changes took.
func (g *Grouped) Transactions() int64 { return g.transactions.Load() }

// BuiltUsed is how many kept values Built gave back.
func (g *Grouped) BuiltUsed() int64 { return g.builtUsed.Load() }

// Kept is how many values g keeps.
func (g *Grouped) Kept() int {
	g.builtMu.Lock()
	defer g.builtMu.Unlock()
	return len(g.built)
}

// GroupedOf is the Grouped that runs s's changes (SQLite), or nil.
func GroupedOf(s *SQL) *Grouped { return s.grouped }

// PurgeAgentTombstones purges the agents' tombstones at or below seq, as
// a writer does once they are far enough behind.
func PurgeAgentTombstones(s *SQL, seq int64) error {
	tx, err := s.writer.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := purgeAgentTombstones(context.Background(), tx, s.eng, seq); err != nil {
		return err
	}
	return tx.Commit()
}
