//! `pandastack bench diff BASELINE NEW`: the regression guard. Compares a new run of a bench
//! with the committed one (`bench/<name>.json`), metric by metric, prints how many times worse
//! (or better) each p50 and p99 got and flags every one that is more than `--threshold` (1.25)
//! times worse. Exits 1 when something is flagged, so a script can stop on it.
//!
//! "Worse" follows the metric: larger is worse for times, sizes and counts (`ms`, `s`, `MiB`,
//! `bytes`, `count`, …), smaller is worse for rates (`1/s`, `MiB/s`, `req/s`, `tps`) and
//! capacities (`sandboxes`). A count that was 0 and is not any more (a lost cron firing) is
//! flagged whatever its size.
//!
//! Figures from different machines are not comparable: when the two runs name different hosts
//! (CPU model, CPU count, accelerator), the diff says so before its table. The same code ran
//! 1.5x slower on the Intel host of 2026-12-02 than on the AMD host of 2026-11-27.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde::Deserialize;

#[derive(Debug, clap::Args)]
pub(crate) struct DiffArgs {
    /// The committed run: a bench JSON file (e.g. bench/runtime.json), or a directory of them
    /// (e.g. bench/) to compare with the same names in NEW.
    baseline: PathBuf,
    /// The new run: a file written by `pandastack bench … --json`, or a directory of them.
    new: PathBuf,
    /// Flag a metric more than this many times worse than in the baseline.
    #[arg(long, default_value_t = 1.25)]
    threshold: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
struct Figure {
    p50: Option<f64>,
    p99: Option<f64>,
    #[serde(default)]
    unit: Unit,
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(from = "String")]
enum Unit {
    /// Times: larger is worse; a change within the clock's resolution (1 ms) is noise.
    Millis,
    /// Times in seconds: larger is worse; within 10 ms is noise.
    Seconds,
    /// Sizes and counts: larger is worse.
    #[default]
    LowerIsBetter,
    /// Rates and capacities: smaller is worse.
    HigherIsBetter,
}

impl Unit {
    fn lower_is_better(self) -> bool {
        !matches!(self, Unit::HigherIsBetter)
    }

    /// A change no larger than this is never flagged (0 → 1 ms is not "infinitely worse").
    fn noise(self) -> f64 {
        match self {
            Unit::Millis => 1.0,
            Unit::Seconds => 0.01,
            Unit::LowerIsBetter | Unit::HigherIsBetter => 0.0,
        }
    }
}

impl From<String> for Unit {
    fn from(u: String) -> Self {
        match u.as_str() {
            "ms" => Unit::Millis,
            "s" => Unit::Seconds,
            "1/s" | "MiB/s" | "req/s" | "tps" | "sandboxes" => Unit::HigherIsBetter,
            _ => Unit::LowerIsBetter,
        }
    }
}

#[derive(Debug, Deserialize)]
struct Run {
    #[serde(default)]
    metrics: BTreeMap<String, Figure>,
    #[serde(default)]
    accel: Option<String>,
    /// The machine it ran on: `{cpu_model, cpus, qemu, …}` (older runs: none, or a word).
    #[serde(default)]
    host: serde_json::Value,
}

/// How the machines of two runs differ, one phrase per difference; empty when nothing recorded
/// differs (a run that recorded nothing differs in nothing).
fn host_differences(old: &Run, new: &Run) -> Vec<String> {
    let mut out = Vec::new();
    let mut differ = |what: &str, a: Option<String>, b: Option<String>| {
        if let (Some(a), Some(b)) = (a, b) {
            if a != b {
                out.push(format!("{what} {a} → {b}"));
            }
        }
    };
    let field = |run: &Run, key: &str| match &run.host[key] {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    for (what, key) in [("CPU", "cpu_model"), ("CPUs", "cpus"), ("QEMU", "qemu")] {
        differ(what, field(old, key), field(new, key));
    }
    differ("accelerator", old.accel.clone(), new.accel.clone());
    out
}

/// How much worse `new` is than `old` (2.0: twice as bad; 0.5: twice as good); `None` when
/// either is missing. A lower-is-better figure that was 0 and is not any more is infinitely
/// worse; one that stays 0 is unchanged.
fn worse_by(old: Option<f64>, new: Option<f64>, unit: Unit) -> Option<f64> {
    let (old, new) = (old?, new?);
    if !old.is_finite() || !new.is_finite() {
        return None;
    }
    let (num, den) = if unit.lower_is_better() {
        (new, old)
    } else {
        (old, new)
    };
    Some(match (num == 0.0, den == 0.0) {
        (true, true) => 1.0,
        (false, true) => f64::INFINITY,
        (true, false) => 0.0,
        (false, false) => num / den,
    })
}

/// One compared metric.
#[derive(Debug, PartialEq)]
struct Row {
    name: String,
    old: Option<Figure>,
    new: Option<Figure>,
    p50: Option<f64>,
    p99: Option<f64>,
    flagged: bool,
}

fn compare(old: &Run, new: &Run, threshold: f64) -> Vec<Row> {
    let names: std::collections::BTreeSet<&String> =
        old.metrics.keys().chain(new.metrics.keys()).collect();
    names
        .into_iter()
        .map(|name| {
            let (o, n) = (old.metrics.get(name), new.metrics.get(name));
            let (p50, p99) = match (o, n) {
                (Some(o), Some(n)) => (
                    worse_by(o.p50, n.p50, n.unit),
                    worse_by(o.p99, n.p99, n.unit),
                ),
                _ => (None, None),
            };
            let tolerance = o.map_or(0.0, |o| o.unit.noise());
            let beyond = |w: Option<f64>, old: Option<f64>, new: Option<f64>| {
                let moved = match (old, new) {
                    (Some(a), Some(b)) => (b - a).abs() > tolerance,
                    _ => false,
                };
                w.is_some_and(|w| w > threshold) && moved
            };
            let flagged = match (o, n) {
                (Some(o), Some(n)) => beyond(p50, o.p50, n.p50) || beyond(p99, o.p99, n.p99),
                _ => false,
            };
            Row {
                name: name.clone(),
                old: o.copied(),
                new: n.copied(),
                p50,
                p99,
                flagged,
            }
        })
        .collect()
}

fn fmt_fig(f: Option<Figure>) -> String {
    let n = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v}"));
    match f {
        Some(f) => format!("{} / {}", n(f.p50), n(f.p99)),
        None => "(none)".to_owned(),
    }
}

fn fmt_ratio(w: Option<f64>) -> String {
    match w {
        Some(w) if w.is_infinite() => "was 0".to_owned(),
        Some(w) => format!("{w:.2}x"),
        None => "-".to_owned(),
    }
}

fn load(path: &Path) -> anyhow::Result<Run> {
    let raw = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_slice(&raw).with_context(|| format!("parse {}", path.display()))
}

/// The file pairs to compare: the two files, or every `*.json` of the baseline directory that
/// the new directory has too.
fn pairs(baseline: &Path, new: &Path) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    if !baseline.is_dir() {
        return Ok(vec![(baseline.to_owned(), new.to_owned())]);
    }
    anyhow::ensure!(
        new.is_dir(),
        "{} is a directory, so {} must be one too",
        baseline.display(),
        new.display()
    );
    let mut out = Vec::new();
    for e in std::fs::read_dir(baseline)? {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "json") {
            let other = new.join(path.file_name().unwrap_or_default());
            if other.is_file() {
                out.push((path, other));
            }
        }
    }
    out.sort();
    anyhow::ensure!(
        !out.is_empty(),
        "no bench JSON in {} has a namesake in {}",
        baseline.display(),
        new.display()
    );
    Ok(out)
}

pub(crate) fn run(a: DiffArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        a.threshold.is_finite() && a.threshold >= 1.0,
        "--threshold must be a number ≥ 1 (got {})",
        a.threshold
    );
    let mut flagged = 0;
    for (old_path, new_path) in pairs(&a.baseline, &a.new)? {
        let (old, new) = (load(&old_path)?, load(&new_path)?);
        println!("{} → {}", old_path.display(), new_path.display());
        if old.metrics.is_empty() && new.metrics.is_empty() {
            // bench/catalog.json: a table per template, not p50/p99 figures.
            println!("  no p50/p99 metrics in either file: skipped");
            continue;
        }
        let differences = host_differences(&old, &new);
        if !differences.is_empty() {
            println!(
                "  NOTE: not the same machine ({}): rerun the baseline's commit here to tell \
                 code from machine",
                differences.join("; ")
            );
        }
        let rows = compare(&old, &new, a.threshold);
        println!(
            "  {:<40} {:>22} {:>22} {:>9} {:>9}",
            "metric", "baseline p50 / p99", "new p50 / p99", "p50", "p99"
        );
        for r in &rows {
            println!(
                "  {:<40} {:>22} {:>22} {:>9} {:>9}{}",
                r.name,
                fmt_fig(r.old),
                fmt_fig(r.new),
                fmt_ratio(r.p50),
                fmt_ratio(r.p99),
                if r.flagged { "  WORSE" } else { "" }
            );
        }
        flagged += rows.iter().filter(|r| r.flagged).count();
    }
    if flagged > 0 {
        println!(
            "{flagged} metric(s) more than {}x worse than the baseline",
            a.threshold
        );
        Ok(ExitCode::from(1))
    } else {
        println!(
            "no metric more than {}x worse than the baseline",
            a.threshold
        );
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_of(json: &str) -> Run {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn times_that_grew_past_the_threshold_are_flagged_and_rates_that_fell() {
        let old = run_of(
            r#"{"metrics": {
                "exec_ms": {"p50": 10, "p99": 40, "n": 20, "unit": "ms"},
                "steady_ms": {"p50": 10, "p99": 40, "n": 20, "unit": "ms"},
                "creates_per_second": {"p50": 10, "p99": 10, "n": 1, "unit": "1/s"},
                "gone_ms": {"p50": 1, "p99": 1, "n": 1, "unit": "ms"}
            }, "accel": "tcg"}"#,
        );
        let new = run_of(
            r#"{"metrics": {
                "exec_ms": {"p50": 13, "p99": 40, "n": 20, "unit": "ms"},
                "steady_ms": {"p50": 12, "p99": 30, "n": 20, "unit": "ms"},
                "creates_per_second": {"p50": 5, "p99": 5, "n": 1, "unit": "1/s"},
                "new_ms": {"p50": 1, "p99": 1, "n": 1, "unit": "ms"}
            }}"#,
        );
        let rows = compare(&old, &new, 1.25);
        let by = |n: &str| rows.iter().find(|r| r.name == n).unwrap();
        assert!(by("exec_ms").flagged);
        assert_eq!(by("exec_ms").p50, Some(1.3));
        assert!(!by("steady_ms").flagged, "1.2x is within 1.25x");
        assert_eq!(by("creates_per_second").p50, Some(2.0));
        assert!(by("creates_per_second").flagged);
        assert!(!by("gone_ms").flagged && by("gone_ms").new.is_none());
        assert!(!by("new_ms").flagged && by("new_ms").old.is_none());
    }

    #[test]
    fn a_timing_that_moved_within_a_millisecond_is_not_flagged() {
        let old = run_of(
            r#"{"metrics": {"switch_ms": {"p50": 0, "p99": 1, "unit": "ms"},
            "lost": {"p50": 0, "p99": 0, "unit": "count"}}}"#,
        );
        let new = run_of(
            r#"{"metrics": {"switch_ms": {"p50": 1, "p99": 2, "unit": "ms"},
            "lost": {"p50": 1, "p99": 1, "unit": "count"}}}"#,
        );
        let rows = compare(&old, &new, 1.25);
        assert!(!rows[1].flagged, "{:?}", rows[1]);
        assert!(rows[0].flagged, "a lost firing is flagged: {:?}", rows[0]);
    }

    #[test]
    fn a_count_that_was_zero_is_flagged_and_zeros_stay_equal() {
        let unit = Unit::LowerIsBetter;
        assert_eq!(worse_by(Some(0.0), Some(1.0), unit), Some(f64::INFINITY));
        assert_eq!(worse_by(Some(0.0), Some(0.0), unit), Some(1.0));
        assert_eq!(worse_by(Some(2.0), Some(0.0), unit), Some(0.0));
        assert_eq!(worse_by(None, Some(1.0), unit), None);
        assert_eq!(worse_by(Some(f64::NAN), Some(1.0), unit), None);
        assert_eq!(fmt_ratio(Some(f64::INFINITY)), "was 0");
    }

    #[test]
    fn units_say_which_way_is_better() {
        for u in ["ms", "s", "MiB", "bytes", "count", "commits", "x"] {
            assert!(Unit::from(u.to_owned()).lower_is_better(), "{u}");
        }
        for u in ["1/s", "MiB/s", "req/s", "tps", "sandboxes"] {
            assert!(!Unit::from(u.to_owned()).lower_is_better(), "{u}");
        }
    }

    #[test]
    fn runs_from_other_machines_are_named_and_unrecorded_hosts_are_not() {
        let amd = run_of(
            r#"{"accel": "tcg", "host": {"cpu_model": "AMD EPYC", "cpus": 2, "qemu": "10.0.2"}}"#,
        );
        let intel = run_of(
            r#"{"accel": "tcg", "host": {"cpu_model": "Intel Xeon", "cpus": 2, "qemu": "10.0.2"}}"#,
        );
        assert_eq!(
            host_differences(&amd, &intel),
            vec!["CPU AMD EPYC → Intel Xeon".to_owned()]
        );
        assert!(host_differences(&amd, &amd).is_empty());
        assert!(host_differences(&amd, &run_of("{}")).is_empty());
    }

    #[test]
    fn every_committed_bench_compares_with_itself_unflagged() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench");
        let mut compared = 0;
        for (a, b) in pairs(&dir, &dir).unwrap() {
            let rows = compare(&load(&a).unwrap(), &load(&b).unwrap(), 1.25);
            compared += usize::from(!rows.is_empty());
            assert!(rows.iter().all(|r| !r.flagged), "{}", a.display());
        }
        assert!(compared >= 5, "bench JSON files with metrics: {compared}");
    }
}
