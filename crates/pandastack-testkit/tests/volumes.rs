//! Volume slots with real guests: a template baked with two slots, volumes (ext4 files on the
//! host) bound at restore, mounted in the guest, and carried through destroy, read-only
//! binding, hibernate/wake, snapshot, fork and a full disk.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pandastack_qemu::QemuVm;
use pandastack_runtime::{
    create_volume_file, CreateError, MountError, Sandbox, Template, VolumeDisk,
};
use pandastack_testkit::{exec, exec_as, runtime, within, RuntimeGuard};

const STEP: Duration = Duration::from_secs(120);
/// The unprivileged user the tests write volumes as (the `minimal` image has no named user).
const USER: &str = "1000";
const OWNER: &str = "1000:1000";

async fn bake_two_slots(rt: &RuntimeGuard, name: &str) -> Template {
    pandastack_testkit::bake_with_slots(rt, name, 2).await
}

/// A new ext4 volume of `mib` MiB in the test's data directory.
fn volume(rt: &RuntimeGuard, name: &str, mib: u64) -> PathBuf {
    let path = rt.dir.path().join(name);
    create_volume_file(&path, mib << 20).expect("create volume");
    path
}

fn rw(path: &Path) -> Option<VolumeDisk> {
    Some(VolumeDisk {
        path: path.to_owned(),
        read_only: false,
    })
}

fn ro(path: &Path) -> Option<VolumeDisk> {
    Some(VolumeDisk {
        path: path.to_owned(),
        read_only: true,
    })
}

/// Shell snippet setting `$dev` to the guest device of volume slot `slot`.
fn find_dev(slot: usize) -> String {
    format!(
        "dev=; for d in /sys/block/vd*; do [ \"$(cat $d/serial)\" = pandastack-vol{slot} ] && dev=/dev/${{d##*/}}; done; [ -n \"$dev\" ] || exit 9"
    )
}

/// The size in 512-byte sectors the guest sees for slot `slot`'s disk, once it settles (the
/// guest handles a size change in the background).
async fn sectors(sb: &Sandbox<QemuVm>, slot: usize, expect: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = exec(
            &sb.agent,
            &format!("{}; cat /sys/block/${{dev#/dev/}}/size", find_dev(slot)),
        )
        .await;
        assert_eq!(out.exit_code, 0, "slot {slot}: {out:?}");
        let n: u64 = out.stdout.trim().parse().unwrap();
        if n == expect || Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn mount(rt: &RuntimeGuard, sb: &Sandbox<QemuVm>, slot: usize, path: &str) {
    within(STEP, "mount", rt.mount_volume(sb, slot, path, Some(OWNER)))
        .await
        .unwrap_or_else(|e| panic!("mount slot {slot} at {path}: {e:#}"));
}

/// `cmd` as the unprivileged user; its stdout, and fails the test unless it exits 0.
async fn user_ok(sb: &Sandbox<QemuVm>, cmd: &str) -> String {
    let out = exec_as(&sb.agent, USER, cmd).await;
    assert_eq!(out.exit_code, 0, "{}: {cmd}: {out:?}", sb.id);
    out.stdout
}

/// `e2fsck -fn` of a volume on the host (no VM may have it open): Ok when clean.
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
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A file of the volume read on the host with `debugfs` (no VM may have it open).
fn host_cat(volume: &Path, file: &str) -> String {
    let out = std::process::Command::new("debugfs")
        .args(["-R", &format!("cat {file}")])
        .arg(volume)
        .output()
        .expect("run debugfs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sha256(path: &Path) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(std::fs::read(path).unwrap()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_volume_outlives_its_sandbox_and_an_unbound_slot_is_empty() {
    let rt = runtime().await;
    let t = bake_two_slots(&rt, "vols").await;
    let vol = volume(&rt, "data.ext4", 64);

    // Nothing bound: both slots are disks of size 0 (what the bake saw).
    let plain = within(STEP, "create", rt.create(&t, "plain"))
        .await
        .unwrap();
    assert_eq!(sectors(&plain, 0, 0).await, 0);
    assert_eq!(sectors(&plain, 1, 0).await, 0);
    assert!(matches!(
        rt.mount_volume(&plain, 0, "/data", None).await,
        Err(MountError::Unbound(0))
    ));
    rt.destroy(plain).await.unwrap();

    let t0 = Instant::now();
    let sb = within(
        STEP,
        "create with a volume",
        rt.create_with_volumes(&t, "first", &[rw(&vol)]),
    )
    .await
    .unwrap();
    eprintln!("create with a volume bound: {:?}", t0.elapsed());
    // The guest sees the volume's real size in slot 0 and still nothing in slot 1.
    assert_eq!(sectors(&sb, 0, (64 << 20) / 512).await, (64 << 20) / 512);
    assert_eq!(sectors(&sb, 1, 0).await, 0);
    let out = exec(
        &sb.agent,
        &format!("{}; head -c 4096 $dev | wc -c", find_dev(1)),
    )
    .await;
    assert_eq!(
        out.stdout.trim(),
        "0",
        "unbound slot reads nothing: {out:?}"
    );

    mount(&rt, &sb, 0, "/data").await;
    assert_eq!(
        user_ok(
            &sb,
            "echo kept > /data/note && sync && stat -c %u /data/note"
        )
        .await,
        "1000\n"
    );
    rt.destroy(sb).await.unwrap();
    assert!(vol.is_file(), "destroy removed the volume");

    // Another sandbox, the same volume: the file is there.
    let sb = within(
        STEP,
        "create again",
        rt.create_with_volumes(&t, "second", &[rw(&vol)]),
    )
    .await
    .unwrap();
    mount(&rt, &sb, 0, "/home/work").await;
    assert_eq!(user_ok(&sb, "cat /home/work/note").await, "kept\n");
    assert!(matches!(
        rt.mount_volume(&sb, 1, "/other", None).await,
        Err(MountError::Unbound(1))
    ));
    assert!(matches!(
        rt.mount_volume(&sb, 0, "relative", None).await,
        Err(MountError::InvalidPath(_))
    ));
    rt.destroy(sb).await.unwrap();
    fsck(&vol).unwrap();
    assert_eq!(host_cat(&vol, "/note"), "kept\n");

    // Bad bindings fail before any VM starts and leave nothing behind.
    let missing = rt.dir.path().join("missing.ext4");
    assert!(matches!(
        rt.create_with_volumes(&t, "bad", &[rw(&missing)]).await,
        Err(CreateError::Volume { slot: 0, .. })
    ));
    assert!(matches!(
        rt.create_with_volumes(&t, "bad", &[None, None, rw(&vol)])
            .await,
        Err(CreateError::TooManyVolumes { given: 3, slots: 2 })
    ));
    assert!(!rt.data().sandbox("bad").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_freshly_bound_slot_shows_the_files_bytes_not_the_bakes() {
    let rt = runtime().await;
    let t = bake_two_slots(&rt, "fresh").await;
    // Not a file system: known bytes, read back raw through the guest's block device.
    let raw = rt.dir.path().join("raw.img");
    let mut bytes = vec![0u8; 4 << 20];
    rand::fill(&mut bytes[..]);
    std::fs::write(&raw, &bytes).unwrap();
    let want = sha256(&raw);

    // A warm VM (placeholders bound) is not used for a create with volumes.
    within(STEP, "fill pool", rt.fill_pool(&t, 1))
        .await
        .unwrap();
    let sb = within(
        STEP,
        "create",
        rt.create_with_volumes(&t, "fresh", &[None, rw(&raw)]),
    )
    .await
    .unwrap();
    assert_eq!(
        rt.pool_size(&t),
        1,
        "a create with volumes took the warm VM"
    );
    assert_eq!(sectors(&sb, 1, (4 << 20) / 512).await, (4 << 20) / 512);
    let out = exec(
        &sb.agent,
        &format!("{}; sha256sum < $dev | cut -d' ' -f1", find_dev(1)),
    )
    .await;
    assert_eq!(out.stdout.trim(), want, "guest read: {out:?}");
    // The last sector too (where a partition scan would have looked).
    let out = exec(
        &sb.agent,
        &format!(
            "{}; dd if=$dev bs=512 skip=8191 count=1 2>/dev/null | od -An -tx1 | tr -d ' \\n'",
            find_dev(1)
        ),
    )
    .await;
    assert_eq!(out.stdout, hex(&bytes[bytes.len() - 512..]));
    rt.destroy(sb).await.unwrap();
    assert_eq!(sha256(&raw), want, "reading changed the file");
    rt.drain_pool().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_volume_bound_read_only_refuses_writes() {
    let rt = runtime().await;
    let t = bake_two_slots(&rt, "ro").await;
    let vol = volume(&rt, "ro.ext4", 32);
    let sb = within(
        STEP,
        "create",
        rt.create_with_volumes(&t, "writer", &[rw(&vol)]),
    )
    .await
    .unwrap();
    mount(&rt, &sb, 0, "/data").await;
    user_ok(&sb, "echo before > /data/note && sync").await;
    rt.destroy(sb).await.unwrap();
    let before = sha256(&vol);

    let sb = within(
        STEP,
        "create read-only",
        rt.create_with_volumes(&t, "reader", &[None, ro(&vol)]),
    )
    .await
    .unwrap();
    assert_eq!(sectors(&sb, 1, (32 << 20) / 512).await, (32 << 20) / 512);
    mount(&rt, &sb, 1, "/data").await;
    assert_eq!(user_ok(&sb, "cat /data/note").await, "before\n");
    // Root cannot write through the file system…
    let out = exec(&sb.agent, "echo x > /data/new").await;
    assert_ne!(out.exit_code, 0);
    assert!(out.stderr.contains("Read-only file system"), "{out:?}");
    let out = exec(&sb.agent, "mount -o remount,rw /data").await;
    assert_ne!(out.exit_code, 0, "remount read-write: {out:?}");
    let out = exec(&sb.agent, "echo x > /data/new").await;
    assert!(out.stderr.contains("Read-only file system"), "{out:?}");
    // …nor to the device itself.
    let out = exec(
        &sb.agent,
        &format!(
            "{}; dd if=/dev/zero of=$dev bs=4096 count=1 oflag=direct conv=notrunc",
            find_dev(1)
        ),
    )
    .await;
    assert_ne!(out.exit_code, 0, "raw write to a read-only disk: {out:?}");
    // The VM survives the refused writes.
    assert_eq!(exec(&sb.agent, "echo up").await.stdout, "up\n");
    // Read-only bindings of one file may be many at once (a read-write one would be refused).
    let second = within(
        STEP,
        "second reader",
        rt.create_with_volumes(&t, "reader-2", &[ro(&vol)]),
    )
    .await
    .unwrap();
    mount(&rt, &second, 0, "/data").await;
    assert_eq!(user_ok(&second, "cat /data/note").await, "before\n");
    let err = within(
        STEP,
        "writer while read",
        rt.create_with_volumes(&t, "writer-2", &[rw(&vol)]),
    )
    .await
    .err()
    .expect("a read-write binding of a file bound read-only elsewhere");
    assert!(matches!(err, CreateError::Vm(_)), "{err:#}");
    rt.destroy(second).await.unwrap();
    rt.destroy(sb).await.unwrap();
    assert_eq!(sha256(&vol), before, "a read-only volume changed");
    fsck(&vol).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn hibernate_and_wake_keep_the_volume_mounted() {
    let rt = runtime().await;
    let t = bake_two_slots(&rt, "hib").await;
    let vol = volume(&rt, "hib.ext4", 32);
    let sb = within(
        STEP,
        "create",
        rt.create_with_volumes(&t, "sleeper", &[rw(&vol)]),
    )
    .await
    .unwrap();
    mount(&rt, &sb, 0, "/data").await;
    user_ok(&sb, "echo one > /data/log").await;
    let h = match within(STEP, "hibernate", rt.hibernate(sb)).await {
        Ok(h) => h,
        Err((e, _)) => panic!("hibernate: {e:#}"),
    };
    assert_eq!(h.info.volumes, vec![rw(&vol), None], "binding kept");
    assert!(h.dir.join("slot1.img").is_file(), "placeholder kept");
    let sb = match within(STEP, "wake", rt.wake(h)).await {
        Ok(sb) => sb,
        Err((e, _)) => panic!("wake: {e:#}"),
    };
    // Still mounted (nothing mounted it again) with its content, and writable.
    assert_eq!(
        exec(&sb.agent, "mountpoint -q /data && echo mounted")
            .await
            .stdout,
        "mounted\n"
    );
    assert_eq!(
        user_ok(&sb, "echo two >> /data/log && sync && cat /data/log").await,
        "one\ntwo\n"
    );
    assert_eq!(sectors(&sb, 0, (32 << 20) / 512).await, (32 << 20) / 512);
    rt.destroy(sb).await.unwrap();
    fsck(&vol).unwrap();
    assert_eq!(host_cat(&vol, "/log"), "one\ntwo\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshots_restore_a_copy_and_fork_children_write_apart() {
    let rt = runtime().await;
    let t = bake_two_slots(&rt, "snap").await;
    let vol = volume(&rt, "live.ext4", 32);
    let parent = within(
        STEP,
        "create",
        rt.create_with_volumes(&t, "parent", &[rw(&vol)]),
    )
    .await
    .unwrap();
    mount(&rt, &parent, 0, "/data").await;
    user_ok(&parent, "echo v1 > /data/note").await;

    let snap = within(STEP, "snapshot", rt.snapshot(&parent, "snap-1"))
        .await
        .unwrap();
    assert_eq!(snap.volumes.len(), 2);
    assert!(snap.volumes[0].is_some() && snap.volumes[1].is_none());
    assert!(snap.volume(0).is_file());
    user_ok(&parent, "echo v2 > /data/note && sync").await;

    // The snapshot's content, in a copy of its own: writes there never reach the live volume.
    let late = within(STEP, "restore", rt.create_from_snapshot(&snap, "late"))
        .await
        .unwrap();
    let copy = late.volume(0).expect("slot 0 bound").path.clone();
    assert!(copy.starts_with(&late.dir), "restored onto {copy:?}");
    assert_eq!(user_ok(&late, "cat /data/note").await, "v1\n");
    user_ok(&late, "echo late > /data/note && sync").await;
    assert_eq!(user_ok(&parent, "cat /data/note").await, "v2\n");
    // Slots bound in the snapshot keep their copy; unbound ones may be bound.
    assert!(matches!(
        rt.create_from_snapshot_with_volumes(&snap, "nope", &[rw(&vol)])
            .await,
        Err(CreateError::SlotInSnapshot(0))
    ));
    let extra = volume(&rt, "extra.ext4", 16);
    let both = within(
        STEP,
        "restore with a second volume",
        rt.create_from_snapshot_with_volumes(&snap, "both", &[None, rw(&extra)]),
    )
    .await
    .unwrap();
    assert_eq!(sectors(&both, 1, (16 << 20) / 512).await, (16 << 20) / 512);
    mount(&rt, &both, 1, "/extra").await;
    assert_eq!(
        user_ok(&both, "cat /data/note; touch /extra/ok && echo ok").await,
        "v1\nok\n"
    );

    // Fork: every child starts from the parent's volume, and their writes stay apart.
    let ids = vec!["child-a".to_owned(), "child-b".to_owned()];
    let fork = within(STEP, "fork", rt.fork(&parent, "snap-2", &ids))
        .await
        .expect("fork");
    let [a, b]: [Sandbox<QemuVm>; 2] = fork.children.try_into().ok().expect("two children");
    for child in [&a, &b] {
        assert_eq!(
            user_ok(child, "cat /data/note").await,
            "v2\n",
            "{}",
            child.id
        );
    }
    user_ok(&a, "echo a > /data/a-only && sync").await;
    user_ok(&b, "echo b > /data/note && sync").await;
    assert_eq!(
        user_ok(&a, "cat /data/note; ls /data").await,
        "v2\na-only\nlost+found\nnote\n"
    );
    assert_eq!(
        user_ok(&b, "ls /data; cat /data/note").await,
        "lost+found\nnote\nb\n"
    );
    assert_eq!(
        user_ok(&parent, "ls /data; cat /data/note").await,
        "lost+found\nnote\nv2\n"
    );

    for sb in [parent, late, both, a, b] {
        rt.destroy(sb).await.unwrap();
    }
    fsck(&vol).unwrap();
    assert_eq!(host_cat(&vol, "/note"), "v2\n", "the live volume");
    assert!(!copy.exists(), "a restored copy outlived its sandbox");
    rt.delete_snapshot("snap-1").unwrap();
    rt.delete_snapshot("snap-2").unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_volume_gives_enospc_and_stays_clean() {
    let rt = runtime().await;
    let t = bake_two_slots(&rt, "full").await;
    let vol = volume(&rt, "small.ext4", 8);
    let sb = within(
        STEP,
        "create",
        rt.create_with_volumes(&t, "filler", &[rw(&vol)]),
    )
    .await
    .unwrap();
    mount(&rt, &sb, 0, "/data").await;
    user_ok(&sb, "echo first > /data/first && sync").await;
    let out = exec_as(
        &sb.agent,
        USER,
        "dd if=/dev/zero of=/data/fill bs=1M count=32",
    )
    .await;
    assert_ne!(out.exit_code, 0, "{out:?}");
    assert!(out.stderr.contains("No space left on device"), "{out:?}");
    // Full, not broken: reads and deletes work, and freed space can be written again.
    assert_eq!(
        user_ok(
            &sb,
            "cat /data/first; rm /data/fill; echo again > /data/more && sync && cat /data/more"
        )
        .await,
        "first\nagain\n"
    );
    rt.destroy(sb).await.unwrap();
    fsck(&vol).unwrap_or_else(|e| panic!("volume not clean after ENOSPC: {e}"));
}
