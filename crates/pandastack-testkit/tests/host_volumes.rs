//! Durable volumes through the host boundary with real guests: the `Host` trait's volume calls
//! answered by `LocalHost` over the QEMU driver (a template baked with two slots). Volume
//! files, snapshots with the holder frozen, read-only copies, creates that fail before or after
//! the VM starts, grow, and upload to / download from a `file://` object store.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pandastack_agent::{AgentConfig, HostAgent, LocalHost, Objects};
use pandastack_host::{Host, HostError, VolumeHolder, VolumeMount, VolumeView};
use pandastack_qemu::QemuDriver;
use pandastack_testkit::{exec, exec_as, runtime, within, RuntimeGuard};
use tonic::transport::Channel;

const STEP: Duration = Duration::from_secs(120);
const USER: &str = "1000";
const OWNER: &str = "1000:1000";
const MIB: u64 = 1 << 20;

struct Stack {
    host: LocalHost<QemuDriver>,
    agent: Arc<HostAgent<QemuDriver>>,
    guard: RuntimeGuard,
}

impl Stack {
    fn data(&self) -> &Path {
        self.guard.dir.path()
    }

    fn volume_file(&self, id: &str) -> PathBuf {
        self.data().join("volumes").join(format!("{id}.img"))
    }

    fn snapshot_file(&self, id: &str) -> PathBuf {
        self.data()
            .join("volume-snapshots")
            .join(format!("{id}.img"))
    }

    async fn ch(&self, id: &str) -> Channel {
        self.agent.channel(id).await.expect("guest channel")
    }

    /// `cmd` as the unprivileged user in sandbox `id`; its stdout (fails unless exit 0).
    async fn user_ok(&self, id: &str, cmd: &str) -> String {
        let out = exec_as(&self.ch(id).await, USER, cmd).await;
        assert_eq!(out.exit_code, 0, "{id}: {cmd}: {out:?}");
        out.stdout
    }

    async fn create(&self, id: &str, mounts: Vec<VolumeMount>) -> Result<(), HostError> {
        within(
            STEP,
            "create with volumes",
            self.host.create_with_volumes("vols", id, mounts),
        )
        .await
        .map(|_| ())
    }

    /// Files and directories left in `sandboxes/` and the temporaries of `volumes/`.
    fn leftovers(&self) -> Vec<String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(self.data().join("sandboxes")).unwrap() {
            out.push(format!(
                "sandboxes/{}",
                e.unwrap().file_name().to_string_lossy()
            ));
        }
        for sub in ["volumes", "volume-snapshots"] {
            for e in std::fs::read_dir(self.data().join(sub)).unwrap() {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                if name.starts_with('.') {
                    out.push(format!("{sub}/{name}"));
                }
            }
        }
        out
    }
}

/// A runtime with a template `vols` baked with two volume slots, and the host agent over it.
async fn stack(objects: Option<Objects>) -> Stack {
    let guard = runtime().await;
    pandastack_testkit::bake_with_slots(&guard, "vols", 2).await;
    let cfg = AgentConfig {
        // No specs: the template above is used as baked.
        templates_dir: "/nonexistent".into(),
        guest_agent: "/nonexistent".into(),
        pool_size: 0,
        volume_slots: 2,
        objects,
    };
    let rt = guard.reopen().await;
    let (agent, _) = HostAgent::start(rt, cfg, |_| false).await.unwrap();
    let agent = Arc::new(agent);
    Stack {
        host: LocalHost(Arc::clone(&agent)),
        agent,
        guard,
    }
}

fn rw(volume: &str, path: &str) -> VolumeMount {
    VolumeMount {
        volume_id: volume.into(),
        path: path.into(),
        read_only: false,
        holder: None,
        owner: Some(OWNER.into()),
    }
}

fn ro(volume: &str, path: &str, holder: Option<(&str, &str)>) -> VolumeMount {
    VolumeMount {
        volume_id: volume.into(),
        path: path.into(),
        read_only: true,
        holder: holder.map(|(sandbox_id, path)| VolumeHolder {
            sandbox_id: sandbox_id.into(),
            path: path.into(),
        }),
        owner: None,
    }
}

/// `e2fsck -fn` of a volume file on the host: Ok when clean.
fn fsck(path: &Path) -> Result<(), String> {
    let out = std::process::Command::new("e2fsck")
        .arg("-fn")
        .arg(path)
        .output()
        .expect("run e2fsck");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "exit {:?}: {}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn sha256(path: &Path) -> String {
    use sha2::Digest;
    use std::io::Read;
    let mut f = std::fs::File::open(path).unwrap();
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 4 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Snapshot with the holder frozen while it keeps writing, a new volume from the snapshot in a
/// second sandbox, a paused holder copied without a freeze, and read-only copies that neither
/// write nor see the holder's later writes.
#[tokio::test(flavor = "multi_thread")]
async fn snapshots_and_read_only_copies_of_a_volume_in_use() {
    let s = stack(None).await;
    let v = within(
        STEP,
        "create volume",
        s.host.create_volume("data", 64 * MIB),
    )
    .await
    .unwrap();
    assert_eq!(v.size_bytes, 64 * MIB);
    assert!(v.allocated_bytes < 16 * MIB, "not sparse: {v:?}");
    assert_eq!(s.host.volume("data").await.unwrap(), v);
    assert_eq!(s.host.volume_ids().await.unwrap(), ["data"]);

    s.create("holder", vec![rw("data", "/data")]).await.unwrap();
    s.user_ok("holder", "echo hello > /data/hello && test -O /data")
        .await;
    // A writer that keeps appending whole lines while the snapshot is taken.
    s.user_ok(
        "holder",
        "setsid sh -c 'i=0; while :; do i=$((i+1)); echo line-$i >> /data/log; done' \
         </dev/null >/dev/null 2>&1 & echo $! > /tmp/writer.pid",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let holder = VolumeHolder {
        sandbox_id: "holder".into(),
        path: "/data".into(),
    };
    let snap = within(
        STEP,
        "snapshot volume",
        s.host
            .snapshot_volume("data", "snap1", Some(holder.clone())),
    )
    .await
    .unwrap();
    eprintln!("snapshot with the holder frozen: {snap:?}");
    assert!(snap.frozen);
    assert_eq!(snap.size_bytes, 64 * MIB);
    // The holder was thawed: it keeps writing.
    let lines = |out: String| out.trim().parse::<u64>().unwrap();
    let before = lines(s.user_ok("holder", "wc -l < /data/log").await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = lines(s.user_ok("holder", "wc -l < /data/log").await);
    assert!(after > before, "holder stuck frozen: {before} → {after}");
    s.user_ok("holder", "kill $(cat /tmp/writer.pid)").await;
    assert_eq!(s.host.volume_snapshot_ids().await.unwrap(), ["snap1"]);
    fsck(&s.snapshot_file("snap1")).expect("snapshot taken frozen is clean");

    // A new volume from the snapshot, larger: a second sandbox sees the content.
    let nv = within(
        STEP,
        "volume from snapshot",
        s.host.volume_from_snapshot("snap1", "copy", 96 * MIB),
    )
    .await
    .unwrap();
    assert_eq!(nv.size_bytes, 96 * MIB);
    fsck(&s.volume_file("copy")).expect("grown copy is clean");
    s.create("reader", vec![rw("copy", "/data")]).await.unwrap();
    assert_eq!(s.user_ok("reader", "cat /data/hello").await, "hello\n");
    // Every line the snapshot has is whole (writes were held at a syscall boundary).
    let bad = s
        .user_ok("reader", "grep -cv '^line-[0-9]*$' /data/log || true")
        .await;
    assert_eq!(bad.trim(), "0", "torn lines in the snapshot");
    let n = lines(s.user_ok("reader", "wc -l < /data/log").await);
    assert!(n > 0 && n <= after, "snapshot has {n} lines");
    // The file system has the new size in the guest.
    let kib = s
        .user_ok("reader", "df -k --output=size /data | tail -1")
        .await;
    assert!(kib.trim().parse::<u64>().unwrap() > 80 * 1024, "df: {kib}");
    s.host.destroy("reader").await.unwrap();

    // Read-only copy of the volume the running holder has mounted read-write.
    s.create("ro", vec![ro("data", "/ro", Some(("holder", "/data")))])
        .await
        .unwrap();
    assert_eq!(s.user_ok("ro", "cat /ro/hello").await, "hello\n");
    let w = exec(&s.ch("ro").await, "touch /ro/nope").await;
    assert_ne!(w.exit_code, 0, "read-only copy took a write: {w:?}");
    s.user_ok("holder", "echo later > /data/later").await;
    s.user_ok("holder", "sync").await;
    let seen = exec(&s.ch("ro").await, "cat /ro/later").await;
    assert_ne!(
        seen.exit_code, 0,
        "copy saw the holder's later write: {seen:?}"
    );
    // The copy is the sandbox's own: in its directory, gone with it.
    assert!(s.data().join("sandboxes/ro/vol0.img").is_file());
    s.host.destroy("ro").await.unwrap();

    // A paused holder is copied without a freeze (its vCPUs are stopped).
    s.host.pause("holder").await.unwrap();
    let paused = s
        .host
        .snapshot_volume("data", "snap2", Some(holder.clone()))
        .await
        .unwrap();
    assert!(!paused.frozen);
    s.create("ro2", vec![ro("data", "/ro", Some(("holder", "/data")))])
        .await
        .unwrap();
    assert_eq!(s.user_ok("ro2", "cat /ro/hello").await, "hello\n");
    s.host.resume("holder").await.unwrap();
    assert_eq!(
        s.host
            .snapshot_volume("data", "snap2", None)
            .await
            .unwrap_err()
            .to_string(),
        "volume"
    );

    s.host.destroy("ro2").await.unwrap();
    let out = exec(&s.ch("holder").await, "umount /data").await;
    assert_eq!(out.exit_code, 0, "{out:?}");
    s.host.destroy("holder").await.unwrap();
    assert_eq!(s.leftovers(), Vec::<String>::new());
    for id in ["snap1", "snap2"] {
        s.host.delete_volume_snapshot(id).await.unwrap();
        s.host.delete_volume_snapshot(id).await.unwrap();
    }
    assert!(s.host.volume_snapshot_ids().await.unwrap().is_empty());
    fsck(&s.volume_file("data")).expect("volume clean after its holder is gone");
}

/// Creates that fail leave nothing behind: too many volumes and missing volumes before any VM
/// starts, a failed mount after; then grow (and its refusals), ids that are not ids, and the
/// object store calls without a store.
#[tokio::test(flavor = "multi_thread")]
async fn failed_creates_leave_nothing_and_grow_keeps_data() {
    let s = stack(None).await;
    s.host.create_volume("v", 64 * MIB).await.unwrap();
    assert!(s.host.create_volume("v", 64 * MIB).await.is_err());
    for bad in ["../v", "", "a/b", ".pool"] {
        assert!(
            s.host.create_volume(bad, 64 * MIB).await.is_err(),
            "{bad:?}"
        );
        assert!(s.host.volume(bad).await.is_err(), "{bad:?}");
        assert!(s.host.delete_volume(bad).await.is_err(), "{bad:?}");
    }
    assert!(!s.data().join("v.img").exists());
    assert!(matches!(
        s.host.volume("nope").await,
        Err(HostError::VolumeNotFound(id)) if id == "nope"
    ));

    let t = Instant::now();
    let e = s
        .create("x", vec![rw("v", "/a"), rw("v", "/b"), rw("v", "/c")])
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            HostError::TooManyVolumes {
                slots: 2,
                wanted: 3,
                ..
            }
        ),
        "{e:?}"
    );
    let e = s
        .create("x", vec![rw("v", "/a"), ro("nope", "/b", None)])
        .await
        .unwrap_err();
    assert!(
        matches!(&e, HostError::VolumeNotFound(id) if id == "nope"),
        "{e:?}"
    );
    // No VM was started for either: far below a restore's time, nothing left.
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(s.leftovers(), Vec::<String>::new());

    // A mount point that is a file: the sandbox is destroyed, the volume is free again.
    let e = s
        .create("x", vec![ro("v", "/data", None), rw("v", "/etc/hostname")])
        .await
        .unwrap_err();
    eprintln!("failed mount: {}", pandastack_host::error_chain(&e));
    assert!(matches!(
        s.host.get("x").await,
        Err(HostError::SandboxNotFound(_))
    ));
    assert_eq!(s.leftovers(), Vec::<String>::new());

    s.create("w", vec![rw("v", "/data")]).await.unwrap();
    s.user_ok(
        "w",
        "head -c 5M /dev/urandom > /data/blob && sha256sum /data/blob > /data/blob.sum && sync",
    )
    .await;
    // Destroy is a power cut: what was synced is on the volume.
    s.host.destroy("w").await.unwrap();

    // Grow: refusals first, the volume untouched by them.
    let before = s.host.volume("v").await.unwrap();
    let e = s.host.grow_volume("v", 32 * MIB).await.unwrap_err();
    eprintln!("shrink: {}", pandastack_host::error_chain(&e));
    assert!(
        pandastack_host::error_chain(&e).contains("cannot shrink"),
        "{e:?}"
    );
    assert!(s.host.grow_volume("v", 100 * MIB + 512).await.is_err());
    assert!(matches!(
        s.host.grow_volume("nope", 128 * MIB).await,
        Err(HostError::VolumeNotFound(_))
    ));
    assert_eq!(s.host.volume("v").await.unwrap(), before);
    let t = Instant::now();
    let grown: VolumeView = s.host.grow_volume("v", 256 * MIB).await.unwrap();
    eprintln!("grow 64 → 256 MiB: {:?}", t.elapsed());
    assert_eq!(grown.size_bytes, 256 * MIB);
    assert_eq!(s.host.grow_volume("v", 256 * MIB).await.unwrap(), grown);
    fsck(&s.volume_file("v")).expect("grown volume is clean");
    s.create("w2", vec![rw("v", "/data")]).await.unwrap();
    s.user_ok("w2", "cd /data && sha256sum -c blob.sum").await;
    let kib = s.user_ok("w2", "df -k --output=size /data | tail -1").await;
    assert!(kib.trim().parse::<u64>().unwrap() > 200 * 1024, "df: {kib}");
    s.host.destroy("w2").await.unwrap();

    // No store configured: a clear error, no file.
    s.host.snapshot_volume("v", "s", None).await.unwrap();
    let e = s.host.upload_volume_snapshot("s", "ws1").await.unwrap_err();
    assert!(
        pandastack_host::error_chain(&e).contains("no object store"),
        "{e:?}"
    );
    assert!(matches!(
        s.host.volume_from_snapshot("nope", "n", 0).await,
        Err(HostError::VolumeSnapshotNotFound(_))
    ));
    s.host.delete_volume("v").await.unwrap();
    s.host.delete_volume("v").await.unwrap();
    assert!(s.host.volume_ids().await.unwrap().is_empty());
    assert_eq!(s.leftovers(), Vec::<String>::new());
}

/// Upload of a volume snapshot and a volume from its manifest: byte-identical; a second
/// upload after the guest changed 10 MiB sends about what changed. Also prints what 4 MiB
/// chunks would have sent for the same two snapshots.
#[tokio::test(flavor = "multi_thread")]
async fn upload_and_download_are_incremental_and_exact() {
    let store_dir = tempfile::tempdir().unwrap();
    let objects = Objects::open(&format!("file://{}", store_dir.path().display())).unwrap();
    let s = stack(Some(objects.clone())).await;
    s.host.create_volume("big", 1024 * MIB).await.unwrap();
    s.create("w", vec![rw("big", "/data")]).await.unwrap();
    s.user_ok("w", "head -c 40M /dev/urandom > /data/f && sync")
        .await;
    let holder = Some(VolumeHolder {
        sandbox_id: "w".into(),
        path: "/data".into(),
    });
    let s1 = s
        .host
        .snapshot_volume("big", "s1", holder.clone())
        .await
        .unwrap();
    assert!(s1.frozen);
    let t = Instant::now();
    let up1 = s.host.upload_volume_snapshot("s1", "ws1").await.unwrap();
    eprintln!(
        "first upload: {} of {} chunks, {} holes, {} MiB, {:?}",
        up1.uploaded_chunks,
        up1.chunks,
        up1.holes,
        up1.bytes_uploaded / MIB,
        t.elapsed()
    );
    assert_eq!(up1.manifest.chunk_size, pandastack_agent::VOLUME_CHUNK_SIZE);
    assert!(up1.bytes_uploaded >= 40 * MIB);

    // Change 10 MiB of the file in place, in the middle.
    s.user_ok(
        "w",
        "head -c 10M /dev/urandom | dd of=/data/f bs=1M seek=13 conv=notrunc status=none && sync",
    )
    .await;
    let s2 = s.host.snapshot_volume("big", "s2", holder).await.unwrap();
    assert!(s2.frozen);
    let up2 = s.host.upload_volume_snapshot("s2", "ws1").await.unwrap();
    let chunk = up2.manifest.chunk_size;
    eprintln!(
        "incremental upload after 10 MiB changed ({} KiB chunks): {} chunks, {} KiB",
        chunk >> 10,
        up2.uploaded_chunks,
        up2.bytes_uploaded >> 10
    );
    assert!(
        up2.bytes_uploaded <= 2 * 10 * MIB + chunk,
        "incremental upload sent {} bytes for 10 MiB changed",
        up2.bytes_uploaded
    );
    assert!(up2.bytes_uploaded >= 10 * MIB);

    // The same two snapshots in 4 MiB chunks, for comparison (another workspace).
    for (name, size) in [("4 MiB", 4 * MIB), ("256 KiB", 256 << 10)] {
        let ws = format!("cmp{}", size >> 10);
        let a = objects
            .upload_file(&ws, &s.snapshot_file("s1"), size)
            .await
            .unwrap();
        let b = objects
            .upload_file(&ws, &s.snapshot_file("s2"), size)
            .await
            .unwrap();
        eprintln!(
            "{name} chunks: first {} KiB, incremental {} chunks = {} KiB",
            a.stats.bytes_uploaded >> 10,
            b.stats.uploaded,
            b.stats.bytes_uploaded >> 10
        );
    }

    // Restore both: byte-identical to their snapshots; the second grown on the way.
    let t = Instant::now();
    let r1 = s
        .host
        .volume_from_manifest("ws1", &up1.manifest, "r1", 0)
        .await
        .unwrap();
    eprintln!("download: {:?}", t.elapsed());
    assert_eq!(r1.size_bytes, 1024 * MIB);
    assert_eq!(sha256(&s.volume_file("r1")), sha256(&s.snapshot_file("s1")));
    assert!(
        r1.allocated_bytes < 200 * MIB,
        "download not sparse: {r1:?}"
    );
    assert!(s
        .host
        .volume_from_manifest("ws1", &up1.manifest, "r1", 0)
        .await
        .is_err());
    let r2 = s
        .host
        .volume_from_manifest("ws1", &up2.manifest, "r2", 1536 * MIB)
        .await
        .unwrap();
    assert_eq!(r2.size_bytes, 1536 * MIB);
    fsck(&s.volume_file("r2")).expect("restored and grown volume is clean");
    // A manifest naming a chunk the workspace lacks: an error, no file.
    assert!(s
        .host
        .volume_from_manifest("other", &up1.manifest, "r3", 0)
        .await
        .is_err());
    assert!(!s.volume_file("r3").exists());

    // The restored volume mounts with the changed content.
    let sum_w = s.user_ok("w", "sha256sum < /data/f").await;
    s.host.destroy("w").await.unwrap();
    s.create("r", vec![rw("r2", "/data")]).await.unwrap();
    assert_eq!(s.user_ok("r", "sha256sum < /data/f").await, sum_w);
    s.host.destroy("r").await.unwrap();
    assert_eq!(s.leftovers(), Vec::<String>::new());
}
