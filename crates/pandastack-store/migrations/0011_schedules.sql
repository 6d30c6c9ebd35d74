-- Schedules (cron, issue #18). `spec` is the schedule's JSON configuration (cron, timezone,
-- target, payload, concurrency_policy, starting_deadline_seconds, retries); `host_id` is the
-- host whose scheduler fires it; `next_due_at` (unix ms) is its next due time not yet fired
-- (NULL while paused). Portable SQL.

CREATE TABLE schedules (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    name          TEXT NOT NULL,
    host_id       TEXT NOT NULL,
    spec          TEXT NOT NULL,
    paused        BIGINT NOT NULL,
    next_due_at   BIGINT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);
CREATE UNIQUE INDEX schedules_name ON schedules (workspace_id, name);
CREATE INDEX schedules_due ON schedules (host_id, paused, next_due_at);

-- One firing of a schedule. UNIQUE(schedule_id, due_at) is what makes a due time fire once,
-- whichever process (or restarted process) gets there: the second insert finds the first.
-- A manual run's `due_at` is the time it was asked for. `output` is bounded (64 KiB).
CREATE TABLE schedule_runs (
    id            TEXT PRIMARY KEY,
    schedule_id   TEXT NOT NULL REFERENCES schedules(id) ON DELETE CASCADE,
    workspace_id  TEXT NOT NULL,
    due_at        BIGINT NOT NULL,
    run_trigger   TEXT NOT NULL,
    state         TEXT NOT NULL,
    attempt       BIGINT NOT NULL,
    sandbox_id    TEXT,
    started_at    BIGINT,
    ended_at      BIGINT,
    exit_code     BIGINT,
    output        TEXT,
    error         TEXT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);
CREATE UNIQUE INDEX schedule_runs_due ON schedule_runs (schedule_id, due_at);
CREATE INDEX schedule_runs_state ON schedule_runs (schedule_id, state);
