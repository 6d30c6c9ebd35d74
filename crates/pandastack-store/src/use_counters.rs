//! Use counters kept on rows by triggers on `sandboxes`, so that the hot paths read one row
//! instead of counting sandboxes:
//! - each host's `hosts.vm_memory_mib` and `hosts.vms` (the memory and the number of its
//!   sandboxes that hold a VM; migration 0022), which placement reads;
//! - each workspace's `workspaces.active_sandboxes` (its sandboxes that are not `hibernated`,
//!   which count against `max_sandboxes`; migration 0023), which a create's limit check reads.
//!
//! The triggers run in the transaction that inserts, deletes or changes a sandbox's state,
//! memory or host, so the counters are never seen out of step with the rows they count; a
//! change that moves nothing (a create's `starting → running`) touches no other row. On
//! PostgreSQL one function does both, the workspace's row first and then the host's: a create
//! locks them in that order (the limit check, then placement), so a delete or state change
//! never waits for a host row while holding a workspace row a create waits for.
//!
//! The bodies differ by engine (PL/pgSQL, SQLite's trigger statements), so [`install`] creates
//! them after the migrations, once: in one transaction that holds writes to `sandboxes` off
//! (PostgreSQL: a table lock replicas starting together queue on; SQLite: the write lock),
//! drops an older version's triggers, creates these and counts every host's and workspace's
//! use afresh. (Migration 0022's comment names this file by its old name, `host_use.rs`: a
//! migration's text is checksummed and stays as it was applied.)

use sqlx::AnyPool;

use crate::hosts::HOLDS_A_VM;
use crate::{Backend, StoreError};

/// The triggers' name and version: a change to their bodies must take a new name (and drop
/// the old triggers, see [`OLD`]), or a store that has them keeps the old ones.
const NAME: &str = "sandboxes_use_v2";

/// What older versions installed, dropped by [`install`]: PostgreSQL's trigger and function,
/// SQLite's triggers.
const OLD: [&str; 3] = [
    "sandboxes_host_use_v1",
    "sandboxes_host_use_v1_insert",
    "sandboxes_host_use_v1_delete",
];

/// PostgreSQL: one function and one trigger.
const PG_FUNCTION: &str = "CREATE OR REPLACE FUNCTION sandboxes_use_v2() RETURNS trigger \
LANGUAGE plpgsql AS $$
DECLARE
  was boolean := TG_OP <> 'INSERT' AND OLD.state IN ('starting', 'running', 'paused');
  now boolean := TG_OP <> 'DELETE' AND NEW.state IN ('starting', 'running', 'paused');
  was_active boolean := TG_OP <> 'INSERT' AND OLD.state <> 'hibernated';
  now_active boolean := TG_OP <> 'DELETE' AND NEW.state <> 'hibernated';
BEGIN
  IF was_active AND NOT now_active THEN
    UPDATE workspaces SET active_sandboxes = active_sandboxes - 1 WHERE id = OLD.workspace_id;
  ELSIF now_active AND NOT was_active THEN
    UPDATE workspaces SET active_sandboxes = active_sandboxes + 1 WHERE id = NEW.workspace_id;
  END IF;
  IF was AND now AND OLD.host_id = NEW.host_id AND OLD.memory_mib = NEW.memory_mib THEN
    RETURN NULL;
  END IF;
  IF was THEN
    UPDATE hosts SET vm_memory_mib = vm_memory_mib - OLD.memory_mib, vms = vms - 1
      WHERE id = OLD.host_id;
  END IF;
  IF now THEN
    UPDATE hosts SET vm_memory_mib = vm_memory_mib + NEW.memory_mib, vms = vms + 1
      WHERE id = NEW.host_id;
  END IF;
  RETURN NULL;
END $$";

const PG_TRIGGER: &str = "CREATE TRIGGER sandboxes_use_v2 \
AFTER INSERT OR DELETE OR UPDATE OF state, memory_mib, host_id ON sandboxes \
FOR EACH ROW EXECUTE FUNCTION sandboxes_use_v2()";

/// SQLite's triggers' names ([`NAME`] is the one [`installed`] looks for).
const SQLITE_NAMES: [&str; 3] = [
    "sandboxes_use_v2_insert",
    "sandboxes_use_v2_delete",
    "sandboxes_use_v2",
];

/// SQLite: one trigger per kind of change.
const SQLITE_TRIGGERS: [&str; 3] = [
    "CREATE TRIGGER sandboxes_use_v2_insert AFTER INSERT ON sandboxes BEGIN \
     UPDATE workspaces SET active_sandboxes = active_sandboxes + 1 \
     WHERE id = NEW.workspace_id AND NEW.state <> 'hibernated'; \
     UPDATE hosts SET vm_memory_mib = vm_memory_mib + NEW.memory_mib, vms = vms + 1 \
     WHERE id = NEW.host_id AND NEW.state IN ('starting', 'running', 'paused'); END",
    "CREATE TRIGGER sandboxes_use_v2_delete AFTER DELETE ON sandboxes BEGIN \
     UPDATE workspaces SET active_sandboxes = active_sandboxes - 1 \
     WHERE id = OLD.workspace_id AND OLD.state <> 'hibernated'; \
     UPDATE hosts SET vm_memory_mib = vm_memory_mib - OLD.memory_mib, vms = vms - 1 \
     WHERE id = OLD.host_id AND OLD.state IN ('starting', 'running', 'paused'); END",
    "CREATE TRIGGER sandboxes_use_v2 AFTER UPDATE OF state, memory_mib, host_id \
     ON sandboxes BEGIN \
     UPDATE workspaces SET active_sandboxes = active_sandboxes \
     + (NEW.state <> 'hibernated') - (OLD.state <> 'hibernated') \
     WHERE id = NEW.workspace_id AND (NEW.state = 'hibernated') <> (OLD.state = 'hibernated'); \
     UPDATE hosts SET vm_memory_mib = vm_memory_mib - OLD.memory_mib, vms = vms - 1 \
     WHERE id = OLD.host_id AND OLD.state IN ('starting', 'running', 'paused') \
     AND NOT (NEW.state IN ('starting', 'running', 'paused') \
     AND OLD.host_id = NEW.host_id AND OLD.memory_mib = NEW.memory_mib); \
     UPDATE hosts SET vm_memory_mib = vm_memory_mib + NEW.memory_mib, vms = vms + 1 \
     WHERE id = NEW.host_id AND NEW.state IN ('starting', 'running', 'paused') \
     AND NOT (OLD.state IN ('starting', 'running', 'paused') \
     AND OLD.host_id = NEW.host_id AND OLD.memory_mib = NEW.memory_mib); END",
];

/// Every host's and workspace's counters counted afresh from the sandboxes.
fn recount() -> [String; 2] {
    [
        format!(
            "UPDATE hosts SET \
             vm_memory_mib = COALESCE((SELECT SUM(memory_mib) FROM sandboxes s \
             WHERE s.host_id = hosts.id AND s.{HOLDS_A_VM}), 0), \
             vms = (SELECT COUNT(*) FROM sandboxes s WHERE s.host_id = hosts.id AND s.{HOLDS_A_VM})"
        ),
        "UPDATE workspaces SET active_sandboxes = (SELECT COUNT(*) FROM sandboxes s \
         WHERE s.workspace_id = workspaces.id AND s.state <> 'hibernated')"
            .to_owned(),
    ]
}

async fn installed<'e, E>(db: E, backend: Backend) -> Result<bool, StoreError>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let sql = match backend {
        Backend::Postgres => "SELECT 1 AS one FROM pg_trigger WHERE tgname = $1",
        Backend::Sqlite => {
            "SELECT 1 AS one FROM sqlite_master WHERE type = 'trigger' AND name = $1"
        }
    };
    Ok(sqlx::query(sql)
        .bind(NAME)
        .fetch_optional(db)
        .await?
        .is_some())
}

/// Creates the triggers unless they are there, counting every host's and workspace's use in the same
/// transaction (see the module doc).
pub(crate) async fn install(pool: &AnyPool, backend: Backend) -> Result<(), StoreError> {
    if installed(pool, backend).await? {
        return Ok(());
    }
    let mut tx = pool.begin().await?;
    match backend {
        Backend::Postgres => {
            // Self-conflicting and conflicting with every write: replicas starting together
            // queue here, and no sandbox changes between the count and the triggers.
            sqlx::query("LOCK TABLE sandboxes IN SHARE ROW EXCLUSIVE MODE")
                .execute(&mut *tx)
                .await?;
            if installed(&mut *tx, backend).await? {
                return Ok(());
            }
            // A fresh database has none of the old names: no notice for each of them.
            sqlx::query("SET LOCAL client_min_messages = warning")
                .execute(&mut *tx)
                .await?;
            for old in OLD {
                sqlx::query(&format!("DROP TRIGGER IF EXISTS {old} ON sandboxes"))
                    .execute(&mut *tx)
                    .await?;
            }
            sqlx::query(&format!("DROP FUNCTION IF EXISTS {}()", OLD[0]))
                .execute(&mut *tx)
                .await?;
            sqlx::query(PG_FUNCTION).execute(&mut *tx).await?;
            sqlx::query(PG_TRIGGER).execute(&mut *tx).await?;
        }
        Backend::Sqlite => {
            // The first write takes the database's write lock for the transaction. A set left
            // partly in place (one dropped by hand) is replaced whole.
            for name in OLD.iter().chain(&SQLITE_NAMES) {
                sqlx::query(&format!("DROP TRIGGER IF EXISTS {name}"))
                    .execute(&mut *tx)
                    .await?;
            }
            for t in SQLITE_TRIGGERS {
                sqlx::query(t).execute(&mut *tx).await?;
            }
        }
    }
    for sql in recount() {
        sqlx::query(&sql).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::tests::{stores, Rng};
    use crate::{HostCapacity, Joining, SandboxRow, SandboxState, Store};

    /// Each host's counters, and what its sandboxes hold counted from them: `(id, memory, vms)`.
    async fn use_of(store: &Store) -> (Vec<(String, i64, i64)>, Vec<(String, i64, i64)>) {
        let kept = sqlx::query("SELECT id, vm_memory_mib, vms FROM hosts ORDER BY id")
            .fetch_all(&store.pool)
            .await
            .unwrap();
        let counted = sqlx::query(&format!(
            "SELECT h.id, CAST(COALESCE(SUM(s.memory_mib), 0) AS BIGINT) AS m, \
             CAST(COUNT(s.id) AS BIGINT) AS n FROM hosts h LEFT JOIN sandboxes s \
             ON s.host_id = h.id AND s.{HOLDS_A_VM} GROUP BY h.id ORDER BY h.id"
        ))
        .fetch_all(&store.pool)
        .await
        .unwrap();
        let rows = |rows: Vec<sqlx::any::AnyRow>, m: &str, n: &str| -> Vec<(String, i64, i64)> {
            rows.iter()
                .map(|r| {
                    (
                        crate::col(r, "id").unwrap(),
                        crate::col(r, m).unwrap(),
                        crate::col(r, n).unwrap(),
                    )
                })
                .collect()
        };
        (rows(kept, "vm_memory_mib", "vms"), rows(counted, "m", "n"))
    }

    /// Each workspace's count of sandboxes that are not hibernated, kept and counted:
    /// `(kept, counted)`, each `(id, n)` by id.
    async fn active_of(store: &Store) -> (Vec<(String, i64)>, Vec<(String, i64)>) {
        let pairs = |sql: &str| {
            let sql = sql.to_owned();
            async move {
                sqlx::query(&sql)
                    .fetch_all(&store.pool)
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| (crate::col(r, "id").unwrap(), crate::col(r, "n").unwrap()))
                    .collect::<Vec<(String, i64)>>()
            }
        };
        let kept = pairs("SELECT id, active_sandboxes AS n FROM workspaces ORDER BY id").await;
        let counted = pairs(
            "SELECT w.id, CAST(COUNT(s.id) AS BIGINT) AS n FROM workspaces w LEFT JOIN sandboxes s \
             ON s.workspace_id = w.id AND s.state <> 'hibernated' GROUP BY w.id ORDER BY w.id",
        )
        .await;
        (kept, counted)
    }

    async fn join(store: &Store, id: &str) {
        let joining = Joining {
            id: id.into(),
            name: id.into(),
            address: format!("{id}:7443"),
            capacity: HostCapacity {
                vcpus: 4,
                memory_mib: 65_536,
                disk_bytes: 1 << 30,
                free_slots: 64,
                creates_in_flight: 0,
                slots: 64,
            },
            compat_key: "k".into(),
            templates: vec![],
        };
        store.hosts().join(&joining, 10_000, 1_000).await.unwrap();
    }

    /// Inserts, state changes (between states that hold a VM and those that do not, into and
    /// out of `hibernated`), memory changes, moves between hosts (and to a host with no row)
    /// and deletes, in a random order, in two workspaces: after each, every host's counters
    /// equal what its sandboxes hold and every workspace's count its sandboxes that are not
    /// hibernated. Then a host that joins after sandboxes named it starts with their use, and
    /// an install over counters gone wrong (triggers dropped) counts them afresh.
    #[tokio::test]
    async fn every_change_to_a_sandbox_keeps_its_hosts_use() {
        let dir = tempfile::tempdir().unwrap();
        for store in stores(dir.path()).await {
            let mut rng = Rng(0x2545_f491_4f6c_dd1d);
            let mut workspaces = Vec::new();
            for name in ["ws", "other"] {
                let (ws, _, _) = store
                    .keys()
                    .create_workspace_with_key(name, 10_000, 10_000)
                    .await
                    .unwrap();
                workspaces.push(ws.id);
            }
            for h in ["a", "b", "c"] {
                join(&store, h).await;
            }
            let states = [
                SandboxState::Starting,
                SandboxState::Running,
                SandboxState::Paused,
                SandboxState::Stopped,
                SandboxState::Hibernated,
                SandboxState::Lost,
            ];
            let mut ids: Vec<String> = Vec::new();
            for step in 0..150 {
                match rng.pick(&[0, 0, 1, 1, 1, 2, 3, 4]) {
                    0 => {
                        let host = *rng.pick(&["a", "b", "c", "later"]);
                        let ws = rng.pick(&workspaces).clone();
                        let mut r = SandboxRow::service(&ws, host, "base", Default::default());
                        r.memory_mib = *rng.pick(&[256, 512, 1024]);
                        r.state = *rng.pick(&states);
                        store.sandboxes().insert(&r).await.unwrap();
                        ids.push(r.id);
                    }
                    _ if ids.is_empty() => continue,
                    1 => {
                        let id = rng.pick(&ids).clone();
                        store
                            .sandboxes()
                            .set_state(&id, *rng.pick(&states))
                            .await
                            .unwrap();
                    }
                    2 => {
                        sqlx::query("UPDATE sandboxes SET memory_mib = $1 WHERE id = $2")
                            .bind(*rng.pick(&[128_i64, 512, 2048]))
                            .bind(rng.pick(&ids))
                            .execute(&store.pool)
                            .await
                            .unwrap();
                    }
                    3 => {
                        sqlx::query("UPDATE sandboxes SET host_id = $1 WHERE id = $2")
                            .bind(*rng.pick(&["a", "b", "c", "later"]))
                            .bind(rng.pick(&ids))
                            .execute(&store.pool)
                            .await
                            .unwrap();
                    }
                    _ => {
                        let i = ids.len() / 2;
                        store.sandboxes().delete(&ids.remove(i)).await.unwrap();
                    }
                }
                let (kept, counted) = use_of(&store).await;
                assert_eq!(kept, counted, "step {step} on {:?}", store.backend);
                let (kept, counted) = active_of(&store).await;
                assert_eq!(
                    kept, counted,
                    "workspaces, step {step} on {:?}",
                    store.backend
                );
            }
            let (_, active) = active_of(&store).await;
            assert!(
                active.iter().all(|(_, n)| *n > 0),
                "a workspace ended with no active sandbox: the case tells too little: {active:?}"
            );
            let (_, before) = use_of(&store).await;
            assert!(
                before.iter().any(|(_, _, n)| *n > 0),
                "no sandbox held a VM at the end: the case tells too little"
            );
            join(&store, "later").await;
            let (kept, counted) = use_of(&store).await;
            assert_eq!(kept, counted, "a host joining after its sandboxes");
            let drop_triggers: &[&str] = match store.backend {
                Backend::Postgres => &["DROP TRIGGER sandboxes_use_v2 ON sandboxes"],
                Backend::Sqlite => &[
                    "DROP TRIGGER sandboxes_use_v2",
                    "DROP TRIGGER sandboxes_use_v2_insert",
                    "DROP TRIGGER sandboxes_use_v2_delete",
                ],
            };
            let mut tx = store.pool.begin().await.unwrap();
            for sql in drop_triggers {
                sqlx::query(sql).execute(&mut *tx).await.unwrap();
            }
            tx.commit().await.unwrap();
            for sql in [
                "UPDATE hosts SET vm_memory_mib = 7, vms = 7",
                "UPDATE workspaces SET active_sandboxes = 7",
            ] {
                sqlx::query(sql).execute(&store.pool).await.unwrap();
            }
            install(&store.pool, store.backend).await.unwrap();
            let (kept, counted) = use_of(&store).await;
            assert_eq!(kept, counted, "counted afresh at install");
            let (kept, counted) = active_of(&store).await;
            assert_eq!(kept, counted, "workspaces counted afresh at install");
        }
    }
}
