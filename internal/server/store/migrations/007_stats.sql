-- What the agents counted, summed over the nodes: one row per listener,
-- grown by each report's deltas.
CREATE TABLE listener_stats (
	listener_id TEXT PRIMARY KEY,
	loadbalancer_id TEXT NOT NULL,
	bytes_in BIGINT NOT NULL DEFAULT 0,
	bytes_out BIGINT NOT NULL DEFAULT 0,
	total_connections BIGINT NOT NULL DEFAULT 0,
	request_errors BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX listener_stats_lb ON listener_stats (loadbalancer_id);

-- Open connections per listener and node, as the node's last report said;
-- a row counts until fresh_until (database clock, microseconds), so that
-- a node that stopped reporting stops counting.
CREATE TABLE listener_active (
	listener_id TEXT NOT NULL,
	node TEXT NOT NULL,
	loadbalancer_id TEXT NOT NULL,
	active BIGINT NOT NULL,
	fresh_until BIGINT NOT NULL,
	PRIMARY KEY (listener_id, node)
);
CREATE INDEX listener_active_lb ON listener_active (loadbalancer_id);
CREATE INDEX listener_active_node ON listener_active (node);
