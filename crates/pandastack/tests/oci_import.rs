//! OCI import end to end (as root, no VM): `docker save` and OCI-layout tarballs made here, with
//! owners, modes, links, whiteouts and hostile entries, imported with the built `pandastack`
//! binary as the confined unpacker; the ext4 image is read back with debugfs. Hostile entries
//! must be absent from the image and must have written nothing outside the work directory (they
//! aim at a world-writable directory outside it, so only the confinement stops them).

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use pandastack_image::{import_oci, OciError, OciImport, OciOptions};
use sha2::{Digest, Sha256};

const MTIME: u64 = 1_700_000_000;

enum Kind<'a> {
    Dir(u32),
    File(&'a [u8], u32),
    Symlink(&'a str),
    Hardlink(&'a str),
    Char,
}

/// One entry; the name goes into the header as is (the builder refuses `..` and absolute
/// names, which a hostile layer has).
fn entry(b: &mut tar::Builder<Vec<u8>>, name: &str, kind: Kind, uid: u64) {
    let mut h = tar::Header::new_gnu();
    h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
    let (t, data, mode): (_, &[u8], _) = match kind {
        Kind::Dir(mode) => (tar::EntryType::Directory, b"", mode),
        Kind::File(data, mode) => (tar::EntryType::Regular, data, mode),
        Kind::Symlink(target) => {
            h.set_link_name(target).unwrap();
            (tar::EntryType::Symlink, b"", 0o777)
        }
        Kind::Hardlink(target) => {
            h.set_link_name(target).unwrap();
            (tar::EntryType::Link, b"", 0o644)
        }
        Kind::Char => {
            h.set_device_major(1).unwrap();
            h.set_device_minor(3).unwrap();
            (tar::EntryType::Char, b"", 0o666)
        }
    };
    h.set_entry_type(t);
    h.set_size(data.len() as u64);
    h.set_mode(mode);
    h.set_uid(uid);
    h.set_gid(uid);
    h.set_mtime(MTIME);
    h.set_cksum();
    b.append(&h, data).unwrap();
}

/// Layer 1: the tree. Layer 2: whiteouts, an opaque directory, and hostile entries aimed at
/// `outside` (a world-writable directory of the host, outside the work directory).
fn layers(outside: &Path) -> (Vec<u8>, Vec<u8>) {
    let mut l1 = tar::Builder::new(Vec::new());
    for (d, uid) in [("bin", 0), ("home", 0), ("home/user", 1000), ("data", 0)] {
        entry(&mut l1, d, Kind::Dir(0o755), uid);
    }
    entry(&mut l1, "opq", Kind::Dir(0o755), 0);
    entry(
        &mut l1,
        "bin/tool",
        Kind::File(b"#!/bin/sh\necho tool\n", 0o755),
        1000,
    );
    entry(&mut l1, "bin/su", Kind::File(b"setuid\n", 0o4755), 0);
    entry(&mut l1, "bin/link", Kind::Symlink("tool"), 0);
    entry(&mut l1, "bin/hard", Kind::Hardlink("bin/tool"), 1000);
    entry(
        &mut l1,
        "home/user/notes",
        Kind::File(b"mine\n", 0o600),
        1000,
    );
    entry(&mut l1, "data/keep", Kind::File(b"keep\n", 0o644), 0);
    entry(&mut l1, "data/gone", Kind::File(b"gone\n", 0o644), 0);
    entry(&mut l1, "opq/old", Kind::File(b"old\n", 0o644), 0);
    // An owner the namespace does not map: host root could chown to it, the unpacker cannot,
    // so this entry is dropped (proof that it ran confined).
    entry(&mut l1, "bin/highuid", Kind::File(b"x\n", 0o644), 70_000);
    let l1 = l1.into_inner().unwrap();

    let out = outside.to_str().unwrap();
    let mut l2 = tar::Builder::new(Vec::new());
    entry(&mut l2, "data/.wh.gone", Kind::File(b"", 0o644), 0);
    entry(&mut l2, "opq/.wh..wh..opq", Kind::File(b"", 0o644), 0);
    entry(&mut l2, "opq/new", Kind::File(b"new\n", 0o644), 0);
    entry(&mut l2, "/abs/file", Kind::File(b"abs\n", 0o644), 0);
    // Hostile: each of these is dropped (7 here, 8 with layer 1's bin/highuid).
    entry(&mut l2, "../../escape", Kind::File(b"x\n", 0o644), 0);
    entry(&mut l2, "dev/evilnull", Kind::Char, 0);
    entry(&mut l2, "evil", Kind::Symlink("/etc"), 0);
    entry(&mut l2, "evil/pwned", Kind::File(b"x\n", 0o644), 0);
    entry(&mut l2, "out", Kind::Symlink(out), 0);
    entry(&mut l2, "out/pwned", Kind::File(b"x\n", 0o644), 0);
    entry(&mut l2, "out/.wh.victim", Kind::File(b"", 0o644), 0);
    entry(
        &mut l2,
        "hard-out",
        Kind::Hardlink("../../../etc/passwd"),
        0,
    );
    entry(&mut l2, "hard-abs", Kind::Hardlink("/etc/shadow"), 0);
    (l1, l2.into_inner().unwrap())
}
const DROPPED: u64 = 8;

const CONFIG: &str = r#"{"architecture":"amd64","os":"linux",
  "config":{"Env":["PATH=/usr/bin:/bin","GREETING=hello"],"WorkingDir":"/data"}}"#;

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn member(b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_mtime(MTIME);
    b.append_data(&mut h, name, data).unwrap();
}

/// `docker save` (classic layout): `manifest.json`, `<id>.json`, `<id>/layer.tar`; the second
/// layer is gzip-compressed and stored under a directory symlinked from another name.
fn docker_save(outside: &Path) -> Vec<u8> {
    let (l1, l2) = layers(outside);
    let mut b = tar::Builder::new(Vec::new());
    member(
        &mut b,
        "manifest.json",
        br#"[{"Config":"cfg.json","RepoTags":["test:latest"],"Layers":["aaa/layer.tar","ccc/layer.tar"]}]"#,
    );
    member(&mut b, "cfg.json", CONFIG.as_bytes());
    member(&mut b, "aaa/layer.tar", &l1);
    member(&mut b, "bbb/layer.tar", &gzip(&l2));
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    h.set_mode(0o777);
    h.set_mtime(MTIME);
    b.append_link(&mut h, "ccc/layer.tar", "../bbb/layer.tar")
        .unwrap();
    b.into_inner().unwrap()
}

/// An OCI image layout (gzip layers, real digests) through an image index with an arm64
/// manifest first, so the amd64 one must be picked; the outer archive gzip-compressed too.
/// `corrupt` changes a layer's bytes after its digest was taken.
fn oci_layout(outside: &Path, corrupt: bool) -> Vec<u8> {
    let (l1, l2) = layers(outside);
    let (l1, mut l2) = (gzip(&l1), gzip(&l2));
    let (d1, d2) = (sha256_hex(&l1), sha256_hex(&l2));
    if corrupt {
        l2 = gzip(b"something else");
    }
    let cfg = CONFIG.as_bytes();
    let dc = sha256_hex(cfg);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": format!("sha256:{dc}"), "size": cfg.len()},
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
             "digest": format!("sha256:{d1}"), "size": l1.len()},
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
             "digest": format!("sha256:{d2}"), "size": l2.len()},
        ],
    }))
    .unwrap();
    let dm = sha256_hex(&manifest);
    let arm = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "config": {"digest": format!("sha256:{dc}")},
        "layers": [{"digest": format!("sha256:{}", "0".repeat(64))}],
    }))
    .unwrap();
    let da = sha256_hex(&arm);
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json",
             "digest": format!("sha256:{da}"), "size": arm.len(),
             "platform": {"os": "linux", "architecture": "arm64"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json",
             "digest": format!("sha256:{dm}"), "size": manifest.len(),
             "platform": {"os": "linux", "architecture": "amd64"}},
        ],
    }))
    .unwrap();
    let di = sha256_hex(&index);
    let top = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json",
                       "digest": format!("sha256:{di}"), "size": index.len()}],
    }))
    .unwrap();
    let mut b = tar::Builder::new(Vec::new());
    member(&mut b, "oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#);
    member(&mut b, "index.json", &top);
    for (d, data) in [
        (&di, &index),
        (&dm, &manifest),
        (&da, &arm),
        (&dc, &cfg.to_vec()),
        (&d1, &l1),
        (&d2, &l2),
    ] {
        member(&mut b, &format!("blobs/sha256/{d}"), data);
    }
    gzip(&b.into_inner().unwrap())
}

/// A scratch directory outside /tmp (the unpacker sees the work directory as /tmp), reachable
/// by the unpacker's uid, with a world-writable `outside/` holding a file to aim at.
struct Scratch {
    _dir: tempfile::TempDir,
    base: PathBuf,
    outside: PathBuf,
}

fn scratch() -> Scratch {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let base = dir.path().to_owned();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let outside = base.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(outside.join("victim"), "victim\n").unwrap();
    Scratch {
        _dir: dir,
        base,
        outside,
    }
}

fn opts(disk_mb: Option<u32>) -> OciOptions {
    OciOptions {
        disk_mb,
        unpacker: env!("CARGO_BIN_EXE_pandastack").into(),
    }
}

fn import(tarball: &[u8], s: &Scratch, disk_mb: Option<u32>) -> Result<OciImport, OciError> {
    let tar = s.base.join("image.tar");
    std::fs::write(&tar, tarball).unwrap();
    let mut log = Vec::new();
    let r = import_oci(
        &tar,
        &s.base.join("work"),
        &opts(disk_mb),
        &mut |l: &str| log.push(l.to_owned()),
    );
    eprintln!("log:\n{}", log.join("\n"));
    std::fs::remove_file(&tar).unwrap();
    r
}

fn debugfs_bin() -> &'static str {
    ["/usr/sbin/debugfs", "/sbin/debugfs"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("debugfs (e2fsprogs)")
}

/// One debugfs request's output: stdout, then stderr ("File not found" goes there) without
/// debugfs's version banner.
fn debugfs(image: &Path, request: &str) -> String {
    let out = Command::new(debugfs_bin())
        .args(["-R", request])
        .arg(image)
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in String::from_utf8_lossy(&out.stderr).lines() {
        if !line.starts_with("debugfs ") {
            text.push_str(line);
            text.push('\n');
        }
    }
    text
}

/// The token after `label` in debugfs `stat` output.
fn field(stat: &str, label: &str) -> String {
    let mut w = stat.split_whitespace();
    w.find(|x| *x == label)
        .and_then(|_| w.next())
        .unwrap_or_else(|| panic!("no {label} in {stat}"))
        .to_owned()
}

fn exists(image: &Path, path: &str) -> bool {
    debugfs(image, &format!("stat {path}")).contains("Inode:")
}

/// Host paths the hostile entries aim at are untouched, and the work directory holds only the
/// image.
fn assert_host_untouched(s: &Scratch) {
    assert!(!Path::new("/etc/pwned").exists());
    assert!(!s.outside.join("pwned").exists());
    assert_eq!(
        std::fs::read_to_string(s.outside.join("victim")).unwrap(),
        "victim\n"
    );
    assert_eq!(std::fs::read_dir(&s.outside).unwrap().count(), 1);
    for p in [
        s.base.join("escape"),
        s.base.parent().unwrap().join("escape"),
    ] {
        assert!(!p.exists(), "{}", p.display());
    }
    let mut top: Vec<String> = std::fs::read_dir(&s.base)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, ["outside", "work"]);
}

fn check_image(r: &OciImport, s: &Scratch) {
    let image = &r.image;
    assert_eq!(image, &s.base.join("work/rootfs.ext4"));
    let md = std::fs::symlink_metadata(image).unwrap();
    assert!(md.is_file());
    assert_eq!((md.uid(), md.gid()), (0, 0));
    let left: Vec<_> = std::fs::read_dir(s.base.join("work"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["rootfs.ext4"], "only the image stays in work");

    assert_eq!(r.env, ["PATH=/usr/bin:/bin", "GREETING=hello"]);
    assert_eq!(r.working_dir.as_deref(), Some("/data"));
    assert_eq!(r.neutralised, DROPPED, "{r:?}");
    // 17 applied: layer 1's 13, then opq/new, /abs/file and the `evil` and `out` symlinks
    // (links may point anywhere; only writes through them are refused).
    assert_eq!(r.entries, 17, "{r:?}");

    // Owners and modes as the tarball says, not the unpacker's host ids.
    let tool = debugfs(image, "stat /bin/tool");
    assert_eq!(field(&tool, "Type:"), "regular", "{tool}");
    assert_eq!(field(&tool, "Mode:"), "0755", "{tool}");
    assert_eq!(field(&tool, "User:"), "1000", "{tool}");
    assert_eq!(field(&tool, "Group:"), "1000", "{tool}");
    assert_eq!(field(&tool, "Links:"), "2", "{tool}");
    assert_eq!(
        debugfs(image, "cat /bin/tool"),
        "#!/bin/sh\necho tool\n",
        "content"
    );
    let su = debugfs(image, "stat /bin/su");
    assert_eq!(field(&su, "Mode:"), "04755", "{su}");
    assert_eq!(field(&su, "User:"), "0", "{su}");
    let hard = debugfs(image, "stat /bin/hard");
    assert_eq!(field(&hard, "Inode:"), field(&tool, "Inode:"), "{hard}");
    let link = debugfs(image, "stat /bin/link");
    assert_eq!(field(&link, "Type:"), "symlink", "{link}");
    assert!(link.contains("\"tool\""), "{link}");
    let home = debugfs(image, "stat /home/user");
    assert_eq!(field(&home, "Type:"), "directory", "{home}");
    assert_eq!(field(&home, "User:"), "1000", "{home}");
    let notes = debugfs(image, "stat /home/user/notes");
    assert_eq!(field(&notes, "Mode:"), "0600", "{notes}");
    let root = debugfs(image, "stat /");
    assert_eq!(field(&root, "User:"), "0", "{root}");

    // Whiteouts applied, markers not in the image.
    assert!(exists(image, "/data/keep"));
    assert!(!exists(image, "/data/gone"));
    assert!(!exists(image, "/data/.wh.gone"));
    assert!(!exists(image, "/opq/old"));
    assert!(exists(image, "/opq/new"));
    assert!(!exists(image, "/opq/.wh..wh..opq"));
    // A leading slash is just stripped.
    assert_eq!(debugfs(image, "cat /abs/file"), "abs\n");

    // Hostile entries are nowhere.
    assert!(!exists(image, "/escape"));
    assert!(!exists(image, "/dev/evilnull"));
    assert!(!exists(image, "/hard-out"));
    assert!(!exists(image, "/hard-abs"));
    assert!(!exists(image, "/bin/highuid"));
    let evil = debugfs(image, "stat /evil");
    assert_eq!(field(&evil, "Type:"), "symlink", "{evil}");
    let listing = debugfs(image, "ls -l /");
    assert!(!listing.contains("escape"), "{listing}");
    assert!(!listing.contains("pwned"), "{listing}");
    assert_host_untouched(s);
}

#[test]
fn imports_a_docker_save_tarball_confined() {
    let s = scratch();
    let r = import(&docker_save(&s.outside), &s, None).unwrap();
    check_image(&r, &s);
}

#[test]
fn imports_an_oci_layout_through_an_image_index() {
    let s = scratch();
    let r = import(&oci_layout(&s.outside, false), &s, None).unwrap();
    check_image(&r, &s);
}

#[test]
fn bad_input_fails_clearly_and_leaves_nothing() {
    let s = scratch();
    let work = s.base.join("work");
    let garbage = b"not a tarball at all\n".repeat(100);
    let err = import(&garbage, &s, None).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("not an OCI or docker-save tarball: "),
        "{err}"
    );
    assert!(!work.exists(), "work is removed");

    // A tar without a manifest; and into an existing empty work directory, which stays.
    std::fs::create_dir(&work).unwrap();
    let mut b = tar::Builder::new(Vec::new());
    member(&mut b, "hello.txt", b"hi\n");
    let err = import(&b.into_inner().unwrap(), &s, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "not an OCI or docker-save tarball: no manifest.json or index.json"
    );
    assert_eq!(std::fs::read_dir(&work).unwrap().count(), 0);

    // A layer whose bytes do not match its digest.
    let err = import(&oci_layout(&s.outside, true), &s, None).unwrap_err();
    assert!(matches!(err, OciError::Digest { .. }), "{err}");
    assert_eq!(std::fs::read_dir(&work).unwrap().count(), 0);

    // A missing layer is named.
    let mut b = tar::Builder::new(Vec::new());
    member(
        &mut b,
        "manifest.json",
        br#"[{"Config":"c.json","Layers":["x/layer.tar"]}]"#,
    );
    let err = import(&b.into_inner().unwrap(), &s, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "layer x/layer.tar is missing from the tarball"
    );

    // A disk too small: the unpacker says what it needs (after unpacking, in the namespace).
    let err = import(&docker_save(&s.outside), &s, Some(8)).unwrap_err();
    match err {
        OciError::TooSmall { need_mb, disk_mb } => {
            assert_eq!(disk_mb, 8);
            assert!(need_mb > 8, "{need_mb}");
        }
        e => panic!("{e}"),
    }
    assert_eq!(std::fs::read_dir(&work).unwrap().count(), 0);

    // A work directory with something in it is refused and left alone.
    std::fs::write(work.join("mine"), "x").unwrap();
    let err = import(&docker_save(&s.outside), &s, None).unwrap_err();
    assert!(matches!(err, OciError::WorkNotEmpty { .. }), "{err}");
    assert_eq!(std::fs::read_to_string(work.join("mine")).unwrap(), "x");
    std::fs::remove_file(work.join("mine")).unwrap();
    assert_host_untouched(&s);
}

/// The hidden subcommand run by hand as root (no user namespace) refuses to unpack anything.
#[test]
fn the_unpacker_refuses_to_run_as_host_root() {
    let s = scratch();
    let (l1, _) = layers(&s.outside);
    let layer = s.base.join("layer");
    std::fs::write(&layer, l1).unwrap();
    let root = s.base.join("root");
    std::fs::create_dir(&root).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pandastack"))
        .args(["internal", "oci-unpack", "--root"])
        .arg(&root)
        .arg("--out")
        .arg(s.base.join("out.ext4"))
        .arg("--layers")
        .arg(&layer)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("refusing to unpack"), "{stderr}");
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
    assert!(!s.base.join("out.ext4").exists());
}
