//! A function's instances on this host: VMs restored from the live version's baked snapshot,
//! each serving up to `concurrency` calls at once, at most `max_instances` of them; a call
//! takes the most recently used instance with room (warm), else restores a new one (cold),
//! else waits for room. Each instance keeps its idle HTTP/1.1 connections to the runtime, so a
//! warm call does not dial. Instances idle longer than `idle_seconds`, and those of a version
//! no longer live, are deleted by the sweeper; a call that runs past its time limit takes its
//! instance with it (the handler may still be running: nothing else may use that VM).
//!
//! Each version that is live keeps one VM process started and waiting for its snapshot's state
//! (a stand-by, see `pandastack_runtime`'s `standby`), refilled after every cold call, so a
//! cold call skips process start; versions no longer live have theirs stopped.
//!
//! The pool is this process's memory: instance VMs are sandboxes of the function's workspace
//! (rows with [`INSTANCE_METADATA`]), and a restarted server deletes the ones it finds, since
//! it no longer knows who uses them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use pandastack_host::error_chain;
use pandastack_store::{SandboxRow, StoreError};
use tokio::sync::Notify;

use super::{Functions, Shared, APP_METADATA, DEPLOY_METADATA};
use crate::Source;

/// Sandbox metadata marking a function instance (value: the function's name).
pub const INSTANCE_METADATA: &str = "pandastack.function";
/// Idle connections kept per instance.
const MAX_IDLE_CONNS: usize = 8;

type Conn = SendRequest<Full<Bytes>>;

/// One instance VM.
struct Instance {
    sandbox: SandboxRow,
    busy: u32,
    last_used: Instant,
    conns: Vec<Conn>,
}

/// The instances of one version (deploy).
#[derive(Default)]
struct Version {
    instances: Vec<Instance>,
    /// Instances being restored now (they count against `max_instances`).
    starting: u32,
    /// The function's idle time, for the sweeper.
    idle: Duration,
    app_id: String,
    /// The version's baked snapshot.
    snapshot: String,
}

/// Every function instance of this host, by version.
#[derive(Default)]
pub(crate) struct Pool {
    versions: Mutex<HashMap<String, Version>>,
    /// An instance has room again, or one was removed.
    room: Notify,
}

/// What a call needs to reach its instance.
pub(crate) struct Lease {
    pub sandbox: SandboxRow,
    pub deploy: String,
    /// `true`: restored for this call.
    pub cold: bool,
    pub conn: Option<Conn>,
}

/// The limits a lease is taken under.
pub(crate) struct Limits {
    pub concurrency: u32,
    pub max_instances: u32,
    pub idle: Duration,
    /// Longest to wait for room.
    pub wait: Duration,
}

fn lock(p: &Pool) -> std::sync::MutexGuard<'_, HashMap<String, Version>> {
    p.versions.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    /// Instances warm now (of any version) per app id.
    pub(crate) fn warm(&self, app_id: &str) -> u32 {
        lock(self)
            .values()
            .filter(|v| v.app_id == app_id)
            .map(|v| v.instances.len() as u32)
            .sum()
    }
}

/// Why a call found no instance.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("all {0} instances are busy (waited {1:?})")]
    Busy(u32, Duration),
    #[error("restore an instance from the baked snapshot: {0}")]
    Restore(String),
}

impl Functions {
    /// An instance of deploy `deploy` (baked as `snapshot`) of function `app` with room for
    /// one more call.
    pub(crate) async fn lease(
        &self,
        app: &pandastack_store::AppRow,
        deploy: &str,
        snapshot: &str,
        limits: &Limits,
    ) -> Result<Lease, LeaseError> {
        let deadline = Instant::now() + limits.wait;
        loop {
            let room = self.s.instances.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let mut map = lock(&self.s.instances);
                let v = map.entry(deploy.to_owned()).or_default();
                v.idle = limits.idle;
                v.app_id.clone_from(&app.id);
                v.snapshot = snapshot.to_owned();
                if let Some(i) = v
                    .instances
                    .iter_mut()
                    .filter(|i| i.busy < limits.concurrency)
                    .max_by_key(|i| i.last_used)
                {
                    i.busy += 1;
                    i.last_used = Instant::now();
                    return Ok(Lease {
                        sandbox: i.sandbox.clone(),
                        deploy: deploy.to_owned(),
                        cold: false,
                        conn: i.conns.pop(),
                    });
                }
                if (v.instances.len() as u32) + v.starting < limits.max_instances {
                    v.starting += 1;
                    break;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, room).await.is_err() {
                return Err(LeaseError::Busy(limits.max_instances, limits.wait));
            }
        }
        let made = self.restore_instance(app, deploy, snapshot).await;
        // The restore took the waiting process (if there was one): start the next.
        self.s.keep_standby(snapshot, 1);
        let mut map = lock(&self.s.instances);
        let v = map.entry(deploy.to_owned()).or_default();
        v.starting = v.starting.saturating_sub(1);
        match made {
            Ok(sandbox) => {
                v.instances.push(Instance {
                    sandbox: sandbox.clone(),
                    busy: 1,
                    last_used: Instant::now(),
                    conns: Vec::new(),
                });
                Ok(Lease {
                    sandbox,
                    deploy: deploy.to_owned(),
                    cold: true,
                    conn: None,
                })
            }
            Err(e) => {
                drop(map);
                self.s.instances.room.notify_waiters();
                Err(LeaseError::Restore(e))
            }
        }
    }

    /// A call is done with its instance; `keep: false` discards the instance (its VM is
    /// deleted).
    pub(crate) async fn release(&self, lease: Lease, keep: bool) {
        let removed = {
            let mut map = lock(&self.s.instances);
            let mut removed = None;
            if let Some(v) = map.get_mut(&lease.deploy) {
                if let Some(pos) = v
                    .instances
                    .iter()
                    .position(|i| i.sandbox.id == lease.sandbox.id)
                {
                    if keep {
                        let i = &mut v.instances[pos];
                        i.busy = i.busy.saturating_sub(1);
                        i.last_used = Instant::now();
                        if let Some(c) = lease.conn.filter(|c| !c.is_closed()) {
                            if i.conns.len() < MAX_IDLE_CONNS {
                                i.conns.push(c);
                            }
                        }
                    } else {
                        removed = Some(v.instances.remove(pos).sandbox);
                    }
                }
            }
            removed
        };
        self.s.instances.room.notify_waiters();
        if let Some(sb) = removed {
            self.delete_instance(&sb).await;
        }
    }

    async fn restore_instance(
        &self,
        app: &pandastack_store::AppRow,
        deploy: &str,
        snapshot: &str,
    ) -> Result<SandboxRow, String> {
        let public = super::function::public_name(&app.name).to_owned();
        let row = SandboxRow::service(
            &app.workspace_id,
            &self.s.host_id,
            super::APP_TEMPLATE,
            BTreeMap::from([
                (APP_METADATA.to_owned(), app.name.clone()),
                (DEPLOY_METADATA.to_owned(), deploy.to_owned()),
                (INSTANCE_METADATA.to_owned(), public),
            ]),
        );
        self.s
            .sandboxes
            .launch(row, Source::Snapshot(snapshot.to_owned()))
            .await
            .map_err(|e| error_chain(&e))
    }

    async fn delete_instance(&self, sb: &SandboxRow) {
        let row = match self.s.store.sandboxes().by_id(&sb.id).await {
            Ok(r) => r,
            Err(StoreError::NotFound) => return,
            Err(e) => {
                tracing::warn!(sandbox = %sb.id, error = &e as &dyn std::error::Error, "read a function instance");
                return;
            }
        };
        if let Err(e) = self.s.sandboxes.delete(&row).await {
            tracing::warn!(sandbox = %sb.id, error = &e as &dyn std::error::Error, "delete a function instance");
        }
    }

    /// Deletes every instance of app `app_id` (its versions' and all).
    pub(crate) async fn drop_instances(&self, app_id: &str) {
        let gone: Vec<SandboxRow> = {
            let mut map = lock(&self.s.instances);
            let keys: Vec<String> = map
                .iter()
                .filter(|(_, v)| v.app_id == app_id)
                .map(|(k, _)| k.clone())
                .collect();
            keys.into_iter()
                .filter_map(|k| map.remove(&k))
                .flat_map(|v| v.instances.into_iter().map(|i| i.sandbox))
                .collect()
        };
        for sb in &gone {
            self.delete_instance(sb).await;
        }
        self.s.instances.room.notify_waiters();
    }

    /// Deletes instances idle past their function's idle time and idle ones of versions no
    /// longer live; every 2 s for the life of the process.
    pub async fn instance_sweeper(self) {
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let candidates: Vec<(String, String)> = lock(&self.s.instances)
                .iter()
                .map(|(d, v)| (d.clone(), v.app_id.clone()))
                .collect();
            for (deploy, app_id) in candidates {
                let live = match self.s.store.apps().by_id(&app_id).await {
                    Ok(a) => a.live_deploy_id.as_deref() == Some(deploy.as_str()),
                    Err(StoreError::NotFound) => false,
                    Err(_) => continue,
                };
                let gone: Vec<SandboxRow> = {
                    let mut map = lock(&self.s.instances);
                    let Some(v) = map.get_mut(&deploy) else {
                        continue;
                    };
                    let idle = v.idle;
                    let mut out = Vec::new();
                    v.instances.retain(|i| {
                        let stale = i.busy == 0 && (!live || i.last_used.elapsed() >= idle);
                        if stale {
                            out.push(i.sandbox.clone());
                        }
                        !stale
                    });
                    if v.instances.is_empty() && v.starting == 0 {
                        if let Some(v) = map.remove(&deploy) {
                            if !live {
                                self.s.keep_standby(&v.snapshot, 0);
                            }
                        }
                    }
                    out
                };
                for sb in &gone {
                    tracing::debug!(sandbox = %sb.id, deploy = %deploy, "function instance removed (idle or not live)");
                    self.delete_instance(sb).await;
                }
            }
        }
    }

    /// Deletes function instances an earlier process left (its pool is gone with it).
    pub async fn remove_stray_instances(&self) -> Result<(), StoreError> {
        for (id, _) in self.s.store.sandboxes().on_host(&self.s.host_id).await? {
            let Ok(row) = self.s.store.sandboxes().by_id(&id).await else {
                continue;
            };
            if row.metadata.contains_key(INSTANCE_METADATA) {
                tracing::info!(sandbox = %id, "removing a function instance of an earlier process");
                if let Err(e) = self.s.sandboxes.delete(&row).await {
                    tracing::warn!(sandbox = %id, error = &e as &dyn std::error::Error, "delete a stray function instance");
                }
            }
        }
        Ok(())
    }

    /// One HTTP request to the runtime in the leased instance, on a kept connection when
    /// there is one (a kept connection found closed before the request went out is replaced
    /// by a new one).
    pub(crate) async fn runtime_request(
        &self,
        lease: &mut Lease,
        port: u16,
        req: hyper::Request<Full<Bytes>>,
    ) -> Result<hyper::Response<Bytes>, String> {
        let mut conn = match lease.conn.take() {
            Some(c) if !c.is_closed() => c,
            _ => self.dial(&lease.sandbox.id, port).await?,
        };
        if conn.ready().await.is_err() {
            conn = self.dial(&lease.sandbox.id, port).await?;
            conn.ready()
                .await
                .map_err(|e| format!("connection to the function runtime: {e}"))?;
        }
        let resp = conn
            .send_request(req)
            .await
            .map_err(|e| format!("request to the function runtime: {e}"))?;
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| format!("answer of the function runtime: {e}"))?
            .to_bytes();
        lease.conn = Some(conn);
        Ok(hyper::Response::from_parts(parts, body))
    }

    async fn dial(&self, sandbox: &str, port: u16) -> Result<Conn, String> {
        let t = Instant::now();
        let io = self
            .s
            .host
            .connect_port(sandbox, port)
            .await
            .map_err(|e| format!("connect to the function runtime: {}", error_chain(&e)))?;
        let (send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
            .await
            .map_err(|e| format!("connect to the function runtime: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        tracing::debug!(
            sandbox,
            port,
            ms = t.elapsed().as_secs_f64() * 1e3,
            "dialled the function runtime"
        );
        Ok(send)
    }
}

impl Shared {
    /// Keeps `count` VM processes started and waiting for restores from `snapshot` on this
    /// host (a cold call then only loads the state), in the background; a failure is logged
    /// and calls restore without one.
    pub(crate) fn keep_standby(&self, snapshot: &str, count: usize) {
        let host = self.host.clone();
        let snapshot = snapshot.to_owned();
        tokio::spawn(async move {
            if let Err(e) = host.keep_standby(&snapshot, count).await {
                tracing::warn!(snapshot = %snapshot, count, error = &e as &dyn std::error::Error, "stand-by processes for a function snapshot");
            }
        });
    }
}
