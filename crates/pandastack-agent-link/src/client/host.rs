//! `Host` for [`RemoteHost`]: each method is the RPC of the same name.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::StreamExt;
use pandastack_host::{
    BoxStream, BuildLogFn, BuildSource, BuiltImage, DirPage, DiskRequest, ExecEvent, ExecInput,
    ExecOutcome, ExecSpec, FileInfo, Host, HostResult, ListPage, LogChunk, LogPos, MetricSample,
    Origin, PortIo, SessionStart, Shape, SnapshotView, SpecRefused, SpecSummary, TemplateView,
    VmStats, VmView, VolumeHolder, VolumeMount, VolumeSnapshotView, VolumeUpload, VolumeView,
    WatchEvent,
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::streams::*;
use super::RemoteHost;
use crate::convert::*;
use crate::pb;
use crate::status::from_status;

fn sid(id: &str) -> pb::SandboxId {
    pb::SandboxId { id: id.to_owned() }
}

fn unit<T>(r: Result<tonic::Response<T>, Status>) -> HostResult<()> {
    r.map(|_| ()).map_err(from_status)
}

fn inner<T>(r: Result<tonic::Response<T>, Status>) -> HostResult<T> {
    r.map(tonic::Response::into_inner).map_err(from_status)
}

#[async_trait::async_trait]
impl Host for RemoteHost {
    async fn list(&self) -> Vec<VmView> {
        // The trait cannot say the link failed here: an unreachable host lists nothing.
        match self.c().list(pb::Empty {}).await {
            Ok(r) => r
                .into_inner()
                .vms
                .into_iter()
                .filter_map(|v| vm_from_pb(v).ok())
                .collect(),
            Err(status) => {
                tracing::warn!(host = %self.host_id, error = &status as &dyn std::error::Error, "agent link: list failed");
                Vec::new()
            }
        }
    }

    async fn get(&self, id: &str) -> HostResult<VmView> {
        self.vm(self.c().get(sid(id))).await
    }

    async fn create(&self, template: &str, id: &str) -> HostResult<VmView> {
        let r = Self::create_request(template, id, Vec::new(), DiskRequest::default());
        self.vm(self.c().create(r)).await
    }

    async fn create_with_volumes(
        &self,
        template: &str,
        id: &str,
        volumes: Vec<VolumeMount>,
    ) -> HostResult<VmView> {
        let r = Self::create_request(template, id, volumes, DiskRequest::default());
        self.vm(self.c().create_with_volumes(r)).await
    }

    async fn create_with_disk(
        &self,
        template: &str,
        id: &str,
        volumes: Vec<VolumeMount>,
        disk: DiskRequest,
    ) -> HostResult<VmView> {
        let r = Self::create_request(template, id, volumes, disk);
        self.vm(self.c().create_with_disk(r)).await
    }

    async fn create_with_memory_file(&self, template: &str, id: &str) -> HostResult<VmView> {
        let r = Self::create_request(template, id, Vec::new(), DiskRequest::default());
        self.vm(self.c().create_with_memory_file(r)).await
    }

    async fn create_from_snapshot(&self, snapshot: &str, id: &str) -> HostResult<VmView> {
        let r = pb::CreateFromSnapshotRequest {
            snapshot: snapshot.to_owned(),
            id: id.to_owned(),
        };
        self.vm(self.c().create_from_snapshot(r)).await
    }

    async fn pause(&self, id: &str) -> HostResult<VmView> {
        self.vm(self.c().pause(sid(id))).await
    }

    async fn resume(&self, id: &str) -> HostResult<VmView> {
        self.vm(self.c().resume(sid(id))).await
    }

    async fn hibernate(&self, id: &str) -> HostResult<VmView> {
        self.vm(self.c().hibernate(sid(id))).await
    }

    async fn wake(&self, id: &str) -> HostResult<VmView> {
        self.vm(self.c().wake(sid(id))).await
    }

    async fn awake(&self, id: &str) -> HostResult<VmView> {
        self.vm(self.c().awake(sid(id))).await
    }

    async fn destroy(&self, id: &str) -> HostResult<()> {
        unit(self.c().destroy(sid(id)).await)
    }

    async fn stats(&self, id: &str) -> HostResult<Option<VmStats>> {
        Ok(inner(self.c().stats(sid(id)).await)?
            .stats
            .map(stats_from_pb))
    }

    async fn metrics(&self, id: &str, since_ms: i64) -> HostResult<Vec<MetricSample>> {
        let r = pb::MetricsRequest {
            id: id.to_owned(),
            since_ms,
        };
        Ok(inner(self.c().metrics(r).await)?
            .samples
            .into_iter()
            .map(sample_from_pb)
            .collect())
    }

    async fn console(&self, id: &str, from: Option<LogPos>, max: usize) -> HostResult<LogChunk> {
        let r = pb::ConsoleRequest {
            id: id.to_owned(),
            from: from.map(pos_to_pb),
            max: max as u64,
        };
        Ok(chunk_from_pb(inner(self.c().console(r).await)?))
    }

    async fn snapshot(&self, id: &str, snapshot_id: &str) -> HostResult<SnapshotView> {
        let r = pb::SnapshotRequest {
            id: id.to_owned(),
            snapshot_id: snapshot_id.to_owned(),
        };
        Ok(snapshot_from_pb(inner(self.c().snapshot(r).await)?))
    }

    async fn fork(
        &self,
        id: &str,
        snapshot_id: &str,
        child_ids: &[String],
    ) -> HostResult<(SnapshotView, Vec<VmView>)> {
        let r = pb::ForkRequest {
            id: id.to_owned(),
            snapshot_id: snapshot_id.to_owned(),
            child_ids: child_ids.to_vec(),
        };
        let r = inner(self.c().fork(r).await)?;
        let snapshot = snapshot_from_pb(r.snapshot.ok_or_else(|| bad("fork without snapshot"))?);
        let children = r
            .children
            .into_iter()
            .map(vm_from_pb)
            .collect::<HostResult<_>>()?;
        Ok((snapshot, children))
    }

    async fn store_hibernated(&self, id: &str, ws: &str) -> HostResult<String> {
        let r = pb::StoreHibernatedRequest {
            id: id.to_owned(),
            ws: ws.to_owned(),
        };
        Ok(inner(self.c().store_hibernated(r).await)?.tag)
    }

    async fn store_snapshot(&self, snapshot_id: &str, ws: &str) -> HostResult<()> {
        let r = pb::SnapshotInWorkspace {
            snapshot_id: snapshot_id.to_owned(),
            ws: ws.to_owned(),
            origin: None,
        };
        unit(self.c().store_snapshot(r).await)
    }

    async fn fetch_snapshot(
        &self,
        snapshot_id: &str,
        ws: &str,
        origin: Option<&Origin>,
    ) -> HostResult<()> {
        let r = pb::SnapshotInWorkspace {
            snapshot_id: snapshot_id.to_owned(),
            ws: ws.to_owned(),
            origin: origin.map(origin_to_pb),
        };
        unit(self.c().fetch_snapshot(r).await)
    }

    async fn store_durable(&self, id: &str, ws: &str) -> HostResult<String> {
        let r = pb::StoreHibernatedRequest {
            id: id.to_owned(),
            ws: ws.to_owned(),
        };
        Ok(inner(self.c().store_durable(r).await)?.tag)
    }

    async fn adopt_stored(&self, id: &str, ws: &str, tag: &str) -> HostResult<VmView> {
        let r = pb::StoredRef {
            id: id.to_owned(),
            ws: ws.to_owned(),
            tag: tag.to_owned(),
        };
        self.vm(self.c().adopt_stored(r)).await
    }

    async fn forget_stored(&self, id: &str, ws: &str, tag: &str) -> HostResult<()> {
        let r = pb::StoredRef {
            id: id.to_owned(),
            ws: ws.to_owned(),
            tag: tag.to_owned(),
        };
        unit(self.c().forget_stored(r).await)
    }

    async fn leave(&self, id: &str) -> HostResult<String> {
        let r = pb::SandboxId { id: id.to_owned() };
        Ok(inner(self.c().leave(r).await)?.tag)
    }

    async fn adopt_from(&self, id: &str, ws: &str, origin: &Origin) -> HostResult<VmView> {
        let r = pb::AdoptFromRequest {
            id: id.to_owned(),
            ws: ws.to_owned(),
            origin: Some(origin_to_pb(origin)),
        };
        self.vm(self.c().adopt_from(r)).await
    }

    async fn delete_snapshot(&self, snapshot_id: &str) -> HostResult<()> {
        let r = pb::SnapshotId {
            snapshot_id: snapshot_id.to_owned(),
        };
        unit(self.c().delete_snapshot(r).await)
    }

    async fn keep_standby(&self, snapshot_id: &str, count: usize) -> HostResult<usize> {
        let r = pb::KeepStandbyRequest {
            snapshot_id: snapshot_id.to_owned(),
            count: count as u64,
        };
        Ok(inner(self.c().keep_standby(r).await)?.count as usize)
    }

    async fn create_volume(&self, id: &str, size_bytes: u64) -> HostResult<VolumeView> {
        let r = pb::VolumeSize {
            id: id.to_owned(),
            size_bytes,
        };
        Ok(volume_from_pb(inner(self.c().create_volume(r).await)?))
    }

    async fn volume(&self, id: &str) -> HostResult<VolumeView> {
        let r = pb::VolumeId { id: id.to_owned() };
        Ok(volume_from_pb(inner(self.c().volume(r).await)?))
    }

    async fn grow_volume(&self, id: &str, size_bytes: u64) -> HostResult<VolumeView> {
        let r = pb::VolumeSize {
            id: id.to_owned(),
            size_bytes,
        };
        Ok(volume_from_pb(inner(self.c().grow_volume(r).await)?))
    }

    async fn delete_volume(&self, id: &str) -> HostResult<()> {
        unit(
            self.c()
                .delete_volume(pb::VolumeId { id: id.to_owned() })
                .await,
        )
    }

    async fn volume_ids(&self) -> HostResult<Vec<String>> {
        Ok(inner(self.c().volume_ids(pb::Empty {}).await)?.ids)
    }

    async fn snapshot_volume(
        &self,
        id: &str,
        snapshot_id: &str,
        holder: Option<VolumeHolder>,
    ) -> HostResult<VolumeSnapshotView> {
        let r = pb::SnapshotVolumeRequest {
            id: id.to_owned(),
            snapshot_id: snapshot_id.to_owned(),
            holder: holder.map(holder_to_pb),
        };
        Ok(volume_snapshot_from_pb(inner(
            self.c().snapshot_volume(r).await,
        )?))
    }

    async fn delete_volume_snapshot(&self, snapshot_id: &str) -> HostResult<()> {
        let r = pb::SnapshotId {
            snapshot_id: snapshot_id.to_owned(),
        };
        unit(self.c().delete_volume_snapshot(r).await)
    }

    async fn volume_snapshot_ids(&self) -> HostResult<Vec<String>> {
        Ok(inner(self.c().volume_snapshot_ids(pb::Empty {}).await)?.ids)
    }

    async fn volume_from_snapshot(
        &self,
        snapshot_id: &str,
        id: &str,
        size_bytes: u64,
    ) -> HostResult<VolumeView> {
        let r = pb::VolumeFromSnapshotRequest {
            snapshot_id: snapshot_id.to_owned(),
            id: id.to_owned(),
            size_bytes,
        };
        Ok(volume_from_pb(inner(
            self.c().volume_from_snapshot(r).await,
        )?))
    }

    async fn upload_volume_snapshot(
        &self,
        snapshot_id: &str,
        ws: &str,
    ) -> HostResult<VolumeUpload> {
        let r = pb::UploadVolumeSnapshotRequest {
            snapshot_id: snapshot_id.to_owned(),
            ws: ws.to_owned(),
        };
        upload_from_pb(inner(self.c().upload_volume_snapshot(r).await)?)
    }

    async fn volume_from_manifest(
        &self,
        ws: &str,
        manifest: &pandastack_objects::Manifest,
        id: &str,
        size_bytes: u64,
    ) -> HostResult<VolumeView> {
        let r = pb::VolumeFromManifestRequest {
            ws: ws.to_owned(),
            manifest_json: manifest_to_json(manifest),
            id: id.to_owned(),
            size_bytes,
        };
        Ok(volume_from_pb(inner(
            self.c().volume_from_manifest(r).await,
        )?))
    }

    async fn exec(&self, id: &str, spec: ExecSpec) -> HostResult<ExecOutcome> {
        let r = pb::ExecRequest {
            id: id.to_owned(),
            spec: Some(spec_to_pb(spec)),
        };
        Ok(outcome_from_pb(inner(self.c().exec(r).await)?))
    }

    async fn exec_stream(
        &self,
        id: &str,
        spec: ExecSpec,
    ) -> HostResult<BoxStream<HostResult<ExecEvent>>> {
        let r = pb::ExecRequest {
            id: id.to_owned(),
            spec: Some(spec_to_pb(spec)),
        };
        Ok(events(inner(self.c().exec_stream(r).await)?))
    }

    async fn exec_session(
        &self,
        id: &str,
        start: SessionStart,
        inputs: BoxStream<ExecInput>,
    ) -> HostResult<BoxStream<HostResult<ExecEvent>>> {
        let outbound = request_stream(session_messages(id, start, inputs));
        Ok(events(inner(self.c().exec_session(outbound).await)?))
    }

    async fn read_file(&self, id: &str, path: &str) -> HostResult<BoxStream<HostResult<Bytes>>> {
        let r = pb::PathRequest {
            id: id.to_owned(),
            path: path.to_owned(),
        };
        let s = inner(self.c().read_file(r).await)?;
        Ok(Box::pin(s.map(|r| r.map(|c| c.data).map_err(from_status))))
    }

    async fn write_file(
        &self,
        id: &str,
        path: &str,
        body: BoxStream<Result<Bytes, String>>,
    ) -> HostResult<u64> {
        let outbound = request_stream(write_messages(id, path, body));
        Ok(inner(self.c().write_file(outbound).await)?.bytes)
    }

    async fn stat(&self, id: &str, path: &str) -> HostResult<FileInfo> {
        let r = pb::PathRequest {
            id: id.to_owned(),
            path: path.to_owned(),
        };
        Ok(info_from_pb(inner(self.c().stat(r).await)?))
    }

    async fn list_dir(
        &self,
        id: &str,
        path: &str,
        depth: u32,
        page: ListPage,
    ) -> HostResult<DirPage> {
        let r = pb::ListDirRequest {
            id: id.to_owned(),
            path: path.to_owned(),
            depth,
            after: page.after,
            limit: page.limit,
            pattern: page.pattern,
        };
        Ok(page_from_pb(inner(self.c().list_dir(r).await)?))
    }

    async fn watch(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> HostResult<BoxStream<HostResult<Vec<WatchEvent>>>> {
        let r = pb::WatchRequest {
            id: id.to_owned(),
            path: path.to_owned(),
            recursive,
        };
        let s = inner(self.c().watch(r).await)?;
        Ok(Box::pin(
            s.map(|r| r.map(watch_batch_from_pb).map_err(from_status)),
        ))
    }

    async fn mkdir(&self, id: &str, path: &str, parents: bool) -> HostResult<()> {
        let r = pb::MkdirRequest {
            id: id.to_owned(),
            path: path.to_owned(),
            parents,
        };
        unit(self.c().mkdir(r).await)
    }

    async fn remove(&self, id: &str, path: &str, recursive: bool) -> HostResult<()> {
        let r = pb::RemoveRequest {
            id: id.to_owned(),
            path: path.to_owned(),
            recursive,
        };
        unit(self.c().remove(r).await)
    }

    async fn rename(&self, id: &str, from: &str, to: &str, overwrite: bool) -> HostResult<()> {
        let r = pb::RenameRequest {
            id: id.to_owned(),
            from: from.to_owned(),
            to: to.to_owned(),
            overwrite,
        };
        unit(self.c().rename(r).await)
    }

    async fn connect_port(&self, id: &str, port: u16) -> HostResult<Box<dyn PortIo>> {
        use pb::port_message::Message;
        let (tx, rx) = tokio::sync::mpsc::channel::<pb::PortMessage>(8);
        let open = Message::Open(pb::PortOpen {
            id: id.to_owned(),
            port: u32::from(port),
        });
        // Cannot fail: the receiver is right here.
        let _ = tx
            .send(pb::PortMessage {
                message: Some(open),
            })
            .await;
        // Returns once the agent has connected the port (or failed to).
        let inbound = inner(self.c().connect_port(ReceiverStream::new(rx)).await)?;
        Ok(port_io(tx, inbound))
    }

    fn catalog(&self) -> HostResult<Vec<TemplateView>> {
        let mut c = self.c();
        let Some(r) = self.block(async move { c.catalog(pb::Empty {}).await }) else {
            return Ok(self
                .catalog
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone());
        };
        let templates = inner(r)?
            .templates
            .into_iter()
            .map(template_from_pb)
            .collect::<HostResult<Vec<_>>>()?;
        *self.catalog.lock().unwrap_or_else(|e| e.into_inner()) = templates.clone();
        Ok(templates)
    }

    fn is_catalog(&self, name: &str) -> bool {
        let mut c = self.c();
        let r = pb::TemplateName {
            name: name.to_owned(),
        };
        match self.block(async move { c.is_catalog(r).await }) {
            Some(Ok(r)) => r.into_inner().value,
            Some(Err(status)) => {
                tracing::warn!(host = %self.host_id, error = &status as &dyn std::error::Error, "agent link: is_catalog failed; answering from the cached catalog");
                self.cached_is_catalog(name)
            }
            None => self.cached_is_catalog(name),
        }
    }

    fn check_spec(&self, text: &str) -> Result<SpecSummary, SpecRefused> {
        let mut c = self.c();
        let r = pb::SpecText {
            text: text.to_owned(),
        };
        match self.block(async move { c.check_spec(r).await }) {
            Some(Ok(r)) => check_from_pb(r.into_inner()),
            Some(Err(status)) => Err(SpecRefused::Invalid(format!(
                "the host's agent could not check the spec: {}",
                pandastack_host::error_chain(&from_status(status))
            ))),
            None => Err(SpecRefused::Invalid(
                "a spec cannot be checked by a remote host from a current-thread runtime".into(),
            )),
        }
    }

    async fn rebake(&self, name: &str) -> HostResult<()> {
        let r = pb::TemplateName {
            name: name.to_owned(),
        };
        unit(self.c().rebake(r).await)
    }

    async fn remove_template(&self, name: &str) -> HostResult<()> {
        let r = pb::TemplateName {
            name: name.to_owned(),
        };
        unit(self.c().remove_template(r).await)
    }

    async fn build_image(
        &self,
        build_id: &str,
        source: BuildSource,
        dir: PathBuf,
        mut log: BuildLogFn,
    ) -> HostResult<BuiltImage> {
        use pb::build_event::Event;
        let r = pb::BuildImageRequest {
            build_id: build_id.to_owned(),
            source: Some(source_to_pb(source)),
            dir: dir.to_string_lossy().into_owned(),
        };
        let mut events = inner(self.c().build_image(r).await)?;
        while let Some(e) = events.next().await {
            match e.map_err(from_status)?.event {
                Some(Event::Log(line)) => log(&line),
                Some(Event::Done(b)) => return built_from_pb(b),
                None => {}
            }
        }
        Err(bad("the build's stream ended without a result"))
    }

    async fn bake_image(&self, name: &str, image: &Path, shape: Shape) -> HostResult<u64> {
        let r = pb::BakeImageRequest {
            name: name.to_owned(),
            image: image.to_string_lossy().into_owned(),
            shape: Some(shape_to_pb(shape)),
        };
        Ok(inner(self.c().bake_image(r).await)?.bake_ms)
    }
}
