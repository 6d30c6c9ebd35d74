-- Events and webhooks (issue #42). Portable SQL.
--
-- `events` is every lifecycle change of a workspace's resources. Its ids are handed out by
-- `event_counter`'s one row, updated in the transaction that inserts the event: the row lock
-- (PostgreSQL) or the write lock (SQLite) is held until commit, so events commit in the order
-- of their ids and a reader that has seen id N never later finds a smaller id appear — what
-- makes a stream's resume after `Last-Event-ID` exact. (A sequence hands out numbers in the
-- order transactions ask, not the order they commit.)
CREATE TABLE event_counter (
    id       BIGINT PRIMARY KEY,
    last_id  BIGINT NOT NULL
);
INSERT INTO event_counter (id, last_id) VALUES (1, 0);

CREATE TABLE events (
    id             BIGINT PRIMARY KEY,
    workspace_id   TEXT NOT NULL,
    event_type     TEXT NOT NULL,
    resource_kind  TEXT NOT NULL,
    resource_id    TEXT NOT NULL,
    at             BIGINT NOT NULL,
    data           TEXT NOT NULL
);
CREATE INDEX events_workspace ON events (workspace_id, id);

-- A workspace's webhook endpoints. `events` is a JSON array of patterns (exact types,
-- `<kind>.*`, `*`); `secret` is the `whsec_…` signing secret.
CREATE TABLE webhooks (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    url           TEXT NOT NULL,
    events        TEXT NOT NULL,
    secret        TEXT NOT NULL,
    disabled      BIGINT NOT NULL DEFAULT 0,
    created_at    BIGINT NOT NULL
);
CREATE INDEX webhooks_workspace ON webhooks (workspace_id, created_at, id);

-- One event's delivery to one webhook, written with the event. The table is the queue:
-- deliverers claim a pending row whose attempt is due with a lease, and only the oldest
-- pending event of its (webhook, resource) — so one resource's events arrive in order.
-- `round_start` is `attempts` when the current round began (creation or a redeliver): a round
-- gives up after its bound of attempts.
CREATE TABLE webhook_deliveries (
    id               TEXT PRIMARY KEY,
    webhook_id       TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    workspace_id     TEXT NOT NULL,
    event_id         BIGINT NOT NULL,
    event_type       TEXT NOT NULL,
    resource         TEXT NOT NULL,
    state            TEXT NOT NULL,
    attempts         BIGINT NOT NULL,
    round_start      BIGINT NOT NULL,
    last_status      BIGINT,
    last_error       TEXT,
    last_attempt_at  BIGINT,
    next_attempt_at  BIGINT NOT NULL,
    delivered_at     BIGINT,
    lease_owner      TEXT,
    lease_until      BIGINT,
    created_at       BIGINT NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_attempt_at);
CREATE INDEX webhook_deliveries_order ON webhook_deliveries (webhook_id, resource, state, event_id);
CREATE INDEX webhook_deliveries_list ON webhook_deliveries (webhook_id, created_at, id);
