-- When a snapshot's files became durable in the object store (Unix ms; issue #39): from then on
-- a create from it may be placed on any host with the compatibility key of the host that took
-- it, which fetches it first. NULL: only on its own host (an upload under way or failed, a
-- fork's snapshot, a single host). Portable SQL.
ALTER TABLE snapshots ADD COLUMN durable_at BIGINT;
