//! `[tools]` in `show-run` (the real binary, no engine): the managed
//! settings it installs, the read-only mounts, the deny-read masks.
//! (Enforcement in a real container, with the real Claude Code: tests/e2e.)

use std::path::PathBuf;

mod common;
use common::{run_flag_values, sbx_run};

fn show_run(config: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let ws: PathBuf = dir.path().join("ws");
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    std::fs::create_dir_all(ws.join(".agent-sandbox")).unwrap();
    std::fs::create_dir_all(ws.join("db")).unwrap();
    std::fs::write(ws.join("db/dump.sql"), "secret rows").unwrap();
    std::fs::write(ws.join(".agent-sandbox/config.toml"), config).unwrap();
    let o = sbx_run(dir.path())
        .arg("show-run")
        .arg(&ws)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    (dir, out)
}

/// The `--mount` values of the sandbox's `docker run` line.
fn mounts(out: &str) -> Vec<String> {
    run_flag_values(out, "--mount")
}

#[test]
fn tools_policy_shows_managed_settings_and_read_only_mounts() {
    let (_d, out) = show_run(
        "[tools]\ndisallowed = [\"Write\", \"Edit\", \"Bash(curl:*)\"]\nread-only = true\ndeny-read = [\"**/*.sql\"]\n",
    );
    // The managed settings, shown as the commands that install them.
    assert!(
        out.contains("managed-settings.json <<'SBX_MANAGED'"),
        "{out}"
    );
    // Nothing for Codex: its own sandbox cannot run in the container, and
    // the read-only mount holds for it (issue 38).
    assert!(!out.contains("requirements.toml"), "{out}");
    for want in [
        "\"Bash(curl:*)\"",
        "\"Read(//workspace/ws/**/*.sql)\"",
        "\"command\": \"/usr/local/bin/sbx-tool-guard\"",
        "\"/workspace/ws\"",
        "\"onFailure\": \"block\"",
    ] {
        assert!(out.contains(want), "{want} missing:\n{out}");
    }
    let m = mounts(&out);
    let find = |target: &str| {
        m.iter().find(|v| {
            v.contains(&format!("target={target},")) || v.ends_with(&format!("target={target}"))
        })
    };
    let ws = find("/workspace/ws").expect("workspace mount");
    assert!(ws.ends_with(",readonly"), "{ws}");
    let shelf = find("/repo-shelf").expect("repo-shelf mount");
    assert!(shelf.ends_with(",readonly"), "{shelf}");
    let etc = find("/etc/claude-code").expect("managed settings mount");
    assert!(
        etc.ends_with(",readonly") && etc.contains("/managed/"),
        "{etc}"
    );
    // deny-read masks like [filesystem].blocked.
    let sql = find("/workspace/ws/db/dump.sql").expect("deny-read mask");
    assert!(sql.ends_with(",readonly"), "{sql}");
    assert!(
        out.contains("# masked (read as empty): db/dump.sql"),
        "{out}"
    );
}

#[test]
fn no_tools_table_no_managed_settings_and_a_writable_workspace() {
    let (_d, out) = show_run("");
    assert!(out.contains("# [tools]: none"), "{out}");
    let m = mounts(&out);
    assert!(
        !m.iter()
            .any(|v| v.contains("/etc/claude-code") || v.contains("/etc/codex")),
        "{m:?}"
    );
    let ws = m
        .iter()
        .find(|v| v.ends_with("target=/workspace/ws"))
        .expect("workspace mount");
    assert!(!ws.contains("readonly"), "{ws}");
    assert!(!m.iter().any(|v| v.contains("dump.sql")), "{m:?}");
}
