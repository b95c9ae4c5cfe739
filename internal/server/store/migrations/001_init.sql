CREATE TABLE objects (
	kind TEXT NOT NULL,
	id TEXT NOT NULL,
	project_id TEXT NOT NULL DEFAULT '',
	loadbalancer_id TEXT NOT NULL DEFAULT '',
	parent_id TEXT NOT NULL DEFAULT '',
	data TEXT NOT NULL,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (kind, id)
);
CREATE INDEX objects_project ON objects (kind, project_id);
CREATE INDEX objects_loadbalancer ON objects (kind, loadbalancer_id);
CREATE INDEX objects_parent ON objects (kind, parent_id);
CREATE TABLE revision (id INTEGER PRIMARY KEY, rev BIGINT NOT NULL);
INSERT INTO revision (id, rev) VALUES (1, 0);
CREATE TABLE changes (
	revision BIGINT NOT NULL,
	loadbalancer_id TEXT NOT NULL,
	PRIMARY KEY (revision, loadbalancer_id)
)
