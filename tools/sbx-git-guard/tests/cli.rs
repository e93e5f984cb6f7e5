//! The guard against real git (Debian's 2.39 and the 2.47 under
//! /usr/local when present), on scratch repositories with failing hooks.
//! Attacks are judged by their effect: did a ref move, did a hook change.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const GUARD: &str = env!("CARGO_BIN_EXE_sbx-git-guard");

fn real_gits() -> Vec<PathBuf> {
    let v: Vec<PathBuf> = ["/usr/bin/git", "/usr/local/bin/git"]
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .collect();
    assert!(
        !v.is_empty(),
        "no git installed (scripts/prereqs installs it)"
    );
    v
}

/// A sandbox-like setup: `git` on PATH is the guard; the real one is only
/// reachable through SBX_REAL_GIT.
struct Lab {
    dir: tempfile::TempDir,
    real: PathBuf,
}

impl Lab {
    fn new(real: &Path) -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(GUARD, bin.join("git")).unwrap();
        std::os::unix::fs::symlink(GUARD, bin.join("git-commit")).unwrap();
        std::os::unix::fs::symlink(GUARD, bin.join("git-upload-pack")).unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            home.join(".gitconfig"),
            "[user]\n\tname = Agent\n\temail = agent@example.invalid\n[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n",
        )
        .unwrap();
        Lab {
            dir,
            real: real.to_owned(),
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn cmd(&self, program: &OsStr, cwd: &str) -> Command {
        let mut c = Command::new(program);
        c.env_clear()
            .current_dir(self.path(cwd))
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", self.path("bin").display()),
            )
            .env("HOME", self.path("home"))
            .env("SBX_REAL_GIT", &self.real)
            .env("SBX_AUDIT_LOG", self.path("audit.jsonl"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("LC_ALL", "C");
        c
    }

    /// `git ARGS` through the guard, in `cwd` (relative to the lab).
    fn git(&self, cwd: &str, args: &[&str]) -> Output {
        self.cmd(OsStr::new("git"), cwd)
            .args(args)
            .output()
            .unwrap()
    }

    fn git_env(&self, cwd: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = self.cmd(OsStr::new("git"), cwd);
        c.args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    /// The real git, for setting up and for reading effects.
    fn real(&self, cwd: &str, args: &[&str]) -> String {
        let out = self
            .cmd(self.real.as_os_str(), cwd)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "real git {args:?} in {cwd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn head(&self, repo: &str, rev: &str) -> String {
        self.real(repo, &["rev-parse", rev])
    }

    fn hook(&self, repo: &str, name: &str, body: &str) {
        let p = self.path(repo).join(".git/hooks").join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A repository with one commit and a failing pre-commit hook.
    fn repo(&self, name: &str) {
        std::fs::create_dir_all(self.path(name)).unwrap();
        self.real(name, &["init", "-q"]);
        std::fs::write(self.path(name).join("a"), "1\n").unwrap();
        self.real(name, &["add", "a"]);
        self.real(name, &["commit", "-qm", "one"]);
    }

    fn audit(&self) -> String {
        std::fs::read_to_string(self.path("audit.jsonl")).unwrap_or_default()
    }
}

fn refused(out: &Output) -> bool {
    out.status.code() == Some(77)
}

fn each_git(f: impl Fn(&Lab)) {
    for g in real_gits() {
        let lab = Lab::new(&g);
        f(&lab);
    }
}

#[test]
fn pre_commit_cannot_be_skipped() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook("r", "pre-commit", "exit 1");
        std::fs::write(lab.path("r/a"), "2\n").unwrap();
        lab.real("r", &["add", "a"]);
        let before = lab.head("r", "HEAD");
        let empty = lab.path("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let empty_kv = format!("core.hooksPath={}", empty.display());
        let attacks: Vec<Vec<&str>> = vec![
            vec!["commit", "--no-verify", "-m", "x"],
            vec!["commit", "-nm", "x"],
            vec!["commit", "-anm", "x"],
            vec!["commit", "--no-verif", "-m", "x"],
            vec!["commit", "-m", "x", "--no-verify"],
            vec!["-c", &empty_kv, "commit", "-m", "x"],
            vec![
                "-C",
                ".",
                "-c",
                "color.ui=never",
                "commit",
                "-qn",
                "-m",
                "x",
            ],
        ];
        for a in &attacks {
            let out = lab.git("r", a);
            assert!(refused(&out), "{a:?}: {out:?}");
            assert_eq!(lab.head("r", "HEAD"), before, "{a:?} moved HEAD");
        }
        // Through the environment, an alias and a dashed command.
        let out = lab.git_env(
            "r",
            &["commit", "-m", "x"],
            &[
                ("GIT_CONFIG_COUNT", "1"),
                ("GIT_CONFIG_KEY_0", "core.hooksPath"),
                ("GIT_CONFIG_VALUE_0", &empty.to_string_lossy()),
            ],
        );
        assert!(refused(&out));
        lab.real("r", &["config", "alias.ci", "commit --no-verify"]);
        assert!(refused(&lab.git("r", &["ci", "-m", "x"])));
        let dashed = lab
            .cmd(lab.path("bin/git-commit").as_os_str(), "r")
            .args(["-n", "-m", "x"])
            .output()
            .unwrap();
        assert!(refused(&dashed), "{dashed:?}");
        // The shell writes core.hooksPath straight into .git/config: the pin
        // still runs the repository's hook.
        let cfg = lab.path("r/.git/config");
        let mut text = std::fs::read_to_string(&cfg).unwrap();
        text.push_str(&format!("[core]\n\thooksPath = {}\n", empty.display()));
        std::fs::write(&cfg, text).unwrap();
        let out = lab.git("r", &["commit", "-m", "x"]);
        assert!(
            !out.status.success() && !refused(&out),
            "the hook must run and fail: {out:?}"
        );
        assert_eq!(lab.head("r", "HEAD"), before);
        // Control: the same commit with a passing hook goes through, so a
        // HEAD that did not move above means something.
        lab.hook("r", "pre-commit", "exit 0");
        let out = lab.git("r", &["commit", "-m", "fix --no-verify docs"]);
        assert!(out.status.success(), "{out:?}");
        assert_ne!(lab.head("r", "HEAD"), before);
        let audit = lab.audit();
        assert!(audit.contains(r#""policy":"block-no-verify""#), "{audit}");
        assert!(audit.contains(r#""policy":"config-inline""#), "{audit}");
    });
}

#[test]
fn merge_rebase_and_am_hooks_cannot_be_skipped() {
    each_git(|lab| {
        lab.repo("r");
        lab.real("r", &["checkout", "-qb", "feature"]);
        std::fs::write(lab.path("r/b"), "b\n").unwrap();
        lab.real("r", &["add", "b"]);
        lab.real("r", &["commit", "-qm", "feature"]);
        lab.real("r", &["format-patch", "-1", "-o", "../patches"]);
        lab.real("r", &["checkout", "-q", "main"]);
        std::fs::write(lab.path("r/c"), "c\n").unwrap();
        lab.real("r", &["add", "c"]);
        lab.real("r", &["commit", "-qm", "main"]);
        lab.hook("r", "pre-merge-commit", "exit 1");
        lab.hook("r", "pre-rebase", "exit 1");
        lab.hook("r", "applypatch-msg", "exit 1");
        let main = lab.head("r", "main");
        let feature = lab.head("r", "feature");
        for a in [
            &["merge", "--no-verify", "--no-edit", "feature"][..],
            &["merge", "feature", "--no-edit", "--no-verify"],
            &["pull", "--no-verify", "--no-edit", ".", "feature"],
        ] {
            assert!(refused(&lab.git("r", a)), "{a:?}");
            assert_eq!(lab.head("r", "main"), main, "{a:?}");
        }
        // The hook itself stops an honest merge.
        let out = lab.git("r", &["merge", "--no-edit", "feature"]);
        assert!(!out.status.success() && !refused(&out));
        lab.real("r", &["merge", "--abort"]).clear();
        assert_eq!(lab.head("r", "main"), main);
        // pre-rebase.
        lab.real("r", &["checkout", "-q", "feature"]);
        assert!(refused(&lab.git("r", &["rebase", "--no-verify", "main"])));
        assert!(refused(&lab.git("r", &["rebase", "-x", "true", "main"])));
        assert_eq!(lab.head("r", "feature"), feature);
        let out = lab.git("r", &["rebase", "main"]);
        assert!(
            !out.status.success() && !refused(&out),
            "pre-rebase must run"
        );
        assert_eq!(lab.head("r", "feature"), feature);
        // applypatch-msg.
        lab.real("r", &["checkout", "-q", "main"]);
        let patch = std::fs::read_dir(lab.path("patches"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let patch = patch.to_str().unwrap();
        assert!(refused(&lab.git("r", &["am", "--no-verify", patch])));
        assert!(refused(&lab.git("r", &["am", "-n", patch])));
        assert_eq!(lab.head("r", "main"), main);
        let out = lab.git("r", &["am", patch]);
        assert!(
            !out.status.success() && !refused(&out),
            "applypatch-msg must run"
        );
        assert_eq!(lab.head("r", "main"), main);
    });
}

#[test]
fn pushes_cannot_force_delete_or_skip_pre_push() {
    each_git(|lab| {
        lab.repo("r");
        lab.real(".", &["clone", "-q", "--bare", "r", "remote.git"]);
        lab.real("r", &["remote", "add", "origin", "../remote.git"]);
        lab.real("r", &["fetch", "-q", "origin"]);
        // The remote's main moves on; the local main diverges.
        lab.real(".", &["clone", "-q", "remote.git", "other"]);
        std::fs::write(lab.path("other/o"), "o\n").unwrap();
        lab.real("other", &["add", "o"]);
        lab.real("other", &["commit", "-qm", "other"]);
        lab.real("other", &["push", "-q", "origin", "main"]);
        std::fs::write(lab.path("r/l"), "l\n").unwrap();
        lab.real("r", &["add", "l"]);
        lab.real("r", &["commit", "-qm", "local"]);
        let remote = lab.head("remote.git", "main");
        for a in [
            &["push", "-f", "origin", "main"][..],
            &["push", "origin", "main", "--force"],
            &["push", "--force-with-lease", "origin", "main"],
            &["push", "--force-w", "origin", "main"],
            &["push", "origin", "+main"],
            &["push", "origin", "+main:main"],
            &["push", "--mirror", "origin"],
            &["push", "--mir", "origin"],
            &["push", "origin", ":main"],
            &["push", "--delete", "origin", "main"],
            &["push", "-d", "origin", "main"],
            &["push", "--prune", "origin", "refs/heads/*:refs/heads/*"],
            &["-c", "remote.origin.mirror=true", "push", "origin"],
            &["push", "--receive-pack=git receive-pack", "origin", "main"],
        ] {
            let out = lab.git("r", a);
            assert!(refused(&out), "{a:?}: {out:?}");
            assert_eq!(
                lab.head("remote.git", "main"),
                remote,
                "{a:?} moved the remote"
            );
        }
        // A force refspec stored in the config by the shell.
        let cfg = lab.path("r/.git/config");
        let orig = std::fs::read_to_string(&cfg).unwrap();
        std::fs::write(
            &cfg,
            format!("{orig}[remote \"origin\"]\n\tpush = +refs/heads/main:refs/heads/main\n"),
        )
        .unwrap();
        assert!(refused(&lab.git("r", &["push"])));
        assert!(refused(&lab.git("r", &["push", "origin"])));
        std::fs::write(
            &cfg,
            format!("{orig}[remote \"origin\"]\n\tmirror = true\n"),
        )
        .unwrap();
        assert!(refused(&lab.git("r", &["push", "origin"])));
        std::fs::write(&cfg, &orig).unwrap();
        assert_eq!(lab.head("remote.git", "main"), remote);
        // Control: the real git does force the remote, so the checks above
        // would have seen it.
        lab.real("r", &["branch", "-q", "victim"]);
        lab.real("r", &["push", "-q", "origin", "victim"]);
        lab.real("r", &["push", "-q", "-f", "origin", "HEAD~1:victim"]);
        // pre-push cannot be skipped; honest pushes work.
        lab.hook("r", "pre-push", "exit 1");
        lab.real("r", &["checkout", "-qb", "feature"]);
        assert!(refused(
            &lab.git("r", &["push", "--no-verify", "origin", "feature"])
        ));
        let out = lab.git("r", &["push", "origin", "feature"]);
        assert!(!out.status.success() && !refused(&out), "pre-push must run");
        lab.hook("r", "pre-push", "exit 0");
        assert!(
            lab.git("r", &["push", "-n", "origin", "feature"])
                .status
                .success()
        );
        let out = lab.git("r", &["push", "-u", "origin", "feature"]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(lab.head("remote.git", "feature"), lab.head("r", "feature"));
        assert_eq!(lab.head("remote.git", "main"), remote);
    });
}

#[test]
fn hooks_cannot_be_replaced_through_git() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook("r", "pre-commit", "exit 1");
        let hook = lab.path("r/.git/hooks/pre-commit");
        let before = std::fs::read(&hook).unwrap();
        // A tracked file named like the hook, ready to be checked out over it.
        std::fs::write(lab.path("r/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
        lab.real("r", &["add", "pre-commit"]);
        for a in [
            &["checkout-index", "-f", "--prefix=.git/hooks/", "pre-commit"][..],
            &[
                "--work-tree=.git/hooks",
                "checkout",
                "HEAD",
                "--",
                "pre-commit",
            ],
            &[
                "-C",
                ".git/hooks",
                "checkout-index",
                "-f",
                "--prefix=./",
                "pre-commit",
            ],
            &["config", "core.hooksPath", "/tmp"],
            &["config", "set", "core.hooksPath", "/tmp"],
            &["config", "--global", "core.hooksPath", "/tmp"],
            &["config", "--add", "include.path", "/tmp/x"],
        ] {
            let out = lab.git("r", a);
            assert!(refused(&out), "{a:?}: {out:?}");
            assert_eq!(
                std::fs::read(&hook).unwrap(),
                before,
                "{a:?} changed the hook"
            );
        }
        assert!(!lab.real("r", &["config", "--list"]).contains("hookspath"));
        // Control: the real git would overwrite it.
        lab.real(
            "r",
            &["checkout-index", "-f", "--prefix=.git/hooks/", "pre-commit"],
        );
        assert_ne!(std::fs::read(&hook).unwrap(), before);
    });
}

#[test]
fn husky_repositories() {
    each_git(|lab| {
        lab.repo("r");
        let r = lab.path("r");
        std::fs::create_dir_all(r.join(".husky/_")).unwrap();
        // husky 9's layout: .husky/_/<hook> runs .husky/_/h, which runs .husky/<hook>.
        std::fs::write(
            r.join(".husky/_/h"),
            "#!/usr/bin/env sh\n[ \"$HUSKY\" = \"0\" ] && exit 0\nn=$(basename \"$0\")\ns=$(dirname \"$(dirname \"$0\")\")/$n\n[ ! -f \"$s\" ] && exit 0\nsh -e \"$s\"\n",
        )
        .unwrap();
        std::fs::write(
            r.join(".husky/_/pre-commit"),
            "#!/usr/bin/env sh\n. \"$(dirname \"$0\")/h\"\n",
        )
        .unwrap();
        std::fs::write(r.join(".husky/pre-commit"), "echo lint failed; exit 1\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        for f in ["_/h", "_/pre-commit"] {
            std::fs::set_permissions(
                r.join(".husky").join(f),
                std::fs::Permissions::from_mode(0o755),
            )
            .unwrap();
        }
        // husky's own install step.
        let out = lab.git("r", &["config", "core.hooksPath", ".husky/_"]);
        assert!(out.status.success(), "{out:?}");
        lab.real("r", &["add", ".husky"]);
        lab.real("r", &["commit", "-qm", "husky", "--no-verify"]);
        let before = lab.head("r", "HEAD");
        std::fs::write(r.join("a"), "changed\n").unwrap();
        lab.real("r", &["add", "a"]);
        // HUSKY=0 is stripped: the hook runs and fails.
        let out = lab.git_env("r", &["commit", "-m", "x"], &[("HUSKY", "0")]);
        assert!(!out.status.success() && !refused(&out), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("lint failed"),
            "{out:?}"
        );
        // init.sh that turns husky off.
        let init = lab.path("home/.config/husky/init.sh");
        std::fs::create_dir_all(init.parent().unwrap()).unwrap();
        std::fs::write(&init, "export HUSKY=0\n").unwrap();
        assert!(refused(&lab.git("r", &["commit", "-m", "x"])));
        std::fs::write(&init, "").unwrap();
        // An edited, uncommitted .husky.
        std::fs::write(r.join(".husky/pre-commit"), "exit 0\n").unwrap();
        assert!(refused(&lab.git("r", &["commit", "-m", "x"])));
        assert_eq!(lab.head("r", "HEAD"), before);
        assert!(lab.audit().contains(r#""policy":"husky""#));
    });
}

#[test]
fn honest_use_works() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook("r", "pre-commit", "exit 0");
        std::fs::create_dir_all(lab.path("r/sub")).unwrap();
        std::fs::write(lab.path("r/a"), "2\n").unwrap();
        let ok = |args: &[&str], env: &[(&str, &str)]| {
            let out = lab.git_env("r", args, env);
            assert!(
                out.status.success(),
                "git {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out
        };
        ok(&["commit", "-am", "fix --no-verify docs"], &[]);
        std::fs::write(lab.path("r/a"), "3\n").unwrap();
        ok(&["commit", "-a", "-m", "-n"], &[]);
        assert_eq!(lab.real("r", &["log", "-1", "--format=%s"]), "-n");
        ok(&["commit", "--allow-empty", "-uno", "-m", "x"], &[]);
        ok(&["log", "-n", "5", "--oneline"], &[]);
        ok(&["-C", "sub", "status"], &[]);
        ok(&["config", "user.name", "X"], &[]);
        ok(&["config", "alias.st", "status"], &[]);
        ok(&["st"], &[]);
        ok(&["merge", "-n", "HEAD"], &[]);
        std::fs::write(lab.path("r/a"), "4\n").unwrap();
        ok(&["stash"], &[]);
        ok(&["stash", "pop"], &[]);
        ok(&["checkout", "--", "a"], &[]);
        ok(&["worktree", "add", "-q", "../wt"], &[]);
        ok(&["cherry-pick", "-n", "HEAD~1"], &[]);
        ok(&["reset", "-q", "--hard"], &[]);
        ok(
            &["rebase", "-i", "HEAD~2"],
            &[("GIT_SEQUENCE_EDITOR", "true")],
        );
        let out = ok(&["rev-parse", "HEAD"], &[]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            lab.head("r", "HEAD")
        );
        // Pass-through helpers run the real git.
        let out = lab
            .cmd(lab.path("bin/git-upload-pack").as_os_str(), "r")
            .args(["--advertise-refs", "."])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(
            lab.audit().is_empty(),
            "nothing honest is logged: {}",
            lab.audit()
        );
    });
}

#[test]
fn fails_closed() {
    each_git(|lab| {
        lab.repo("r");
        let out = lab.git("r", &["--bogus-global", "status"]);
        assert!(refused(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("parse-error") && err.contains("--bogus-global"),
            "{err}"
        );
        // Unreadable configuration: git must not run at all.
        std::fs::write(lab.path("r/.git/config"), "[core\n").unwrap();
        let out = lab.git("r", &["status"]);
        assert!(refused(&out), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("config-unreadable"));
        let audit = lab.audit();
        assert_eq!(audit.lines().count(), 2, "{audit}");
        assert!(
            audit.contains(r#""target":"git --bogus-global status""#),
            "{audit}"
        );
    });
}

#[test]
fn check_explains_without_running() {
    let lab = Lab::new(&real_gits()[0]);
    lab.repo("r");
    let out = lab
        .cmd(OsStr::new(GUARD), "r")
        .args([
            "--json",
            "check",
            "--",
            "push",
            "--force-w",
            "origin",
            "main",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["type"], "verdict");
    assert_eq!(v["data"]["verdict"], "block");
    assert_eq!(v["data"]["rule"], "block-force-push");
    let out = lab
        .cmd(OsStr::new(GUARD), "r")
        .args(["check", "--", "status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("allow: git -c 'core.hooksPath="), "{text}");
    assert!(lab.audit().is_empty(), "check is a query, not a decision");
    let out = lab
        .cmd(OsStr::new(GUARD), "r")
        .args(["rules"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("block-no-verify"));
}
