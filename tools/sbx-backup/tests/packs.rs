//! Packs, prune, check, locks and the old store format, through the binary,
//! against file:// and the real S3 server of moto on 127.0.0.1.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod common;
use common::{http, moto, tree};

/// One store (file:// or moto's S3), a home, a state dir.
struct Env {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    s3: Option<u16>,
}

impl Env {
    fn file() -> Self {
        Self::new(None)
    }
    fn new(s3: Option<u16>) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        fs::create_dir_all(root.join("home")).unwrap();
        fs::write(root.join("config.toml"), "[backup]\nkeep = 100\n").unwrap();
        Env {
            _tmp: tmp,
            root,
            s3,
        }
    }
    fn home(&self) -> PathBuf {
        self.root.join("home")
    }
    fn url(&self) -> String {
        match self.s3 {
            Some(_) => format!(
                "s3://sbx/{}",
                self.root.file_name().unwrap().to_string_lossy()
            ),
            None => format!("file://{}/store", self.root.display()),
        }
    }
    fn run(&self, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sbx-backup"));
        c.arg("--config")
            .arg(self.root.join("config.toml"))
            .arg("--url")
            .arg(self.url())
            .arg("--home")
            .arg(self.home())
            .arg("--state-dir")
            .arg(self.root.join("state"))
            .args(args);
        if let Some(port) = self.s3 {
            c.env("AWS_ENDPOINT", format!("http://127.0.0.1:{port}"))
                .env("AWS_ALLOW_HTTP", "true")
                .env("AWS_ACCESS_KEY_ID", "test")
                .env("AWS_SECRET_ACCESS_KEY", "test")
                .env("AWS_REGION", "us-east-1");
        }
        c.output().unwrap()
    }
    fn ok(&self, args: &[&str]) -> Value {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)
    }
    /// Object names under the prefix (`packs/..`, `snapshots/..`), sorted.
    fn objects(&self) -> Vec<String> {
        let mut v = Vec::new();
        match self.s3 {
            Some(port) => {
                let prefix = self
                    .root
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                let r = http(port, "GET", &format!("/sbx?list-type=2&prefix={prefix}/"));
                for part in r.split("<Key>").skip(1) {
                    let key = part.split("</Key>").next().unwrap();
                    v.push(key[prefix.len() + 1..].to_owned());
                }
            }
            None => {
                let store = self.root.join("store");
                let mut stack = vec![store.clone()];
                while let Some(d) = stack.pop() {
                    for e in fs::read_dir(&d).into_iter().flatten().flatten() {
                        if e.file_type().unwrap().is_dir() {
                            stack.push(e.path());
                        } else {
                            let rel = e.path().strip_prefix(&store).unwrap().to_owned();
                            v.push(rel.to_string_lossy().into_owned());
                        }
                    }
                }
            }
        }
        v.sort();
        v
    }
    fn delete(&self, key: &str) {
        match self.s3 {
            Some(port) => {
                let prefix = self
                    .root
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                // moto wants a signed DELETE.
                let o = Command::new("curl")
                    .args([
                        "-fsS",
                        "-X",
                        "DELETE",
                        "--aws-sigv4",
                        "aws:amz:us-east-1:s3",
                    ])
                    .args(["--user", "test:test"])
                    .arg(format!("http://127.0.0.1:{port}/sbx/{prefix}/{key}"))
                    .output()
                    .unwrap();
                assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            }
            None => fs::remove_file(self.root.join("store").join(key)).unwrap(),
        }
    }
    fn packs(&self) -> Vec<String> {
        self.objects()
            .into_iter()
            .filter(|o| o.starts_with("packs/"))
            .collect()
    }
    fn snapshots(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .objects()
            .into_iter()
            .filter_map(|o| {
                Some(
                    o.strip_prefix("snapshots/")?
                        .strip_suffix(".json")?
                        .to_owned(),
                )
            })
            .collect();
        v.sort();
        v
    }
}

fn write(home: &Path, rel: &str, body: &[u8]) {
    let p = home.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, body).unwrap();
}

fn restore_matches(e: &Env, args: &[&str], name: &str) {
    let to = e.root.join(name);
    let mut a = vec!["restore", "--to", to.to_str().unwrap()];
    a.extend_from_slice(args);
    e.ok(&a);
    assert_eq!(tree(&to), tree(&e.home()), "{name}");
    fs::remove_dir_all(&to).unwrap();
}

/// Many small files: a few packs, not an object each; an incremental pass
/// of 10 changed files adds one pack and one manifest; prune keeps packs a
/// kept snapshot uses and deletes the one only a removed snapshot used.
fn packs_incremental_and_prune(e: &Env) {
    for i in 0..600 {
        write(
            &e.home(),
            &format!("m/d{}/f{i}.js", i % 20),
            format!("module {i}\n").repeat(i % 90 + 1).as_bytes(),
        );
    }
    write(&e.home(), "big.bin", &vec![3u8; 3 << 20]);
    let r = e.ok(&["sync", "--json"]);
    assert_eq!(r["data"]["uploaded"], 601, "{r}");
    let first = e.objects();
    assert!(
        first.len() <= 4,
        "600 small files and a large one should be a pack, a blob and a manifest: {first:?}"
    );
    assert!(first.iter().any(|o| o.starts_with("blobs/")), "{first:?}");
    restore_matches(e, &[], "r1");

    // 10 changed files: one new pack + one manifest, old packs untouched.
    for i in 0..10 {
        write(
            &e.home(),
            &format!("m/d{}/f{i}.js", i % 20),
            format!("changed {i}").as_bytes(),
        );
    }
    let r = e.ok(&["sync", "--json"]);
    assert_eq!(r["data"]["uploaded"], 10, "{r}");
    let second = e.objects();
    let added: Vec<_> = second.iter().filter(|o| !first.contains(o)).collect();
    assert_eq!(added.len(), 2, "{added:?}");
    assert!(added.iter().any(|o| o.starts_with("packs/")));
    assert!(
        first.iter().all(|o| second.contains(o)),
        "an old object went"
    );
    restore_matches(e, &[], "r2");

    // A file only the second snapshot has, in a pack of its own.
    write(&e.home(), "only-in-3", b"short-lived");
    e.ok(&["sync"]);
    let only3: Vec<String> = e
        .packs()
        .into_iter()
        .filter(|p| !second.contains(p))
        .collect();
    assert_eq!(only3.len(), 1);
    fs::remove_file(e.home().join("only-in-3")).unwrap();
    write(&e.home(), "new-in-4", b"fresh");
    e.ok(&["sync"]);
    assert_eq!(e.snapshots().len(), 4);

    // Keep the newest: snapshot 1's pack is still used by 4 (590 files
    // unchanged) and survives; the pack only 3 used goes.
    let r = e.ok(&["prune", "--keep-last", "1", "--json"]);
    assert_eq!(
        r["data"]["removed_snapshots"].as_array().unwrap().len(),
        3,
        "{r}"
    );
    assert_eq!(r["data"]["deleted_packs"], 1, "{r}");
    let packs = e.packs();
    assert!(!packs.contains(&only3[0]), "{packs:?}");
    for p in first.iter().filter(|o| o.starts_with("packs/")) {
        assert!(
            packs.contains(p),
            "a pack the kept snapshot uses was pruned: {p}"
        );
    }
    e.ok(&["check", "--read-data"]);
    restore_matches(e, &[], "r4");
    // The next sync after a prune re-learns what exists and stays incremental.
    write(&e.home(), "after-prune", b"x");
    let r = e.ok(&["sync", "--json"]);
    assert_eq!(r["data"]["uploaded"], 1, "{r}");
    restore_matches(e, &[], "r5");
}

#[test]
fn packs_incremental_and_prune_on_file_store() {
    packs_incremental_and_prune(&Env::file());
}

#[test]
fn packs_incremental_and_prune_on_s3() {
    let Some(m) = moto() else { return };
    packs_incremental_and_prune(&Env::new(Some(m.1)));
}

/// `check` finds a deleted pack (listing) and a corrupted one (--read-data)
/// and names the files each breaks; restore refuses the broken snapshot.
fn check_names_the_files(e: &Env, corrupt: bool) {
    write(&e.home(), "a/one", b"first pack");
    e.ok(&["sync"]);
    let p1 = e.packs();
    write(&e.home(), "b/two", b"second pack");
    write(&e.home(), "b/three", b"second pack too");
    e.ok(&["sync"]);
    let p2: Vec<String> = e.packs().into_iter().filter(|p| !p1.contains(p)).collect();
    e.ok(&["check", "--read-data"]);

    let p1_bytes = corrupt.then(|| fs::read(e.root.join("store").join(&p1[0])).unwrap());
    e.delete(&p1[0]);
    let o = e.run(&["check"]);
    assert_eq!(
        o.status.code(),
        Some(65),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("missing") && out.contains("\"a/one\""),
        "{out}"
    );
    assert!(!out.contains("b/two"), "{out}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("2 files affected"));
    let to = e.root.join("broken");
    let o = e.run(&["restore", "--to", to.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is missing"));

    if let Some(b) = p1_bytes {
        // The deleted pack is back; now one byte of the other changes.
        fs::write(e.root.join("store").join(&p1[0]), b).unwrap();
        let p = e.root.join("store").join(&p2[0]);
        let mut b = fs::read(&p).unwrap();
        b[3] ^= 0x20;
        fs::write(&p, b).unwrap();
        // Sizes are right: only reading the data finds it.
        let out = String::from_utf8_lossy(&e.run(&["check", "--json"]).stdout).into_owned();
        assert!(!out.contains("b/t"), "{out}");
        let o = e.run(&["check", "--read-data", "--json"]);
        assert_eq!(o.status.code(), Some(65));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let bad: Vec<String> = v["data"]["problems"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| {
                p["files"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| f.as_str().unwrap().to_owned())
            })
            .collect();
        let hit: Vec<_> = bad.iter().filter(|f| f.contains("b/t")).collect();
        assert_eq!(
            hit.len(),
            1,
            "exactly the file whose bytes changed: {bad:?}"
        );
        // Restore checks every file's hash before it lands.
        let to = e.root.join("corrupt");
        let o = e.run(&["restore", "--to", to.to_str().unwrap()]);
        assert_eq!(
            o.status.code(),
            Some(65),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(String::from_utf8_lossy(&o.stderr).contains("does not match"));
    }
}

#[test]
fn check_names_files_of_a_deleted_or_corrupted_pack_on_file_store() {
    check_names_the_files(&Env::file(), true);
}

#[test]
fn check_names_files_of_a_deleted_pack_on_s3() {
    let Some(m) = moto() else { return };
    check_names_the_files(&Env::new(Some(m.1)), false);
}

/// A 0-byte file, names with a newline and invalid UTF-8, and (file://
/// only, to stay quick) a 2 GiB sparse file that restores sparse.
fn odd_files(e: &Env, sparse: bool) {
    write(&e.home(), "empty", b"");
    write(&e.home(), "dir/also-empty", b"");
    fs::write(e.home().join("line\nbreak"), b"newline in the name").unwrap();
    fs::write(
        e.home().join(OsStr::from_bytes(b"bad\xff\xfe-utf8")),
        b"latin",
    )
    .unwrap();
    fs::create_dir_all(e.home().join(OsStr::from_bytes(b"dir\n\xffx"))).unwrap();
    fs::write(
        e.home().join(OsStr::from_bytes(b"dir\n\xffx/in")),
        b"inside",
    )
    .unwrap();
    fs::set_permissions(e.home().join("empty"), fs::Permissions::from_mode(0o600)).unwrap();
    if sparse {
        let f = fs::File::create(e.home().join("sparse.img")).unwrap();
        f.set_len(2 << 30).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"start", 0).unwrap();
        f.write_all_at(b"middle", 1 << 30).unwrap();
    }
    e.ok(&["sync"]);
    let to = e.root.join("odd");
    e.ok(&["restore", "--to", to.to_str().unwrap()]);
    assert_eq!(tree(&to), tree(&e.home()));
    if sparse {
        let md = fs::metadata(to.join("sparse.img")).unwrap();
        assert_eq!(md.len(), 2 << 30);
        assert!(
            md.blocks() * 512 < 64 << 20,
            "restored dense: {} blocks",
            md.blocks()
        );
    }
    e.ok(&["check", "--read-data"]);
}

#[test]
fn odd_files_round_trip_on_file_store() {
    odd_files(&Env::file(), true);
}

#[test]
fn odd_files_round_trip_on_s3() {
    let Some(m) = moto() else { return };
    odd_files(&Env::new(Some(m.1)), false);
}

/// A store written before packs (every file `blobs/<hash>`, manifest
/// version 1) restores as it is, and new syncs add packs beside it.
#[test]
fn a_store_in_the_blob_per_file_format_still_restores() {
    let e = Env::file();
    write(&e.home(), "a", b"alpha");
    write(&e.home(), "sub/b", b"");
    let store = e.root.join("store");
    let mut entries = Vec::new();
    for (p, body) in [("a", &b"alpha"[..]), ("sub/b", b"")] {
        let h = blake3::hash(body).to_hex().to_string();
        let dir = store.join("blobs").join(&h[..2]);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(&h), body).unwrap();
        let md = fs::metadata(e.home().join(p)).unwrap();
        entries.push(
            serde_json::json!({"path": p, "kind": "file", "mode": md.mode() & 0o7777,
            "mtime_ns": md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128,
            "size": body.len(), "hash": h}),
        );
    }
    let md = fs::metadata(e.home().join("sub")).unwrap();
    entries.push(
        serde_json::json!({"path": "sub", "kind": "dir", "mode": md.mode() & 0o7777,
        "mtime_ns": md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128}),
    );
    let m = serde_json::json!({"format": "sbx-backup", "version": 1, "id": "20260101T000000.000000000Z-1",
        "created": "2026-01-01T00:00:00Z", "entries": entries,
        "skipped": {"sockets": 0, "fifos": 0, "devices": 0}});
    fs::create_dir_all(store.join("snapshots")).unwrap();
    fs::write(
        store.join("snapshots/20260101T000000.000000000Z-1.json"),
        m.to_string(),
    )
    .unwrap();
    restore_matches(&e, &[], "old");
    e.ok(&["check", "--read-data"]);
    // A new sync (fresh index) reuses the old blob and packs the new file.
    write(&e.home(), "c", b"gamma");
    let r = e.ok(&["sync", "--json"]);
    assert_eq!(r["data"]["uploaded"], 1, "{r}");
    restore_matches(&e, &[], "mixed");
    e.ok(&["check", "--read-data"]);
}

/// The lock rule: a live sync lock keeps prune out, a live prune lock keeps
/// sync out (75, nothing deleted); a lock not renewed for a lease is
/// stale, whatever pid it names.
#[test]
fn prune_and_sync_keep_out_of_each_other() {
    let e = Env::file();
    write(&e.home(), "a", b"a");
    e.ok(&["sync"]);
    write(&e.home(), "a", b"b");
    e.ok(&["sync"]);
    let locks = e.root.join("store/locks");
    fs::create_dir_all(&locks).unwrap();
    let host = fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned();
    // A live process on this host: this test.
    let me =
        serde_json::json!({"kind": "sync", "host": host, "pid": std::process::id()}).to_string();
    fs::write(locks.join("sync-x.json"), &me).unwrap();
    let o = e.run(&["prune", "--keep-last", "1", "--wait", "1s"]);
    assert_eq!(
        o.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("sync-x.json"));
    assert_eq!(e.snapshots().len(), 2, "prune deleted under a sync lock");
    fs::remove_file(locks.join("sync-x.json")).unwrap();

    let prune = me.replace("\"sync\"", "\"prune\"");
    fs::write(locks.join("prune-x.json"), &prune).unwrap();
    write(&e.home(), "a", b"c");
    let o = e.run(&["sync", "--wait", "1s"]);
    assert_eq!(
        o.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("prune-x.json"));
    assert_eq!(e.snapshots().len(), 2);

    // A dead pid on this host, never renewed: stale after the lease.
    let dead =
        serde_json::json!({"kind": "prune", "host": host, "pid": 999_999_999u32}).to_string();
    fs::write(locks.join("prune-x.json"), dead).unwrap();
    e.ok(&["sync"]);
    assert_eq!(e.snapshots().len(), 3);
    e.ok(&["prune", "--keep-last", "1", "--wait", "1s"]);
    assert_eq!(e.snapshots().len(), 1);
    restore_matches(&e, &[], "after");
}

/// A prune run elsewhere (another state dir) deletes a pack this sync's
/// index still names: the `pruned` marker makes the sync re-learn what
/// exists and upload the content again instead of referencing the gone pack.
#[test]
fn a_sync_after_a_prune_elsewhere_does_not_trust_its_index() {
    let e = Env::file();
    write(&e.home(), "keep", b"keep");
    e.ok(&["sync"]);
    write(&e.home(), "x", b"only in the middle snapshot");
    e.ok(&["sync"]);
    fs::remove_file(e.home().join("x")).unwrap();
    e.ok(&["sync"]);
    let o = Command::new(env!("CARGO_BIN_EXE_sbx-backup"))
        .arg("--config")
        .arg(e.root.join("config.toml"))
        .args(["--url", &e.url(), "--home"])
        .arg(e.home())
        .arg("--state-dir")
        .arg(e.root.join("elsewhere"))
        .args(["prune", "--keep-last", "1", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["data"]["deleted_packs"], 1, "{v}");
    // The same bytes come back; this index says they are in the deleted pack.
    write(&e.home(), "x", b"only in the middle snapshot");
    let r = e.ok(&["sync", "--json"]);
    assert_eq!(r["data"]["uploaded"], 1, "{r}");
    e.ok(&["check"]);
    restore_matches(&e, &[], "back");
}
