//! sbx-backup end to end through its binary, against the real local
//! filesystem backend (file://) and an unreachable S3 endpoint.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod common;
use common::tree;

struct Env {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Env {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        fs::create_dir_all(root.join("home")).unwrap();
        fs::write(root.join("config.toml"), "").unwrap();
        Env { _tmp: tmp, root }
    }
    fn home(&self) -> PathBuf {
        self.root.join("home")
    }
    fn url(&self) -> String {
        format!("file://{}/store", self.root.display())
    }
    /// sbx-backup on this env's store, config and state, run through
    /// `wrapper` (e.g. setpriv) when one is given.
    fn cmd(&self, wrapper: &[&str], home: &Path) -> Command {
        let bin = env!("CARGO_BIN_EXE_sbx-backup");
        let mut c = match wrapper.split_first() {
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        c.arg("--config")
            .arg(self.root.join("config.toml"))
            .arg("--url")
            .arg(self.url())
            .arg("--home")
            .arg(home)
            .arg("--state-dir")
            .arg(self.root.join("state"));
        c
    }
    fn run(&self, home: &Path, args: &[&str]) -> Output {
        self.cmd(&[], home).args(args).output().unwrap()
    }
    fn ok(&self, args: &[&str]) -> Value {
        let o = self.run(&self.home(), args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)
    }
}

fn make_home(h: &Path) {
    let w = |p: &str, body: &[u8], mode: u32| {
        let p = h.join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, body).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    };
    w(".ssh/id_ed25519", b"-----BEGIN KEY-----\nsecret\n", 0o600);
    w("bin/tool", b"#!/bin/sh\necho hi\n", 0o755);
    w("ro.txt", b"read only", 0o444);
    w("project/src/main.rs", b"fn main() {}\n", 0o644);
    w("project/dup.rs", b"fn main() {}\n", 0o644); // same content: one blob
    fs::create_dir_all(h.join("empty/deeper")).unwrap();
    fs::set_permissions(h.join(".ssh"), fs::Permissions::from_mode(0o700)).unwrap();
    symlink("project/src/main.rs", h.join("rel-link")).unwrap();
    symlink("/etc/hostname", h.join("abs-link")).unwrap();
    symlink("nowhere/at/all", h.join("dangling")).unwrap();
    fs::write(
        h.join(OsStr::from_bytes(b"caf\xe9-latin1.txt")),
        b"non-utf8 name",
    )
    .unwrap();
    nix::unistd::mkfifo(
        &h.join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(h.join("sock")).unwrap();
    std::mem::forget(_sock);
    // Over the single-request limit: streamed through a multipart upload.
    let big: Vec<u8> = (0..100u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    w("big.bin", &big, 0o640);
}

#[test]
fn round_trip_keeps_every_kind_of_entry_and_metadata() {
    let e = Env::new();
    make_home(&e.home());
    let r = e.ok(&["sync", "--json"]);
    let d = &r["data"];
    assert_eq!(d["skipped"]["fifos"], 1, "{r}");
    assert_eq!(d["skipped"]["sockets"], 1);
    assert_eq!(d["symlinks"], 3);
    assert_eq!(
        d["uploaded"],
        d["files"].as_u64().unwrap() - 1,
        "duplicates cost nothing: {r}"
    );

    let to = e.root.join("restored");
    let o = e.run(&e.home(), &["restore", "--to", to.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut want = tree(&e.home());
    want.retain(|_, v| v != "special");
    assert_eq!(tree(&to), want);
    assert!(
        fs::symlink_metadata(to.join("dangling"))
            .unwrap()
            .file_type()
            .is_symlink()
    );

    // No-op: nothing hashed, nothing uploaded, no new snapshot.
    let r = e.ok(&["sync", "--json"]);
    assert_eq!(r["data"]["hashed"], 0, "{r}");
    assert_eq!(r["data"]["uploaded"], 0);
    assert_eq!(r["data"]["unchanged"], true);

    // A chmod alone, and a same-size edit with the mtime put back, are seen.
    let key = e.home().join(".ssh/id_ed25519");
    fs::set_permissions(&key, fs::Permissions::from_mode(0o400)).unwrap();
    let ro = e.home().join("project/src/main.rs");
    let md = fs::metadata(&ro).unwrap();
    fs::write(&ro, b"fn mair() {}\n").unwrap();
    let t = nix::sys::time::TimeSpec::new(md.mtime(), md.mtime_nsec());
    nix::sys::stat::utimensat(
        nix::fcntl::AT_FDCWD,
        &ro,
        &t,
        &t,
        nix::sys::stat::UtimensatFlags::FollowSymlink,
    )
    .unwrap();
    let r = e.ok(&["sync", "--json"]);
    assert_eq!(r["data"]["uploaded"], 1, "{r}");
    assert_eq!(r["data"]["unchanged"], false);
    let to2 = e.root.join("restored2");
    assert!(
        e.run(&e.home(), &["restore", "--to", to2.to_str().unwrap()])
            .status
            .success()
    );
    assert_eq!(
        fs::metadata(to2.join(".ssh/id_ed25519")).unwrap().mode() & 0o777,
        0o400
    );
    assert_eq!(
        fs::read(to2.join("project/src/main.rs")).unwrap(),
        b"fn mair() {}\n"
    );

    // Every blob checks out; two snapshots are listed.
    e.ok(&["verify"]);
    let o = e.run(&e.home(), &["snapshots", "--json"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 2);
}

#[test]
fn an_empty_home_restores_instead_of_syncing_the_deletion() {
    let e = Env::new();
    fs::write(e.home().join("notes.md"), "keep me").unwrap();
    e.ok(&["sync", "--json"]);
    // The volume is lost: a new, empty home.
    fs::remove_file(e.home().join("notes.md")).unwrap();
    fs::remove_dir_all(e.root.join("state")).unwrap();
    let r = e.ok(&["sync", "--json"]);
    assert_eq!(
        r["data"]["unchanged"], true,
        "an empty home was committed: {r}"
    );
    let o = e.run(&e.home(), &["first-boot"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        fs::read_to_string(e.home().join("notes.md")).unwrap(),
        "keep me"
    );
    // Marked: a second first-boot does nothing even if the home empties again.
    fs::remove_file(e.home().join("notes.md")).unwrap();
    assert!(e.run(&e.home(), &["first-boot"]).status.success());
    assert!(!e.home().join("notes.md").exists());
}

#[test]
fn bad_input_is_refused_by_name() {
    let e = Env::new();
    fs::write(e.home().join("a"), "a").unwrap();
    e.ok(&["sync"]);
    // A non-empty target needs --force.
    let to = e.root.join("busy");
    fs::create_dir_all(&to).unwrap();
    fs::write(to.join("x"), "x").unwrap();
    let o = e.run(&e.home(), &["restore", "--to", to.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));

    // A foreign, a corrupted and a newer manifest.
    let snaps = e.root.join("store/snapshots");
    for (name, body, want) in [
        ("0-foreign", &b"{\"hello\":1}"[..], "not an sbx-backup manifest"),
        ("1-corrupt", b"{\"format\":\"sbx-backup\",\"version\":1,\"id\":3}", "corrupted"),
        ("2-newer", b"{\"format\":\"sbx-backup\",\"version\":7}", "newer sbx-backup"),
        ("3-escape", b"{\"format\":\"sbx-backup\",\"version\":1,\"id\":\"x\",\"created\":\"t\",\"skipped\":{\"sockets\":0,\"fifos\":0,\"devices\":0},\"entries\":[{\"path\":\"../evil\",\"kind\":\"dir\",\"mode\":493,\"mtime_ns\":0}]}", "unsafe path"),
    ] {
        fs::write(snaps.join(format!("{name}.json")), body).unwrap();
        let o = e.run(&e.home(), &["restore", "--snapshot", name, "--to", e.root.join(name).to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(65), "{name}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(name) && err.contains(want), "{name}: {err}");
    }
    assert!(!e.root.join("evil").exists());

    // Unknown scheme: a config error before anything else.
    let o = Command::new(env!("CARGO_BIN_EXE_sbx-backup"))
        .args(["--url", "ftp://x/y", "--home"])
        .arg(e.home())
        .args(["--config"])
        .arg(e.root.join("config.toml"))
        .arg("sync")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown URL scheme \"ftp\""));

    // gs:// with credentials that are not a service account: refused, 78.
    let creds = e.root.join("creds.json");
    fs::write(&creds, "{\"not\":\"a key\"}").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_sbx-backup"))
        .args(["--url", "gs://bucket/prefix", "--home"])
        .arg(e.home())
        .args(["--config"])
        .arg(e.root.join("config.toml"))
        .arg("snapshots")
        .env("GOOGLE_APPLICATION_CREDENTIALS", &creds)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(78),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_backend_that_stays_down_is_75_and_deletes_nothing() {
    let e = Env::new();
    fs::write(e.home().join("a"), "a").unwrap();
    // Nothing listens on this port.
    let o = Command::new(env!("CARGO_BIN_EXE_sbx-backup"))
        .args(["--url", "s3://bucket/prefix", "--home"])
        .arg(e.home())
        .args(["--state-dir"])
        .arg(e.root.join("state"))
        .args(["--config"])
        .arg(e.root.join("config.toml"))
        .arg("sync")
        .env("AWS_ENDPOINT", "http://127.0.0.1:9")
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing was deleted"));
    assert!(e.home().join("a").exists());
}

#[test]
fn the_daemon_follows_changes_and_syncs_once_more_on_sigterm() {
    let e = Env::new();
    fs::write(e.home().join("a"), "one").unwrap();
    let mut d = e
        .cmd(&[], &e.home())
        .args(["daemon", "--interval", "200ms", "--final-sync"])
        .spawn()
        .unwrap();
    let snaps = || {
        fs::read_dir(e.root.join("store/snapshots"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    // Generous: a debug-build pass on a loaded 2-core machine.
    let wait_for = |n: usize| {
        for _ in 0..1200 {
            if snaps() >= n {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("no snapshot {n}");
    };
    wait_for(1);
    fs::write(e.home().join("a"), "two").unwrap();
    wait_for(2);
    // Quiet: no more passes that commit anything.
    std::thread::sleep(std::time::Duration::from_millis(800));
    assert_eq!(snaps(), 2);
    // A change right before SIGTERM still makes it out.
    fs::write(e.home().join("b"), "last words").unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(d.wait().unwrap().success());
    let to = e.root.join("after");
    assert!(
        e.run(&e.home(), &["restore", "--to", to.to_str().unwrap()])
            .status
            .success()
    );
    assert_eq!(fs::read_to_string(to.join("b")).unwrap(), "last words");
    assert_eq!(fs::read_to_string(to.join("a")).unwrap(), "two");
}

fn root_only() -> bool {
    let root = nix::unistd::geteuid().is_root();
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    assert!(root || !ci, "this test needs root (mounts, other uids)");
    root
}

#[test]
fn unreadable_files_are_skipped_reported_and_the_rest_synced() {
    if !root_only() {
        return;
    }
    let e = Env::new();
    fs::write(e.home().join("ok"), "fine").unwrap();
    fs::write(e.home().join("secret"), "no").unwrap();
    fs::set_permissions(e.home().join("secret"), fs::Permissions::from_mode(0o000)).unwrap();
    Command::new("chown")
        .args(["-R", "1000:1000"])
        .arg(&e.root)
        .status()
        .unwrap();
    let o = e
        .cmd(
            &[
                "setpriv",
                "--reuid=1000",
                "--regid=1000",
                "--clear-groups",
                "--",
            ],
            &e.home(),
        )
        .arg("sync")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(74),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("secret") && err.contains("skipped"), "{err}");
    let to = e.root.join("r");
    assert!(
        e.run(&e.home(), &["restore", "--to", to.to_str().unwrap()])
            .status
            .success()
    );
    assert_eq!(fs::read_to_string(to.join("ok")).unwrap(), "fine");
    assert!(!to.join("secret").exists());
}

#[test]
fn restore_resumes_and_cleans_up_on_a_full_disk() {
    if !root_only() {
        return;
    }
    let e = Env::new();
    for i in 0..20 {
        fs::write(e.home().join(format!("f{i}")), vec![i as u8; 300 << 10]).unwrap();
    }
    e.ok(&["sync"]);
    // Resume: an interrupted restore (marker left, a file missing) goes on
    // without --force and keeps what is already there.
    let to = e.root.join("r");
    assert!(
        e.run(&e.home(), &["restore", "--to", to.to_str().unwrap()])
            .status
            .success()
    );
    fs::remove_file(to.join("f3")).unwrap();
    fs::write(to.join(".sbx-restore-in-progress"), "x").unwrap();
    let o = e.run(
        &e.home(),
        &["--json", "restore", "--to", to.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["data"]["files"], 1, "{v}");
    assert_eq!(v["data"]["reused"], 19);
    assert_eq!(tree(&to), tree(&e.home()));

    // Disk full: a 1 MiB tmpfs cannot take 6 MiB.
    let small = e.root.join("small");
    fs::create_dir_all(&small).unwrap();
    assert!(
        Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(&small)
            .status()
            .unwrap()
            .success()
    );
    let o = e.run(&e.home(), &["restore", "--to", small.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let leftovers: Vec<_> = fs::read_dir(&small)
        .unwrap()
        .flatten()
        .filter(|d| d.file_name().to_string_lossy().ends_with(".sbx-restore"))
        .collect();
    Command::new("umount").arg(&small).status().unwrap();
    assert_eq!(o.status.code(), Some(74), "{err}");
    assert!(err.contains("disk full"), "{err}");
    assert!(leftovers.is_empty(), "temporary files left behind");
}

#[test]
fn a_home_that_is_a_symlink_is_refused() {
    let e = Env::new();
    let link = e.root.join("home-link");
    symlink(e.home(), &link).unwrap();
    let o = e.run(&link, &["sync"]);
    assert_eq!(o.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is a symlink"));
}
