//! Where the proxy sends an app's requests, cached: [`super::Apps::route`] would otherwise read
//! three rows per request (the app by name, its live deploy, that deploy's VM).
//!
//! An entry holds the mapping name → (live VM, port) and the VM's row as last read. A request
//! whose entry is fresh (younger than [`ROUTE_TTL`]) reads nothing from the store when the
//! cached row says `running`, was read less than [`ROUTE_TTL`] ago, and the host reports the VM
//! running (an in-process lookup): only the VM's state decides anything on the app path (a
//! wake), and that comes from the host. Otherwise the row is read again (and kept). The proxy
//! reports the activity it writes ([`RouteCache::note_activity`]), so the cached row's activity
//! time does not make it write more often.
//!
//! - **This process** drops an app's entry the moment its mapping changes: a switch to another
//!   live version (a deploy going live, a rollback) and a delete. A lookup that read the store
//!   while such a change happened does not store what it read (a generation counter, bumped by
//!   every invalidation, is compared before the insert), so no stale entry outlives a change
//!   made here.
//! - **Another server process** sharing the store may switch or delete an app behind this one's
//!   back. Entries live at most [`ROUTE_TTL`], well under the drain pause during which a
//!   replaced version's VM keeps serving (10 s, `deploy::DRAIN`), so a stale entry still reaches
//!   a VM that answers; a deleted app's VM is gone at once, the host no longer reports it
//!   running, its row is read, and an entry whose VM row is gone is dropped and looked up again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pandastack_api_types::SandboxState;
use pandastack_store::SandboxRow;

/// Longest an entry (and the row it keeps) is used without reading the store again.
pub(crate) const ROUTE_TTL: Duration = Duration::from_secs(2);
/// Entries kept at most (a burst of lookups of many apps cannot grow it without bound).
const MAX_ENTRIES: usize = 10_000;

/// App name → its live VM and port (see the module's documentation).
#[derive(Debug, Default)]
pub(crate) struct RouteCache {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    routes: HashMap<String, Entry>,
    /// Bumped by every invalidation.
    generation: u64,
}

#[derive(Debug)]
struct Entry {
    sandbox: SandboxRow,
    port: u16,
    /// When the mapping was looked up.
    at: Instant,
    /// When `sandbox` was read.
    row_at: Instant,
}

/// A fresh entry: the live VM's row as last read, the port, and whether that row may stand in
/// for a read (read less than [`ROUTE_TTL`] ago, and `running`).
#[derive(Debug, Clone)]
pub(crate) struct Cached {
    pub sandbox: SandboxRow,
    pub port: u16,
    pub row_usable: bool,
}

impl RouteCache {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// App `name`'s entry, if fresh.
    pub(crate) fn get(&self, name: &str) -> Option<Cached> {
        let st = self.state();
        let e = st.routes.get(name)?;
        (e.at.elapsed() < ROUTE_TTL).then(|| Cached {
            sandbox: e.sandbox.clone(),
            port: e.port,
            row_usable: e.row_at.elapsed() < ROUTE_TTL && e.sandbox.state == SandboxState::Running,
        })
    }

    /// To be read before a lookup in the store and given to [`RouteCache::insert`].
    pub(crate) fn generation(&self) -> u64 {
        self.state().generation
    }

    /// Keeps what a lookup started at `generation` found, unless an invalidation came since.
    pub(crate) fn insert(&self, name: &str, sandbox: &SandboxRow, port: u16, generation: u64) {
        let mut st = self.state();
        if st.generation != generation {
            return;
        }
        if st.routes.len() >= MAX_ENTRIES {
            st.routes.retain(|_, e| e.at.elapsed() < ROUTE_TTL);
            if st.routes.len() >= MAX_ENTRIES {
                st.routes.clear();
            }
        }
        let now = Instant::now();
        st.routes.insert(
            name.to_owned(),
            Entry {
                sandbox: sandbox.clone(),
                port,
                at: now,
                row_at: now,
            },
        );
    }

    /// Keeps a row of app `name`'s VM read since (the mapping stays as old as it was).
    pub(crate) fn refresh_row(&self, name: &str, sandbox: &SandboxRow) {
        let mut st = self.state();
        if let Some(e) = st.routes.get_mut(name) {
            if e.sandbox.id == sandbox.id {
                e.sandbox = sandbox.clone();
                e.row_at = Instant::now();
            }
        }
    }

    /// The proxy wrote `at` (ms) as the activity time of app `name`'s VM `sandbox`.
    pub(crate) fn note_activity(&self, name: &str, sandbox: &str, at: i64) {
        let mut st = self.state();
        if let Some(e) = st.routes.get_mut(name) {
            if e.sandbox.id == sandbox {
                e.sandbox.last_activity_at = e.sandbox.last_activity_at.max(at);
            }
        }
    }

    /// Forgets app `name`'s route (it switched versions or is being deleted).
    pub(crate) fn invalidate(&self, name: &str) {
        let mut st = self.state();
        st.generation += 1;
        st.routes.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, state: SandboxState) -> SandboxRow {
        SandboxRow {
            id: id.into(),
            workspace_id: "ws".into(),
            host_id: "host".into(),
            template: "app".into(),
            state,
            vcpus: 1,
            memory_mib: 1024,
            disk_mbps: 0,
            disk_iops: 0,
            metadata: Default::default(),
            env: Default::default(),
            ttl_seconds: None,
            idle_timeout_seconds: None,
            on_timeout: pandastack_api_types::OnTimeout::Hibernate,
            on_host_loss: pandastack_api_types::OnHostLoss::Lost,
            created_at: 0,
            expires_at: None,
            last_activity_at: 0,
            boot_ms: 0,
            boot_mode: String::new(),
            snapshot_id: None,
            parent_id: None,
            access_token: String::new(),
            public_ports: Default::default(),
            volumes: Vec::new(),
        }
    }

    #[test]
    fn entries_are_dropped_by_invalidation_and_races_store_nothing() {
        let c = RouteCache::default();
        let g = c.generation();
        c.insert("a", &row("sb-1", SandboxState::Running), 3000, g);
        let e = c.get("a").unwrap();
        assert_eq!(
            (e.sandbox.id.as_str(), e.port, e.row_usable),
            ("sb-1", 3000, true)
        );
        assert!(c.get("b").is_none());
        c.invalidate("a");
        assert!(c.get("a").is_none());
        // A lookup that began before an invalidation (of any app) stores nothing.
        let g = c.generation();
        c.invalidate("b");
        c.insert("a", &row("sb-old", SandboxState::Running), 3000, g);
        assert!(c.get("a").is_none());
        let g = c.generation();
        c.insert("a", &row("sb-2", SandboxState::Running), 8080, g);
        assert_eq!(c.get("a").unwrap().sandbox.id, "sb-2");
    }

    #[test]
    fn rows_stand_in_only_while_fresh_and_running() {
        let c = RouteCache::default();
        let g = c.generation();
        c.insert("a", &row("sb-1", SandboxState::Hibernated), 3000, g);
        assert!(!c.get("a").unwrap().row_usable, "hibernated: read it again");
        c.refresh_row("a", &row("sb-1", SandboxState::Running));
        assert!(c.get("a").unwrap().row_usable);
        // Another VM's row is not this entry's.
        c.refresh_row("a", &row("sb-9", SandboxState::Hibernated));
        assert!(c.get("a").unwrap().row_usable);
        c.note_activity("a", "sb-1", 5_000);
        assert_eq!(c.get("a").unwrap().sandbox.last_activity_at, 5_000);
        c.state().routes.get_mut("a").unwrap().row_at -= ROUTE_TTL;
        let e = c.get("a").unwrap();
        assert!(!e.row_usable, "an old row is read again");
        c.state().routes.get_mut("a").unwrap().at -= ROUTE_TTL;
        assert!(c.get("a").is_none(), "an old mapping is looked up again");
    }
}
