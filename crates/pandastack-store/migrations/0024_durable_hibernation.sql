-- A hibernated sandbox's copy in the object store, kept in case its host is lost (issue #39):
-- `durable_tag` names the stored image (the agent's tag) and `durable_at` (Unix ms) is when it
-- became durable. Both are cleared when the sandbox's state changes (the copy is no longer the
-- sandbox) and when it moves; a replica that finds the host dead adopts the copy on another
-- host at the sandbox's next wake. Portable SQL.
ALTER TABLE sandboxes ADD COLUMN durable_tag TEXT;
ALTER TABLE sandboxes ADD COLUMN durable_at BIGINT;
