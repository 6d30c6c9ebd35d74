//! Clones never write the memory file they share. Every clone maps the template's memory file
//! privately; a guest that frees memory reports it to the host (virtio-balloon free-page
//! reporting), and a file-backed RAM block must not turn that into a hole punched into the
//! *file*, which every other clone and every later restore reads.
//!
//! The overlap is made certain: the template holds two 48 MiB files with a known pattern in guest
//! RAM — one on tmpfs, one in the page cache of the disk — and a clone then frees exactly those
//! pages (deletes the tmpfs file, drops caches) and churns memory so that free-page reporting
//! covers them. Afterwards the template memory file is byte-for-byte, extent-for-extent and
//! timestamp-for-timestamp what it was, a clone that ran alongside still reads both patterns,
//! and a clone restored afterwards finds them too.
//!
//! The host turns free-page reporting off in clones (every report into a read-only mapping is
//! refused and only logged, see `sandboxes_of_a_template_report_nothing_into_it`), but a guest
//! owns its balloon driver and can bind it again: the read-only mapping, not the guest's
//! restraint, is what keeps the file intact. So the churner here is told to report (ON), as
//! such a guest would.

use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use pandastack_guest_proto::v1::{self, agent_client::AgentClient};
use pandastack_testkit::{agent, boot, exec, restore_clone, restore_clone_reporting, within};
use pandastack_vm::Vm;
use sha2::{Digest, Sha256};

/// Writes the pattern files (48 MiB each): `yes` output is non-zero everywhere, so a punched
/// hole (zeros) anywhere in them changes their hash.
const WRITE_PATTERNS: &str =
    "yes pandastack-template-memory-pattern | head -c 50331648 > /dev/shm/pattern \
    && yes pandastack-template-memory-pattern | head -c 50331648 > /root/pattern-disk \
    && sync && sha256sum /dev/shm/pattern /root/pattern-disk | cut -d' ' -f1";

/// Both patterns' hashes as the guest reads them now.
const HASH_PATTERNS: &str = "sha256sum /dev/shm/pattern /root/pattern-disk | cut -d' ' -f1";

/// Frees the pattern pages and churns memory: the freed ranges are reported to the host.
const CHURN: &str = "rm /dev/shm/pattern && sync && echo 3 > /proc/sys/vm/drop_caches && \
    for i in 1 2 3; do python3 -c \"b = b'x' * (96 << 20); del b\"; echo 3 > /proc/sys/vm/drop_caches; sleep 1; done; \
    sleep 5; grep -E '^(MemFree|Cached|Shmem):' /proc/meminfo";

/// What can be seen of a file from outside: content hash, allocated extents, timestamps.
#[derive(Debug, PartialEq, Eq)]
struct FileView {
    sha256: String,
    /// (offset, length) of every data extent (`SEEK_DATA`/`SEEK_HOLE`).
    extents: Vec<(u64, u64)>,
    mtime_ns: i128,
    ctime_ns: i128,
}

fn view(path: &Path) -> FileView {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let mut f = std::fs::File::open(path).expect("open memory file");
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).expect("read memory file");
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    let meta = f.metadata().expect("stat memory file");
    FileView {
        sha256: hex(&h.finalize()),
        extents: extents(&f, meta.len()),
        mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
        ctime_ns: meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn extents(f: &std::fs::File, len: u64) -> Vec<(u64, u64)> {
    use nix::unistd::{lseek, Whence};
    let mut out = Vec::new();
    let mut pos: i64 = 0;
    while (pos as u64) < len {
        let start = match lseek(f.as_fd(), pos, Whence::SeekData) {
            Ok(s) => s,
            // ENXIO: no data at or after `pos`.
            Err(nix::errno::Errno::ENXIO) => break,
            Err(e) => panic!("SEEK_DATA: {e}"),
        };
        let end = lseek(f.as_fd(), start, Whence::SeekHole).expect("SEEK_HOLE");
        out.push((start as u64, (end - start) as u64));
        pos = end;
    }
    out
}

fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb >> 10)
}

#[tokio::test(flavor = "multi_thread")]
async fn clones_never_modify_the_template_memory_file() {
    // Bake: boot, put the patterns into guest RAM, detach, snapshot with RAM in a shared file.
    let base = boot().await;
    let ch = agent(&base, Duration::from_secs(120)).await;
    let out = exec(&ch, WRITE_PATTERNS).await;
    assert_eq!(out.exit_code, 0, "write patterns: {}", out.stderr);
    let baked_hashes = out.stdout.clone();
    assert_eq!(baked_hashes.lines().count(), 2, "{baked_hashes:?}");
    AgentClient::new(ch.clone())
        .detach(v1::Empty {})
        .await
        .unwrap();
    drop(ch);
    base.agent_disconnected(Duration::from_secs(10))
        .await
        .unwrap();
    base.pause().await.unwrap();
    let state = base.dir.path().join("state");
    base.save_state(&state).await.unwrap();
    base.stop().await.unwrap();
    let mem = base.dir.path().join("mem");
    let disk = base.dir.path().join("rootfs.ext4");
    let before = view(&mem);
    eprintln!(
        "template memory: {} data extents, {} MiB allocated",
        before.extents.len(),
        before.extents.iter().map(|e| e.1).sum::<u64>() >> 20
    );

    // One clone runs alongside; another frees the pattern pages and churns memory.
    let (alongside, along_ch) = restore_clone(&mem, &state, &disk, "alongside").await;
    let (churner, churn_ch) =
        restore_clone_reporting(&mem, &state, &disk, "churner", v1::FreePageReporting::On).await;
    let t = Instant::now();
    let out = exec(&churn_ch, CHURN).await;
    assert_eq!(out.exit_code, 0, "churn: {}", out.stderr);
    eprintln!(
        "churned in {:?}; churner RSS {} MiB, alongside RSS {} MiB; guest: {}",
        t.elapsed(),
        rss_mib(churner.pid()),
        rss_mib(alongside.pid()),
        out.stdout.replace('\n', " ")
    );
    let log = std::fs::read_to_string(churner.dir.path().join("qemu.log")).unwrap_or_default();
    eprintln!(
        "churner qemu.log: {} lines, {} discards refused",
        log.lines().count(),
        refusals(&log)
    );
    // The churner did report: QEMU refused it (the guard below is not vacuous).
    assert!(refusals(&log) > 0, "the churner reported nothing: {log}");

    // The shared file is untouched.
    let after = view(&mem);
    assert_eq!(
        before.sha256, after.sha256,
        "template memory content changed"
    );
    assert_eq!(
        before.extents, after.extents,
        "template memory extents changed (holes punched)"
    );
    assert_eq!(
        before.mtime_ns, after.mtime_ns,
        "template memory mtime moved"
    );
    assert_eq!(
        before.ctime_ns, after.ctime_ns,
        "template memory ctime moved"
    );
    assert!(
        !log.contains("private file mappings is possibly dangerous"),
        "QEMU discarded RAM of a shared file: {log}"
    );

    // The clone that ran alongside still reads both patterns from its (shared) RAM.
    let out = exec(&along_ch, HASH_PATTERNS).await;
    assert_eq!(out.stdout, baked_hashes, "alongside clone: {}", out.stderr);
    // So does a clone restored now.
    let (_late, late_ch) = restore_clone(&mem, &state, &disk, "late").await;
    let out = exec(&late_ch, HASH_PATTERNS).await;
    assert_eq!(out.stdout, baked_hashes, "later clone: {}", out.stderr);
    // And the churner's own view is its own: the tmpfs file is gone only there.
    let out = exec(&along_ch, "test -e /dev/shm/pattern && echo present").await;
    assert_eq!(out.stdout, "present\n");
    drop(churner);
    drop(alongside);
}

/// Writes and deletes 32 MiB on the guest's disk and trims it (`discard=unmap` punches the freed
/// blocks out of the disk file the VM has open), then frees memory: what a guest can do to the
/// files behind its disk and RAM.
const DISCARD_EVERYTHING: &str = "yes trim | head -c 33554432 > /root/big && sync && rm /root/big && sync && \
    fstrim -v / && echo 3 > /proc/sys/vm/drop_caches && python3 -c \"b = b'x' * (64 << 20); del b\" && sleep 4";

/// The other files several VMs start from — the template's disk (each sandbox has a reflink of
/// it), a snapshot's device state, memory and disk (each fork child loads the state and gets a
/// reflink of the disk) — are not changed by what the VMs started from them do.
#[tokio::test(flavor = "multi_thread")]
async fn template_disk_and_snapshot_files_are_never_written_by_their_vms() {
    use pandastack_testkit::{bake, runtime};

    let rt = runtime().await;
    let t = bake(&rt, "shared").await;
    let template_files = [t.rootfs(), t.memory(), t.state()];
    let before: Vec<FileView> = template_files.iter().map(|p| view(p)).collect();

    let parent = within(Duration::from_secs(120), "create", rt.create(&t, "parent"))
        .await
        .unwrap();
    let out = exec(&parent.agent, DISCARD_EVERYTHING).await;
    assert_eq!(out.exit_code, 0, "parent: {} {}", out.stdout, out.stderr);
    eprintln!("parent: {}", out.stdout.trim());

    let ids = vec!["child-a".to_owned(), "child-b".to_owned()];
    let fork = within(
        Duration::from_secs(180),
        "fork",
        rt.fork(&parent, "snap", &ids),
    )
    .await
    .expect("fork");
    let snap = fork.snapshot.clone();
    let snapshot_files = [snap.state(), snap.rootfs()];
    let snap_before: Vec<FileView> = snapshot_files.iter().map(|p| view(p)).collect();
    for child in &fork.children {
        let out = exec(&child.agent, DISCARD_EVERYTHING).await;
        assert_eq!(out.exit_code, 0, "{}: {}", child.id, out.stderr);
    }
    let out = exec(&parent.agent, DISCARD_EVERYTHING).await;
    assert_eq!(out.exit_code, 0, "parent again: {}", out.stderr);

    for (path, was) in template_files.iter().zip(&before) {
        assert_eq!(&view(path), was, "{} changed", path.display());
    }
    for (path, was) in snapshot_files.iter().zip(&snap_before) {
        assert_eq!(&view(path), was, "{} changed", path.display());
    }
    for child in fork.children {
        rt.destroy(child).await.unwrap();
    }
    rt.destroy(parent).await.unwrap();
}

/// What QEMU writes to a VM's log for each discard it refuses on a read-only memory file.
const REFUSED: &str = "Discarding RAM with readonly files";

fn refusals(log: &str) -> usize {
    log.matches(REFUSED).count()
}

/// Allocates and frees memory in a loop for about 20 s, then waits out the guest's reporting
/// delay (2 s).
const ALLOCATE_AND_FREE: &str = "end=$(( $(date +%s) + 20 )); n=0; \
    while [ $(date +%s) -lt $end ]; do python3 -c \"b = b'x' * (64 << 20); del b\"; n=$((n+1)); sleep 1; done; \
    sleep 4; echo $n";

/// A sandbox maps its template's memory read-only, where QEMU refuses every discard: the
/// runtime turns its free-page reporting off, so a guest that allocates and frees memory adds
/// nothing to its QEMU log (it did 45–69 KiB a minute); templates are baked with it off, so a
/// clone has nothing to turn off. A clone told to turn it on churns alongside and shows that
/// the loop does make QEMU refuse discards. Woken from hibernation (anonymous RAM), the sandbox
/// reports again.
#[tokio::test(flavor = "multi_thread")]
async fn sandboxes_of_a_template_report_nothing_into_it() {
    use pandastack_testkit::{bake, runtime};

    let rt = runtime().await;
    let t = bake(&rt, "quiet").await;
    let sb = within(Duration::from_secs(120), "create", rt.create(&t, "quiet"))
        .await
        .unwrap();
    let (control, control_ch) = restore_clone_reporting(
        &t.memory(),
        &t.state(),
        &t.rootfs(),
        "control",
        v1::FreePageReporting::On,
    )
    .await;
    assert_balloons_bound(&sb.agent, 0, "sandbox").await;
    assert_balloons_bound(&control_ch, 1, "control").await;

    let logs = [sb.dir.join("qemu.log"), control.dir.path().join("qemu.log")];
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let before: Vec<String> = logs.iter().map(|p| read(p)).collect();
    let (a, b) = tokio::join!(
        exec(&sb.agent, ALLOCATE_AND_FREE),
        exec(&control_ch, ALLOCATE_AND_FREE)
    );
    assert_eq!(a.exit_code, 0, "sandbox: {}", a.stderr);
    assert_eq!(b.exit_code, 0, "control: {}", b.stderr);
    let after: Vec<String> = logs.iter().map(|p| read(p)).collect();
    eprintln!(
        "allocate/free rounds: sandbox {}, control {}; qemu.log growth: sandbox {} B ({} refusals), \
         control {} B ({} refusals); RSS: sandbox {} MiB, control {} MiB",
        a.stdout.trim(),
        b.stdout.trim(),
        after[0].len() - before[0].len(),
        refusals(&after[0]) - refusals(&before[0]),
        after[1].len() - before[1].len(),
        refusals(&after[1]) - refusals(&before[1]),
        rss_mib(sb.vm.pid()),
        rss_mib(control.pid()),
    );
    if let Some(line) = after[1].lines().find(|l| l.contains(REFUSED)) {
        eprintln!("control's refusal line: {line}");
    }
    assert!(
        refusals(&after[1]) > refusals(&before[1]),
        "the loop made no report in the control clone: {}",
        after[1]
    );
    assert_eq!(
        refusals(&after[0]),
        refusals(&before[0]),
        "the sandbox still reports into its read-only memory: {}",
        &after[0][before[0].len()..]
    );
    drop(control);

    // Hibernated, the sandbox's RAM goes into its state; woken, it is anonymous RAM of its
    // own, where discards give memory back: reporting is on again.
    let h = match within(Duration::from_secs(120), "hibernate", rt.hibernate(sb)).await {
        Ok(h) => h,
        Err((e, _)) => panic!("hibernate: {e:#}"),
    };
    let sb = match within(Duration::from_secs(120), "wake", rt.wake(h)).await {
        Ok(sb) => sb,
        Err((e, _)) => panic!("wake: {e:#}"),
    };
    assert_balloons_bound(&sb.agent, 1, "woken sandbox").await;
    rt.destroy(sb).await.unwrap();
}

/// Waits (10 s at most) until the guest's balloon driver holds `want` devices: the agent changes
/// the binding in the background after answering the post-restore hook.
async fn assert_balloons_bound(ch: &tonic::transport::Channel, want: usize, who: &str) {
    let count = "ls /sys/bus/virtio/drivers/virtio_balloon/ | grep -c '^virtio' || true";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = exec(ch, count).await.stdout;
        if got.trim() == want.to_string() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{who}: virtio_balloon holds {} devices, not {want}",
            got.trim()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
