//! The host boundary: the one interface between the control plane (API handlers, reaper,
//! template builds) and a host that runs sandboxes. The control plane names sandboxes, snapshots
//! and templates by id and gets plain views and [`HostError`]s back; it never holds a VM, a
//! guest channel or a path into a sandbox. Everything inside a sandbox — exec, sessions,
//! files, ports — goes through the host by sandbox id, so a host can be this process
//! (`pandastack-agent`'s `HostAgent`) or, later, another machine answering the same calls.
//!
//! ```text
//!   control plane ──► Arc<dyn Host> ──► HostAgent (this process) ──► runtime ──► VMs
//!                                   └─► (a remote host: the same trait over the network)
//! ```
//!
//! Calls on a hibernated sandbox's data plane wake it first; [`Host::awake`] does only that, so
//! a caller can record the new state before it starts work.

mod build;
mod error;
mod exec;
mod files;
mod log;
mod peer;
mod view;
mod volume;

pub use build::{BuildLogFn, BuildSource, BuiltImage, SpecRefused, SpecSummary};
pub use error::{error_chain, is_moving, GuestErrorKind, HostError, WAKE_WHILE_MOVING};
pub use exec::{ExecEvent, ExecInput, ExecOutcome, ExecSpec, PtySize, SessionStart};
pub use files::{DirPage, FileInfo, FileKind, ListPage, WatchEvent, WatchKind};
pub use log::{read_log, trim_log, LogChunk, LogPos};
pub use peer::{ImagePiece, Origin, Peers};
pub use view::{
    DiskLimits, DiskRequest, MetricSample, Shape, SnapshotView, TemplateView, VmState, VmStats,
    VmView,
};
pub use volume::{VolumeHolder, VolumeMount, VolumeSnapshotView, VolumeUpload, VolumeView};

use std::path::{Path, PathBuf};
use std::pin::Pin;

use bytes::Bytes;
use futures::Stream;

/// A boxed stream that can cross the boundary.
pub type BoxStream<T> = Pin<Box<dyn Stream<Item = T> + Send + 'static>>;

/// A byte stream to a TCP port inside a sandbox.
pub trait PortIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> PortIo for T {}

pub type HostResult<T> = Result<T, HostError>;

/// Entries per page [`Host::list_dir_all`] asks for: the most a guest agent returns at once.
const LIST_ALL_PAGE: u32 = 5000;

/// What a host does for the control plane. Object safe: the control plane holds a `dyn Host`.
#[async_trait::async_trait]
pub trait Host: Send + Sync + 'static {
    // ---- sandboxes ---------------------------------------------------------------------------

    /// All sandboxes on this host, by id.
    async fn list(&self) -> Vec<VmView>;
    /// One sandbox.
    async fn get(&self, id: &str) -> HostResult<VmView>;
    /// Creates sandbox `id` from `template` (baked on first use); returns once it can exec.
    async fn create(&self, template: &str, id: &str) -> HostResult<VmView>;
    /// Creates sandbox `id` from `template` with `volumes` in its volume slots (in order),
    /// each mounted at its path before this returns. More volumes than the template has slots
    /// is [`HostError::TooManyVolumes`]; a volume the host does not have,
    /// [`HostError::VolumeNotFound`]. A failed mount destroys the new sandbox.
    async fn create_with_volumes(
        &self,
        template: &str,
        id: &str,
        volumes: Vec<VolumeMount>,
    ) -> HostResult<VmView>;
    /// [`Host::create_with_volumes`] with disk limits of the create's own where `disk` names
    /// them (the rest: the template's, else the host's default). A host that cannot set them
    /// refuses a non-empty `disk` ([`HostError::Failed`]).
    async fn create_with_disk(
        &self,
        template: &str,
        id: &str,
        volumes: Vec<VolumeMount>,
        disk: DiskRequest,
    ) -> HostResult<VmView> {
        if !disk.is_empty() {
            return Err(HostError::failed(
                "create",
                "this host cannot set a sandbox's disk limits",
            ));
        }
        self.create_with_volumes(template, id, volumes).await
    }
    /// Creates sandbox `id` from `template` with its RAM in a file of its own: its snapshots
    /// save device state and reflink that file, and sandboxes created from them map the RAM
    /// copy-on-write instead of loading it (fast restores, e.g. function instances). Costs a
    /// file as large as its RAM and page-cache sharing with other sandboxes of the template.
    async fn create_with_memory_file(&self, template: &str, id: &str) -> HostResult<VmView>;
    /// Creates sandbox `id` from snapshot `snapshot`.
    async fn create_from_snapshot(&self, snapshot: &str, id: &str) -> HostResult<VmView>;
    /// Pauses the vCPUs in place (wakes a hibernated sandbox first).
    async fn pause(&self, id: &str) -> HostResult<VmView>;
    /// Resumes a paused (or wakes a hibernated) sandbox.
    async fn resume(&self, id: &str) -> HostResult<VmView>;
    /// Writes the sandbox to disk and stops its VM. Idempotent.
    async fn hibernate(&self, id: &str) -> HostResult<VmView>;
    /// Wakes a hibernated sandbox. Idempotent.
    async fn wake(&self, id: &str) -> HostResult<VmView>;
    /// The sandbox ready for data-plane calls: woken if hibernated; refused while paused.
    async fn awake(&self, id: &str) -> HostResult<VmView>;
    /// Stops a sandbox and removes everything of it.
    async fn destroy(&self, id: &str) -> HostResult<()>;
    /// Resource use of the sandbox's VM (`None` while it has no VM process).
    async fn stats(&self, id: &str) -> HostResult<Option<VmStats>>;
    /// The readings the host took of the sandbox's VM at or after `since_ms` (Unix ms), oldest
    /// first: one every few seconds for the last hour, one a minute before that, for as long
    /// as the host has run the sandbox (see `docs/operations.md`). Empty for a sandbox that has
    /// not run since.
    async fn metrics(&self, id: &str, since_ms: i64) -> HostResult<Vec<MetricSample>>;
    /// At most `max` bytes of the sandbox's console from `from` (`None`: from the top); follow
    /// it by passing each chunk's `next` back.
    async fn console(&self, id: &str, from: Option<LogPos>, max: usize) -> HostResult<LogChunk>;

    // ---- moving between hosts (a cluster's agents; see the agent's `moving`) ----------------

    /// Hibernates sandbox `id` (if it runs) and stores its image in workspace `ws`'s part of the
    /// shared object store for another host; returns the tag naming that image. The sandbox
    /// stays here, hibernated.
    async fn store_hibernated(&self, id: &str, ws: &str) -> HostResult<String>;
    /// Stores the image of hibernated sandbox `id` in workspace `ws`'s part of the shared
    /// object store in case this host is lost; returns the tag naming that copy. The sandbox
    /// stays here and wakes here as before (which drops the copy). Given up, an error, when the
    /// sandbox is woken, moved or destroyed meanwhile.
    async fn store_durable(&self, id: &str, ws: &str) -> HostResult<String>;
    /// Makes image `tag` of sandbox `id` (stored by another host in workspace `ws`) a
    /// hibernated sandbox of this host. Nothing is left behind on failure.
    async fn adopt_stored(&self, id: &str, ws: &str, tag: &str) -> HostResult<VmView>;
    /// Removes stored image `tag` of sandbox `id` from the object store (absent is success).
    /// A copy of the sandbox still here wakes here again: the move is given up (or over).
    async fn forget_stored(&self, id: &str, ws: &str, tag: &str) -> HostResult<()>;
    /// Hibernates sandbox `id` (if it runs) for a move whose destination reads its image from
    /// this host ([`Host::adopt_from`]): from now on it does not wake here. Nothing is stored;
    /// returns the tag naming the move, which [`Host::forget_stored`] gives up as it gives up
    /// [`Host::store_hibernated`]'s.
    async fn leave(&self, id: &str) -> HostResult<String>;
    /// Makes sandbox `id` of workspace `ws`, leaving `origin` ([`Host::leave`] there), a
    /// hibernated sandbox of this host, its image read from `origin`'s agent. Nothing is left
    /// behind on failure.
    async fn adopt_from(&self, id: &str, ws: &str, origin: &Origin) -> HostResult<VmView>;
    /// The image of hibernated sandbox `id`, leaving this host, for the host that adopts it
    /// ([`Peers`]): its header, then its data. Only an agent serving its peers has this.
    async fn send_hibernated(&self, id: &str) -> HostResult<BoxStream<HostResult<ImagePiece>>> {
        Err(HostError::failed(
            "send a hibernated sandbox to another host",
            format!("this host does not serve sandbox {id} to its peers"),
        ))
    }

    // ---- snapshots ---------------------------------------------------------------------------

    /// Snapshots a sandbox (waking it if hibernated).
    async fn snapshot(&self, id: &str, snapshot_id: &str) -> HostResult<SnapshotView>;
    /// Forks a sandbox into `child_ids` through snapshot `snapshot_id`.
    async fn fork(
        &self,
        id: &str,
        snapshot_id: &str,
        child_ids: &[String],
    ) -> HostResult<(SnapshotView, Vec<VmView>)>;
    /// Stores snapshot `snapshot_id` (of this host) in workspace `ws`'s part of the shared
    /// object store, so another host with the same compatibility key can restore it.
    async fn store_snapshot(&self, snapshot_id: &str, ws: &str) -> HostResult<()>;
    /// Makes snapshot `snapshot_id` of workspace `ws` one of this host's: here already, or
    /// fetched — from `origin`, the agent of the host that took it, when named and it answers
    /// (its upload need not be done), else from the object store where that host stored it.
    /// Nothing is left behind on failure.
    async fn fetch_snapshot(
        &self,
        snapshot_id: &str,
        ws: &str,
        origin: Option<&Origin>,
    ) -> HostResult<()>;
    /// Snapshot `snapshot_id`'s files, for another host that fetches it from this one
    /// ([`Peers`]): its header, then its data. Only an agent serving its peers has this.
    async fn send_snapshot(
        &self,
        snapshot_id: &str,
    ) -> HostResult<BoxStream<HostResult<ImagePiece>>> {
        Err(HostError::failed(
            "send a snapshot to another host",
            format!("this host does not serve snapshot {snapshot_id} to its peers"),
        ))
    }
    /// Deletes a snapshot's files.
    async fn delete_snapshot(&self, snapshot_id: &str) -> HostResult<()>;
    /// Keeps `count` VM processes started and waiting for restores from snapshot `snapshot_id`
    /// (0 stops them): a create from it then only loads the state. Returns how many wait (0
    /// for a snapshot with volume copies, which cannot use them).
    async fn keep_standby(&self, snapshot_id: &str, count: usize) -> HostResult<usize>;

    // ---- volumes -----------------------------------------------------------------------------

    /// Creates volume `id`: an empty ext4 file system of `size_bytes` (a multiple of 4 KiB,
    /// at least 1 MiB) in a sparse file. A failure leaves no file.
    async fn create_volume(&self, id: &str, size_bytes: u64) -> HostResult<VolumeView>;
    /// One volume's file.
    async fn volume(&self, id: &str) -> HostResult<VolumeView>;
    /// Grows volume `id` (file and file system) to `size_bytes`. The caller makes sure no
    /// sandbox has it bound.
    async fn grow_volume(&self, id: &str, size_bytes: u64) -> HostResult<VolumeView>;
    /// Removes volume `id`'s file (gone already is success).
    async fn delete_volume(&self, id: &str) -> HostResult<()>;
    /// Ids of every volume file this host has (for start-up reconciliation).
    async fn volume_ids(&self) -> HostResult<Vec<String>>;
    /// Copies volume `id` into volume snapshot `snapshot_id` (a reflink: instant, no bytes
    /// copied). With a `holder`, that running sandbox's file system on the volume is frozen
    /// (`fsfreeze`) for the moment of the copy and thawed after, whatever happens.
    async fn snapshot_volume(
        &self,
        id: &str,
        snapshot_id: &str,
        holder: Option<VolumeHolder>,
    ) -> HostResult<VolumeSnapshotView>;
    /// Removes a volume snapshot's file (gone already is success).
    async fn delete_volume_snapshot(&self, snapshot_id: &str) -> HostResult<()>;
    /// Ids of every volume snapshot file this host has.
    async fn volume_snapshot_ids(&self) -> HostResult<Vec<String>>;
    /// Creates volume `id` as a reflink of volume snapshot `snapshot_id`, grown to
    /// `size_bytes` when that is larger than the snapshot.
    async fn volume_from_snapshot(
        &self,
        snapshot_id: &str,
        id: &str,
        size_bytes: u64,
    ) -> HostResult<VolumeView>;
    /// Uploads volume snapshot `snapshot_id` into workspace `ws` of the object store: chunks
    /// only (those not stored already are sent); the caller writes the manifest.
    async fn upload_volume_snapshot(&self, snapshot_id: &str, ws: &str)
        -> HostResult<VolumeUpload>;
    /// Creates volume `id` from the file `manifest` describes (chunks of workspace `ws`),
    /// grown to `size_bytes` when larger. A failed download leaves no file.
    async fn volume_from_manifest(
        &self,
        ws: &str,
        manifest: &pandastack_objects::Manifest,
        id: &str,
        size_bytes: u64,
    ) -> HostResult<VolumeView>;

    // ---- inside a sandbox (each wakes a hibernated sandbox) ----------------------------------

    /// Runs a command to completion (output bounded by the spec's cap).
    async fn exec(&self, id: &str, spec: ExecSpec) -> HostResult<ExecOutcome>;
    /// Runs a command and streams its events; dropping the stream kills the command's tree.
    async fn exec_stream(
        &self,
        id: &str,
        spec: ExecSpec,
    ) -> HostResult<BoxStream<HostResult<ExecEvent>>>;
    /// Runs a command fed by `inputs` (stdin, signals, resizes). `inputs` ending does not end
    /// the command; dropping the returned stream kills its tree.
    async fn exec_session(
        &self,
        id: &str,
        start: SessionStart,
        inputs: BoxStream<ExecInput>,
    ) -> HostResult<BoxStream<HostResult<ExecEvent>>>;
    /// Streams a file's bytes.
    async fn read_file(&self, id: &str, path: &str) -> HostResult<BoxStream<HostResult<Bytes>>>;
    /// Writes a file from a byte stream (replaced atomically, parents created); a body error
    /// (`Err(message)`) cancels the write and keeps the old file. Returns bytes written.
    async fn write_file(
        &self,
        id: &str,
        path: &str,
        body: BoxStream<Result<Bytes, String>>,
    ) -> HostResult<u64>;
    async fn stat(&self, id: &str, path: &str) -> HostResult<FileInfo>;
    /// Watches the directory `path` (and every directory below it when `recursive`): returns
    /// once the watch is armed, then the stream yields batches of changes as they happen. It
    /// ends when the directory goes away; dropping it ends the watch. A guest agent too old to
    /// watch is a [`HostError::Guest`] saying to rebuild the template.
    async fn watch(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> HostResult<BoxStream<HostResult<Vec<WatchEvent>>>>;
    /// A page of the entries under `path`, `depth` levels deep (1: the directory itself),
    /// sorted by path. A listing comes in pages because one answer from the guest cannot carry
    /// a large directory.
    async fn list_dir(
        &self,
        id: &str,
        path: &str,
        depth: u32,
        page: ListPage,
    ) -> HostResult<DirPage>;
    /// Every entry under `path` (see [`Host::list_dir`]), page after page, for the control
    /// plane's own small directories (a database's WAL outbox): the whole listing is held in
    /// memory.
    async fn list_dir_all(&self, id: &str, path: &str, depth: u32) -> HostResult<Vec<FileInfo>> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let page = ListPage {
                after: after.take(),
                limit: LIST_ALL_PAGE,
                pattern: None,
            };
            let last = page.after.clone();
            let got = self.list_dir(id, path, depth, page).await?;
            all.extend(got.entries);
            match got.next_after {
                // A cursor that does not move on would list the same page forever.
                Some(next) if last.as_ref().is_none_or(|l| next > *l) => after = Some(next),
                _ => return Ok(all),
            }
        }
    }
    async fn mkdir(&self, id: &str, path: &str, parents: bool) -> HostResult<()>;
    async fn remove(&self, id: &str, path: &str, recursive: bool) -> HostResult<()>;
    async fn rename(&self, id: &str, from: &str, to: &str, overwrite: bool) -> HostResult<()>;
    /// A byte stream to TCP `port` on the sandbox's loopback (for the preview proxy). Fails at
    /// once, as a [`GuestErrorKind::Unavailable`] guest error, when nothing listens there.
    async fn connect_port(&self, id: &str, port: u16) -> HostResult<Box<dyn PortIo>>;

    // ---- templates ---------------------------------------------------------------------------

    /// The catalog templates this host serves (from its spec directory).
    fn catalog(&self) -> HostResult<Vec<TemplateView>>;
    /// Whether `name` is a catalog template (built templates may not take such a name).
    fn is_catalog(&self, name: &str) -> bool;
    /// Bakes catalog template `name` again from its image.
    async fn rebake(&self, name: &str) -> HostResult<()>;
    /// Removes a template's bake (and its pool).
    async fn remove_template(&self, name: &str) -> HostResult<()>;
    /// Checks a spec sent over the API and says what it asks for.
    fn check_spec(&self, text: &str) -> Result<SpecSummary, SpecRefused>;
    /// Builds template image `build_id` in `dir` (the spec's own steps in a builder VM).
    async fn build_image(
        &self,
        build_id: &str,
        source: BuildSource,
        dir: PathBuf,
        log: BuildLogFn,
    ) -> HostResult<BuiltImage>;
    /// Bakes `image` as template `name` (cold boot, snapshot). Returns the bake's milliseconds.
    async fn bake_image(&self, name: &str, image: &Path, shape: Shape) -> HostResult<u64>;
}
