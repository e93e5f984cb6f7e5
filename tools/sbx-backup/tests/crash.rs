//! kill -9 the sync at random points: every snapshot that can be listed
//! restores to exactly the tree it was taken from, and nothing is lost.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin(root: &Path, home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sbx-backup"));
    c.arg("--config")
        .arg(root.join("config.toml"))
        .arg("--url")
        .arg(format!("file://{}/store", root.display()))
        .arg("--home")
        .arg(home)
        .arg("--state-dir")
        .arg(root.join("state"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// path -> (mode, mtime, content hash)
type Tree = BTreeMap<PathBuf, (u32, i64, Vec<u8>)>;

fn tree(root: &Path) -> Tree {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let md = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_owned();
            if md.is_dir() {
                stack.push(p);
                out.insert(rel, (md.mode() & 0o7777, 0, Vec::new()));
            } else {
                out.insert(
                    rel,
                    (
                        md.mode() & 0o7777,
                        md.mtime(),
                        blake3::hash(&fs::read(&p).unwrap()).as_bytes().to_vec(),
                    ),
                );
            }
        }
    }
    out
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn snapshot_ids(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(root.join("store/snapshots"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_suffix(".json")
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn killing_sync_anywhere_leaves_only_whole_snapshots() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    fs::write(root.join("config.toml"), "[backup]\nkeep = 100\n").unwrap();
    let home = root.join("home");
    let mut rng = Rng(0x9e3779b97f4a7c15 ^ u64::from(std::process::id()));
    for i in 0..300 {
        let d = home.join(format!("d{}", i % 17));
        fs::create_dir_all(&d).unwrap();
        fs::write(
            d.join(format!("f{i}")),
            format!("file {i}\n").repeat(i % 50 + 1),
        )
        .unwrap();
    }
    // Above the pack threshold: objects of their own, multipart past 8 MiB.
    for i in 0..4 {
        fs::write(
            home.join(format!("big{i}")),
            vec![i as u8; (2 + 3 * i) << 20],
        )
        .unwrap();
    }
    assert!(bin(root, &home, &["sync"]).status().unwrap().success());
    // Which tree each committed snapshot must restore to.
    let mut expected: BTreeMap<String, Tree> = BTreeMap::new();
    expected.insert(snapshot_ids(root).pop().unwrap(), tree(&home));
    // The kill points span an incremental pass like the rounds' (one large
    // file rewritten), not the first full one, which takes several times longer.
    fs::write(home.join("big0"), vec![0xee; 2 << 20]).unwrap();
    let t = Instant::now();
    assert!(bin(root, &home, &["sync"]).status().unwrap().success());
    let pass = t.elapsed();
    expected.insert(snapshot_ids(root).pop().unwrap(), tree(&home));
    let mut kills = 0;
    let mut round = 0u64;
    while kills < 50 {
        round += 1;
        assert!(
            round < 400,
            "only {kills} of {round} syncs were killed mid-way"
        );
        // A change: edit, add, delete, chmod, and one large file rewritten.
        let k = rng.next() % 300;
        let f = home.join(format!("d{}/f{k}", k % 17));
        if f.exists() {
            fs::write(&f, format!("round {round}\n")).unwrap();
        }
        fs::write(home.join(format!("new{round}")), format!("new {round}")).unwrap();
        let gone = home.join(format!("d{}/f{}", round % 17, round * 7 % 300));
        let _ = fs::remove_file(gone);
        fs::set_permissions(
            home.join("d1"),
            fs::Permissions::from_mode(if round % 2 == 0 { 0o700 } else { 0o755 }),
        )
        .unwrap();
        let b = round % 4;
        fs::write(
            home.join(format!("big{b}")),
            vec![round as u8 + 7; ((2 + 3 * b) << 20) as usize],
        )
        .unwrap();
        let want = tree(&home);

        let mut child = bin(root, &home, &["sync"]).spawn().unwrap();
        let delay = Duration::from_micros(rng.next() % (pass.as_micros() as u64 + 1));
        std::thread::sleep(delay);
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            kills += 1;
        }
        child.wait().unwrap();
        for id in snapshot_ids(root) {
            expected.entry(id).or_insert_with(|| want.clone());
        }
    }
    // And one pass that completes.
    assert!(bin(root, &home, &["sync"]).status().unwrap().success());
    let last = snapshot_ids(root).pop().unwrap();
    expected.entry(last.clone()).or_insert_with(|| tree(&home));

    for (id, want) in &expected {
        let to = root.join(format!("r-{id}"));
        let o = bin(
            root,
            &home,
            &["restore", "--snapshot", id, "--to", to.to_str().unwrap()],
        )
        .output()
        .unwrap();
        assert!(
            o.status.success(),
            "restore {id}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            tree(&to) == *want,
            "snapshot {id} does not restore to the tree it was taken from"
        );
        fs::remove_dir_all(&to).unwrap();
    }
    let o = bin(root, &home, &["verify", "--snapshot", &last])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The killed syncs' locks are never renewed: stale after one lease
    // (test-sized here), prune goes ahead, drops what only the killed
    // passes uploaded, and the rest checks out.
    let o = bin(root, &home, &["prune", "--keep-last", "3", "--wait", "30s"])
        .env("SBX_BACKUP_TEST_LEASE_SECS", "2")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = bin(root, &home, &["check", "--read-data"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let to = root.join("after-prune");
    let o = bin(root, &home, &["restore", "--to", to.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        tree(&to) == expected[&last],
        "the newest snapshot changed after prune"
    );
}
