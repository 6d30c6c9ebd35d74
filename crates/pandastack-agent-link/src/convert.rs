//! The boundary's types to and from their messages. Conversions from a message fail only on
//! what this side cannot represent (a state or kind it does not know, a malformed manifest):
//! [`bad`], a [`HostError::Failed`] of the link.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use pandastack_host::{
    BuildSource, BuiltImage, DirPage, DiskLimits, DiskRequest, ExecEvent, ExecOutcome, ExecSpec,
    FileInfo, FileKind, HostError, HostResult, ImagePiece, LogChunk, LogPos, MetricSample, Origin,
    PtySize, Shape, SnapshotView, SpecRefused, SpecSummary, TemplateView, VmState, VmStats, VmView,
    VolumeHolder, VolumeMount, VolumeSnapshotView, VolumeUpload, VolumeView, WatchEvent, WatchKind,
};

use crate::pb;
use crate::status::intern;

/// A message this side cannot turn into the boundary's type.
pub(crate) fn bad(what: &str) -> HostError {
    HostError::failed("agent link", format!("malformed message: {what}"))
}

pub(crate) fn state_to_pb(s: VmState) -> pb::VmState {
    match s {
        VmState::Running => pb::VmState::Running,
        VmState::Paused => pb::VmState::Paused,
        VmState::Hibernated => pb::VmState::Hibernated,
        VmState::Exited => pb::VmState::Exited,
    }
}

pub(crate) fn state_from_pb(s: i32) -> Option<VmState> {
    match pb::VmState::try_from(s).ok()? {
        pb::VmState::Running => Some(VmState::Running),
        pb::VmState::Paused => Some(VmState::Paused),
        pb::VmState::Hibernated => Some(VmState::Hibernated),
        pb::VmState::Exited => Some(VmState::Exited),
        pb::VmState::Unspecified => None,
    }
}

pub(crate) fn duration_to_pb(d: Duration) -> pb::Duration {
    pb::Duration {
        secs: d.as_secs(),
        nanos: d.subsec_nanos(),
    }
}

pub(crate) fn duration_from_pb(d: Option<pb::Duration>) -> Duration {
    d.map_or(Duration::ZERO, |d| {
        Duration::new(d.secs, d.nanos.min(999_999_999))
    })
}

pub(crate) fn shape_to_pb(s: Shape) -> pb::Shape {
    pb::Shape {
        vcpus: s.vcpus,
        memory_mib: s.memory_mib,
        disk: s.disk.map(|d| pb::DiskLimits {
            bytes_per_sec: d.bytes_per_sec,
            iops: d.iops,
        }),
    }
}

pub(crate) fn shape_from_pb(s: Option<pb::Shape>) -> HostResult<Shape> {
    let s = s.ok_or_else(|| bad("no shape"))?;
    Ok(Shape {
        vcpus: s.vcpus,
        memory_mib: s.memory_mib,
        disk: s.disk.map(|d| DiskLimits {
            bytes_per_sec: d.bytes_per_sec,
            iops: d.iops,
        }),
    })
}

pub(crate) fn vm_to_pb(v: VmView) -> pb::Vm {
    pb::Vm {
        id: v.id,
        state: state_to_pb(v.state) as i32,
        template: v.template,
        shape: Some(shape_to_pb(v.shape)),
        ready_ms: v.ready_ms,
        image_bytes: v.image_bytes,
    }
}

pub(crate) fn vm_from_pb(v: pb::Vm) -> HostResult<VmView> {
    Ok(VmView {
        state: state_from_pb(v.state).ok_or_else(|| bad("vm state"))?,
        shape: shape_from_pb(v.shape)?,
        id: v.id,
        template: v.template,
        ready_ms: v.ready_ms,
        image_bytes: v.image_bytes,
    })
}

pub(crate) fn holder_to_pb(h: VolumeHolder) -> pb::VolumeHolder {
    pb::VolumeHolder {
        sandbox_id: h.sandbox_id,
        path: h.path,
    }
}

pub(crate) fn holder_from_pb(h: pb::VolumeHolder) -> VolumeHolder {
    VolumeHolder {
        sandbox_id: h.sandbox_id,
        path: h.path,
    }
}

pub(crate) fn mount_to_pb(m: VolumeMount) -> pb::VolumeMount {
    pb::VolumeMount {
        volume_id: m.volume_id,
        path: m.path,
        read_only: m.read_only,
        holder: m.holder.map(holder_to_pb),
        owner: m.owner,
    }
}

pub(crate) fn mount_from_pb(m: pb::VolumeMount) -> VolumeMount {
    VolumeMount {
        volume_id: m.volume_id,
        path: m.path,
        read_only: m.read_only,
        holder: m.holder.map(holder_from_pb),
        owner: m.owner,
    }
}

pub(crate) fn disk_to_pb(d: DiskRequest) -> pb::DiskRequest {
    pb::DiskRequest {
        mbps: d.mbps,
        iops: d.iops,
    }
}

pub(crate) fn disk_from_pb(d: Option<pb::DiskRequest>) -> DiskRequest {
    d.map_or_else(DiskRequest::default, |d| DiskRequest {
        mbps: d.mbps,
        iops: d.iops,
    })
}

pub(crate) fn stats_to_pb(s: VmStats) -> pb::VmStats {
    pb::VmStats {
        pid: s.pid,
        rss_bytes: s.rss_bytes,
        pss_bytes: s.pss_bytes,
        cpu_time: Some(duration_to_pb(s.cpu_time)),
    }
}

pub(crate) fn stats_from_pb(s: pb::VmStats) -> VmStats {
    VmStats {
        pid: s.pid,
        rss_bytes: s.rss_bytes,
        pss_bytes: s.pss_bytes,
        cpu_time: duration_from_pb(s.cpu_time),
    }
}

pub(crate) fn sample_to_pb(s: MetricSample) -> pb::MetricSample {
    pb::MetricSample {
        at_ms: s.at_ms,
        run: s.run,
        vcpus: s.vcpus,
        cpu_time_ms: s.cpu_time_ms,
        rss_bytes: s.rss_bytes,
        pss_bytes: s.pss_bytes,
        mem_total_bytes: s.mem_total_bytes,
        mem_available_bytes: s.mem_available_bytes,
        disk_total_bytes: s.disk_total_bytes,
        disk_used_bytes: s.disk_used_bytes,
        net_rx_bytes: s.net_rx_bytes,
        net_tx_bytes: s.net_tx_bytes,
    }
}

pub(crate) fn sample_from_pb(s: pb::MetricSample) -> MetricSample {
    MetricSample {
        at_ms: s.at_ms,
        run: s.run,
        vcpus: s.vcpus,
        cpu_time_ms: s.cpu_time_ms,
        rss_bytes: s.rss_bytes,
        pss_bytes: s.pss_bytes,
        mem_total_bytes: s.mem_total_bytes,
        mem_available_bytes: s.mem_available_bytes,
        disk_total_bytes: s.disk_total_bytes,
        disk_used_bytes: s.disk_used_bytes,
        net_rx_bytes: s.net_rx_bytes,
        net_tx_bytes: s.net_tx_bytes,
    }
}

pub(crate) fn pos_to_pb(p: LogPos) -> pb::LogPos {
    pb::LogPos {
        file: p.file,
        offset: p.offset,
    }
}

pub(crate) fn pos_from_pb(p: pb::LogPos) -> LogPos {
    LogPos {
        file: p.file,
        offset: p.offset,
    }
}

pub(crate) fn chunk_to_pb(c: LogChunk) -> pb::LogChunk {
    pb::LogChunk {
        data: c.data,
        next: c.next.map(pos_to_pb),
        restarted: c.restarted,
    }
}

pub(crate) fn chunk_from_pb(c: pb::LogChunk) -> LogChunk {
    LogChunk {
        data: c.data,
        next: c.next.map(pos_from_pb),
        restarted: c.restarted,
    }
}

pub(crate) fn snapshot_to_pb(s: SnapshotView) -> pb::Snapshot {
    pb::Snapshot {
        id: s.id,
        sandbox_id: s.sandbox_id,
        template: s.template,
        size_bytes: s.size_bytes,
    }
}

pub(crate) fn snapshot_from_pb(s: pb::Snapshot) -> SnapshotView {
    SnapshotView {
        id: s.id,
        sandbox_id: s.sandbox_id,
        template: s.template,
        size_bytes: s.size_bytes,
    }
}

pub(crate) fn volume_to_pb(v: VolumeView) -> pb::Volume {
    pb::Volume {
        id: v.id,
        size_bytes: v.size_bytes,
        allocated_bytes: v.allocated_bytes,
    }
}

pub(crate) fn volume_from_pb(v: pb::Volume) -> VolumeView {
    VolumeView {
        id: v.id,
        size_bytes: v.size_bytes,
        allocated_bytes: v.allocated_bytes,
    }
}

pub(crate) fn volume_snapshot_to_pb(v: VolumeSnapshotView) -> pb::VolumeSnapshot {
    pb::VolumeSnapshot {
        id: v.id,
        size_bytes: v.size_bytes,
        copy_ms: v.copy_ms,
        frozen: v.frozen,
    }
}

pub(crate) fn volume_snapshot_from_pb(v: pb::VolumeSnapshot) -> VolumeSnapshotView {
    VolumeSnapshotView {
        id: v.id,
        size_bytes: v.size_bytes,
        copy_ms: v.copy_ms,
        frozen: v.frozen,
    }
}

pub(crate) fn manifest_to_json(m: &pandastack_objects::Manifest) -> Bytes {
    // A manifest is plain data (numbers, hex hashes): it always serializes.
    serde_json::to_vec(m).unwrap_or_default().into()
}

pub(crate) fn manifest_from_json(b: &[u8]) -> HostResult<pandastack_objects::Manifest> {
    serde_json::from_slice(b).map_err(|e| HostError::failed("agent link", e))
}

pub(crate) fn upload_to_pb(u: VolumeUpload) -> pb::VolumeUpload {
    pb::VolumeUpload {
        manifest_json: manifest_to_json(&u.manifest),
        chunks: u.chunks,
        holes: u.holes,
        uploaded_chunks: u.uploaded_chunks,
        bytes_uploaded: u.bytes_uploaded,
    }
}

pub(crate) fn upload_from_pb(u: pb::VolumeUpload) -> HostResult<VolumeUpload> {
    Ok(VolumeUpload {
        manifest: manifest_from_json(&u.manifest_json)?,
        chunks: u.chunks,
        holes: u.holes,
        uploaded_chunks: u.uploaded_chunks,
        bytes_uploaded: u.bytes_uploaded,
    })
}

pub(crate) fn spec_to_pb(s: ExecSpec) -> pb::ExecSpec {
    pb::ExecSpec {
        argv: s.argv,
        shell: s.shell,
        env: s.env,
        cwd: s.cwd,
        user: s.user,
        stdin: s.stdin.map(Bytes::from),
        timeout: Some(duration_to_pb(s.timeout)),
        max_output_bytes: s.max_output_bytes,
    }
}

pub(crate) fn spec_from_pb(s: Option<pb::ExecSpec>) -> ExecSpec {
    let s = s.unwrap_or_default();
    ExecSpec {
        argv: s.argv,
        shell: s.shell,
        env: s.env,
        cwd: s.cwd,
        user: s.user,
        stdin: s.stdin.map(|b| b.to_vec()),
        timeout: duration_from_pb(s.timeout),
        max_output_bytes: s.max_output_bytes,
    }
}

pub(crate) fn outcome_to_pb(o: ExecOutcome) -> pb::ExecOutcome {
    pb::ExecOutcome {
        stdout: o.stdout.into(),
        stderr: o.stderr.into(),
        exit_code: o.exit_code,
        timed_out: o.timed_out,
        truncated: o.truncated,
        duration_ms: o.duration_ms,
    }
}

pub(crate) fn outcome_from_pb(o: pb::ExecOutcome) -> ExecOutcome {
    ExecOutcome {
        stdout: o.stdout.into(),
        stderr: o.stderr.into(),
        exit_code: o.exit_code,
        timed_out: o.timed_out,
        truncated: o.truncated,
        duration_ms: o.duration_ms,
    }
}

pub(crate) fn event_to_pb(e: ExecEvent) -> pb::ExecEvent {
    use pb::exec_event::Event;
    let event = match e {
        ExecEvent::Stdout(b) => Event::Stdout(b),
        ExecEvent::Stderr(b) => Event::Stderr(b),
        ExecEvent::Exit {
            exit_code,
            timed_out,
            truncated,
            duration_ms,
        } => Event::Exit(pb::ExecExit {
            exit_code,
            timed_out,
            truncated,
            duration_ms,
        }),
    };
    pb::ExecEvent { event: Some(event) }
}

pub(crate) fn event_from_pb(e: pb::ExecEvent) -> HostResult<ExecEvent> {
    use pb::exec_event::Event;
    Ok(match e.event.ok_or_else(|| bad("empty exec event"))? {
        Event::Stdout(b) => ExecEvent::Stdout(b),
        Event::Stderr(b) => ExecEvent::Stderr(b),
        Event::Exit(x) => ExecEvent::Exit {
            exit_code: x.exit_code,
            timed_out: x.timed_out,
            truncated: x.truncated,
            duration_ms: x.duration_ms,
        },
    })
}

pub(crate) fn pty_to_pb(p: PtySize) -> pb::PtySize {
    pb::PtySize {
        rows: p.rows,
        cols: p.cols,
    }
}

pub(crate) fn pty_from_pb(p: pb::PtySize) -> PtySize {
    PtySize {
        rows: p.rows,
        cols: p.cols,
    }
}

fn kind_to_pb(k: FileKind) -> pb::FileKind {
    match k {
        FileKind::File => pb::FileKind::File,
        FileKind::Dir => pb::FileKind::Dir,
        FileKind::Symlink => pb::FileKind::Symlink,
        FileKind::Other => pb::FileKind::Other,
    }
}

/// A kind this side does not know is [`FileKind::Other`].
fn kind_from_pb(k: i32) -> FileKind {
    match pb::FileKind::try_from(k) {
        Ok(pb::FileKind::File) => FileKind::File,
        Ok(pb::FileKind::Dir) => FileKind::Dir,
        Ok(pb::FileKind::Symlink) => FileKind::Symlink,
        _ => FileKind::Other,
    }
}

pub(crate) fn info_to_pb(i: FileInfo) -> pb::FileInfo {
    pb::FileInfo {
        name: i.name,
        path: i.path,
        kind: kind_to_pb(i.kind) as i32,
        size: i.size,
        mode: i.mode,
        mtime_ms: i.mtime_ms,
        symlink_target: i.symlink_target,
    }
}

pub(crate) fn info_from_pb(i: pb::FileInfo) -> FileInfo {
    FileInfo {
        name: i.name,
        path: i.path,
        kind: kind_from_pb(i.kind),
        size: i.size,
        mode: i.mode,
        mtime_ms: i.mtime_ms,
        symlink_target: i.symlink_target,
    }
}

pub(crate) fn page_to_pb(p: DirPage) -> pb::DirPage {
    pb::DirPage {
        entries: p.entries.into_iter().map(info_to_pb).collect(),
        next_after: p.next_after,
    }
}

pub(crate) fn page_from_pb(p: pb::DirPage) -> DirPage {
    DirPage {
        entries: p.entries.into_iter().map(info_from_pb).collect(),
        next_after: p.next_after,
    }
}

pub(crate) fn watch_batch_to_pb(events: Vec<WatchEvent>) -> pb::WatchBatch {
    let kind = |k| match k {
        WatchKind::Create => pb::WatchKind::Create,
        WatchKind::Modify => pb::WatchKind::Modify,
        WatchKind::Delete => pb::WatchKind::Delete,
        WatchKind::Rename => pb::WatchKind::Rename,
        WatchKind::Overflow => pb::WatchKind::Overflow,
    };
    pb::WatchBatch {
        events: events
            .into_iter()
            .map(|e| pb::WatchEvent {
                kind: kind(e.kind) as i32,
                path: e.path,
                from: e.from,
                dir: e.dir,
            })
            .collect(),
    }
}

/// A batch's events; one of a kind this side does not know (a newer agent's) is left out.
pub(crate) fn watch_batch_from_pb(b: pb::WatchBatch) -> Vec<WatchEvent> {
    b.events
        .into_iter()
        .filter_map(|e| {
            let kind = match pb::WatchKind::try_from(e.kind).ok()? {
                pb::WatchKind::Create => WatchKind::Create,
                pb::WatchKind::Modify => WatchKind::Modify,
                pb::WatchKind::Delete => WatchKind::Delete,
                pb::WatchKind::Rename => WatchKind::Rename,
                pb::WatchKind::Overflow => WatchKind::Overflow,
                pb::WatchKind::Unspecified => return None,
            };
            Some(WatchEvent {
                kind,
                path: e.path,
                from: e.from,
                dir: e.dir,
            })
        })
        .collect()
}

pub(crate) fn template_to_pb(t: TemplateView) -> pb::Template {
    pb::Template {
        name: t.name,
        description: t.description,
        shape: Some(shape_to_pb(t.shape)),
        disk_mb: t.disk_mb,
        bake_ms: t.bake_ms,
    }
}

pub(crate) fn template_from_pb(t: pb::Template) -> HostResult<TemplateView> {
    Ok(TemplateView {
        shape: shape_from_pb(t.shape)?,
        name: t.name,
        description: t.description,
        disk_mb: t.disk_mb,
        bake_ms: t.bake_ms,
    })
}

pub(crate) fn check_to_pb(r: Result<SpecSummary, SpecRefused>) -> pb::CheckSpecReply {
    use pb::check_spec_reply::Reply;
    use pb::spec_refused::Refused;
    let reply = match r {
        Ok(s) => Reply::Summary(pb::SpecSummary {
            name: s.name,
            description: s.description,
            shape: Some(shape_to_pb(s.shape)),
            disk_mb: s.disk_mb,
        }),
        Err(e) => Reply::Refused(pb::SpecRefused {
            refused: Some(match e {
                SpecRefused::Parse(m) => Refused::Parse(m),
                SpecRefused::Unsafe(f) => Refused::UnsafeField(f.to_owned()),
                SpecRefused::Invalid(m) => Refused::Invalid(m),
            }),
        }),
    };
    pb::CheckSpecReply { reply: Some(reply) }
}

pub(crate) fn check_from_pb(r: pb::CheckSpecReply) -> Result<SpecSummary, SpecRefused> {
    use pb::check_spec_reply::Reply;
    use pb::spec_refused::Refused;
    let malformed = || SpecRefused::Invalid("the agent's answer was malformed".into());
    match r.reply.ok_or_else(malformed)? {
        Reply::Summary(s) => Ok(SpecSummary {
            shape: shape_from_pb(s.shape).map_err(|_| malformed())?,
            name: s.name,
            description: s.description,
            disk_mb: s.disk_mb,
        }),
        Reply::Refused(r) => Err(match r.refused.ok_or_else(malformed)? {
            Refused::Parse(m) => SpecRefused::Parse(m),
            Refused::UnsafeField(f) => SpecRefused::Unsafe(intern(&f)),
            Refused::Invalid(m) => SpecRefused::Invalid(m),
        }),
    }
}

pub(crate) fn source_to_pb(s: BuildSource) -> pb::build_image_request::Source {
    use pb::build_image_request::Source;
    match s {
        BuildSource::Spec(text) => Source::Spec(text),
        BuildSource::Oci { tarball, disk_mb } => Source::Oci(pb::OciSource {
            tarball: tarball.to_string_lossy().into_owned(),
            disk_mb,
            stored_manifest: String::new(),
            stored_ws: String::new(),
        }),
        BuildSource::OciStored {
            ws,
            manifest,
            disk_mb,
        } => Source::Oci(pb::OciSource {
            tarball: String::new(),
            disk_mb,
            stored_manifest: serde_json::to_string(&manifest).unwrap_or_default(),
            stored_ws: ws,
        }),
    }
}

pub(crate) fn source_from_pb(
    s: Option<pb::build_image_request::Source>,
) -> HostResult<BuildSource> {
    use pb::build_image_request::Source;
    Ok(match s.ok_or_else(|| bad("no build source"))? {
        Source::Spec(text) => BuildSource::Spec(text),
        Source::Oci(o) if !o.stored_manifest.is_empty() => BuildSource::OciStored {
            manifest: serde_json::from_str(&o.stored_manifest)
                .map_err(|e| bad(&format!("stored OCI tarball's manifest: {e}")))?,
            ws: o.stored_ws,
            disk_mb: o.disk_mb,
        },
        Source::Oci(o) => BuildSource::Oci {
            tarball: PathBuf::from(o.tarball),
            disk_mb: o.disk_mb,
        },
    })
}

pub(crate) fn built_to_pb(b: BuiltImage) -> pb::BuiltImage {
    pb::BuiltImage {
        image: b.image.to_string_lossy().into_owned(),
        shape: b.shape.map(shape_to_pb),
        disk_mb: b.disk_mb,
        env: b.env,
    }
}

pub(crate) fn built_from_pb(b: pb::BuiltImage) -> HostResult<BuiltImage> {
    Ok(BuiltImage {
        image: PathBuf::from(b.image),
        shape: match b.shape {
            Some(s) => Some(shape_from_pb(Some(s))?),
            None => None,
        },
        disk_mb: b.disk_mb,
        env: b.env,
    })
}

pub(crate) fn origin_to_pb(o: &Origin) -> pb::Origin {
    pb::Origin {
        host_id: o.host_id.clone(),
        address: o.address.clone(),
    }
}

pub(crate) fn origin_from_pb(o: pb::Origin) -> Origin {
    Origin {
        host_id: o.host_id,
        address: o.address,
    }
}

pub(crate) fn piece_to_pb(p: ImagePiece) -> pb::ImagePiece {
    use pb::image_piece::Piece;
    let piece = match p {
        ImagePiece::Header { record, files } => Piece::Header(pb::ImageHeader {
            record,
            files: files
                .into_iter()
                .map(|(name, length)| pb::SentFile { name, length })
                .collect(),
        }),
        ImagePiece::Data { file, offset, data } => Piece::Data(pb::FileData { file, offset, data }),
    };
    pb::ImagePiece { piece: Some(piece) }
}

pub(crate) fn piece_from_pb(p: pb::ImagePiece) -> HostResult<ImagePiece> {
    use pb::image_piece::Piece;
    Ok(
        match p
            .piece
            .ok_or_else(|| bad("a snapshot piece with nothing in it"))?
        {
            Piece::Header(h) => ImagePiece::Header {
                record: h.record,
                files: h.files.into_iter().map(|f| (f.name, f.length)).collect(),
            },
            Piece::Data(d) => ImagePiece::Data {
                file: d.file,
                offset: d.offset,
                data: d.data,
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_specs_keep_every_field() {
        let mut spec = ExecSpec {
            argv: vec!["ls".into(), "-l".into()],
            shell: "ls -l".into(),
            cwd: "/work".into(),
            user: "1000".into(),
            stdin: Some(b"in\0put".to_vec()),
            timeout: Duration::new(3, 250_000_001),
            max_output_bytes: 1 << 20,
            ..ExecSpec::default()
        };
        spec.env.insert("A".into(), "b c".into());
        let back = spec_from_pb(Some(spec_to_pb(spec.clone())));
        assert_eq!(format!("{spec:?}"), format!("{back:?}"));
        // No stdin stays no stdin (not an empty one).
        let back = spec_from_pb(Some(spec_to_pb(ExecSpec::default())));
        assert_eq!(back.stdin, None);
        assert_eq!(back.timeout, Duration::ZERO);
    }

    #[test]
    fn views_keep_every_field() {
        let shape = Shape {
            vcpus: 2,
            memory_mib: 512,
            disk: Some(DiskLimits {
                bytes_per_sec: 10 << 20,
                iops: 500,
            }),
        };
        for state in [
            VmState::Running,
            VmState::Paused,
            VmState::Hibernated,
            VmState::Exited,
        ] {
            let vm = VmView {
                id: "sb".into(),
                state,
                template: "base".into(),
                shape,
                ready_ms: 12,
                image_bytes: 34,
            };
            let back = vm_from_pb(vm_to_pb(vm.clone())).unwrap();
            assert_eq!(format!("{vm:?}"), format!("{back:?}"));
        }
        let no_disk = Shape {
            disk: None,
            ..shape
        };
        assert_eq!(shape_from_pb(Some(shape_to_pb(no_disk))).unwrap(), no_disk);

        let stats = VmStats {
            pid: 7,
            rss_bytes: 1,
            pss_bytes: 2,
            cpu_time: Duration::new(5, 6),
        };
        let back = stats_from_pb(stats_to_pb(stats));
        assert_eq!(format!("{stats:?}"), format!("{back:?}"));

        let chunk = LogChunk {
            data: Bytes::from_static(b"boot"),
            next: Some(LogPos { file: 9, offset: 4 }),
            restarted: true,
        };
        let back = chunk_from_pb(chunk_to_pb(chunk.clone()));
        assert_eq!(format!("{chunk:?}"), format!("{back:?}"));

        let mount = VolumeMount {
            volume_id: "v".into(),
            path: "/data".into(),
            read_only: true,
            holder: Some(VolumeHolder {
                sandbox_id: "sb".into(),
                path: "/mnt".into(),
            }),
            owner: Some("1000:1000".into()),
        };
        assert_eq!(mount_from_pb(mount_to_pb(mount.clone())), mount);
        let disk = DiskRequest {
            mbps: Some(0),
            iops: None,
        };
        assert_eq!(disk_from_pb(Some(disk_to_pb(disk))), disk);

        for kind in [
            FileKind::File,
            FileKind::Dir,
            FileKind::Symlink,
            FileKind::Other,
        ] {
            let info = FileInfo {
                name: "l".into(),
                path: "/l".into(),
                kind,
                size: 3,
                mode: 0o755,
                mtime_ms: -1,
                symlink_target: Some("/x".into()),
            };
            let back = info_from_pb(info_to_pb(info.clone()));
            assert_eq!(format!("{info:?}"), format!("{back:?}"));
        }
    }

    #[test]
    fn spec_checks_keep_their_refusals() {
        for refused in [
            SpecRefused::Parse("line 1".into()),
            SpecRefused::Unsafe("files.source"),
            SpecRefused::Invalid("no name".into()),
        ] {
            let want = format!("{refused:?}");
            let back = check_from_pb(check_to_pb(Err(refused))).unwrap_err();
            assert_eq!(want, format!("{back:?}"));
        }
    }

    #[test]
    fn exec_events_keep_every_field() {
        for e in [
            ExecEvent::Stdout(Bytes::from_static(b"o")),
            ExecEvent::Stderr(Bytes::from_static(b"e")),
            ExecEvent::Exit {
                exit_code: -9,
                timed_out: true,
                truncated: true,
                duration_ms: 77,
            },
        ] {
            assert_eq!(event_from_pb(event_to_pb(e.clone())).unwrap(), e);
        }
    }
}
