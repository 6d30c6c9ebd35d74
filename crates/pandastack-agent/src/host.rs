//! This process's host behind the boundary: [`LocalHost`] answers [`Host`] calls with the
//! host agent, mapping its views and errors onto the boundary's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use pandastack_host::{
    BoxStream, BuildLogFn, BuildSource, BuiltImage, DirPage, DiskRequest, ExecEvent, ExecInput,
    ExecOutcome, ExecSpec, FileInfo, Host, HostError, HostResult, ImagePiece, ListPage, LogChunk,
    LogPos, MetricSample, Origin, PortIo, SessionStart, Shape, SnapshotView, SpecRefused,
    SpecSummary, TemplateView, VmStats, VmView, VolumeHolder, VolumeMount, VolumeSnapshotView,
    VolumeUpload, VolumeView, WatchEvent,
};
use pandastack_vm::VmDriver;

use crate::cut_off::explained;
use crate::{guest, HostAgent, SandboxView};

/// The host agent of this process as a [`Host`].
pub struct LocalHost<D: VmDriver>(pub Arc<HostAgent<D>>);

pub(crate) fn host_shape(s: pandastack_runtime::Shape) -> Shape {
    Shape {
        vcpus: s.vcpus,
        memory_mib: s.memory_mib,
        disk: s.disk.map(host_disk),
    }
}

pub(crate) fn runtime_shape(s: Shape) -> pandastack_runtime::Shape {
    pandastack_runtime::Shape {
        vcpus: s.vcpus,
        memory_mib: s.memory_mib,
        disk: s.disk.map(|d| pandastack_vm::DiskLimits {
            bytes_per_sec: d.bytes_per_sec,
            iops: d.iops,
        }),
    }
}

/// A VM's disk limits as the host boundary names them.
pub(crate) fn host_disk(d: pandastack_vm::DiskLimits) -> pandastack_host::DiskLimits {
    pandastack_host::DiskLimits {
        bytes_per_sec: d.bytes_per_sec,
        iops: d.iops,
    }
}

fn vm_view(v: SandboxView) -> VmView {
    VmView {
        id: v.id,
        state: v.state,
        template: v.info.template,
        shape: host_shape(v.info.shape),
        ready_ms: v.ready_ms,
        image_bytes: v.image_bytes,
    }
}

fn snapshot_view(s: &pandastack_runtime::Snapshot) -> SnapshotView {
    SnapshotView {
        id: s.id.clone(),
        sandbox_id: s.sandbox_id.clone(),
        template: s.template.clone(),
        size_bytes: s.size_bytes,
    }
}

impl<D: VmDriver + 'static> LocalHost<D> {
    /// Runs `op` on the agent in a task of its own and waits for it. Operations that change a
    /// sandbox's VM (create, wake — which any call on a hibernated sandbox does —, hibernate,
    /// snapshot, delete, …) must not stop half-way because their caller went away (a client
    /// that disconnects drops its handler): a wake cut off after taking the hibernation image
    /// out of the sandbox's slot would lose the sandbox.
    async fn detached<T, F, Fut>(&self, op: F) -> HostResult<T>
    where
        F: FnOnce(Arc<HostAgent<D>>) -> Fut,
        Fut: std::future::Future<Output = Result<T, crate::AgentError>> + Send + 'static,
        T: Send + 'static,
    {
        // The caller's span goes with the work (a trace shows it under the request).
        tokio::spawn(tracing::Instrument::in_current_span(op(Arc::clone(
            &self.0,
        ))))
        .await
        .map_err(|e| HostError::failed("host task", e))?
        .map_err(Into::into)
    }

    /// The guest channel of a sandbox, woken first if hibernated (detached, see above).
    async fn channel(&self, id: &str) -> HostResult<tonic::transport::Channel> {
        let id = id.to_owned();
        self.detached(move |a| async move { a.channel(&id).await })
            .await
    }
}

impl<D: VmDriver + 'static> LocalHost<D> {
    /// The directory of this host's own for a replica's build `id` (its data directory's
    /// `builds/<id>`); `None` for an id that is not a plain file name.
    fn build_dir(&self, id: &str) -> Option<std::path::PathBuf> {
        let plain = !id.is_empty()
            && !id.starts_with('.')
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        plain.then(|| self.0.runtime().data().root().join("builds").join(id))
    }
}

#[async_trait::async_trait]
impl<D: VmDriver + 'static> Host for LocalHost<D> {
    async fn list(&self) -> Vec<VmView> {
        self.0.list().await.into_iter().map(vm_view).collect()
    }

    async fn get(&self, id: &str) -> HostResult<VmView> {
        Ok(vm_view(self.0.get(id).await?))
    }

    async fn create(&self, template: &str, id: &str) -> HostResult<VmView> {
        let (template, id) = (template.to_owned(), id.to_owned());
        let v = self
            .detached(move |a| async move { a.create(&template, &id).await })
            .await?;
        Ok(vm_view(v))
    }

    async fn create_with_volumes(
        &self,
        template: &str,
        id: &str,
        volumes: Vec<VolumeMount>,
    ) -> HostResult<VmView> {
        let (template, id) = (template.to_owned(), id.to_owned());
        let v = self
            .detached(move |a| async move { a.create_with_volumes(&template, &id, &volumes).await })
            .await?;
        Ok(vm_view(v))
    }

    async fn create_with_disk(
        &self,
        template: &str,
        id: &str,
        volumes: Vec<VolumeMount>,
        disk: DiskRequest,
    ) -> HostResult<VmView> {
        let (template, id) = (template.to_owned(), id.to_owned());
        let v = self
            .detached(
                move |a| async move { a.create_with_disk(&template, &id, &volumes, disk).await },
            )
            .await?;
        Ok(vm_view(v))
    }

    async fn create_with_memory_file(&self, template: &str, id: &str) -> HostResult<VmView> {
        let (template, id) = (template.to_owned(), id.to_owned());
        let v = self
            .detached(move |a| async move { a.create_with_memory_file(&template, &id).await })
            .await?;
        Ok(vm_view(v))
    }

    async fn create_from_snapshot(&self, snapshot: &str, id: &str) -> HostResult<VmView> {
        let (snapshot, id) = (snapshot.to_owned(), id.to_owned());
        let v = self
            .detached(move |a| async move { a.create_from_snapshot(&snapshot, &id).await })
            .await?;
        Ok(vm_view(v))
    }

    async fn pause(&self, id: &str) -> HostResult<VmView> {
        let id = id.to_owned();
        let v = self
            .detached(move |a| async move { a.pause(&id).await })
            .await?;
        Ok(vm_view(v))
    }

    async fn resume(&self, id: &str) -> HostResult<VmView> {
        let id = id.to_owned();
        let v = self
            .detached(move |a| async move { a.resume(&id).await })
            .await?;
        Ok(vm_view(v))
    }

    async fn hibernate(&self, id: &str) -> HostResult<VmView> {
        let id = id.to_owned();
        let v = self
            .detached(move |a| async move { a.hibernate(&id).await })
            .await?;
        Ok(vm_view(v))
    }

    async fn wake(&self, id: &str) -> HostResult<VmView> {
        let id = id.to_owned();
        let v = self
            .detached(move |a| async move { a.wake(&id).await })
            .await?;
        Ok(vm_view(v))
    }

    async fn awake(&self, id: &str) -> HostResult<VmView> {
        self.channel(id).await?;
        Ok(vm_view(self.0.get(id).await?))
    }

    async fn destroy(&self, id: &str) -> HostResult<()> {
        let id = id.to_owned();
        self.detached(move |a| async move { a.destroy(&id).await })
            .await
    }

    async fn stats(&self, id: &str) -> HostResult<Option<VmStats>> {
        Ok(self.0.stats(id).await?.map(|s| VmStats {
            pid: s.pid,
            rss_bytes: s.rss_bytes,
            pss_bytes: s.pss_bytes,
            cpu_time: s.cpu_time,
        }))
    }

    async fn metrics(&self, id: &str, since_ms: i64) -> HostResult<Vec<MetricSample>> {
        Ok(self.0.metrics(id, since_ms).await?)
    }

    async fn console(&self, id: &str, from: Option<LogPos>, max: usize) -> HostResult<LogChunk> {
        let path = self.0.console_log(id).await?;
        tokio::task::spawn_blocking(move || pandastack_host::read_log(&path, from, max))
            .await
            .map_err(|e| HostError::failed("console", e))?
            .map_err(|e| HostError::failed("console", e))
    }

    async fn snapshot(&self, id: &str, snapshot_id: &str) -> HostResult<SnapshotView> {
        let (id, snapshot_id) = (id.to_owned(), snapshot_id.to_owned());
        let snap = self
            .detached(move |a| async move { a.snapshot(&id, &snapshot_id).await })
            .await?;
        Ok(snapshot_view(&snap))
    }

    async fn fork(
        &self,
        id: &str,
        snapshot_id: &str,
        child_ids: &[String],
    ) -> HostResult<(SnapshotView, Vec<VmView>)> {
        let (id, snapshot_id, child_ids) =
            (id.to_owned(), snapshot_id.to_owned(), child_ids.to_vec());
        let (snap, views) = self
            .detached(move |a| async move { a.fork(&id, &snapshot_id, &child_ids).await })
            .await?;
        Ok((
            snapshot_view(&snap),
            views.into_iter().map(vm_view).collect(),
        ))
    }

    async fn store_hibernated(&self, id: &str, ws: &str) -> HostResult<String> {
        let (id, ws) = (id.to_owned(), ws.to_owned());
        self.detached(move |a| async move { a.store_hibernated(&id, &ws).await })
            .await
    }

    async fn store_durable(&self, id: &str, ws: &str) -> HostResult<String> {
        let (id, ws) = (id.to_owned(), ws.to_owned());
        self.detached(move |a| async move { a.store_durable(&id, &ws).await })
            .await
    }

    async fn store_snapshot(&self, snapshot_id: &str, ws: &str) -> HostResult<()> {
        let (id, ws) = (snapshot_id.to_owned(), ws.to_owned());
        self.detached(move |a| async move { a.store_snapshot(&id, &ws).await })
            .await
    }

    async fn fetch_snapshot(
        &self,
        snapshot_id: &str,
        ws: &str,
        origin: Option<&Origin>,
    ) -> HostResult<()> {
        let (id, ws, origin) = (snapshot_id.to_owned(), ws.to_owned(), origin.cloned());
        self.detached(move |a| async move { a.fetch_snapshot(&id, &ws, origin.as_ref()).await })
            .await
    }

    async fn leave(&self, id: &str) -> HostResult<String> {
        let id = id.to_owned();
        self.detached(move |a| async move { a.leave(&id).await })
            .await
    }

    async fn adopt_from(&self, id: &str, _ws: &str, origin: &Origin) -> HostResult<VmView> {
        let (id, origin) = (id.to_owned(), origin.clone());
        let v = self
            .detached(move |a| async move { a.adopt_from(&id, &origin).await })
            .await?;
        Ok(vm_view(v))
    }

    async fn send_hibernated(&self, id: &str) -> HostResult<BoxStream<HostResult<ImagePiece>>> {
        Ok(self.0.send_hibernated(id).await?)
    }

    async fn send_snapshot(
        &self,
        snapshot_id: &str,
    ) -> HostResult<BoxStream<HostResult<ImagePiece>>> {
        Ok(self.0.send_snapshot(snapshot_id)?)
    }

    async fn adopt_stored(&self, id: &str, ws: &str, tag: &str) -> HostResult<VmView> {
        let (id, ws, tag) = (id.to_owned(), ws.to_owned(), tag.to_owned());
        let v = self
            .detached(move |a| async move { a.adopt_stored(&id, &ws, &tag).await })
            .await?;
        Ok(vm_view(v))
    }

    async fn forget_stored(&self, id: &str, ws: &str, tag: &str) -> HostResult<()> {
        Ok(self.0.forget_stored(id, ws, tag).await?)
    }

    async fn delete_snapshot(&self, snapshot_id: &str) -> HostResult<()> {
        Ok(self.0.delete_snapshot(snapshot_id).await?)
    }

    async fn keep_standby(&self, snapshot_id: &str, count: usize) -> HostResult<usize> {
        let snapshot_id = snapshot_id.to_owned();
        let n = self
            .detached(move |a| async move { a.keep_standby(&snapshot_id, count).await })
            .await?;
        Ok(n)
    }

    async fn create_volume(&self, id: &str, size_bytes: u64) -> HostResult<VolumeView> {
        let id = id.to_owned();
        self.detached(move |a| async move { Ok(a.create_volume(&id, size_bytes).await?) })
            .await
    }

    async fn volume(&self, id: &str) -> HostResult<VolumeView> {
        Ok(self.0.volume(id)?)
    }

    async fn grow_volume(&self, id: &str, size_bytes: u64) -> HostResult<VolumeView> {
        let id = id.to_owned();
        self.detached(move |a| async move { Ok(a.grow_volume(&id, size_bytes).await?) })
            .await
    }

    async fn delete_volume(&self, id: &str) -> HostResult<()> {
        let id = id.to_owned();
        self.detached(move |a| async move { Ok(a.delete_volume(&id).await?) })
            .await
    }

    async fn volume_ids(&self) -> HostResult<Vec<String>> {
        Ok(self.0.volume_ids()?)
    }

    async fn snapshot_volume(
        &self,
        id: &str,
        snapshot_id: &str,
        holder: Option<VolumeHolder>,
    ) -> HostResult<VolumeSnapshotView> {
        let (id, snapshot_id) = (id.to_owned(), snapshot_id.to_owned());
        self.detached(
            move |a| async move { Ok(a.snapshot_volume(&id, &snapshot_id, holder).await?) },
        )
        .await
    }

    async fn delete_volume_snapshot(&self, snapshot_id: &str) -> HostResult<()> {
        let snapshot_id = snapshot_id.to_owned();
        self.detached(move |a| async move { Ok(a.delete_volume_snapshot(&snapshot_id).await?) })
            .await
    }

    async fn volume_snapshot_ids(&self) -> HostResult<Vec<String>> {
        Ok(self.0.volume_snapshot_ids()?)
    }

    async fn volume_from_snapshot(
        &self,
        snapshot_id: &str,
        id: &str,
        size_bytes: u64,
    ) -> HostResult<VolumeView> {
        let (snapshot_id, id) = (snapshot_id.to_owned(), id.to_owned());
        self.detached(move |a| async move {
            Ok(a.volume_from_snapshot(&snapshot_id, &id, size_bytes)
                .await?)
        })
        .await
    }

    async fn upload_volume_snapshot(
        &self,
        snapshot_id: &str,
        ws: &str,
    ) -> HostResult<VolumeUpload> {
        let (snapshot_id, ws) = (snapshot_id.to_owned(), ws.to_owned());
        self.detached(
            move |a| async move { Ok(a.upload_volume_snapshot(&snapshot_id, &ws).await?) },
        )
        .await
    }

    async fn volume_from_manifest(
        &self,
        ws: &str,
        manifest: &pandastack_objects::Manifest,
        id: &str,
        size_bytes: u64,
    ) -> HostResult<VolumeView> {
        let (ws, manifest, id) = (ws.to_owned(), manifest.clone(), id.to_owned());
        self.detached(move |a| async move {
            Ok(a.volume_from_manifest(&ws, &manifest, &id, size_bytes)
                .await?)
        })
        .await
    }

    // A command cut off by what happened to its VM (a delete, a hibernate, the VM ending under
    // it) fails with why, not with what the broken connection looked like (see `cut_off`).

    async fn exec(&self, id: &str, spec: ExecSpec) -> HostResult<ExecOutcome> {
        let ch = self.channel(id).await?;
        match guest::exec(ch, spec).await {
            Err(e) => Err(self.0.cut_off(id, e).await),
            ok => ok,
        }
    }

    async fn exec_stream(
        &self,
        id: &str,
        spec: ExecSpec,
    ) -> HostResult<BoxStream<HostResult<ExecEvent>>> {
        let ch = self.channel(id).await?;
        match guest::exec_stream(ch, spec).await {
            Ok(events) => Ok(explained(Arc::clone(&self.0), id, events)),
            Err(e) => Err(self.0.cut_off(id, e).await),
        }
    }

    async fn exec_session(
        &self,
        id: &str,
        start: SessionStart,
        inputs: BoxStream<ExecInput>,
    ) -> HostResult<BoxStream<HostResult<ExecEvent>>> {
        let ch = self.channel(id).await?;
        match guest::exec_session(ch, start, inputs).await {
            Ok(events) => Ok(explained(Arc::clone(&self.0), id, events)),
            Err(e) => Err(self.0.cut_off(id, e).await),
        }
    }

    async fn read_file(&self, id: &str, path: &str) -> HostResult<BoxStream<HostResult<Bytes>>> {
        let ch = self.channel(id).await?;
        guest::read_file(ch, path.to_owned()).await
    }

    async fn write_file(
        &self,
        id: &str,
        path: &str,
        body: BoxStream<Result<Bytes, String>>,
    ) -> HostResult<u64> {
        let ch = self.channel(id).await?;
        guest::write_file(ch, path.to_owned(), body).await
    }

    async fn stat(&self, id: &str, path: &str) -> HostResult<FileInfo> {
        let ch = self.channel(id).await?;
        guest::stat(ch, path.to_owned()).await
    }

    async fn watch(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> HostResult<BoxStream<HostResult<Vec<WatchEvent>>>> {
        let ch = self.channel(id).await?;
        guest::watch(ch, path.to_owned(), recursive).await
    }

    async fn list_dir(
        &self,
        id: &str,
        path: &str,
        depth: u32,
        page: ListPage,
    ) -> HostResult<DirPage> {
        let ch = self.channel(id).await?;
        guest::list(ch, path.to_owned(), depth, page).await
    }

    async fn mkdir(&self, id: &str, path: &str, parents: bool) -> HostResult<()> {
        let ch = self.channel(id).await?;
        guest::mkdir(ch, path.to_owned(), parents).await
    }

    async fn remove(&self, id: &str, path: &str, recursive: bool) -> HostResult<()> {
        let ch = self.channel(id).await?;
        guest::remove(ch, path.to_owned(), recursive).await
    }

    async fn rename(&self, id: &str, from: &str, to: &str, overwrite: bool) -> HostResult<()> {
        let ch = self.channel(id).await?;
        guest::rename(ch, from.to_owned(), to.to_owned(), overwrite).await
    }

    /// Over the sandbox's network when it has one (a socket in its slot's namespace connecting
    /// to the guest's address: the guest's kernel answers, nothing relays the bytes), else —
    /// and for servers that listen on the guest's loopback only, which refuse that connection —
    /// a port stream on the guest agent's channel.
    async fn connect_port(&self, id: &str, port: u16) -> HostResult<Box<dyn PortIo>> {
        let owned = id.to_owned();
        let route = self
            .detached(move |a| async move { a.port_route(&owned, port).await })
            .await?;
        let ch = match route {
            crate::dialed::PortRoute::Network(conn) => return Ok(Box::new(conn)),
            crate::dialed::PortRoute::Agent(ch) => ch,
        };
        let stream = pandastack_guest_proto::connect_port(ch, port)
            .await
            .map_err(guest::status)?;
        Ok(Box::new(stream))
    }

    fn catalog(&self) -> HostResult<Vec<TemplateView>> {
        Ok(self
            .0
            .templates()?
            .into_iter()
            .map(|t| TemplateView {
                name: t.name,
                description: t.description,
                shape: host_shape(t.shape),
                disk_mb: t.disk_mb,
                bake_ms: t.baked.map(|b| b.bake_ms),
            })
            .collect())
    }

    fn is_catalog(&self, name: &str) -> bool {
        self.0.is_catalog(name)
    }

    async fn rebake(&self, name: &str) -> HostResult<()> {
        self.0.rebake(name).await?;
        Ok(())
    }

    async fn remove_template(&self, name: &str) -> HostResult<()> {
        self.0.remove_template(name).await?;
        // What a replica's build of it left here (its image, kept for nothing else).
        if let Some(dir) = self.build_dir(name) {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(template = %name, error = &e as &dyn std::error::Error, "a removed template's build directory stays");
                }
            }
        }
        Ok(())
    }

    fn check_spec(&self, text: &str) -> Result<SpecSummary, SpecRefused> {
        crate::api_spec(text).map(|s| crate::builds::spec_summary(&s))
    }

    async fn build_image(
        &self,
        build_id: &str,
        source: BuildSource,
        dir: PathBuf,
        log: BuildLogFn,
    ) -> HostResult<BuiltImage> {
        // No directory given (a replica's build): this host's own, under its data directory.
        let dir = if dir.as_os_str().is_empty() {
            self.build_dir(build_id).ok_or_else(|| {
                HostError::BuildFailed(format!(
                    "build id {build_id:?}: letters, digits, '-', '_' and '.' only"
                ))
            })?
        } else {
            dir
        };
        Ok(self.0.build_image(build_id, source, dir, log).await?)
    }

    async fn bake_image(&self, name: &str, image: &Path, shape: Shape) -> HostResult<u64> {
        Ok(self
            .0
            .bake_image(name, image, runtime_shape(shape))
            .await?
            .bake_ms)
    }
}
