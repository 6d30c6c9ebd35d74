//! Rebuilds the crate when a file of the web console (`console/` at the repository root, which
//! `rust-embed` embeds) is added, removed or changed.

fn main() {
    println!("cargo:rerun-if-changed=../../console");
}
