-- A fork's snapshot goes with its sandboxes: unless the fork asked to keep it
-- (`keep_snapshot`), `auto_delete` is 1 and the snapshot's row and files are deleted once no
-- sandbox row names it in `snapshot_id` (its children, or sandboxes created from it later).
-- Rows from before this migration (explicit snapshots, and forks' that predate it) are kept.
-- The index serves that "still used?" check. Portable SQL.

ALTER TABLE snapshots ADD COLUMN auto_delete BIGINT NOT NULL DEFAULT 0;
CREATE INDEX sandboxes_snapshot ON sandboxes (snapshot_id);
