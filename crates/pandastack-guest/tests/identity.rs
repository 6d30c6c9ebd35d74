//! PostRestore and ConfigureNetwork against the real agent binary.
//!
//! Bad requests are refused before anything changes, so those checks run anywhere. Applying an
//! identity or a network needs root; that test runs the agent in its own network, mount and UTS
//! namespaces, with a TAP device as its only interface and temporary files bind-mounted over the
//! /etc files it writes, so the host is not touched. It is skipped (with a message) without root.
//! The clock step is not exercised here: CLOCK_REALTIME is not namespaced, and a test must not
//! set the host's clock.

mod common;

use std::path::Path;
use std::process::Command;

use common::{connect, run, start, start_msg, AGENT};
use pandastack_guest_proto::v1::{self, agent_client::AgentClient};

#[tokio::test]
async fn bad_identity_and_network_requests_are_refused() {
    let a = start();
    let ch = connect(&a).await;
    let mut agent = AgentClient::new(ch);
    let good = v1::PostRestoreRequest {
        unix_time_ns: 0,
        entropy: vec![7; 32],
        hostname: "clone-1".into(),
        machine_id: "0123456789abcdef0123456789abcdef".into(),
        network: None,
        // Outside a VM the agent leaves the virtio bus alone; the field is accepted.
        free_page_reporting: v1::FreePageReporting::Off.into(),
    };
    let bad = [
        v1::PostRestoreRequest {
            entropy: vec![7; 31],
            ..good.clone()
        },
        v1::PostRestoreRequest {
            machine_id: "0123456789ABCDEF0123456789ABCDEF".into(),
            ..good.clone()
        },
        v1::PostRestoreRequest {
            machine_id: "0123".into(),
            ..good.clone()
        },
        v1::PostRestoreRequest {
            hostname: "no spaces".into(),
            ..good.clone()
        },
        v1::PostRestoreRequest {
            network: Some(v1::NetworkConfig {
                address_cidr: "10.0.0.300/24".into(),
                ..Default::default()
            }),
            ..good.clone()
        },
    ];
    for req in bad {
        let err = agent.post_restore(req.clone()).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{req:?}: {err}");
    }
    let err = agent
        .configure_network(v1::NetworkConfig {
            gateway: "not-an-ip".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

/// Starts the agent in fresh network, mount and UTS namespaces with a TUN `tun0` (not Ethernet,
/// lower index) and a TAP `eth0`, a sysfs of
/// that network namespace, and the /etc files it writes replaced by copies in `dir`. `None` if
/// that is not possible here.
fn isolated_agent() -> Option<common::Agent> {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("skipped: applying a network and an identity needs root");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let etc = ["resolv.conf", "hostname", "hosts", "machine-id"];
    let mut binds = String::new();
    for f in etc {
        let copy = dir.path().join(f);
        std::fs::write(
            &copy,
            std::fs::read(Path::new("/etc").join(f)).unwrap_or_default(),
        )
        .unwrap();
        binds.push_str(&format!(
            "mount --bind {} /etc/{f} || exit 98\n",
            copy.display()
        ));
    }
    let socket = dir.path().join("agent.sock");
    let script = format!(
        "ip tuntap add tun0 mode tun && ip tuntap add eth0 mode tap || exit 97\n{binds}\
         mount -t sysfs sysfs /sys || exit 99\n\
         exec {AGENT} serve --unix {}\n",
        socket.display()
    );
    let probe = Command::new("unshare")
        .args(["--net", "--mount", "--uts", "sh", "-c"])
        .arg("ip tuntap add tun0 mode tun && ip tuntap add eth0 mode tap && mount --bind /etc/hostname /etc/hostname")
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("skipped: cannot create namespaces with a TAP device here (unshare, ip tuntap)");
        return None;
    }
    let mut cmd = Command::new("unshare");
    cmd.args(["--net", "--mount", "--uts", "sh", "-c"])
        .arg(script);
    Some(common::spawn(cmd, dir, socket))
}

async fn sh(ch: &tonic::transport::Channel, cmd: &str) -> String {
    let o = run(
        ch,
        vec![start_msg(v1::ExecStart {
            shell: cmd.into(),
            ..Default::default()
        })],
    )
    .await;
    assert_eq!(o.code(), 0, "{cmd}: {}", o.stderr());
    o.stdout()
}

#[tokio::test]
async fn network_and_identity_are_applied() {
    let Some(a) = isolated_agent() else { return };
    let ch = connect(&a).await;
    let mut agent = AgentClient::new(ch.clone());

    // No interface named: the first Ethernet link (eth0, not tun0).
    agent
        .configure_network(v1::NetworkConfig {
            interface: String::new(),
            address_cidr: "10.99.0.2/24".into(),
            gateway: "10.99.0.1".into(),
            dns: vec!["192.0.2.53".into(), "192.0.2.54".into()],
            mtu: 1400,
            mac: "02:00:00:aa:bb:cc".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        sh(
            &ch,
            "cat /sys/class/net/eth0/mtu /sys/class/net/eth0/address"
        )
        .await,
        "1400\n02:00:00:aa:bb:cc\n"
    );
    assert_eq!(
        sh(&ch, "ip -4 -o addr show dev eth0 | awk '{print $4}'").await,
        "10.99.0.2/24\n"
    );
    assert!(sh(&ch, "ip route show default")
        .await
        .starts_with("default via 10.99.0.1 dev eth0"),);
    // lo is up (its flags include IFF_UP = 0x1).
    let lo_flags = sh(&ch, "cat /sys/class/net/lo/flags").await;
    let lo_flags = u32::from_str_radix(lo_flags.trim().trim_start_matches("0x"), 16).unwrap();
    assert_eq!(lo_flags & 1, 1);
    assert_eq!(
        std::fs::read_to_string(a.dir.path().join("resolv.conf")).unwrap(),
        "nameserver 192.0.2.53\nnameserver 192.0.2.54\n"
    );

    // PostRestore: new identity, and the network reconfigured (old IPv4 address flushed).
    let resp = agent
        .post_restore(v1::PostRestoreRequest {
            unix_time_ns: 0,
            entropy: (0..64).map(|i| i as u8 ^ 0x5a).collect(),
            hostname: "clone-7".into(),
            machine_id: "0123456789abcdef0123456789abcdef".into(),
            network: Some(v1::NetworkConfig {
                interface: "eth0".into(),
                address_cidr: "10.99.1.9/24".into(),
                gateway: "10.99.1.1".into(),
                ..Default::default()
            }),
            free_page_reporting: v1::FreePageReporting::On.into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.clock_step_ms, 0);
    let h = agent.health(v1::Empty {}).await.unwrap().into_inner();
    assert_eq!(h.hostname, "clone-7");
    assert_eq!(h.machine_id, "0123456789abcdef0123456789abcdef");
    assert_eq!(sh(&ch, "hostname").await, "clone-7\n");
    let read = |f: &str| std::fs::read_to_string(a.dir.path().join(f)).unwrap();
    assert_eq!(read("hostname"), "clone-7\n");
    assert_eq!(read("machine-id"), "0123456789abcdef0123456789abcdef\n");
    let hosts = read("hosts");
    assert_eq!(
        hosts
            .lines()
            .filter(|l| l.starts_with("127.0.1.1"))
            .collect::<Vec<_>>(),
        ["127.0.1.1\tclone-7"],
        "{hosts}"
    );
    assert_eq!(
        sh(&ch, "ip -4 -o addr show dev eth0 | awk '{print $4}'").await,
        "10.99.1.9/24\n"
    );
    assert!(sh(&ch, "ip route show default")
        .await
        .starts_with("default via 10.99.1.1 dev eth0"));

    let err = agent
        .configure_network(v1::NetworkConfig {
            interface: "eth9".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
}
