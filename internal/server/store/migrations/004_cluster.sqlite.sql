CREATE TABLE change_log (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	loadbalancer_id TEXT NOT NULL,
	revision BIGINT UNIQUE,
	at BIGINT NOT NULL
);
CREATE INDEX change_log_unsequenced ON change_log (id) WHERE revision IS NULL;
CREATE TABLE log_head (id INTEGER PRIMARY KEY, head BIGINT NOT NULL, oldest BIGINT NOT NULL);
INSERT INTO log_head (id, head, oldest) SELECT 1, rev, rev FROM revision WHERE id = 1;
CREATE TABLE cluster (id INTEGER PRIMARY KEY, epoch TEXT NOT NULL);
INSERT INTO cluster (id, epoch) VALUES (1, lower(hex(randomblob(16))));
CREATE TABLE replicas (
	id TEXT PRIMARY KEY,
	address TEXT NOT NULL DEFAULT '',
	tail BIGINT NOT NULL DEFAULT 0,
	lease_until BIGINT NOT NULL
);
CREATE TABLE agent_acks (
	node TEXT PRIMARY KEY,
	replica TEXT NOT NULL,
	revision BIGINT NOT NULL
);
CREATE INDEX agent_acks_replica ON agent_acks (replica);
CREATE TABLE pending_changes (
	loadbalancer_id TEXT PRIMARY KEY,
	owner TEXT NOT NULL,
	change BIGINT NOT NULL
);
CREATE INDEX pending_changes_owner ON pending_changes (owner);
INSERT INTO pending_changes (loadbalancer_id, owner, change)
	SELECT id, '', 0 FROM objects WHERE kind = 'loadbalancer' AND json_extract(data, '$.provisioning_status') LIKE 'PENDING_%';
DROP TABLE changes;
DROP TABLE revision
