-- Each workspace's create-rate window (sandbox creates and fork children per minute), kept
-- where every replica sees it: the start of the current one-minute window (unix ms; 0: none
-- yet) and the creates counted in it. Portable SQL.
ALTER TABLE workspaces ADD COLUMN create_window_start BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workspaces ADD COLUMN create_window_count BIGINT NOT NULL DEFAULT 0;
