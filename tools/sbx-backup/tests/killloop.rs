//! The kill -9 loop (issue 47): real `sbx-backup` processes on a home
//! that changes between iterations, each sync, prune or restore killed
//! with SIGKILL at a random point or left to finish, against file:// and
//! moto's S3 server. Every snapshot the tool reported, and every one the
//! store lists, must restore byte-identical (content, modes, symlinks,
//! mtimes) into a fresh directory, checked every `CHECK_EVERY` iterations
//! and at the end; a reported snapshot may be gone only where retention
//! was allowed to remove it.
//!
//! Deterministic apart from timing: the seed (`SBX_KILL_LOOP_SEED`,
//! printed on failure) fixes the home's changes, the operations and the
//! kill delays; whether a delay lands before or after the process exits
//! is the only thing timing decides. `SBX_KILL_LOOP_ITERS` overrides the
//! iteration count (500 per backend).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

mod common;
use common::{Moto, http, moto, tree};

type Tree = BTreeMap<Vec<u8>, String>;

const CHECK_EVERY: usize = 125;
/// [backup].keep: a sync may delete snapshots beyond the newest KEEP.
const KEEP: usize = 6;
/// prune --keep-last.
const PRUNE_KEEP: usize = 3;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: small, seedable, good enough to pick operations.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

enum Backend {
    File,
    S3(Moto),
}

struct Loop {
    root: PathBuf,
    backend: Backend,
    seed: u64,
    rng: Rng,
    /// What happened, for the failure message.
    log: Vec<String>,
}

impl Loop {
    fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sbx-backup"));
        c.env_clear()
            .arg("--config")
            .arg(self.root.join("config.toml"))
            .arg("--home")
            .arg(self.home())
            .arg("--state-dir")
            .arg(self.root.join("state"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match &self.backend {
            Backend::File => {
                c.arg("--url")
                    .arg(format!("file://{}/store", self.root.display()));
            }
            Backend::S3(m) => {
                c.args(["--url", "s3://sbx/home-backup"])
                    .env("AWS_ENDPOINT", format!("http://127.0.0.1:{}", m.1))
                    .env("AWS_ALLOW_HTTP", "true")
                    .env("AWS_ACCESS_KEY_ID", "test")
                    .env("AWS_SECRET_ACCESS_KEY", "test")
                    .env("AWS_REGION", "us-east-1");
            }
        }
        c.args(args);
        c
    }

    /// Every listed snapshot restores into a fresh directory exactly as
    /// the home was when it was taken.
    fn check_all(&self, listed: &[String], expected: &BTreeMap<String, Tree>, it: usize) {
        for id in listed {
            let to = self.root.join(format!("check-{it}-{id}"));
            self.ok(&["restore", "--snapshot", id, "--to", to.to_str().unwrap()]);
            let got = tree(&to);
            if got != expected[id] {
                self.fail(format!(
                    "check after #{it}: snapshot {id} differs: {}",
                    diff(&expected[id], &got)
                ));
            }
            fs::remove_dir_all(&to).unwrap();
        }
    }

    fn fail(&self, what: String) -> ! {
        let tail = &self.log[self.log.len().saturating_sub(12)..];
        panic!(
            "{what}\nreplay with SBX_KILL_LOOP_SEED={} (last steps:\n  {})",
            self.seed,
            tail.join("\n  ")
        );
    }

    /// Run to completion; stdout on success.
    fn ok(&self, args: &[&str]) -> Vec<u8> {
        let o = self.cmd(args).output().unwrap();
        if !o.status.success() {
            self.fail(format!(
                "{args:?} failed ({}): {}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        o.stdout
    }

    /// The store's snapshot ids, oldest first, read from the store itself
    /// (one listing, not a process that loads every manifest: the check
    /// below restores each anyway).
    fn listed(&self) -> Vec<String> {
        let mut ids: Vec<String> = match &self.backend {
            Backend::File => fs::read_dir(self.root.join("store/snapshots"))
                .map(|d| {
                    d.flatten()
                        .filter_map(|e| {
                            let n = e.file_name().into_string().ok()?;
                            n.strip_suffix(".json").map(str::to_owned)
                        })
                        .collect()
                })
                .unwrap_or_default(),
            Backend::S3(m) => {
                let r = http(m.1, "GET", "/sbx?list-type=2&prefix=home-backup/snapshots/");
                assert!(r.starts_with("HTTP/1.1 200"), "list: {r}");
                r.split("<Key>home-backup/snapshots/")
                    .skip(1)
                    .filter_map(|k| k.split(".json</Key>").next())
                    .map(str::to_owned)
                    .collect()
            }
        };
        ids.sort();
        ids
    }

    /// Remove the lock objects a killed process left. The loop runs one
    /// process at a time, so every lock left is a dead holder's; a live
    /// contender would delete it after one lease (lease expiry has its
    /// own tests in history.rs), which the loop cannot afford to wait.
    fn clear_locks(&self) {
        match &self.backend {
            Backend::File => {
                if let Ok(d) = fs::read_dir(self.root.join("store/locks")) {
                    for e in d.flatten() {
                        let _ = fs::remove_file(e.path());
                    }
                }
            }
            Backend::S3(m) => {
                let r = http(m.1, "GET", "/sbx?list-type=2&prefix=home-backup/locks/");
                for part in r.split("<Key>").skip(1) {
                    let key = part.split("</Key>").next().unwrap();
                    let d = s3_delete(m.1, key);
                    assert!(d.starts_with("HTTP/1.1 204"), "delete {key}: {d}");
                }
            }
        }
    }

    /// 1 to 3 changes to the home: rewrite, add, delete, chmod, retarget
    /// a link, set a time, make or remove a directory, rewrite the large
    /// file (its own blob, not a pack).
    fn change_home(&mut self) {
        let home = self.home();
        for _ in 0..1 + self.rng.below(3) {
            let d = format!("d{}", self.rng.below(4));
            let dir = home.join(&d);
            let f = dir.join(format!("f{}", self.rng.below(10)));
            match self.rng.below(9) {
                0..=2 => {
                    fs::create_dir_all(&dir).unwrap();
                    let n = self.rng.below(3000) as usize;
                    let seed = self.rng.next();
                    let body: Vec<u8> = (0..n).map(|i| (seed >> (i % 57)) as u8).collect();
                    let _ = fs::remove_file(&f);
                    fs::write(&f, body).unwrap();
                    let mode = [0o600, 0o644, 0o755, 0o400][self.rng.below(4) as usize];
                    fs::set_permissions(&f, fs::Permissions::from_mode(mode)).unwrap();
                }
                3 => {
                    let _ = fs::remove_file(&f);
                }
                4 => {
                    let mode = [0o600, 0o644, 0o755][self.rng.below(3) as usize];
                    let _ = fs::set_permissions(&f, fs::Permissions::from_mode(mode));
                }
                5 => {
                    fs::create_dir_all(&dir).unwrap();
                    let l = dir.join(format!("l{}", self.rng.below(3)));
                    let _ = fs::remove_file(&l);
                    let to = match self.rng.below(3) {
                        0 => format!("f{}", self.rng.below(10)),
                        1 => format!("../d{}/missing", self.rng.below(4)),
                        _ => "/etc/hostname".into(),
                    };
                    symlink(to, l).unwrap();
                }
                6 => {
                    // A time with nanoseconds, set explicitly: the
                    // restore must bring back exactly this.
                    let t = SystemTime::UNIX_EPOCH
                        + Duration::new(
                            1_600_000_000 + self.rng.below(100_000_000),
                            self.rng.below(1_000_000_000) as u32,
                        );
                    if let Ok(file) = fs::File::options().write(true).open(&f) {
                        file.set_modified(t).unwrap();
                    }
                }
                7 => {
                    if self.rng.below(2) == 0 {
                        fs::create_dir_all(dir.join("sub")).unwrap();
                        fs::write(dir.join("sub/x"), d.as_bytes()).unwrap();
                    } else {
                        let _ = fs::remove_dir_all(dir.join("sub"));
                    }
                }
                _ => {
                    if self.rng.below(4) == 0 {
                        let b = self.rng.next() as u8;
                        fs::write(home.join("big"), vec![b; (1 << 20) + 4096]).unwrap();
                    }
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Sync,
    Prune,
    Restore,
}

fn seed() -> u64 {
    std::env::var("SBX_KILL_LOOP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(47)
}

fn iterations() -> usize {
    std::env::var("SBX_KILL_LOOP_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(500)
}

fn run_loop(backend: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let seed = seed();
    eprintln!("kill loop seed {seed} (SBX_KILL_LOOP_SEED replays it)");
    let mut l = Loop {
        root: tmp.path().to_owned(),
        backend,
        seed,
        rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
        log: Vec::new(),
    };
    fs::write(
        l.root.join("config.toml"),
        format!("[backup]\nkeep = {KEEP}\n"),
    )
    .unwrap();
    fs::create_dir_all(l.home()).unwrap();
    for _ in 0..12 {
        l.change_home();
    }
    fs::write(l.home().join("big"), vec![7u8; (1 << 20) + 4096]).unwrap();

    // Every snapshot the store may hold -> the tree it must restore to.
    let mut expected: BTreeMap<String, Tree> = BTreeMap::new();
    // Snapshots the tool reported (printed as committed).
    let mut reported: BTreeSet<String> = BTreeSet::new();
    // Reported snapshots that retention was allowed to remove.
    let mut may_go: BTreeSet<String> = BTreeSet::new();
    // Typical run time of each operation, from the runs that finished.
    let mut typical: BTreeMap<&str, Duration> = BTreeMap::new();
    let t0 = Instant::now();
    let mut listed: Vec<String> = Vec::new();
    let mut resume: Option<(String, PathBuf)> = None;
    let (mut killed, mut restores) = (0, 0);
    // Per operation: (runs, killed).
    let mut counts: BTreeMap<String, (u32, u32)> = BTreeMap::new();

    let n = iterations();
    for it in 0..n {
        let op = if resume.is_some() {
            Op::Restore
        } else {
            match l.rng.below(20) {
                0..=11 => Op::Sync,
                12..=14 => Op::Prune,
                _ if listed.is_empty() => Op::Sync,
                _ => Op::Restore,
            }
        };
        if op == Op::Sync {
            l.change_home();
        }
        let want = tree(&l.home());
        let (args, target): (Vec<String>, Option<(String, PathBuf)>) = match op {
            Op::Sync => (vec!["--json".into(), "sync".into()], None),
            Op::Prune => (
                vec![
                    "--json".into(),
                    "prune".into(),
                    "--keep-last".into(),
                    PRUNE_KEEP.to_string(),
                ],
                None,
            ),
            Op::Restore => {
                // The retry of a killed restore goes over what it left,
                // as first boot's does (a kill after the marker went
                // leaves a whole target that is not empty).
                let force = resume.is_some();
                let (id, to) = resume.take().unwrap_or_else(|| {
                    let id = listed[l.rng.below(listed.len() as u64) as usize].clone();
                    (id, l.root.join(format!("r{it}")))
                });
                let mut a: Vec<String> = vec!["--json".into(), "restore".into()];
                if force {
                    a.push("--force".into());
                }
                a.extend(["--snapshot".into(), id.clone(), "--to".into()]);
                a.push(to.display().to_string());
                (a, Some((id, to)))
            }
        };
        let name = args[1].clone();
        // Kill four runs in five, early on average.
        let kill = l.rng.below(5) != 0;
        let span = typical
            .get(name.as_str())
            .copied()
            .unwrap_or(Duration::from_millis(50));
        // Half the kills land in the first quarter (the cheap ones, and
        // where locks and uploads start), the rest anywhere up to the end.
        let reach = if l.rng.below(2) == 0 { 1 } else { 5 };
        let delay = Duration::from_micros(l.rng.below(span.as_micros() as u64 * reach / 4 + 1));
        // Which snapshots this run may remove by its rule.
        match op {
            Op::Sync => may_go.extend(listed.iter().rev().skip(KEEP - 1).cloned()),
            Op::Prune => may_go.extend(listed.iter().rev().skip(PRUNE_KEEP).cloned()),
            Op::Restore => {}
        }

        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let start = Instant::now();
        let mut child = l.cmd(&refs).spawn().unwrap();
        let mut was_killed = false;
        if kill {
            std::thread::sleep(delay);
            if child.try_wait().unwrap().is_none() {
                child.kill().unwrap();
                was_killed = true;
            }
        }
        let out = child.wait_with_output().unwrap();
        let took = start.elapsed();
        l.log.push(format!(
            "#{it} {args:?} {}",
            if was_killed {
                format!("killed after {delay:?}")
            } else {
                format!("{} in {took:?}", out.status)
            }
        ));
        let c = counts.entry(name.clone()).or_default();
        c.0 += 1;
        if was_killed {
            c.1 += 1;
            killed += 1;
            l.clear_locks();
        } else {
            if !out.status.success() {
                l.fail(format!(
                    "#{it} {args:?} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            let t = typical.entry(match op {
                Op::Sync => "sync",
                Op::Prune => "prune",
                Op::Restore => "restore",
            });
            let e = t.or_insert(took);
            *e = (*e * 3 + took) / 4;
        }

        let before = std::mem::replace(&mut listed, l.listed());
        // Whatever a run committed holds the home as it was at the run.
        for id in listed.iter().filter(|i| !before.contains(i)) {
            if op != Op::Sync {
                l.fail(format!("#{it} {name} added snapshot {id}"));
            }
            expected.insert(id.clone(), want.clone());
        }
        if op == Op::Sync && !was_killed {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let id = v["data"]["snapshot"].as_str().unwrap().to_owned();
            if expected.get(&id) != Some(&want) {
                l.fail(format!(
                    "#{it} sync reported {id}, which does not hold the home it walked"
                ));
            }
            if listed.last() != Some(&id) {
                l.fail(format!(
                    "#{it} sync reported {id} but the newest listed is {:?}",
                    listed.last()
                ));
            }
            reported.insert(id);
        }
        if let Some((id, to)) = target {
            if was_killed {
                resume = Some((id, to));
            } else {
                restores += 1;
                let got = tree(&to);
                if got != expected[&id] {
                    l.fail(format!(
                        "#{it} restore of {id} into {} differs: {}",
                        to.display(),
                        diff(&expected[&id], &got)
                    ));
                }
                fs::remove_dir_all(&to).unwrap();
            }
        }
        for id in &reported {
            if !listed.contains(id) && !may_go.contains(id) {
                l.fail(format!("#{it} reported snapshot {id} is gone"));
            }
        }
        if (it + 1) % CHECK_EVERY == 0 && it + 1 < n && resume.is_none() {
            l.check_all(&listed, &expected, it);
        }
    }
    // A restore killed last is finished; then every snapshot is checked
    // once more and the store checks out.
    if let Some((id, to)) = resume.take() {
        l.ok(&[
            "restore",
            "--force",
            "--snapshot",
            &id,
            "--to",
            to.to_str().unwrap(),
        ]);
        if tree(&to) != expected[&id] {
            l.fail(format!("last restore of {id} differs"));
        }
    }
    l.check_all(&listed, &expected, n);
    l.ok(&["check", "--read-data"]);
    eprintln!(
        "{n} iterations ({killed} killed; (runs, killed) {counts:?}; {restores} restores \
         finished, {} snapshots reported) in {:?}",
        reported.len(),
        t0.elapsed()
    );
    assert!(killed > n / 3, "only {killed} of {n} runs were killed");
    assert!(
        reported.len() > n / 25,
        "only {} syncs finished",
        reported.len()
    );
}

/// DELETE an object. moto refuses an anonymous delete but does not check
/// signatures: any credential will do.
fn s3_delete(port: u16, key: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "DELETE /sbx/{key} HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, \
         SignedHeaders=host;x-amz-date, Signature=00\r\nx-amz-date: 20260101T000000Z\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut r = String::new();
    let _ = s.read_to_string(&mut r);
    r
}

/// The first few paths where two trees differ.
fn diff(want: &Tree, got: &Tree) -> String {
    let mut out = Vec::new();
    for (k, v) in want {
        if got.get(k) != Some(v) {
            out.push(format!(
                "{}: want {v}, got {:?}",
                String::from_utf8_lossy(k),
                got.get(k)
            ));
        }
    }
    for k in got.keys().filter(|k| !want.contains_key(*k)) {
        out.push(format!("{}: extra", String::from_utf8_lossy(k)));
    }
    out.truncate(5);
    out.join("; ")
}

#[test]
fn kill_loop_file() {
    run_loop(Backend::File);
}

#[test]
fn kill_loop_s3() {
    let Some(m) = moto() else { return };
    run_loop(Backend::S3(m));
}
