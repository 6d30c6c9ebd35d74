//! A sandbox moved to another host of a cluster (`POST /v1/sandboxes/{id}/migrate`), and calls
//! that meet a move under way.
//!
//! The order makes every step undoable until the row names the new host, and no two hosts ever
//! run the sandbox:
//!
//! 1. the destination is chosen by placement (same compatibility key, not the origin; the
//!    host the caller named, if any) without writing anything: no room, nothing changes;
//! 2. a running sandbox is hibernated (its row says so);
//! 3. the origin refuses to wake it from then on ([`pandastack_host::WAKE_WHILE_MOVING`]);
//! 4. the destination reads its image from the origin's agent (`Host::leave`,
//!    `Host::adopt_from`) and adopts it, hibernated — or, if that fails, the origin stores the
//!    image in the object store and the destination fetches it from there (`store_hibernated`,
//!    `adopt_stored`);
//! 5. the row changes host, fenced by its host and state (a sandbox woken, deleted or moved
//!    meanwhile is not moved: the adopted copy goes and the origin keeps it);
//! 6. a sandbox that was running wakes on its new host.
//!
//! A failure before step 5 destroys what the destination adopted and tells the origin to give
//! the move up (its copy wakes there again; a sandbox that was running is woken there). After
//! step 5 the origin's copy is kept, refusing wakes, for [`ORIGIN_KEPT`] — until every
//! replica's cached owner of the sandbox has expired — then destroyed with the stored image.
//! A call that meets the refusal reads the row again and follows it ([`Sandboxes::followed`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pandastack_host::{Host, HostError, Origin};
use pandastack_store::{now_ms, Demand, SandboxRow, SandboxState};

use super::{found, reachable, ControlError, Sandboxes, Verb};
use crate::Fleet;

/// How long a call on a sandbox that is moving waits for the move to end before it answers
/// that the sandbox is moving.
pub(super) const MOVE_WAIT: Duration = Duration::from_secs(60);

/// How often such a call looks at the sandbox's row again.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// How long the origin keeps its copy of a moved sandbox (refusing to wake it): by then no
/// replica routes a call there from a cached owner.
const ORIGIN_KEPT: Duration = crate::fleet::ROW_MAX_AGE.saturating_add(Duration::from_secs(1));

impl Sandboxes {
    /// Moves every hibernated sandbox of host `host_id` (of every workspace: the platform's
    /// hibernated app and function versions too) and every running app VM (its live version's:
    /// hibernated, moved and woken, so the app keeps answering, a request meanwhile waiting for
    /// the move) to other hosts, one at a time, as [`Self::migrate`] moves them; for a drain.
    /// Returns how many moved and how many stayed (no other host takes them, volumes mounted,
    /// changed meanwhile: logged each). Nothing on a single host.
    pub async fn move_off(&self, host_id: &str) -> Result<(usize, usize), ControlError> {
        if self.fleet.get().is_none() {
            return Ok((0, 0));
        }
        // An app's VM (not a function instance: those come and go with calls).
        let app_vm = |r: &SandboxRow| {
            r.metadata.contains_key(crate::apps::APP_METADATA)
                && !r
                    .metadata
                    .contains_key(crate::apps::instances::INSTANCE_METADATA)
        };
        let (mut moved, mut stayed) = (0, 0);
        for (id, state) in self.store.sandboxes().on_host(host_id).await? {
            if !matches!(state, SandboxState::Hibernated | SandboxState::Running) {
                continue;
            }
            let row = match self.by_id(&id).await {
                Ok(r) if r.host_id == host_id && r.state == SandboxState::Hibernated => r,
                Ok(r) if r.host_id == host_id && r.state == SandboxState::Running && app_vm(&r) => {
                    r
                }
                // Deleted, changed or moved since the list was read, or not to move.
                _ => continue,
            };
            match self.migrate(row, None).await {
                Ok(_) => moved += 1,
                Err(e) => {
                    stayed += 1;
                    tracing::warn!(
                        sandbox = %id,
                        host = %host_id,
                        error = &e as &dyn std::error::Error,
                        "drain: a sandbox stays on the host"
                    );
                }
            }
        }
        tracing::info!(host = %host_id, moved, stayed, "drain: hibernated sandboxes and app VMs moved off");
        Ok((moved, stayed))
    }

    /// Moves sandbox `row` to another host of the cluster — `to` if given, else the one
    /// placement chooses among hosts with the origin's compatibility key — and returns it
    /// there: running if it was running (or paused), else hibernated. Its memory, processes,
    /// files, id, preview URL and metadata come with it. [`ControlError::CannotMove`] when it
    /// cannot (one host only, a sandbox starting or with volumes, the host named is its own);
    /// no room anywhere is the store's `NoCapacity`. On any failure the sandbox stays where it
    /// was, as it was.
    pub async fn migrate(
        &self,
        row: SandboxRow,
        to: Option<&str>,
    ) -> Result<SandboxRow, ControlError> {
        let cannot = |why: String| ControlError::CannotMove {
            id: row.id.clone(),
            why,
        };
        let Some(fleet) = self.fleet.get().cloned() else {
            return Err(cannot(
                "this server is a single host: there is no other host to move it to".into(),
            ));
        };
        reachable(&row)?;
        let running = match row.state {
            SandboxState::Running | SandboxState::Paused => true,
            SandboxState::Hibernated => false,
            s => return Err(cannot(format!("it is {}", s.as_str()))),
        };
        if !row.volumes.is_empty() {
            return Err(cannot(
                "it has volumes mounted, and volumes stay on their host".into(),
            ));
        }
        if to == Some(row.host_id.as_str()) {
            return Err(cannot(format!("it is on host {} already", row.host_id)));
        }
        let _moving = Moving::start(&self.moving, &row.id)
            .ok_or_else(|| cannot("a move of it is under way".into()))?;
        let origin = self.store.hosts().get(&row.host_id).await?;
        let Some(key) = origin.compat_key.as_deref() else {
            return Err(cannot(format!(
                "its host {} reports no compatibility key",
                row.host_id
            )));
        };
        let exclude = vec![row.host_id.clone()];
        let demand = Demand {
            memory_mib: row.memory_mib,
            template: None,
            compat_key: Some(key),
            host: to,
            exclude: &exclude,
            now_ms: now_ms(),
        };
        let dest = self.store.sandboxes().choose_host(&demand).await?.host_id;
        // Back to a host it left moments ago: the copy it left there goes first.
        let pending = lock(&self.retiring).remove(&(row.id.clone(), dest.clone()));
        if let Some((now, task)) = pending {
            now.notify_one();
            let _ = task.await;
        }
        let started = Instant::now();
        let row = if running {
            self.lifecycle(row, Verb::Hibernate).await?
        } else {
            row
        };
        let moved = match self
            .move_image(&fleet, &row, &dest, origin.address.clone())
            .await
        {
            Ok(moved) => moved,
            Err(e) => {
                if running {
                    // Running before, running after: woken where it stayed.
                    if let Err(w) = self.lifecycle(row.clone(), Verb::Wake).await {
                        tracing::warn!(
                            sandbox = %row.id,
                            error = &w as &dyn std::error::Error,
                            "move given up: the sandbox stays hibernated where it was"
                        );
                    }
                }
                return Err(e);
            }
        };
        let moved = if running {
            self.awake(moved).await?
        } else {
            // Durable on its new host too (the move over: not skipped as one under way).
            drop(_moving);
            self.keep_durable(&moved, moved.last_activity_at);
            moved
        };
        tracing::info!(
            sandbox = %moved.id,
            from = %exclude[0],
            to = %dest,
            running,
            took_ms = started.elapsed().as_secs_f64() * 1e3,
            "sandbox moved to another host"
        );
        Ok(moved)
    }

    /// Steps 3–5 of the module doc for hibernated `row` (its host's agent at `address`): its
    /// row, now on `dest`.
    async fn move_image(
        &self,
        fleet: &Fleet,
        row: &SandboxRow,
        dest: &str,
        address: Option<String>,
    ) -> Result<SandboxRow, ControlError> {
        let (id, ws) = (row.id.as_str(), row.workspace_id.as_str());
        let origin = fleet.host(&row.host_id).await?;
        let target = fleet.host(dest).await?;
        let mut moved = None;
        if let Some(address) = address {
            // Read from the origin's agent: nothing uploaded for the move.
            let from = Origin {
                host_id: row.host_id.clone(),
                address,
            };
            let tag = origin.leave(id).await?;
            match target.adopt_from(id, ws, &from).await {
                Ok(_) => moved = Some(tag),
                Err(e) => tracing::warn!(
                    sandbox = %id,
                    from = %row.host_id,
                    to = %dest,
                    error = &e as &dyn std::error::Error,
                    "move: the image not read from the host it leaves; through the object store"
                ),
            }
        }
        let tag = match moved {
            Some(tag) => tag,
            None => {
                let tag = origin.store_hibernated(id, ws).await?;
                if let Err(e) = target.adopt_stored(id, ws, &tag).await {
                    self.give_up(&*origin, &*target, row, &tag).await;
                    return Err(e.into());
                }
                tag
            }
        };
        let fenced = self
            .store
            .sandboxes()
            .move_hibernated(id, &row.host_id, dest)
            .await;
        if !matches!(fenced, Ok(true)) {
            if let Err(e) = target.destroy(id).await {
                tracing::warn!(
                    sandbox = %id,
                    host = %dest,
                    error = &e as &dyn std::error::Error,
                    "move given up: the copy adopted by the destination stays"
                );
            }
            self.give_up(&*origin, &*target, row, &tag).await;
            return Err(match fenced {
                Err(e) => e.into(),
                _ => ControlError::CannotMove {
                    id: id.to_owned(),
                    why: "it was woken, deleted or moved while its image was copied".into(),
                },
            });
        }
        fleet.moved(id);
        let (from, id, ws) = (row.host_id.clone(), id.to_owned(), ws.to_owned());
        let now = Arc::new(tokio::sync::Notify::new());
        let key = (id.clone(), from.clone());
        let (retiring, mine) = (Arc::clone(&self.retiring), Arc::clone(&now));
        let mut entries = lock(&self.retiring);
        let task = tokio::spawn({
            let key = key.clone();
            async move {
                tokio::select! {
                    () = tokio::time::sleep(ORIGIN_KEPT) => {}
                    () = mine.notified() => {}
                }
                retire(origin, target, &from, &id, &ws, &tag).await;
                // Its own entry only: a later move may have put another there.
                let mut entries = lock(&retiring);
                if entries
                    .get(&key)
                    .is_some_and(|(n, _)| Arc::ptr_eq(n, &mine))
                {
                    entries.remove(&key);
                }
            }
        });
        entries.insert(key, (now, task));
        drop(entries);
        let mut row = row.clone();
        row.host_id = dest.to_owned();
        Ok(row)
    }

    /// A move of `row` given up: the origin takes its copy back (it wakes there again) and the
    /// stored image goes — unless another move (another replica's) has moved the row meanwhile,
    /// whose end retires the origin's copy: then only the image goes.
    async fn give_up(&self, origin: &dyn Host, target: &dyn Host, row: &SandboxRow, tag: &str) {
        let elsewhere = matches!(
            self.store.sandboxes().by_id(&row.id).await,
            Ok(now) if now.host_id != row.host_id
        );
        let (host, what) = if elsewhere {
            (target, "the stored image stays in the object store")
        } else {
            (
                origin,
                "the origin did not take its copy back: it does not wake until a move of it is \
                 tried again (or it is deleted)",
            )
        };
        if let Err(e) = host.forget_stored(&row.id, &row.workspace_id, tag).await {
            tracing::warn!(
                sandbox = %row.id,
                host = %row.host_id,
                error = &e as &dyn std::error::Error,
                "move given up, but {what}"
            );
        }
    }

    /// After `call` on `row`'s host refused because the sandbox is moving: waits a moment and
    /// reads its row again (the owner's cached host dropped), to call again where it is now.
    /// `Ok(None)` once the move has taken longer than [`MOVE_WAIT`] since `started`.
    pub(super) async fn followed(
        &self,
        row: &SandboxRow,
        started: Instant,
    ) -> Result<Option<SandboxRow>, ControlError> {
        if started.elapsed() >= MOVE_WAIT {
            return Ok(None);
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
        if let Some(fleet) = self.fleet.get() {
            fleet.moved(&row.id);
        }
        found(self.store.sandboxes().by_id(&row.id).await, &row.id).map(Some)
    }
}

/// Copies of sandboxes this process moved away, kept on the host they left for
/// [`ORIGIN_KEPT`]: by (sandbox, host), what starts the retirement at once and its task.
pub(super) type Retiring = std::sync::Mutex<
    HashMap<(String, String), (Arc<tokio::sync::Notify>, tokio::task::JoinHandle<()>)>,
>;

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether this process is moving sandbox `id` (see [`Moving`]).
pub(super) fn is_moving(
    set: &std::sync::Mutex<std::collections::HashSet<String>>,
    id: &str,
) -> bool {
    lock(set).contains(id)
}

/// A sandbox this process is moving, until dropped.
pub(super) struct Moving<'a> {
    set: &'a std::sync::Mutex<std::collections::HashSet<String>>,
    id: String,
}

impl<'a> Moving<'a> {
    /// `None` when `id` is being moved already.
    pub(super) fn start(
        set: &'a std::sync::Mutex<std::collections::HashSet<String>>,
        id: &str,
    ) -> Option<Self> {
        let fresh = set
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned());
        fresh.then(|| Self {
            set,
            id: id.to_owned(),
        })
    }
}

impl Drop for Moving<'_> {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// The end of a move: the origin's copy destroyed, the stored image forgotten.
async fn retire(
    origin: Arc<dyn Host>,
    target: Arc<dyn Host>,
    from: &str,
    id: &str,
    ws: &str,
    tag: &str,
) {
    match origin.destroy(id).await {
        Ok(()) | Err(HostError::SandboxNotFound(_)) => {}
        Err(e) => tracing::warn!(
            sandbox = %id,
            host = %from,
            error = &e as &dyn std::error::Error,
            "moved sandbox: its old copy stays on the host it left until that host joins again"
        ),
    }
    if let Err(e) = target.forget_stored(id, ws, tag).await {
        tracing::warn!(
            sandbox = %id,
            error = &e as &dyn std::error::Error,
            "moved sandbox: its stored image stays in the object store"
        );
    }
}
