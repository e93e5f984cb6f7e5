//! The committed man pages and completions must match the clap definitions,
//! and the man pages must pass `mandoc -T lint`.

use std::process::Command;

#[test]
fn generated_files_are_fresh() {
    let stale = xtask::stale(&xtask::root());
    assert!(
        stale.is_empty(),
        "stale generated files (run `cargo xtask gen`): {stale:?}"
    );
}

#[test]
fn man_pages_pass_mandoc_lint() {
    let root = xtask::root();
    let pages: Vec<_> = xtask::render()
        .into_iter()
        .filter(|(p, _)| p.extension().is_some_and(|e| e == "1"))
        .map(|(p, _)| root.join(p))
        .collect();
    let out = match Command::new("mandoc")
        .args(["-T", "lint", "-W", "warning"])
        .args(&pages)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "mandoc is required under CI: {e}"
            );
            eprintln!("skipping: mandoc not installed ({e}); scripts/prereqs installs it");
            return;
        }
    };
    let report =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && report.trim().is_empty(),
        "mandoc -T lint:\n{report}"
    );
}
