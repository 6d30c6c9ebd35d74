//! The crate layering, checked from the manifests: a crate that reaches past its layer fails
//! here, not in review. Each workspace crate lists the workspace crates its `[dependencies]` may
//! name; only the binary and the test kit may name the QEMU driver, in any section.
//! The API reaches a host only through `pandastack-host` (the boundary), never the agent, the
//! runtime, a VM driver, the image builder or the guest protocol.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Workspace crates each crate may depend on (normal dependencies).
const ALLOWED: &[(&str, &[&str])] = &[
    ("pandastack-api-types", &[]),
    ("pandastack-guest-proto", &[]),
    ("pandastack-vm", &[]),
    // The boundary's volume calls carry object-store manifests (`pandastack-objects` names no
    // other workspace crate but the telemetry leaf).
    ("pandastack-host", &["pandastack-objects"]),
    ("pandastack-net", &[]),
    ("pandastack-image", &[]),
    // The process's metrics registry and trace pipeline: a leaf every layer may record into.
    ("pandastack-telemetry", &[]),
    ("pandastack-objects", &["pandastack-telemetry"]),
    // PostgreSQL's wire protocol (the database front, the query broker's client): a leaf.
    ("pandastack-pgwire", &[]),
    // What the host may connect to on a user's behalf: a leaf.
    ("pandastack-outbound", &[]),
    // The cluster's PKI and mutual-TLS configurations: a leaf.
    ("pandastack-cluster", &[]),
    ("pandastack-guest", &["pandastack-guest-proto"]),
    // The agent link carries the host boundary over the cluster's mutual TLS: it names the
    // boundary (and the object store's manifests the boundary carries) and the cluster PKI,
    // never an agent, runtime, driver or the control plane.
    (
        "pandastack-agent-link",
        &[
            "pandastack-host",
            "pandastack-cluster",
            "pandastack-objects",
        ],
    ),
    ("pandastack-store", &["pandastack-api-types"]),
    ("pandastack-client", &["pandastack-api-types"]),
    // The MCP server speaks the public API through the client, never the control plane.
    (
        "pandastack-mcp",
        &["pandastack-client", "pandastack-api-types"],
    ),
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
            "pandastack-host",
            "pandastack-vm",
            "pandastack-runtime",
            "pandastack-image",
            "pandastack-guest-proto",
            "pandastack-objects",
            "pandastack-telemetry",
        ],
    ),
    // The API speaks HTTP over the store and the host boundary; it names no agent, VM, runtime,
    // image or guest-protocol crate.
    // The control plane works over the store, the host boundary and the object store; it
    // answers agents' membership streams through the agent link (`Members` over the store)
    // and, in a cluster, dials agents as a replica's identity (the fleet).
    (
        "pandastack-control",
        &[
            "pandastack-api-types",
            "pandastack-store",
            "pandastack-host",
            "pandastack-objects",
            "pandastack-pgwire",
            "pandastack-outbound",
            "pandastack-agent-link",
            "pandastack-cluster",
            "pandastack-telemetry",
        ],
    ),
    (
        "pandastack-api",
        &[
            "pandastack-api-types",
            "pandastack-store",
            "pandastack-host",
            "pandastack-control",
            "pandastack-objects",
            "pandastack-pgwire",
            "pandastack-outbound",
            "pandastack-telemetry",
        ],
    ),
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
    let mut problems = Vec::new();
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
            if !ok.contains(d.as_str()) {
                problems.push(format!("{name} depends on {d}, past its layer"));
            }
        }
    }
    assert!(crates >= 17, "found only {crates} crates under crates/");
    assert!(
        problems.is_empty(),
        "layering:\n  {}",
        problems.join("\n  ")
    );
}
