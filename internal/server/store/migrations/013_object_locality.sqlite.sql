-- The objects' keys lead with what a new tree shares, so that a create
-- writes its entries side by side. Ids are UUID v7 (time-ordered): a
-- primary key on (id, kind) puts all of a new tree's rows at one end of
-- one index, where (kind, id) put them at the end of each kind's range,
-- a page per kind. Likewise the load balancer and parent indexes lead
-- with the load balancer and the parent. SQLite cannot change a primary
-- key in place: the table is copied (seconds at tens of thousands of
-- load balancers, once).
CREATE TABLE objects_locality (
	kind TEXT NOT NULL,
	id TEXT NOT NULL,
	project_id TEXT NOT NULL DEFAULT '',
	loadbalancer_id TEXT NOT NULL DEFAULT '',
	parent_id TEXT NOT NULL DEFAULT '',
	data TEXT NOT NULL,
	created_at BIGINT NOT NULL,
	name TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (id, kind)
);
INSERT INTO objects_locality (kind, id, project_id, loadbalancer_id, parent_id, data, created_at, name)
	SELECT kind, id, project_id, loadbalancer_id, parent_id, data, created_at, name FROM objects;
DROP TABLE objects;
ALTER TABLE objects_locality RENAME TO objects;
CREATE INDEX objects_project ON objects (kind, project_id);
CREATE INDEX objects_loadbalancer ON objects (loadbalancer_id, kind);
CREATE INDEX objects_parent ON objects (parent_id, kind);
CREATE INDEX objects_lb_name ON objects (name) WHERE kind = 'loadbalancer'
