-- Placement (issue #38): what a host can hold in all and which templates it holds, so a create
-- can choose its host in the store. Portable SQL.
--
-- `slots`: how many sandboxes the host can run in all (its network slots); 0 until an agent
-- reports it, and 0 means "not limited by slots" (memory still is). A create counts against it
-- every sandbox of the host in a state that holds a VM (`starting`, `running`, `paused`).
--
-- `templates`: the templates the host holds, as `,name1,name2,` — each name between commas,
-- with a comma before the first and after the last, sorted, no duplicates; '' for none.
-- Template names never contain a comma (`[A-Za-z0-9_-]`), so "holds template T" is the exact,
-- case-sensitive substring test `replace(templates, ',T,', '') <> templates`, which both engines
-- run unchanged (LIKE would not do: `_` is a wildcard in it, and SQLite's is case-insensitive).
ALTER TABLE hosts ADD COLUMN slots BIGINT NOT NULL DEFAULT 0;
ALTER TABLE hosts ADD COLUMN templates TEXT NOT NULL DEFAULT '';

-- What placement reads on every create: the memory and the number of each host's sandboxes
-- that hold a VM, from this index alone (partial and covering: the rows of hibernated, stopped,
-- failed and lost sandboxes are not in it). Its predicate is word for word the one the store's
-- queries use (`hosts::HOLDS_A_VM`), so SQLite's planner matches it as PostgreSQL's does.
CREATE INDEX sandboxes_holding_vm ON sandboxes (host_id, memory_mib)
    WHERE state IN ('starting', 'running', 'paused');
