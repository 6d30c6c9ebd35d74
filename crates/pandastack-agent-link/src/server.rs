//! The agent's side: [`AgentService`] answers each RPC by calling its host, and [`serve`]
//! accepts replicas on a TCP listener over the cluster's mutual TLS.
//!
//! ```text
//!   accept ──► TLS handshake (client cert from the cluster CA) ──► peer role `server`/`agent`?
//!          (one task per handshake, bounded in time)        │ no: dropped, logged
//!                                                           ▼
//!              gRPC: `Agent` for a `server`, `Peer` for an `agent` (else PermissionDenied)
//! ```

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use pandastack_cluster::{Identity, Role, TlsConfigError};
use pandastack_host::{BoxStream, ExecInput, Host, HostResult, ListPage, SessionStart};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status, Streaming};

use crate::convert::*;
use crate::pb;
use crate::pb::agent_server::{Agent, AgentServer};
use crate::peers::{only, PeerService};
use crate::status::to_status;
use crate::CHUNK;

type RpcResult<T> = Result<Response<T>, Status>;
type RpcStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Why [`serve`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("the agent's TLS configuration")]
    Tls(#[source] TlsConfigError),
    #[error("accepting a connection")]
    Accept(#[source] std::io::Error),
    #[error("the gRPC server")]
    Transport(#[source] tonic::transport::Error),
}

/// Serves `host` to control-plane replicas on `listener` until an error stops it (or the
/// future is dropped, which closes the listener), and its snapshots to other agents (`Peer`).
/// The agent presents `identity`; a peer without a certificate from the cluster CA fails the
/// handshake, one that is neither a `server` nor an `agent` is dropped before any call, and a
/// call to the service of the other role is refused.
pub async fn serve(
    identity: &Identity,
    listener: TcpListener,
    host: Arc<dyn Host>,
) -> Result<(), ServeError> {
    serve_counting(identity, listener, host, InFlight::default()).await
}

/// [`serve`], counting the creates under way in `in_flight`.
pub async fn serve_counting(
    identity: &Identity,
    listener: TcpListener,
    host: Arc<dyn Host>,
    in_flight: InFlight,
) -> Result<(), ServeError> {
    let (accept, incoming) = crate::tls::accept(identity, listener, "agent link", |peer| {
        peer.role == Role::Server || peer.role == Role::Agent
    })?;
    // Replicas call `Agent`, other agents `Peer`; each refuses the other role.
    let agent = AgentService::new(Arc::clone(&host))
        .counting(in_flight)
        .into_server();
    let server = tonic::transport::Server::builder()
        .add_service(InterceptedService::new(agent, only(Role::Server)))
        .add_service(InterceptedService::new(
            PeerService::server(host),
            only(Role::Agent),
        ))
        .serve_with_incoming(incoming);
    tokio::select! {
        r = accept => r,
        r = server => r.map_err(ServeError::Transport),
    }
}

/// The gRPC service of one host: each RPC is the [`Host`] call of the same name.
pub struct AgentService {
    host: Arc<dyn Host>,
    in_flight: InFlight,
}

/// How many creates (and restores, forks) an agent's service has under way: reported with
/// the host's capacity ([`crate::agent::run_agent`]). Cheap to clone (one counter).
#[derive(Clone, Default)]
pub struct InFlight(Arc<std::sync::atomic::AtomicI64>);

impl InFlight {
    pub fn now(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counts one until the returned guard is dropped (the call ended, or its caller went).
    fn start(&self) -> InFlightGuard {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        InFlightGuard(self.clone())
    }
}

struct InFlightGuard(InFlight);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        (self.0)
            .0
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl AgentService {
    pub fn new(host: Arc<dyn Host>) -> Self {
        Self {
            host,
            in_flight: InFlight::default(),
        }
    }

    /// The service, counting its creates in `in_flight`.
    pub fn counting(mut self, in_flight: InFlight) -> Self {
        self.in_flight = in_flight;
        self
    }

    /// The service, with no message size limit of its own: both ends are authenticated
    /// members of the cluster, and a host's answers are as large as the boundary's (an exec
    /// without an output cap).
    pub fn into_server(self) -> AgentServer<Self> {
        AgentServer::new(self)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }
}

fn ok<T, U>(r: HostResult<T>, f: impl FnOnce(T) -> U) -> RpcResult<U> {
    r.map(|t| Response::new(f(t))).map_err(|e| to_status(&e))
}

fn vm(r: HostResult<pandastack_host::VmView>) -> RpcResult<pb::Vm> {
    ok(r, vm_to_pb)
}

fn empty(r: HostResult<()>) -> RpcResult<pb::Empty> {
    ok(r, |()| pb::Empty {})
}

/// `s` cut into messages of at most [`CHUNK`] bytes.
fn chunks(s: Bytes) -> impl Iterator<Item = Bytes> {
    let mut rest = s;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let n = rest.len().min(CHUNK);
        Some(rest.split_to(n))
    })
}

/// A host's event stream as a response stream.
fn events(s: BoxStream<HostResult<pandastack_host::ExecEvent>>) -> RpcStream<pb::ExecEvent> {
    Box::pin(s.map(|r| r.map(event_to_pb).map_err(|e| to_status(&e))))
}

/// A session's input message as the boundary's (`None`: nothing to pass on).
fn session_input(m: Result<pb::SessionMessage, Status>) -> Option<ExecInput> {
    use pb::session_message::Message;
    Some(match m.ok()?.message? {
        Message::Start(_) => return None,
        Message::Stdin(b) => ExecInput::Stdin(b),
        Message::StdinEof(_) => ExecInput::StdinEof,
        Message::Signal(s) => ExecInput::Signal(s),
        Message::Resize(p) => ExecInput::Resize(pty_from_pb(p)),
    })
}

/// A write's body message as the boundary's: a replica that goes away mid-body cancels the
/// write, like a body error.
fn write_body(m: Result<pb::WriteFileMessage, Status>) -> Option<Result<Bytes, String>> {
    use pb::write_file_message::Message;
    match m {
        Ok(m) => match m.message? {
            Message::Data(b) => Some(Ok(b)),
            Message::Abort(message) => Some(Err(message)),
            Message::Header(_) => Some(Err("a second header".to_owned())),
        },
        Err(status) => Some(Err(format!("the replica's stream broke: {status}"))),
    }
}

/// Aborts a task when the response stream that carries its output is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[tonic::async_trait]
impl Agent for AgentService {
    async fn list(&self, _: Request<pb::Empty>) -> RpcResult<pb::VmList> {
        let vms = self.host.list().await;
        Ok(Response::new(pb::VmList {
            vms: vms.into_iter().map(vm_to_pb).collect(),
        }))
    }

    async fn get(&self, r: Request<pb::SandboxId>) -> RpcResult<pb::Vm> {
        vm(self.host.get(&r.into_inner().id).await)
    }

    async fn create(&self, r: Request<pb::CreateRequest>) -> RpcResult<pb::Vm> {
        let r = r.into_inner();
        let _counted = self.in_flight.start();
        vm(self.host.create(&r.template, &r.id).await)
    }

    async fn create_with_volumes(&self, r: Request<pb::CreateRequest>) -> RpcResult<pb::Vm> {
        let r = r.into_inner();
        let _counted = self.in_flight.start();
        let volumes = r.volumes.into_iter().map(mount_from_pb).collect();
        vm(self
            .host
            .create_with_volumes(&r.template, &r.id, volumes)
            .await)
    }

    async fn create_with_disk(&self, r: Request<pb::CreateRequest>) -> RpcResult<pb::Vm> {
        let r = r.into_inner();
        let _counted = self.in_flight.start();
        let volumes = r.volumes.into_iter().map(mount_from_pb).collect();
        let disk = disk_from_pb(r.disk);
        vm(self
            .host
            .create_with_disk(&r.template, &r.id, volumes, disk)
            .await)
    }

    async fn create_with_memory_file(&self, r: Request<pb::CreateRequest>) -> RpcResult<pb::Vm> {
        let r = r.into_inner();
        let _counted = self.in_flight.start();
        vm(self.host.create_with_memory_file(&r.template, &r.id).await)
    }

    async fn create_from_snapshot(
        &self,
        r: Request<pb::CreateFromSnapshotRequest>,
    ) -> RpcResult<pb::Vm> {
        let r = r.into_inner();
        let _counted = self.in_flight.start();
        vm(self.host.create_from_snapshot(&r.snapshot, &r.id).await)
    }

    async fn pause(&self, r: Request<pb::SandboxId>) -> RpcResult<pb::Vm> {
        vm(self.host.pause(&r.into_inner().id).await)
    }

    async fn resume(&self, r: Request<pb::SandboxId>) -> RpcResult<pb::Vm> {
        vm(self.host.resume(&r.into_inner().id).await)
    }

    async fn hibernate(&self, r: Request<pb::SandboxId>) -> RpcResult<pb::Vm> {
        vm(self.host.hibernate(&r.into_inner().id).await)
    }

    async fn wake(&self, r: Request<pb::SandboxId>) -> RpcResult<pb::Vm> {
        vm(self.host.wake(&r.into_inner().id).await)
    }

    async fn awake(&self, r: Request<pb::SandboxId>) -> RpcResult<pb::Vm> {
        vm(self.host.awake(&r.into_inner().id).await)
    }

    async fn destroy(&self, r: Request<pb::SandboxId>) -> RpcResult<pb::Empty> {
        empty(self.host.destroy(&r.into_inner().id).await)
    }

    async fn stats(&self, r: Request<pb::SandboxId>) -> RpcResult<pb::StatsReply> {
        ok(self.host.stats(&r.into_inner().id).await, |s| {
            pb::StatsReply {
                stats: s.map(stats_to_pb),
            }
        })
    }

    async fn metrics(&self, r: Request<pb::MetricsRequest>) -> RpcResult<pb::MetricsReply> {
        let r = r.into_inner();
        ok(self.host.metrics(&r.id, r.since_ms).await, |v| {
            pb::MetricsReply {
                samples: v.into_iter().map(sample_to_pb).collect(),
            }
        })
    }

    async fn console(&self, r: Request<pb::ConsoleRequest>) -> RpcResult<pb::LogChunk> {
        let r = r.into_inner();
        let max = usize::try_from(r.max).unwrap_or(usize::MAX);
        ok(
            self.host.console(&r.id, r.from.map(pos_from_pb), max).await,
            chunk_to_pb,
        )
    }

    async fn snapshot(&self, r: Request<pb::SnapshotRequest>) -> RpcResult<pb::Snapshot> {
        let r = r.into_inner();
        ok(
            self.host.snapshot(&r.id, &r.snapshot_id).await,
            snapshot_to_pb,
        )
    }

    async fn fork(&self, r: Request<pb::ForkRequest>) -> RpcResult<pb::ForkReply> {
        let r = r.into_inner();
        let _counted = self.in_flight.start();
        ok(
            self.host.fork(&r.id, &r.snapshot_id, &r.child_ids).await,
            |(s, children)| pb::ForkReply {
                snapshot: Some(snapshot_to_pb(s)),
                children: children.into_iter().map(vm_to_pb).collect(),
            },
        )
    }

    async fn store_hibernated(
        &self,
        r: Request<pb::StoreHibernatedRequest>,
    ) -> RpcResult<pb::StoredTag> {
        let r = r.into_inner();
        ok(self.host.store_hibernated(&r.id, &r.ws).await, |tag| {
            pb::StoredTag { tag }
        })
    }

    async fn store_snapshot(&self, r: Request<pb::SnapshotInWorkspace>) -> RpcResult<pb::Empty> {
        let r = r.into_inner();
        empty(self.host.store_snapshot(&r.snapshot_id, &r.ws).await)
    }

    async fn fetch_snapshot(&self, r: Request<pb::SnapshotInWorkspace>) -> RpcResult<pb::Empty> {
        let r = r.into_inner();
        let origin = r.origin.map(origin_from_pb);
        empty(
            self.host
                .fetch_snapshot(&r.snapshot_id, &r.ws, origin.as_ref())
                .await,
        )
    }

    async fn store_durable(
        &self,
        r: Request<pb::StoreHibernatedRequest>,
    ) -> RpcResult<pb::StoredTag> {
        let r = r.into_inner();
        ok(self.host.store_durable(&r.id, &r.ws).await, |tag| {
            pb::StoredTag { tag }
        })
    }

    async fn adopt_stored(&self, r: Request<pb::StoredRef>) -> RpcResult<pb::Vm> {
        let r = r.into_inner();
        vm(self.host.adopt_stored(&r.id, &r.ws, &r.tag).await)
    }

    async fn forget_stored(&self, r: Request<pb::StoredRef>) -> RpcResult<pb::Empty> {
        let r = r.into_inner();
        empty(self.host.forget_stored(&r.id, &r.ws, &r.tag).await)
    }

    async fn leave(&self, r: Request<pb::SandboxId>) -> RpcResult<pb::StoredTag> {
        ok(self.host.leave(&r.into_inner().id).await, |tag| {
            pb::StoredTag { tag }
        })
    }

    async fn adopt_from(&self, r: Request<pb::AdoptFromRequest>) -> RpcResult<pb::Vm> {
        let r = r.into_inner();
        let origin = r
            .origin
            .map(origin_from_pb)
            .ok_or_else(|| Status::invalid_argument("an adoption names its origin"))?;
        vm(self.host.adopt_from(&r.id, &r.ws, &origin).await)
    }

    async fn delete_snapshot(&self, r: Request<pb::SnapshotId>) -> RpcResult<pb::Empty> {
        empty(self.host.delete_snapshot(&r.into_inner().snapshot_id).await)
    }

    async fn keep_standby(&self, r: Request<pb::KeepStandbyRequest>) -> RpcResult<pb::Count> {
        let r = r.into_inner();
        let count = usize::try_from(r.count).unwrap_or(usize::MAX);
        ok(self.host.keep_standby(&r.snapshot_id, count).await, |n| {
            pb::Count { count: n as u64 }
        })
    }

    async fn create_volume(&self, r: Request<pb::VolumeSize>) -> RpcResult<pb::Volume> {
        let r = r.into_inner();
        ok(
            self.host.create_volume(&r.id, r.size_bytes).await,
            volume_to_pb,
        )
    }

    async fn volume(&self, r: Request<pb::VolumeId>) -> RpcResult<pb::Volume> {
        ok(self.host.volume(&r.into_inner().id).await, volume_to_pb)
    }

    async fn grow_volume(&self, r: Request<pb::VolumeSize>) -> RpcResult<pb::Volume> {
        let r = r.into_inner();
        ok(
            self.host.grow_volume(&r.id, r.size_bytes).await,
            volume_to_pb,
        )
    }

    async fn delete_volume(&self, r: Request<pb::VolumeId>) -> RpcResult<pb::Empty> {
        empty(self.host.delete_volume(&r.into_inner().id).await)
    }

    async fn volume_ids(&self, _: Request<pb::Empty>) -> RpcResult<pb::Ids> {
        ok(self.host.volume_ids().await, |ids| pb::Ids { ids })
    }

    async fn snapshot_volume(
        &self,
        r: Request<pb::SnapshotVolumeRequest>,
    ) -> RpcResult<pb::VolumeSnapshot> {
        let r = r.into_inner();
        ok(
            self.host
                .snapshot_volume(&r.id, &r.snapshot_id, r.holder.map(holder_from_pb))
                .await,
            volume_snapshot_to_pb,
        )
    }

    async fn delete_volume_snapshot(&self, r: Request<pb::SnapshotId>) -> RpcResult<pb::Empty> {
        empty(
            self.host
                .delete_volume_snapshot(&r.into_inner().snapshot_id)
                .await,
        )
    }

    async fn volume_snapshot_ids(&self, _: Request<pb::Empty>) -> RpcResult<pb::Ids> {
        ok(self.host.volume_snapshot_ids().await, |ids| pb::Ids { ids })
    }

    async fn volume_from_snapshot(
        &self,
        r: Request<pb::VolumeFromSnapshotRequest>,
    ) -> RpcResult<pb::Volume> {
        let r = r.into_inner();
        ok(
            self.host
                .volume_from_snapshot(&r.snapshot_id, &r.id, r.size_bytes)
                .await,
            volume_to_pb,
        )
    }

    async fn upload_volume_snapshot(
        &self,
        r: Request<pb::UploadVolumeSnapshotRequest>,
    ) -> RpcResult<pb::VolumeUpload> {
        let r = r.into_inner();
        ok(
            self.host
                .upload_volume_snapshot(&r.snapshot_id, &r.ws)
                .await,
            upload_to_pb,
        )
    }

    async fn volume_from_manifest(
        &self,
        r: Request<pb::VolumeFromManifestRequest>,
    ) -> RpcResult<pb::Volume> {
        let r = r.into_inner();
        let manifest = manifest_from_json(&r.manifest_json).map_err(|e| to_status(&e))?;
        ok(
            self.host
                .volume_from_manifest(&r.ws, &manifest, &r.id, r.size_bytes)
                .await,
            volume_to_pb,
        )
    }

    async fn exec(&self, r: Request<pb::ExecRequest>) -> RpcResult<pb::ExecOutcome> {
        let r = r.into_inner();
        ok(
            self.host.exec(&r.id, spec_from_pb(r.spec)).await,
            outcome_to_pb,
        )
    }

    type ExecStreamStream = RpcStream<pb::ExecEvent>;

    async fn exec_stream(&self, r: Request<pb::ExecRequest>) -> RpcResult<Self::ExecStreamStream> {
        let r = r.into_inner();
        ok(
            self.host.exec_stream(&r.id, spec_from_pb(r.spec)).await,
            events,
        )
    }

    type ExecSessionStream = RpcStream<pb::ExecEvent>;

    async fn exec_session(
        &self,
        r: Request<Streaming<pb::SessionMessage>>,
    ) -> RpcResult<Self::ExecSessionStream> {
        use pb::session_message::Message;
        let mut inbound = r.into_inner();
        let Some(Message::Start(start)) = inbound.message().await?.and_then(|m| m.message) else {
            return Err(Status::invalid_argument("a session starts with `start`"));
        };
        // Inputs until the replica's stream ends or breaks (the command goes on: only dropping
        // the output stream ends it).
        let inputs: BoxStream<ExecInput> = Box::pin(
            inbound
                .take_while(|m| futures::future::ready(m.is_ok()))
                .filter_map(|m| futures::future::ready(session_input(m))),
        );
        let session = SessionStart {
            spec: spec_from_pb(start.spec),
            stdin: start.stdin,
            pty: start.pty.map(pty_from_pb),
        };
        ok(
            self.host.exec_session(&start.id, session, inputs).await,
            events,
        )
    }

    type ReadFileStream = RpcStream<pb::FileChunk>;

    async fn read_file(&self, r: Request<pb::PathRequest>) -> RpcResult<Self::ReadFileStream> {
        let r = r.into_inner();
        ok(self.host.read_file(&r.id, &r.path).await, |s| {
            let s: RpcStream<pb::FileChunk> = Box::pin(s.flat_map(|r| {
                let out: Vec<Result<pb::FileChunk, Status>> = match r {
                    Ok(b) => chunks(b).map(|data| Ok(pb::FileChunk { data })).collect(),
                    Err(e) => vec![Err(to_status(&e))],
                };
                futures::stream::iter(out)
            }));
            s
        })
    }

    async fn write_file(
        &self,
        r: Request<Streaming<pb::WriteFileMessage>>,
    ) -> RpcResult<pb::Written> {
        use pb::write_file_message::Message;
        let mut inbound = r.into_inner();
        let Some(Message::Header(header)) = inbound.message().await?.and_then(|m| m.message) else {
            return Err(Status::invalid_argument("a write starts with `header`"));
        };
        // A replica that goes away mid-body cancels the write, like a body error.
        let body: BoxStream<Result<Bytes, String>> =
            Box::pin(inbound.filter_map(|m| futures::future::ready(write_body(m))));
        ok(
            self.host.write_file(&header.id, &header.path, body).await,
            |bytes| pb::Written { bytes },
        )
    }

    async fn stat(&self, r: Request<pb::PathRequest>) -> RpcResult<pb::FileInfo> {
        let r = r.into_inner();
        ok(self.host.stat(&r.id, &r.path).await, info_to_pb)
    }

    async fn list_dir(&self, r: Request<pb::ListDirRequest>) -> RpcResult<pb::DirPage> {
        let r = r.into_inner();
        let page = ListPage {
            after: r.after,
            limit: r.limit,
            pattern: r.pattern,
        };
        ok(
            self.host.list_dir(&r.id, &r.path, r.depth, page).await,
            page_to_pb,
        )
    }

    type WatchStream = RpcStream<pb::WatchBatch>;

    async fn watch(&self, r: Request<pb::WatchRequest>) -> RpcResult<Self::WatchStream> {
        let r = r.into_inner();
        ok(self.host.watch(&r.id, &r.path, r.recursive).await, |s| {
            let s: RpcStream<pb::WatchBatch> =
                Box::pin(s.map(|r| r.map(watch_batch_to_pb).map_err(|e| to_status(&e))));
            s
        })
    }

    async fn mkdir(&self, r: Request<pb::MkdirRequest>) -> RpcResult<pb::Empty> {
        let r = r.into_inner();
        empty(self.host.mkdir(&r.id, &r.path, r.parents).await)
    }

    async fn remove(&self, r: Request<pb::RemoveRequest>) -> RpcResult<pb::Empty> {
        let r = r.into_inner();
        empty(self.host.remove(&r.id, &r.path, r.recursive).await)
    }

    async fn rename(&self, r: Request<pb::RenameRequest>) -> RpcResult<pb::Empty> {
        let r = r.into_inner();
        empty(self.host.rename(&r.id, &r.from, &r.to, r.overwrite).await)
    }

    type ConnectPortStream = RpcStream<pb::PortData>;

    async fn connect_port(
        &self,
        r: Request<Streaming<pb::PortMessage>>,
    ) -> RpcResult<Self::ConnectPortStream> {
        use pb::port_message::Message;
        let mut inbound = r.into_inner();
        let Some(Message::Open(open)) = inbound.message().await?.and_then(|m| m.message) else {
            return Err(Status::invalid_argument("a port stream starts with `open`"));
        };
        let port = u16::try_from(open.port)
            .map_err(|_| Status::invalid_argument(format!("port {} is out of range", open.port)))?;
        let io = self
            .host
            .connect_port(&open.id, port)
            .await
            .map_err(|e| to_status(&e))?;
        let (read, mut write) = tokio::io::split(io);
        // Replica → port; the end of the replica's stream shuts the port's write side.
        let pump = tokio::spawn(async move {
            while let Some(Ok(m)) = inbound.next().await {
                if let Some(Message::Data(b)) = m.message {
                    if write.write_all(&b).await.is_err() {
                        return;
                    }
                }
            }
            let _ = write.shutdown().await;
        });
        let guard = AbortOnDrop(pump);
        // Port → replica, until the port's EOF.
        let out = tokio_util::io::ReaderStream::with_capacity(read, CHUNK).map(move |r| {
            let _ = &guard;
            r.map(|data| pb::PortData { data })
                .map_err(|e| Status::unavailable(format!("port: {e}")))
        });
        Ok(Response::new(Box::pin(out)))
    }

    async fn catalog(&self, _: Request<pb::Empty>) -> RpcResult<pb::TemplateList> {
        ok(self.host.catalog(), |t| pb::TemplateList {
            templates: t.into_iter().map(template_to_pb).collect(),
        })
    }

    async fn is_catalog(&self, r: Request<pb::TemplateName>) -> RpcResult<pb::Flag> {
        Ok(Response::new(pb::Flag {
            value: self.host.is_catalog(&r.into_inner().name),
        }))
    }

    async fn rebake(&self, r: Request<pb::TemplateName>) -> RpcResult<pb::Empty> {
        empty(self.host.rebake(&r.into_inner().name).await)
    }

    async fn remove_template(&self, r: Request<pb::TemplateName>) -> RpcResult<pb::Empty> {
        empty(self.host.remove_template(&r.into_inner().name).await)
    }

    async fn check_spec(&self, r: Request<pb::SpecText>) -> RpcResult<pb::CheckSpecReply> {
        Ok(Response::new(check_to_pb(
            self.host.check_spec(&r.into_inner().text),
        )))
    }

    type BuildImageStream = RpcStream<pb::BuildEvent>;

    async fn build_image(
        &self,
        r: Request<pb::BuildImageRequest>,
    ) -> RpcResult<Self::BuildImageStream> {
        use pb::build_event::Event;
        let r = r.into_inner();
        let source = source_from_pb(r.source).map_err(|e| to_status(&e))?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Result<pb::BuildEvent, Status>>();
        let log_tx = tx.clone();
        let log = Box::new(move |line: &str| {
            let _ = log_tx.send(Ok(pb::BuildEvent {
                event: Some(Event::Log(line.to_owned())),
            }));
        });
        let host = Arc::clone(&self.host);
        // The build goes on while the replica reads; it stops when the replica drops the
        // stream.
        let build = tokio::spawn(async move {
            let done = host
                .build_image(&r.build_id, source, PathBuf::from(r.dir), log)
                .await;
            let _ = tx.send(
                done.map(|b| pb::BuildEvent {
                    event: Some(Event::Done(built_to_pb(b))),
                })
                .map_err(|e| to_status(&e)),
            );
        });
        let guard = AbortOnDrop(build);
        let out = UnboundedReceiverStream::new(rx).map(move |e| {
            let _ = &guard;
            e
        });
        Ok(Response::new(Box::pin(out)))
    }

    async fn bake_image(&self, r: Request<pb::BakeImageRequest>) -> RpcResult<pb::BakeReply> {
        let r = r.into_inner();
        let shape = shape_from_pb(r.shape).map_err(|e| to_status(&e))?;
        ok(
            self.host
                .bake_image(&r.name, std::path::Path::new(&r.image), shape)
                .await,
            |bake_ms| pb::BakeReply { bake_ms },
        )
    }
}
