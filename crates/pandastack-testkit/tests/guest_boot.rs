//! Boots the `minimal` image under QEMU (TCG here) and talks to the real guest agent over the real
//! virtio-serial channel.

use std::time::{Duration, Instant};

use pandastack_guest_proto::v1::{self, agent_client::AgentClient, files_client::FilesClient};
use pandastack_testkit::{agent, boot, exec};
use pandastack_vm::Vm;

const BOOT_TIMEOUT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread")]
async fn cold_boot_exec_and_file_round_trip() {
    let started = Instant::now();
    let vm = boot().await;
    let ch = agent(&vm, BOOT_TIMEOUT).await;
    eprintln!("boot to agent ready: {:?}", started.elapsed());

    let health = AgentClient::new(ch.clone())
        .health(v1::Empty {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        health.protocol_version,
        pandastack_guest_proto::PROTOCOL_VERSION
    );
    assert!(!health.boot_id.is_empty());

    let out = exec(
        &ch,
        "echo hello from $(uname -s); python3 -c 'print(6*7)'; exit 3",
    )
    .await;
    assert_eq!(
        out.stdout, "hello from Linux\n42\n",
        "stderr: {}",
        out.stderr
    );
    assert_eq!(out.exit_code, 3);

    // PID 1 is the agent and the basic mounts are there; cgroup2 with `favordynmods` (without
    // it each command's move into its own cgroup waits for an RCU grace period), and this
    // command runs in a cgroup of its own.
    let out = exec(
        &ch,
        "cat /proc/1/comm; grep -c 'cgroup2 .*favordynmods' /proc/mounts; ls /dev/pts/ptmx; \
         cut -d/ -f2 /proc/self/cgroup",
    )
    .await;
    assert_eq!(
        out.stdout, "pandastack-gues\n1\n/dev/pts/ptmx\npandastack\n",
        "stderr: {}",
        out.stderr
    );
    // Commands back to back each run in a cgroup of their own: a finished command's clean-up
    // once swept the next command's cgroup away before that command had entered it.
    for i in 0..20 {
        let out = exec(&ch, "cut -d/ -f2 /proc/self/cgroup").await;
        assert_eq!(out.stdout, "pandastack\n", "command {i}: {}", out.stderr);
    }

    // A 4 MiB file through the Files service, checked inside the guest and read back.
    let data: Vec<u8> = (0..4 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let mut files = FilesClient::new(ch.clone());
    let mut msgs = vec![v1::WriteInput {
        input: Some(v1::write_input::Input::Header(v1::WriteHeader {
            path: "/root/blob.bin".into(),
            mode: 0o600,
            create_parents: true,
            append: false,
        })),
    }];
    for chunk in data.chunks(256 * 1024) {
        msgs.push(v1::WriteInput {
            input: Some(v1::write_input::Input::Data(chunk.to_vec())),
        });
    }
    let written = files
        .write(futures::stream::iter(msgs))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(written.bytes_written, data.len() as u64);
    let out = exec(&ch, "stat -c '%s %a' /root/blob.bin").await;
    assert_eq!(out.stdout.trim(), format!("{} 600", data.len()));
    let mut stream = files
        .read(v1::ReadRequest {
            path: "/root/blob.bin".into(),
            offset: 0,
            length: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut back = Vec::new();
    while let Some(c) = stream.message().await.unwrap() {
        back.extend_from_slice(&c.data);
    }
    assert!(
        back == data,
        "read back {} bytes, differing from what was written",
        back.len()
    );

    vm.stop().await.unwrap();
    assert!(!vm.alive());
}
