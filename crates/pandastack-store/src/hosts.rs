//! Hosts: the machines that run sandboxes — their membership, leases and epochs.
//!
//! A host enters the table one of two ways:
//!
//! - [`Hosts::register`]: the single-node server's in-process host. It holds no lease
//!   (`lease_until = 0`) and is never reaped: nothing could renew it, and a server that is down
//!   is not a host another replica should give up on.
//! - [`Hosts::join`]: a host whose agent streams to a replica. Every join — first, after a
//!   restart, after being reaped — gets a new epoch and a lease that the replica the agent
//!   streams to renews ([`Hosts::renew`], many hosts per statement).
//!
//! [`Hosts::reap`] is one statement that any replica may run at any time: every host whose lease
//! lapsed becomes `dead` with its epoch bumped, exactly once however many replicas race for it.
//! A write caused by an agent names the epoch its host joined with and is applied only while
//! that epoch is current and the host is not dead ([`fence`], used by
//! [`crate::SandboxRepo::set_state_fenced`]): after a reap, or after the same host joined again,
//! the old agent's writes are refused with [`StoreError::Fenced`]. The sandboxes of a reaped
//! host that held a VM become `lost` in the same transaction.
//!
//! What a host can hold and which templates it holds ([`Hosts::join`], then [`Hosts::report`]
//! when its agent's heartbeats say it changed) are what placement
//! ([`crate::SandboxRepo::insert_placed`]) chooses by.

use sqlx::AnyPool;

use crate::{col, now_ms, parsed, StoreError};

/// Whether a host takes work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostState {
    /// Takes new sandboxes.
    Ready,
    /// Keeps what it has, takes nothing new (an operator's `drain`).
    Draining,
    /// Its lease lapsed and a reaper said so; only a new join brings it back.
    Dead,
}

impl HostState {
    pub fn as_str(self) -> &'static str {
        match self {
            HostState::Ready => "ready",
            HostState::Draining => "draining",
            HostState::Dead => "dead",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "ready" => HostState::Ready,
            "draining" => HostState::Draining,
            "dead" => HostState::Dead,
            _ => return None,
        })
    }
}

impl std::fmt::Display for HostState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a host offers: in all, and how many more sandboxes it can start now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostCapacity {
    pub vcpus: i64,
    pub memory_mib: i64,
    pub disk_bytes: i64,
    /// How many more sandboxes it can start now (as its agent last counted).
    pub free_slots: i64,
    /// How many creates its agent has under way (as it last said).
    pub creates_in_flight: i64,
    /// How many sandboxes it can run in all (its network slots); 0: not limited by slots.
    pub slots: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRow {
    pub id: String,
    /// The machine's hostname, for people.
    pub name: String,
    /// Where replicas reach its agent (`None`: the in-process host).
    pub address: Option<String>,
    pub state: HostState,
    /// Bumped by every join and every reap; an opaque, increasing number.
    pub epoch: i64,
    /// Unix ms; 0: no lease (the in-process host, never reaped).
    pub lease_until: i64,
    pub capacity: HostCapacity,
    /// The QEMU, guest kernel and CPU a snapshot needs to be restored here.
    pub compat_key: Option<String>,
    /// The templates it holds (sorted, no duplicates), as last reported.
    pub templates: Vec<String>,
    pub created_at: i64,
    pub last_seen_at: i64,
}

/// A host joining: what its agent says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joining {
    pub id: String,
    pub name: String,
    pub address: String,
    pub capacity: HostCapacity,
    pub compat_key: String,
    /// The templates it holds.
    pub templates: Vec<String>,
}

/// A host [`Hosts::reap`] declared dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reaped {
    pub host_id: String,
    /// How many of its sandboxes held a VM (`starting`, `running`, `paused`) and are now `lost`.
    pub lost: u64,
}

/// What one [`Hosts::renew`] did with each `(host id, epoch)` it was given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Renewal {
    pub renewed: Vec<(String, i64)>,
    /// Not renewed: the epoch is not current, the host is dead, or it is unknown. Its agent is
    /// fenced and must join again.
    pub fenced: Vec<(String, i64)>,
}

pub struct Hosts<'a> {
    pub(crate) pool: &'a AnyPool,
}

const COLUMNS: &str = "id, name, address, state, epoch, lease_until, vcpus, memory_mib, disk_bytes, free_slots, creates_in_flight, slots, compat_key, templates, created_at, last_seen_at";

/// Pairs per renewal statement (two parameters each, far below either engine's limit).
const RENEW_CHUNK: usize = 256;

/// Rows whose files or data live on a host: while any names it, it cannot be forgotten.
const HELD_ON_HOST: [&str; 4] = ["sandboxes", "snapshots", "volumes", "databases"];

/// Tables whose ids the host calls take, each row naming the host that holds it.
const OWNED_BY_HOST: [&str; 4] = ["sandboxes", "snapshots", "volumes", "volume_snapshots"];

/// The sandbox states in which a VM exists on the sandbox's host (a create under way, running,
/// paused): what a reap marks `lost` and what placement counts against a host. As SQL over a
/// `sandboxes` row, word for word the predicate of the partial index `sandboxes_holding_vm`
/// (migration 0019), which SQLite uses only for a query that repeats it exactly.
pub(crate) const HOLDS_A_VM: &str = "state IN ('starting', 'running', 'paused')";

/// A new host row's use counters (`vm_memory_mib`, `vms`; see `use_counters`), as SQL: what
/// sandboxes already naming host `$1` hold (none, unless the row was forgotten and made again).
fn use_of_1() -> String {
    format!(
        "COALESCE((SELECT SUM(memory_mib) FROM sandboxes WHERE host_id = $1 AND {HOLDS_A_VM}), \
         0), (SELECT COUNT(*) FROM sandboxes WHERE host_id = $1 AND {HOLDS_A_VM})"
    )
}

/// The `templates` column's form of `names` (see migration 0019): `,a,b,` — sorted, no
/// duplicates, '' for none. A name that is empty or holds a comma names no template and is
/// left out.
pub(crate) fn encode_templates(names: &[String]) -> String {
    let mut names: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| !n.is_empty() && !n.contains(','))
        .collect();
    if names.is_empty() {
        return String::new();
    }
    names.sort_unstable();
    names.dedup();
    format!(",{},", names.join(","))
}

/// The names in a `templates` column (see [`encode_templates`]).
fn decode_templates(column: &str) -> Vec<String> {
    column
        .split(',')
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

fn row(r: &sqlx::any::AnyRow) -> Result<HostRow, StoreError> {
    Ok(HostRow {
        id: col(r, "id")?,
        name: col(r, "name")?,
        address: col(r, "address")?,
        state: parsed(r, "state", HostState::parse)?,
        epoch: col(r, "epoch")?,
        lease_until: col(r, "lease_until")?,
        capacity: HostCapacity {
            vcpus: col(r, "vcpus")?,
            memory_mib: col(r, "memory_mib")?,
            disk_bytes: col(r, "disk_bytes")?,
            free_slots: col(r, "free_slots")?,
            creates_in_flight: col(r, "creates_in_flight")?,
            slots: col(r, "slots")?,
        },
        compat_key: col(r, "compat_key")?,
        templates: decode_templates(&col::<String>(r, "templates")?),
        created_at: col(r, "created_at")?,
        last_seen_at: col(r, "last_seen_at")?,
    })
}

impl Hosts<'_> {
    /// Records that the in-process host `id` is up (inserting it the first time). It holds no
    /// lease and is never reaped; a row a reaper left `dead` (the host had joined as an agent
    /// before) is `ready` again with a new epoch, and a `draining` one stays draining.
    pub async fn register(&self, id: &str, name: &str) -> Result<HostRow, StoreError> {
        let now = now_ms();
        let use_now = use_of_1();
        let r = sqlx::query(&format!(
            "INSERT INTO hosts (id, name, created_at, last_seen_at, vm_memory_mib, vms) \
             VALUES ($1, $2, $3, $3, {use_now}) \
             ON CONFLICT (id) DO UPDATE SET name = $2, last_seen_at = $3, lease_until = 0, \
             epoch = CASE WHEN hosts.state = 'dead' THEN hosts.epoch + 1 ELSE hosts.epoch END, \
             state = CASE WHEN hosts.state = 'dead' THEN 'ready' ELSE hosts.state END \
             RETURNING {COLUMNS}"
        ))
        .bind(id)
        .bind(name)
        .bind(now)
        .fetch_one(self.pool)
        .await?;
        row(&r)
    }

    /// Host `h.id` joins with a lease until `now + lease_ms`: a new row, or the old one with a
    /// new epoch (whatever it was: ready, dead, or an earlier process of the same host that
    /// never left), its address, capacity, templates and compatibility key replaced and its
    /// state `ready` — unless an operator is draining it, which a restart does not undo.
    ///
    /// A new row's first epoch is `now`, not 1: a host forgotten and joining again never
    /// repeats an epoch an old process of it may still hold.
    pub async fn join(&self, h: &Joining, lease_ms: i64, now: i64) -> Result<HostRow, StoreError> {
        let use_now = use_of_1();
        let r = sqlx::query(&format!(
            "INSERT INTO hosts (id, name, created_at, last_seen_at, address, state, epoch, \
             lease_until, vcpus, memory_mib, disk_bytes, free_slots, compat_key, slots, \
             templates, creates_in_flight, vm_memory_mib, vms) \
             VALUES ($1, $2, $3, $3, $4, 'ready', $3, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
             {use_now}) \
             ON CONFLICT (id) DO UPDATE SET name = $2, last_seen_at = $3, address = $4, \
             lease_until = $5, vcpus = $6, memory_mib = $7, disk_bytes = $8, free_slots = $9, \
             compat_key = $10, slots = $11, templates = $12, creates_in_flight = $13, \
             epoch = hosts.epoch + 1, \
             state = CASE WHEN hosts.state = 'draining' THEN 'draining' ELSE 'ready' END \
             RETURNING {COLUMNS}"
        ))
        .bind(&h.id)
        .bind(&h.name)
        .bind(now)
        .bind(&h.address)
        .bind(now + lease_ms)
        .bind(h.capacity.vcpus)
        .bind(h.capacity.memory_mib)
        .bind(h.capacity.disk_bytes)
        .bind(h.capacity.free_slots)
        .bind(&h.compat_key)
        .bind(h.capacity.slots)
        .bind(encode_templates(&h.templates))
        .bind(h.capacity.creates_in_flight)
        .fetch_one(self.pool)
        .await?;
        row(&r)
    }

    /// Records what host `id`'s agent, joined with `epoch`, says it has now: its capacity and
    /// the templates it holds (both replace what the row had). Fenced like an agent's other
    /// writes: [`StoreError::Fenced`] (nothing written) when `epoch` is not the host's current
    /// one, the host is dead, or it is unknown.
    pub async fn report(
        &self,
        id: &str,
        epoch: i64,
        capacity: &HostCapacity,
        templates: &[String],
    ) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE hosts SET vcpus = $3, memory_mib = $4, disk_bytes = $5, free_slots = $6, \
             slots = $7, templates = $8, creates_in_flight = $9 \
             WHERE id = $1 AND epoch = $2 AND state <> 'dead'",
        )
        .bind(id)
        .bind(epoch)
        .bind(capacity.vcpus)
        .bind(capacity.memory_mib)
        .bind(capacity.disk_bytes)
        .bind(capacity.free_slots)
        .bind(capacity.slots)
        .bind(encode_templates(templates))
        .bind(capacity.creates_in_flight)
        .execute(self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::Fenced {
                host: id.to_owned(),
                epoch,
            });
        }
        Ok(())
    }

    /// Extends to `lease_until` (never shortens) the leases of the hosts whose `(id, epoch)` is
    /// current and that are not dead — one statement per 256 pairs (`RENEW_CHUNK`). The rest are
    /// returned as fenced. A lease that lapsed without being reaped (the store was unreachable,
    /// see `pandastack_control::LeaseReaper`) is renewed like any other.
    pub async fn renew(
        &self,
        hosts: &[(String, i64)],
        lease_until: i64,
    ) -> Result<Renewal, StoreError> {
        let mut renewed = std::collections::HashSet::new();
        for chunk in hosts.chunks(RENEW_CHUNK) {
            let matches: Vec<String> = (0..chunk.len())
                .map(|i| format!("(id = ${} AND epoch = ${})", 2 + 2 * i, 3 + 2 * i))
                .collect();
            let sql = format!(
                "UPDATE hosts SET lease_until = CASE WHEN lease_until < $1 THEN $1 ELSE lease_until END \
                 WHERE state <> 'dead' AND ({}) RETURNING id, epoch",
                matches.join(" OR ")
            );
            let mut q = sqlx::query(&sql).bind(lease_until);
            for (id, epoch) in chunk {
                q = q.bind(id).bind(*epoch);
            }
            for r in q.fetch_all(self.pool).await? {
                renewed.insert((col::<String>(&r, "id")?, col::<i64>(&r, "epoch")?));
            }
        }
        let (renewed, fenced) = hosts
            .iter()
            .cloned()
            .partition(|pair| renewed.contains(pair));
        Ok(Renewal { renewed, fenced })
    }

    /// Marks `dead`, with a new epoch, every host whose lease lapsed before `now` (hosts without
    /// a lease excepted), and `lost` every sandbox of theirs in a state that holds a VM
    /// (`starting`, `running`, `paused`), in one transaction; returns the hosts by id, each
    /// with how many sandboxes it lost. The hosts are reaped in one statement: replicas racing
    /// reap each host once, and only the one that reaped it marks its sandboxes.
    pub async fn reap(&self, now: i64) -> Result<Vec<Reaped>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let rows = sqlx::query(
            "UPDATE hosts SET state = 'dead', epoch = epoch + 1 \
             WHERE state <> 'dead' AND lease_until > 0 AND lease_until < $1 RETURNING id",
        )
        .bind(now)
        .fetch_all(&mut *tx)
        .await?;
        let mut ids = rows
            .iter()
            .map(|r| col::<String>(r, "id"))
            .collect::<Result<Vec<_>, _>>()?;
        ids.sort();
        let mut reaped = Vec::with_capacity(ids.len());
        for host_id in ids {
            let lost = sqlx::query(&format!(
                "UPDATE sandboxes SET lost_from = state, state = 'lost' WHERE host_id = $1 AND {HOLDS_A_VM} \
                 RETURNING id, workspace_id, lost_from"
            ))
            .bind(&host_id)
            .fetch_all(&mut *tx)
            .await?;
            // Each lost sandbox's event, written with the change.
            for r in &lost {
                let event = crate::NewEvent {
                    workspace_id: col(r, "workspace_id")?,
                    event_type: "sandbox.lost".into(),
                    resource_kind: "sandbox".into(),
                    resource_id: col(r, "id")?,
                    data: serde_json::json!({
                        "host": host_id,
                        "reason": "its host's lease lapsed",
                        "from": col::<String>(r, "lost_from")?,
                    }),
                };
                crate::events::insert(&mut tx, &event).await?;
            }
            reaped.push(Reaped {
                host_id,
                lost: lost.len() as u64,
            });
        }
        tx.commit().await?;
        Ok(reaped)
    }

    /// Stops placing work on host `id` (what it runs stays). [`StoreError::HostDead`] for a dead
    /// host.
    pub async fn drain(&self, id: &str) -> Result<HostRow, StoreError> {
        self.set_live_state(id, HostState::Draining).await
    }

    /// Lets host `id` take work again after [`Hosts::drain`]. [`StoreError::HostDead`] for a dead
    /// host: only its agent joining again makes it ready.
    pub async fn undrain(&self, id: &str) -> Result<HostRow, StoreError> {
        self.set_live_state(id, HostState::Ready).await
    }

    async fn set_live_state(&self, id: &str, state: HostState) -> Result<HostRow, StoreError> {
        let r = sqlx::query(&format!(
            "UPDATE hosts SET state = $1 WHERE id = $2 AND state <> 'dead' RETURNING {COLUMNS}"
        ))
        .bind(state.as_str())
        .bind(id)
        .fetch_optional(self.pool)
        .await?;
        match r {
            Some(r) => row(&r),
            None => {
                self.get(id).await?;
                Err(StoreError::HostDead {
                    host: id.to_owned(),
                })
            }
        }
    }

    /// Removes dead host `id` once nothing lives on it any more (no sandbox, snapshot, volume or
    /// database row names it). [`StoreError::HostNotDead`] for a host that is not dead,
    /// [`StoreError::HostInUse`] naming what is left.
    pub async fn forget(&self, id: &str) -> Result<(), StoreError> {
        let empty: Vec<String> = HELD_ON_HOST
            .iter()
            .map(|table| format!("NOT EXISTS (SELECT 1 FROM {table} WHERE host_id = $1)"))
            .collect();
        let delete = format!(
            "DELETE FROM hosts WHERE id = $1 AND state = 'dead' AND {}",
            empty.join(" AND ")
        );
        // A second attempt only if the host emptied between the refusal and its reasons.
        for _ in 0..2 {
            let done = sqlx::query(&delete).bind(id).execute(self.pool).await?;
            if done.rows_affected() == 1 {
                return Ok(());
            }
            let host = self.get(id).await?;
            if host.state != HostState::Dead {
                return Err(StoreError::HostNotDead {
                    host: host.id,
                    state: host.state,
                });
            }
            for table in HELD_ON_HOST {
                let r = sqlx::query(&format!(
                    "SELECT COUNT(*) AS n FROM {table} WHERE host_id = $1"
                ))
                .bind(id)
                .fetch_one(self.pool)
                .await?;
                let count: i64 = col(&r, "n")?;
                if count > 0 {
                    return Err(StoreError::HostInUse {
                        host: host.id,
                        what: table,
                        count,
                    });
                }
            }
        }
        Err(StoreError::Conflict)
    }

    /// The host that holds the sandbox, snapshot, volume or volume snapshot `id` (any
    /// workspace's); `None` when no such row exists. One query: a lookup by primary key in each
    /// table (their ids' prefixes differ, so at most one matches).
    pub async fn owner_of(&self, id: &str) -> Result<Option<String>, StoreError> {
        let owners: Vec<String> = OWNED_BY_HOST
            .iter()
            .map(|table| format!("SELECT host_id FROM {table} WHERE id = $1"))
            .collect();
        let r = sqlx::query(&owners.join(" UNION ALL "))
            .bind(id)
            .fetch_optional(self.pool)
            .await?;
        r.map(|r| col(&r, "host_id")).transpose()
    }

    pub async fn get(&self, id: &str) -> Result<HostRow, StoreError> {
        let r = sqlx::query(&format!("SELECT {COLUMNS} FROM hosts WHERE id = $1"))
            .bind(id)
            .fetch_one(self.pool)
            .await?;
        row(&r)
    }

    /// Every host, by id.
    pub async fn list(&self) -> Result<Vec<HostRow>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM hosts ORDER BY id"))
            .fetch_all(self.pool)
            .await?;
        rows.iter().map(row).collect()
    }

    /// Gives rows written before hosts existed (host id `''`) to host `id`; returns how many.
    /// Only the first host to start on an old single-host database finds any.
    pub async fn adopt_unowned(&self, id: &str) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let mut n = 0;
        for table in ["sandboxes", "snapshots", "template_builds"] {
            n += sqlx::query(&format!(
                "UPDATE {table} SET host_id = $1 WHERE host_id = ''"
            ))
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        }
        tx.commit().await?;
        Ok(n)
    }
}

/// The fence of a write caused by host `host_id`'s agent: `Ok` while `epoch` is the host's
/// current epoch and the host is not dead, else [`StoreError::Fenced`]. Call it first in the
/// transaction that writes. It is a write (of nothing) to the host's row, so the check holds
/// until commit: on PostgreSQL it locks the row, and a reap or join waits for the transaction
/// (or, committed first, makes this check fail); on SQLite it takes the database's write lock.
pub(crate) async fn fence(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    host_id: &str,
    epoch: i64,
) -> Result<(), StoreError> {
    let done = sqlx::query(
        "UPDATE hosts SET epoch = epoch WHERE id = $1 AND epoch = $2 AND state <> 'dead'",
    )
    .bind(host_id)
    .bind(epoch)
    .execute(&mut **tx)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::Fenced {
            host: host_id.to_owned(),
            epoch,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_stored_between_commas_sorted_once() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            encode_templates(&names(&["py_3", "base", "Base", "base"])),
            ",Base,base,py_3,"
        );
        assert_eq!(encode_templates(&[]), "");
        // Names no template has are left out, not stored half.
        assert_eq!(encode_templates(&names(&["", "a,b"])), "");
        assert_eq!(encode_templates(&names(&["a,b", "c"])), ",c,");
        assert_eq!(
            decode_templates(&encode_templates(&names(&["node", "base"]))),
            ["base", "node"]
        );
        assert!(decode_templates("").is_empty());
    }

    #[test]
    fn the_index_of_sandboxes_holding_a_vm_has_the_queries_predicate() {
        let migration = include_str!("../migrations/0019_placement.sql");
        assert!(migration.contains(&format!("WHERE {HOLDS_A_VM};")));
    }
}
