-- One row per key that write transactions serialise on (Tx.Lock), such as
-- a project's quota usage: PostgreSQL locks the row, SQLite has one writer.
CREATE TABLE locks (
	name TEXT PRIMARY KEY
)
