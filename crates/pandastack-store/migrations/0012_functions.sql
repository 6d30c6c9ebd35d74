-- Functions (issue #18) are apps of kind `function`: the same rows, deploys (a function's
-- versions) and live pointer (its `live` alias); their runtime, handler and limits are in the
-- app's `config`. `kind` keeps the two lists apart. Portable SQL.

ALTER TABLE apps ADD COLUMN kind TEXT NOT NULL DEFAULT 'app';

-- An asynchronous call of a function: queued with its payload, run by a durable job
-- (`function_invoke`) on the function's host, retried up to `max_attempts`; `outcome` is the
-- finished invocation (JSON: status, result or error, output).
CREATE TABLE function_invocations (
    id            TEXT PRIMARY KEY,
    app_id        TEXT NOT NULL REFERENCES apps(id) ON DELETE CASCADE,
    workspace_id  TEXT NOT NULL,
    host_id       TEXT NOT NULL,
    state         TEXT NOT NULL,
    payload       TEXT NOT NULL,
    outcome       TEXT,
    attempts      BIGINT NOT NULL,
    max_attempts  BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);
CREATE INDEX function_invocations_app ON function_invocations (app_id, created_at);
