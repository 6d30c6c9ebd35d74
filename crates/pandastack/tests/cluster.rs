//! `pandastack cluster init` and `pandastack cluster cert` as real processes (no server, no
//! VM): the CA and a bundle land with their modes and load as an identity; an existing CA and
//! bad input are refused with a clear message and leave nothing behind.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use pandastack_cluster::{Identity, Peer, Role};

fn pandastack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pandastack"))
        .args(args)
        .env("PANDASTACK_LOG", "warn")
        .output()
        .expect("run pandastack")
}

fn ok(args: &[&str]) -> String {
    let out = pandastack(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pandastack {args:?}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

fn fails(args: &[&str]) -> String {
    let out = pandastack(args);
    assert!(!out.status.success(), "pandastack {args:?} succeeded");
    String::from_utf8(out.stderr).unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn cluster_init_and_cert_make_a_ca_and_bundles_that_load() {
    let root = tempfile::tempdir().unwrap();
    let ca = root.path().join("ca");
    let ca_s = ca.to_str().unwrap();
    let said = ok(&["cluster", "init", "--dir", ca_s]);
    assert!(said.contains("ca.key"), "{said}");
    assert_eq!(mode(&ca.join("ca.key")), 0o600);
    assert_eq!(mode(&ca.join("ca.pem")), 0o644);

    let e = fails(&["cluster", "init", "--dir", ca_s]);
    assert!(e.contains("already holds a cluster CA"), "{e}");

    let out = root.path().join("host-a");
    let out_s = out.to_str().unwrap();
    let said = ok(&[
        "cluster",
        "cert",
        "--dir",
        ca_s,
        "--role",
        "agent",
        "--name",
        "host-a",
        "--dns",
        "a.example.com",
        "--ip",
        "10.0.0.7",
        "--out",
        out_s,
    ]);
    assert!(
        said.contains(
            "it names pandastack://agent/host-a, reachable as host-a, a.example.com, 10.0.0.7"
        ),
        "{said}"
    );
    assert_eq!(mode(&out.join("key.pem")), 0o600);
    let id = Identity::load(&out).unwrap();
    assert_eq!(
        id.peer(),
        &Peer {
            role: Role::Agent,
            name: "host-a".into()
        }
    );

    // A second bundle into the same directory is refused and changes nothing.
    let key = std::fs::read(out.join("key.pem")).unwrap();
    let e = fails(&[
        "cluster", "cert", "--dir", ca_s, "--role", "server", "--name", "r1", "--out", out_s,
    ]);
    assert!(e.contains("already exists"), "{e}");
    assert_eq!(std::fs::read(out.join("key.pem")).unwrap(), key);

    // Bad input: a clear error, and no bundle directory.
    let bad = root.path().join("bad");
    let bad_s = bad.to_str().unwrap();
    for (args, says) in [
        (
            vec!["--role", "agent", "--name", "Host_A"],
            "only lowercase letters",
        ),
        (
            vec!["--role", "agent", "--name", "h", "--dns", "*.example.com"],
            "wildcards are not allowed",
        ),
        (vec!["--role", "replica", "--name", "h"], "unknown role"),
        (
            vec!["--role", "agent", "--name", "h", "--ip", "10.0.0"],
            "--ip",
        ),
        (
            vec!["--role", "agent", "--name", "h", "--days", "99999"],
            "outlive the cluster CA",
        ),
    ] {
        let mut all = vec!["cluster", "cert", "--dir", ca_s, "--out", bad_s];
        all.extend(args);
        let e = fails(&all);
        assert!(e.contains(says), "{all:?}: {e}");
        assert!(!bad.exists(), "{all:?} left {bad:?}");
    }
    let e = fails(&[
        "cluster",
        "cert",
        "--dir",
        root.path().join("nope").to_str().unwrap(),
        "--role",
        "agent",
        "--name",
        "h",
        "--out",
        bad_s,
    ]);
    assert!(e.contains("open the cluster CA"), "{e}");
    assert!(!bad.exists());
}

/// `pandastack agent` with a bad identity, no replica or nothing to advertise: a clear message
/// and its exit code (2 for a usage error, 1 otherwise) within moments, before any host
/// set-up (its data directory is never made, no VM starts).
#[test]
fn agent_refuses_a_bad_identity_or_no_replica_before_any_vm() {
    let root = tempfile::tempdir().unwrap();
    let ca = root.path().join("ca");
    let ca_s = ca.to_str().unwrap();
    ok(&["cluster", "init", "--dir", ca_s]);
    let bundle = |role: &str, name: &str| {
        let out = root.path().join(name);
        ok(&[
            "cluster",
            "cert",
            "--dir",
            ca_s,
            "--role",
            role,
            "--name",
            name,
            "--out",
            out.to_str().unwrap(),
        ]);
        out.to_str().unwrap().to_owned()
    };
    let (server, agent) = (bundle("server", "cp-1"), bundle("agent", "host-a"));
    let missing = root.path().join("nope").to_str().unwrap().to_owned();
    let data = root.path().join("data");
    let data_s = data.to_str().unwrap();
    let replica = "cp-1=127.0.0.1:7444";
    for (args, code, says) in [
        (
            vec!["--identity", &missing, "--server", replica],
            1,
            "key.pem",
        ),
        (
            vec!["--identity", &server, "--server", replica],
            1,
            "names server cp-1, not an agent",
        ),
        (vec!["--identity", &agent], 2, "--server <NAME=ADDR>"),
        (
            vec!["--identity", &agent, "--server", "cp-1"],
            2,
            "expected NAME=ADDR",
        ),
        (
            vec![
                "--identity",
                &agent,
                "--server",
                replica,
                "--listen",
                "0.0.0.0:0",
            ],
            1,
            "--advertise HOST:PORT is needed",
        ),
        (
            vec![
                "--identity",
                &agent,
                "--server",
                replica,
                "--listen",
                "127.0.0.1:0",
            ],
            1,
            "--objects is needed",
        ),
    ] {
        let started = std::time::Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_pandastack"))
            .arg("agent")
            .args(&args)
            .args(["--data-dir", data_s])
            .env("PANDASTACK_LOG", "warn")
            .env_remove("PANDASTACK_SERVERS")
            .env_remove("PANDASTACK_ADVERTISE")
            .env_remove("PANDASTACK_OBJECTS")
            .output()
            .expect("run pandastack agent");
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {e}");
        assert!(e.contains(says), "{args:?}: {e}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{args:?} took {:?}",
            started.elapsed()
        );
        assert!(!data.exists(), "{args:?} made the data directory");
    }
}

#[test]
fn a_replica_refuses_a_state_store_or_object_store_of_its_own_before_starting() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let (ca, cp) = (root.path().join("ca"), root.path().join("cp-1"));
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    ok(&["cluster", "init", "--dir", &s(&ca)]);
    ok(&[
        "cluster",
        "cert",
        "--dir",
        &s(&ca),
        "--role",
        "server",
        "--name",
        "cp-1",
        "--out",
        &s(&cp),
    ]);
    let objects = format!("file://{}", root.path().join("objects").display());
    for (extra, says) in [
        (vec![], "--cluster needs the cluster's PostgreSQL"),
        (
            vec!["--state", "sqlite:///tmp/x.db"],
            "--cluster needs the cluster's PostgreSQL",
        ),
        (
            vec!["--state", "postgres://127.0.0.1:1/x"],
            "--cluster needs --objects",
        ),
        (
            vec!["--objects", &objects],
            "--cluster needs the cluster's PostgreSQL",
        ),
    ] {
        let (cp, d) = (s(&cp), s(&data));
        let mut args = vec!["server", "--cluster", &cp, "--data-dir", &d];
        args.extend(extra.iter().copied());
        let out = Command::new(env!("CARGO_BIN_EXE_pandastack"))
            .args(&args)
            .env("PANDASTACK_LOG", "warn")
            .env_remove("PANDASTACK_STATE")
            .env_remove("PANDASTACK_OBJECTS")
            .output()
            .expect("run pandastack server");
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {e}");
        assert!(e.contains(says), "{args:?}: {e}");
        assert!(!data.exists(), "{args:?} made the data directory");
    }
}
