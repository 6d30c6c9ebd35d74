-- Metered usage (issue #42): what each resource of a workspace used, hour by hour, and the
-- cursors that make its metering exact across restarts. Portable SQL.
--
-- `usage_hours` holds one row per (workspace, resource, hour): `hour` is the unix ms of the
-- hour's start (UTC). Figures are integers in the units named: `vm_ms` (wall time a VM ran),
-- `vcpu_ms` (vCPUs x ms), `memory_mib_ms` (configured MiB x ms), `storage_kib_ms` (KiB kept x
-- ms), bytes the VMs sent (`egress_bytes`) and received (`ingress_bytes`), function
-- `invocations` and their `invocation_ms`. Rows are only ever added to (`ON CONFLICT ... DO
-- UPDATE SET x = x + excluded.x`), in the transaction that moves the cursor past what they count.
CREATE TABLE usage_hours (
    workspace_id    TEXT NOT NULL,
    resource_kind   TEXT NOT NULL,
    resource_id     TEXT NOT NULL,
    hour            BIGINT NOT NULL,
    vm_ms           BIGINT NOT NULL DEFAULT 0,
    vcpu_ms         BIGINT NOT NULL DEFAULT 0,
    memory_mib_ms   BIGINT NOT NULL DEFAULT 0,
    storage_kib_ms  BIGINT NOT NULL DEFAULT 0,
    egress_bytes    BIGINT NOT NULL DEFAULT 0,
    ingress_bytes   BIGINT NOT NULL DEFAULT 0,
    invocations     BIGINT NOT NULL DEFAULT 0,
    invocation_ms   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (workspace_id, hour, resource_kind, resource_id)
);

-- The last reading of a sandbox's VM already counted in `usage_hours`: its time, the VM
-- process it came from (`run`) and that process's network counters then. Moved only from the
-- value the meter read (a compare-and-set), so a reading is counted once.
CREATE TABLE usage_vm_cursors (
    sandbox_id  TEXT PRIMARY KEY,
    at_ms       BIGINT NOT NULL,
    run         BIGINT NOT NULL,
    net_rx      BIGINT,
    net_tx      BIGINT
);

-- Until when storage is counted (one row, id 1, once the first pass ran).
CREATE TABLE usage_storage_cursor (
    id     BIGINT PRIMARY KEY,
    at_ms  BIGINT NOT NULL
);
