//! Against a real S3 implementation on 127.0.0.1 (moto's server, which
//! `scripts/prereqs` installs in /opt/sbx/moto), through a TCP relay the
//! test can cut to stop the server mid-sync.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

mod common;
use common::{moto, relay};

fn run(root: &Path, port: u16, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sbx-backup"))
        .arg("--config")
        .arg(root.join("config.toml"))
        .args(["--url", "s3://sbx/home-backup", "--home"])
        .arg(root.join("home"))
        .arg("--state-dir")
        .arg(root.join("state"))
        .args(args)
        .env("AWS_ENDPOINT", format!("http://127.0.0.1:{port}"))
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .output()
        .unwrap()
}

fn files(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| {
            (
                e.path().strip_prefix(root).unwrap().to_owned(),
                std::fs::read(e.path()).unwrap_or_default(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn s3_round_trip_and_a_server_that_stops_mid_sync() {
    let Some(m) = moto() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::write(root.join("config.toml"), "").unwrap();
    let home = root.join("home");
    std::fs::create_dir_all(&home).unwrap();
    for i in 0..50 {
        std::fs::write(home.join(format!("f{i}")), format!("{i}").repeat(100)).unwrap();
    }
    std::fs::write(home.join("big"), vec![7u8; 20 << 20]).unwrap(); // multipart
    let up = Arc::new(AtomicBool::new(true));
    let sent = Arc::new(AtomicU64::new(0));
    let port = relay(m.1, up.clone(), sent.clone(), None);

    let o = run(root, port, &["sync", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(
        root,
        port,
        &["restore", "--to", root.join("back").to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(files(&root.join("back")), files(&home));

    // The server goes away during the next sync: 75, nothing deleted.
    for i in 0..200 {
        std::fs::write(home.join(format!("g{i}")), format!("g{i}").repeat(5000)).unwrap();
    }
    // Cut once 1 MiB of this sync's uploads went through: mid-upload.
    let cut = up.clone();
    let from = sent.load(Ordering::SeqCst);
    let t = std::thread::spawn(move || {
        for _ in 0..2000 {
            if sent.load(Ordering::SeqCst) > from + (1 << 20) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        cut.store(false, Ordering::SeqCst);
    });
    let o = run(root, port, &["sync"]);
    t.join().unwrap();
    assert_eq!(
        o.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing was deleted"));
    // Back up: the next run completes, and the first snapshot is intact.
    up.store(true, Ordering::SeqCst);
    let o = run(root, port, &["sync", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(root, port, &["snapshots", "--json"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 2);
    let o = run(root, port, &["verify"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(
        root,
        port,
        &["restore", "--to", root.join("back2").to_str().unwrap()],
    );
    assert!(o.status.success());
    assert_eq!(files(&root.join("back2")), files(&home));
}

/// What a proxy that drops `If-None-Match` sends on: the header renamed
/// in place (same length, so the request stays well-formed).
fn drop_if_none_match(b: &mut [u8]) {
    const H: &[u8] = b"if-none-match";
    let mut i = 0;
    while i + H.len() <= b.len() {
        if b[i..i + H.len()].eq_ignore_ascii_case(H) {
            b[i..i + H.len()].copy_from_slice(b"x-ignored-hdr");
        }
        i += 1;
    }
}

/// A store that ignores conditional writes (an S3-compatible server
/// without them, a proxy that drops the header) would let two writers
/// overwrite each other's snapshot and two homes claim one prefix. The
/// first pass probes it (one object created twice: the second must fail)
/// and refuses with one line naming the store, before committing
/// anything; the same server honouring the header is used as before.
#[test]
fn a_store_that_ignores_conditional_writes_is_refused() {
    let Some(m) = moto() else { return };
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    std::fs::write(root.join("config.toml"), "").unwrap();
    std::fs::create_dir_all(root.join("home")).unwrap();
    std::fs::write(root.join("home/notes"), "work\n").unwrap();
    let up = Arc::new(AtomicBool::new(true));
    let port = relay(
        m.1,
        up,
        Arc::new(AtomicU64::new(0)),
        Some(drop_if_none_match),
    );
    let o = run(root, port, &["sync"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(78), "{err}");
    assert!(
        err.contains("s3://sbx/home-backup: the store ignored a conditional write"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!err.contains("  "), "a run of spaces in the line: {err}");
    let o = run(root, m.1, &["snapshots", "--json"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 0);
    let o = run(root, m.1, &["sync"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
