-- Portable SQL: runs unchanged on SQLite and PostgreSQL (TEXT ids, BIGINT unix-ms times,
-- TEXT JSON for maps, no engine-specific functions).
CREATE TABLE workspaces (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    max_sandboxes      INTEGER NOT NULL,
    creates_per_minute INTEGER NOT NULL
);

CREATE TABLE api_keys (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    name          TEXT NOT NULL,
    prefix        TEXT NOT NULL,
    hash          TEXT NOT NULL UNIQUE,
    created_at    BIGINT NOT NULL,
    last_used_at  BIGINT,
    revoked_at    BIGINT
);

CREATE TABLE sandboxes (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    template      TEXT NOT NULL,
    state         TEXT NOT NULL,
    vcpus         INTEGER NOT NULL,
    memory_mib    INTEGER NOT NULL,
    metadata      TEXT NOT NULL,
    env           TEXT NOT NULL,
    ttl_seconds   BIGINT,
    idle_timeout_seconds BIGINT,
    on_timeout    TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT,
    last_activity_at BIGINT NOT NULL,
    boot_ms       BIGINT NOT NULL,
    boot_mode     TEXT NOT NULL,
    snapshot_id   TEXT,
    parent_id     TEXT
);
CREATE INDEX sandboxes_ws_created ON sandboxes (workspace_id, created_at, id);

CREATE TABLE snapshots (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    sandbox_id    TEXT NOT NULL,
    template      TEXT NOT NULL,
    size_bytes    BIGINT NOT NULL,
    created_at    BIGINT NOT NULL
);
CREATE INDEX snapshots_ws_created ON snapshots (workspace_id, created_at, id);

CREATE TABLE idempotency_keys (
    workspace_id  TEXT NOT NULL,
    key           TEXT NOT NULL,
    request_hash  TEXT NOT NULL,
    status        INTEGER NOT NULL,
    body          TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, key)
);
