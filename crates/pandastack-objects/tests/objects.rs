//! The object storage suite, run against both backends: a local directory (a tempdir) and a
//! real S3 API server (`PANDASTACK_TEST_S3=s3://bucket/prefix` plus the `AWS_*` variables;
//! `scripts/test-s3.sh start` runs moto on loopback and prints them). Without
//! `PANDASTACK_TEST_S3` the S3 half is skipped with a message, unless `CI` is set: then it fails.
//! Every test gets a fresh prefix on each backend.

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use object_store::ObjectStoreExt;
use pandastack_objects::{ChunkRef, Manifest, Objects, ObjectsError, DEFAULT_CHUNK_SIZE};

const MIB: u64 = 1 << 20;

/// One fresh store on one backend.
struct Case {
    backend: &'static str,
    objects: Objects,
    /// How to write behind the store's back (for corrupting a chunk).
    raw: Box<dyn object_store::ObjectStore>,
    /// Keeps the local store's directory.
    _dir: Option<tempfile::TempDir>,
}

impl Case {
    /// Replaces an object's bytes directly in the backend.
    async fn overwrite(&self, key: &str, data: Vec<u8>) {
        self.raw
            .put(&object_store::path::Path::from(key), data.into())
            .await
            .unwrap();
    }
}

fn cases() -> Vec<Case> {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let objects = Objects::open(&format!("file://{}", root.display())).unwrap();
    let raw = object_store::local::LocalFileSystem::new_with_prefix(&root).unwrap();
    let mut out = vec![Case {
        backend: "local",
        objects,
        raw: Box::new(raw),
        _dir: Some(dir),
    }];
    match std::env::var("PANDASTACK_TEST_S3") {
        Ok(url) => {
            let url = format!(
                "{}/t-{:016x}",
                url.trim_end_matches('/'),
                rand::random::<u64>()
            );
            let objects = Objects::open(&url).unwrap();
            let (bucket, prefix) = url["s3://".len()..].split_once('/').unwrap();
            let raw = object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_allow_http(true)
                .build()
                .unwrap();
            let raw = object_store::prefix::PrefixStore::new(raw, prefix);
            out.push(Case {
                backend: "s3",
                objects,
                raw: Box::new(raw),
                _dir: None,
            });
        }
        Err(_) if std::env::var_os("CI").is_some() => panic!(
            "PANDASTACK_TEST_S3 is not set (and CI is): run `eval \"$(scripts/test-s3.sh start)\"` \
             first"
        ),
        Err(_) => eprintln!(
            "S3 backend skipped: PANDASTACK_TEST_S3 is not set (eval \"$(scripts/test-s3.sh \
             start)\" to test it)"
        ),
    }
    out
}

/// Fast pseudo-random bytes (xorshift), different for each `seed`.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A file of `len` bytes (sparse) with `parts` written at their offsets.
fn file_with(dir: &Path, name: &str, len: u64, parts: &[(u64, Vec<u8>)]) -> PathBuf {
    let path = dir.join(name);
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(len).unwrap();
    for (off, data) in parts {
        f.write_all_at(data, *off).unwrap();
    }
    f.sync_all().unwrap();
    path
}

fn same_bytes(a: &Path, b: &Path) -> bool {
    std::fs::read(a).unwrap() == std::fs::read(b).unwrap()
}

fn allocated(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().blocks() * 512
}

#[tokio::test]
async fn sparse_file_round_trip_keeps_holes() {
    let tmp = tempfile::tempdir().unwrap();
    let cs = DEFAULT_CHUNK_SIZE;
    let len = 16 * cs + 12345;
    // Chunk 0 random, chunk 3 partly random, chunk 7 written with zeros (allocated, but a hole
    // for the store), a random tail in the short last chunk, holes everywhere else.
    let src = file_with(
        tmp.path(),
        "src",
        len,
        &[
            (0, noise(cs as usize, 1)),
            (3 * cs + 4096, noise(100 << 10, 2)),
            (7 * cs, vec![0; cs as usize]),
            (16 * cs, noise(12345, 3)),
        ],
    );
    for c in cases() {
        let up = c.objects.upload_file("ws-a", &src, cs).await.unwrap();
        let s = up.stats;
        assert_eq!(
            (s.chunks, s.holes, s.uploaded, s.skipped_existing),
            (17, 14, 3, 0),
            "{}",
            c.backend
        );
        assert_eq!(s.bytes_uploaded, 2 * cs + 12345, "{}", c.backend);
        let m = &up.manifest;
        assert_eq!((m.length, m.chunk_size), (len, cs));
        for (i, chunk) in m.chunks.iter().enumerate() {
            assert_eq!(
                matches!(chunk, ChunkRef::Data(_)),
                [0, 3, 16].contains(&i),
                "chunk {i}"
            );
        }
        c.objects
            .put_manifest("ws-a", "backup", "b1", m)
            .await
            .unwrap();
        let m2 = c
            .objects
            .get_manifest("ws-a", "backup", "b1")
            .await
            .unwrap();
        assert_eq!(&m2, m);

        let dest = tmp.path().join(format!("dest-{}", c.backend));
        let d = c.objects.download_file("ws-a", &m2, &dest).await.unwrap();
        assert_eq!((d.chunks, d.holes), (3, 14), "{}", c.backend);
        assert_eq!(std::fs::metadata(&dest).unwrap().len(), len);
        assert!(same_bytes(&src, &dest), "{}: bytes differ", c.backend);
        // Holes stay holes: only the non-zero data is allocated (the zero-filled chunk 7,
        // allocated in the source, is a hole in the copy, and so are the zeros of chunk 3).
        let (a_src, a_dest) = (allocated(&src), allocated(&dest));
        assert!(
            a_dest <= cs + (100 << 10) + 12345 + 64 * 1024,
            "{}: {a_dest} bytes allocated",
            c.backend
        );
        assert!(a_dest + cs <= a_src, "{}: {a_dest} vs {a_src}", c.backend);
    }
}

#[tokio::test]
async fn a_second_upload_of_the_same_file_uploads_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let src = file_with(tmp.path(), "src", 10 * MIB, &[(MIB, noise(8 << 20, 4))]);
    for c in cases() {
        let first = c.objects.upload_file("ws-a", &src, MIB).await.unwrap();
        assert_eq!(first.stats.uploaded, 8, "{}", c.backend);
        let again = c.objects.upload_file("ws-a", &src, MIB).await.unwrap();
        assert_eq!(
            (again.stats.uploaded, again.stats.skipped_existing),
            (0, 8),
            "{}",
            c.backend
        );
        assert_eq!(again.stats.bytes_uploaded, 0);
        assert_eq!(again.manifest, first.manifest);
        // Writing the same manifest twice is a success too.
        for _ in 0..2 {
            c.objects
                .put_manifest("ws-a", "backup", "same", &again.manifest)
                .await
                .unwrap();
        }
    }
}

#[tokio::test]
async fn changing_10_mib_of_64_uploads_only_the_changed_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let cs = DEFAULT_CHUNK_SIZE;
    let src = file_with(tmp.path(), "src", 64 * MIB, &[(0, noise(64 << 20, 5))]);
    for (n, c) in cases().into_iter().enumerate() {
        let first = c.objects.upload_file("ws-a", &src, cs).await.unwrap();
        assert_eq!(first.stats.uploaded, 16, "{}", c.backend);
        // 10 MiB at an unaligned offset: chunks 1, 2 and 3 change.
        let f = std::fs::OpenOptions::new().write(true).open(&src).unwrap();
        f.write_all_at(&noise(10 << 20, 50 + n as u64), 5 * MIB + 4096)
            .unwrap();
        drop(f);
        let second = c.objects.upload_file("ws-a", &src, cs).await.unwrap();
        let s = second.stats;
        eprintln!("{}: incremental upload {s:?}", c.backend);
        assert_eq!((s.uploaded, s.skipped_existing), (3, 13), "{}", c.backend);
        assert!(s.bytes_uploaded <= 20 * MIB, "{}", c.backend);
        let dest = tmp.path().join("dest");
        c.objects
            .download_file("ws-a", &second.manifest, &dest)
            .await
            .unwrap();
        assert!(same_bytes(&src, &dest), "{}", c.backend);
    }
}

#[tokio::test]
async fn an_interrupted_upload_resumes_with_only_the_missing_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let cs = 256 << 10;
    let src = file_with(tmp.path(), "src", 32 * MIB, &[(0, noise(32 << 20, 6))]);
    let total = 32 * MIB / cs;
    for c in cases() {
        let objects = c.objects.clone();
        let path = src.clone();
        let upload = tokio::spawn(async move { objects.upload_file("ws-a", &path, cs).await });
        // "Crash" once a few chunks are stored.
        loop {
            if c.objects.list_chunks("ws-a").await.unwrap().len() >= 3 {
                break;
            }
            assert!(
                !upload.is_finished(),
                "{}: upload finished first",
                c.backend
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        upload.abort();
        let _ = upload.await;
        // Writes already handed to the backend may still land; wait until nothing changes.
        let mut stored = c.objects.list_chunks("ws-a").await.unwrap().len() as u64;
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = c.objects.list_chunks("ws-a").await.unwrap().len() as u64;
            if now == stored {
                break;
            }
            stored = now;
        }
        assert!(
            stored > 0 && stored < total,
            "{}: {stored} of {total}",
            c.backend
        );
        let retry = c.objects.upload_file("ws-a", &src, cs).await.unwrap();
        assert_eq!(
            (retry.stats.uploaded, retry.stats.skipped_existing),
            (total - stored, stored),
            "{}",
            c.backend
        );
        let dest = tmp.path().join("dest");
        c.objects
            .download_file("ws-a", &retry.manifest, &dest)
            .await
            .unwrap();
        assert!(same_bytes(&src, &dest), "{}", c.backend);
    }
}

#[tokio::test]
async fn workspaces_never_see_each_others_objects() {
    let tmp = tempfile::tempdir().unwrap();
    let src = file_with(tmp.path(), "src", 3 * MIB, &[(0, noise(3 << 20, 7))]);
    for c in cases() {
        let a = c.objects.upload_file("ws-a", &src, MIB).await.unwrap();
        c.objects
            .put_manifest("ws-a", "backup", "b1", &a.manifest)
            .await
            .unwrap();
        assert_eq!(
            c.objects.list_manifests("ws-a", "backup").await.unwrap(),
            ["b1"]
        );
        assert!(c
            .objects
            .list_manifests("ws-b", "backup")
            .await
            .unwrap()
            .is_empty());
        assert!(c.objects.list_chunks("ws-b").await.unwrap().is_empty());
        // Names that are string prefixes of others match nothing of theirs.
        assert!(c.objects.list_chunks("ws").await.unwrap().is_empty());
        assert!(c
            .objects
            .list_manifests("ws-a", "back")
            .await
            .unwrap()
            .is_empty());
        assert!(matches!(
            c.objects.get_manifest("ws-b", "backup", "b1").await,
            Err(ObjectsError::NotFound { .. })
        ));
        for h in a.manifest.data_chunks() {
            assert!(c.objects.has_chunk("ws-a", &h).await.unwrap());
            assert!(!c.objects.has_chunk("ws-b", &h).await.unwrap());
        }
        // A's manifest is useless in B: its chunks are not there.
        let dest = tmp.path().join("dest-b");
        assert!(matches!(
            c.objects.download_file("ws-b", &a.manifest, &dest).await,
            Err(ObjectsError::NotFound { .. })
        ));
        assert!(!dest.exists());
        // No deduplication across workspaces: B stores its own copy.
        let b = c.objects.upload_file("ws-b", &src, MIB).await.unwrap();
        assert_eq!(b.stats.uploaded, 3, "{}", c.backend);
    }
}

#[tokio::test]
async fn invalid_names_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let src = file_with(tmp.path(), "src", MIB, &[(0, noise(4096, 8))]);
    let m = Manifest {
        version: Manifest::VERSION,
        chunk_size: MIB,
        length: 0,
        chunks: vec![],
    };
    let bad = [
        "", ".", "..", "../ws-a", "a/b", "/abs", "a b", "a\\b", "-x", "x%2F", "é",
    ];
    for c in cases() {
        let invalid = |r: Result<_, ObjectsError>, what: &str| match r {
            Err(ObjectsError::InvalidName { .. }) => {}
            other => panic!("{}: {what}: {:?}", c.backend, other.map(|_| ())),
        };
        for b in bad {
            invalid(c.objects.upload_file(b, &src, MIB).await.map(|_| ()), b);
            invalid(c.objects.put_manifest(b, "k", "i", &m).await, b);
            invalid(c.objects.put_manifest("ws-a", b, "i", &m).await, b);
            invalid(c.objects.put_manifest("ws-a", "k", b, &m).await, b);
            invalid(c.objects.get_manifest("ws-a", "k", b).await.map(|_| ()), b);
            invalid(c.objects.list_manifests("ws-a", b).await.map(|_| ()), b);
            invalid(c.objects.delete_manifest(b, "k", "i").await, b);
            invalid(c.objects.list_chunks(b).await.map(|_| ()), b);
            let dest = tmp.path().join("never");
            invalid(c.objects.download_file(b, &m, &dest).await.map(|_| ()), b);
        }
        let e = c
            .objects
            .put_manifest("ws-a", "k", "../x", &m)
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid manifest id \"../x\": must start with a letter or digit"
        );
        assert!(matches!(
            c.objects.upload_file("ws-a", &src, 1000).await,
            Err(ObjectsError::InvalidChunkSize(1000))
        ));
        // Nothing was written anywhere.
        assert!(c.objects.list_chunks("ws-a").await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn a_different_manifest_under_an_existing_name_is_a_conflict() {
    let tmp = tempfile::tempdir().unwrap();
    let one = file_with(tmp.path(), "one", MIB, &[(0, noise(4096, 9))]);
    let two = file_with(tmp.path(), "two", MIB, &[(0, noise(4096, 10))]);
    for c in cases() {
        let m1 = c
            .objects
            .upload_file("ws-a", &one, MIB)
            .await
            .unwrap()
            .manifest;
        let m2 = c
            .objects
            .upload_file("ws-a", &two, MIB)
            .await
            .unwrap()
            .manifest;
        c.objects
            .put_manifest("ws-a", "backup", "x", &m1)
            .await
            .unwrap();
        let e = c
            .objects
            .put_manifest("ws-a", "backup", "x", &m2)
            .await
            .unwrap_err();
        assert!(
            matches!(e, ObjectsError::Conflict { .. }),
            "{}: {e}",
            c.backend
        );
        assert!(
            e.to_string()
                .ends_with("ws/ws-a/manifests/backup/x.json exists with different content"),
            "{e}"
        );
        assert_eq!(
            c.objects.get_manifest("ws-a", "backup", "x").await.unwrap(),
            m1
        );
        c.objects
            .put_manifest("ws-a", "backup", "x", &m1)
            .await
            .unwrap();

        c.objects
            .put_manifest("ws-a", "backup", "a", &m2)
            .await
            .unwrap();
        c.objects
            .put_manifest("ws-a", "image", "x", &m2)
            .await
            .unwrap();
        assert_eq!(
            c.objects.list_manifests("ws-a", "backup").await.unwrap(),
            ["a", "x"]
        );
        c.objects
            .delete_manifest("ws-a", "backup", "x")
            .await
            .unwrap();
        c.objects
            .delete_manifest("ws-a", "backup", "x")
            .await
            .unwrap();
        assert_eq!(
            c.objects.list_manifests("ws-a", "backup").await.unwrap(),
            ["a"]
        );
        assert_eq!(
            c.objects.list_manifests("ws-a", "image").await.unwrap(),
            ["x"]
        );
        // A deleted name can be used again, with any content.
        c.objects
            .put_manifest("ws-a", "backup", "x", &m2)
            .await
            .unwrap();
        // A manifest that does not describe its length is refused before anything is written.
        let mut bad = m1.clone();
        bad.length += MIB;
        assert!(matches!(
            c.objects.put_manifest("ws-a", "backup", "bad", &bad).await,
            Err(ObjectsError::InvalidManifest(_))
        ));
    }
}

#[tokio::test]
async fn a_corrupt_chunk_fails_the_download_and_leaves_dest_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let src = file_with(tmp.path(), "src", 4 * MIB, &[(0, noise(4 << 20, 11))]);
    for c in cases() {
        let up = c.objects.upload_file("ws-a", &src, MIB).await.unwrap();
        let victim = up.manifest.data_chunks().nth(2).unwrap();
        let hex = victim.to_string();
        let key = format!("ws/ws-a/chunks/{}/{hex}", &hex[..2]);
        c.overwrite(&key, noise(MIB as usize, 99)).await;

        let e = c.objects.get_chunk("ws-a", &victim).await.unwrap_err();
        assert!(
            matches!(e, ObjectsError::Corrupt { .. }),
            "{}: {e}",
            c.backend
        );
        let dir = tmp.path().join(format!("out-{}", c.backend));
        std::fs::create_dir(&dir).unwrap();
        let dest = dir.join("dest");
        std::fs::write(&dest, "the old content").unwrap();
        let e = c
            .objects
            .download_file("ws-a", &up.manifest, &dest)
            .await
            .unwrap_err();
        assert!(
            matches!(e, ObjectsError::Corrupt { .. }),
            "{}: {e}",
            c.backend
        );
        assert!(e.to_string().contains(&hex), "{e}");
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "the old content");
        // No temporary file is left behind either.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["dest"], "{}", c.backend);
    }
}

#[tokio::test]
async fn stores_answer_their_check() {
    for c in cases() {
        c.objects.check().await.unwrap();
        let d = c.objects.describe();
        match c.backend {
            "local" => assert!(d.starts_with("local directory /"), "{d}"),
            _ => {
                assert!(d.starts_with("s3://") && d.contains("endpoint"), "{d}");
                // A bucket that does not exist fails the check (a HEAD of a key would not).
                let url = std::env::var("PANDASTACK_TEST_S3").unwrap();
                let bucket = url["s3://".len()..].split('/').next().unwrap();
                let missing = format!("s3://{bucket}-missing-{:08x}/p", rand::random::<u32>());
                let e = Objects::open(&missing).unwrap().check().await.unwrap_err();
                assert!(matches!(e, ObjectsError::Store { op: "check", .. }), "{e}");
            }
        }
    }
}

#[test]
fn bad_urls_are_refused_with_clear_messages() {
    let err = |url: &str| Objects::open(url).unwrap_err().to_string();
    assert_eq!(
        err("file://relative/dir"),
        "invalid object store URL \"file://relative/dir\": a file:// URL needs an absolute path \
         (file:///absolute/path)"
    );
    assert_eq!(
        err("ftp://host/x"),
        "unsupported object store URL scheme \"ftp\" (use file:///absolute/path or \
         s3://bucket[/prefix])"
    );
    assert!(err("gs://bucket").contains("scheme \"gs\""));
    assert!(err("/var/lib/objects").contains("expected file:///absolute/path or s3://"));
    assert!(err("").contains("expected file:///absolute/path"));
    assert!(err("s3:///prefix").contains("no bucket"));
    let e = err("s3://key:hunter2@bucket/p");
    assert!(e.contains("credentials do not belong in the URL"), "{e}");
    assert!(!e.contains("hunter2") && !e.contains("key:"), "{e}");
    for bad in ["s3://bucket/a/../b", "s3://bucket//b", "s3://bucket/./b"] {
        assert!(err(bad).contains(": prefix: "), "{bad}: {}", err(bad));
    }
    assert!(err("s3://bucket/p?x=1").contains("no query"));

    // A file:// store creates its directory and says where it is.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a/b");
    let o = Objects::open(&format!("file://{}", dir.display())).unwrap();
    assert!(dir.is_dir());
    assert_eq!(o.describe(), format!("local directory {}", dir.display()));
}

#[tokio::test]
async fn blobs_are_create_if_absent_listed_by_group_and_deleted() {
    const HISTORY: &str = "1\t0/3000000\tno recovery target\n";
    for c in cases() {
        let o = &c.objects;
        let seg = bytes::Bytes::from(noise(70_000, 11));
        o.put_blob(
            "ws-a",
            "wal",
            "db-1",
            "000000010000000000000001",
            seg.clone(),
        )
        .await
        .unwrap();
        // The same bytes again are success; other bytes are refused and change nothing.
        o.put_blob(
            "ws-a",
            "wal",
            "db-1",
            "000000010000000000000001",
            seg.clone(),
        )
        .await
        .unwrap();
        let other = bytes::Bytes::from(noise(70_000, 12));
        assert!(matches!(
            o.put_blob("ws-a", "wal", "db-1", "000000010000000000000001", other)
                .await,
            Err(ObjectsError::Conflict { .. })
        ));
        o.put_blob("ws-a", "wal", "db-1", "00000002.history", HISTORY.into())
            .await
            .unwrap();
        o.put_blob(
            "ws-a",
            "wal",
            "db-2",
            "000000010000000000000009",
            seg.clone(),
        )
        .await
        .unwrap();
        let names: Vec<(String, u64)> = o
            .list_blobs("ws-a", "wal", "db-1")
            .await
            .unwrap()
            .into_iter()
            .map(|b| (b.name, b.size))
            .collect();
        assert_eq!(
            names,
            vec![
                ("000000010000000000000001".to_owned(), 70_000),
                ("00000002.history".to_owned(), HISTORY.len() as u64),
            ],
            "{}",
            c.backend
        );
        assert_eq!(
            o.get_blob("ws-a", "wal", "db-1", "000000010000000000000001")
                .await
                .unwrap(),
            seg
        );
        // Another workspace sees nothing of it.
        assert!(o
            .list_blobs("ws-b", "wal", "db-1")
            .await
            .unwrap()
            .is_empty());
        assert!(matches!(
            o.get_blob("ws-b", "wal", "db-1", "000000010000000000000001")
                .await,
            Err(ObjectsError::NotFound { .. })
        ));
        for bad in ["", "..", "a/b", "x y"] {
            assert!(matches!(
                o.put_blob("ws-a", "wal", bad, "n", seg.clone()).await,
                Err(ObjectsError::InvalidName { .. })
            ));
            assert!(matches!(
                o.get_blob("ws-a", "wal", "db-1", bad).await,
                Err(ObjectsError::InvalidName { .. })
            ));
        }
        o.delete_blob("ws-a", "wal", "db-1", "000000010000000000000001")
            .await
            .unwrap();
        o.delete_blob("ws-a", "wal", "db-1", "000000010000000000000001")
            .await
            .unwrap();
        assert_eq!(o.list_blobs("ws-a", "wal", "db-1").await.unwrap().len(), 1);
    }
}

/// The collector deletes a chunk only once no manifest names it and the grace has passed: a
/// chunk two files share stays when one file's manifest goes, the other file still downloads,
/// and a manifest it cannot read stops the pass with nothing deleted.
#[tokio::test]
async fn chunks_no_manifest_names_are_collected_after_the_grace() {
    use pandastack_objects::Collected;
    let tmp = tempfile::tempdir().unwrap();
    let (shared, only_a, only_b) = (
        noise(MIB as usize, 31),
        noise(MIB as usize, 32),
        noise(MIB as usize, 33),
    );
    let a = file_with(
        tmp.path(),
        "a",
        2 * MIB,
        &[(0, shared.clone()), (MIB, only_a)],
    );
    let b = file_with(tmp.path(), "b", 2 * MIB, &[(0, shared), (MIB, only_b)]);
    const HOUR: Duration = Duration::from_secs(3600);
    for c in cases() {
        let o = &c.objects;
        for (id, path) in [("a", &a), ("b", &b)] {
            let up = o.upload_file("ws-gc", path, MIB).await.unwrap();
            o.put_manifest("ws-gc", "files", id, &up.manifest)
                .await
                .unwrap();
        }
        let kept = o.collect_chunks("ws-gc", Duration::ZERO).await.unwrap();
        assert_eq!(
            kept,
            Collected {
                manifests: 2,
                referenced: 3,
                ..Default::default()
            },
            "{}",
            c.backend
        );
        assert!(o
            .list_workspaces()
            .await
            .unwrap()
            .contains(&"ws-gc".to_owned()));

        o.delete_manifest("ws-gc", "files", "a").await.unwrap();
        let young = o.collect_chunks("ws-gc", HOUR).await.unwrap();
        assert_eq!((young.young, young.deleted), (1, 0), "{}", c.backend);
        let gone = o.collect_chunks("ws-gc", Duration::ZERO).await.unwrap();
        assert_eq!(
            (gone.referenced, gone.deleted, gone.bytes_deleted),
            (2, 1, MIB),
            "{}",
            c.backend
        );
        assert_eq!(o.list_chunks("ws-gc").await.unwrap().len(), 2);
        let m = o.get_manifest("ws-gc", "files", "b").await.unwrap();
        let back = tmp.path().join(format!("b-{}", c.backend));
        o.download_file("ws-gc", &m, &back).await.unwrap();
        assert!(same_bytes(&b, &back), "{}", c.backend);

        // An unreadable manifest: nothing is deleted on a guess.
        o.delete_manifest("ws-gc", "files", "b").await.unwrap();
        c.overwrite("ws/ws-gc/manifests/files/bad.json", b"nope".to_vec())
            .await;
        let e = o.collect_chunks("ws-gc", Duration::ZERO).await.unwrap_err();
        assert!(matches!(e, ObjectsError::Corrupt { .. }), "{e:?}");
        assert_eq!(
            o.list_chunks("ws-gc").await.unwrap().len(),
            2,
            "{}",
            c.backend
        );
    }
}

/// An upload that finds a chunk last written longer ago than half the grace writes it again,
/// so the collector keeps it (the upload's manifest may be about to name it); a chunk left old
/// is collected. On the local backend, whose file times the test can age.
#[tokio::test]
async fn an_upload_refreshes_an_old_chunk_so_the_collector_keeps_it() {
    use pandastack_objects::GC_GRACE;
    let tmp = tempfile::tempdir().unwrap();
    let src = file_with(
        tmp.path(),
        "src",
        2 * MIB,
        &[(0, noise(2 * MIB as usize, 41))],
    );
    let c = cases().remove(0);
    assert_eq!(c.backend, "local");
    let root = c
        ._dir
        .as_ref()
        .unwrap()
        .path()
        .join("store/ws/ws-old/chunks");
    let age_all = |by: Duration| {
        let when = std::time::SystemTime::now() - by;
        for d in std::fs::read_dir(&root).unwrap() {
            for f in std::fs::read_dir(d.unwrap().path()).unwrap() {
                let f = std::fs::File::options()
                    .write(true)
                    .open(f.unwrap().path())
                    .unwrap();
                f.set_modified(when).unwrap();
            }
        }
    };
    let day_and_more = GC_GRACE + Duration::from_secs(3600);
    // Uploaded, never named by a manifest (an upload cut off), aged past the grace.
    c.objects.upload_file("ws-old", &src, MIB).await.unwrap();
    age_all(day_and_more);
    // Found by a new upload: written again, so young.
    let again = c.objects.upload_file("ws-old", &src, MIB).await.unwrap();
    assert_eq!(again.stats.skipped_existing, 2);
    let kept = c.objects.collect_chunks("ws-old", GC_GRACE).await.unwrap();
    assert_eq!((kept.young, kept.deleted), (2, 0));
    // Left old: collected.
    age_all(day_and_more);
    let gone = c.objects.collect_chunks("ws-old", GC_GRACE).await.unwrap();
    assert_eq!((gone.young, gone.deleted), (0, 2));
    assert!(c.objects.list_chunks("ws-old").await.unwrap().is_empty());
}

/// A download that may reuse a local file reads from the store only the chunks that file lacks
/// (here: the one changed of four), and the result is byte-equal; a local file changed since
/// its manifest was made costs a fetch, not a wrong byte.
#[tokio::test]
async fn a_download_reads_only_the_chunks_a_local_file_lacks() {
    use pandastack_objects::Reuse;
    let tmp = tempfile::tempdir().unwrap();
    let base = file_with(
        tmp.path(),
        "base",
        4 * MIB,
        &[(0, noise(4 * MIB as usize, 51))],
    );
    let changed = file_with(
        tmp.path(),
        "changed",
        4 * MIB,
        &[
            (0, noise(4 * MIB as usize, 51)),
            (2 * MIB, noise(MIB as usize, 52)),
        ],
    );
    for c in cases() {
        let o = &c.objects;
        let base_up = o.upload_file("ws-base", &base, MIB).await.unwrap();
        let up = o.upload_file("ws-snap", &changed, MIB).await.unwrap();
        let dest = tmp.path().join(format!("out-{}", c.backend));
        let reuse = Reuse {
            path: &base,
            manifest: &base_up.manifest,
        };
        let stats = o
            .download_file_reusing("ws-snap", &up.manifest, &dest, Some(reuse))
            .await
            .unwrap();
        assert_eq!(
            (stats.reused, stats.chunks, stats.bytes_downloaded),
            (3, 1, MIB),
            "{}",
            c.backend
        );
        assert!(same_bytes(&changed, &dest), "{}", c.backend);

        // The local file changed behind its manifest: those chunks are fetched instead.
        let stale = file_with(
            tmp.path(),
            "stale",
            4 * MIB,
            &[(0, noise(4 * MIB as usize, 53))],
        );
        let reuse = Reuse {
            path: &stale,
            manifest: &base_up.manifest,
        };
        let dest2 = tmp.path().join(format!("out2-{}", c.backend));
        let stats = o
            .download_file_reusing("ws-snap", &up.manifest, &dest2, Some(reuse))
            .await
            .unwrap();
        assert_eq!((stats.reused, stats.chunks), (0, 4), "{}", c.backend);
        assert!(same_bytes(&changed, &dest2), "{}", c.backend);
    }
}
