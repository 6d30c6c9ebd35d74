//! `pandastack bench objects`: throughput of the object storage layer (`pandastack-objects`) for
//! one large file: first upload, incremental upload after changing 10 MiB, unchanged upload,
//! download. No server and no VM.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use pandastack_objects::{Objects, DEFAULT_CHUNK_SIZE};

use super::bench::{host_info, metric, ms, Metric};

#[derive(Debug, clap::Args)]
pub(crate) struct ObjectsArgs {
    /// Store to measure (default: a `file://` store in a temporary directory under /var/tmp,
    /// removed afterwards). Objects written to a store given here stay, under `ws/bench-*`.
    #[arg(long)]
    objects: Option<String>,
    /// Size of the test file (random bytes), MiB.
    #[arg(long, default_value_t = 256)]
    size_mib: u64,
    /// Rounds; each uses a fresh workspace.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Write results here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

const MIB: f64 = (1 << 20) as f64;

pub(crate) async fn run(a: ObjectsArgs) -> anyhow::Result<ExitCode> {
    let tmp = tempfile::Builder::new()
        .prefix("ps-bench-objects-")
        .tempdir_in("/var/tmp")?;
    let url = match &a.objects {
        Some(u) => u.clone(),
        None => format!("file://{}", tmp.path().join("store").display()),
    };
    let objects = Objects::open(&url).context("object store (--objects)")?;
    eprintln!("store: {}", objects.describe());
    let size = a.size_mib << 20;
    let src = tmp.path().join("file");
    let dest = tmp.path().join("copy");
    let f = std::fs::File::create(&src)?;
    let mut seed = rand_seed();
    for off in (0..size).step_by(16 << 20) {
        f.write_all_at(
            &noise(((16 << 20) as u64).min(size - off) as usize, &mut seed),
            off,
        )?;
    }
    f.sync_all()?;

    let mut s: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let run_id = format!("{:08x}", rand_seed() as u32);
    for round in 0..a.rounds {
        let ws = format!("bench-{run_id}-{round}");
        let t = Instant::now();
        let first = objects.upload_file(&ws, &src, DEFAULT_CHUNK_SIZE).await?;
        s.entry("upload_first_mib_s")
            .or_default()
            .push(size as f64 / MIB / t.elapsed().as_secs_f64());

        let t = Instant::now();
        let same = objects.upload_file(&ws, &src, DEFAULT_CHUNK_SIZE).await?;
        s.entry("upload_unchanged_ms")
            .or_default()
            .push(ms(t.elapsed()));
        anyhow::ensure!(
            same.stats.uploaded == 0,
            "an unchanged file uploaded chunks"
        );

        // 10 MiB of new bytes at an unaligned offset (three 4 MiB chunks).
        let off = ((round as u64 * 37) << 20) % size.saturating_sub(11 << 20).max(1) + 4096;
        f.write_all_at(&noise(10 << 20, &mut seed), off)?;
        let t = Instant::now();
        let inc = objects.upload_file(&ws, &src, DEFAULT_CHUNK_SIZE).await?;
        s.entry("upload_incremental_mib_s")
            .or_default()
            .push(size as f64 / MIB / t.elapsed().as_secs_f64());
        s.entry("upload_incremental_mib")
            .or_default()
            .push(inc.stats.bytes_uploaded as f64 / MIB);

        let t = Instant::now();
        objects.download_file(&ws, &inc.manifest, &dest).await?;
        s.entry("download_mib_s")
            .or_default()
            .push(size as f64 / MIB / t.elapsed().as_secs_f64());
        std::fs::remove_file(&dest)?;
        eprintln!(
            "round {}/{}: first {} chunks, incremental {:?}",
            round + 1,
            a.rounds,
            first.stats.uploaded,
            inc.stats
        );
    }

    let units = |k: &str| match k {
        k if k.ends_with("_mib_s") => "MiB/s",
        k if k.ends_with("_ms") => "ms",
        _ => "MiB",
    };
    let metrics: BTreeMap<&str, Metric> = s
        .into_iter()
        .map(|(k, v)| (k, metric(v, units(k))))
        .collect();
    println!("{:<28} {:>10} {:>10} {:>5}", "metric", "p50", "p99", "n");
    for (k, m) in &metrics {
        println!(
            "{k:<28} {:>10.1} {:>10.1} {:>5} {}",
            m.p50, m.p99, m.n, m.unit
        );
    }
    if let Some(path) = &a.json {
        let doc = serde_json::json!({
            "name": "objects",
            "store": objects.describe(),
            "size_mib": a.size_mib,
            "chunk_size_mib": DEFAULT_CHUNK_SIZE >> 20,
            "host": host_info(),
            "metrics": metrics,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn rand_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    ((t.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32)) | 1
}

/// Incompressible bytes, fast (xorshift); advances `state`.
fn noise(len: usize, state: &mut u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}
