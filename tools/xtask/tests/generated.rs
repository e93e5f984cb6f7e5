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

/// `make install` (what scripts/shell runs) builds and installs every tool
/// that has a man page, and so every tool an image requires: a tool left
/// out of BINS leaves the main job with an image build that refuses.
#[test]
fn make_installs_every_documented_tool() {
    let makefile = std::fs::read_to_string(xtask::root().join("Makefile")).unwrap();
    let bins: Vec<&str> = makefile
        .lines()
        .find_map(|l| l.strip_prefix("BINS"))
        .and_then(|l| l.split_once(":="))
        .map(|(_, v)| v.split_whitespace().collect())
        .expect("a BINS := line in the Makefile");
    let mut want: Vec<String> = xtask::commands()
        .iter()
        .map(|c| c.get_name().to_owned())
        .collect();
    want.sort();
    let mut have: Vec<String> = bins.iter().map(|s| s.to_string()).collect();
    have.sort();
    assert_eq!(have, want, "Makefile BINS vs the tools xtask documents");
    // sbx-git-client (no CLI, no man page) is built on its own line.
    for t in sbx_run::image::REQUIRED {
        assert!(
            bins.contains(t) || makefile.contains(&format!("--bin {t}")),
            "{t} is required in images but not built by make"
        );
    }
}
