-- Membership, leases and fencing (issue #38): where a host is reached, whether it takes work,
-- its epoch and lease, what it can hold, and what it can restore. Portable SQL.
--
-- `state`: `ready` (takes work), `draining` (keeps what it has, takes nothing new), `dead`
-- (its lease lapsed and a reaper said so). `epoch` is bumped by every join and every reap: a
-- write caused by an agent carries `(host_id, epoch)` and is applied only while both are current.
-- `lease_until` (unix ms) is renewed by the replica the host's agent streams to; 0 means the
-- host holds no lease — the single-node server's in-process host, which is never reaped.
-- Capacity: what the host offers in all (vCPUs, MiB of memory, bytes of disk) and how many more
-- sandboxes it can start now (`free_slots`); 0 until an agent reports it. `compat_key` names the
-- QEMU, guest kernel and CPU features a snapshot needs, so that only hosts with the same key are
-- offered its restore.
ALTER TABLE hosts ADD COLUMN address TEXT;
ALTER TABLE hosts ADD COLUMN state TEXT NOT NULL DEFAULT 'ready';
ALTER TABLE hosts ADD COLUMN epoch BIGINT NOT NULL DEFAULT 1;
ALTER TABLE hosts ADD COLUMN lease_until BIGINT NOT NULL DEFAULT 0;
ALTER TABLE hosts ADD COLUMN vcpus BIGINT NOT NULL DEFAULT 0;
ALTER TABLE hosts ADD COLUMN memory_mib BIGINT NOT NULL DEFAULT 0;
ALTER TABLE hosts ADD COLUMN disk_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE hosts ADD COLUMN free_slots BIGINT NOT NULL DEFAULT 0;
ALTER TABLE hosts ADD COLUMN compat_key TEXT;
-- The reaper's scan: hosts not yet dead whose lease lapsed.
CREATE INDEX hosts_lease ON hosts (state, lease_until);
