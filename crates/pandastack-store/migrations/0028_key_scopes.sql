-- What an API key may do and for how long (issue #42): its scopes as a JSON array of
-- `<kind>:<action>` strings (every key made before this may do everything: `["*"]`), an
-- optional expiry and when it was last used (unix ms; written at most once a minute per key).
-- Portable SQL.
ALTER TABLE api_keys ADD COLUMN scopes TEXT NOT NULL DEFAULT '["*"]';
ALTER TABLE api_keys ADD COLUMN expires_at BIGINT;
ALTER TABLE api_keys ADD COLUMN last_used_at BIGINT;
