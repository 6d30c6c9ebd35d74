-- Operators' keys (issue #38): an API key may be an admin's, which the operator routes
-- (`/v1/hosts`) require; 1 for an admin key, 0 for every other (existing keys included). Made
-- only on the server (`pandastack keys create --admin`), never through the API. Portable SQL.
ALTER TABLE api_keys ADD COLUMN admin BIGINT NOT NULL DEFAULT 0;
