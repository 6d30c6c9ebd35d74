//! `pandastack server` with sandbox networking on: guests get NAT to the outside but cannot reach
//! the server's own API port on the host or cloud metadata, and 300 create/delete cycles over
//! HTTP leave no network namespace, link, VM process or file behind, nor does a `kill -9` of the
//! server holding 20 sandboxes. Needs root and nftables.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{free_port, start_with, Api};
use pandastack_testkit::net::{host_ip, net_pool, NetNames};
use pandastack_testkit::{bake, runtime_with_network, within};
use reqwest::{Client, StatusCode};
use serde_json::json;

/// A TCP connect from inside the guest: prints `open <first line>` or `blocked <error>`.
const PROBE: &str = r#"
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), 3)
    s.settimeout(3)
    s.sendall(sys.argv[3].encode().replace(b"|", b"\r\n"))
    print("open", s.recv(64).decode(errors="replace").split("\r\n")[0])
except Exception as e:
    print("blocked", type(e).__name__)
"#;

async fn probe(api: &Api<'_>, id: &str, host: &str, port: u16, send: &str) -> String {
    let v = api
        .exec(
            id,
            &format!(
                "cat > /tmp/probe.py <<'EOF'\n{PROBE}\nEOF\npython3 /tmp/probe.py {host} {port} '{send}'"
            ),
        )
        .await;
    assert_eq!(v["exit_code"], 0, "{v}");
    v["stdout"].as_str().unwrap().trim().to_owned()
}

/// VM processes whose working directory is under `dir` (QEMU runs in its run directory).
fn vm_processes_under(dir: &Path) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir)))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn networked_sandboxes_reach_out_not_in_and_cycles_leak_nothing() {
    // Bake with a NIC (its own short-lived pool), then serve with the server's own pool.
    let bake_net = net_pool("tsbk", "10.203.1.0/24").await;
    let guard = runtime_with_network(&bake_net).await;
    assert!(bake(&guard, "minimal").await.network);
    drop(bake_net);
    let names = NetNames::new("tsrv");
    names.clean();
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let server = start_with(
        guard.dir.path(),
        port,
        &[
            "--listen",
            &listen,
            "--network",
            "on",
            "--net-name",
            "tsrv",
            "--net-base",
            "10.203.0.0/24",
            "--net-spare",
            "2",
        ],
    )
    .await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };

    let id = api.create(json!({"template": "minimal"})).await;
    // Out: DNS and NAT to a public host (a package mirror this machine can reach).
    let http = "HEAD / HTTP/1.0|Host: deb.debian.org||";
    let r = probe(&api, &id, "deb.debian.org", 80, http).await;
    assert!(r.starts_with("open HTTP/"), "outbound: {r}");

    // In: the server's API port answers on the host's address — but not to the guest.
    let ip = host_ip();
    let health = format!("GET /v1/health HTTP/1.0|Host: {ip}||");
    let from_host = Client::new()
        .get(format!("http://{ip}:{port}/v1/health"))
        .send()
        .await
        .expect("API on the host address");
    assert_eq!(from_host.status(), StatusCode::OK);
    let r = probe(&api, &id, &ip, port, &health).await;
    assert!(
        r.starts_with("blocked"),
        "guest reached the API at {ip}:{port}: {r}"
    );
    let r = probe(&api, &id, "169.254.169.254", 80, "GET / HTTP/1.0||").await;
    assert!(
        r.starts_with("blocked"),
        "guest reached cloud metadata: {r}"
    );
    let (st, _) = api
        .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);

    // 300 create/delete cycles: slots are reused, nothing accumulates.
    let cycles: usize = std::env::var("PANDASTACK_LEAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let sandboxes = guard.dir.path().join("sandboxes");
    let mut cgroups = Vec::new();
    for i in 0..cycles {
        let id = api.create(json!({"template": "minimal"})).await;
        if i % 50 == 0 {
            assert_eq!(api.exec(&id, "true").await["exit_code"], 0);
            let c = std::fs::read_to_string(sandboxes.join(&id).join("cgroup")).unwrap();
            assert!(!cgroup_dirs(c.trim()).is_empty(), "{id} has its cgroup");
            cgroups.push(c.trim().to_owned());
        }
        let (st, v) = api
            .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
            .await;
        assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    }
    // Let the background pool refill finish.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (st, v) = api.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["data"].as_array().unwrap().len(), 0, "{v}");
    let left: Vec<String> = std::fs::read_dir(&sandboxes)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        left.iter().all(|n| n.starts_with(".pool-")) && left.len() <= 1,
        "sandbox directories left: {left:?}"
    );
    assert_eq!(
        vm_processes_under(&sandboxes),
        left.len(),
        "VM processes other than the warm pool's"
    );
    for c in &cgroups {
        assert!(
            cgroup_dirs(c).is_empty(),
            "cgroup {c} left after its sandbox"
        );
    }
    let (ns, links, table) = names.present();
    assert!(table, "host table present while the server runs");
    // Free spare slots + the warm VM's slot; a leak would grow with the cycles.
    assert!(
        ns <= 4 && links == ns,
        "netns {ns}, links {links} after {cycles} cycles"
    );

    drop(server);
    drop(guard);
    names.clean();
    assert_eq!(names.present(), (0, 0, false));
}

/// The cgroup directories of VM cgroup `name` that exist (v2, or each v1 hierarchy).
fn cgroup_dirs(name: &str) -> Vec<std::path::PathBuf> {
    ["", "memory", "cpu", "pids"]
        .iter()
        .map(|h| {
            Path::new("/sys/fs/cgroup")
                .join(h)
                .join("pandastack")
                .join(name)
        })
        .filter(|p| p.is_dir())
        .collect()
}

/// `kill -9` of the server while it holds 20 sandboxes — running, hibernated and two in the
/// middle of their create — then a restart: every running and hibernated sandbox is still there
/// and execs (the hibernated ones wake), a cut-off create is either whole or gone, and deleting
/// everything leaves no row, directory, VM process, cgroup, network namespace or link.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_with_twenty_sandboxes_keeps_them_and_leaks_nothing() {
    let bake_net = net_pool("tkbk", "10.203.3.0/24").await;
    let guard = runtime_with_network(&bake_net).await;
    assert!(bake(&guard, "minimal").await.network);
    drop(bake_net);
    let names = NetNames::new("tkil");
    names.clean();
    let data = guard.dir.path();
    let sandboxes = data.join("sandboxes");
    let port = free_port();
    let args = [
        "--network",
        "on",
        "--net-name",
        "tkil",
        "--net-base",
        "10.203.4.0/24",
        "--net-spare",
        "2",
        "--pool-size",
        "0",
    ];
    let mut server = start_with(data, port, &args).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let mut kept = Vec::new();
    for _ in 0..18 {
        kept.push(api.create(json!({"template": "minimal"})).await);
    }
    for id in &kept[14..] {
        api.hibernate(id).await;
    }
    // Each running VM's cgroup, to look for after the deletes.
    let cgroups: Vec<String> = kept[..14]
        .iter()
        .filter_map(|id| std::fs::read_to_string(sandboxes.join(id).join("cgroup")).ok())
        .map(|s| s.trim().to_owned())
        .collect();
    assert_eq!(cgroups.len(), 14, "every running VM has a cgroup");
    assert!(cgroups.iter().all(|c| !cgroup_dirs(c).is_empty()));

    // Two creates under way, then SIGKILL once both have started their VM process.
    let before: Vec<String> = std::fs::read_dir(&sandboxes)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for _ in 0..2 {
        let req = api
            .c
            .post(format!("{}/v1/sandboxes", server.url))
            .bearer_auth(&server.key)
            .json(&json!({"template": "minimal"}));
        tokio::spawn(async move {
            let _ = req.send().await;
        });
    }
    within(
        Duration::from_secs(60),
        "both creates start their VMs",
        async {
            loop {
                let started = std::fs::read_dir(&sandboxes)
                    .unwrap()
                    .flatten()
                    .filter(|e| !before.contains(&e.file_name().to_string_lossy().into_owned()))
                    .filter(|e| e.path().join("qemu.pid").is_file())
                    .count();
                if started >= 2 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        },
    )
    .await;
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);

    let server = start_with(data, port, &args).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let (st, v) = api.call("GET", "/v1/sandboxes?limit=100", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let listed: Vec<(String, String)> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for (i, id) in kept.iter().enumerate() {
        let state = listed
            .iter()
            .find(|(l, _)| l == id)
            .map(|(_, s)| s.as_str());
        let want = if i < 14 { "running" } else { "hibernated" };
        assert_eq!(state, Some(want), "{id} after the restart: {listed:?}");
    }
    let extra: Vec<&(String, String)> = listed.iter().filter(|(l, _)| !kept.contains(l)).collect();
    assert!(
        extra.len() <= 2 && extra.iter().all(|(_, s)| s == "running"),
        "a cut-off create is whole or gone: {extra:?}"
    );
    let dirs: Vec<String> = std::fs::read_dir(&sandboxes)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(dirs.len(), listed.len(), "a directory per row: {dirs:?}");
    for (id, _) in &listed {
        let out = api.exec(id, "echo ok").await;
        assert_eq!(out["stdout"], "ok\n", "{id}: {out}");
    }

    for (id, _) in &listed {
        let (st, v) = api
            .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
            .await;
        assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    }
    let (_, v) = api.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(v["data"].as_array().unwrap().len(), 0, "{v}");
    let left: Vec<_> = std::fs::read_dir(&sandboxes).unwrap().flatten().collect();
    assert!(left.is_empty(), "directories left: {left:?}");
    assert_eq!(vm_processes_under(&sandboxes), 0, "VM processes left");
    for c in &cgroups {
        assert!(cgroup_dirs(c).is_empty(), "cgroup {c} left");
    }
    let (ns, links, _) = names.present();
    assert!(
        ns <= 2 + 20 && links == ns,
        "netns {ns}, links {links} after the deletes"
    );
    drop(server);
    drop(guard);
    names.clean();
    assert_eq!(names.present(), (0, 0, false));
}
