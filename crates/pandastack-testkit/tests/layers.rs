//! The crate layering, checked from the manifests: a crate that reaches past its layer fails
//! here, not in review. Each workspace crate lists the workspace crates its `[dependencies]` may
//! name; only the binary and the test kit may name the QEMU driver, in any section.
//!
//! `PENDING` lists the edges that exist today but break the target layering (the API crate
//! still drives the host agent and the runtime directly; issue #12 replaces that with the host
//! boundary). It only shrinks: an edge listed there that no longer exists fails the test too,
//! so the list stays true.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Workspace crates each crate may depend on (normal dependencies).
const ALLOWED: &[(&str, &[&str])] = &[
    ("pandastack-api-types", &[]),
    ("pandastack-guest-proto", &[]),
    ("pandastack-vm", &[]),
    ("pandastack-net", &[]),
    ("pandastack-image", &[]),
    ("pandastack-guest", &["pandastack-guest-proto"]),
    ("pandastack-store", &["pandastack-api-types"]),
    ("pandastack-client", &["pandastack-api-types"]),
    (
        "pandastack-qemu",
        &["pandastack-vm", "pandastack-guest-proto"],
    ),
    (
        "pandastack-runtime",
        &["pandastack-vm", "pandastack-net", "pandastack-guest-proto"],
    ),
    (
        "pandastack-agent",
        &[
            "pandastack-vm",
            "pandastack-runtime",
            "pandastack-image",
            "pandastack-guest-proto",
        ],
    ),
    // The API speaks HTTP over the store and the host agent; it names no VM, runtime or image
    // crate.
    (
        "pandastack-api",
        &[
            "pandastack-api-types",
            "pandastack-store",
            "pandastack-agent",
        ],
    ),
];

/// Edges that break the target layering today (see the module docs).
const PENDING: &[(&str, &str)] = &[
    ("pandastack-api", "pandastack-vm"),
    ("pandastack-api", "pandastack-runtime"),
    ("pandastack-api", "pandastack-image"),
    ("pandastack-api", "pandastack-guest-proto"),
];

/// May name `pandastack-qemu` (and anything else).
const TOP: &[&str] = &["pandastack", "pandastack-testkit"];

/// Workspace crates named in each section of `manifest`.
fn deps(manifest: &toml::Table) -> BTreeMap<&'static str, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
        let names = manifest
            .get(section)
            .and_then(|s| s.as_table())
            .map(|t| {
                t.keys()
                    .filter(|k| k.starts_with("pandastack"))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        out.insert(section, names);
    }
    out
}

#[test]
fn crates_depend_only_on_their_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(c, d)| (*c, d.iter().copied().collect()))
        .collect();
    let pending: BTreeSet<(&str, &str)> = PENDING.iter().copied().collect();
    let mut problems = Vec::new();
    let mut seen_pending = BTreeSet::new();
    let mut crates = 0;
    for entry in std::fs::read_dir(root.join("crates")).expect("crates/") {
        let dir = entry.expect("crates/ entry").path();
        let Ok(text) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        crates += 1;
        let manifest: toml::Table = text.parse().expect("a valid manifest");
        let name = manifest["package"]["name"].as_str().expect("package.name");
        let named = deps(&manifest);
        let all: BTreeSet<&String> = named.values().flatten().collect();
        if TOP.contains(&name) {
            continue;
        }
        if all.iter().any(|d| *d == "pandastack-qemu") {
            problems.push(format!("{name} names pandastack-qemu (only {TOP:?} may)"));
        }
        if all.iter().any(|d| *d == "pandastack-testkit") {
            problems.push(format!("{name} names pandastack-testkit"));
        }
        let Some(ok) = allowed.get(name) else {
            problems.push(format!("{name} has no layer in ALLOWED: add it"));
            continue;
        };
        for d in &named["dependencies"] {
            if ok.contains(d.as_str()) {
                continue;
            }
            if let Some(p) = pending.iter().find(|(c, x)| *c == name && x == d) {
                seen_pending.insert(*p);
                continue;
            }
            problems.push(format!("{name} depends on {d}, past its layer"));
        }
    }
    for p in pending.difference(&seen_pending) {
        problems.push(format!(
            "{} no longer depends on {}: remove the edge from PENDING",
            p.0, p.1
        ));
    }
    assert!(crates >= 14, "found only {crates} crates under crates/");
    assert!(
        problems.is_empty(),
        "layering:\n  {}",
        problems.join("\n  ")
    );
}
