//! Calls in flight into a sandbox's guest count as activity for its idle timeout: a sandbox
//! running a command the API (or the platform: a database's start script) waits for is not
//! idle, however little CPU the command uses (`sleep 60`, a slow download). Without this, a
//! sandbox whose idle timeout is shorter than a call is hibernated in the middle of it and the
//! call fails with "hibernated during the call".
//!
//! [`Watched`] wraps the control plane's host. Each call that may last (exec, a streamed exec,
//! a file's read or write) holds a [`Busy`] guard while it runs, for a stream until it is
//! dropped. The guard:
//! - keeps the sandbox in this process's [`InFlight`] set, which the reaper of this process
//!   skips (exact on one host);
//! - touches the sandbox's row every [`TOUCH_EVERY`] while the call lasts, and once at its
//!   end, so the reaper of another replica (a cluster's) sees the activity too. A call shorter
//!   than that writes nothing: the touch that opened it (the API's wake) is recent enough.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use pandastack_host::{
    BoxStream, BuildLogFn, BuildSource, BuiltImage, DirPage, DiskRequest, ExecEvent, ExecInput,
    ExecOutcome, ExecSpec, FileInfo, Host, HostResult, ImagePiece, ListPage, LogChunk, LogPos,
    MetricSample, Origin, PortIo, SessionStart, Shape, SnapshotView, SpecRefused, SpecSummary,
    TemplateView, VmStats, VmView, VolumeHolder, VolumeMount, VolumeSnapshotView, VolumeUpload,
    VolumeView,
};
use pandastack_store::{now_ms, Store};

/// Runs a VM operation and records it in the process's metrics (`pandastack_vm_operations`,
/// `pandastack_vm_operation_seconds`).
async fn timed<T>(
    op: &'static str,
    call: impl std::future::Future<Output = HostResult<T>>,
) -> HostResult<T> {
    use tracing::Instrument;
    let t = std::time::Instant::now();
    let span = tracing::info_span!("vm", otel.name = %format_args!("vm.{op}"), op);
    let r = call.instrument(span).await;
    pandastack_telemetry::metrics().vm_operation(op, r.is_ok(), t.elapsed().as_secs_f64());
    r
}

/// How often a call in flight records activity on its sandbox's row. Under the reaper's
/// tick, so a reaper elsewhere never finds a row older than a call still running.
pub const TOUCH_EVERY: Duration = Duration::from_secs(1);

/// The sandboxes with calls in flight in this process, and how many each.
#[derive(Clone)]
pub struct InFlight {
    store: Store,
    calls: Arc<Mutex<HashMap<String, usize>>>,
}

impl InFlight {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            calls: Arc::default(),
        }
    }

    /// Whether a call into sandbox `id` is in flight in this process.
    pub fn contains(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    /// Marks a call into sandbox `id` in flight until the guard is dropped.
    pub fn enter(&self, id: &str) -> Busy {
        *self.lock().entry(id.to_owned()).or_default() += 1;
        let (done, ended) = tokio::sync::oneshot::channel::<()>();
        let (store, sandbox) = (self.store.clone(), id.to_owned());
        tokio::spawn(async move {
            tokio::pin!(ended);
            let mut touched = false;
            loop {
                tokio::select! {
                    _ = &mut ended => break,
                    () = tokio::time::sleep(TOUCH_EVERY) => {
                        touch(&store, &sandbox).await;
                        touched = true;
                    }
                }
            }
            // The end of a long call is activity too: the idle clock starts again from it.
            if touched {
                touch(&store, &sandbox).await;
            }
        });
        Busy {
            in_flight: self.clone(),
            id: id.to_owned(),
            _done: done,
        }
    }

    fn leave(&self, id: &str) {
        let mut calls = self.lock();
        if let Some(n) = calls.get_mut(id) {
            *n -= 1;
            if *n == 0 {
                calls.remove(id);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }
}

async fn touch(store: &Store, sandbox: &str) {
    if let Err(e) = store.sandboxes().touch(sandbox, now_ms()).await {
        tracing::debug!(
            sandbox,
            error = &e as &dyn std::error::Error,
            "could not record the activity of a call in flight"
        );
    }
}

/// A call in flight into one sandbox (see [`InFlight::enter`]). Dropping it ends the call:
/// its toucher writes once more (if the call was long enough to have written) and stops.
pub struct Busy {
    in_flight: InFlight,
    id: String,
    _done: tokio::sync::oneshot::Sender<()>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.in_flight.leave(&self.id);
    }
}

/// A stream that keeps its call in flight until it ends or is dropped.
struct Held<S> {
    inner: S,
    busy: Option<Busy>,
}

impl<S: Stream + Unpin> Stream for Held<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let next = Pin::new(&mut self.inner).poll_next(cx);
        if let Poll::Ready(None) = next {
            self.busy = None;
        }
        next
    }
}

fn held<T: Send + 'static>(stream: BoxStream<T>, busy: Busy) -> BoxStream<T> {
    Box::pin(Held {
        inner: stream,
        busy: Some(busy),
    })
}

/// The control plane's host with its calls into guests watched (see the module's doc). Every
/// other method goes straight through.
pub struct Watched {
    host: Arc<dyn Host>,
    in_flight: InFlight,
}

impl Watched {
    pub fn new(host: Arc<dyn Host>, in_flight: InFlight) -> Self {
        Self { host, in_flight }
    }
}

#[async_trait::async_trait]
impl Host for Watched {
    async fn list(&self) -> Vec<VmView> {
        self.host.list().await
    }
    async fn get(&self, id: &str) -> HostResult<VmView> {
        self.host.get(id).await
    }
    async fn create(&self, template: &str, id: &str) -> HostResult<VmView> {
        timed("create", self.host.create(template, id)).await
    }
    async fn create_with_volumes(
        &self,
        template: &str,
        id: &str,
        volumes: Vec<VolumeMount>,
    ) -> HostResult<VmView> {
        timed(
            "create",
            self.host.create_with_volumes(template, id, volumes),
        )
        .await
    }
    async fn create_with_disk(
        &self,
        template: &str,
        id: &str,
        volumes: Vec<VolumeMount>,
        disk: DiskRequest,
    ) -> HostResult<VmView> {
        timed(
            "create",
            self.host.create_with_disk(template, id, volumes, disk),
        )
        .await
    }
    async fn create_with_memory_file(&self, template: &str, id: &str) -> HostResult<VmView> {
        timed("create", self.host.create_with_memory_file(template, id)).await
    }
    async fn create_from_snapshot(&self, snapshot: &str, id: &str) -> HostResult<VmView> {
        timed("restore", self.host.create_from_snapshot(snapshot, id)).await
    }
    async fn pause(&self, id: &str) -> HostResult<VmView> {
        timed("pause", self.host.pause(id)).await
    }
    async fn resume(&self, id: &str) -> HostResult<VmView> {
        timed("resume", self.host.resume(id)).await
    }
    async fn hibernate(&self, id: &str) -> HostResult<VmView> {
        timed("hibernate", self.host.hibernate(id)).await
    }
    async fn wake(&self, id: &str) -> HostResult<VmView> {
        timed("wake", self.host.wake(id)).await
    }
    async fn awake(&self, id: &str) -> HostResult<VmView> {
        self.host.awake(id).await
    }
    async fn destroy(&self, id: &str) -> HostResult<()> {
        timed("delete", self.host.destroy(id)).await
    }
    async fn stats(&self, id: &str) -> HostResult<Option<VmStats>> {
        self.host.stats(id).await
    }
    async fn metrics(&self, id: &str, since_ms: i64) -> HostResult<Vec<MetricSample>> {
        self.host.metrics(id, since_ms).await
    }

    async fn console(&self, id: &str, from: Option<LogPos>, max: usize) -> HostResult<LogChunk> {
        self.host.console(id, from, max).await
    }
    async fn snapshot(&self, id: &str, snapshot_id: &str) -> HostResult<SnapshotView> {
        timed("snapshot", self.host.snapshot(id, snapshot_id)).await
    }
    async fn fork(
        &self,
        id: &str,
        snapshot_id: &str,
        child_ids: &[String],
    ) -> HostResult<(SnapshotView, Vec<VmView>)> {
        timed("fork", self.host.fork(id, snapshot_id, child_ids)).await
    }
    async fn store_hibernated(&self, id: &str, ws: &str) -> HostResult<String> {
        self.host.store_hibernated(id, ws).await
    }

    async fn store_snapshot(&self, snapshot_id: &str, ws: &str) -> HostResult<()> {
        self.host.store_snapshot(snapshot_id, ws).await
    }

    async fn fetch_snapshot(
        &self,
        snapshot_id: &str,
        ws: &str,
        origin: Option<&Origin>,
    ) -> HostResult<()> {
        self.host.fetch_snapshot(snapshot_id, ws, origin).await
    }

    async fn send_snapshot(
        &self,
        snapshot_id: &str,
    ) -> HostResult<BoxStream<HostResult<ImagePiece>>> {
        self.host.send_snapshot(snapshot_id).await
    }

    async fn store_durable(&self, id: &str, ws: &str) -> HostResult<String> {
        self.host.store_durable(id, ws).await
    }

    async fn leave(&self, id: &str) -> HostResult<String> {
        self.host.leave(id).await
    }

    async fn adopt_from(&self, id: &str, ws: &str, origin: &Origin) -> HostResult<VmView> {
        self.host.adopt_from(id, ws, origin).await
    }

    async fn send_hibernated(&self, id: &str) -> HostResult<BoxStream<HostResult<ImagePiece>>> {
        self.host.send_hibernated(id).await
    }
    async fn adopt_stored(&self, id: &str, ws: &str, tag: &str) -> HostResult<VmView> {
        self.host.adopt_stored(id, ws, tag).await
    }
    async fn forget_stored(&self, id: &str, ws: &str, tag: &str) -> HostResult<()> {
        self.host.forget_stored(id, ws, tag).await
    }
    async fn delete_snapshot(&self, snapshot_id: &str) -> HostResult<()> {
        self.host.delete_snapshot(snapshot_id).await
    }
    async fn keep_standby(&self, snapshot_id: &str, count: usize) -> HostResult<usize> {
        self.host.keep_standby(snapshot_id, count).await
    }
    async fn create_volume(&self, id: &str, size_bytes: u64) -> HostResult<VolumeView> {
        self.host.create_volume(id, size_bytes).await
    }
    async fn volume(&self, id: &str) -> HostResult<VolumeView> {
        self.host.volume(id).await
    }
    async fn grow_volume(&self, id: &str, size_bytes: u64) -> HostResult<VolumeView> {
        self.host.grow_volume(id, size_bytes).await
    }
    async fn delete_volume(&self, id: &str) -> HostResult<()> {
        self.host.delete_volume(id).await
    }
    async fn volume_ids(&self) -> HostResult<Vec<String>> {
        self.host.volume_ids().await
    }
    async fn snapshot_volume(
        &self,
        id: &str,
        snapshot_id: &str,
        holder: Option<VolumeHolder>,
    ) -> HostResult<VolumeSnapshotView> {
        self.host.snapshot_volume(id, snapshot_id, holder).await
    }
    async fn delete_volume_snapshot(&self, snapshot_id: &str) -> HostResult<()> {
        self.host.delete_volume_snapshot(snapshot_id).await
    }
    async fn volume_snapshot_ids(&self) -> HostResult<Vec<String>> {
        self.host.volume_snapshot_ids().await
    }
    async fn volume_from_snapshot(
        &self,
        snapshot_id: &str,
        id: &str,
        size_bytes: u64,
    ) -> HostResult<VolumeView> {
        self.host
            .volume_from_snapshot(snapshot_id, id, size_bytes)
            .await
    }
    async fn upload_volume_snapshot(
        &self,
        snapshot_id: &str,
        ws: &str,
    ) -> HostResult<VolumeUpload> {
        self.host.upload_volume_snapshot(snapshot_id, ws).await
    }
    async fn volume_from_manifest(
        &self,
        ws: &str,
        manifest: &pandastack_objects::Manifest,
        id: &str,
        size_bytes: u64,
    ) -> HostResult<VolumeView> {
        self.host
            .volume_from_manifest(ws, manifest, id, size_bytes)
            .await
    }

    // ---- inside a sandbox: the calls that may last are watched -------------------------------

    async fn exec(&self, id: &str, spec: ExecSpec) -> HostResult<ExecOutcome> {
        let _busy = self.in_flight.enter(id);
        self.host.exec(id, spec).await
    }
    async fn exec_stream(
        &self,
        id: &str,
        spec: ExecSpec,
    ) -> HostResult<BoxStream<HostResult<ExecEvent>>> {
        let busy = self.in_flight.enter(id);
        Ok(held(self.host.exec_stream(id, spec).await?, busy))
    }
    /// Not watched: an interactive session lasts as long as its client keeps it open, and its
    /// traffic is what counts (the WebSocket records it).
    async fn exec_session(
        &self,
        id: &str,
        start: SessionStart,
        inputs: BoxStream<ExecInput>,
    ) -> HostResult<BoxStream<HostResult<ExecEvent>>> {
        self.host.exec_session(id, start, inputs).await
    }
    async fn read_file(&self, id: &str, path: &str) -> HostResult<BoxStream<HostResult<Bytes>>> {
        let busy = self.in_flight.enter(id);
        Ok(held(self.host.read_file(id, path).await?, busy))
    }
    async fn write_file(
        &self,
        id: &str,
        path: &str,
        body: BoxStream<Result<Bytes, String>>,
    ) -> HostResult<u64> {
        let _busy = self.in_flight.enter(id);
        self.host.write_file(id, path, body).await
    }
    async fn stat(&self, id: &str, path: &str) -> HostResult<FileInfo> {
        self.host.stat(id, path).await
    }
    async fn list_dir(
        &self,
        id: &str,
        path: &str,
        depth: u32,
        page: ListPage,
    ) -> HostResult<DirPage> {
        self.host.list_dir(id, path, depth, page).await
    }
    async fn list_dir_all(&self, id: &str, path: &str, depth: u32) -> HostResult<Vec<FileInfo>> {
        self.host.list_dir_all(id, path, depth).await
    }
    /// Not a call in flight: a watch does not keep its sandbox from idling out (whoever
    /// watches re-arms it after the wake).
    async fn watch(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> HostResult<BoxStream<HostResult<Vec<pandastack_host::WatchEvent>>>> {
        self.host.watch(id, path, recursive).await
    }
    async fn mkdir(&self, id: &str, path: &str, parents: bool) -> HostResult<()> {
        self.host.mkdir(id, path, parents).await
    }
    async fn remove(&self, id: &str, path: &str, recursive: bool) -> HostResult<()> {
        self.host.remove(id, path, recursive).await
    }
    async fn rename(&self, id: &str, from: &str, to: &str, overwrite: bool) -> HostResult<()> {
        self.host.rename(id, from, to, overwrite).await
    }
    async fn connect_port(&self, id: &str, port: u16) -> HostResult<Box<dyn PortIo>> {
        self.host.connect_port(id, port).await
    }
    fn catalog(&self) -> HostResult<Vec<TemplateView>> {
        self.host.catalog()
    }
    fn is_catalog(&self, name: &str) -> bool {
        self.host.is_catalog(name)
    }
    async fn rebake(&self, name: &str) -> HostResult<()> {
        self.host.rebake(name).await
    }
    async fn remove_template(&self, name: &str) -> HostResult<()> {
        self.host.remove_template(name).await
    }
    fn check_spec(&self, text: &str) -> Result<SpecSummary, SpecRefused> {
        self.host.check_spec(text)
    }
    async fn build_image(
        &self,
        build_id: &str,
        source: BuildSource,
        dir: PathBuf,
        log: BuildLogFn,
    ) -> HostResult<BuiltImage> {
        self.host.build_image(build_id, source, dir, log).await
    }
    async fn bake_image(&self, name: &str, image: &Path, shape: Shape) -> HostResult<u64> {
        self.host.bake_image(name, image, shape).await
    }
}
