//! sbx-prefetch is worth building first only while its dependency tree is
//! a small part of the tools' (scripts/shell, issue 40): none of the
//! config schema's, the network stack's or the async runtime's crates.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// Crates that would each bring a large part of sbx-run's compile back.
const HEAVY: &[&str] = &[
    "sbx-sys",
    "toml",
    "url",
    "globset",
    "regex-automata",
    "nix",
    "tokio",
    "reqwest",
    "rustls",
    "ring",
    "hyper",
    "axum",
    "saphyr",
];

/// About 55 today; the margin is for a crate's new small dependency.
const MAX_CRATES: usize = 65;

#[test]
fn the_prefetch_builds_a_small_dependency_tree() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let o = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args(["tree", "--locked", "-p", "sbx-image", "-e", "normal"])
        .args(["--prefix", "none", "--format", "{p}"])
        .current_dir(&root)
        .output()
        .expect("cargo");
    assert!(
        o.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let crates: BTreeSet<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(crates.contains("sbx-core"), "{crates:?}");
    let heavy: Vec<&&str> = HEAVY.iter().filter(|c| crates.contains(**c)).collect();
    assert!(
        heavy.is_empty(),
        "sbx-image now depends on {heavy:?} (cargo tree -p sbx-image -i CRATE): keep them out, \
         or scripts/shell waits for them before the image's prefetch starts"
    );
    assert!(
        crates.len() <= MAX_CRATES,
        "sbx-image's tree has {} crates (at most {MAX_CRATES}): {crates:?}",
        crates.len()
    );
}
