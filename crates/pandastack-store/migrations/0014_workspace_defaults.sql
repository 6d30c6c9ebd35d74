-- The quotas a workspace is created with. The server sets every workspace's quotas from its
-- flags at start (`--max-volume-gb`, `--max-snapshots`, ...) and writes the same figures here,
-- so a workspace created while it runs (`pandastack keys create --new-workspace`) gets them
-- too instead of the column defaults. One row. Portable SQL.

CREATE TABLE workspace_defaults (
    id                   INTEGER PRIMARY KEY CHECK (id = 1),
    max_volume_gb        BIGINT NOT NULL,
    max_snapshots        BIGINT NOT NULL,
    max_hibernated       BIGINT NOT NULL,
    max_template_builds  BIGINT NOT NULL,
    max_storage_gb       BIGINT NOT NULL
);

INSERT INTO workspace_defaults
    (id, max_volume_gb, max_snapshots, max_hibernated, max_template_builds, max_storage_gb)
VALUES (1, 100, 500, 200, 100, 500);
