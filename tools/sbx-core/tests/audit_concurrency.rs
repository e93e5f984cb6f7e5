//! 8 processes × 1,000 records at once must give 8,000 whole JSON lines.
//! The writers are real processes: this test binary re-run as a child.

use std::process::Command;

use sbx_core::audit::{AuditLog, Outcome, Record};

const PROCS: usize = 8;
const RECORDS: usize = 1000;

#[test]
fn writer_child() {
    let Some(path) = std::env::var_os("SBX_AUDIT_TEST_CHILD") else {
        return; // only does work when run as a child below
    };
    let log = AuditLog::open(std::path::Path::new(&path)).unwrap();
    let id = std::process::id().to_string();
    // Long targets make torn writes likely if writes were not atomic.
    let target = format!("{id}-{}", "x".repeat(3000));
    for i in 0..RECORDS {
        let op = i.to_string();
        log.append(&Record::new(
            "test",
            &op,
            &target,
            Outcome::Blocked,
            "concurrency",
        ))
        .unwrap();
    }
}

#[test]
fn eight_processes_never_interleave() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..PROCS)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "writer_child", "--test-threads=1", "-q"])
                .env("SBX_AUDIT_TEST_CHILD", &path)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let mut per_proc = std::collections::HashMap::<String, usize>::new();
    let mut n = 0;
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("torn line: {e}"));
        let pid = v["target"]
            .as_str()
            .unwrap()
            .split('-')
            .next()
            .unwrap()
            .to_owned();
        *per_proc.entry(pid).or_default() += 1;
        n += 1;
    }
    assert_eq!(n, PROCS * RECORDS);
    assert_eq!(per_proc.len(), PROCS);
    assert!(per_proc.values().all(|&c| c == RECORDS));
}
