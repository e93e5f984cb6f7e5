//! Nothing reported as backed up is lost (issue 47, routes 1, 5, 6, 7, 8,
//! 9): corrupted manifests and indexes, objects the store lost, clocks
//! that step, writers that overlap, two homes on one prefix, busy files,
//! a state dir that cannot be written, a first boot killed mid-restore.
//! Crash and pause points come from the `test-hooks` feature (src/hook.rs).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::tree;

struct Env {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Env {
    fn new(config: &str) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        fs::create_dir_all(root.join("home")).unwrap();
        fs::write(root.join("config.toml"), config).unwrap();
        Env { _tmp: tmp, root }
    }
    fn home(&self) -> PathBuf {
        self.root.join("home")
    }
    fn store(&self) -> PathBuf {
        self.root.join("store")
    }
    /// sbx-backup for `home` with state dir `state` (names under root).
    fn cmd_for(&self, home: &str, state: &str, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sbx-backup"));
        c.env_clear()
            .arg("--config")
            .arg(self.root.join("config.toml"))
            .arg("--url")
            .arg(format!("file://{}", self.store().display()))
            .arg("--home")
            .arg(self.root.join(home))
            .arg("--state-dir")
            .arg(self.root.join(state))
            .args(args);
        c
    }
    fn run(&self, args: &[&str]) -> Output {
        self.run_with(&[], args)
    }
    /// `run`, with more variables in the process's environment.
    fn run_with(&self, env: &[(&str, &str)], args: &[&str]) -> Output {
        self.cmd_for("home", "state", args)
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }
    fn ok(&self, args: &[&str]) -> serde_json::Value {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null)
    }
    fn snapshots(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.store().join("snapshots"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
    /// Restore the newest snapshot into a fresh directory; its tree.
    fn restored(&self, name: &str) -> std::collections::BTreeMap<Vec<u8>, String> {
        let to = self.root.join(name);
        self.ok(&["restore", "--to", to.to_str().unwrap()]);
        tree(&to)
    }
}

fn w(p: &Path, body: &[u8]) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, body).unwrap();
}

fn wait_for(p: &Path) {
    let until = Instant::now() + Duration::from_secs(120);
    while !p.exists() {
        assert!(Instant::now() < until, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Start a sync that pauses at hook point `at` until `resume` exists.
fn paused(e: &Env, at: &str, resume: &Path, args: &[&str]) -> Child {
    paused_with(e, &[], at, resume, args)
}

/// `paused`, with more variables in the process's environment.
fn paused_with(e: &Env, env: &[(&str, &str)], at: &str, resume: &Path, args: &[&str]) -> Child {
    let c = e
        .cmd_for("home", "state", args)
        .envs(env.iter().copied())
        .env("SBX_BACKUP_PAUSE_AT", at)
        .env("SBX_BACKUP_PAUSE_FILE", resume)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&resume.with_extension("paused"));
    c
}

/// Two first passes of one home at once (the daemon's first and a sync
/// the user runs: syncs do not exclude each other) claim the prefix with
/// one id. Before, each made its own: the slower one was refused (78) and
/// its id, left in the state dir, locked the home out of its prefix.
#[test]
fn two_first_passes_of_one_home_share_its_id() {
    let e = Env::new("");
    w(&e.home().join("a"), b"alpha\n");
    let resume = e.root.join("resume");
    let slow = paused(&e, "home-id-read", &resume, &["sync"]);
    w(&e.home().join("b"), b"bravo\n");
    e.ok(&["sync"]);
    fs::write(&resume, "").unwrap();
    let o = slow.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    w(&e.home().join("c"), b"charlie\n");
    e.ok(&["sync"]);
    assert_eq!(e.restored("to"), tree(&e.home()));
}

/// A sync the user runs while the daemon's first pass claims the prefix
/// (CI caught it in `sbx-run exec … sbx-backup sync` after a start):
/// paused between reading the two ids, it must still take the claim for
/// its own home's. Reading the local id first, it saw none and then the
/// daemon's claim, and refused its own home as another.
#[test]
fn a_sync_that_reads_the_ids_around_a_first_pass_is_not_refused() {
    let e = Env::new("");
    w(&e.home().join("a"), b"alpha\n");
    let resume = e.root.join("resume");
    let slow = paused(&e, "home-id-between", &resume, &["sync"]);
    e.ok(&["sync"]);
    fs::write(&resume, "").unwrap();
    let o = slow.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(e.restored("to"), tree(&e.home()));
}

/// Route 7: one flipped bit that keeps the JSON valid (a secret's mode
/// 0600 -> 0644) is refused by restore and reported by check.
#[test]
fn a_flipped_bit_in_a_manifest_is_caught() {
    let e = Env::new("");
    w(&e.home().join("secret"), b"token\n");
    fs::set_permissions(e.home().join("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    e.ok(&["sync"]);
    let mp = e.store().join("snapshots").join(&e.snapshots()[0]);
    let text = fs::read_to_string(&mp).unwrap();
    assert!(text.contains("\"mode\":384"), "{text}");
    fs::write(&mp, text.replacen("\"mode\":384", "\"mode\":420", 1)).unwrap();
    let to = e.root.join("to");
    let o = e.run(&["restore", "--to", to.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(65), "{err}");
    assert!(err.contains("checksum"), "{err}");
    let o = e.run(&["check"]);
    assert_eq!(o.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&o.stdout).contains("checksum"));
}

/// A corrupted local index (one row's hash swapped for another file's)
/// must not put the other file's bytes into the next snapshot.
#[test]
fn a_corrupted_index_is_not_trusted() {
    let e = Env::new("");
    w(&e.home().join("a"), b"alpha\n");
    w(&e.home().join("b"), b"bravo\n");
    e.ok(&["sync"]);
    let ip = e.root.join("state/index.json");
    let mut idx: serde_json::Value = serde_json::from_slice(&fs::read(&ip).unwrap()).unwrap();
    let rows = idx["rows"].as_array_mut().unwrap();
    let hb = rows.iter().find(|r| r[0] == "b").unwrap()[1]["hash"].clone();
    for r in rows.iter_mut().filter(|r| r[0] == "a") {
        r[1]["hash"] = hb.clone();
    }
    fs::write(&ip, serde_json::to_vec(&idx).unwrap()).unwrap();
    w(&e.home().join("c"), b"charlie\n");
    e.ok(&["sync"]);
    assert_eq!(e.restored("to"), tree(&e.home()));
}

/// Route 6: the store loses a pack (a lifecycle rule, a wiped
/// directory); the next pass uploads it again from the home instead of
/// committing a snapshot that cannot restore.
#[test]
fn a_lost_pack_is_uploaded_again_from_the_home() {
    let e = Env::new("");
    for i in 0..20 {
        w(
            &e.home().join(format!("src/f{i}.rs")),
            format!("fn f{i}() {{}}\n").as_bytes(),
        );
    }
    e.ok(&["sync"]);
    fs::remove_dir_all(e.store().join("packs")).unwrap();
    w(&e.home().join("new.txt"), b"new\n");
    let r = e.ok(&["sync", "--json"]);
    assert_eq!(e.restored("to"), tree(&e.home()));
    assert!(r["data"]["reuploaded_missing"].as_u64() >= Some(20), "{r}");
    let newest = e.snapshots().pop().unwrap();
    let id = newest.trim_end_matches(".json");
    e.ok(&["check", "--read-data", "--snapshot", id]);
}

/// Route 1: a snapshot written while the clock ran ahead (a timestamp id
/// in the future, as ids used to be) must not make later passes sort as
/// older: with keep = 1 the pass used to delete the snapshot it had just
/// reported, and restore kept returning the stale one.
#[test]
fn a_clock_that_ran_ahead_never_outranks_a_new_snapshot() {
    let e = Env::new("[backup]\nkeep = 1\n");
    w(&e.home().join("notes"), b"old\n");
    e.ok(&["sync"]);
    // What a pass leaves when the clock ran ahead: its id in the future.
    let snaps = e.store().join("snapshots");
    let only = e.snapshots().pop().unwrap();
    fs::rename(
        snaps.join(&only),
        snaps.join("29991231T000000.000000000Z-1.json"),
    )
    .unwrap();
    w(&e.home().join("notes"), b"new\n");
    let r = e.ok(&["sync", "--json"]);
    let id = r["data"]["snapshot"].as_str().unwrap().to_owned();
    assert!(
        e.snapshots().contains(&format!("{id}.json")),
        "the pass deleted the snapshot it reported: {r}"
    );
    assert_eq!(e.restored("to"), tree(&e.home()));
}

/// Route 1, retention: `--keep-within` counted back from this machine's
/// clock, so a prune on a machine set a year ahead removed every snapshot
/// but the newest. It counts back from the newest snapshot now.
#[test]
fn keep_within_counts_back_from_the_newest_snapshot_not_this_clock() {
    let e = Env::new("[backup]\nkeep = 10\n");
    for v in [b"v1\n", b"v2\n", b"v3\n"] {
        w(&e.home().join("notes"), v);
        e.ok(&["sync"]);
    }
    assert_eq!(e.snapshots().len(), 3);
    let args = ["prune", "--keep-last", "1", "--keep-within", "1h"];
    let o = e
        .cmd_for("home", "state", &args)
        .env("SBX_BACKUP_TEST_CLOCK_SECS", "31536000")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        e.snapshots().len(),
        3,
        "a clock a year ahead pruned snapshots made seconds ago"
    );
}

/// Route 8: a pass that walked before an edit but commits after a manual
/// sync must not become the newest snapshot (with keep = 1 its retention
/// deleted the manual sync's snapshot, the only one with the edit).
#[test]
fn a_stale_walk_never_becomes_the_newest_snapshot() {
    let e = Env::new("[backup]\nkeep = 1\n");
    w(&e.home().join("notes"), b"v1\n");
    let resume = e.root.join("resume");
    let daemon_pass = paused(&e, "before-commit", &resume, &["sync"]);
    // The edit, then the user's manual sync, while the pass is paused.
    w(&e.home().join("notes"), b"v2 - the edit\n");
    e.ok(&["sync"]);
    fs::write(&resume, "").unwrap();
    let o = daemon_pass.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(e.restored("to"), tree(&e.home()));
}

/// Route 8: a second home on the same prefix (branch mode's shared URL,
/// a second machine) is refused before it commits anything, and the
/// first home's snapshots stay; restoring from the prefix (not a restore
/// refused before it starts) adopts it.
#[test]
fn a_second_home_on_one_prefix_is_refused() {
    let e = Env::new("[backup]\nkeep = 1\n");
    w(&e.home().join("mine"), b"first home\n");
    e.ok(&["sync"]);
    let before = e.snapshots();
    w(&e.root.join("home2/theirs"), b"second home\n");
    let o = e.cmd_for("home2", "state2", &["sync"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(78), "{err}");
    assert!(err.contains("another home"), "{err}");
    assert!(err.contains("sbx-backup adopt"), "{err}");
    assert_eq!(e.snapshots(), before);
    assert_eq!(e.restored("to"), tree(&e.home()));
    // A restore refused before it starts (not empty, no --force) changes
    // nothing: it used to take the prefix over anyway, so the first home
    // was refused from then on and the second rotated its snapshots out.
    let o = e.cmd_for("home2", "state2", &["restore"]).output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(64),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    w(&e.home().join("mine"), b"first home, edited\n");
    e.ok(&["sync"]);
    let o = e.cmd_for("home2", "state2", &["sync"]).output().unwrap();
    assert_eq!(o.status.code(), Some(78), "the second home took the prefix");
    assert_eq!(e.restored("to2"), tree(&e.home()));
    // Restoring the prefix into the second home makes it the same home.
    let o = e
        .cmd_for("home2", "state2", &["restore", "--force"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = e.cmd_for("home2", "state2", &["sync"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Route 5: a file that changes while a pass uploads it keeps its last
/// good version in that snapshot (it used to vanish from it) and is
/// retried by the next pass.
#[test]
fn a_busy_file_keeps_its_last_good_version() {
    let e = Env::new("");
    let f = e.home().join("busy.log");
    w(&f, b"version 1\n");
    w(&e.home().join("other"), b"x\n");
    e.ok(&["sync"]);
    let good = e.restored("to1");
    w(&f, b"version 2, longer\n");
    w(&e.home().join("other"), b"y\n");
    let resume = e.root.join("resume");
    let pass = paused(&e, "before-upload", &resume, &["sync", "--json"]);
    w(&f, b"version 3, written during the upload\n");
    fs::write(&resume, "").unwrap();
    let o = pass.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["data"]["changing"].as_u64().unwrap() >= 1, "{r}");
    let now = e.restored("to2");
    assert_eq!(now.get(&b"busy.log"[..]), good.get(&b"busy.log"[..]), "{r}");
    e.ok(&["sync"]);
    assert_eq!(e.restored("to3"), tree(&e.home()));
}

/// Route 5: committed lockfiles are backed up; what a pass leaves out is
/// reported by rule, with counts.
#[test]
fn lockfiles_are_kept_and_excludes_are_counted() {
    let e = Env::new("[backup]\nexclude = [\"node_modules/\"]\n");
    w(&e.home().join("p/Cargo.lock"), b"# lock\n");
    w(&e.home().join("p/yarn.lock"), b"# lock\n");
    w(&e.home().join("p/node_modules/a/i.js"), b"x\n");
    w(&e.home().join("q/node_modules/b.js"), b"x\n");
    let r = e.ok(&["sync", "--json"]);
    assert_eq!(r["data"]["excluded"]["node_modules/"], 2, "{r}");
    let t = e.restored("to");
    assert!(t.contains_key(&b"p/Cargo.lock"[..]));
    assert!(t.contains_key(&b"p/yarn.lock"[..]));
}

/// Route 9: when the index cannot be saved (home volume full), a pass
/// commits nothing; it used to commit, fail, and repeat every interval
/// until retention had pushed out every older snapshot.
#[test]
fn a_pass_that_cannot_record_commits_nothing() {
    let e = Env::new("[backup]\nkeep = 2\n");
    w(&e.home().join("f"), b"v1\n");
    e.ok(&["sync"]);
    let first = e.snapshots();
    // index.json becomes a non-empty directory: the rename over it fails.
    let ip = e.root.join("state/index.json");
    fs::remove_file(&ip).unwrap();
    w(&ip.join("x"), b"");
    for i in 0..3 {
        w(&e.home().join("f"), format!("v{}\n", i + 2).as_bytes());
        let o = e.run(&["sync"]);
        assert!(!o.status.success());
    }
    assert_eq!(
        e.snapshots(),
        first,
        "passes committed what they could not record"
    );
}

/// Route 9: a first boot killed mid-restore leaves its marker; the next
/// first boot finishes the restore instead of calling the half home
/// initialized (whose next sync would commit it as the newest).
#[test]
fn first_boot_finishes_an_interrupted_restore() {
    first_boot_survives_a_kill_at("restore-files-done");
}

/// A first boot killed while it makes its in-progress marker: the next
/// one still restores (a marker made through a temporary and a rename
/// left the temporary and no marker, and the next first boot called the
/// home initialized and started the agent in an empty home).
#[test]
fn first_boot_killed_making_its_marker_restores_next_time() {
    first_boot_survives_a_kill_at("restore-marker-made");
}

/// First boot killed at hook point `at`; the next one leaves the home
/// exactly as backed up.
fn first_boot_survives_a_kill_at(at: &str) {
    let e = Env::new("");
    for i in 0..30 {
        w(
            &e.home().join(format!("d{}/f{i}", i % 3)),
            format!("{i}\n").as_bytes(),
        );
    }
    e.ok(&["sync"]);
    let o = e
        .cmd_for("home2", "state2", &["first-boot"])
        .env("SBX_BACKUP_CRASH_AT", at)
        .output()
        .unwrap();
    assert!(!o.status.success(), "the crash point {at} did not fire");
    let o = e
        .cmd_for("home2", "state2", &["first-boot"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(tree(&e.root.join("home2")), tree(&e.home()));
}

/// A restore killed with a file half written leaves a temporary; the
/// resumed restore removes it, so the home is exactly the snapshot (found
/// by the kill -9 loop in killloop.rs).
#[test]
fn a_resumed_restore_leaves_no_temporaries() {
    let e = Env::new("");
    for i in 0..10 {
        w(
            &e.home().join(format!("d{}/f{i}", i % 2)),
            format!("{i}\n").as_bytes(),
        );
    }
    e.ok(&["sync"]);
    for at in ["restore-temp-made", "restore-files-done"] {
        let to = e.root.join(format!("to-{at}"));
        let o = e
            .cmd_for("home", "state", &["restore", "--to", to.to_str().unwrap()])
            .env("SBX_BACKUP_CRASH_AT", at)
            .output()
            .unwrap();
        assert!(!o.status.success(), "the crash point {at} did not fire");
        e.ok(&["restore", "--force", "--to", to.to_str().unwrap()]);
        assert_eq!(tree(&to), tree(&e.home()), "after a kill at {at}");
    }
}

/// Routes 1 and 8: a live sync's lock keeps prune out whatever the clocks
/// say (its Last-Modified 10 minutes old: prune's clock ahead of the
/// store's); a lock whose token never changes goes stale after a lease.
#[test]
fn locks_are_judged_by_renewal_not_clocks() {
    let e = Env::new("[backup]\nkeep = 5\n");
    for v in ["a", "b", "c"] {
        w(&e.home().join("f"), v.as_bytes());
        e.ok(&["sync"]);
    }
    let before = e.snapshots();
    let locks = e.store().join("locks");
    fs::create_dir_all(&locks).unwrap();
    let lock = locks.join("sync-x.json");
    let host = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let body = serde_json::json!({"kind": "sync", "host": host.trim(), "pid": std::process::id(), "token": "t1"});
    fs::write(&lock, body.to_string()).unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(600);
    fs::File::options()
        .write(true)
        .open(&lock)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let o = e.run(&["prune", "--keep-last", "1", "--wait", "3s"]);
    assert_eq!(
        o.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(e.snapshots(), before, "prune deleted under a live lock");
    // Never renewed: stale after one (test-sized) lease.
    let o = e
        .cmd_for(
            "home",
            "state",
            &["prune", "--keep-last", "1", "--wait", "20s"],
        )
        .env("SBX_BACKUP_TEST_LEASE_SECS", "2")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(e.snapshots().len(), 1);
}

/// `kill -SIG<sig> <pid>`.
fn signal(c: &Child, sig: &str) {
    let s = Command::new("kill")
        .args([&format!("-{sig}"), &c.id().to_string()])
        .status()
        .unwrap();
    assert!(s.success(), "kill -{sig}");
}

/// Let a process paused at a hook point and stopped go on.
fn resume(c: &Child, file: &Path) {
    w(file, b"");
    signal(c, "CONT");
}

/// Wait for a `--json sync` to succeed: its report, the snapshot reported.
fn reported(c: Child) -> (serde_json::Value, String) {
    let o = c.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rep: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = rep["data"]["snapshot"].as_str().unwrap().to_owned();
    (rep, id)
}

/// Two snapshots: the first holds `back` (`body`), the second only
/// `stays`, so a prune keeping the last one condemns `back`'s object; then
/// `back` is in the home again.
fn back_condemned(e: &Env, body: &[u8]) -> PathBuf {
    let back = e.home().join("back");
    w(&back, body);
    e.ok(&["sync"]);
    fs::remove_file(&back).unwrap();
    w(&e.home().join("stays"), b"in a pack of its own\n");
    e.ok(&["sync"]);
    w(&back, body);
    back
}

/// A prune and a sync fenced beyond lease timing. The prune pauses
/// between its last lease check and a delete (a suspended VM, whose
/// monotonic clock stops too, or a request stuck in the network), is
/// stopped there for longer than its lease, and a sync calls its lock
/// stale and commits. That sync used to reference what the prune was
/// about to delete (a file back in the home whose blob was still listed,
/// or a pack it wrote again under the same name); the resumed prune
/// deleted it and the reported snapshot could not restore. `big`: the
/// file is a blob (1.5 MiB), else packed.
fn a_paused_prune_never_deletes_what_a_later_sync_uses(big: bool) {
    let e = Env::new("[backup]\nkeep = 5\n");
    let body: Vec<u8> = if big {
        (0..3 << 19).map(|i: u32| (i * 7 % 251) as u8).collect()
    } else {
        b"a small file a prune condemns\n".to_vec()
    };
    let back = back_condemned(&e, &body);
    fs::remove_file(&back).unwrap();
    // Its only object is garbage once the first snapshot goes.
    let resume = e.root.join("resume-prune");
    let mut prune = paused_with(
        &e,
        &[("SBX_BACKUP_TEST_LEASE_SECS", "2")],
        "prune-delete",
        &resume,
        &["prune", "--keep-last", "1"],
    );
    signal(&prune, "STOP");
    w(&back, &body);
    let o = e
        .cmd_for("home", "state", &["--json", "sync", "--wait", "120s"])
        .env("SBX_BACKUP_TEST_LEASE_SECS", "2")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    w(&resume, b"");
    signal(&prune, "CONT");
    let _ = prune.wait().unwrap();
    let want = tree(&e.home());
    assert_eq!(
        e.restored(if big { "to-big" } else { "to-small" }),
        want,
        "the reported snapshot lost what the paused prune deleted"
    );
    let o = e.run(&["check"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
}

#[test]
fn a_paused_prune_never_deletes_a_pack_a_later_sync_uses() {
    a_paused_prune_never_deletes_what_a_later_sync_uses(false);
}

#[test]
fn a_paused_prune_never_deletes_a_blob_a_later_sync_uses() {
    a_paused_prune_never_deletes_what_a_later_sync_uses(true);
}

/// The other order: a sync read the prune marker, then paused between its
/// last lease check and its commit for longer than its lease; a prune
/// called its lock stale, condemned the pack the sync was about to
/// reference, and paused before deleting it. The sync's commit lands
/// after the prune's last look at the snapshots, so only the sync can see
/// the clash: it reads the marker again after committing, withdraws that
/// snapshot and commits again with the content stored anew.
#[test]
fn a_sync_that_commits_behind_a_prune_marker_commits_again() {
    let e = Env::new("[backup]\nkeep = 5\n");
    back_condemned(&e, b"a small file a prune condemns\n");
    let with = |args: &[&str], at: &str, resume: &Path| {
        let c = paused_with(&e, &[("SBX_BACKUP_TEST_LEASE_SECS", "2")], at, resume, args);
        signal(&c, "STOP");
        c
    };
    let (rs, rp) = (e.root.join("resume-sync"), e.root.join("resume-prune"));
    let sync = with(&["--json", "sync", "--wait", "120s"], "commit-put", &rs);
    let prune = with(
        &["prune", "--keep-last", "1", "--wait", "120s"],
        "prune-delete",
        &rp,
    );
    resume(&sync, &rs);
    let (rep, reported) = reported(sync);
    resume(&prune, &rp);
    let _ = prune.wait_with_output().unwrap();
    assert!(e.snapshots().contains(&format!("{reported}.json")), "{rep}");
    let want = tree(&e.home());
    assert_eq!(e.restored("to"), want, "the reported snapshot lost a pack");
}

/// A home refused by its own prefix (its state dir lost, a copy moved to
/// another machine) keeps its files: `sbx-backup adopt`, the command the
/// refusal names, makes it the owner without restoring, where the
/// restore it used to point to replaced the newer work with the
/// snapshot's. The prefix's snapshots stay.
#[test]
fn adopt_keeps_the_homes_files() {
    let e = Env::new("[backup]\nkeep = 5\n");
    w(&e.home().join("work"), b"backed up\n");
    e.ok(&["sync"]);
    let before = e.snapshots();
    fs::remove_dir_all(e.root.join("state")).unwrap();
    w(&e.home().join("work"), b"newer work, never backed up\n");
    let o = e.run(&["sync"]);
    assert_eq!(o.status.code(), Some(78));
    e.ok(&["adopt"]);
    e.ok(&["sync"]);
    let after = e.snapshots();
    assert!(before.iter().all(|s| after.contains(s)), "{after:?}");
    assert_eq!(after.len(), before.len() + 1);
    assert_eq!(
        e.restored("to"),
        tree(&e.home()),
        "adopt lost the newer work"
    );
    assert_eq!(
        fs::read(e.home().join("work")).unwrap(),
        b"newer work, never backed up\n"
    );
}

/// Hard links and extended attributes are not kept (every linked name
/// restores as a copy of its own; xattrs and ACLs are dropped): each sync
/// says so, with counts, instead of dropping them silently. Contents all
/// come back.
#[test]
fn hard_links_and_xattrs_are_reported_not_dropped_silently() {
    let e = Env::new("");
    w(&e.home().join("a"), b"linked\n");
    fs::hard_link(e.home().join("a"), e.home().join("b")).unwrap();
    w(&e.home().join("x"), b"tagged\n");
    let set = Command::new("python3")
        .args([
            "-c",
            "import os,sys; os.setxattr(sys.argv[1], 'user.sbx', b'v')",
        ])
        .arg(e.home().join("x"))
        .status()
        .unwrap();
    assert!(set.success(), "setxattr");
    let o = e.run(&["--json", "sync"]);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let rep: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rep["data"]["hardlinked"], 2, "{rep}");
    assert_eq!(rep["data"]["xattrs"], 1, "{rep}");
    assert!(err.contains("2 files have other hard links"), "{err}");
    assert!(
        err.contains("1 files changed since the last pass carry extended"),
        "{err}"
    );
    let to = e.root.join("to");
    e.ok(&["restore", "--to", to.to_str().unwrap()]);
    for n in ["a", "b"] {
        assert_eq!(fs::read(to.join(n)).unwrap(), b"linked\n");
    }
    assert_eq!(fs::read(to.join("x")).unwrap(), b"tagged\n");
}

/// Route 8: a lock held in another PID namespace (every sandbox of a
/// repository has the same hostname) names a pid this namespace does not
/// have. The "dead process on this host" shortcut called such a lock
/// stale at once and prune deleted what the live sync had uploaded. A
/// lock whose token keeps changing is live, whatever its pid.
#[test]
fn a_renewed_lock_from_another_pid_namespace_keeps_prune_out() {
    let e = Env::new("[backup]\nkeep = 5\n");
    for v in ["a", "b"] {
        w(&e.home().join("f"), v.as_bytes());
        e.ok(&["sync"]);
    }
    let before = e.snapshots();
    let locks = e.store().join("locks");
    fs::create_dir_all(&locks).unwrap();
    let host = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let renew = std::thread::spawn({
        let (stop, lock, host) = (
            stop.clone(),
            locks.join("sync-ns.json"),
            host.trim().to_owned(),
        );
        move || {
            for n in 0u64.. {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                // pid 4194304 is above pid_max: no process here has it.
                let body = serde_json::json!({"kind": "sync", "host": host, "pid": 4_194_304u32, "token": n});
                let tmp = lock.with_extension("tmp");
                fs::write(&tmp, body.to_string()).unwrap();
                fs::rename(&tmp, &lock).unwrap();
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    });
    let o = e
        .cmd_for(
            "home",
            "state",
            &["prune", "--keep-last", "1", "--wait", "4s"],
        )
        .env("SBX_BACKUP_TEST_LEASE_SECS", "2")
        .output()
        .unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    renew.join().unwrap();
    assert_eq!(
        o.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(e.snapshots(), before, "prune deleted under a live lock");
}

/// A large file whose blob a finished prune condemned, back in the home
/// (the same artifact downloaded again, a checkout of a big file): the
/// marker stays after the prune, so the next sync stores the content
/// anew as a pack of its own. Above 64 MiB that snapshot was reported and
/// then refused by every restore ("claims … bytes in a pack"): packs of
/// their own are streamed like blobs, and the manifest check now says so.
#[test]
fn a_large_file_stored_again_after_a_prune_restores() {
    let e = Env::new("[backup]\nkeep = 5\n");
    let big = e.home().join("model.bin");
    let body: Vec<u8> = (0..(65u32 << 20) + 3)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    w(&big, &body);
    e.ok(&["sync"]);
    fs::remove_file(&big).unwrap();
    w(&e.home().join("stays"), b"kept\n");
    e.ok(&["sync"]);
    e.ok(&["prune", "--keep-last", "1"]);
    w(&big, &body);
    let rep = e.ok(&["--json", "sync"]);
    assert!(rep["data"]["snapshot"].is_string(), "{rep}");
    let want = tree(&e.home());
    assert_eq!(
        e.restored("to"),
        want,
        "the reported snapshot cannot restore"
    );
    let o = e.run(&["check", "--read-data"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
}

/// Two prunes that steal a lock. Prune A condemns a large file's blob and
/// pauses before deleting it, past its lease (a suspended VM). Prune B
/// calls A's lock stale and deletes the blob itself; prune C, later,
/// rewrites the marker with what it deletes, and the blob's name, gone
/// from the store, was no longer in it. The file comes back to the home
/// and a sync uploads it under the same name (a blob's name is its
/// content's hash), reports the snapshot, and A, resumed, deletes it.
/// A marker now carries forward what earlier markers named.
#[test]
fn a_prune_whose_lock_was_stolen_never_deletes_a_blob_stored_again() {
    let e = Env::new("[backup]\nkeep = 5\n");
    let body: Vec<u8> = (0..3u32 << 19).map(|i| (i * 7 % 251) as u8).collect();
    let back = e.home().join("back");
    w(&back, &body);
    e.ok(&["sync"]);
    fs::remove_file(&back).unwrap();
    w(&e.home().join("stays"), b"in a pack of its own\n");
    e.ok(&["sync"]);
    let lease = [("SBX_BACKUP_TEST_LEASE_SECS", "2")];
    let resume = e.root.join("resume-a");
    let a = paused_with(
        &e,
        &lease,
        "prune-delete",
        &resume,
        &["prune", "--keep-last", "1"],
    );
    signal(&a, "STOP");
    let prune = |args: &[&str]| {
        let o = e
            .cmd_for("home", "state", args)
            .envs(lease)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    // B: A's lock is stale; B deletes the blob A condemned.
    prune(&["prune", "--keep-last", "1", "--wait", "120s"]);
    // C: something else to delete, so it writes its own marker.
    w(&e.home().join("brief"), b"here for one snapshot\n");
    e.ok(&["sync"]);
    fs::remove_file(e.home().join("brief")).unwrap();
    e.ok(&["sync"]);
    prune(&["prune", "--keep-last", "1", "--wait", "120s"]);
    w(&back, &body);
    let rep = e.ok(&["--json", "sync"]);
    assert!(rep["data"]["snapshot"].is_string(), "{rep}");
    w(&resume, b"");
    signal(&a, "CONT");
    let _ = a.wait_with_output().unwrap();
    let want = tree(&e.home());
    assert_eq!(
        e.restored("to"),
        want,
        "the reported snapshot lost its blob"
    );
    let o = e.run(&["check"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
}

/// A prune that read the marker chain, then paused past its lease before
/// adding its own marker. Two prunes ran meanwhile (each deleting a pack
/// a killed sync left), and the newer one removed the marker below it,
/// so the paused prune's create of the next number succeeded, below the
/// newest: no sync ever read it. A sync reused the pack it condemned and
/// reported the snapshot; the prune deleted the pack. A marker is now in
/// force only as the newest: one created below is made again on top.
#[test]
fn a_prune_marker_created_below_a_newer_one_is_made_again_on_top() {
    let e = Env::new("[backup]\nkeep = 5\n");
    let lease = [("SBX_BACKUP_TEST_LEASE_SECS", "2")];
    let f = e.home().join("f");
    w(&f, b"a small file the paused prune condemns\n");
    e.ok(&["sync"]);
    fs::remove_file(&f).unwrap();
    w(&e.home().join("g"), b"stays\n");
    e.ok(&["sync"]);
    let (ra, rb) = (e.root.join("resume-mark"), e.root.join("resume-delete"));
    let a = paused_with(
        &e,
        &[
            lease[0],
            ("SBX_BACKUP_PAUSE2_AT", "prune-delete"),
            ("SBX_BACKUP_PAUSE2_FILE", rb.to_str().unwrap()),
        ],
        "prune-mark",
        &ra,
        &["prune", "--keep-last", "1"],
    );
    signal(&a, "STOP");
    let run = |args: &[&str], env: &[(&str, &str)]| e.run_with(&[&lease[..], env].concat(), args);
    // Two prunes, each with a pack a killed sync left to delete; the
    // second removes the first one's marker.
    for orphan in ["o1", "o2"] {
        w(&e.home().join(orphan), orphan.as_bytes());
        let o = run(
            &["sync", "--wait", "120s"],
            &[("SBX_BACKUP_CRASH_AT", "before-index")],
        );
        assert!(!o.status.success());
        fs::remove_file(e.home().join(orphan)).unwrap();
        let o = run(&["prune", "--wait", "120s"], &[]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // A pass that learns the store as the newest marker leaves it.
    w(&e.home().join("h"), b"one more\n");
    let o = run(&["sync", "--wait", "120s"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The paused prune renews its lease, then goes on to its first delete.
    signal(&a, "CONT");
    std::thread::sleep(Duration::from_secs(1));
    w(&ra, b"");
    wait_for(&rb.with_extension("paused"));
    signal(&a, "STOP");
    w(&f, b"a small file the paused prune condemns\n");
    let o = run(&["--json", "sync", "--wait", "120s"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    w(&rb, b"");
    signal(&a, "CONT");
    let _ = a.wait_with_output().unwrap();
    let want = tree(&e.home());
    assert_eq!(e.restored("to"), want, "the reported snapshot lost a pack");
}

/// A sync paused before its commit past its lease; prune A calls its lock
/// stale, condemns the pack the sync is about to reference, and pauses
/// before deleting it; the sync commits and pauses again; prune B calls
/// both locks stale, keeps the sync's new snapshot (so the pack too) and
/// writes its marker. The sync read the marker again after its commit:
/// B's, which did not name the pack, so it reported the snapshot, and A,
/// resumed, deleted the pack. A marker now carries forward every pack
/// the one before it named that is still in the store.
#[test]
fn a_second_prune_marker_still_names_what_a_paused_prune_deletes() {
    let e = Env::new("[backup]\nkeep = 5\n");
    let lease = [("SBX_BACKUP_TEST_LEASE_SECS", "2")];
    back_condemned(&e, b"a small file the paused prune condemns\n");
    let (rs1, rs2, rp) = (
        e.root.join("resume-put"),
        e.root.join("resume-after"),
        e.root.join("resume-prune"),
    );
    let sync = paused_with(
        &e,
        &[
            lease[0],
            ("SBX_BACKUP_PAUSE2_AT", "after-commit"),
            ("SBX_BACKUP_PAUSE2_FILE", rs2.to_str().unwrap()),
        ],
        "commit-put",
        &rs1,
        &["--json", "sync", "--wait", "120s"],
    );
    signal(&sync, "STOP");
    let a = paused_with(
        &e,
        &lease,
        "prune-delete",
        &rp,
        &["prune", "--keep-last", "1", "--wait", "120s"],
    );
    signal(&a, "STOP");
    w(&rs1, b"");
    signal(&sync, "CONT");
    wait_for(&rs2.with_extension("paused"));
    signal(&sync, "STOP");
    let run = |args: &[&str], env: &[(&str, &str)]| e.run_with(&[&lease[..], env].concat(), args);
    // B, with a pack a killed sync left to delete (in its own state dir).
    let other = e.root.join("other");
    w(&other.join("o"), b"orphan\n");
    let o = e
        .cmd_for("home", "state", &["sync", "--wait", "120s"])
        .arg("--home")
        .arg(&other)
        .envs(lease)
        .env("SBX_BACKUP_CRASH_AT", "before-index")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let o = run(&["prune", "--keep-last", "5", "--wait", "120s"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    w(&rs2, b"");
    signal(&sync, "CONT");
    let o = sync.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    w(&rp, b"");
    signal(&a, "CONT");
    let _ = a.wait_with_output().unwrap();
    let want = tree(&e.home());
    assert_eq!(e.restored("to"), want, "the reported snapshot lost a pack");
}

/// Rolling the home back to an older snapshot (`restore --snapshot ID
/// --force`) is killed part-way, and the daemon's next pass commits the
/// half home: its retention deleted the snapshot being restored (the
/// oldest kept), so the retry found no such snapshot and the home stayed
/// half one version, half the other. Retention now spares the snapshot
/// the home's restore marker names.
#[test]
fn a_pass_during_an_interrupted_restore_keeps_the_snapshot_it_restores() {
    let e = Env::new("[backup]\nkeep = 2\n");
    for (i, v) in ["one", "two"].into_iter().enumerate() {
        for d in 0..4 {
            w(
                &e.home().join(format!("d{d}/f")),
                format!("{v} {d}\n").as_bytes(),
            );
        }
        w(&e.home().join("v"), format!("{v} {i}\n").as_bytes());
        e.ok(&["sync"]);
    }
    let old = e.snapshots()[0].trim_end_matches(".json").to_owned();
    let to = e.root.join("want-old");
    e.ok(&["restore", "--snapshot", &old, "--to", to.to_str().unwrap()]);
    let want = tree(&to);
    let o = e
        .cmd_for("home", "state", &["restore", "--snapshot", &old, "--force"])
        .env("SBX_BACKUP_CRASH_AT", "restore-dirs-done")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), None, "not killed");
    // The daemon's pass, while the home is half restored.
    e.ok(&["sync"]);
    e.ok(&["restore", "--snapshot", &old, "--force"]);
    assert_eq!(tree(&e.home()), want, "the rolled-back home");
}

/// `restore --force` (the newest) to undo what the agent did is killed
/// part-way; the daemon's pass commits the half home as the newest, and
/// the retry, the same command, restored that half home instead of
/// finishing the first: the agent's damage stayed. A retry without
/// --snapshot now finishes the snapshot the home's marker names.
#[test]
fn a_retried_restore_finishes_its_snapshot_not_a_newer_half_home() {
    let e = Env::new("[backup]\nkeep = 5\n");
    for d in 0..4 {
        w(
            &e.home().join(format!("d{d}/f")),
            format!("good {d}\n").as_bytes(),
        );
    }
    e.ok(&["sync"]);
    let want = tree(&e.home());
    for d in 0..4 {
        w(&e.home().join(format!("d{d}/f")), b"the agent's damage\n");
    }
    let o = e
        .cmd_for("home", "state", &["restore", "--force"])
        .env("SBX_BACKUP_CRASH_AT", "restore-temp-made")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), None, "not killed");
    e.ok(&["sync"]);
    e.ok(&["restore", "--force"]);
    assert_eq!(tree(&e.home()), want, "the restored home");
}

/// A prune of an older version on the same prefix (a sandbox not yet
/// upgraded) writes only the single `pruned` marker. Syncs that read
/// only the newest of the chain never saw what it condemned, and reused a
/// pack it was deleting. Its marker is now read beside the chain's.
#[test]
fn an_older_prunes_single_marker_still_fences_syncs() {
    let e = Env::new("[backup]\nkeep = 5\n");
    let f = e.home().join("f");
    w(&f, b"a small file an older prune condemns\n");
    e.ok(&["sync"]);
    let first = e.snapshots()[0].clone();
    let m: serde_json::Value =
        serde_json::from_slice(&fs::read(e.store().join("snapshots").join(&first)).unwrap())
            .unwrap();
    let pack = m["packs"][0].as_str().unwrap().to_owned();
    fs::remove_file(&f).unwrap();
    w(&e.home().join("g"), b"stays\n");
    e.ok(&["sync"]);
    // A chain: a prune of this version, with a pack a killed sync left.
    w(&e.home().join("o"), b"orphan\n");
    let o = e
        .cmd_for("home", "state", &["sync"])
        .env("SBX_BACKUP_CRASH_AT", "before-index")
        .output()
        .unwrap();
    assert!(!o.status.success());
    fs::remove_file(e.home().join("o")).unwrap();
    let o = e
        .cmd_for("home", "state", &["prune", "--wait", "120s"])
        .env("SBX_BACKUP_TEST_LEASE_SECS", "2")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(e.store().join("pruned.d").exists());
    // The older prune: its marker, then (later) its delete.
    fs::write(
        e.store().join("pruned"),
        format!(r#"{{"id":"older","condemned":["pack {pack}"]}}"#),
    )
    .unwrap();
    w(&f, b"a small file an older prune condemns\n");
    e.ok(&["sync"]);
    fs::remove_file(e.store().join("packs").join(&pack[..2]).join(&pack)).unwrap();
    let want = tree(&e.home());
    assert_eq!(e.restored("to"), want, "the reported snapshot lost a pack");
}

/// A restore marker naming a snapshot that is gone (pruned since): a
/// retry without --snapshot says so and restores the newest, rather than
/// failing for good.
#[test]
fn a_restore_marker_naming_a_gone_snapshot_falls_back_to_the_newest() {
    let e = Env::new("[backup]\nkeep = 5\n");
    w(&e.home().join("f"), b"backed up\n");
    e.ok(&["sync"]);
    let want = tree(&e.home());
    w(
        &e.home().join(".sbx-restore-in-progress"),
        b"00000000000000000099",
    );
    w(&e.home().join("f"), b"changed\n");
    let o = e.run(&["restore", "--force"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("00000000000000000099 is gone"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(tree(&e.home()), want);
}

/// A sandbox's ~/.claude and ~/.codex are volumes of their own, mounted
/// in the home and shared by every sandbox of the workspace (branch
/// sandboxes included). A new home's first-start restore (`restore
/// --force`) wrote the snapshot's older settings, history and
/// credentials into the live volume, over the newer ones. A restore now
/// leaves a directory where another file system is mounted alone, and
/// says so.
#[test]
fn a_restore_never_writes_into_a_volume_mounted_in_the_home() {
    let e = Env::new("[backup]\nkeep = 5\n");
    let vol = e.home().join(".claude");
    fs::create_dir_all(&vol).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "none"])
        .arg(&vol)
        .status()
        .unwrap();
    if !st.success() {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Unmount(vol.clone());
    w(&vol.join(".credentials.json"), b"old token\n");
    w(&vol.join("projects/p/t.jsonl"), b"turn 1\n");
    w(&e.home().join("work/a"), b"the home's own file\n");
    e.ok(&["sync"]);
    // The volume lives on; the home's own files are lost.
    w(&vol.join(".credentials.json"), b"new token\n");
    w(&vol.join("projects/p/t.jsonl"), b"turn 1\nturn 2\n");
    fs::remove_dir_all(e.home().join("work")).unwrap();
    let o = e.run(&["restore", "--force"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        fs::read(vol.join(".credentials.json")).unwrap(),
        b"new token\n"
    );
    assert_eq!(
        fs::read(vol.join("projects/p/t.jsonl")).unwrap(),
        b"turn 1\nturn 2\n"
    );
    assert_eq!(
        fs::read(e.home().join("work/a")).unwrap(),
        b"the home's own file\n"
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(".claude"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
