-- What becomes of a running sandbox when its host is lost (issue #39): `on_host_loss` is
-- `lost` (it stays `lost` until its host comes back) or `restore` (it is restored on another
-- host from `checkpoint`, the newest snapshot of it whose files are durable in the object
-- store, or from its template when it has none). Portable SQL.
ALTER TABLE sandboxes ADD COLUMN on_host_loss TEXT NOT NULL DEFAULT 'lost';
ALTER TABLE sandboxes ADD COLUMN checkpoint TEXT;
-- The state a sandbox was in when its host's death made it `lost` (`running`, `paused` or
-- `starting`): a VM its agent paused on its own while cut off is resumed when it joins again
-- only if it was running.
ALTER TABLE sandboxes ADD COLUMN lost_from TEXT;
