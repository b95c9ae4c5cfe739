-- A change sequence on the agents' rows, so that a replica reads only the
-- rows changed since it last read. Every write of agent_acks takes the
-- next value of agent_seq.seq in its transaction (the row's lock orders
-- the writers, so a reader that sees a value sees every smaller one) and
-- gives it to each row it writes. An agent that leaves is a tombstone
-- (gone) with its new seq, until a writer purges tombstones older than
-- agent_seq.purged: a reader behind that reads every row again.
ALTER TABLE agent_acks ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;
ALTER TABLE agent_acks ADD COLUMN gone BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX agent_acks_seq ON agent_acks (seq);
CREATE INDEX agent_acks_tombstones ON agent_acks (seq) WHERE gone;
CREATE TABLE agent_seq (id INTEGER PRIMARY KEY, seq BIGINT NOT NULL, purged BIGINT NOT NULL);
INSERT INTO agent_seq (id, seq, purged) VALUES (1, 0, 0)
