-- Per-workspace storage quotas: how many snapshots, hibernated sandboxes and template builds a
-- workspace may keep, and how much host disk they may take together (`max_storage_gb`). The
-- server sets them on every workspace at start. `image_bytes` is the host disk a hibernated
-- sandbox's files take (its hibernation image and disk), recorded when it hibernates. Portable
-- SQL.

ALTER TABLE workspaces ADD COLUMN max_snapshots BIGINT NOT NULL DEFAULT 500;
ALTER TABLE workspaces ADD COLUMN max_hibernated BIGINT NOT NULL DEFAULT 200;
ALTER TABLE workspaces ADD COLUMN max_template_builds BIGINT NOT NULL DEFAULT 100;
ALTER TABLE workspaces ADD COLUMN max_storage_gb BIGINT NOT NULL DEFAULT 500;
ALTER TABLE sandboxes ADD COLUMN image_bytes BIGINT NOT NULL DEFAULT 0;
