-- Custom domains of apps (issue #17): extra host names the proxy sends to an app, each with
-- its TLS certificate when it comes from ACME. A domain is unique across workspaces (it is a
-- host name). `cert_state`: `none` (no ACME order: the certificate, if any, comes from files),
-- `pending` (an order is under way), `issued`, `failed` (`cert_error` says why). The pending
-- HTTP-01 challenge is a row here too, so whichever host the CA reaches answers it. Portable SQL.

CREATE TABLE app_domains (
    domain              TEXT PRIMARY KEY,
    app_id              TEXT NOT NULL REFERENCES apps(id) ON DELETE CASCADE,
    workspace_id        TEXT NOT NULL,
    cert_state          TEXT NOT NULL,
    cert_pem            TEXT,
    key_pem             TEXT,
    not_after           BIGINT,
    cert_error          TEXT,
    challenge_token     TEXT,
    challenge_key_auth  TEXT,
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL
);
CREATE INDEX app_domains_app ON app_domains (app_id);
CREATE INDEX app_domains_token ON app_domains (challenge_token);
CREATE INDEX app_domains_updated ON app_domains (updated_at);

-- One ACME account per directory URL, shared by every host (its credentials as JSON).
CREATE TABLE acme_accounts (
    directory    TEXT PRIMARY KEY,
    credentials  TEXT NOT NULL,
    created_at   BIGINT NOT NULL
);
