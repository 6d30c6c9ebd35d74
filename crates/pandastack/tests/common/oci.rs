//! OCI image tarballs made here for template builds: `docker save` layouts with busybox.

use serde_json::json;

/// The host's static busybox (`scripts/setup-host.sh` installs `busybox-static`).
pub const BUSYBOX: &str = "/bin/busybox";

fn file(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8], mode: u32, uid: u64) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_size(data.len() as u64);
    h.set_mode(mode);
    h.set_uid(uid);
    h.set_gid(uid);
    h.set_mtime(1_700_000_000);
    b.append_data(&mut h, path, data).unwrap();
}

fn dir(b: &mut tar::Builder<Vec<u8>>, path: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_size(0);
    h.set_mode(0o755);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_700_000_000);
    b.append_data(&mut h, path, &[][..]).unwrap();
}

fn symlink(b: &mut tar::Builder<Vec<u8>>, path: &str, target: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    h.set_mode(0o777);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_700_000_000);
    b.append_link(&mut h, path, target).unwrap();
}

/// A `docker save` tarball: layer 1 is busybox with a shell and `/data/{keep,gone}`, layer 2
/// whites out `/data/gone` and adds `/data/marker` (owned by uid 1000, mode 0600) with `text`.
pub fn docker_save(text: &str) -> Vec<u8> {
    let mut l1 = tar::Builder::new(Vec::new());
    for d in ["bin", "etc", "data", "root"] {
        dir(&mut l1, d);
    }
    file(
        &mut l1,
        "bin/busybox",
        &std::fs::read(BUSYBOX).expect("busybox-static (scripts/setup-host.sh installs it)"),
        0o755,
        0,
    );
    for tool in ["sh", "cat", "ls", "stat", "echo", "env", "id"] {
        symlink(&mut l1, &format!("bin/{tool}"), "busybox");
    }
    file(
        &mut l1,
        "etc/passwd",
        b"root:x:0:0:root:/root:/bin/sh\n",
        0o644,
        0,
    );
    file(&mut l1, "etc/group", b"root:x:0:\n", 0o644, 0);
    file(&mut l1, "data/keep", b"from layer one\n", 0o644, 0);
    file(&mut l1, "data/gone", b"whited out\n", 0o644, 0);
    let l1 = l1.into_inner().unwrap();

    let mut l2 = tar::Builder::new(Vec::new());
    file(&mut l2, "data/.wh.gone", b"", 0o644, 0);
    file(&mut l2, "data/marker", text.as_bytes(), 0o600, 1000);
    let l2 = l2.into_inner().unwrap();

    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/bin", "GREETING=hello from the image"], "WorkingDir": "/data"},
        "rootfs": {"type": "layers", "diff_ids": []},
    });
    let manifest = json!([{
        "Config": "config.json",
        "RepoTags": ["test/busybox:latest"],
        "Layers": ["l1/layer.tar", "l2/layer.tar"],
    }]);
    let mut outer = tar::Builder::new(Vec::new());
    file(
        &mut outer,
        "manifest.json",
        manifest.to_string().as_bytes(),
        0o644,
        0,
    );
    file(
        &mut outer,
        "config.json",
        config.to_string().as_bytes(),
        0o644,
        0,
    );
    file(&mut outer, "l1/layer.tar", &l1, 0o644, 0);
    file(&mut outer, "l2/layer.tar", &l2, 0o644, 0);
    outer.into_inner().unwrap()
}
