//! The real binary with a cleared environment: help, health answers from
//! the status file, and init refuses to run anywhere but as PID 1.

use std::process::Command;

fn guest() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sbx-guest"));
    c.env_clear().env("PATH", "/usr/bin:/bin");
    c
}

#[test]
fn help_teaches_the_start_order() {
    let o = guest().arg("--help").output().unwrap();
    assert!(o.status.success());
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        t.contains("OUTPUT/INPUT DROP") && t.contains("SBX_AGENT_UID"),
        "{t}"
    );
}

#[test]
fn init_refuses_to_run_outside_pid1() {
    let o = guest().args(["init", "--", "true"]).output().unwrap();
    assert_eq!(o.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&o.stderr).contains("must be PID 1"));
    let o = guest().arg("init").output().unwrap();
    assert_eq!(o.status.code(), Some(64), "no command is a usage error");
}

#[test]
fn health_answers_from_the_status_file() {
    let t = tempfile::tempdir().unwrap();
    let run = |dir: &std::path::Path| {
        guest()
            .env("SBX_GUEST_RUN_DIR", dir)
            .arg("health")
            .output()
            .unwrap()
    };
    let o = run(t.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("unhealthy: no status"));
    std::fs::write(
        t.path().join("status.json"),
        r#"{"state":"unhealthy","reason":"sbx-fw is missing from the image","since":"x"}"#,
    )
    .unwrap();
    let o = run(t.path());
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "unhealthy: sbx-fw is missing from the image"
    );
    std::fs::write(
        t.path().join("status.json"),
        r#"{"state":"ready","since":"x"}"#,
    )
    .unwrap();
    let o = run(t.path());
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "healthy");
}
