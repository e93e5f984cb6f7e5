//! sbx-worktree against the real git on scratch repositories: what it
//! makes, where `git push` lands, and every bad input refused with nothing
//! changed.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_sbx-worktree");

struct Lab {
    dir: tempfile::TempDir,
}

impl Lab {
    fn new() -> Lab {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::write(
            dir.path().join("home/.gitconfig"),
            "[user]\n\tname = Dev\n\temail = dev@example.invalid\n[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n",
        )
        .unwrap();
        Lab { dir }
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn env(&self, c: &mut Command) {
        c.env_clear()
            .env("HOME", self.p("home"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("XDG_STATE_HOME", self.p("state"));
    }

    fn git(&self, cwd: &Path, args: &[&str]) -> Output {
        let mut c = Command::new("git");
        self.env(&mut c);
        c.current_dir(cwd).args(args).output().unwrap()
    }

    fn ok(&self, cwd: &Path, args: &[&str]) -> String {
        let o = self.git(cwd, args);
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim_end().to_owned()
    }

    /// A host checkout on `main` with one commit (and a file).
    fn host(&self, name: &str) -> PathBuf {
        let h = self.p(name);
        std::fs::create_dir_all(&h).unwrap();
        self.ok(&h, &["init", "-q"]);
        std::fs::write(h.join("README"), "hello\n").unwrap();
        self.ok(&h, &["add", "README"]);
        self.ok(&h, &["commit", "-qm", "first"]);
        h
    }

    fn wt(&self, args: &[&str]) -> Output {
        let mut c = Command::new(BIN);
        self.env(&mut c);
        c.current_dir(self.dir.path()).args(args).output().unwrap()
    }

    fn provision(&self, shelf: &str, host: &Path, branch: &str) -> Output {
        self.wt(&[
            "provision",
            "--json",
            "--shelf",
            self.p(shelf).to_str().unwrap(),
            "--host-repo",
            host.to_str().unwrap(),
            &format!("--branch={branch}"),
        ])
    }
}

fn json(o: &Output) -> serde_json::Value {
    assert!(
        o.status.success(),
        "status {:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["data"].clone()
}

fn fails(o: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "stderr: {err}");
    assert!(err.contains(needle), "{needle:?} not in {err:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
}

/// Root-only cases skip elsewhere; under CI, where they must run, not root fails.
fn root_or_skip() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(std::env::var("CI").is_err(), "CI runs these tests as root");
    eprintln!("skip: needs root");
    false
}

#[test]
fn provision_then_push_lands_in_the_host() {
    let lab = Lab::new();
    let host = lab.host("app");
    let d = json(&lab.provision("shelf", &host, "feature/login"));
    let wt = lab.p("shelf/worktrees/feature__login");
    assert_eq!(d["worktree"], "created");
    assert_eq!(d["repo"], "cloned");
    assert_eq!(d["path"], wt.to_str().unwrap());
    assert_eq!(d["upstream"], "host/feature/login");
    assert_eq!(d["base"], "origin/main");
    assert!(wt.join("README").is_file());
    // The clone itself has no checkout: only worktrees do.
    assert!(!lab.p("shelf/repo/README").exists());
    // Idempotent.
    let again = json(&lab.provision("shelf", &host, "feature/login"));
    assert_eq!(again["worktree"], "reused");
    assert_eq!(again["repo"], "reused");

    // A commit and a plain `git push` reach the host, which stays on main.
    std::fs::write(wt.join("new.txt"), "x\n").unwrap();
    lab.ok(&wt, &["add", "new.txt"]);
    lab.ok(&wt, &["commit", "-qm", "work"]);
    let head = lab.ok(&wt, &["rev-parse", "HEAD"]);
    let push = lab.git(&wt, &["push", "-q"]);
    assert!(
        push.status.success(),
        "{}",
        String::from_utf8_lossy(&push.stderr)
    );
    assert_eq!(
        lab.ok(&host, &["rev-parse", "refs/heads/feature/login"]),
        head
    );
    assert_eq!(lab.ok(&host, &["symbolic-ref", "HEAD"]), "refs/heads/main");
}

#[test]
fn push_to_the_hosts_checked_out_branch_is_refused() {
    let lab = Lab::new();
    let host = lab.host("app");
    let before = lab.ok(&host, &["rev-parse", "main"]);
    let d = json(&lab.provision("shelf", &host, "main"));
    assert_eq!(
        d["base"],
        serde_json::Value::Null,
        "main exists in the clone"
    );
    let wt = lab.p("shelf/worktrees/main");
    std::fs::write(wt.join("b"), "b\n").unwrap();
    lab.ok(&wt, &["add", "b"]);
    lab.ok(&wt, &["commit", "-qm", "b"]);
    let push = lab.git(&wt, &["push"]);
    assert!(!push.status.success());
    let err = String::from_utf8_lossy(&push.stderr);
    assert!(err.contains("checked out"), "{err}");
    assert_eq!(lab.ok(&host, &["rev-parse", "main"]), before);
}

#[test]
fn existing_branches_and_a_non_main_default() {
    let lab = Lab::new();
    // An upstream whose default branch is trunk; the host is its clone.
    let up = lab.p("up.git");
    lab.ok(
        lab.dir.path(),
        &["init", "-q", "--bare", "-b", "trunk", up.to_str().unwrap()],
    );
    let seed = lab.host("seed");
    lab.ok(&seed, &["push", "-q", up.to_str().unwrap(), "main:trunk"]);
    lab.ok(&seed, &["checkout", "-qb", "feat/x"]);
    std::fs::write(seed.join("x"), "x\n").unwrap();
    lab.ok(&seed, &["add", "x"]);
    lab.ok(&seed, &["commit", "-qm", "x"]);
    lab.ok(&seed, &["push", "-q", up.to_str().unwrap(), "feat/x"]);
    let feat = lab.ok(&seed, &["rev-parse", "HEAD"]);
    let host = lab.p("host");
    lab.ok(
        lab.dir.path(),
        &["clone", "-q", up.to_str().unwrap(), host.to_str().unwrap()],
    );

    let d = json(&lab.provision("shelf", &host, "feat/x"));
    assert_eq!(d["base"], "origin/feat/x");
    let wt = lab.p("shelf/worktrees/feat__x");
    assert_eq!(lab.ok(&wt, &["rev-parse", "HEAD"]), feat);
    let n = json(&lab.provision("shelf", &host, "new"));
    assert_eq!(n["base"], "origin/trunk");
    let repo = lab.p("shelf/repo");
    // origin is the host's origin; host is the host checkout.
    assert_eq!(
        lab.ok(&repo, &["remote", "get-url", "origin"]),
        up.to_str().unwrap()
    );
    assert_eq!(
        lab.ok(&repo, &["remote", "get-url", "host"]),
        format!("file://{}", host.canonicalize().unwrap().display())
    );
    assert_eq!(lab.ok(&repo, &["config", "branch.new.remote"]), "host");
    assert_eq!(
        lab.ok(&repo, &["config", "branch.new.merge"]),
        "refs/heads/new"
    );
    // A new branch upstream appears at the next provisioning (fetch --prune).
    lab.ok(&seed, &["push", "-q", up.to_str().unwrap(), "feat/x:later"]);
    let l = json(&lab.provision("shelf", &host, "later"));
    assert_eq!(l["base"], "origin/later");

    let list = lab.wt(&[
        "list",
        "--json",
        "--shelf",
        lab.p("shelf").to_str().unwrap(),
    ]);
    assert!(list.status.success());
    let branches: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["data"]["branch"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(branches.len(), 3, "{branches:?}");
    for b in ["feat/x", "new", "later"] {
        assert!(branches.iter().any(|x| x == b), "{b} in {branches:?}");
    }

    // --origin-from-host: origin/* as the host last fetched it, origin
    // itself never asked (it is gone), origin/HEAD from the host's.
    lab.ok(&host, &["fetch", "-q", "origin"]);
    lab.ok(&seed, &["commit", "-qm", "unfetched", "--allow-empty"]);
    lab.ok(&seed, &["push", "-q", up.to_str().unwrap(), "feat/x"]);
    std::fs::rename(&up, lab.p("up-gone.git")).unwrap();
    let from_host = |branch: &str| {
        json(&lab.wt(&[
            "provision",
            "--json",
            "--origin-from-host",
            "--shelf",
            lab.p("shelf2").to_str().unwrap(),
            "--host-repo",
            host.to_str().unwrap(),
            &format!("--branch={branch}"),
        ]))
    };
    let x = from_host("feat/x");
    assert_eq!(x["base"], "origin/feat/x");
    let wt2 = lab.p("shelf2/worktrees/feat__x");
    assert_eq!(lab.ok(&wt2, &["rev-parse", "HEAD"]), feat);
    assert_eq!(from_host("other")["base"], "origin/trunk");
    let repo2 = lab.p("shelf2/repo");
    assert_eq!(
        lab.ok(&repo2, &["remote", "get-url", "origin"]),
        up.to_str().unwrap()
    );
    // Only origin's branches are origin/*, not the host's own.
    let refs = lab.ok(
        &repo2,
        &["for-each-ref", "--format=%(refname)", "refs/remotes/origin"],
    );
    assert!(!refs.contains("origin/main"), "{refs}");
    assert!(refs.contains("origin/later"), "{refs}");
    // Reused: still no network.
    assert_eq!(from_host("feat/x")["worktree"], "reused");
    // What the host fetches later is origin/* at the next provisioning:
    // a new branch, then a new default (origin/HEAD).
    lab.ok(&host, &["update-ref", "refs/remotes/origin/newer", &feat]);
    assert_eq!(from_host("newer")["base"], "origin/newer");
    lab.ok(
        &host,
        &[
            "symbolic-ref",
            "refs/remotes/origin/HEAD",
            "refs/remotes/origin/later",
        ],
    );
    assert_eq!(from_host("n2")["base"], "origin/later");
    assert_eq!(from_host("n3")["base"], "origin/later");
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let lab = Lab::new();
    let host = lab.host("app");
    for bad in ["a..b", "-x", "@{-1}", "a b", "x.lock", "HEAD^", "a/.b", ""] {
        fails(
            &lab.provision("s1", &host, bad),
            64,
            "git refuses this name",
        );
    }
    assert!(!lab.p("s1").exists(), "nothing made for a bad name");

    // Two names, one directory: the second is refused, naming both.
    json(&lab.provision("s2", &host, "a/b"));
    fails(
        &lab.provision("s2", &host, "a__b"),
        64,
        "\"a__b\" and \"a/b\"",
    );

    // Host paths.
    fails(
        &lab.provision("s3", &lab.p("nope"), "b"),
        66,
        "no such directory",
    );
    std::fs::create_dir_all(lab.p("plain")).unwrap();
    fails(
        &lab.provision("s3", &lab.p("plain"), "b"),
        64,
        "not a git repository",
    );
    let sub = host.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    fails(&lab.provision("s3", &sub, "b"), 64, "not a git repository");
    let det = lab.host("det");
    lab.ok(&det, &["checkout", "-q", "--detach"]);
    fails(&lab.provision("s3", &det, "b"), 65, "HEAD is detached");
    let unborn = lab.p("unborn");
    std::fs::create_dir_all(&unborn).unwrap();
    lab.ok(&unborn, &["init", "-q"]);
    fails(&lab.provision("s3", &unborn, "b"), 65, "no commits yet");
    assert!(!lab.p("s3").exists());

    // A dirty worktree stays unless --force.
    let wt = lab.p("s2/worktrees/a__b");
    std::fs::write(wt.join("untracked"), "u").unwrap();
    let shelf = lab.p("s2");
    let rm = |force: bool| {
        let mut a = vec![
            "remove",
            "--shelf",
            shelf.to_str().unwrap(),
            "--branch",
            "a/b",
        ];
        if force {
            a.push("--force");
        }
        lab.wt(&a)
    };
    fails(&rm(false), 64, "uncommitted changes");
    assert!(wt.join("untracked").exists());
    assert!(rm(true).status.success());
    assert!(!wt.exists());
    fails(&rm(false), 64, "no worktree");
}

#[test]
fn a_shelf_of_another_uid_is_refused() {
    if !root_or_skip() {
        return;
    }
    let lab = Lab::new();
    let host = lab.host("app");
    let shelf = lab.p("theirs");
    std::fs::create_dir_all(&shelf).unwrap();
    std::os::unix::fs::chown(&shelf, Some(4242), Some(4242)).unwrap();
    fails(
        &lab.provision("theirs", &host, "b"),
        77,
        "owned by uid 4242",
    );
    assert_eq!(std::fs::read_dir(&shelf).unwrap().count(), 0);
}

/// As root with --owner: everything made belongs to that user, and git
/// was told to trust exactly the shelf (not `*`): the global config is untouched.
#[test]
fn root_hands_the_shelf_to_the_owner() {
    if !root_or_skip() {
        return;
    }
    let lab = Lab::new();
    let host = lab.host("app");
    let gitconfig = std::fs::read(lab.p("home/.gitconfig")).unwrap();
    let shelf = lab.p("shelf");
    let o = lab.wt(&[
        "provision",
        "--shelf",
        shelf.to_str().unwrap(),
        "--host-repo",
        host.to_str().unwrap(),
        "--branch",
        "b",
        "--owner",
        "1234:1234",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for p in [
        "",
        "repo",
        "repo/.git/config",
        "worktrees",
        "worktrees/b",
        "worktrees/b/README",
        ".lock",
    ] {
        let m = std::fs::symlink_metadata(shelf.join(p)).unwrap();
        assert_eq!((m.uid(), m.gid()), (1234, 1234), "{p}");
    }
    // Again, now that the clone is someone else's: root's git still runs
    // there (safe.directory given for the shelf paths on its command line).
    let again = lab.wt(&[
        "provision",
        "--json",
        "--shelf",
        shelf.to_str().unwrap(),
        "--host-repo",
        host.to_str().unwrap(),
        "--branch",
        "b",
        "--owner",
        "1234:1234",
    ]);
    assert_eq!(json(&again)["worktree"], "reused");
    // Root for itself may not write into the owner's shelf.
    fails(&lab.provision("shelf", &host, "c"), 77, "owned by uid 1234");
    assert_eq!(std::fs::read(lab.p("home/.gitconfig")).unwrap(), gitconfig);
}

/// 8 processes x 4 branches at once: four correct worktrees, no error.
#[test]
fn concurrent_provisioning() {
    let lab = Lab::new();
    let host = lab.host("app");
    let shelf = lab.p("shelf");
    let mut kids = Vec::new();
    for i in 0..8 {
        for b in ["b0", "b1", "b2", "b3"] {
            let mut c = Command::new(BIN);
            lab.env(&mut c);
            c.args(["provision", "--json", "--shelf"])
                .arg(&shelf)
                .arg("--host-repo")
                .arg(&host)
                .args(["--branch", &format!("{b}/p")])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            kids.push((i, b, c.spawn().unwrap()));
        }
    }
    let mut created = 0;
    for (i, b, k) in kids {
        let o = k.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "process {i} branch {b}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        if json(&o)["worktree"] == "created" {
            created += 1;
        }
    }
    assert_eq!(created, 4, "each branch made once");
    let main = lab.ok(&host, &["rev-parse", "main"]);
    for b in ["b0", "b1", "b2", "b3"] {
        let wt = shelf.join(format!("worktrees/{b}__p"));
        assert_eq!(
            lab.ok(&wt, &["symbolic-ref", "--short", "HEAD"]),
            format!("{b}/p")
        );
        assert_eq!(lab.ok(&wt, &["rev-parse", "HEAD"]), main);
        assert_eq!(lab.ok(&wt, &["status", "--porcelain"]), "");
    }
}

/// Another holder of the lock past the timeout: exit 75, nothing made.
#[test]
fn a_held_lock_times_out_with_75() {
    let lab = Lab::new();
    let host = lab.host("app");
    let shelf = lab.p("shelf");
    std::fs::create_dir_all(&shelf).unwrap();
    let lockf = std::fs::File::create(shelf.join(".lock")).unwrap();
    let held = nix::fcntl::Flock::lock(lockf, nix::fcntl::FlockArg::LockExclusive).unwrap();
    let t = std::time::Instant::now();
    let o = lab.wt(&[
        "provision",
        "--shelf",
        shelf.to_str().unwrap(),
        "--host-repo",
        host.to_str().unwrap(),
        "--branch",
        "b",
        "--lock-timeout",
        "1",
    ]);
    fails(&o, 75, "holds the shelf lock");
    assert!(t.elapsed() >= std::time::Duration::from_secs(1));
    assert!(!shelf.join("repo").exists());
    drop(held);
    assert!(lab.provision("shelf", &host, "b").status.success());
}

#[test]
fn prune_forgets_vanished_worktrees() {
    let lab = Lab::new();
    let host = lab.host("app");
    json(&lab.provision("shelf", &host, "gone"));
    json(&lab.provision("shelf", &host, "kept"));
    std::fs::remove_dir_all(lab.p("shelf/worktrees/gone")).unwrap();
    let shelf = lab.p("shelf");
    let o = lab.wt(&["prune", "--json", "--shelf", shelf.to_str().unwrap()]);
    let d = json(&o);
    assert_eq!(d["branch"], "gone");
    let list = lab.wt(&["list", "--shelf", shelf.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(text.contains("kept") && !text.contains("gone"), "{text}");
    // The branch can be provisioned again, from where it was.
    assert_eq!(
        json(&lab.provision("shelf", &host, "gone"))["worktree"],
        "created"
    );
    // A vanished worktree needs no prune first: provisioning prunes.
    std::fs::remove_dir_all(lab.p("shelf/worktrees/kept")).unwrap();
    assert_eq!(
        json(&lab.provision("shelf", &host, "kept"))["worktree"],
        "created"
    );
    // Its path still registered and its branch gone: made anew (git makes
    // the branch before it refuses the path; the second try uses it).
    std::fs::remove_dir_all(lab.p("shelf/worktrees/kept")).unwrap();
    let repo = lab.p("shelf/repo");
    lab.ok(&repo, &["update-ref", "-d", "refs/heads/kept"]);
    let d = json(&lab.provision("shelf", &host, "kept"));
    assert_eq!(d["worktree"], "created");
    assert_eq!(d["base"], "origin/main");
    assert!(lab.p("shelf/worktrees/kept/README").exists());
}

#[test]
fn help_teaches() {
    let lab = Lab::new();
    let o = lab.wt(&["--help"]);
    assert!(o.status.success());
    let t = String::from_utf8_lossy(&o.stdout);
    for w in ["provision", "exit 75", "safe.directory", "Examples"] {
        assert!(t.contains(w), "{w}");
    }
}

/// What a sandbox can plant in the shelf it shares: a shell script that
/// records who ran it (and for what) in the world-writable `marks`.
fn plant_script(lab: &Lab, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let marks = lab.p("marks");
    std::fs::create_dir_all(&marks).unwrap();
    std::fs::set_permissions(&marks, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let s = lab.p(&format!("evil-{name}"));
    std::fs::write(
        &s,
        format!(
            "#!/bin/sh\necho \"$(id -u) $0 $*\" >> {}/{name}\ncat\n",
            marks.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o755)).unwrap();
    s
}

fn marks(lab: &Lab) -> Vec<String> {
    std::fs::read_dir(lab.p("marks"))
        .map(|d| {
            d.flatten()
                .map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n + ": " + &std::fs::read_to_string(e.path()).unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default()
}

fn root_provision(lab: &Lab, host: &Path, branch: &str) -> Output {
    lab.wt(&[
        "provision",
        "--json",
        "--shelf",
        lab.p("shelf").to_str().unwrap(),
        "--host-repo",
        host.to_str().unwrap(),
        &format!("--branch={branch}"),
        "--owner",
        "1234:1234",
    ])
}

/// Attack: a sandbox arms the shelf it shares (hooks in the clone and in a
/// core.hooksPath of its own, core.fsmonitor, aliases named like the
/// sub-commands provisioning runs, an ssh command, a credential helper,
/// an editor and a pager). The next provisioning, run by root, runs none
/// of it: it clones, fetches, checks out a new branch and still succeeds.
#[test]
fn a_planted_shelf_config_runs_nothing_when_root_provisions() {
    if !root_or_skip() {
        return;
    }
    let lab = Lab::new();
    let host = lab.host("app");
    json(&root_provision(&lab, &host, "a"));
    let repo = lab.p("shelf/repo");
    let hooks = lab.p("evil-hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for h in [
        "post-checkout",
        "reference-transaction",
        "post-index-change",
        "pre-auto-gc",
        "post-rewrite",
    ] {
        let s = plant_script(&lab, h);
        std::fs::copy(&s, hooks.join(h)).unwrap();
        std::fs::copy(&s, repo.join(".git/hooks").join(h)).unwrap();
    }
    let fsmonitor = plant_script(&lab, "fsmonitor");
    let ssh = plant_script(&lab, "ssh");
    let cred = plant_script(&lab, "credential");
    let editor = plant_script(&lab, "editor");
    let alias = plant_script(&lab, "alias");
    let mut cfg = std::fs::OpenOptions::new()
        .append(true)
        .open(repo.join(".git/config"))
        .unwrap();
    use std::io::Write;
    write!(
        cfg,
        "[core]\n\thooksPath = {h}\n\tfsmonitor = {f}\n\tsshCommand = {s}\n\teditor = {e}\n\tpager = {e}\n\
         [credential]\n\thelper = {c}\n[gc]\n\tauto = 1\n\
         [alias]\n\tfetch = !{a}\n\tworktree = !{a}\n\tclone = !{a}\n\tconfig = !{a}\n\trev-parse = !{a}\n",
        h = hooks.display(),
        f = fsmonitor.display(),
        s = ssh.display(),
        e = editor.display(),
        c = cred.display(),
        a = alias.display(),
    )
    .unwrap();
    drop(cfg);
    // New commits on the host, so the fetch updates refs (reference-transaction).
    std::fs::write(host.join("more"), "x\n").unwrap();
    lab.ok(&host, &["add", "more"]);
    lab.ok(&host, &["commit", "-qm", "more"]);

    let d = json(&root_provision(&lab, &host, "b"));
    assert_eq!(d["worktree"], "created");
    assert!(lab.p("shelf/worktrees/b/more").is_file());
    assert_eq!(marks(&lab), Vec::<String>::new(), "planted programs ran");
    // Reused, removed and listed by root: still nothing.
    json(&root_provision(&lab, &host, "b"));
    let l = lab.wt(&["list", "--shelf", lab.p("shelf").to_str().unwrap()]);
    assert!(l.status.success(), "{}", String::from_utf8_lossy(&l.stderr));
    assert_eq!(marks(&lab), Vec::<String>::new(), "planted programs ran");
}

/// Attack: program-running keys under names of the sandbox's choosing (a
/// smudge filter every file gets through info/attributes, an include of
/// such a config, a URL rewrite, a worktree whose commondir points at
/// another repository) make the shelf refused (77, audited) before git
/// runs in it: no filter runs, no worktree is made.
#[test]
fn a_planted_filter_or_redirect_is_refused() {
    if !root_or_skip() {
        return;
    }
    let smudge = |lab: &Lab| {
        let s = plant_script(lab, "smudge");
        format!(
            "[filter \"x\"]\n\tsmudge = {}\n\tclean = {}\n",
            s.display(),
            s.display()
        )
    };
    type Plant = fn(&Lab, &Path, String);
    let cases: [(&str, Plant, &str); 4] = [
        (
            "filter",
            |_, repo, f| append(&repo.join(".git/config"), &f),
            "filter.x.smudge is not allowed",
        ),
        (
            "include",
            |lab, repo, f| {
                let inc = lab.p("evil.inc");
                std::fs::write(&inc, f).unwrap();
                append(
                    &repo.join(".git/config"),
                    &format!("[include]\n\tpath = {}\n", inc.display()),
                );
            },
            "include.path is not allowed",
        ),
        (
            "insteadOf",
            |_, repo, _| {
                append(
                    &repo.join(".git/config"),
                    "[url \"/nonexistent/\"]\n\tinsteadOf = file:///\n",
                )
            },
            "insteadof is not allowed",
        ),
        (
            "commondir",
            |_, repo, _| {
                let d = repo.join(".git/worktrees/a/commondir");
                std::fs::write(d, "/elsewhere/.git\n").unwrap();
            },
            "not a worktree of this clone",
        ),
    ];
    for (name, plant, needle) in cases {
        let lab = Lab::new();
        let host = lab.host("app");
        std::fs::write(host.join(".gitattributes"), "* filter=x\n").unwrap();
        lab.ok(&host, &["add", ".gitattributes"]);
        lab.ok(&host, &["commit", "-qm", "attrs"]);
        json(&root_provision(&lab, &host, "a"));
        let repo = lab.p("shelf/repo");
        std::fs::create_dir_all(repo.join(".git/info")).unwrap();
        std::fs::write(repo.join(".git/info/attributes"), "* filter=x\n").unwrap();
        // The filter is in the config itself for every case but include,
        // whose included file has it: each must be refused on its own.
        let f = smudge(&lab);
        if name != "include" {
            append(&repo.join(".git/config"), &f);
        }
        plant(&lab, &repo, f);
        if name != "filter" && name != "include" {
            // Only the case's own key: drop the filter again.
            let cfg = std::fs::read_to_string(repo.join(".git/config")).unwrap();
            let cut = cfg.find("[filter \"x\"]").unwrap();
            let end = cut + cfg[cut..].find("clean =").unwrap();
            let end = end + cfg[end..].find('\n').unwrap() + 1;
            std::fs::write(
                repo.join(".git/config"),
                format!("{}{}", &cfg[..cut], &cfg[end..]),
            )
            .unwrap();
        }
        let o = root_provision(&lab, &host, "b");
        fails(&o, 77, needle);
        assert!(!lab.p("shelf/worktrees/b").exists(), "{name}");
        assert_eq!(
            marks(&lab),
            Vec::<String>::new(),
            "{name}: planted programs ran"
        );
        let log = std::fs::read_to_string(lab.p("state/sbx/audit.jsonl")).unwrap_or_default();
        assert!(log.contains("armed-shelf"), "{name}: audited: {log}");
    }
}

fn append(p: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(p).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// Attack, racing: another sandbox rewrites the shared shelf's config
/// while root provisions, flipping it between clean (so the check passes)
/// and armed (a smudge filter every file gets, an upload-pack of its own
/// for origin) thousands of times a second. Whatever git reads at any
/// instant, no planted program runs: the checkout reads no shelf config,
/// the fetch names its upload-pack. Each run either provisions or is
/// refused (77); some must get past the check, or the race was not run.
#[test]
fn a_config_rewritten_during_provisioning_runs_nothing() {
    if !root_or_skip() {
        return;
    }
    let lab = Lab::new();
    let host = lab.host("app");
    for d in 0..20 {
        let dir = host.join(format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..20 {
            std::fs::write(dir.join(format!("f{f}")), format!("{d} {f}\n")).unwrap();
        }
    }
    std::fs::write(host.join(".gitattributes"), "* filter=x\n").unwrap();
    lab.ok(&host, &["add", "."]);
    lab.ok(&host, &["commit", "-qm", "files"]);
    json(&root_provision(&lab, &host, "a"));
    let repo = lab.p("shelf/repo");
    std::fs::write(repo.join(".git/info/attributes"), "* filter=x\n").unwrap();
    let s = plant_script(&lab, "smudge");
    // An upload-pack that answers nothing: the fetch fails rather than hangs.
    let up = lab.p("evil-uploadpack");
    std::fs::write(
        &up,
        format!(
            "#!/bin/sh\necho \"$(id -u)\" >> {}/uploadpack\nexit 1\n",
            lab.p("marks").display()
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&up, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let clean = std::fs::read_to_string(repo.join(".git/config")).unwrap();
    let armed = format!(
        "{clean}[filter \"x\"]\n\tsmudge = {s}\n\tclean = {s}\n\tprocess = {s}\n[remote \"origin\"]\n\tuploadpack = {u}\n",
        s = s.display(),
        u = up.display()
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let attacker = {
        let stop = stop.clone();
        let cfg = repo.join(".git/config");
        let tmp = repo.join(".git/config.evil");
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let text = if n % 2 == 0 { &armed } else { &clean };
                if std::fs::write(&tmp, text).is_ok() {
                    let _ = std::fs::rename(&tmp, &cfg);
                }
                n += 1;
            }
            n
        })
    };
    let (mut made, mut refused) = (0, 0);
    for i in 0..12 {
        let o = root_provision(&lab, &host, &format!("r{i}"));
        match o.status.code() {
            Some(0) => made += 1,
            Some(77) => refused += 1,
            _ => {}
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flips = attacker.join().unwrap();
    assert_eq!(
        marks(&lab),
        Vec::<String>::new(),
        "planted programs ran ({made} made, {refused} refused, {flips} rewrites)"
    );
    assert!(made > 0, "no run got past the check: {refused} refused");
}
