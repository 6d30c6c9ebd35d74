-- A database VM's memory (MiB): its template is `postgres` baked with that size. Rows made
-- before this column served 1024 MiB, the `postgres` spec's size. Portable SQL.
ALTER TABLE databases ADD COLUMN memory_mb BIGINT NOT NULL DEFAULT 1024;
