-- The objects' keys lead with what a new tree shares, so that a create
-- writes its index entries side by side. Ids are UUID v7 (time-ordered):
-- a primary key on (id, kind) puts all of a new tree's entries at one end
-- of one index, where (kind, id) put them at the end of each kind's
-- range, a page per kind. Likewise the load balancer and parent indexes
-- lead with the load balancer and the parent.
ALTER TABLE objects DROP CONSTRAINT objects_pkey;
ALTER TABLE objects ADD PRIMARY KEY (id, kind);
DROP INDEX objects_loadbalancer;
CREATE INDEX objects_loadbalancer ON objects (loadbalancer_id, kind);
DROP INDEX objects_parent;
CREATE INDEX objects_parent ON objects (parent_id, kind) WHERE kind <> 'member'
