-- Pages of objects filled to half: a change that rewrites every member of a
-- pool (a batch update, its completion) then finds room for the new row
-- versions on their own pages, heap-only updates that write no index
-- entry. On full pages every new version went elsewhere, with an entry in
-- each index. Pages written before this keep their fill.
ALTER TABLE objects SET (fillfactor = 50);
-- Nothing looks members up by parent (a pool's members come with their
-- load balancer's tree), and they are most of the rows: the index leaves
-- them out. Every lookup by parent names its kind as a literal, which the
-- planner proves different from 'member'.
DROP INDEX objects_parent;
CREATE INDEX objects_parent ON objects (kind, parent_id) WHERE kind <> 'member'
