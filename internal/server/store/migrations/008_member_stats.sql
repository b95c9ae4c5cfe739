-- What the agents counted per member (backend), summed over the nodes and
-- the services that send to it: one row per member, grown by each
-- report's deltas.
CREATE TABLE member_stats (
	member_id TEXT PRIMARY KEY,
	loadbalancer_id TEXT NOT NULL,
	bytes_in BIGINT NOT NULL DEFAULT 0,
	bytes_out BIGINT NOT NULL DEFAULT 0,
	total_connections BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX member_stats_lb ON member_stats (loadbalancer_id);
