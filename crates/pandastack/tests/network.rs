//! `pandastack server` with sandbox networking on: guests get NAT to the outside but cannot reach
//! the server's own API port on the host or cloud metadata, and 200 create/delete cycles over
//! HTTP leave no network namespace, link, VM process or file behind. Needs root and nftables.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{free_port, start_with, Api};
use pandastack_testkit::net::{host_ip, net_pool, NetNames};
use pandastack_testkit::{bake, runtime_with_network};
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

    // 200 create/delete cycles: slots are reused, nothing accumulates.
    let cycles: usize = std::env::var("PANDASTACK_LEAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let sandboxes = guard.dir.path().join("sandboxes");
    for i in 0..cycles {
        let id = api.create(json!({"template": "minimal"})).await;
        if i % 50 == 0 {
            assert_eq!(api.exec(&id, "true").await["exit_code"], 0);
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
