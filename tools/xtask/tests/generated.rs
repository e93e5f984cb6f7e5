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

/// scripts/shell's quick build (`QUICK=1`) compiles exactly the Makefile's
/// QUICK_PKGS at opt-level 0, in every cargo run of `make build` and
/// `make prefetch`; without QUICK nothing is unoptimised. The installed
/// sbx-run names a quick build in words scripts/shell looks for, or the
/// optimised tools would never follow.
#[test]
fn a_quick_build_is_named_and_only_asked_for() {
    let root = xtask::root();
    let make = |args: &[&str]| {
        let o = std::process::Command::new("make")
            .arg("-n")
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "make -n {args:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    let shell = "sbx-envfilter sbx-fw sbx-git-guard sbx-guest sbx-run sbx-tool-guard";
    let tools = format!("TOOLS={shell}");
    let on = make(&["build", "QUICK=1", &tools]);
    let off = make(&["build", &tools]);
    // make reads the list, as scripts/one-build has it do.
    let quick = std::process::Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(&root)
        .args([
            "--eval",
            "print-quick: ; @echo $(QUICK_PKGS)",
            "print-quick",
        ])
        .output()
        .unwrap();
    let quick = String::from_utf8(quick.stdout).unwrap();
    let pkgs: Vec<&str> = quick.split_whitespace().collect();
    assert!(pkgs.contains(&"sbx-run"), "{pkgs:?}");
    let cargo_build = on
        .lines()
        .find(|l| l.starts_with("cargo build"))
        .expect("make build runs cargo build");
    for p in &pkgs {
        let flag = format!("--config profile.release.package.{p}.opt-level=0");
        assert!(cargo_build.contains(&flag), "{flag} missing: {cargo_build}");
    }
    assert_eq!(cargo_build.matches("opt-level=0").count(), pkgs.len());
    assert!(!off.contains("opt-level=0"), "{off}");
    assert!(make(&["prefetch", "QUICK=1"]).contains("package.sbx-image.opt-level=0"));
    assert!(!make(&["prefetch"]).contains("opt-level=0"));
    let build_rs = std::fs::read_to_string(root.join("tools/sbx-run/build.rs")).unwrap();
    let script = std::fs::read_to_string(root.join("scripts/shell")).unwrap();
    assert!(
        build_rs.contains("(quick build:") && script.contains("grep -q 'quick build'"),
        "sbx-run --version's note and scripts/shell's check differ"
    );
    assert!(script.contains("install-shell PREFIX=\"$prefix\" QUICK=\"$quick\""));
}
