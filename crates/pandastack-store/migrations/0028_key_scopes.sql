-- What an API key may do and for how long (issue #42): its scopes as a JSON array of
-- `<kind>:<action>` strings (every key made before this may do everything: `["*"]`) and an
-- optional expiry (unix ms). `last_used_at` (from the first migration) is now written, at most
-- once a minute per key. Portable SQL.
ALTER TABLE api_keys ADD COLUMN scopes TEXT NOT NULL DEFAULT '["*"]';
ALTER TABLE api_keys ADD COLUMN expires_at BIGINT;
