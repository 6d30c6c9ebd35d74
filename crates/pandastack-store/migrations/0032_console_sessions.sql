-- Web console sessions (issue #40): a browser signs in with an API key and gets a session
-- cookie instead of keeping the key. Only the SHA-256 of the cookie's secret is stored (`id`),
-- as with API keys; the session acts as its key (`key_id`), which is verified again on every
-- request. `csrf_token` is what every state-changing request of the session must echo in a
-- header. A session ends at `expires_at` or when revoked (sign-out). Portable SQL.
CREATE TABLE console_sessions (
    id          TEXT PRIMARY KEY,
    key_id      TEXT NOT NULL,
    csrf_token  TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    revoked_at  BIGINT
);
CREATE INDEX console_sessions_key ON console_sessions (key_id);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);
