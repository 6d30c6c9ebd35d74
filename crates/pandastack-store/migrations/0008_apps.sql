-- Apps deployed from git (issue #17). An app's name is its host name (`<name>.<domain>`), so
-- names are unique across workspaces. `config` is the app's JSON configuration (git source,
-- env, secrets, build/start overrides, sizes, scaling); `live_deploy_id` is the deploy the
-- proxy sends the app's traffic to (NULL until one passes its health check). Portable SQL.

CREATE TABLE apps (
    id              TEXT PRIMARY KEY,
    workspace_id    TEXT NOT NULL REFERENCES workspaces(id),
    name            TEXT NOT NULL,
    host_id         TEXT NOT NULL,
    config          TEXT NOT NULL,
    webhook_secret  TEXT NOT NULL,
    live_deploy_id  TEXT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE UNIQUE INDEX apps_name ON apps (name);
CREATE INDEX apps_ws ON apps (workspace_id, name);

-- One deploy of an app: a git ref built in a VM of its own (`sandbox_id`), which then serves
-- the version. `seq` numbers an app's deploys from 1. `delivery_id` is the webhook delivery
-- that asked for it (a redelivery finds it and deploys nothing). `plan` is the build plan the
-- detection chose (JSON), `error` why it failed.
CREATE TABLE app_deploys (
    id            TEXT PRIMARY KEY,
    app_id        TEXT NOT NULL REFERENCES apps(id) ON DELETE CASCADE,
    workspace_id  TEXT NOT NULL,
    host_id       TEXT NOT NULL,
    seq           BIGINT NOT NULL,
    git_ref       TEXT NOT NULL,
    commit_sha    TEXT,
    state         TEXT NOT NULL,
    sandbox_id    TEXT,
    plan          TEXT,
    error         TEXT,
    delivery_id   TEXT,
    phases        TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);
CREATE UNIQUE INDEX app_deploys_seq ON app_deploys (app_id, seq);
CREATE UNIQUE INDEX app_deploys_delivery ON app_deploys (app_id, delivery_id);
CREATE INDEX app_deploys_host ON app_deploys (host_id, state);
