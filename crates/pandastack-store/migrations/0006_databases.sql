-- Managed PostgreSQL databases. A database's data is on a volume (`volume_id`, on `host_id`);
-- the VM that serves it is a sandbox (`sandbox_id`, NULL while it has none) that can be
-- replaced at any time from that volume. The row is written `creating` before anything is
-- made and becomes `ready` after the cluster answers, so start-up reconciliation removes what
-- a crash mid-create left (VM, volume, row). The owner role's password is kept here because
-- the API shows the connection string. Portable SQL.

CREATE TABLE databases (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    name          TEXT NOT NULL,
    version       BIGINT NOT NULL,
    host_id       TEXT NOT NULL,
    state         TEXT NOT NULL,
    volume_id     TEXT NOT NULL,
    sandbox_id    TEXT,
    role_name     TEXT NOT NULL,
    password      TEXT NOT NULL,
    size_gb       BIGINT NOT NULL,
    idle_seconds  BIGINT NOT NULL,
    parent_id     TEXT,
    created_at    BIGINT NOT NULL
);
CREATE UNIQUE INDEX databases_ws_name ON databases (workspace_id, name);
CREATE INDEX databases_host ON databases (host_id, state);
CREATE INDEX databases_sandbox ON databases (sandbox_id);
