-- User-built templates: one row per build (version). The id (`<name>-v<n>-<6 hex>`) is also the name of
-- the baked template on the host, so versions never collide across workspaces; sandboxes created
-- from a version keep it when a newer one is built.
CREATE TABLE template_builds (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    name          TEXT NOT NULL,
    version       INTEGER NOT NULL,
    source        TEXT NOT NULL,
    status        TEXT NOT NULL,
    error         TEXT,
    description   TEXT NOT NULL,
    vcpus         INTEGER NOT NULL,
    memory_mib    INTEGER NOT NULL,
    disk_mb       INTEGER NOT NULL,
    env           TEXT NOT NULL,
    image_bytes   BIGINT,
    build_ms      BIGINT,
    bake_ms       BIGINT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    UNIQUE (workspace_id, name, version)
);
CREATE INDEX template_builds_ws_name ON template_builds (workspace_id, name, version);
