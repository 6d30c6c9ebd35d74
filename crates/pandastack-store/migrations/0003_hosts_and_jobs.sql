-- Many hosts: every row of a thing that lives on a host names that host, and work that must
-- survive a restart is a row in `jobs`. Portable SQL (SQLite and PostgreSQL).

CREATE TABLE hosts (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    last_seen_at  BIGINT NOT NULL
);

-- Rows written before hosts existed have host_id '' and are adopted by the first host that
-- starts on this database (`Hosts::adopt_unowned`): that was the only host.
ALTER TABLE sandboxes ADD COLUMN host_id TEXT NOT NULL DEFAULT '';
ALTER TABLE snapshots ADD COLUMN host_id TEXT NOT NULL DEFAULT '';
ALTER TABLE template_builds ADD COLUMN host_id TEXT NOT NULL DEFAULT '';
CREATE INDEX sandboxes_host ON sandboxes (host_id, state);
CREATE INDEX snapshots_host ON snapshots (host_id);
CREATE INDEX template_builds_host ON template_builds (host_id, status);

-- Durable work. `resource` names what the job changes (e.g. `build:<id>`); at most one job per
-- resource is incomplete (queued or running) at a time. A running job is leased: its runner
-- renews `lease_until`, and a job whose lease ran out (its runner died) may be claimed again.
-- `host_id` NULL: any host may run it.
CREATE TABLE jobs (
    id            TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,
    resource      TEXT NOT NULL,
    host_id       TEXT,
    payload       TEXT NOT NULL,
    state         TEXT NOT NULL,
    attempts      BIGINT NOT NULL,
    max_attempts  BIGINT NOT NULL,
    error         TEXT,
    run_after     BIGINT NOT NULL,
    lease_owner   TEXT,
    lease_until   BIGINT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);
CREATE UNIQUE INDEX jobs_one_incomplete_per_resource ON jobs (resource)
    WHERE state IN ('queued', 'running');
CREATE INDEX jobs_runnable ON jobs (state, run_after);
