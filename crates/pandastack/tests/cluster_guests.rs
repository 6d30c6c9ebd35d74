//! A cluster with a real guest: one `pandastack server --cluster` replica on PostgreSQL and one
//! `pandastack agent` running QEMU guests (under TCG here). A sandbox created through the
//! replica runs on the agent's host and answers exec and files through it; `kill -9` of the
//! agent makes its host `dead` within 10 s and the sandbox `lost` (its VM keeps running); a
//! restarted agent joins again and the same VM, files and all, is `running` once more.
//! (The fast cluster tests, with fake agents, are the test kit's `cluster_*`.)

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, start_with};
use pandastack_testkit::{bake, runtime, within};
use serde_json::{json, Value};

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cli(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_pandastack"))
        .args(args)
        .env("PANDASTACK_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pandastack {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn agent(identity: &str, listen: &str, replica: &str, data: &std::path::Path) -> Agent {
    let child = Command::new(env!("CARGO_BIN_EXE_pandastack"))
        .args([
            "agent",
            "--identity",
            identity,
            "--listen",
            listen,
            "--server",
            replica,
            "--network",
            "off",
            "--pool-size",
            "0",
        ])
        .arg("--data-dir")
        .arg(data)
        .env("PANDASTACK_LOG", "info")
        .stdout(Stdio::null())
        .spawn()
        .expect("start agent");
    Agent(child)
}

/// A database of its own on the test PostgreSQL server (`None`: PostgreSQL skipped).
async fn database() -> Option<String> {
    let admin = match std::env::var("PANDASTACK_TEST_POSTGRES").as_deref() {
        Ok("skip") => {
            eprintln!("skipped: PANDASTACK_TEST_POSTGRES=skip");
            return None;
        }
        Ok(u) => u.to_owned(),
        Err(_) => panic!(
            "PANDASTACK_TEST_POSTGRES is not set: run `eval \"$(scripts/test-postgres.sh start)\"`"
        ),
    };
    let name = format!("psg_{:016x}", rand::random::<u64>());
    let out = Command::new("psql")
        .args([admin.as_str(), "-qc", &format!("CREATE DATABASE {name}")])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
    Some(format!("{base}/{name}"))
}

/// The host row's state, read with psql.
fn host_state(db: &str, host: &str) -> String {
    let out = Command::new("psql")
        .args([
            db,
            "-tAc",
            &format!("SELECT state FROM hosts WHERE id = '{host}'"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_guest_through_a_replica_survives_its_agents_kill_and_return() {
    let Some(db) = database().await else { return };
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let pki = tempfile::tempdir().unwrap();
    let p = |n: &str| pki.path().join(n).to_str().unwrap().to_owned();
    cli(&["cluster", "init", "--dir", &p("ca")]);
    for (role, name) in [("server", "cp-1"), ("agent", "host-g")] {
        cli(&[
            "cluster",
            "cert",
            "--dir",
            &p("ca"),
            "--role",
            role,
            "--name",
            name,
            "--ip",
            "127.0.0.1",
            "--out",
            &p(name),
        ]);
    }
    let membership = format!("127.0.0.1:{}", free_port());
    let replica_data = tempfile::tempdir().unwrap();
    let replica = start_with(
        replica_data.path(),
        free_port(),
        &[
            "--state",
            &db,
            "--cluster",
            &p("cp-1"),
            "--membership-listen",
            &membership,
            "--network",
            "off",
        ],
    )
    .await;
    let listen = format!("127.0.0.1:{}", free_port());
    let attend = format!("cp-1={membership}");
    let mut host = agent(&p("host-g"), &listen, &attend, guard.dir.path());
    within(Duration::from_secs(60), "the agent's host ready", async {
        while host_state(&db, "host-g") != "ready" {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;

    let api = common::Api {
        s: &replica,
        c: reqwest::Client::new(),
    };
    let id = api.create(json!({"template": "minimal"})).await;
    let (_, sb) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(sb["host"], "host-g", "placed on the agent's host: {sb}");
    let out = api.exec(&id, "echo kept > /tmp/mark; hostname").await;
    assert_eq!(out["stdout"].as_str().unwrap().trim(), id, "{out}");

    // kill -9: the host is dead within a lease and a reaper's tick, the sandbox lost.
    let killed = Instant::now();
    host.0.kill().unwrap();
    host.0.wait().unwrap();
    within(Duration::from_secs(10), "host-g dead", async {
        while host_state(&db, "host-g") != "dead" {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    eprintln!("dead after {} ms", killed.elapsed().as_millis());
    let (_, sb) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(sb["state"], "lost", "{sb}");
    let (status, body) = api
        .call(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"cmd": "true"})),
        )
        .await;
    assert_eq!(status.as_u16(), 409, "{body}");

    // The agent comes back: the join watch finds the VM and the sandbox runs again as it was.
    host = agent(&p("host-g"), &listen, &attend, guard.dir.path());
    let back = within(
        Duration::from_secs(30),
        "the sandbox running again",
        async {
            loop {
                let (_, sb): (_, Value) =
                    api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
                if sb["state"] == "running" {
                    return sb;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        },
    )
    .await;
    assert_eq!(back["host"], "host-g");
    let out = api.exec(&id, "cat /tmp/mark").await;
    assert_eq!(out["stdout"], "kept\n", "the same VM: {out}");
    let (status, _) = api
        .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert!(status.is_success());
    drop(host);
}
