//! A cluster with a real guest: one `pandastack server --cluster` replica on PostgreSQL and one
//! `pandastack agent` running QEMU guests (under TCG here). A sandbox created through the
//! replica runs on the agent's host and answers exec and files through it; `kill -9` of the
//! agent makes its host `dead` within 10 s and the sandbox `lost` (its VM keeps running); a
//! restarted agent joins again and the same VM, files and all, is `running` once more.
//! With two replicas, a managed database and an app made through one answer through the other:
//! `psql` through either replica's database front, the app's URL through either proxy, and the
//! deploy's log through either API (one of them did not run the deploy); with a schedule firing
//! every 3 s, a second agent joins and the first host is drained (database and app VM move, no
//! commit lost, nothing left on it), then the second host is lost: the app and the database
//! come back on the first, and the schedule ran once per due time throughout. A template baked on
//! one host serves a create on another through the shared object store, without a bake there;
//! that sandbox, hibernated, moves back to the first host and wakes there with its memory
//! (a process that keeps counting), files and preview URL; a fork of it with `spread` (100 MiB
//! of random bytes in its memory) runs on the other host with the same bytes.
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

fn agent(
    identity: &str,
    listen: &str,
    replica: &str,
    data: &std::path::Path,
    objects: &str,
) -> Agent {
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
            "--objects",
            objects,
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

/// A certificate authority and bundles for `names` (`role:name`), in `dir`.
fn pki(dir: &std::path::Path, names: &[(&str, &str)]) {
    let p = |n: &str| dir.join(n).to_str().unwrap().to_owned();
    cli(&["cluster", "init", "--dir", &p("ca")]);
    for (role, name) in names {
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
}

/// A replica `name` (its bundle in `pki`) on `db`, with the object store `objects`; its
/// membership service's address is returned with it.
async fn replica(
    pki: &std::path::Path,
    name: &str,
    db: &str,
    objects: &str,
    data: &std::path::Path,
) -> (common::Server, String) {
    let membership = format!("127.0.0.1:{}", free_port());
    let bundle = pki.join(name);
    let server = start_with(
        data,
        free_port(),
        &[
            "--state",
            db,
            "--cluster",
            bundle.to_str().unwrap(),
            "--membership-listen",
            &membership,
            "--network",
            "off",
            "--objects",
            objects,
        ],
    )
    .await;
    (server, format!("{name}={membership}"))
}

/// Waits until host `host`'s row says `ready`.
async fn ready(db: &str, host: &str) {
    within(Duration::from_secs(60), "the agent's host ready", async {
        while host_state(db, host) != "ready" {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}

/// The host row's state, read with psql.
fn host_state(db: &str, host: &str) -> String {
    psql_value(db, &format!("SELECT state FROM hosts WHERE id = '{host}'"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_guest_through_a_replica_survives_its_agents_kill_and_return() {
    let Some(db) = database().await else { return };
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let pki = tempfile::tempdir().unwrap();
    let p = |n: &str| pki.path().join(n).to_str().unwrap().to_owned();
    self::pki(pki.path(), &[("server", "cp-1"), ("agent", "host-g")]);
    // The object store the replica and the agent share.
    let objects = format!("file://{}", pki.path().join("objects").display());
    let replica_data = tempfile::tempdir().unwrap();
    let (replica, attend) = replica(pki.path(), "cp-1", &db, &objects, replica_data.path()).await;
    let listen = format!("127.0.0.1:{}", free_port());
    let mut host = agent(&p("host-g"), &listen, &attend, guard.dir.path(), &objects);
    ready(&db, "host-g").await;

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
    host = agent(&p("host-g"), &listen, &attend, guard.dir.path(), &objects);
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

/// A template baked on one host serves a create on another without a bake there: host-a's
/// agent makes the bake it holds durable in the shared object store; host-a is drained; the
/// create lands on host-b, whose agent fetches that bake (the same bake id, no image build and
/// no cold boot) and restores from it. Then the sandbox, hibernated on host-b, is migrated to
/// host-a and woken there by a request to its preview URL, and forked with `spread` back to
/// host-b. Last, hibernated on host-a (a durable copy made in the background), host-a's agent
/// and its VMs are killed and the next request to the preview URL wakes it on host-b; a
/// sandbox created on host-a with `on_host_loss: "restore"` and snapshotted runs again on
/// host-b from that snapshot, its counting process counting on from where the snapshot left it.
#[tokio::test(flavor = "multi_thread")]
async fn a_template_and_a_hibernated_sandbox_move_between_hosts() {
    let Some(db) = database().await else { return };
    let guard = runtime().await;
    // The agents' volume slots (2 by default), so host-a serves this bake as it is.
    let baked = pandastack_testkit::bake_with_slots(&guard, "minimal", 2).await;
    let pki = tempfile::tempdir().unwrap();
    let p = |n: &str| pki.path().join(n).to_str().unwrap().to_owned();
    self::pki(
        pki.path(),
        &[("server", "cp-1"), ("agent", "host-a"), ("agent", "host-b")],
    );
    let objects_dir = pki.path().join("objects");
    let objects = format!("file://{}", objects_dir.display());
    let replica_data = tempfile::tempdir().unwrap();
    let (replica, attend) = replica(pki.path(), "cp-1", &db, &objects, replica_data.path()).await;
    let a_listen = format!("127.0.0.1:{}", free_port());
    let mut a = agent(&p("host-a"), &a_listen, &attend, guard.dir.path(), &objects);
    ready(&db, "host-a").await;
    let record = objects_dir.join(format!(
        "ws/platform/records/templates/minimal.{}.json",
        baked.bake_id
    ));
    within(Duration::from_secs(180), "host-a's bake durable", async {
        while !record.is_file() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;

    // host-a takes no creates; host-b holds no template.
    psql_admin(
        &db,
        "UPDATE hosts SET state = 'draining' WHERE id = 'host-a'",
    );
    let b_data = tempfile::tempdir().unwrap();
    let b_listen = format!("127.0.0.1:{}", free_port());
    let _b = agent(&p("host-b"), &b_listen, &attend, b_data.path(), &objects);
    ready(&db, "host-b").await;

    let api = common::Api {
        s: &replica,
        c: reqwest::Client::new(),
    };
    let id = api.create(json!({"template": "minimal"})).await;
    let (_, sb) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(sb["host"], "host-b", "placed on host-b: {sb}");
    let out = api.exec(&id, "hostname").await;
    assert_eq!(out["stdout"].as_str().unwrap().trim(), id, "{out}");
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(b_data.path().join("templates/minimal/template.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        manifest["bake_id"], baked.bake_id,
        "host-b restored host-a's bake: {manifest}"
    );

    // Hibernated on host-b, it moves to host-a (taking creates again) and wakes there with its
    // memory: the same counting process goes on counting, the same web server answers through
    // the same preview URL, its files are there.
    psql_admin(&db, "UPDATE hosts SET state = 'ready' WHERE id = 'host-a'");
    api.exec(
        &id,
        "mkdir -p /tmp/site && echo moved > /tmp/site/index.html && echo kept > /tmp/mark && \
         setsid sh -c 'i=0; while :; do i=$((i+1)); echo \"$$ $i\" > /tmp/count; sleep 0.1; done' \
           </dev/null >/dev/null 2>&1 & \
         setsid python3 -m http.server 8000 --directory /tmp/site </dev/null >/dev/null 2>&1 &",
    )
    .await;
    let page = || preview(&api, &id, 8000);
    within(Duration::from_secs(60), "the web server up", async {
        while page().await.as_deref() != Some("moved\n") {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let count = |out: &Value| -> (String, u64) {
        let text = out["stdout"].as_str().unwrap_or_default().to_owned();
        let (pid, n) = text.trim().split_once(' ').expect("pid and count");
        (pid.to_owned(), n.parse().unwrap())
    };
    let (pid, before) = count(&api.exec(&id, "cat /tmp/count").await);
    let (status, sb) = api
        .call("POST", &format!("/v1/sandboxes/{id}/hibernate"), None)
        .await;
    assert!(status.is_success(), "{sb}");
    let moving = Instant::now();
    let (status, sb) = api
        .call(
            "POST",
            &format!("/v1/sandboxes/{id}/migrate"),
            Some(json!({})),
        )
        .await;
    assert!(status.is_success(), "{sb}");
    assert_eq!(
        (sb["host"].as_str(), sb["state"].as_str()),
        (Some("host-a"), Some("hibernated")),
        "{sb}"
    );
    eprintln!("moved hibernated in {} ms", moving.elapsed().as_millis());
    let woke = Instant::now();
    assert_eq!(
        page().await.as_deref(),
        Some("moved\n"),
        "the preview URL wakes it"
    );
    eprintln!("woke on host-a in {} ms", woke.elapsed().as_millis());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (pid_after, after) = count(&api.exec(&id, "cat /tmp/count").await);
    assert_eq!(pid_after, pid, "the same process");
    assert!(after > before, "it went on counting: {before} then {after}");
    assert_eq!(api.exec(&id, "cat /tmp/mark").await["stdout"], "kept\n");
    let (_, sb) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(
        (sb["host"].as_str(), sb["state"].as_str()),
        (Some("host-a"), Some("running")),
        "{sb}"
    );

    // A fork with `spread`: 100 MiB of random bytes in the parent's memory (tmpfs); the child
    // runs on the other host and holds the same bytes.
    let sum = |out: &Value| {
        let text = out["stdout"].as_str().unwrap_or_default();
        text.split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    let hash = sum(&api
        .exec(
            &id,
            "head -c 100M /dev/urandom > /dev/shm/blob && sha256sum /dev/shm/blob",
        )
        .await);
    assert_eq!(hash.len(), 64, "{hash}");
    let forking = Instant::now();
    let (status, forked) = api
        .call(
            "POST",
            &format!("/v1/sandboxes/{id}/fork"),
            Some(json!({"spread": true})),
        )
        .await;
    assert_eq!(status.as_u16(), 201, "{forked}");
    eprintln!(
        "forked to another host in {} ms",
        forking.elapsed().as_millis()
    );
    let child = &forked["children"][0];
    assert_eq!(child["host"], "host-b", "{forked}");
    let child_id = child["id"].as_str().unwrap();
    assert_eq!(
        sum(&api.exec(child_id, "sha256sum /dev/shm/blob").await),
        hash
    );

    // A sandbox to restore if its host is lost, on host-a (host-b takes no creates for it),
    // counting; its snapshot becomes its checkpoint once durable.
    psql_admin(
        &db,
        "UPDATE hosts SET state = 'draining' WHERE id = 'host-b'",
    );
    let kept = api
        .create(json!({"template": "minimal", "on_host_loss": "restore"}))
        .await;
    psql_admin(&db, "UPDATE hosts SET state = 'ready' WHERE id = 'host-b'");
    let (_, sb) = api
        .call("GET", &format!("/v1/sandboxes/{kept}"), None)
        .await;
    assert_eq!(
        (sb["host"].as_str(), sb["on_host_loss"].as_str()),
        (Some("host-a"), Some("restore")),
        "{sb}"
    );
    api.exec(
        &kept,
        "setsid sh -c 'i=0; while :; do i=$((i+1)); echo \"$$ $i\" > /tmp/count; sleep 0.1; done' \
           </dev/null >/dev/null 2>&1 &",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, snap) = api
        .call(
            "POST",
            &format!("/v1/sandboxes/{kept}/snapshots"),
            Some(json!({})),
        )
        .await;
    assert!(status.is_success(), "{snap}");
    let (kept_pid, at_snapshot) = count(&api.exec(&kept, "cat /tmp/count").await);
    within(Duration::from_secs(60), "the checkpoint recorded", async {
        while psql_value(
            &db,
            &format!("SELECT checkpoint IS NOT NULL FROM sandboxes WHERE id = '{kept}'"),
        ) != "t"
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;

    // Hibernated on host-a, its image is made durable in the background; host-a's agent and
    // its VMs are killed (`kill -9`: the host is lost) and declared dead; the next request to the preview URL wakes the
    // sandbox on host-b from that copy, the counting process still counting.
    let (pid, before) = count(&api.exec(&id, "cat /tmp/count").await);
    let (status, sb) = api
        .call("POST", &format!("/v1/sandboxes/{id}/hibernate"), None)
        .await;
    assert!(status.is_success(), "{sb}");
    let durable = Instant::now();
    within(Duration::from_secs(60), "a durable copy recorded", async {
        while psql_value(
            &db,
            &format!("SELECT durable_tag IS NOT NULL FROM sandboxes WHERE id = '{id}'"),
        ) != "t"
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    eprintln!("durable after {} ms", durable.elapsed().as_millis());
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    kill_vms_of(guard.dir.path());
    let lost = Instant::now();
    within(Duration::from_secs(15), "host-a dead", async {
        while host_state(&db, "host-a") != "dead" {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let rehomed = Instant::now();
    assert_eq!(
        page().await.as_deref(),
        Some("moved\n"),
        "the preview URL wakes it on host-b"
    );
    eprintln!(
        "woke on host-b after host-a's loss in {} ms",
        rehomed.elapsed().as_millis()
    );
    let (_, sb) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(
        (sb["host"].as_str(), sb["state"].as_str()),
        (Some("host-b"), Some("running")),
        "{sb}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (pid_after, after) = count(&api.exec(&id, "cat /tmp/count").await);
    assert_eq!(pid_after, pid, "the same process");
    assert!(after > before, "it went on counting: {before} then {after}");

    // The sandbox to restore runs again on host-b, from its snapshot.
    within(Duration::from_secs(60), "restored on host-b", async {
        loop {
            let (_, sb) = api
                .call("GET", &format!("/v1/sandboxes/{kept}"), None)
                .await;
            if (sb["host"].as_str(), sb["state"].as_str()) == (Some("host-b"), Some("running")) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    eprintln!(
        "restored on host-b {} ms after host-a's loss",
        lost.elapsed().as_millis()
    );
    let (pid_then, first) = count(&api.exec(&kept, "cat /tmp/count").await);
    assert_eq!(pid_then, kept_pid, "the process of the snapshot");
    assert!(
        first >= at_snapshot.saturating_sub(20),
        "{at_snapshot} then {first}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, later) = count(&api.exec(&kept, "cat /tmp/count").await);
    assert!(later > first, "it counts on: {first} then {later}");
    for sb in [child_id, id.as_str(), kept.as_str()] {
        let (status, _) = api
            .call("DELETE", &format!("/v1/sandboxes/{sb}"), None)
            .await;
        assert!(status.is_success());
    }
}

/// Kills (`kill -9`) every process working in `dir` (a host's data directory): its VMs, which
/// run in their sandboxes' directories, as a host's loss does.
fn kill_vms_of(dir: &std::path::Path) {
    let killed = pandastack_runtime::kill_processes_working_in(dir);
    eprintln!("killed {killed} VM processes in {}", dir.display());
}

/// The one value `sql` reads, with psql.
fn psql_value(db: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([db, "-tAc", sql])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `psql -qc sql` as the test database's owner.
fn psql_admin(db: &str, sql: &str) {
    let out = Command::new("psql")
        .args([db, "-qc", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The body of `GET /` on port `port` of sandbox `id` through the replica's preview proxy
/// (with the port's token), or `None` if it does not answer 200.
async fn preview(api: &common::Api<'_>, id: &str, port: u16) -> Option<String> {
    let (status, url) = api
        .call("GET", &format!("/v1/sandboxes/{id}/ports/{port}/url"), None)
        .await;
    assert!(status.is_success(), "{url}");
    let proxy_port = api.s.proxy.rsplit(':').next().unwrap();
    let r = api
        .c
        .get(format!("http://{}/", api.s.proxy))
        .header("host", format!("{port}-{id}.localhost:{proxy_port}"))
        .header("x-pandastack-access-token", url["token"].as_str().unwrap())
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.text().await.ok()
}

/// `psql -XAt -c sql` through the database front at `front` (`uri` names it by host name for
/// SNI; `hostaddr` connects to 127.0.0.1).
fn psql(uri: &str, front: &str, sql: &str) -> String {
    try_psql(uri, front, sql).unwrap_or_else(|e| panic!("psql {sql:?} via {front}: {e}"))
}

/// [`psql`], its error (psql's stderr) returned rather than a panic.
fn try_psql(uri: &str, front: &str, sql: &str) -> Result<String, String> {
    let port = front.rsplit_once(':').unwrap().1;
    let (head, tail) = uri.split_once("?").unwrap();
    let (base, _) = head.rsplit_once('/').unwrap();
    let (base, _) = base.rsplit_once(':').unwrap();
    let db = head.rsplit_once('/').unwrap().1;
    let uri = format!("{base}:{port}/{db}?{tail}&hostaddr=127.0.0.1");
    let out = Command::new("psql")
        .arg(&uri)
        .args(["-XAt", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "120")
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A gzip tarball holding `index.html` = `page`.
fn site(page: &[u8]) -> Vec<u8> {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    let mut h = tar::Header::new_gnu();
    h.set_size(page.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "index.html", page).unwrap();
    b.into_inner().unwrap().finish().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_and_an_app_made_through_one_replica_answer_through_the_other() {
    let Some(db) = database().await else { return };
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let dir = tempfile::tempdir().unwrap();
    pki(
        dir.path(),
        &[
            ("server", "cp-1"),
            ("server", "cp-2"),
            ("agent", "host-g"),
            ("agent", "host-h"),
        ],
    );
    let objects = format!("file://{}", dir.path().join("objects").display());
    let (d1, d2) = (dir.path().join("r1"), dir.path().join("r2"));
    let (r1, attend1) = replica(dir.path(), "cp-1", &db, &objects, &d1).await;
    // The second replica finds the workspace the first made: the same key.
    std::fs::create_dir_all(&d2).unwrap();
    std::fs::copy(d1.join("key"), d2.join("key")).unwrap();
    let (r2, attend2) = replica(dir.path(), "cp-2", &db, &objects, &d2).await;
    let bundle = dir.path().join("host-g");
    let listen = format!("127.0.0.1:{}", free_port());
    let host = agent(
        bundle.to_str().unwrap(),
        &listen,
        &format!("{attend1},{attend2}"),
        guard.dir.path(),
        &objects,
    );
    ready(&db, "host-g").await;
    let (a1, a2) = (
        common::Api {
            s: &r1,
            c: reqwest::Client::new(),
        },
        common::Api {
            s: &r2,
            c: reqwest::Client::new(),
        },
    );

    // A database made through cp-1 runs on the agent's host; psql through either front.
    let t = Instant::now();
    let (st, made) = a1
        .call("POST", "/v1/databases", Some(json!({"name": "shop"})))
        .await;
    assert!(st.is_success(), "{made}");
    eprintln!("database ready in {:?}", t.elapsed());
    assert_eq!(made["host"], "host-g", "its VM on the agent's host: {made}");
    let uri = made["connection_uri"].as_str().unwrap();
    psql(
        uri,
        &r1.db,
        "create table t (x int); insert into t values (1), (2)",
    );
    assert_eq!(psql(uri, &r2.db, "select sum(x) from t"), "3");
    let (st, q) = a2
        .call(
            "POST",
            &format!("/v1/databases/{}/query", made["id"].as_str().unwrap()),
            Some(json!({"sql": "select count(*) as n from t"})),
        )
        .await;
    assert!(st.is_success(), "{q}");
    assert_eq!(q["rows"][0][0], "2", "{q}");

    // An app whose upload went to cp-2 is built by whichever replica runs the workers, and
    // serves through both proxies; its log reads the same through both APIs.
    let (st, body) = a2
        .call(
            "POST",
            "/v1/apps",
            Some(json!({"name": "site", "git": {"url": "https://example.invalid/site.git"}})),
        )
        .await;
    assert!(st.is_success(), "{body}");
    let r =
        a2.c.post(format!("{}/v1/apps/site/deploys", r2.url))
            .bearer_auth(&r2.key)
            .header("Content-Type", "application/gzip")
            .body(site(b"<h1>one platform</h1>\n"))
            .send()
            .await
            .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    let d: Value = r.json().await.unwrap();
    let path = format!("/v1/apps/site/deploys/{}", d["id"].as_str().unwrap());
    let live = within(
        Duration::from_secs(300),
        "the upload's deploy live",
        async {
            loop {
                let (_, d) = a1.call("GET", &path, None).await;
                match d["state"].as_str() {
                    Some("live") => return d,
                    Some("failed") => panic!("the deploy failed: {d}"),
                    _ => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
        },
    )
    .await;
    assert!(
        live["commit"].as_str().unwrap().starts_with("upload:"),
        "{live}"
    );
    for s in [&r1, &r2] {
        let port = s.proxy.rsplit_once(':').unwrap().1;
        let page = reqwest::Client::new()
            .get(format!("http://{}/", s.proxy))
            .header("Host", format!("site.localhost:{port}"))
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(page.contains("one platform"), "through {}: {page}", s.proxy);
    }
    let mut logs = Vec::new();
    for s in [&r1, &r2] {
        let log = reqwest::Client::new()
            .get(format!("{}{path}/logs", s.url))
            .bearer_auth(&s.key)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            log.contains("now serves"),
            "the log through {}: {log}",
            s.url
        );
        logs.push(log);
    }
    assert_eq!(
        logs[0], logs[1],
        "one log, whichever replica ran the deploy"
    );

    // A template built through a replica from an OCI tarball uploaded to it: the replica
    // stores the tarball in the object store, and the build and its bake run on the one agent's
    // host (host-g), which fetches it and stores the bake for the others.
    let r =
        a1.c.post(format!("{}/v1/templates?name=built&memory_mb=256", r1.url))
            .bearer_auth(&r1.key)
            .header("content-type", "application/x-tar")
            .body(common::oci::docker_save("built through a replica\n"))
            .send()
            .await
            .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    let built = within(Duration::from_secs(600), "the template built", async {
        loop {
            let (_, v) = a1.call("GET", "/v1/templates/built", None).await;
            match v["state"].as_str() {
                Some("queued" | "building" | "baking") => {}
                _ => return v,
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    assert_eq!(built["state"], "ready", "{built}");

    // A schedule fires every 3 s throughout what follows (a command in a new sandbox each time).
    let (st, made_schedule) = a1
        .call(
            "POST",
            "/v1/schedules",
            Some(json!({
                "name": "tick",
                "cron": "*/3 * * * * *",
                "retries": 3,
                "target": {"type": "sandbox_exec", "template": "minimal", "command": "echo tick", "timeout_seconds": 60},
            })),
        )
        .await;
    assert!(st.is_success(), "{made_schedule}");
    let schedule_id = made_schedule["id"].as_str().unwrap().to_owned();

    // The app's VM was checkpointed when it went live (in the background).
    within(
        Duration::from_secs(120),
        "the app's VM checkpointed",
        async {
            while psql_value(
                &db,
                "SELECT count(*) FROM sandboxes WHERE on_host_loss = 'restore' \
             AND checkpoint IS NOT NULL",
            ) != "1"
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        },
    )
    .await;
    let h_data = tempfile::tempdir().unwrap();
    let mut h = agent(
        dir.path().join("host-h").to_str().unwrap(),
        &format!("127.0.0.1:{}", free_port()),
        &format!("{attend1},{attend2}"),
        h_data.path(),
        &objects,
    );
    ready(&db, "host-h").await;

    // host-g drained: its database (stopped cleanly, its volume copied: no commit lost) and
    // its app's VM move to host-h and answer there; nothing the cluster needs is left on it.
    psql(uri, &r1.db, "insert into t values (4)");
    let admin = admin_key(&d1, &db);
    let (st, drained) = a1
        .call_as(&admin, "POST", "/v1/hosts/host-g/drain", None)
        .await;
    assert_eq!(st.as_u16(), 200, "{drained}");
    let t = Instant::now();
    within(Duration::from_secs(300), "host-g emptied", async {
        while psql_value(
            &db,
            "SELECT (SELECT count(*) FROM volumes WHERE host_id = 'host-g') + \
             (SELECT count(*) FROM sandboxes WHERE host_id = 'host-g')",
        ) != "0"
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    eprintln!("host-g drained in {} ms", t.elapsed().as_millis());
    let sum = sum_when_up(uri, &r2.db, 120, "the moved database answering").await;
    assert_eq!(sum, "7", "every commit made before the drain");
    assert_eq!(
        psql_value(
            &db,
            "SELECT v.host_id FROM databases d JOIN volumes v ON v.id = d.volume_id"
        ),
        "host-h"
    );
    assert_eq!(
        psql_value(
            &db,
            "SELECT host_id FROM sandboxes WHERE on_host_loss = 'restore'"
        ),
        "host-h"
    );
    assert!(app_page(&r2).await.contains("one platform"));
    // The template built on host-g serves a create on host-h (host-g is drained), from the
    // object store, without a build there.
    let (st, made_sb) = a1
        .call("POST", "/v1/sandboxes", Some(json!({"template": "built"})))
        .await;
    assert_eq!(st.as_u16(), 201, "{made_sb}");
    assert_eq!(made_sb["host"], "host-h", "{made_sb}");
    let sb = made_sb["id"].as_str().unwrap();
    let out = a1.exec(sb, "cat /data/marker").await;
    assert_eq!(out["stdout"], "built through a replica\n", "{out}");
    let (st, _) = a1
        .call("DELETE", &format!("/v1/sandboxes/{sb}"), None)
        .await;
    assert!(st.is_success());
    let (st, undrained) = a1
        .call_as(&admin, "POST", "/v1/hosts/host-g/undrain", None)
        .await;
    assert_eq!(st.as_u16(), 200, "{undrained}");

    // host-h is lost (its agent and VMs killed): the app answers again from host-g, restored
    // there from its checkpoint.
    h.0.kill().unwrap();
    h.0.wait().unwrap();
    kill_vms_of(h_data.path());
    let lost = Instant::now();
    let lost_ms = now_ms();
    let page = app_page(&r2).await;
    eprintln!(
        "the app answered again {} ms after its host's loss (declared dead within it)",
        lost.elapsed().as_millis()
    );
    assert!(page.contains("one platform"), "{page}");
    assert_eq!(host_state(&db, "host-h"), "dead");
    assert_eq!(
        psql_value(
            &db,
            "SELECT host_id FROM sandboxes WHERE on_host_loss = 'restore'"
        ),
        "host-g"
    );
    // The database, its volume lost with host-h, comes back on host-g from its base backup and
    // archived WAL (the archive went on across the move), with the rows committed before.
    let sum = sum_when_up(uri, &r1.db, 240, "the database failed over").await;
    eprintln!(
        "the database accepted connections again {} ms after its host's loss",
        lost.elapsed().as_millis()
    );
    assert_eq!(sum, "7");
    assert_eq!(
        psql_value(
            &db,
            "SELECT v.host_id FROM databases d JOIN volumes v ON v.id = d.volume_id"
        ),
        "host-g"
    );
    // The lost volume's row went with the failover (only the database's own is left).
    within(
        Duration::from_secs(30),
        "the retired volume's row removed",
        async {
            while psql_value(&db, "SELECT count(*) FROM volumes") != "1" {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        },
    )
    .await;

    // The schedule fired once per due time throughout, none missed: each run succeeded, or
    // failed saying its host was lost; runs due after the loss succeeded on host-g.
    within(
        Duration::from_secs(60),
        "a run due after the loss done",
        async {
            while psql_value(
                &db,
                &format!(
                    "SELECT count(*) FROM schedule_runs WHERE schedule_id = '{schedule_id}' \
                 AND due_at > {lost_ms} AND state = 'succeeded'"
                ),
            ) == "0"
            {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        },
    )
    .await;
    let runs = psql_value(
        &db,
        &format!(
            "SELECT string_agg(due_at || ' ' || state || ' ' || coalesce(error, ''), E'\\n' \
             ORDER BY due_at) FROM schedule_runs WHERE schedule_id = '{schedule_id}'"
        ),
    );
    let runs: Vec<(i64, &str, &str)> = runs
        .lines()
        .map(|l| {
            let mut f = l.splitn(3, ' ');
            (
                f.next().unwrap().parse().unwrap(),
                f.next().unwrap(),
                f.next().unwrap_or(""),
            )
        })
        .collect();
    eprintln!("{} runs of the schedule", runs.len());
    assert!(runs.len() >= 5, "{runs:?}");
    for w in runs.windows(2) {
        assert_eq!(w[1].0 - w[0].0, 3000, "one run per due time: {runs:?}");
    }
    for (due, state, error) in &runs {
        match *state {
            "succeeded" | "queued" | "running" => {}
            "failed" => assert!(error.starts_with("host_lost"), "run due {due}: {error}"),
            other => panic!("run due {due} is {other}: {error} ({runs:?})"),
        }
    }
    drop(host);
    kill_vms_of(guard.dir.path());
}

/// `select sum(x) from t` through database front `front`, tried until the database answers
/// (within `secs`).
async fn sum_when_up(uri: &str, front: &str, secs: u64, what: &str) -> String {
    within(Duration::from_secs(secs), what, async {
        loop {
            if let Ok(v) = try_psql(uri, front, "select sum(x) from t") {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await
}

/// The app `site` as one request through `s`'s proxy returns it, tried until it answers.
async fn app_page(s: &common::Server) -> String {
    let port = s.proxy.rsplit_once(':').unwrap().1;
    within(Duration::from_secs(120), "the app answering", async {
        loop {
            let got = reqwest::Client::new()
                .get(format!("http://{}/", s.proxy))
                .header("Host", format!("site.localhost:{port}"))
                .timeout(Duration::from_secs(10))
                .send()
                .await;
            if let Ok(r) = got {
                if r.status().is_success() {
                    return r.text().await.unwrap();
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
}

/// An operator's key made with `pandastack keys create --admin` on the cluster's state store.
fn admin_key(data: &std::path::Path, db: &str) -> String {
    let (ok, out, err) = common::cli(
        &[
            "keys", "create", "--admin", "--name", "ops", "--json", "--state", db,
        ],
        data,
    );
    assert!(ok, "keys create --admin: {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    v["secret"].as_str().unwrap().to_owned()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
