ALTER TABLE objects ADD COLUMN name TEXT NOT NULL DEFAULT '';
CREATE INDEX objects_lb_name ON objects (name) WHERE kind = 'loadbalancer'
