//! Sandbox networking with real guests: every VM runs in its own network namespace with a TAP,
//! NAT to the outside and the default egress policy; slots are reused and nothing leaks.
//! Needs root and nftables (CI runs as root).

use std::io::Write;
use std::net::TcpListener;
use std::time::Duration;

use pandastack_qemu::QemuVm;
use pandastack_runtime::Sandbox;
use pandastack_testkit::net::{host_ip, net_pool};
use pandastack_testkit::{bake, exec, runtime_with_network, within};

const STEP: Duration = Duration::from_secs(120);

/// A TCP connect from inside the guest: `open <banner>` or `blocked <error>`.
const PROBE: &str = r#"
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), 3)
    s.settimeout(3)
    if len(sys.argv) > 3:
        s.sendall(sys.argv[3].encode().replace(b"|", b"\r\n"))
    print("open", s.recv(16).decode(errors="replace").split("\n")[0])
except Exception as e:
    print("blocked", type(e).__name__)
"#;

async fn probe(sb: &Sandbox<QemuVm>, host: &str, port: u16, send: &str) -> String {
    let out = exec(
        &sb.agent,
        &format!("cat > /tmp/probe.py <<'EOF'\n{PROBE}\nEOF\npython3 /tmp/probe.py {host} {port} '{send}'"),
    )
    .await;
    assert_eq!(out.exit_code, 0, "probe failed: {out:?}");
    out.stdout.trim().to_owned()
}

/// A TCP server on all host addresses that greets every connection.
fn host_listener() -> u16 {
    let l = TcpListener::bind("0.0.0.0:0").expect("bind");
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let _ = c.write_all(b"host-service\n");
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread")]
async fn guests_reach_the_internet_but_not_the_host_or_metadata() {
    let net = net_pool("tnet1", "10.202.0.0/24").await;
    let rt = runtime_with_network(&net).await;
    let t = bake(&rt, "net").await;
    assert!(t.network, "template baked with a NIC");
    let a = within(STEP, "create a", rt.create(&t, "neta"))
        .await
        .unwrap();
    let b = within(STEP, "create b", rt.create(&t, "netb"))
        .await
        .unwrap();
    let (sa, sb) = (a.info.net_slot.unwrap(), b.info.net_slot.unwrap());
    assert_ne!(sa, sb, "each sandbox has its own slot");

    // Same guest-side configuration in every sandbox (baked once), unique by namespace.
    for sb in [&a, &b] {
        let out = exec(
            &sb.agent,
            "cat /sys/class/net/eth0/address; cat /etc/resolv.conf",
        )
        .await;
        assert!(out.stdout.contains("02:50:53:00:00:02"), "{out:?}");
        assert!(out.stdout.contains("10.88.0.1"), "{out:?}");
    }

    // Outbound: DNS through the namespace and NAT to a public host (a package mirror, which
    // this machine can reach), from both sandboxes at once.
    let http = "HEAD / HTTP/1.0|Host: deb.debian.org||";
    let (ra, rb) = tokio::join!(
        probe(&a, "deb.debian.org", 80, http),
        probe(&b, "deb.debian.org", 80, http)
    );
    assert!(ra.starts_with("open HTTP/"), "sandbox a outbound: {ra}");
    assert!(rb.starts_with("open HTTP/"), "sandbox b outbound: {rb}");

    // The host: neither its main address nor the slot's gateway end nor loopback.
    let port = host_listener();
    let slot = net.pool.slot(sa).expect("slot");
    for ip in [host_ip(), slot.host_addr.to_string(), "127.0.0.1".into()] {
        let r = probe(&a, &ip, port, "").await;
        assert!(r.starts_with("blocked"), "host {ip}:{port} reachable: {r}");
    }
    // Link-local cloud metadata, and a private range.
    let r = probe(&a, "169.254.169.254", 80, "").await;
    assert!(r.starts_with("blocked"), "metadata reachable: {r}");
    let r = probe(&a, "192.168.1.1", 80, "").await;
    assert!(r.starts_with("blocked"), "private range reachable: {r}");

    // Hibernate gives the slot back; wake takes one and the network works again.
    let h = match rt.hibernate(b).await {
        Ok(h) => h,
        Err((e, _)) => panic!("hibernate: {e:#}"),
    };
    assert_eq!(h.info.net_slot, None);
    let b = match within(STEP, "wake", rt.wake(h)).await {
        Ok(sb) => sb,
        Err((e, _)) => panic!("wake: {e:#}"),
    };
    assert!(b.info.net_slot.is_some());
    let r = probe(&b, "deb.debian.org", 80, http).await;
    assert!(r.starts_with("open HTTP/"), "after wake: {r}");

    rt.destroy(a).await.unwrap();
    rt.destroy(b).await.unwrap();
    assert_eq!(net.pool.stats().in_use, 0, "every slot returned");
}

#[tokio::test(flavor = "multi_thread")]
async fn create_destroy_cycles_reuse_slots_and_leak_nothing() {
    let cycles: usize = std::env::var("PANDASTACK_LEAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let net = net_pool("tnet2", "10.202.1.0/24").await;
    let rt = runtime_with_network(&net).await;
    let t = bake(&rt, "cycle").await;
    let sandboxes = rt.data().root().join("sandboxes");
    let entries = || std::fs::read_dir(&sandboxes).unwrap().count();
    let qemus = |dir: &std::path::Path| {
        std::process::Command::new("pgrep")
            .args(["-f", &dir.display().to_string()])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
            .unwrap_or(0)
    };
    for i in 0..cycles {
        let id = format!("c{i}");
        let sb = within(STEP, "create", rt.create(&t, &id)).await.unwrap();
        if i % 50 == 0 {
            assert_eq!(exec(&sb.agent, "true").await.exit_code, 0);
        }
        rt.destroy(sb).await.unwrap();
    }
    let stats = net.pool.stats();
    assert_eq!(
        stats.in_use, 0,
        "slots held after {cycles} cycles: {stats:?}"
    );
    assert!(
        stats.free <= 2,
        "the pool grew instead of reusing slots: {stats:?}"
    );
    let (ns, links, table) = net.names.present();
    assert_eq!((ns, links, table), (stats.free, stats.free, true));
    assert_eq!(entries(), 0, "sandbox directories left behind");
    assert_eq!(qemus(&sandboxes), 0, "VM processes left behind");
}
