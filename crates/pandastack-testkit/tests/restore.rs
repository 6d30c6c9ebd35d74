//! Bake a snapshot of a booted guest, restore clones from it copy-on-write, and check that clones
//! are independent: separate disks and memory, distinct identity and RNG state.

use std::time::{Duration, Instant};

use pandastack_guest_proto::v1::{self, agent_client::AgentClient};
use pandastack_testkit::{agent, boot, exec, fixtures, restore_clone};
use pandastack_vm::Vm;

#[tokio::test(flavor = "multi_thread")]
async fn bake_then_restore_independent_clones() {
    // Bake: boot, leave a running process with state in memory, detach the agent, snapshot.
    let base = boot().await;
    let ch = agent(&base, Duration::from_secs(120)).await;
    let out = exec(&ch, "echo baked > /root/marker; (i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; sleep 0.2; done) >/dev/null 2>&1 & echo started").await;
    assert_eq!(out.stdout, "started\n");
    tokio::time::sleep(Duration::from_millis(600)).await;
    AgentClient::new(ch.clone())
        .detach(v1::Empty {})
        .await
        .unwrap();
    drop(ch);
    // As a bake does: a state saved before QEMU saw the host side close holds the channel half
    // closed, and a clone restored from it may never answer (1 run in 7 here without this).
    base.agent_disconnected(Duration::from_secs(10))
        .await
        .unwrap();
    base.pause().await.unwrap();
    let state = base.dir.path().join("state");
    let t = Instant::now();
    base.save_state(&state).await.unwrap();
    eprintln!("device state saved in {:?}", t.elapsed());
    base.stop().await.unwrap();
    let mem = base.dir.path().join("mem");
    let disk = base.dir.path().join("rootfs.ext4");

    // Two clones from the same snapshot.
    let mut clones = Vec::new();
    for name in ["clone-a", "clone-b"] {
        let t = Instant::now();
        let (guard, ch) = restore_clone(&mem, &state, &disk, name).await;
        eprintln!("{name}: restored and ready in {:?}", t.elapsed());
        clones.push((guard, ch));
    }

    let mut seen_rng = Vec::new();
    for (i, (_vm, ch)) in clones.iter().enumerate() {
        // Memory and disk from before the snapshot are there, and the process still counts.
        let out = exec(ch, "cat /root/marker; a=$(cat /tmp/counter); sleep 1; b=$(cat /tmp/counter); [ $b -gt $a ] && echo counting").await;
        assert_eq!(
            out.stdout, "baked\ncounting\n",
            "clone {i} stderr: {}",
            out.stderr
        );
        let out = exec(
            ch,
            "hostname; cat /etc/machine-id; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'",
        )
        .await;
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines[0], ["clone-a", "clone-b"][i]);
        seen_rng.push((lines[1].to_string(), lines[2].to_string()));
        // Each clone writes its own file.
        let out = exec(ch, &format!("echo {i} > /root/own; sync; cat /root/own")).await;
        assert_eq!(out.stdout, format!("{i}\n"));
    }
    assert_ne!(seen_rng[0].0, seen_rng[1].0, "machine ids must differ");
    assert_ne!(seen_rng[0].1, seen_rng[1].1, "RNG output must differ");
    // No write of one clone is visible in the other.
    let out = exec(&clones[0].1, "cat /root/own").await;
    assert_eq!(out.stdout, "0\n");
    let out = exec(&clones[1].1, "cat /root/own").await;
    assert_eq!(out.stdout, "1\n");

    for (vm, _) in &clones {
        vm.stop().await.unwrap();
    }
    let _ = fixtures();
}
