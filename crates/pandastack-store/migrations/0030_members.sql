-- Workspace members (issue #42): people with a role (owner, admin, developer, viewer). A key
-- may belong to one (`api_keys.member_id`) and then can do no more than the member's role
-- allows; removing a member revokes its keys. Keys without a member are the workspace's own,
-- limited by their scopes alone (every key made before this). Portable SQL.
CREATE TABLE members (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    name          TEXT NOT NULL,
    email         TEXT NOT NULL,
    role          TEXT NOT NULL,
    created_at    BIGINT NOT NULL
);
CREATE UNIQUE INDEX members_email ON members (workspace_id, email);
ALTER TABLE api_keys ADD COLUMN member_id TEXT;
