//! scripts/shell gives sbx-prefetch the very options it then gives
//! `sbx-run build-base`: the real binary takes them (and refuses others
//! as a usage error).

use std::process::Command;

fn prefetch(args: &[&str]) -> std::process::Output {
    let ca = tempfile::NamedTempFile::new().unwrap();
    Command::new(env!("CARGO_BIN_EXE_sbx-prefetch"))
        .args(args)
        .arg("--ca-cert")
        .arg(ca.path())
        // No engine: the run ends after the options are read.
        .env("SBX_DOCKER", "/nonexistent/docker")
        .output()
        .unwrap()
}

#[test]
fn takes_build_bases_options_and_needs_an_engine() {
    let o = prefetch(&[
        "-q",
        "--bootstrap",
        "--tag",
        "h40p-cli",
        "--git-delta-version",
        "0.18.2",
        "--claude-code-version",
        "1.0.0",
        "--no-ai-clis",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(69), "{err}");
    assert!(
        err.contains("sbx-prefetch: error: docker not found"),
        "{err}"
    );
    let bad = prefetch(&["--no-such-option"]);
    assert_eq!(bad.status.code(), Some(64));
    let bad = prefetch(&["--git-delta-version", "1; rm"]);
    assert_eq!(bad.status.code(), Some(64));
}

#[test]
fn help_names_what_it_does_and_hides_the_flag_it_implies() {
    let o = Command::new(env!("CARGO_BIN_EXE_sbx-prefetch"))
        .arg("--help")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    assert!(out.contains("build-base --prefetch"), "{out}");
    let flags: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(flags.contains(&"--bootstrap"), "{out}");
    assert!(!flags.contains(&"--prefetch"), "{out}");
}
