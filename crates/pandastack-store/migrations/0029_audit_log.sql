-- The audit log (issue #42): one row per state-changing API call — who (key id and name, the
-- member it belongs to), what (the operation and its route), which resource, the result, the
-- caller's address and when. Never a request body. Ids sort by time (`au-` + the time in hex +
-- random), so a list pages newest first by id alone. Portable SQL.
CREATE TABLE audit_log (
    id             TEXT PRIMARY KEY,
    workspace_id   TEXT NOT NULL,
    at             BIGINT NOT NULL,
    key_id         TEXT NOT NULL,
    key_name       TEXT NOT NULL,
    member_id      TEXT,
    action         TEXT NOT NULL,
    method         TEXT NOT NULL,
    route          TEXT NOT NULL,
    resource_kind  TEXT NOT NULL,
    resource_id    TEXT,
    status         BIGINT NOT NULL,
    error_code     TEXT,
    source         TEXT NOT NULL,
    request_id     TEXT NOT NULL
);
CREATE INDEX audit_log_workspace ON audit_log (workspace_id, id);
CREATE INDEX audit_log_at ON audit_log (at);
