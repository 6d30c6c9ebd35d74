-- What each host's sandboxes that hold a VM (`starting`, `running`, `paused`) take, kept on the
-- host's row (issue #38), so placement reads one row per host instead of grouping every
-- sandbox on every create: `vm_memory_mib` (their memory) and `vms` (how many). Portable SQL.
--
-- Triggers on `sandboxes` keep them, in the transaction that changes a sandbox. Trigger bodies
-- are not portable between the engines, so the store installs them for its engine after the
-- migrations (`crates/pandastack-store/src/host_use.rs`), filling both columns from the
-- sandboxes in the same transaction, with writes to `sandboxes` held off meanwhile.
ALTER TABLE hosts ADD COLUMN vm_memory_mib BIGINT NOT NULL DEFAULT 0;
ALTER TABLE hosts ADD COLUMN vms BIGINT NOT NULL DEFAULT 0;
