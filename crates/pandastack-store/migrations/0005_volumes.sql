-- Durable volumes. A volume's file is on one host (`host_id`); a sandbox that mounts it is
-- created there. `sandbox_volumes` holds each sandbox's mounts: at most one read-write mount
-- of a volume at a time (a read-only mount is of a copy, any number). A volume row is written
-- `creating` before its file and becomes `ready` after, so a crash mid-create leaves a row that
-- start-up reconciliation removes with whatever file was made. Portable SQL.

ALTER TABLE workspaces ADD COLUMN max_volume_gb BIGINT NOT NULL DEFAULT 100;
ALTER TABLE sandboxes ADD COLUMN volumes TEXT NOT NULL DEFAULT '[]';

CREATE TABLE volumes (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    name          TEXT NOT NULL,
    host_id       TEXT NOT NULL,
    size_gb       BIGINT NOT NULL,
    state         TEXT NOT NULL,
    source        TEXT,
    created_at    BIGINT NOT NULL
);
CREATE UNIQUE INDEX volumes_ws_name ON volumes (workspace_id, name);
CREATE INDEX volumes_host ON volumes (host_id, state);

CREATE TABLE sandbox_volumes (
    sandbox_id    TEXT NOT NULL,
    volume_id     TEXT NOT NULL,
    slot          BIGINT NOT NULL,
    path          TEXT NOT NULL,
    read_only     BIGINT NOT NULL,
    PRIMARY KEY (sandbox_id, slot)
);
CREATE UNIQUE INDEX sandbox_volumes_one_writer ON sandbox_volumes (volume_id) WHERE read_only = 0;
CREATE INDEX sandbox_volumes_volume ON sandbox_volumes (volume_id);

-- `internal` snapshots are taken for a backup and removed when its upload ends.
CREATE TABLE volume_snapshots (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    volume_id     TEXT NOT NULL,
    host_id       TEXT NOT NULL,
    size_gb       BIGINT NOT NULL,
    frozen        BIGINT NOT NULL,
    internal      BIGINT NOT NULL,
    created_at    BIGINT NOT NULL
);
CREATE INDEX volume_snapshots_volume ON volume_snapshots (volume_id, created_at, id);
CREATE INDEX volume_snapshots_host ON volume_snapshots (host_id);

-- A backup's upload is a durable job; a finished backup is also recorded in the object store
-- (manifest and record), which is what outlives this database.
CREATE TABLE volume_backups (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    volume_name   TEXT NOT NULL,
    volume_id     TEXT NOT NULL,
    snapshot_id   TEXT NOT NULL,
    host_id       TEXT NOT NULL,
    size_gb       BIGINT NOT NULL,
    state         TEXT NOT NULL,
    bytes_uploaded BIGINT,
    chunks        BIGINT,
    error         TEXT,
    created_at    BIGINT NOT NULL,
    finished_at   BIGINT
);
CREATE INDEX volume_backups_ws_volume ON volume_backups (workspace_id, volume_name, created_at, id);
