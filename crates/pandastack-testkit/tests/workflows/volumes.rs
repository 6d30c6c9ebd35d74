//! Volume mounts at create: a read-write volume is mounted by one sandbox at a time, read-only
//! copies share it, and a volume on another host is refused — each refusal before any VM is
//! started.

use pandastack_api_types::{CreateSandboxRequest, CreateVolumeRequest, SandboxVolume};
use pandastack_control::ControlError;
use pandastack_store::StoreError;
use pandastack_testkit::script::{Op, ScriptedHost};

use super::{plane, Env};

fn volume(name: &str) -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: name.into(),
        size_gb: Some(1),
        from_snapshot: None,
        from_backup: None,
    }
}

fn mounting(name: &str, read_only: bool) -> CreateSandboxRequest {
    CreateSandboxRequest {
        volumes: vec![SandboxVolume {
            name: name.into(),
            path: "/data".into(),
            read_only,
        }],
        ..Default::default()
    }
}

#[tokio::test]
async fn a_read_write_volume_is_mounted_by_one_sandbox_at_a_time() {
    let env = Env::new().await;
    let vol = env
        .control
        .volumes
        .create(&env.ws, &volume("data"))
        .await
        .unwrap();
    let first = env.create(mounting("data", false)).await;
    let m = &env.host.vm(&first.id).unwrap().mounts;
    assert_eq!(m.len(), 1);
    assert_eq!(
        (m[0].volume_id.as_str(), m[0].read_only),
        (vol.row.id.as_str(), false)
    );

    let e = env
        .control
        .sandboxes
        .create(&env.ws, &mounting("data", false))
        .await
        .unwrap_err();
    match e {
        ControlError::Store(StoreError::VolumeBusy { volume, sandbox }) => {
            assert_eq!(
                (volume.as_str(), sandbox.as_str()),
                ("data", first.id.as_str())
            );
        }
        e => panic!("want VolumeBusy: {e:?}"),
    }
    assert_eq!(
        env.host.count(Op::Create),
        1,
        "no VM for the refused create"
    );
    assert_eq!(
        env.store.sandboxes().count_active(&env.ws).await.unwrap(),
        1
    );

    // Free once the holder is deleted.
    env.control.sandboxes.delete(&first).await.unwrap();
    let next = env.create(mounting("data", false)).await;
    assert!(!env.host.vm(&next.id).unwrap().mounts[0].read_only);
}

#[tokio::test]
async fn read_only_mounts_share_a_volume_with_its_writer() {
    let env = Env::new().await;
    env.control
        .volumes
        .create(&env.ws, &volume("shared"))
        .await
        .unwrap();
    let writer = env.create(mounting("shared", false)).await;
    let readers = [
        env.create(mounting("shared", true)).await,
        env.create(mounting("shared", true)).await,
    ];
    for r in &readers {
        let m = &env.host.vm(&r.id).unwrap().mounts[0];
        assert!(m.read_only);
        // The copy is taken with the writer's file system frozen: the writer is named.
        assert_eq!(
            m.holder.as_ref().map(|h| h.sandbox_id.as_str()),
            Some(writer.id.as_str())
        );
    }
    let info = env.control.volumes.get(&env.ws, "shared").await.unwrap();
    assert_eq!(info.mounts.len(), 3, "{:?}", info.mounts);
}

#[tokio::test]
async fn a_volume_on_another_host_is_refused() {
    let env = Env::new().await;
    let other_host = std::sync::Arc::new(ScriptedHost::new());
    let other = plane(&env.store, &other_host, env.dir.path(), "host-b");
    other.volumes.create(&env.ws, &volume("far")).await.unwrap();
    for read_only in [false, true] {
        let e = env
            .control
            .sandboxes
            .create(&env.ws, &mounting("far", read_only))
            .await
            .unwrap_err();
        match e {
            ControlError::Store(StoreError::VolumeElsewhere { volume, host }) => {
                assert_eq!((volume.as_str(), host.as_str()), ("far", "host-b"));
            }
            e => panic!("want VolumeElsewhere: {e:?}"),
        }
    }
    assert_eq!(env.host.count(Op::Create), 0);
    assert!(env.host.vm_ids().is_empty());
    assert_eq!(
        env.store.sandboxes().count_active(&env.ws).await.unwrap(),
        0
    );
}
