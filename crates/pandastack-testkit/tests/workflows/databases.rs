//! Managed PostgreSQL's archive without a VM: WAL pulled from a database VM's outbox into the
//! object store, when a scheduled base backup is due, what retention deletes after one, and
//! the point-in-time restore window — which times a restore or branch is refused for and which
//! base backup and WAL an accepted one recovers from.
//!
//! The database's VM is the scripted host's: the bootstrap script's modes answer by `PS_MODE`.
//! Base backups of the past are seeded as a finished one leaves them in the object store (the
//! label record, its volume backup's record and manifest), with stop times days ago; WAL goes
//! through the VM's outbox and the archiver like PostgreSQL's.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use pandastack_api::rfc3339;
use pandastack_api_types::{BackupState, CreateBranchRequest, CreateDatabaseRequest};
use pandastack_control::{
    database_volume_name, parse_database_time, ArchiveSettings, BaseBackup, DatabaseError,
    DatabaseInfo, Databases,
};
use pandastack_host::Host;
use pandastack_objects::{Manifest, Objects, DEFAULT_CHUNK_SIZE};
use pandastack_store::now_ms;
use pandastack_testkit::script::{Op, Reply, ScriptedHost};
use serde_json::json;

use super::Env;

const HOUR: i64 = 3600 * 1000;
const DAY: i64 = 24 * HOUR;
/// Where a database VM mounts its volume (the control plane's `DATA_PATH`).
const DATA: &str = "/var/lib/pandastack-db";
/// The object store kinds of the archive (`databases/archive.rs`) and of volume backups.
const WAL: &str = "wal";
const BASES: &str = "database-backups";
const VOLUME_BACKUPS: &str = "volume-backups";

/// A base backup every hour; point-in-time restore reaches back a week.
const SETTINGS: ArchiveSettings = ArchiveSettings {
    backup_interval: Duration::from_secs(3600),
    retention: Duration::from_secs(7 * 24 * 3600),
    retry: Duration::from_secs(300),
};

/// The file name of WAL segment `seg` of timeline `tl` (log 0).
fn segment(tl: u32, seg: u32) -> String {
    format!("{tl:08X}{:08X}{seg:08X}", 0)
}

/// A backup label as `pg_backup_stop` returns it, its start in segment `seg` of timeline `tl`
/// (1 MiB segments).
fn label(tl: u32, seg: u32) -> String {
    format!(
        "START WAL LOCATION: 0/{seg:X}00028 (file {})\nCHECKPOINT LOCATION: 0/{seg:X}00060\n\
         BACKUP METHOD: streamed\nBACKUP FROM: primary\nSTART TIMELINE: {tl}\n",
        segment(tl, seg)
    )
}

/// A ready database `app` on a scripted host, archived with [`SETTINGS`], and the object store
/// it is archived to.
struct Fixture {
    env: Env,
    dbs: Databases,
    objects: Objects,
    id: String,
    sandbox: String,
}

impl Fixture {
    async fn new() -> Self {
        let host = ScriptedHost::with_catalog(&["base", "postgres"]);
        for (mode, out) in [
            ("start", "ready\n"),
            ("stop", "stopped\n"),
            ("flush-archive", "none\n"),
            ("backup-start", "0/C00028\n"),
            ("recover", "ready\nrecovered 3 \n"),
        ] {
            host.on_exec_env("PS_MODE", mode, Reply::ok(out));
        }
        let env = Env::with_host(20, 100, host).await;
        let dbs = env.control.databases.clone().with_archive(SETTINGS);
        let req = CreateDatabaseRequest {
            name: "app".into(),
            ..Default::default()
        };
        let d = dbs.create(&env.ws, &req).await.unwrap();
        let objects = Objects::open(&format!(
            "file://{}",
            env.dir.path().join("objects").display()
        ))
        .unwrap();
        Self {
            id: d.row.id.clone(),
            sandbox: d.sandbox.unwrap().id,
            dbs,
            objects,
            env,
        }
    }

    /// `backup-stop` says the backup stopped at `stop_ms`, its label starting in segment `seg`
    /// of timeline `tl`.
    fn stops_at(&self, stop_ms: i64, tl: u32, seg: u32) {
        let out = format!("0/{seg:X}00100\n{stop_ms}\n{}", label(tl, seg));
        self.env
            .host
            .on_exec_env("PS_MODE", "backup-stop", Reply::ok(out));
    }

    /// Base backup `backup` that stopped at `stop_ms` from segment `seg` of timeline `tl`, as a
    /// finished one is in the object store: its label record, its volume backup's record and
    /// (empty) manifest.
    async fn seed_base(&self, backup: &str, stop_ms: i64, tl: u32, seg: u32) -> BaseBackup {
        let ws = &self.env.ws;
        let volume = database_volume_name(&self.id);
        let object = format!("{volume}.{backup}");
        let record = json!({
            "id": backup, "volume": volume, "volume_id": "vol-seeded", "size_gb": 1,
            "bytes_uploaded": 0, "chunks": 0, "created_at": stop_ms, "finished_at": stop_ms,
        });
        self.objects
            .put_record(ws, VOLUME_BACKUPS, &object, &record)
            .await
            .unwrap();
        let manifest = Manifest {
            version: Manifest::VERSION,
            chunk_size: DEFAULT_CHUNK_SIZE,
            length: 0,
            chunks: Vec::new(),
        };
        self.objects
            .put_manifest(ws, VOLUME_BACKUPS, &object, &manifest)
            .await
            .unwrap();
        let base = BaseBackup {
            database: self.id.clone(),
            backup: backup.into(),
            volume,
            start_lsn: format!("0/{seg:X}00028"),
            stop_lsn: format!("0/{seg:X}00100"),
            stop_time_ms: stop_ms,
            label: label(tl, seg),
            created_at: stop_ms,
        };
        let value = serde_json::to_value(&base).unwrap();
        self.objects
            .put_record(ws, BASES, &format!("{}.{backup}", self.id), &value)
            .await
            .unwrap();
        base
    }

    /// Writes WAL files `names` into the VM's outbox as `archive_command` does; returns their
    /// contents.
    async fn to_outbox(&self, names: &[String]) -> BTreeMap<String, Bytes> {
        let mut written = BTreeMap::new();
        for name in names {
            let data = Bytes::from(format!("{name} WAL ").repeat(1000));
            let body = futures::stream::once({
                let data = data.clone();
                async move { Ok(data) }
            });
            self.env
                .host
                .write_file(
                    &self.sandbox,
                    &format!("{DATA}/wal-outbox/{name}"),
                    Box::pin(body),
                )
                .await
                .unwrap();
            written.insert(name.clone(), data);
        }
        written
    }

    /// Files left in the VM's outbox.
    fn outbox(&self) -> Vec<String> {
        let prefix = format!("{DATA}/wal-outbox/");
        self.env
            .host
            .vm(&self.sandbox)
            .unwrap()
            .files
            .keys()
            .filter_map(|p| p.strip_prefix(&prefix).map(str::to_owned))
            .collect()
    }

    /// Names of the archived WAL files (without `.gz`).
    async fn wal(&self) -> BTreeSet<String> {
        self.objects
            .list_blobs(&self.env.ws, WAL, &self.id)
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.name.strip_suffix(".gz").unwrap().to_owned())
            .collect()
    }

    /// Volume backup ids of the base backups recorded.
    async fn bases(&self) -> BTreeSet<String> {
        let prefix = format!("{}.", self.id);
        self.objects
            .list_records(&self.env.ws, BASES)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|r| r.strip_prefix(&prefix).map(str::to_owned))
            .collect()
    }

    /// How many times the bootstrap script ran in `mode`.
    fn runs(&self, mode: &str) -> usize {
        self.env
            .host
            .exec_envs()
            .iter()
            .filter(|(_, env)| env.get("PS_MODE").map(String::as_str) == Some(mode))
            .count()
    }

    /// The environment of the recovery run in sandbox `sandbox`.
    fn recovery_env(&self, sandbox: &str) -> BTreeMap<String, String> {
        let runs: Vec<_> = self
            .env
            .host
            .exec_envs()
            .into_iter()
            .filter(|(sb, env)| {
                sb == sandbox && env.get("PS_MODE").map(String::as_str) == Some("recover")
            })
            .collect();
        assert_eq!(runs.len(), 1, "one recovery in {sandbox}");
        runs[0].1.clone().into_iter().collect()
    }

    /// WAL files the host placed for recovery in sandbox `sandbox`, with their contents.
    fn placed(&self, sandbox: &str) -> BTreeMap<String, Bytes> {
        let prefix = format!("{DATA}/wal-restore/");
        self.env
            .host
            .vm(sandbox)
            .unwrap()
            .files
            .into_iter()
            .filter_map(|(p, d)| p.strip_prefix(&prefix).map(|n| (n.to_owned(), d)))
            .collect()
    }

    async fn restore(&self, to_ms: i64) -> Result<DatabaseInfo, DatabaseError> {
        self.dbs.restore(&self.env.ws, &self.id, to_ms).await
    }

    async fn branch(&self, name: &str, from: &str) -> Result<DatabaseInfo, DatabaseError> {
        let req = CreateBranchRequest {
            name: Some(name.into()),
            from_time: Some(from.into()),
            idle_seconds: None,
        };
        self.dbs.branch(&self.env.ws, &self.id, &req).await
    }

    /// The window a refusal of a restore of this database to `asked` names: (from, to) in unix
    /// ms, `None` when it says there is no finished base backup.
    fn refused(&self, e: DatabaseError, asked: i64) -> Option<(i64, i64)> {
        let DatabaseError::OutsideWindow {
            database,
            time,
            window,
        } = e
        else {
            panic!("want OutsideWindow: {e:?}");
        };
        assert_eq!(database, self.id);
        assert_eq!(parse_database_time("time", &time).unwrap(), asked, "{time}");
        let Some(range) = window.strip_prefix("from ") else {
            assert!(window.contains("no finished base backup"), "{window}");
            return None;
        };
        let (from, to) = range.split_once(" to ").expect(&window);
        Some((
            parse_database_time("from", from).unwrap(),
            parse_database_time("to", to).unwrap(),
        ))
    }
}

/// A database with five finished base backups of the past, on two timelines, and its WAL
/// archived (see [`SeededArchive::new`]).
struct SeededArchive {
    f: Fixture,
    now: i64,
    /// b1 … b5, oldest first.
    bases: Vec<BaseBackup>,
    /// Every archived WAL file's contents.
    wal: BTreeMap<String, Bytes>,
}

impl SeededArchive {
    /// b1 20 days ago from segment 1, b2 10 days ago from 3, b3 8 days ago from 5 (timeline 1);
    /// then a restore in place began timeline 2 in segment 6; b4 3 days ago from segment 8 and
    /// b5 2 hours ago from segment A (timeline 2). WAL: timeline 1's segments 1–7, timeline 2's
    /// history and its segments 6–B.
    async fn new() -> Self {
        let f = Fixture::new().await;
        let now = now_ms();
        let mut bases = Vec::new();
        for (backup, age, tl, seg) in [
            ("vb-b1", 20 * DAY, 1, 1),
            ("vb-b2", 10 * DAY, 1, 3),
            ("vb-b3", 8 * DAY, 1, 5),
            ("vb-b4", 3 * DAY, 2, 8),
            ("vb-b5", 2 * HOUR, 2, 0xA),
        ] {
            bases.push(f.seed_base(backup, now - age, tl, seg).await);
        }
        let mut names: Vec<String> = (1..=7).map(|s| segment(1, s)).collect();
        names.push("00000002.history".into());
        names.extend((6..=0xB).map(|s| segment(2, s)));
        let wal = f.to_outbox(&names).await;
        f.dbs.archive_pass(false).await;
        assert!(
            f.outbox().is_empty(),
            "left in the outbox: {:?}",
            f.outbox()
        );
        assert_eq!(f.wal().await, names.iter().cloned().collect());
        Self { f, now, bases, wal }
    }

    /// The archived WAL files named.
    fn wal_of(&self, names: &[String]) -> BTreeMap<String, Bytes> {
        names
            .iter()
            .map(|n| (n.clone(), self.wal[n].clone()))
            .collect()
    }
}

#[tokio::test]
async fn the_first_base_backup_is_taken_at_once_then_not_again_within_the_interval() {
    let f = Fixture::new().await;
    let asked = now_ms() - 1000;
    let e = f.restore(asked).await.unwrap_err();
    assert_eq!(f.refused(e, asked), None, "no base backup yet");

    // Archiving alone takes no base backup.
    f.stops_at(now_ms(), 1, 2);
    f.dbs.archive_pass(false).await;
    assert_eq!(f.runs("backup-start"), 0);

    f.dbs.archive_pass(true).await;
    assert_eq!((f.runs("backup-start"), f.runs("backup-stop")), (1, 1));
    assert_eq!(f.env.host.count(Op::SnapshotVolume), 1);
    let backups = f.dbs.backups(&f.env.ws, &f.id).await.unwrap();
    assert_eq!(backups.len(), 1, "{backups:?}");
    assert_eq!(backups[0].state, BackupState::Uploading);
    assert_eq!(
        f.bases().await,
        BTreeSet::from([backups[0].id.clone()]),
        "its label is recorded"
    );

    // Just taken: not due again, in this process nor in a restarted one (which reads the
    // records).
    f.dbs.archive_pass(true).await;
    let restarted = f.env.another_plane().databases.with_archive(SETTINGS);
    restarted.archive_pass(true).await;
    assert_eq!(f.runs("backup-start"), 1);

    // Not uploaded yet: still nothing to restore from.
    let asked = now_ms();
    let e = f.restore(asked).await.unwrap_err();
    assert_eq!(
        f.refused(e, asked),
        None,
        "an unfinished base backup is no base"
    );
}

#[tokio::test]
async fn retention_runs_only_after_a_scheduled_base_backup() {
    let f = Fixture::new().await;
    let now = now_ms();
    f.seed_base("vb-old", now - 20 * DAY, 1, 1).await;
    f.seed_base("vb-new", now - HOUR / 2, 1, 3).await;
    f.to_outbox(&[segment(1, 1), segment(1, 2), segment(1, 3)])
        .await;

    // The newest base backup is half an hour old: none is due, and nothing is deleted.
    f.dbs.archive_pass(true).await;
    assert_eq!(f.runs("backup-start"), 0);
    assert_eq!(
        f.bases().await,
        BTreeSet::from(["vb-old".into(), "vb-new".into()])
    );
    assert_eq!(f.wal().await.len(), 3);
}

#[tokio::test]
async fn retention_deletes_what_no_restore_inside_the_window_needs() {
    let s = SeededArchive::new().await;
    let f = &s.f;
    f.stops_at(now_ms(), 2, 0xC);

    // b5 is two hours old: a base backup is due, then retention.
    f.dbs.archive_pass(true).await;
    assert_eq!(f.runs("backup-start"), 1);
    let taken: Vec<_> = f
        .dbs
        .backups(&f.env.ws, &f.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|b| b.state == BackupState::Uploading)
        .collect();
    assert_eq!(taken.len(), 1, "{taken:?}");

    // b3 is the newest base backup before the window (a week ago): older ones go, and the WAL
    // before b3's start segment (5) on every timeline; timeline 2's history stays.
    let mut kept: BTreeSet<String> = ["vb-b3", "vb-b4", "vb-b5"].map(String::from).into();
    kept.insert(taken[0].id.clone());
    assert_eq!(f.bases().await, kept);
    let mut want: BTreeSet<String> = (5..=7).map(|s| segment(1, s)).collect();
    want.insert("00000002.history".into());
    want.extend((6..=0xB).map(|s| segment(2, s)));
    assert_eq!(f.wal().await, want);
    // The volume backups of the bases that went go too (record and manifest: the chunk
    // collector takes their bytes back); those kept stay.
    let left: BTreeSet<String> = f
        .dbs
        .backups(&f.env.ws, &f.id)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(left, kept);
    let manifests = f
        .objects
        .list_manifests(&f.env.ws, VOLUME_BACKUPS)
        .await
        .unwrap();
    assert_eq!(manifests.len(), 3, "{manifests:?}");
    assert!(!manifests
        .iter()
        .any(|m| m.ends_with(".vb-b1") || m.ends_with(".vb-b2")));

    // Another pass within the interval takes nothing and deletes nothing more.
    f.dbs.archive_pass(true).await;
    assert_eq!(f.runs("backup-start"), 1);
    assert_eq!(f.bases().await, kept);
    assert_eq!(f.wal().await, want);
}

#[tokio::test]
async fn the_restore_window_starts_at_the_oldest_base_backup_retention_keeps() {
    let s = SeededArchive::new().await;
    let f = &s.f;
    let volumes = f.env.host.count(Op::CreateVolume);
    let vms = f.env.host.vm_ids();

    // Before retention: from b1 to now; before it or in the future is refused.
    for asked in [s.bases[0].stop_time_ms - 1, now_ms() + HOUR] {
        let before = now_ms();
        let e = f.restore(asked).await.unwrap_err();
        let (from, to) = f.refused(e, asked).expect("a window");
        assert_eq!(from, s.bases[0].stop_time_ms);
        assert!((before..=now_ms()).contains(&to), "the window ends now");
    }
    // A branch from such a time is refused the same way.
    let asked = s.now - 30 * DAY;
    let e = f.branch("early", &rfc3339(asked)).await.unwrap_err();
    assert_eq!(f.refused(e, asked).unwrap().0, s.bases[0].stop_time_ms);
    let e = f.branch("early", "yesterday").await.unwrap_err();
    assert!(
        matches!(&e, DatabaseError::BadTime { field, .. } if field == "from_time"),
        "{e:?}"
    );

    // After retention: from b3, inclusive; a time b2 covered is refused now.
    f.stops_at(now_ms(), 2, 0xC);
    f.dbs.archive_pass(true).await;
    let b3 = s.bases[2].stop_time_ms;
    for asked in [s.bases[1].stop_time_ms + 1, b3 - 1] {
        let e = f.restore(asked).await.unwrap_err();
        assert_eq!(f.refused(e, asked).unwrap().0, b3);
    }

    // A refusal makes nothing.
    assert_eq!(f.env.host.count(Op::CreateVolume), volumes);
    assert_eq!(f.env.host.vm_ids(), vms);
    let dbs = f.dbs.list(&f.env.ws, None, 10).await.unwrap();
    assert_eq!(dbs.len(), 1);
}

#[tokio::test]
async fn a_restore_inside_the_window_recovers_from_the_newest_finished_base_before_it() {
    let s = SeededArchive::new().await;
    let f = &s.f;
    // A base backup taken now (still uploading, so no base yet), then retention.
    f.stops_at(now_ms() - 1000, 2, 0xC);
    f.dbs.archive_pass(true).await;
    // A segment PostgreSQL finished but the archiver has not taken yet: the restore's flush
    // takes it.
    let unarchived = f.to_outbox(&[segment(2, 0xC)]).await;
    let history = "00000002.history".to_owned();

    // Just now: b5 (the backup being uploaded is no base), its segments and the one flushed.
    let asked = now_ms();
    let b = f.branch("now", &rfc3339(asked)).await.unwrap();
    let sb = b.sandbox.unwrap().id;
    assert_eq!(f.runs("flush-archive"), 1);
    assert!(f.outbox().is_empty());
    let env = f.recovery_env(&sb);
    assert_eq!(env["PS_BACKUP_LABEL"], s.bases[4].label);
    assert_eq!(
        parse_database_time("t", &env["PS_TARGET_TIME"]).unwrap(),
        asked
    );
    let mut want = s.wal_of(&[history.clone(), segment(2, 0xA), segment(2, 0xB)]);
    want.extend(unarchived.clone());
    assert_eq!(f.placed(&sb), want);

    // A day ago: b4, timeline 2 from its start segment (8).
    let b = f.branch("day", &rfc3339(s.now - DAY)).await.unwrap();
    let sb = b.sandbox.unwrap().id;
    assert_eq!(f.recovery_env(&sb)["PS_BACKUP_LABEL"], s.bases[3].label);
    let mut want = s.wal_of(std::slice::from_ref(&history));
    want.extend(s.wal_of(&(8..=0xB).map(|n| segment(2, n)).collect::<Vec<_>>()));
    want.extend(unarchived.clone());
    assert_eq!(f.placed(&sb), want);

    // In place, to the window's first instant: b3 and every segment from 5 on, both timelines.
    let old_volume = f
        .env
        .store
        .databases()
        .by_id(&f.id)
        .await
        .unwrap()
        .volume_id;
    let b3 = &s.bases[2];
    let d = f.restore(b3.stop_time_ms).await.unwrap();
    assert_eq!(d.row.id, f.id);
    let types: Vec<String> = super::events_of(&f.env.control.events, &f.env.ws, &f.id)
        .await
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    assert_eq!(types, ["database.ready", "database.restored"]);
    let sb = d.sandbox.unwrap().id;
    assert_eq!(d.row.sandbox_id.as_deref(), Some(sb.as_str()));
    let env = f.recovery_env(&sb);
    assert_eq!(env["PS_BACKUP_LABEL"], b3.label);
    assert_eq!(
        parse_database_time("t", &env["PS_TARGET_TIME"]).unwrap(),
        b3.stop_time_ms
    );
    let mut names: Vec<String> = (5..=7).map(|n| segment(1, n)).collect();
    names.push(history);
    names.extend((6..=0xB).map(|n| segment(2, n)));
    let mut want = s.wal_of(&names);
    want.extend(unarchived);
    assert_eq!(f.placed(&sb), want);
    // The restored volume is the database's now; the old VM and volume are gone.
    assert_ne!(d.row.volume_id, old_volume);
    let mounts = f.env.host.vm(&sb).unwrap().mounts;
    assert_eq!(mounts.len(), 1);
    assert_eq!(mounts[0].volume_id, d.row.volume_id);
    assert!(f.env.host.vm(&f.sandbox).is_none());
    assert!(f
        .env
        .control
        .volumes
        .get(&f.env.ws, &database_volume_name(&f.id))
        .await
        .is_ok());
    assert!(!f.env.host.volume_ids().await.unwrap().contains(&old_volume));

    // The new timeline gets its own base backup at the next check, though one was taken
    // minutes ago (of the old timeline). (The branches above are databases of their own, with
    // their own first backups.)
    let starts_in = |sandbox: &str| {
        f.env
            .host
            .exec_envs()
            .iter()
            .filter(|(s, env)| {
                s == sandbox && env.get("PS_MODE").map(String::as_str) == Some("backup-start")
            })
            .count()
    };
    assert_eq!(starts_in(&sb), 0);
    f.stops_at(now_ms(), 3, 0xD);
    f.dbs.archive_pass(true).await;
    assert_eq!(starts_in(&sb), 1, "a base backup of the new timeline");
    f.dbs.archive_pass(true).await;
    assert_eq!(starts_in(&sb), 1, "then not again within the interval");
}

/// [`SETTINGS`] with a failed base backup tried again after 1 s.
const QUICK_RETRY: ArchiveSettings = ArchiveSettings {
    retry: Duration::from_secs(1),
    ..SETTINGS
};

#[tokio::test]
async fn a_base_backup_whose_upload_failed_is_taken_again_after_the_retry_not_the_interval() {
    let f = Fixture::new().await;
    let dbs = f.dbs.clone().with_archive(QUICK_RETRY);
    f.stops_at(now_ms(), 1, 2);
    dbs.archive_pass(true).await;
    dbs.archive_pass(true).await;
    assert_eq!(f.runs("backup-start"), 1, "uploading: not due again");

    // Its upload fails for good.
    let taken = dbs.backups(&f.env.ws, &f.id).await.unwrap();
    assert_eq!(taken.len(), 1, "{taken:?}");
    let mut row = f
        .env
        .store
        .volumes()
        .backup_by_id(&taken[0].id)
        .await
        .unwrap();
    row.state = "failed".into();
    row.error = Some("the object store refused the upload".into());
    row.finished_at = Some(now_ms());
    f.env.store.volumes().finish_backup(&row).await.unwrap();

    // Seen at the next check (in this process, and in a restarted one reading the records):
    // due `retry` after the failed one, not an hour after it.
    tokio::time::sleep(QUICK_RETRY.retry + Duration::from_millis(100)).await;
    f.stops_at(now_ms(), 1, 3);
    let restarted = f.env.another_plane().databases.with_archive(QUICK_RETRY);
    restarted.archive_pass(true).await;
    assert_eq!(
        f.runs("backup-start"),
        2,
        "the failed upload's backup is taken again"
    );
    dbs.archive_pass(true).await;
    restarted.archive_pass(true).await;
    assert_eq!(
        f.runs("backup-start"),
        2,
        "the new one is uploading: not due"
    );
}

#[tokio::test]
async fn a_failing_base_backup_still_applies_retention_and_waits_the_retry() {
    let s = SeededArchive::new().await;
    let f = &s.f;
    // pg_backup_start fails (the VM's PostgreSQL refuses it).
    f.env.host.on_exec_env(
        "PS_MODE",
        "backup-start",
        Reply::exit(1).stderr("ERROR: a backup is already in progress"),
    );

    // b5 is two hours old: an attempt is due; it fails, and retention runs all the same.
    f.dbs.archive_pass(true).await;
    assert_eq!(f.runs("backup-start"), 1);
    let kept: BTreeSet<String> = ["vb-b3", "vb-b4", "vb-b5"].map(String::from).into();
    assert_eq!(f.bases().await, kept, "retention after a failed attempt");
    assert!(
        !f.wal().await.contains(&segment(1, 4)),
        "WAL no restore in the window needs is deleted: {:?}",
        f.wal().await
    );

    // Not tried at every check: next after `retry` (300 s here).
    f.dbs.archive_pass(true).await;
    assert_eq!(f.runs("backup-start"), 1);
}
