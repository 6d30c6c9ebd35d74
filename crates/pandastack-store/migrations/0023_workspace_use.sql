-- How many of a workspace's sandboxes count against its `max_sandboxes` (those not
-- `hibernated`), kept on the workspace's row, so a create's limit check reads one row instead of
-- counting every sandbox of the workspace (2.3 ms at 9,600 sandboxes on PostgreSQL, most of a
-- create's time in `bench cluster`'s placement at 200 hosts). Portable SQL.
--
-- The same triggers as the hosts' use (migration 0022) keep it; the store installs them for its
-- engine after the migrations (`crates/pandastack-store/src/use_counters.rs`) and counts every
-- workspace afresh in the same transaction.
ALTER TABLE workspaces ADD COLUMN active_sandboxes BIGINT NOT NULL DEFAULT 0;
