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

    /// `git <commit>` in `repo` with `k=v` set, by the real git and then
    /// through the guard: what is wrong, one line each. The real git must
    /// commit past the hook (else the case is no attack); the guard must
    /// refuse and leave HEAD where it was. HEAD is put back after each.
    fn env_bypass(&self, repo: &str, commit: &[&str], k: &str, v: &str) -> Vec<String> {
        let mut wrong = Vec::new();
        let before = self.head(repo, "HEAD");
        let real = self
            .cmd(self.real.as_os_str(), repo)
            .env(k, v)
            .args(commit)
            .output()
            .unwrap();
        if !(real.status.success() && self.head(repo, "HEAD") != before) {
            wrong.push(format!("{k}={v}: not an attack on the real git (bad case)"));
        }
        self.real(repo, &["reset", "-q", "--soft", &before]);
        let out = self.git_env(repo, commit, &[(k, v)]);
        if out.status.success() || self.head(repo, "HEAD") != before {
            wrong.push(format!(
                "{k}={v}: the commit passed the hook through the guard"
            ));
            self.real(repo, &["reset", "-q", "--soft", &before]);
        }
        wrong
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

    /// `git ARGS` through the guard in `repo`: refused as bringing in a
    /// stash commit, with main left at `main`.
    fn refused_as_stash(&self, repo: &str, args: &[&str], main: &str, what: &str) {
        let out = self.git(repo, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("a stash commit"),
            "{what}: {err}"
        );
        assert_eq!(self.head(repo, "main"), main, "{what}: main moved");
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

/// husky 9's `h` sources `${XDG_CONFIG_HOME:-$HOME/.config}/husky/init.sh`
/// as the hook's own process, after the guard looked at it as the caller's:
/// a symlink to `/proc/self/environ` (empty to the guard; the hook's own
/// environment as text to husky, where a variable holding `exit 0` on a
/// line of its own ends the hook), a directory linked to `/proc/self/cwd`
/// (the caller's directory to the guard, the work tree's top to the hook),
/// or a relative XDG_CONFIG_HOME (the same) each let husky's hook pass
/// unrun. Each is refused; a plain empty init.sh is not.
#[test]
fn husky_init_files_are_judged_as_the_hook_reads_them() {
    each_git(|lab| {
        lab.repo("r");
        let r = lab.path("r");
        std::fs::create_dir_all(r.join(".husky/_")).unwrap();
        std::fs::create_dir_all(r.join("sub")).unwrap();
        std::fs::write(
            r.join(".husky/_/h"),
            "#!/usr/bin/env sh
n=$(basename \"$0\")
s=$(dirname \"$(dirname \"$0\")\")/$n
\
             [ ! -f \"$s\" ] && exit 0
i=\"${XDG_CONFIG_HOME:-$HOME/.config}/husky/init.sh\"
\
             [ -f \"$i\" ] && . \"$i\"
sh -e \"$s\"
",
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
        lab.real("r", &["config", "core.hooksPath", ".husky/_"]);
        lab.real("r", &["add", ".husky"]);
        lab.real("r", &["commit", "-qm", "husky", "--no-verify"]);
        let before = lab.head("r", "HEAD");
        std::fs::write(r.join("a"), "changed\n").unwrap();
        lab.real("r", &["add", "a"]);
        std::fs::write(r.join("hx.sh"), "exit 0\n").unwrap();
        std::fs::create_dir_all(r.join("hx/husky")).unwrap();
        std::fs::write(r.join("hx/husky/init.sh"), "exit 0\n").unwrap();
        let config = lab.path("home/.config");
        let husky = config.join("husky");
        let reset = || {
            let _ = std::fs::remove_dir_all(&config);
            std::fs::create_dir_all(&config).unwrap();
        };
        let exit0 = ("X", "\nexit 0\n");
        type Case<'a> = (
            &'a str,
            Box<dyn Fn() + 'a>,
            Vec<(&'a str, &'a str)>,
            &'a str,
        );
        let cases: Vec<Case> = vec![
            (
                "init.sh -> /proc/self/environ",
                Box::new(|| {
                    std::fs::create_dir_all(&husky).unwrap();
                    std::os::unix::fs::symlink("/proc/self/environ", husky.join("init.sh"))
                        .unwrap();
                }),
                vec![exit0],
                "r",
            ),
            (
                "husky dir -> /proc/self/cwd/hx/husky",
                Box::new(|| {
                    std::os::unix::fs::symlink("/proc/self/cwd/hx/husky", &husky).unwrap();
                }),
                vec![],
                "r/sub",
            ),
            (
                "a chain of links to /proc/self/cwd",
                Box::new(|| {
                    std::os::unix::fs::symlink("/proc/self/cwd/hx/husky", config.join("l2"))
                        .unwrap();
                    std::os::unix::fs::symlink("l2", &husky).unwrap();
                }),
                vec![],
                "r/sub",
            ),
            (
                "a relative XDG_CONFIG_HOME",
                Box::new(|| {}),
                vec![("XDG_CONFIG_HOME", "hx")],
                "r/sub",
            ),
            (
                "XDG_CONFIG_HOME under /proc",
                Box::new(|| {}),
                vec![("XDG_CONFIG_HOME", "/proc/self/cwd/hx")],
                "r/sub",
            ),
        ];
        for (what, setup, env, cwd) in &cases {
            reset();
            setup();
            let out = lab.git_env(cwd, &["commit", "-qm", "x"], env);
            assert!(refused(&out), "{what}: {out:?}");
            assert_eq!(lab.head("r", "HEAD"), before, "{what}");
        }
        // A plain empty init.sh: the hook runs (and fails).
        reset();
        std::fs::create_dir_all(&husky).unwrap();
        std::fs::write(husky.join("init.sh"), "").unwrap();
        let out = lab.git("r", &["commit", "-qm", "x"]);
        assert!(!out.status.success() && !refused(&out), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("lint failed"),
            "{out:?}"
        );
        assert_eq!(lab.head("r", "HEAD"), before);
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
    assert!(
        text.starts_with("allow: git -c 'core.commitGraph=false' -c 'core.hooksPath="),
        "{text}"
    );
    assert!(lab.audit().is_empty(), "check is a query, not a decision");
    let out = lab
        .cmd(OsStr::new(GUARD), "r")
        .args(["rules"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("block-no-verify"));
}

// ---- Each class as a table, judged against the real git's own answer.

fn json_verdict(out: &Output) -> serde_json::Value {
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| {
        panic!(
            "check --json: {e}: {line} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    v["data"].clone()
}

fn canon(p: &str) -> String {
    std::fs::canonicalize(p)
        .map(|c| c.display().to_string())
        .unwrap_or_else(|_| p.to_owned())
}

/// Run `program args` with exactly `env` (duplicates kept, in order), as an
/// agent's shell could: std's Command folds duplicate names, python's
/// execve with a mapping whose keys repeat does not.
fn run_with_dup_env(program: &Path, args: &[&str], cwd: &Path, env: &[(String, String)]) -> Output {
    let script = r#"
import os, sys, json
pairs = json.loads(sys.argv[1])
class Env:
    def __init__(self): self.i = 0
    def __len__(self): return len(pairs)
    def keys(self): return [k for k, _ in pairs]
    def values(self): return [v for _, v in pairs]
    def items(self): return list(pairs)
    def __getitem__(self, k):
        v = pairs[self.i][1]; self.i += 1; return v
os.chdir(sys.argv[2])
os.execve(sys.argv[3], sys.argv[3:], Env())
"#;
    let pairs = serde_json::to_string(env).unwrap();
    Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(pairs)
        .arg(cwd)
        .arg(program)
        .args(args)
        .output()
        .expect("python3 (scripts/prereqs installs it)")
}

/// Class 1: where the guard pins hooks is where git looks for the
/// repository: `rev-parse --git-dir --git-common-dir --show-toplevel`
/// against the guard's own view, over generated layouts and environments.
#[test]
fn repository_discovery_matches_git() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook("r", "pre-commit", "exit 1");
        let r = lab.path("r");
        // Decoys: a .git directory whose HEAD is empty, or garbage.
        for (d, head) in [("decoy-empty", ""), ("decoy-junk", "junk\n")] {
            let g = r.join(d).join(".git");
            for sub in ["objects", "refs", "hooks"] {
                std::fs::create_dir_all(g.join(sub)).unwrap();
            }
            std::fs::write(g.join("HEAD"), head).unwrap();
        }
        // A decoy whose HEAD is valid is a repository to git as well.
        let g = r.join("decoy-valid/.git");
        for sub in ["objects", "refs", "hooks"] {
            std::fs::create_dir_all(g.join(sub)).unwrap();
        }
        std::fs::write(g.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        // A gitfile with CRLF, pointing at a separate git dir.
        lab.real(
            ".",
            &["init", "-q", "--separate-git-dir", "sep.git", "crlf"],
        );
        std::fs::write(
            lab.path("crlf/.git"),
            format!("gitdir: {}\r\n", lab.path("sep.git").display()),
        )
        .unwrap();
        // A gitfile with a relative path (relative to the gitfile, not the
        // cwd: the case runs in a subdirectory).
        std::fs::create_dir_all(lab.path("relfile/sub")).unwrap();
        std::fs::create_dir_all(lab.path("r/sub")).unwrap();
        std::fs::write(lab.path("relfile/.git"), "gitdir: ../sep.git\n").unwrap();
        // A linked worktree, and a bare repository.
        lab.real("r", &["worktree", "add", "-q", "../wt"]);
        lab.real(".", &["init", "-q", "--bare", "bare.git"]);
        lab.repo("other");
        let wt_gitdir = lab.real("wt", &["rev-parse", "--absolute-git-dir"]);
        let p = |s: &str| lab.path(s).display().to_string();
        type Case = (&'static str, Vec<(String, String)>);
        let cases: Vec<Case> = vec![
            ("r", vec![]),
            ("r/decoy-empty", vec![]),
            ("r/decoy-junk", vec![]),
            ("r/decoy-valid", vec![]),
            ("crlf", vec![]),
            ("relfile/sub", vec![]),
            ("wt", vec![]),
            ("bare.git", vec![]),
            ("r", vec![("GIT_DIR".into(), p("other/.git"))]),
            ("r", vec![("GIT_DIR".into(), "../other/.git".into())]),
            ("r/sub", vec![("GIT_DIR".into(), "../../other/.git".into())]),
            (
                "r",
                vec![
                    ("GIT_DIR".into(), p("other/.git")),
                    ("GIT_DIR".into(), p("r/.git")),
                ],
            ),
            (
                "r",
                vec![
                    ("GIT_DIR".into(), p("r/.git")),
                    ("GIT_DIR".into(), p("other/.git")),
                ],
            ),
            (
                "wt",
                vec![
                    ("GIT_DIR".into(), wt_gitdir.clone()),
                    ("GIT_COMMON_DIR".into(), p("other/.git")),
                ],
            ),
            (
                "other",
                vec![
                    ("GIT_DIR".into(), p("r/.git")),
                    ("GIT_WORK_TREE".into(), p("r")),
                ],
            ),
        ];
        let mut wrong = Vec::new();
        for (cwd, extra) in &cases {
            let mut env: Vec<(String, String)> = vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("HOME".into(), p("home")),
                ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
                ("SBX_REAL_GIT".into(), lab.real.display().to_string()),
                ("SBX_AUDIT_LOG".into(), p("audit.jsonl")),
            ];
            env.extend(extra.iter().cloned());
            let dir = lab.path(cwd);
            let real = run_with_dup_env(
                &lab.real,
                &[
                    "rev-parse",
                    "--path-format=absolute",
                    "--git-dir",
                    "--git-common-dir",
                    "--show-toplevel",
                ],
                &dir,
                &env,
            );
            let text = String::from_utf8_lossy(&real.stdout);
            let lines: Vec<String> = text.lines().map(canon).collect();
            let guard = run_with_dup_env(
                Path::new(GUARD),
                &["--json", "check", "--", "status"],
                &dir,
                &env,
            );
            let v = json_verdict(&guard);
            let got = |k: &str| v[k].as_str().map(canon);
            let want_top = lines.get(2).cloned();
            let case = format!("{cwd} {extra:?}");
            if got("git_dir").as_ref() != lines.first()
                || got("common_dir").as_ref() != lines.get(1)
                || got("work_tree") != want_top
            {
                wrong.push(format!("{case}: git {lines:?}, guard {v}"));
            }
            // The pin is the common dir's hooks.
            let pin = format!(
                "core.hooksPath={}/hooks",
                lines.get(1).cloned().unwrap_or_default()
            );
            if !v["exec"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a == pin.as_str())
            {
                wrong.push(format!("{case}: pin {pin} missing from {}", v["exec"]));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        // The attack: from inside the decoy, the outer repository's failing
        // pre-commit must run.
        let before = lab.head("r", "HEAD");
        std::fs::write(r.join("decoy-empty/f"), "x").unwrap();
        let out = lab.git("r/decoy-empty", &["commit", "--allow-empty", "-qm", "m"]);
        assert!(
            !out.status.success(),
            "commit from the decoy ran without the hook"
        );
        assert_eq!(lab.head("r", "HEAD"), before);
    });
}

/// Class 2: an alias is whatever alias.c finds (everything after `alias.`,
/// any case); the guard refuses exactly the names git would expand.
#[test]
fn alias_lookup_matches_git() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook("r", "pre-commit", "exit 1");
        lab.real("r", &["config", "alias.x.y", "commit --no-verify"]);
        lab.real("r", &["config", "alias.Deep.Er.name", "commit -n"]);
        lab.real("r", &["config", "alias.plain", "commit --no-verify"]);
        let mut wrong = Vec::new();
        for name in [
            "x.y",
            "X.y",
            "x.Y",
            "X.Y",
            "x",
            "y",
            "x.y.z",
            "deep.er.name",
            "DEEP.ER.NAME",
            "Deep.er.Name",
            "deep.er",
            "plain",
            "PLAIN",
            "plai",
        ] {
            let trace = lab
                .cmd(lab.real.as_os_str(), "r")
                .env("GIT_TRACE", "1")
                .args([name, "-h"])
                .output()
                .unwrap();
            let expands = String::from_utf8_lossy(&trace.stderr).contains("alias expansion");
            let before = lab.head("r", "HEAD");
            let out = lab.git("r", &[name, "--allow-empty", "-m", "m"]);
            let moved = lab.head("r", "HEAD") != before;
            if moved || refused(&out) != expands {
                wrong.push(format!(
                    "{name}: git expands {expands}, guard refused {}, HEAD moved {moved}",
                    refused(&out)
                ));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    });
}

/// Class 2 over configuration sources: wherever an alias can come from
/// (the repository's config and what it includes, includeIf on the git
/// dir, the branch or a remote's URL, matching or not, the global and XDG
/// files, the worktree's config, the environment's config), git's own
/// `config --get-regexp` says whether git sees `alias.sneak`, and the guard
/// refuses `git sneak` exactly when it does; the branch never moves.
#[test]
fn config_sources_match_git() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook("r", "pre-commit", "exit 1");
        let alias = "[alias]\n\tsneak = commit --no-verify\n";
        std::fs::write(lab.path("inc.conf"), alias).unwrap();
        std::fs::write(
            lab.path("chain.conf"),
            format!("[include]\n\tpath = {}\n", lab.path("inc.conf").display()),
        )
        .unwrap();
        std::fs::write(lab.path("r/.git/rel.conf"), alias).unwrap();
        let xdg = lab.path("xdg/git");
        std::fs::create_dir_all(&xdg).unwrap();
        std::fs::create_dir_all(lab.path("home/.config/git")).unwrap();
        let inc = lab.path("inc.conf").display().to_string();
        let r = lab.path("r").canonicalize().unwrap().display().to_string();
        let local_path = lab.path("r/.git/config");
        let local_base = std::fs::read_to_string(&local_path).unwrap();
        let global_path = lab.path("home/.gitconfig");
        let global_base = std::fs::read_to_string(&global_path).unwrap();
        let wt_path = lab.path("r/.git/config.worktree");
        // (case, added to .git/config, to ~/.gitconfig, ~/.config/git/config,
        // $XDG_CONFIG_HOME/git/config, .git/config.worktree, environment)
        type Case = (
            &'static str,
            String,
            String,
            String,
            String,
            String,
            Vec<(String, String)>,
        );
        let none = String::new;
        let env = |kv: &[(&str, &str)]| -> Vec<(String, String)> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let cases: Vec<Case> = vec![
            (
                "local",
                alias.into(),
                none(),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "upper-case section and key",
                "[ALIAS]\n\tSNEAK = commit --no-verify\n".into(),
                none(),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "continued line",
                "[alias]\n\tsneak = commit \\\n --no-verify\n".into(),
                none(),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "include.path",
                format!("[include]\n\tpath = {inc}\n"),
                none(),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "relative include",
                "[include]\n\tpath = rel.conf\n".into(),
                none(),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "include chain",
                format!("[include]\n\tpath = {}\n", lab.path("chain.conf").display()),
                none(),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "missing include",
                format!("[include]\n\tpath = {inc}.missing\n"),
                none(),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "includeIf gitdir matching",
                format!("[includeIf \"gitdir:{r}/\"]\n\tpath = {inc}\n"),
                none(),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "includeIf gitdir elsewhere",
                format!("[includeIf \"gitdir:{r}-other/\"]\n\tpath = {inc}\n"),
                none(),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "includeIf gitdir/i",
                format!(
                    "[includeIf \"gitdir/i:{}/\"]\n\tpath = {inc}\n",
                    r.to_uppercase()
                ),
                none(),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "includeIf onbranch matching",
                format!("[includeIf \"onbranch:main\"]\n\tpath = {inc}\n"),
                none(),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "includeIf onbranch other",
                format!("[includeIf \"onbranch:other\"]\n\tpath = {inc}\n"),
                none(),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "includeIf hasconfig matching",
                format!(
                    "[remote \"o\"]\n\turl = https://example.invalid/x.git\n[includeIf \"hasconfig:remote.*.url:https://example.invalid/**\"]\n\tpath = {inc}\n"
                ),
                none(),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "includeIf hasconfig other",
                format!(
                    "[includeIf \"hasconfig:remote.*.url:https://elsewhere.invalid/**\"]\n\tpath = {inc}\n"
                ),
                none(),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "global",
                none(),
                alias.into(),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "global include",
                none(),
                format!("[include]\n\tpath = {inc}\n"),
                none(),
                none(),
                none(),
                vec![],
            ),
            (
                "home XDG",
                none(),
                none(),
                alias.into(),
                none(),
                none(),
                vec![],
            ),
            (
                "XDG_CONFIG_HOME",
                none(),
                none(),
                none(),
                alias.into(),
                none(),
                env(&[("XDG_CONFIG_HOME", &lab.path("xdg").display().to_string())]),
            ),
            (
                "XDG_CONFIG_HOME unset: not read",
                none(),
                none(),
                none(),
                alias.into(),
                none(),
                vec![],
            ),
            (
                "worktree config on",
                "[extensions]\n\tworktreeConfig = true\n".into(),
                none(),
                none(),
                none(),
                alias.into(),
                vec![],
            ),
            (
                "worktree config off",
                none(),
                none(),
                none(),
                none(),
                alias.into(),
                vec![],
            ),
            (
                "GIT_CONFIG_COUNT",
                none(),
                none(),
                none(),
                none(),
                none(),
                env(&[
                    ("GIT_CONFIG_COUNT", "1"),
                    ("GIT_CONFIG_KEY_0", "alias.sneak"),
                    ("GIT_CONFIG_VALUE_0", "commit --no-verify"),
                ]),
            ),
            (
                "GIT_CONFIG_COUNT include",
                none(),
                none(),
                none(),
                none(),
                none(),
                env(&[
                    ("GIT_CONFIG_COUNT", "1"),
                    ("GIT_CONFIG_KEY_0", "include.path"),
                    ("GIT_CONFIG_VALUE_0", &inc),
                ]),
            ),
            (
                "GIT_CONFIG_PARAMETERS",
                none(),
                none(),
                none(),
                none(),
                none(),
                env(&[(
                    "GIT_CONFIG_PARAMETERS",
                    "'alias.sneak'='commit --no-verify'",
                )]),
            ),
        ];
        let mut wrong = Vec::new();
        for (case, local, global, home_xdg, xdg_home, wt, extra) in &cases {
            std::fs::write(&local_path, format!("{local_base}{local}")).unwrap();
            std::fs::write(&global_path, format!("{global_base}{global}")).unwrap();
            std::fs::write(lab.path("home/.config/git/config"), home_xdg).unwrap();
            std::fs::write(xdg.join("config"), xdg_home).unwrap();
            std::fs::write(&wt_path, wt).unwrap();
            let envs: Vec<(&str, &str)> = extra
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let mut c = lab.cmd(lab.real.as_os_str(), "r");
            c.args(["config", "--get-regexp", "^alias[.]sneak$"]);
            for (k, v) in &envs {
                c.env(k, v);
            }
            let seen = c.output().unwrap();
            let sees = seen.status.success()
                && String::from_utf8_lossy(&seen.stdout).contains("--no-verify");
            let before = lab.head("r", "HEAD");
            let out = lab.git_env("r", &["sneak", "--allow-empty", "-m", "m"], &envs);
            let moved = lab.head("r", "HEAD") != before;
            if moved || refused(&out) != sees {
                wrong.push(format!(
                    "{case}: git sees the alias {sees}, guard refused {} ({}), HEAD moved {moved}",
                    refused(&out),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            if moved {
                lab.real("r", &["reset", "-q", "--soft", &before]);
            }
        }
        std::fs::write(&local_path, local_base).unwrap();
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    });
}

/// Class 3: whatever names the push target, the guard refuses exactly the
/// pushes git's own dry run shows as forced (`+`) or deleting (`-`), and
/// the remote never moves.
#[test]
fn push_targets_match_git() {
    each_git(|lab| {
        lab.repo("r");
        lab.real(".", &["clone", "-q", "--bare", "r", "remote.git"]);
        lab.real(".", &["clone", "-q", "remote.git", "other"]);
        std::fs::write(lab.path("other/o"), "o\n").unwrap();
        lab.real("other", &["add", "o"]);
        lab.real("other", &["commit", "-qm", "other"]);
        lab.real("other", &["push", "-q", "origin", "main"]);
        lab.real("remote.git", &["branch", "keep", "main"]);
        std::fs::write(lab.path("r/l"), "l\n").unwrap();
        lab.real("r", &["add", "l"]);
        lab.real("r", &["commit", "-qm", "local"]);
        let url = lab.path("remote.git").display().to_string();
        // Configuration an agent can write without git: .git/config itself.
        let cfg = lab.path("r/.git/config");
        let base = std::fs::read_to_string(&cfg).unwrap();
        std::fs::write(
            &cfg,
            format!(
                "{base}[remote \"evil\"]\n\turl = {url}\n\tmirror = true\n[remote \"plain\"]\n\turl = {url}\n\tfetch = +refs/heads/*:refs/remotes/plain/*\n"
            ),
        )
        .unwrap();
        std::fs::create_dir_all(lab.path("r/.git/remotes")).unwrap();
        std::fs::write(
            lab.path("r/.git/remotes/legacy"),
            format!("URL: {url}\nPush: +refs/heads/main:refs/heads/main\n"),
        )
        .unwrap();
        std::fs::write(
            lab.path("r/.git/remotes/legacyok"),
            format!("URL: {url}\nPush: refs/heads/main:refs/heads/side\n"),
        )
        .unwrap();
        let cases: &[&[&str]] = &[
            &["-c", "remote.pushDefault=evil", "push"],
            &["-c", "branch.main.pushRemote=evil", "push"],
            &["push", "evil"],
            &["push", "legacy"],
            &["push", "legacyok"],
            &["push", "plain", "main:side"],
            &["push", &url, "main:side2"],
            &["-c", "remote.pushDefault=plain", "push", "plain", "main"],
        ];
        let remote_before = lab.real("remote.git", &["for-each-ref"]);
        let mut wrong = Vec::new();
        for args in cases {
            // git's answer: a dry run through the real git.
            let mut dry: Vec<&str> = args.to_vec();
            let at = dry.iter().position(|a| *a == "push").unwrap();
            dry.splice(at + 1..at + 1, ["--dry-run", "--porcelain"]);
            let out = lab
                .cmd(lab.real.as_os_str(), "r")
                .args(&dry)
                .output()
                .unwrap();
            let porcelain = String::from_utf8_lossy(&out.stdout);
            let destructive = porcelain
                .lines()
                .any(|l| l.starts_with('+') || l.starts_with('-'));
            // `!`: git rejects it itself (the pre-push step may refuse first).
            let rejected = porcelain.lines().any(|l| l.starts_with('!'));
            let out = lab.git("r", args);
            let remote_now = lab.real("remote.git", &["for-each-ref"]);
            let refused_it = !out.status.success();
            let changed_dangerously = remote_now
                .lines()
                .filter(|l| !remote_before.lines().any(|b| b == *l))
                .any(|l| l.ends_with("refs/heads/main") || l.ends_with("refs/heads/keep"))
                || !remote_now.contains("refs/heads/keep");
            if changed_dangerously || (destructive && !refused_it) {
                wrong.push(format!(
                    "git {args:?}: dry run {porcelain:?}, guard exit {:?} {}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            if !destructive && !rejected && !out.status.success() {
                wrong.push(format!(
                    "git {args:?}: a plain push refused: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        // The guard's pre-push step on its own (argv checks out of the way):
        // git's real git with the guard's hooks directory pinned.
        let remote_before = lab.real("remote.git", &["for-each-ref"]);
        // A routed push makes only its hook set's directory: the one of
        // every hook is made here, as sbx-run's image build makes it (it
        // was there only when another suite had made it first).
        let hooks = Path::new(GUARD).parent().unwrap().join(".sbx-git-hooks");
        let st = Command::new(GUARD)
            .arg("install-hooks")
            .arg(&hooks)
            .status()
            .unwrap();
        assert!(
            st.success() && hooks.join("pre-push").exists(),
            "the guard made {}",
            hooks.display()
        );
        for args in [
            &["push", "--force", "origin-url", "main"][..],
            &["push", "--mirror", "origin-url"],
            &["push", "origin-url", ":keep"],
        ] {
            let args: Vec<String> = args
                .iter()
                .map(|a| {
                    if *a == "origin-url" {
                        url.clone()
                    } else {
                        a.to_string()
                    }
                })
                .collect();
            let out = lab
                .cmd(lab.real.as_os_str(), "r")
                .arg("-c")
                .arg(format!("core.hooksPath={}", hooks.display()))
                .env("SBX_GUARD_TRUSTED_HOOKS", lab.path("r/.git/hooks"))
                .args(&args)
                .output()
                .unwrap();
            assert!(!out.status.success(), "{args:?} passed the pre-push step");
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("block-force-push"),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(lab.real("remote.git", &["for-each-ref"]), remote_before);
        }
    });
}

/// Class 4: the agent's environment does not reach into hooks. Each case
/// first commits past the hook with the real git (the attack is real), then
/// must fail through the guard.
#[test]
fn hooks_run_in_a_clean_environment() {
    each_git(|lab| {
        lab.repo("r");
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(lab.path("exit0"), "exit 0\n").unwrap();
        let fake = lab.path("fakebin");
        std::fs::create_dir_all(&fake).unwrap();
        std::fs::write(fake.join("sh"), "#!/bin/dash\nexit 0\n").unwrap();
        std::fs::set_permissions(fake.join("sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let exit0 = lab.path("exit0").display().to_string();
        let path = format!(
            "{}:{}:/usr/bin:/bin",
            fake.display(),
            lab.path("bin").display()
        );
        let bash = "#!/bin/bash\necho checking >&2\nexit 1\n";
        let envsh = "#!/usr/bin/env sh\nexit 1\n";
        let cases: &[(&str, &str, &str)] = &[
            (bash, "BASH_ENV", &exit0),
            (bash, "SHELLOPTS", "noexec"),
            (bash, "BASH_FUNC_echo%%", "() { exit 0; }"),
            (envsh, "PATH", &path),
        ];
        let hook = lab.path("r/.git/hooks/pre-commit");
        let mut wrong = Vec::new();
        for (body, k, v) in cases {
            std::fs::write(&hook, body).unwrap();
            std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
            // The real git, same environment: the hook is skipped.
            wrong.extend(lab.env_bypass("r", &["commit", "--allow-empty", "-qm", "m"], k, v));
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    });
}

/// git's pathspec switches reach the hook's own git through the
/// environment: with GIT_LITERAL_PATHSPECS or GIT_NOGLOB_PATHSPECS the
/// hook's `git diff --cached -- '*.txt'` matches only a file named `*.txt`,
/// with GIT_GLOB_PATHSPECS its `*` no longer matches `sub/`, and the hook
/// sees nothing to refuse. The real git commits past it; the guard removes
/// them from the environment git and the hooks get.
#[test]
fn pathspec_switches_do_not_blind_the_hooks_git() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook(
            "r",
            "pre-commit",
            "if git diff --cached -- '*.txt' | grep -q MARKER; then exit 1; fi",
        );
        std::fs::create_dir_all(lab.path("r/sub")).unwrap();
        std::fs::write(lab.path("r/sub/x.txt"), "MARKER\n").unwrap();
        lab.real("r", &["add", "sub/x.txt"]);
        let mut wrong = Vec::new();
        for k in [
            "GIT_LITERAL_PATHSPECS",
            "GIT_NOGLOB_PATHSPECS",
            "GIT_GLOB_PATHSPECS",
        ] {
            wrong.extend(lab.env_bypass("r", &["commit", "-qm", "m"], k, "1"));
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    });
}

/// A stash's index commit, made in another repository and fetched in: a
/// repository with no stash (nor any recorded) still refuses to push it as
/// a branch, titled as `git stash` titles it (one parent, so not the
/// stash-shaped second parent).
#[test]
fn a_foreign_stashs_index_commit_is_not_pushed() {
    each_git(|lab| {
        lab.repo("r");
        lab.repo("o");
        lab.real("r", &["init", "-q", "--bare", "remote.git"]);
        std::fs::write(lab.path("o/bad"), "x\n").unwrap();
        lab.real("o", &["add", "bad"]);
        lab.real("o", &["stash", "push", "-q"]);
        lab.real("r", &["fetch", "-q", "../o", "refs/stash"]);
        let out = lab.git(
            "r",
            &["push", "-q", "remote.git", "FETCH_HEAD^2:refs/heads/x"],
        );
        assert!(
            !out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("index or untracked commit"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(lab.real("r/remote.git", &["branch", "--list"]), "");
        // Control: the stash's base (an ordinary commit) is pushed.
        let out = lab.git(
            "r",
            &["push", "-q", "remote.git", "FETCH_HEAD^1:refs/heads/y"],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// Class 5: commits no pre-commit hook saw do not reach a branch.
#[test]
fn unverified_commits_do_not_reach_a_branch() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook(
            "r",
            "pre-commit",
            "! git diff --cached --name-only | grep -q bad",
        );
        std::fs::write(lab.path("r/bad"), "x\n").unwrap();
        lab.real("r", &["add", "bad"]);
        lab.real("r", &["stash", "push", "-q"]);
        let main = lab.head("r", "main");
        for args in [
            &["reset", "--hard", "stash@{0}"][..],
            &["merge", "--ff-only", "stash@{0}"],
            &["merge", "stash@{0}^2"],
            &["branch", "-f", "side", "stash@{0}"],
            &["checkout", "-q", "-B", "main", "stash@{0}"],
            &["cherry-pick", "-m1", "stash@{0}"],
            &["cherry-pick", "stash@{0}^2"],
            &["fetch", ".", "refs/stash:refs/heads/main"],
            &["update-ref", "refs/heads/main", "stash@{0}"],
            &["commit-tree", "stash@{0}^{tree}", "-m", "m"],
        ] {
            let out = lab.git("r", args);
            let _ = lab.real("r", &["reset", "-q", "--hard"]);
            let _ = lab
                .cmd(lab.real.as_os_str(), "r")
                .args(["cherry-pick", "--abort"])
                .output();
            lab.real("r", &["checkout", "-q", "main"]);
            assert_eq!(
                lab.head("r", "main"),
                main,
                "git {args:?} moved main: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let side = lab
                .cmd(lab.real.as_os_str(), "r")
                .args(["rev-parse", "-q", "--verify", "side"])
                .output()
                .unwrap();
            assert!(!side.status.success(), "git {args:?} made side");
        }
        // rebase -i with `edit`, new staged content, --continue.
        std::fs::write(lab.path("r/b"), "b\n").unwrap();
        lab.real("r", &["add", "b"]);
        lab.real("r", &["commit", "-qm", "two"]);
        let two = lab.head("r", "HEAD");
        let out = lab
            .cmd(OsStr::new("git"), "r")
            .env("GIT_SEQUENCE_EDITOR", "sed -i 's/^pick/edit/'")
            .args(["rebase", "-q", "-i", "HEAD~1"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(lab.path("r/bad"), "x\n").unwrap();
        lab.real("r", &["add", "bad"]);
        let ed = [("GIT_EDITOR", "true")];
        let out = lab.git_env("r", &["rebase", "--continue"], &ed);
        assert!(refused(&out), "{}", String::from_utf8_lossy(&out.stderr));
        let out = lab.git_env("r", &["rebase", "--cont"], &ed);
        assert!(refused(&out), "{}", String::from_utf8_lossy(&out.stderr));
        // Unstage the new content: --continue goes on, as before.
        lab.real("r", &["rm", "-q", "--cached", "bad"]);
        let out = lab.git_env("r", &["rebase", "--continue"], &ed);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(lab.head("r", "HEAD"), two);
        // An honest stash round trip still commits.
        lab.real("r", &["stash", "drop", "-q"]);
        std::fs::write(lab.path("r/a"), "2\n").unwrap();
        lab.real("r", &["stash", "push", "-q"]);
        let out = lab.git("r", &["stash", "pop", "-q"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = lab.git("r", &["commit", "-qam", "popped"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = lab.git("r", &["reset", "-q", "--hard", "HEAD~1"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// Class 6: output options do not write into protected places. Each case
/// is first shown to work with the real git (in a scratch copy), so the
/// guard is refusing a real write.
#[test]
fn output_options_cannot_write_hooks() {
    each_git(|lab| {
        lab.repo("r");
        std::fs::create_dir_all(lab.path("r/sub")).unwrap();
        std::os::unix::fs::symlink(lab.path("r/.git/hooks/pre-commit"), lab.path("r/dangling"))
            .unwrap();
        std::os::unix::fs::symlink(lab.path("r/.git/hooks"), lab.path("r/hookdir")).unwrap();
        let cases: &[(&str, &[&str])] = &[
            (
                "r",
                &[
                    "log",
                    "-1",
                    "--format=tformat:exit 0",
                    "--output=.git/hooks/pre-commit",
                ],
            ),
            (
                "r",
                &[
                    "log",
                    "-1",
                    "--format=tformat:exit 0",
                    "--output",
                    ".git/hooks/pre-commit",
                ],
            ),
            ("r/sub", &["log", "-1", "--output=../.git/hooks/pre-commit"]),
            (
                "r",
                &["-C", "sub", "show", "--output=../.git/hooks/pre-commit"],
            ),
            ("r", &["diff", "HEAD", "--output=.git/hooks/pre-commit"]),
            ("r", &["log", "-1", "--output=dangling"]),
            ("r", &["log", "-1", "--output=hookdir/pre-commit"]),
            ("r", &["format-patch", "-1", "-o", ".git/hooks"]),
            (
                "r",
                &["format-patch", "-1", "--output-directory=.git/hooks"],
            ),
            (
                "r",
                &["format-patch", "-1", "--output=.git/hooks/pre-commit"],
            ),
            ("r", &["bundle", "create", ".git/hooks/pre-commit", "HEAD"]),
            ("r", &["archive", "-o", ".git/hooks/pre-commit", "HEAD"]),
            ("r", &["config", "-f", ".git/hooks/pre-commit", "a.b", "c"]),
            ("r", &["log", "-1", "--output=.git/config"]),
        ];
        let mut wrong = Vec::new();
        for (cwd, args) in cases {
            // git's answer: in a fresh copy, the real git writes into hooks.
            let copy = lab.path("copy");
            let _ = std::fs::remove_dir_all(&copy);
            let st = Command::new("cp")
                .args(["-a"])
                .arg(lab.path("r"))
                .arg(&copy)
                .status()
                .unwrap();
            assert!(st.success());
            let _ = std::fs::remove_file(copy.join("dangling"));
            std::os::unix::fs::symlink(copy.join(".git/hooks/pre-commit"), copy.join("dangling"))
                .unwrap();
            let _ = std::fs::remove_file(copy.join("hookdir"));
            std::os::unix::fs::symlink(copy.join(".git/hooks"), copy.join("hookdir")).unwrap();
            let snapshot = |d: &Path| {
                let mut v: Vec<_> = std::fs::read_dir(d.join(".git/hooks"))
                    .unwrap()
                    .map(|e| {
                        let e = e.unwrap();
                        (e.file_name(), std::fs::read(e.path()).unwrap_or_default())
                    })
                    .collect();
                v.sort();
                (v, std::fs::read(d.join(".git/config")).unwrap())
            };
            let copy_cwd = cwd.replacen('r', "copy", 1);
            let before = snapshot(&copy);
            let _ = lab
                .cmd(lab.real.as_os_str(), &copy_cwd)
                .args(*args)
                .output()
                .unwrap();
            let git_writes = snapshot(&copy) != before;
            let before = snapshot(&lab.path("r"));
            let out = lab.git(cwd, args);
            let after = snapshot(&lab.path("r"));
            if !git_writes {
                wrong.push(format!(
                    "{cwd} git {args:?}: the real git wrote nothing protected (bad case)"
                ));
            }
            if !refused(&out) || after != before {
                wrong.push(format!(
                    "{cwd} git {args:?}: guard exit {:?}, protected files changed {}",
                    out.status.code(),
                    after != before
                ));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        // Outputs elsewhere work.
        let out = lab.git("r", &["log", "-1", "--output=../log.txt"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// `--config FILE` changes the verdict as SBX_CONFIG=FILE does.
#[test]
fn config_flag_means_what_sbx_config_means() {
    let lab = Lab::new(&real_gits()[0]);
    lab.repo("r");
    let cfg = lab.path("sbx.toml");
    std::fs::write(&cfg, "[git]\nblock-force-push = false\n").unwrap();
    let check = |extra: &[&str], env: &[(&str, &Path)]| {
        let mut c = lab.cmd(OsStr::new(GUARD), "r");
        c.args(extra)
            .args(["check", "--", "push", "--force", "origin", "main"]);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap().status.code()
    };
    assert_eq!(check(&[], &[]), Some(1), "default: refused");
    assert_eq!(check(&[], &[("SBX_CONFIG", &cfg)]), Some(0));
    let flag = ["--config", cfg.to_str().unwrap()];
    assert_eq!(
        check(&flag, &[]),
        Some(0),
        "--config must allow as SBX_CONFIG does"
    );
}

/// Every rule the guard enforces is listed by `rules` and in the man page, under the same name (all three come from one table).
#[test]
fn rules_output_and_man_page_list_every_enforced_rule() {
    let out = Command::new(GUARD)
        .args(["--json", "rules"])
        .env_clear()
        .output()
        .unwrap();
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["data"]["name"].as_str().unwrap().to_owned()
        })
        .collect();
    let man = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../man/sbx-git-guard.1"),
    )
    .unwrap()
    .replace("\\-", "-");
    for r in sbx_git_guard::rules::RULES {
        assert!(listed.iter().any(|n| n == r.name), "rules lacks {}", r.name);
        assert!(man.contains(r.name), "the man page lacks {}", r.name);
    }
    assert_eq!(listed.len(), sbx_git_guard::rules::RULES.len());
}

/// Class 5, continued: removing the stash's reflog does not hide it.
#[test]
fn a_stash_without_its_reflog_is_still_a_stash() {
    let lab = Lab::new(&real_gits()[0]);
    lab.repo("r");
    std::fs::write(lab.path("r/a"), "2\n").unwrap();
    lab.real("r", &["stash", "push", "-q"]);
    std::fs::remove_file(lab.path("r/.git/logs/refs/stash")).unwrap();
    let main = lab.head("r", "main");
    let out = lab.git("r", &["reset", "--hard", "refs/stash"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unverified-commit"));
    assert_eq!(lab.head("r", "main"), main);
}

/// git exports GIT_EXEC_PATH (its own) to hooks: a hook's `git`, when that
/// is the guard (as the image's exec-path `git` is), still works on the
/// host without a broker; another value is still refused.
#[test]
fn a_hooks_own_git_works_with_gits_exec_path() {
    each_git(|lab| {
        lab.repo("r");
        let guard = lab.path("bin/git").display().to_string();
        lab.hook(
            "r",
            "pre-commit",
            &format!(
                "test -n \"$GIT_EXEC_PATH\" || exit 3\n\"{guard}\" rev-parse --git-dir > ../hook-git || exit 1"
            ),
        );
        let out = lab.git("r", &["commit", "--allow-empty", "-qm", "m"]);
        assert!(
            out.status.success(),
            "{}: {}",
            lab.real.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            std::fs::read_to_string(lab.path("hook-git"))
                .unwrap()
                .trim(),
            ".git"
        );
        let out = lab.git_env("r", &["status"], &[("GIT_EXEC_PATH", "/tmp")]);
        assert!(refused(&out), "{}", String::from_utf8_lossy(&out.stderr));
    });
}

/// The reference-transaction step asks git whether a branch move adds a
/// stash commit. When git cannot be run (here: a broker that is not there)
/// it refuses the move instead of finding nothing.
#[test]
fn the_reference_transaction_step_fails_closed_without_git() {
    each_git(|lab| {
        lab.repo("r");
        std::fs::write(lab.path("r/a"), "2\n").unwrap();
        lab.real("r", &["stash", "push", "-q"]);
        let old = lab.head("r", "HEAD");
        lab.real("r", &["commit", "--allow-empty", "-qm", "two"]);
        let new = lab.head("r", "HEAD");
        std::os::unix::fs::symlink(GUARD, lab.path("bin/reference-transaction")).unwrap();
        let step = |broker: Option<&str>| {
            let mut c = lab.cmd(lab.path("bin/reference-transaction").as_os_str(), "r");
            c.arg("prepared")
                .env("SBX_GUARD_TRUSTED_HOOKS", lab.path("r/.git/hooks"))
                .env("SBX_GUARD_COMMON_DIR", lab.path("r/.git"))
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            if let Some(b) = broker {
                c.env("SBX_GIT_BROKER", b);
            }
            let mut child = c.spawn().unwrap();
            use std::io::Write as _;
            let line = format!("{old} {new} refs/heads/master\n{old} {new} refs/heads/main\n");
            child
                .stdin
                .take()
                .unwrap()
                .write_all(line.as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        };
        let o = step(None);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let dead = lab.path("no-broker.sock").display().to_string();
        let o = step(Some(&dead));
        assert_eq!(
            o.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    });
}

/// `git am` runs neither pre-commit nor commit-msg (only applypatch-msg
/// and pre-applypatch), so a patch commits content no pre-commit hook saw.
/// The guard routes am's hooks through its own directory, where
/// pre-applypatch also runs the repository's pre-commit and applypatch-msg
/// its commit-msg (what git's own sample hooks do).
#[test]
fn am_runs_the_pre_commit_and_commit_msg_hooks() {
    each_git(|lab| {
        lab.repo("r");
        let main = lab.head("r", "main");
        let patch = |name: &str, file: &str, msg: &str| {
            lab.real("r", &["checkout", "-qb", name, &main]);
            std::fs::write(lab.path("r").join(file), "x\n").unwrap();
            lab.real("r", &["add", file]);
            lab.real("r", &["commit", "-qm", msg]);
            let out = lab.real("r", &["format-patch", "-1", "-o", &format!("../p-{name}")]);
            lab.real("r", &["checkout", "-q", "main"]);
            lab.path("r").join(out)
        };
        let bad_file = patch("f", "bad", "fine message");
        let bad_msg = patch("m", "good", "BADMSG here");
        let good = patch("g", "good2", "fine message");
        lab.hook(
            "r",
            "pre-commit",
            "! git diff --cached --name-only | grep -qx bad",
        );
        lab.hook("r", "commit-msg", "! grep -q BADMSG \"$1\"");
        for p in [&bad_file, &bad_msg] {
            let out = lab.git("r", &["am", "-q", p.to_str().unwrap()]);
            let _ = lab
                .cmd(lab.real.as_os_str(), "r")
                .args(["am", "--abort"])
                .output();
            assert!(!out.status.success(), "git am {} committed", p.display());
            assert_eq!(lab.head("r", "main"), main, "git am {}", p.display());
        }
        // An honest patch applies.
        let out = lab.git("r", &["am", "-q", good.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_ne!(lab.head("r", "main"), main);
    });
}

/// A merge strategy other than git's own is `git-merge-NAME` from PATH: git
/// commits whatever it leaves in the index, with no pre-commit (merge runs
/// pre-merge-commit at most; the sequencer nothing). Every way to name one
/// is refused, and so is the program itself (how git runs it in the
/// sandbox: `git merge-NAME` through the guard). branch.*.mergeOptions,
/// which merge reads as typed options, may not skip hooks either.
#[test]
fn merge_strategy_programs_and_merge_options_are_refused() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook(
            "r",
            "pre-commit",
            "if git diff --cached | grep -q MARKER; then exit 1; fi",
        );
        lab.hook("r", "pre-merge-commit", "exit 1");
        let evil = lab.path("bin/git-merge-evil");
        std::fs::write(&evil, "#!/bin/sh\necho MARKER > a\ngit add a\nexit 0\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755)).unwrap();
        lab.real("r", &["checkout", "-qb", "side"]);
        std::fs::write(lab.path("r/b"), "b\n").unwrap();
        lab.real("r", &["add", "b"]);
        lab.real("r", &["commit", "-qm", "side"]);
        lab.real("r", &["checkout", "-q", "main"]);
        std::fs::write(lab.path("r/c"), "c\n").unwrap();
        lab.real("r", &["add", "c"]);
        lab.real("r", &["commit", "-qm", "c"]);
        let (main, side) = (lab.head("r", "main"), lab.head("r", "side"));
        let cases: Vec<Vec<&str>> = vec![
            vec!["merge", "-s", "evil", "-m", "m", "side"],
            vec!["merge", "-sevil", "-m", "m", "side"],
            vec!["merge", "--strat=evil", "-m", "m", "side"],
            vec!["cherry-pick", "--strategy=evil", "side"],
            vec!["revert", "--strategy", "evil", "HEAD"],
            vec!["rebase", "-s", "evil", "side"],
            vec!["pull", "--no-rebase", "-s", "evil", ".", "side"],
            vec!["-c", "pull.twohead=evil", "merge", "-m", "m", "side"],
            vec!["-c", "pull.octopus=ours evil", "merge", "-m", "m", "side"],
            vec!["config", "pull.twohead", "evil"],
            // `[pull "x"] twohead` renamed into `[pull]`.
            vec!["config", "--rename-section", "pull.x", "pull"],
            vec!["config", "--rename-section", "branch.x", "branch.main"],
            vec!["config", "branch.main.mergeOptions", " --no-verify"],
            vec!["config", "branch.main.mergeOptions", " -s evil"],
            vec![
                "-c",
                "branch.main.mergeOptions= --no-verif",
                "merge",
                "side",
            ],
            // The strategy as git itself runs it.
            vec!["merge-evil", "HEAD", "--", "HEAD", "side"],
        ];
        for a in &cases {
            let out = lab.git("r", a);
            assert!(refused(&out), "{a:?}: {out:?}");
            let _ = lab.git("r", &["reset", "-q", "--hard", &main]);
            assert_eq!(lab.head("r", "main"), main, "{a:?} moved main");
            assert_eq!(lab.head("r", "side"), side, "{a:?} moved side");
        }
        // Stored by the shell, straight into .git/config: still refused.
        lab.real("r", &["config", "branch.main.mergeOptions", " --no-verify"]);
        let out = lab.git("r", &["merge", "-m", "m", "side"]);
        assert!(refused(&out), "{out:?}");
        assert_eq!(lab.head("r", "main"), main);
        lab.real("r", &["config", "--unset", "branch.main.mergeOptions"]);
        // Control: git's own strategies run (and the merge hook fails).
        let out = lab.git("r", &["merge", "-s", "ort", "-m", "m", "side"]);
        assert!(!refused(&out), "{out:?}");
        lab.real("r", &["merge", "--abort"]);
        lab.hook("r", "pre-merge-commit", "exit 0");
        let out = lab.git("r", &["merge", "-s", "ort", "-m", "m", "side"]);
        assert!(out.status.success(), "{out:?}");
        assert_ne!(lab.head("r", "main"), main);
        let out = lab.git("r", &["config", "pull.twohead", "ort"]);
        assert!(out.status.success(), "{out:?}");
    });
}

/// `hash-object -t commit -w` in every parse-options spelling (clusters,
/// attached values) is refused: it writes a commit no hook saw.
#[test]
fn hash_object_commits_are_refused_in_every_spelling() {
    each_git(|lab| {
        lab.repo("r");
        let main = lab.head("r", "main");
        let tree = lab.head("r", "HEAD^{tree}");
        let body = format!(
            "tree {tree}\nparent {main}\nauthor A <a@b> 1 +0000\ncommitter A <a@b> 1 +0000\n\nx\n"
        );
        for spelling in [
            &["hash-object", "-wtcommit", "--stdin"][..],
            &["hash-object", "--stdin", "-wt", "commit"],
            &["hash-object", "-w", "-tcommit", "--stdin"],
            &[
                "hash-object",
                "--literally",
                "-w",
                "-t",
                "commit",
                "--stdin",
            ],
        ] {
            let mut c = lab.cmd(OsStr::new("git"), "r");
            c.args(spelling).stdin(std::process::Stdio::piped());
            c.stdout(std::process::Stdio::piped());
            let mut child = c.spawn().unwrap();
            use std::io::Write as _;
            // A refusal may come before git reads its input.
            let _ = child.stdin.take().unwrap().write_all(body.as_bytes());
            let out = child.wait_with_output().unwrap();
            assert!(refused(&out), "{spelling:?}: {out:?}");
        }
        // Control: hashing a blob still works.
        let out = lab.git("r", &["hash-object", "-w", "a"]);
        assert!(out.status.success(), "{out:?}");
    });
}

/// `git notes` makes commits whose trees hold the note's text, and no
/// pre-commit sees them: they may not reach a branch, by merge, reset,
/// branch -f or cherry-pick, while the notes ref exists or after it is
/// deleted.
#[test]
fn notes_commits_do_not_reach_a_branch() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook(
            "r",
            "pre-commit",
            "if git diff --cached | grep -q MARKER; then exit 1; fi",
        );
        let main = lab.head("r", "main");

        let out = lab.git("r", &["notes", "add", "-m", "MARKER", "HEAD"]);
        assert!(out.status.success(), "{out:?}");
        let note = lab.head("r", "refs/notes/commits");
        let attacks: Vec<Vec<&str>> = vec![
            vec![
                "merge",
                "--allow-unrelated-histories",
                "-m",
                "m",
                "refs/notes/commits",
            ],
            vec!["reset", "--hard", "refs/notes/commits"],
            vec!["branch", "-f", "side", "refs/notes/commits"],
            vec!["cherry-pick", "refs/notes/commits"],
        ];
        let check = |attacks: &[Vec<&str>]| {
            for a in attacks {
                let out = lab.git("r", a);
                assert!(!out.status.success(), "{a:?}: {out:?}");
                let _ = lab.git("r", &["merge", "--abort"]);
                let _ = lab.git("r", &["cherry-pick", "--abort"]);
                lab.real("r", &["reset", "-q", "--hard", &main, "--"]);
                assert_eq!(lab.head("r", "main"), main, "{a:?} moved main");
                let branches = lab.real("r", &["branch", "--contains", &note]);
                assert_eq!(branches, "", "{a:?} put the notes commit on a branch");
            }
        };
        check(&attacks);
        // The notes ref deleted: its commit is still refused, by id.
        lab.real("r", &["update-ref", "-d", "refs/notes/commits"]);
        let by_id: Vec<Vec<&str>> = vec![
            vec!["merge", "--allow-unrelated-histories", "-m", "m", &note],
            vec!["reset", "--hard", &note],
        ];
        check(&by_id);
        // Control: an honest commit, and notes themselves, still work.
        std::fs::write(lab.path("r/a"), "ok\n").unwrap();
        let out = lab.git("r", &["commit", "-qam", "ok"]);
        assert!(out.status.success(), "{out:?}");
        let out = lab.git("r", &["notes", "add", "-m", "fine", "HEAD"]);
        assert!(out.status.success(), "{out:?}");
    });
}

/// git config stops at its first operand (PARSE_OPT_STOP_AT_NON_OPTION):
/// in `git config diff.x.textconv '-t; true'` the value is `-t; true`, not
/// a --type. Read as an option, a refused key got set; with `* diff=x` in
/// info/attributes the hook's `git diff --cached` then showed nothing.
#[test]
fn config_values_starting_with_a_dash_are_read_as_git_reads_them() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook(
            "r",
            "pre-commit",
            "if git diff --cached | grep -q MARKER; then exit 1; fi",
        );
        std::fs::write(lab.path("r/.git/info/attributes"), "* diff=x\n").unwrap();
        let before = lab.head("r", "HEAD");
        for a in [
            &["config", "diff.x.textconv", "-t; true"][..],
            &["config", "diff.x.textconv", "-f/dev/null"],
            &["config", "core.sshCommand", "-tssh"],
        ] {
            let out = lab.git("r", a);
            assert!(refused(&out) || !out.status.success(), "{a:?}: {out:?}");
            std::fs::write(lab.path("r/a"), "MARKER\n").unwrap();
            lab.real("r", &["add", "a"]);
            let out = lab.git("r", &["commit", "-qm", "x"]);
            assert!(!out.status.success(), "{a:?} then commit: {out:?}");
            assert_eq!(lab.head("r", "HEAD"), before, "{a:?}");
        }
        // Values that start with `-` are still values for harmless keys.
        let out = lab.git("r", &["config", "user.name", "-tname"]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(lab.real("r", &["config", "user.name"]), "-tname");
    });
}

/// A hook that reads `git diff --cached` is told "Binary files differ" when
/// an attributes file says `* -diff` or every file is over
/// core.bigFileThreshold, and `--check` (git's sample pre-commit) goes
/// quiet under core.whitespace: these keys may not be set through git.
#[test]
fn config_that_blinds_the_hooks_git_is_refused() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook(
            "r",
            "pre-commit",
            "if git diff --cached | grep -q MARKER; then exit 1; fi\n\
             exec git diff-index --check --cached HEAD --",
        );
        std::fs::write(lab.path("attrs"), "* -diff\n").unwrap();
        let attrs = lab.path("attrs").display().to_string();
        let kv = format!("core.attributesFile={attrs}");
        let cases: Vec<Vec<&str>> = vec![
            vec!["config", "core.attributesFile", &attrs],
            vec!["config", "core.bigFileThreshold", "1"],
            vec!["config", "core.whitespace", "-trailing-space"],
            vec!["config", "core.bigFileThreshold", "-1"],
            vec!["config", "core.whitespace", "-t,-trailing-space"],
            vec!["-c", &kv, "commit", "-qm", "x"],
            vec!["-c", "core.bigfilethreshold=1", "commit", "-qm", "x"],
            vec![
                "-c",
                "core.whitespace=-trailing-space",
                "commit",
                "-qm",
                "x",
            ],
        ];
        let before = lab.head("r", "HEAD");
        for a in &cases {
            std::fs::write(lab.path("r/a"), "MARKER \n").unwrap();
            lab.real("r", &["add", "a"]);
            let out = lab.git("r", a);
            assert!(refused(&out), "{a:?}: {out:?}");
            let out = lab.git("r", &["commit", "-qm", "x"]);
            assert!(!out.status.success(), "{a:?} then commit: {out:?}");
            assert_eq!(lab.head("r", "HEAD"), before, "{a:?}");
        }
        // Unsetting them is fine; so is a clean commit.
        let out = lab.git("r", &["config", "--unset", "core.whitespace"]);
        assert!(!refused(&out), "{out:?}");
        std::fs::write(lab.path("r/a"), "fine\n").unwrap();
        lab.real("r", &["add", "a"]);
        let out = lab.git("r", &["commit", "-qm", "x"]);
        assert!(out.status.success(), "{out:?}");
    });
}

/// Settings that change the patch a hook's own `git diff --cached` prints,
/// read by the hook's git from GIT_CONFIG_PARAMETERS or the repository's
/// config: forced colour (`grep '^+.*MARKER'` then matches nothing) and
/// other path prefixes (`grep '^+++ b/secret$'` neither). The real git
/// commits past such a hook; the guard refuses them, inline or written.
#[test]
fn settings_that_change_the_hooks_patch_are_refused() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook(
            "r",
            "pre-commit",
            "d=$(git diff --cached)\n\
             if printf '%s\\n' \"$d\" | grep -q '^+.*MARKER'; then exit 1; fi\n\
             if printf '%s\\n' \"$d\" | grep -q '^+++ b/secret$'; then exit 1; fi",
        );
        let before = lab.head("r", "HEAD");
        let cases: &[(&str, &[&str])] = &[
            ("a", &["-c", "color.ui=always"]),
            ("a", &["-c", "color.diff=Always"]),
            ("secret", &["-c", "diff.noprefix"]),
            ("secret", &["-c", "diff.mnemonicPrefix=true"]),
        ];
        let mut wrong = Vec::new();
        for (file, pre) in cases {
            let body = if *file == "a" { "MARKER\n" } else { "x\n" };
            std::fs::write(lab.path("r").join(file), body).unwrap();
            lab.real("r", &["add", file]);
            let mut args = pre.to_vec();
            args.extend(["commit", "-qm", "m"]);
            let real = lab
                .cmd(lab.real.as_os_str(), "r")
                .args(&args)
                .output()
                .unwrap();
            if !(real.status.success() && lab.head("r", "HEAD") != before) {
                wrong.push(format!(
                    "{args:?}: not an attack on the real git (bad case)"
                ));
            }
            lab.real("r", &["reset", "-q", "--soft", &before]);
            let out = lab.git("r", &args);
            if !refused(&out) || lab.head("r", "HEAD") != before {
                wrong.push(format!("{args:?}: not refused by the guard: {out:?}"));
                lab.real("r", &["reset", "-q", "--soft", &before]);
            }
            lab.real("r", &["reset", "-q", "--hard"]);
            let _ = std::fs::remove_file(lab.path("r").join(file));
        }
        for a in [
            &["config", "color.ui", "always"][..],
            &["config", "color.diff", "always"],
            &["config", "diff.noprefix", "true"],
        ] {
            let out = lab.git("r", a);
            if !refused(&out) {
                wrong.push(format!("{a:?}: not refused: {out:?}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        // Colour for the terminal is still fine.
        let out = lab.git("r", &["config", "color.ui", "auto"]);
        assert!(out.status.success(), "{out:?}");
    });
}

/// commit-msg reads the message before git's cleanup drops its comment
/// lines: with `core.commentChar=J`, `--cleanup=strip` dropped the
/// `JIRA-1` line the hook required, after the hook had passed it, so the
/// commit's message was one no commit-msg hook saw. Another comment
/// character may not be set; `#` and `auto` still commit.
#[test]
fn a_comment_character_that_hides_lines_from_commit_msg_is_refused() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook("r", "commit-msg", "grep -q '^JIRA-[0-9]' \"$1\" || exit 1");
        let commit = |pre: &[&'static str]| -> Vec<&'static str> {
            let mut a = pre.to_vec();
            a.extend([
                "commit",
                "--allow-empty",
                "--cleanup=strip",
                "-qm",
                "JIRA-1 ok",
                "-m",
                "no ticket",
            ]);
            a
        };
        let before = lab.head("r", "HEAD");
        let cases: Vec<Vec<&str>> = vec![
            commit(&["-c", "core.commentChar=J"]),
            commit(&["-c", "CORE.commentchar=JIRA"]),
            commit(&["-c", "core.commentString=JIRA"]),
            vec!["config", "core.commentChar", "J"],
            vec!["config", "core.commentString", "J"],
        ];
        for a in &cases {
            let out = lab.git("r", a);
            assert!(refused(&out), "{a:?}: {out:?}");
            assert_eq!(lab.head("r", "HEAD"), before, "{a:?}");
        }
        let out = lab.git("r", &commit(&[]));
        assert!(out.status.success(), "{out:?}");
        for c in ["core.commentChar=#", "core.commentChar=auto"] {
            let out = lab.git("r", &commit(&["-c", c]));
            assert!(out.status.success(), "{c}: {out:?}");
            let msg = lab.real("r", &["log", "-1", "--format=%s"]);
            assert_eq!(msg.trim(), "JIRA-1 ok", "{c}");
        }
    });
}

/// `git stash create` (which git merge runs for itself, through the guard
/// in a sandbox) is let through, recorded before its id is printed: the
/// commit it makes may not reach a branch.
#[test]
fn stash_create_is_recorded_before_its_id_is_printed() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook(
            "r",
            "pre-commit",
            "if git diff --cached | grep -q MARKER; then exit 1; fi",
        );
        let main = lab.head("r", "main");
        std::fs::write(lab.path("r/a"), "MARKER\n").unwrap();
        lab.real("r", &["add", "a"]);
        let out = lab.git("r", &["stash", "create"]);
        assert!(out.status.success(), "{out:?}");
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert_eq!(id.len(), 40, "{out:?}");
        let seen = std::fs::read_to_string(lab.path("r/.git/sbx-stash-seen")).unwrap();
        assert!(seen.lines().any(|l| l == id), "{seen}");
        lab.real("r", &["reset", "-q", "--hard"]);
        for a in [
            &["reset", "--hard", id.as_str()][..],
            &["merge", "-m", "m", &id],
            &["branch", "-f", "x", &id],
        ] {
            let out = lab.git("r", a);
            assert!(!out.status.success(), "{a:?}: {out:?}");
            assert_eq!(lab.head("r", "main"), main, "{a:?}");
        }
        // A clean tree: no commit, nothing printed, success.
        lab.real("r", &["reset", "-q", "--hard"]);
        let out = lab.git("r", &["stash", "create"]);
        assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
        // store stays refused.
        assert!(refused(&lab.git("r", &["stash", "store", &id])));
    });
}

/// An automatic merge commits a tree neither parent had, and git runs only
/// pre-merge-commit for it: a pre-commit that refuses two lines together
/// (each branch passed alone) never saw the merge. The guard's
/// pre-merge-commit step runs the repository's pre-commit after it.
#[test]
fn an_automatic_merge_runs_pre_commit() {
    each_git(|lab| {
        lab.repo("r");
        std::fs::write(lab.path("r/a"), "l1\nl2\nl3\nl4\nl5\n").unwrap();
        lab.real("r", &["commit", "-qam", "base"]);
        lab.hook(
            "r",
            "pre-commit",
            "if git show :a | grep -q alpha && git show :a | grep -q beta; then exit 1; fi",
        );
        lab.real("r", &["checkout", "-qb", "A"]);
        std::fs::write(lab.path("r/a"), "alpha\nl2\nl3\nl4\nl5\n").unwrap();
        assert!(lab.git("r", &["commit", "-qam", "A"]).status.success());
        lab.real("r", &["checkout", "-q", "main"]);
        std::fs::write(lab.path("r/a"), "l1\nl2\nl3\nl4\nbeta\n").unwrap();
        assert!(lab.git("r", &["commit", "-qam", "B"]).status.success());
        let main = lab.head("r", "main");
        for a in [
            &["merge", "-m", "m", "A"][..],
            &["pull", "--no-rebase", ".", "A"],
        ] {
            let out = lab.git("r", a);
            assert!(!out.status.success(), "{a:?}: {out:?}");
            let _ = lab.git("r", &["merge", "--abort"]);
            assert_eq!(lab.head("r", "main"), main, "{a:?} merged");
        }
        // The repository's own pre-merge-commit runs too, first.
        lab.hook("r", "pre-merge-commit", "echo own > ../own-ran");
        let out = lab.git("r", &["merge", "-m", "m", "A"]);
        assert!(!out.status.success(), "{out:?}");
        let _ = lab.git("r", &["merge", "--abort"]);
        assert!(lab.path("own-ran").exists());
        // Control: with a passing pre-commit the merge is made.
        lab.hook("r", "pre-commit", "exit 0");
        let out = lab.git("r", &["merge", "-m", "m", "A"]);
        assert!(out.status.success(), "{out:?}");
        assert_ne!(lab.head("r", "main"), main);
    });
}

/// The sequencer's `git commit -n` gets `--verify` appended so its hooks
/// run; where that would be a path (after `--` or `--end-of-options`, with
/// a file named `--verify` staged) the commit is refused instead.
#[test]
fn a_sequencer_commit_cannot_turn_verify_into_a_path() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook(
            "r",
            "pre-commit",
            "if git diff --cached | grep -q MARKER; then exit 1; fi",
        );
        let before = lab.head("r", "HEAD");
        std::fs::write(lab.path("r/a"), "MARKER\n").unwrap();
        std::fs::write(lab.path("r/--verify"), "x\n").unwrap();
        lab.real("r", &["add", "--", "a", "--verify"]);
        let seq = [("GIT_REFLOG_ACTION", "rebase (continue)")];
        for a in [
            &["commit", "-qnm", "x", "--end-of-options", "a"][..],
            &["commit", "-qnm", "x", "--", "a"],
            &["commit", "-qnm", "x"],
        ] {
            let out = lab.git_env("r", a, &seq);
            assert!(!out.status.success(), "{a:?}: {out:?}");
            assert_eq!(lab.head("r", "HEAD"), before, "{a:?} committed");
        }
    });
}

/// Flips `link` between `a` and `b` (atomic renames of a fresh symlink)
/// until dropped: a repository swapped between the guard's look and git's.
struct Flipper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flipper {
    fn new(link: PathBuf, a: PathBuf, b: PathBuf) -> Flipper {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let tmp = link.with_extension("tmp");
            let mut i = 0u64;
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::remove_file(&tmp);
                let _ = std::os::unix::fs::symlink(if i % 2 == 0 { &a } else { &b }, &tmp);
                let _ = std::fs::rename(&tmp, &link);
                i += 1;
            }
        });
        Flipper {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Flipper {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `GIT_DIR` a symlink flipped between a decoy and the real repository
/// while git runs, many times: git runs the alias expansion the guard
/// judged (not the other repository's `commit --no-verify`), and a
/// `git stash create` commit's object lands in the repository whose list
/// records it.
#[test]
fn a_repository_swapped_after_the_guards_look_changes_nothing() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook("r", "pre-commit", "exit 1");
        let main = lab.head("r", "main");
        // The decoy: a copy whose aliases are harmless.
        let cp = Command::new("cp")
            .arg("-a")
            .arg(lab.path("r/.git"))
            .arg(lab.path("decoy.git"))
            .status()
            .unwrap();
        assert!(cp.success());
        let real_dir = lab.path("r/.git");
        let decoy = lab.path("decoy.git");
        let d = decoy.to_str().unwrap();
        lab.real(
            "r",
            &[
                "config",
                "alias.x",
                "commit --no-verify --allow-empty -qm raced",
            ],
        );
        lab.real(
            "r",
            &[
                "config",
                "alias.y",
                "commit --no-verify --allow-empty -qm raced",
            ],
        );
        lab.real("r", &["--git-dir", d, "config", "alias.x", "status"]);
        std::fs::write(lab.path("r/a"), "staged\n").unwrap();
        lab.real("r", &["add", "a"]);
        lab.real("r", &["--git-dir", d, "add", "a"]);
        let link = lab.path("gitdir-link");
        let flip = Flipper::new(link.clone(), decoy.clone(), real_dir.clone());
        let l = link.to_str().unwrap();
        let mut ids = Vec::new();
        // 60 rounds, and more (up to 300) until one `stash create` got
        // through the flipping: under load all 60 could land mid-flip.
        for round in 0..300 {
            if round >= 60 && !ids.is_empty() {
                break;
            }
            // git takes `$GIT_DIR/index.lock` and removes it by path: with
            // the link flipped in between, the lock stays in the other
            // repository, and every later `stash create` there fails on it.
            for d in [&real_dir, &decoy] {
                let _ = std::fs::remove_file(d.join("index.lock"));
            }
            let _ = lab.git_env("r", &["x", "-s"], &[("GIT_DIR", l)]);
            let _ = lab.git_env("r", &["y"], &[("GIT_DIR", l)]);
            let out = lab.git_env("r", &["stash", "create"], &[("GIT_DIR", l)]);
            let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if id.len() == 40 {
                ids.push(id);
            }
        }
        drop(flip);
        assert_eq!(
            lab.head("r", "main"),
            main,
            "an alias of the other repository ran"
        );
        assert!(!ids.is_empty());
        for id in &ids {
            for (dir, seen) in [
                (&real_dir, "r/.git/sbx-stash-seen"),
                (&decoy, "decoy.git/sbx-stash-seen"),
            ] {
                let has = lab
                    .cmd(lab.real.as_os_str(), "r")
                    .args(["--git-dir"])
                    .arg(dir)
                    .args(["cat-file", "-e", id])
                    .status()
                    .unwrap()
                    .success();
                let rec = std::fs::read_to_string(lab.path(seen)).unwrap_or_default();
                assert!(
                    !has || rec.lines().any(|l| l == id),
                    "{id} is in {} unrecorded",
                    dir.display()
                );
            }
        }
    });
}

/// A merge's stored `branch.<name>.mergeOptions` may be read from a
/// repository swapped in after the guard's look (too rare to hit in a
/// test loop: git reads a dozen files in between): git's merge gets
/// `--verify` first among its options, which wins over them.
#[test]
fn merge_gets_verify_over_options_the_guard_did_not_see() {
    each_git(|lab| {
        lab.repo("r");
        for (args, want) in [
            (&["merge", "-m", "m", "side"][..], true),
            (&["merge", "--abort"], false),
            (&["merge", "--cont"], false),
            (&["pull", ".", "side"], false),
        ] {
            let out = lab
                .cmd(OsStr::new(GUARD), "r")
                .arg("check")
                .args(args)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{args:?}: {out:?}");
            assert_eq!(
                text.contains(&format!(" {} --verify", args[0])),
                want,
                "{args:?}: {text}"
            );
        }
    });
}

/// Class 5, round six: a stash's change 3-way merged into a file the branch
/// changed since (cherry-pick, a `rebase -i` pick, a revert, onto a moved
/// file, a renamed file, or a detached HEAD then pushed) has a blob no stash
/// holds; the lines it adds are a stash's, and are refused. The controls:
/// one's own popped and committed change rebased and cherry-picked onto a
/// branch that changed the same file, and merged, still go through.
#[test]
fn a_stash_change_merged_into_a_moved_file_does_not_reach_a_branch() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook(
            "r",
            "pre-commit",
            "! git diff --cached | grep -q '^+.*MARKER'",
        );
        std::fs::write(lab.path("r/a"), "1\n2\n3\n4\n5\n").unwrap();
        lab.real("r", &["commit", "-qam", "five"]);
        lab.real("r", &["init", "-q", "--bare", "remote.git"]);
        let five = lab.head("r", "main");
        let sh = |script: &str| {
            lab.cmd(OsStr::new("sh"), "r")
                .args(["-c", script])
                .env("GIT_EDITOR", "true")
                .output()
                .unwrap()
        };
        let marked = || {
            let o = sh(
                "for b in $(git for-each-ref --format='%(refname)' refs/heads); do \
                          git grep -q MARKER $b -- && echo $b; done; \
                        git -C remote.git grep -q MARKER x -- 2>/dev/null && echo remote; true",
            );
            String::from_utf8_lossy(&o.stdout).trim().to_owned()
        };
        let reset = || {
            sh(
                "git rebase --abort; git cherry-pick --abort; git revert --abort; \
                git checkout -q -f main; git stash clear; git branch -q -D side pick 2>/dev/null; true",
            );
            lab.real("r", &["reset", "-q", "--hard", &five]);
        };
        let moved = "sed -i 5s/.*/five/ a && git commit -qam five2";
        let mut landed = Vec::new();
        for attack in [
            format!(
                "sed -i 1s/.*/MARKER/ a && git stash -q && {moved} && git cherry-pick -m 1 'stash@{{0}}'"
            ),
            format!(
                "sed -i 1s/.*/MARKER/ a && git add a && git stash -q && {moved} && git cherry-pick 'stash@{{0}}^2'"
            ),
            format!(
                "sed -i 1s/.*/MARKER/ a && git add a && git stash -q && i=$(git rev-parse 'stash@{{0}}^2') && \
                     {moved} && GIT_SEQUENCE_EDITOR=\"sed -i '1i pick $i'\" git rebase -qi HEAD"
            ),
            // The revert of a commit that took the stash's line out again.
            format!(
                "sed -i 1s/.*/MARKER/ a && git stash -q && git checkout -q --detach 'stash@{{0}}' && \
                     sed -i 1s/.*/1/ a && git commit -qam out && r=$(git rev-parse HEAD) && \
                     git checkout -q main && {moved} && git revert --no-edit $r"
            ),
            // The file renamed on the branch: the merge follows the rename.
            "sed -i 1s/.*/MARKER/ a && git stash -q && git mv a b && sed -i 5s/.*/five/ b && \
             git commit -qam moved && git cherry-pick -m 1 'stash@{0}'"
                .to_owned(),
            // Picked on a detached HEAD (no branch moves), then pushed.
            format!(
                "sed -i 1s/.*/MARKER/ a && git stash -q && {moved} && git checkout -q --detach && \
                     git cherry-pick -m 1 'stash@{{0}}' && git push -q remote.git HEAD:refs/heads/x"
            ),
        ] {
            let o = sh(&attack);
            let m = marked();
            if !m.is_empty() {
                landed.push(format!(
                    "{attack}\n -> {m}: {}",
                    String::from_utf8_lossy(&o.stderr)
                ));
            }
            reset();
        }
        assert!(landed.is_empty(), "landed:\n{}", landed.join("\n"));
        // Controls, with the stashes above still recorded and a live one.
        let ok = |script: &str| {
            let o = sh(script);
            assert!(
                o.status.success(),
                "{script}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        ok(
            "sed -i 2s/.*/two-popped/ a && git stash -q && git stash pop -q && \
            git switch -q -c side && git commit -qam two && \
            sed -i 2s/.*/deux-popped/ a && git commit -qam deux && \
            git switch -q main && sed -i 5s/.*/five/ a && git commit -qam five2 && \
            sed -i 3s/.*/three-stashed/ a && git stash -q && \
            git switch -q side && git rebase -q main && git switch -q -c pick main && \
            git cherry-pick side~1 && git switch -q main && sed -i 4s/.*/four/ a && \
            git commit -qam four && git merge -q --no-edit side",
        );
        assert!(lab.real("r", &["show", "main:a"]).contains("deux-popped"));
        reset();
        // A line already in the parent's tree (another file) may be added,
        // by a commit on no branch.
        ok(
            "sed -i 1s/.*/shared-line/ a && git stash -q && printf 'x\\nshared-line\\n' > c && \
            git add c && git commit -qm c && sed -i 5s/.*/five/ a && git commit -qam five2 && \
            git switch -q --detach HEAD~1 && printf 'shared-line\\n' > d && git add d && \
            git commit -qm d && d=$(git rev-parse HEAD) && git switch -q main && git cherry-pick $d",
        );
        reset();
    });
}

/// `git update-ref HEAD <oid>`, which `git worktree add` runs in the new
/// worktree (whose HEAD it wrote detached): a detached HEAD moves, with
/// `--no-deref` pinned, and never a branch: on a branch, or with a
/// `--no-deref` or `--deref` of the caller's, it is refused as before.
#[test]
fn update_ref_moves_a_detached_head_never_a_branch() {
    each_git(|lab| {
        lab.repo("r");
        let one = lab.head("r", "HEAD");
        lab.real("r", &["commit", "-q", "--allow-empty", "-m", "two"]);
        let two = lab.head("r", "HEAD");
        lab.real("r", &["reset", "-q", "--hard", &one]);
        for args in [
            &["update-ref", "HEAD", &two][..],
            &["update-ref", "-m", "x", "HEAD", &two, &one],
            &["update-ref", "--no-deref", "HEAD", &two, "--deref"],
            &["update-ref", "HEAD", &two, "--no-no-deref"],
        ] {
            let out = lab.git("r", args);
            assert!(
                refused(&out),
                "git {args:?} on main: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(lab.head("r", "main"), one, "git {args:?} moved main");
        }
        lab.real("r", &["checkout", "-q", "--detach", &one]);
        for flag in ["--no-no-deref", "--no-deref"] {
            let out = lab.git("r", &["update-ref", "HEAD", &two, flag]);
            assert!(
                refused(&out),
                "{flag}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let out = lab.git("r", &["update-ref", "HEAD", &two]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(lab.head("r", "HEAD"), two);
        assert_eq!(lab.head("r", "main"), one, "main moved");
    });
}

/// A stash made with nothing staged has an index commit with its base's
/// tree: a revert back to that base (its content committed before) was
/// refused as a copy of the stash (round seven). The stash's own commits
/// stay refused.
#[test]
fn a_commit_with_a_stash_bases_tree_is_no_copy_of_the_stash() {
    each_git(|lab| {
        lab.repo("r");
        std::fs::write(lab.path("r/a"), "stashed\n").unwrap();
        lab.real("r", &["stash", "push", "-q"]);
        std::fs::write(lab.path("r/b"), "b\n").unwrap();
        lab.real("r", &["add", "b"]);
        lab.real("r", &["commit", "-qm", "two"]);
        let two = lab.head("r", "HEAD");
        let out = lab.git("r", &["revert", "--no-edit", "HEAD"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_ne!(lab.head("r", "main"), two, "no revert");
        let reverted = lab.head("r", "main");
        for stash in ["stash@{0}", "stash@{0}^2"] {
            let what = format!("reset to {stash}");
            lab.refused_as_stash("r", &["reset", "-q", "--hard", stash], &reverted, &what);
        }
    });
}

/// `diff.ignoreSubmodules=all` hid a gitlink's change from the raw diffs
/// the stash check reads: a stash whose worktree commit changes only a
/// submodule then showed no change, so its tree did not count (a tree
/// counts only where it changes something), and `cherry-pick -m 1` of it
/// put that change on main unseen by pre-commit (attack15k).
#[test]
fn a_hidden_submodule_change_in_a_stash_does_not_reach_a_branch() {
    each_git(|lab| {
        lab.repo("r");
        let one = lab.head("r", "HEAD");
        lab.real(
            "r",
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{one},sub"),
            ],
        );
        lab.real("r", &["commit", "-qm", "base"]);
        let base = lab.head("r", "HEAD");
        // A staged change the work tree undoes: only the index commit has
        // it; the worktree commit changes only the gitlink (absent: deleted).
        std::fs::write(lab.path("r/a"), "staged\n").unwrap();
        lab.real("r", &["add", "a"]);
        std::fs::write(lab.path("r/a"), "1\n").unwrap();
        lab.real("r", &["stash", "push", "-q"]);
        // Set through the guard: the agent may.
        assert!(
            lab.git("r", &["config", "diff.ignoreSubmodules", "all"])
                .status
                .success()
        );
        let pick = ["cherry-pick", "-m", "1", "stash@{0}"];
        lab.refused_as_stash("r", &pick, &base, "cherry-pick -m 1 stash@{0}");
    });
}

/// `log.showRoot=false` hid a root commit's diff from the stash check: the
/// first notes commit (a root) then gave none of its blobs, and
/// `cherry-pick` of it put the note's text on main unseen by pre-commit
/// (attack15k; a text of punctuation only, which the line check skips).
/// Refused with git's default too.
#[test]
fn a_notes_root_commit_does_not_reach_a_branch_with_show_root_off() {
    each_git(|lab| {
        for show_root in ["true", "false"] {
            let r = format!("r-{show_root}");
            lab.repo(&r);
            let one = lab.head(&r, "HEAD");
            // Set through the guard: the agent may.
            assert!(
                lab.git(&r, &["config", "log.showRoot", show_root])
                    .status
                    .success()
            );
            lab.real(&r, &["notes", "add", "-m", "}", "HEAD"]);
            let what = format!("log.showRoot={show_root}: cherry-pick of the notes root");
            lab.refused_as_stash(&r, &["cherry-pick", "refs/notes/commits"], &one, &what);
        }
    });
}

/// `log.diffMerges` is what `-m` means since git 2.31: `off` left a stash's
/// worktree commit (a merge) with no diff at all in the stash check, so its
/// tree counted for nothing and its blobs and lines were unknown, and
/// `combined` printed `::` lines it misread; `cherry-pick -m 1 stash@{0}`
/// then put the stash's change on main unseen by pre-commit (attack15k).
#[test]
fn log_diff_merges_does_not_hide_a_stash_from_the_check() {
    each_git(|lab| {
        for mode in [
            "off",
            "none",
            "combined",
            "dense-combined",
            "remerge",
            "separate",
        ] {
            let r = format!("r-{mode}");
            lab.repo(&r);
            let one = lab.head(&r, "HEAD");
            std::fs::write(lab.path(&r).join("a"), "STASHED secret\n").unwrap();
            lab.real(&r, &["stash", "push", "-q"]);
            // Set through the guard: the agent may.
            assert!(
                lab.git(&r, &["config", "log.diffMerges", mode])
                    .status
                    .success()
            );
            let pick = ["cherry-pick", "-m", "1", "stash@{0}"];
            let what = format!("log.diffMerges={mode}: cherry-pick -m 1 stash@{{0}}");
            lab.refused_as_stash(&r, &pick, &one, &what);
        }
    });
}

/// `i18n.logOutputEncoding` re-encodes every `--format` line the stash
/// checks read: in UTF-16 no commit id matched as git wrote it, and `reset
/// --hard stash@{0}^2` moved main onto a stash's index commit (attack15k;
/// one with nothing staged: its content was caught by its blobs).
#[test]
fn log_output_encoding_does_not_hide_a_stash_from_the_check() {
    each_git(|lab| {
        for (enc, staged) in [
            ("UTF-16", false),
            ("UTF-16", true),
            ("UTF-16LE", false),
            ("UTF-32", false),
            ("EBCDIC-US", false),
        ] {
            let r = format!("r-{enc}-{staged}");
            lab.repo(&r);
            let one = lab.head(&r, "HEAD");
            std::fs::write(lab.path(&r).join("a"), "STASHED secret\n").unwrap();
            if staged {
                lab.real(&r, &["add", "a"]);
            }
            lab.real(&r, &["stash", "push", "-q"]);
            // Set through the guard: the agent may.
            assert!(
                lab.git(&r, &["config", "i18n.logOutputEncoding", enc])
                    .status
                    .success()
            );
            for target in ["stash@{0}", "stash@{0}^2"] {
                let out = lab.git(&r, &["reset", "-q", "--hard", target]);
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(
                    !out.status.success() && err.contains("stash"),
                    "i18n.logOutputEncoding={enc}: reset --hard {target}: {err}"
                );
                assert_eq!(lab.head(&r, "main"), one, "{enc}: main moved");
            }
        }
    });
}

/// A stash whose change brings in no blob (a deletion, a mode change):
/// cherry-picked onto a moved branch, the copy had no stash blob and no
/// stash tree, and reached main unseen by pre-commit (attack15k). The same
/// change made on a branch first (a rebase of one's own commit) passes.
#[test]
fn a_stash_change_with_no_blob_does_not_reach_a_moved_branch() {
    each_git(|lab| {
        for (case, change) in [
            ("deletion", &["rm", "-q", "b"][..]),
            ("mode", &["update-index", "--chmod=+x", "a"]),
        ] {
            let r = format!("r-{case}");
            lab.repo(&r);
            std::fs::write(lab.path(&r).join("b"), "b\n").unwrap();
            lab.real(&r, &["add", "b"]);
            lab.real(&r, &["commit", "-qm", "b"]);
            let base = lab.head(&r, "HEAD");
            lab.real(&r, change);
            if case == "mode" {
                use std::os::unix::fs::PermissionsExt as _;
                let p = std::fs::Permissions::from_mode(0o755);
                std::fs::set_permissions(lab.path(&r).join("a"), p).unwrap();
            }
            lab.real(&r, &["stash", "push", "-q"]);
            std::fs::write(lab.path(&r).join("c"), "c\n").unwrap();
            lab.real(&r, &["add", "c"]);
            lab.real(&r, &["commit", "-qm", "moved"]);
            let moved = lab.head(&r, "HEAD");
            let pick = ["cherry-pick", "-m", "1", "stash@{0}"];
            let what = format!("{case}: cherry-pick -m 1 stash@{{0}}");
            lab.refused_as_stash(&r, &pick, &moved, &what);
            // The change committed on a branch, then rebased: no copy.
            lab.real(&r, &["reset", "-q", "--hard"]);
            lab.real(&r, &["checkout", "-q", "-b", "feat", &base]);
            lab.real(&r, change);
            if case == "mode" {
                use std::os::unix::fs::PermissionsExt as _;
                let p = std::fs::Permissions::from_mode(0o755);
                std::fs::set_permissions(lab.path(&r).join("a"), p).unwrap();
            }
            lab.real(&r, &["commit", "-qm", "own"]);
            let out = lab.git(&r, &["rebase", "-q", "main"]);
            assert!(
                out.status.success(),
                "{case}: rebase of one's own commit: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_ne!(
                lab.head(&r, "feat"),
                lab.head(&r, "main"),
                "{case}: no rebase"
            );
        }
    });
}

/// Guards replacing a stale hooks directory at once (parallel tests over
/// a directory a build at another path made): each succeeds, and the
/// directory ends current. Two had both seen it and the second rename of
/// it failed (ENOENT).
#[test]
fn install_hooks_over_a_stale_directory_races_safely() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("hooks");
    for round in 0..20 {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink("/nonexistent", dir.join("pre-commit")).unwrap();
        let children: Vec<_> = (0..6)
            .map(|_| {
                Command::new(GUARD)
                    .arg("install-hooks")
                    .arg(&dir)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            let o = c.wait_with_output().unwrap();
            assert!(
                o.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let link = std::fs::read_link(dir.join("pre-commit")).unwrap();
        assert_ne!(link, Path::new("/nonexistent"), "round {round}");
    }
}

/// Round eight: the configuration the guard reads is the one git reads.
/// A merge driver (whose output `git cherry-pick` commits without
/// pre-commit, refused since round six) hidden from the guard only: in an
/// include section spelt in another case (git's section names know none;
/// gix followed only `[include]` and `[includeIf "…"]`), in an include
/// that leads through /proc (`/proc/self/cwd` is the guard's directory, a
/// subdirectory, but git's, the top of the work tree, by the time it reads
/// its configuration), literally or by a symlink, and in a `.gitconfig`
/// under a relative HOME or XDG_CONFIG_HOME (read from the same two
/// directories). Each put the driver's MARKER on main.
#[test]
fn config_the_guard_reads_is_the_config_git_reads() {
    each_git(|lab| {
        lab.repo("r");
        lab.hook(
            "r",
            "pre-commit",
            "if git diff --cached | grep -q MARKER; then exit 1; fi",
        );
        std::fs::create_dir_all(lab.path("r/sub")).unwrap();
        std::fs::write(lab.path("r/sub/k"), "k\n").unwrap();
        std::fs::write(lab.path("r/a"), "1\n2\n3\n").unwrap();
        lab.real("r", &["add", "-A"]);
        lab.real("r", &["commit", "-qm", "three"]);
        lab.real("r", &["switch", "-qc", "side"]);
        std::fs::write(lab.path("r/a"), "one\n2\n3\n").unwrap();
        lab.real("r", &["commit", "-qam", "s1"]);
        lab.real("r", &["switch", "-q", "main"]);
        std::fs::write(lab.path("r/a"), "1\n2\nthree\n").unwrap();
        lab.real("r", &["commit", "-qam", "m1"]);
        let main = lab.head("r", "main");
        let drv = lab.path("drv");
        std::fs::write(&drv, "#!/bin/sh\necho MARKER from a driver > \"$1\"\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&drv, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(lab.path("r/.git/info/attributes"), "a merge=ev\n").unwrap();
        let driver = format!(
            "[merge \"ev\"]\n\tdriver = {} %A\n[user]\n\tname = A\n\temail = a@b\n",
            drv.display()
        );
        let evil = lab.path("evil.inc");
        std::fs::write(&evil, &driver).unwrap();
        let config = std::fs::read_to_string(lab.path("r/.git/config")).unwrap();
        let top = lab.path("r").canonicalize().unwrap();
        // (lines added to .git/config, where git runs, its variables)
        type Case<'a> = (String, &'a str, Vec<(&'a str, &'a str)>);
        let cases: Vec<Case> = vec![
            (
                format!("[INCLUDE]\n\tpath = {}\n", evil.display()),
                "r",
                vec![],
            ),
            (
                format!(
                    "[includeif \"gitdir:{}/\"]\n\tpath = {}\n",
                    top.display(),
                    evil.display()
                ),
                "r",
                vec![],
            ),
            (
                format!(
                    "[IncludeIf \"onbranch:main\"]\n\tpath = {}\n",
                    evil.display()
                ),
                "r",
                vec![],
            ),
            (
                "[include]\n\tpath = /proc/self/cwd/.inc\n".into(),
                "r/sub",
                vec![],
            ),
            ("[include]\n\tpath = ../lnk\n".into(), "r/sub", vec![]),
            (String::new(), "r/sub", vec![("HOME", ".")]),
            (String::new(), "r/sub", vec![("HOME", "/proc/self/cwd")]),
            (String::new(), "r/sub", vec![("XDG_CONFIG_HOME", ".")]),
        ];
        std::fs::write(lab.path("r/.inc"), &driver).unwrap();
        std::fs::write(lab.path("r/.gitconfig"), &driver).unwrap();
        std::fs::create_dir_all(lab.path("r/git")).unwrap();
        std::fs::write(lab.path("r/git/config"), &driver).unwrap();
        std::os::unix::fs::symlink("/proc/self/cwd/.inc", lab.path("r/lnk")).unwrap();
        for (extra, cwd, env) in &cases {
            std::fs::write(lab.path("r/.git/config"), format!("{config}{extra}")).unwrap();
            let out = lab.git_env(cwd, &["cherry-pick", "side"], env);
            let _ = lab.real("r", &["status", "--short"]);
            let landed = lab.head("r", "main") != main;
            let _ = lab.git("r", &["cherry-pick", "--abort"]);
            lab.real("r", &["reset", "-q", "--hard", &main]);
            assert!(
                refused(&out) && !landed,
                "{extra:?} {env:?} in {cwd}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // HEAD written as `ref:refs/heads/main` (git skips any whitespace
        // after `ref:`): git's onbranch:main matched, the guard's did not.
        std::fs::write(
            lab.path("r/.git/config"),
            format!(
                "{config}[includeIf \"onbranch:main\"]\n\tpath = {}\n",
                evil.display()
            ),
        )
        .unwrap();
        for head in ["ref:refs/heads/main\n", "ref:\trefs/heads/main \r\n"] {
            std::fs::write(lab.path("r/.git/HEAD"), head).unwrap();
            let out = lab.git("r", &["cherry-pick", "side"]);
            let landed = lab.head("r", "main") != main;
            let _ = lab.git("r", &["cherry-pick", "--abort"]);
            lab.real("r", &["reset", "-q", "--hard", &main]);
            assert!(refused(&out) && !landed, "HEAD {head:?}: {out:?}");
        }
        std::fs::write(lab.path("r/.git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(lab.path("r/.git/config"), &config).unwrap();
        // A FIFO: gix skipped an include that is not a regular file, git
        // read what a writer put into it.
        let fifo = lab.path("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let mut writer = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while :; do cat '{}' > '{}'; done",
                evil.display(),
                fifo.display()
            ))
            .spawn()
            .unwrap();
        std::fs::write(
            lab.path("r/.git/config"),
            format!("{config}[include]\n\tpath = {}\n", fifo.display()),
        )
        .unwrap();
        let out = lab.git("r", &["cherry-pick", "side"]);
        std::fs::write(lab.path("r/.git/config"), &config).unwrap();
        let landed = lab.head("r", "main") != main;
        let _ = writer.kill();
        let _ = writer.wait();
        // Its `cat` waits to open the FIFO: let it, so it ends.
        use std::os::unix::fs::OpenOptionsExt as _;
        let _ = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(&fifo);
        let _ = lab.git("r", &["cherry-pick", "--abort"]);
        lab.real("r", &["reset", "-q", "--hard", &main]);
        assert!(refused(&out) && !landed, "a FIFO include: {out:?}");
        // An include in ~/.gitconfig for repositories whose remote URL
        // matches (`hasconfig:`, the remote in .git/config): git follows it.
        std::fs::write(lab.path("r/.git/config"), &config).unwrap();
        lab.real("r", &["remote", "add", "origin", "/srv/x.git"]);
        let global = std::fs::read_to_string(lab.path("home/.gitconfig")).unwrap();
        for (glob, refuse) in [("/srv/**", true), ("https://elsewhere/**", false)] {
            std::fs::write(
                lab.path("home/.gitconfig"),
                format!(
                    "{global}[includeIf \"hasconfig:remote.*.url:{glob}\"]\n\tpath = {}\n",
                    evil.display()
                ),
            )
            .unwrap();
            let out = lab.git("r", &["cherry-pick", "side"]);
            let landed = lab.head("r", "main") != main;
            let _ = lab.git("r", &["cherry-pick", "--abort"]);
            lab.real("r", &["reset", "-q", "--hard", &main]);
            assert_eq!(refused(&out), refuse, "hasconfig {glob}: {out:?}");
            assert!(!landed || !refuse, "hasconfig {glob}: main moved");
        }
        std::fs::write(lab.path("home/.gitconfig"), &global).unwrap();
        // Controls: includes spelt as documented, a harmless one followed
        // and a driver in one still refused; an absolute HOME is fine.
        let fine = lab.path("fine.inc");
        std::fs::write(&fine, "[core]\n\tabbrev = 12\n").unwrap();
        let incl = format!(
            "{config}[include]\n\tpath = {}\n[includeIf \"gitdir:{}/\"]\n\tpath = {}\n",
            fine.display(),
            top.display(),
            fine.display()
        );
        std::fs::write(lab.path("r/.git/config"), &incl).unwrap();
        let home = lab.path("home").display().to_string();
        let out = lab.git_env("r/sub", &["cherry-pick", "side"], &[("HOME", &home)]);
        assert!(out.status.success(), "{out:?}");
        lab.real("r", &["reset", "-q", "--hard", &main]);
        std::fs::write(
            lab.path("r/.git/config"),
            format!("{incl}[include]\n\tpath = {}\n", evil.display()),
        )
        .unwrap();
        let out = lab.git("r", &["cherry-pick", "side"]);
        assert!(refused(&out), "{out:?}");
        assert_eq!(lab.head("r", "main"), main);
    });
}

/// Round eight: a `remote.NAME.uploadpack` written into .git/config by
/// hand (`git config` of it is refused) is the program a fetch from a
/// local remote runs as git's child: `git fetch x` and `git ls-remote x`
/// ran it (with git's group, in a sandbox), where a stored receivepack
/// was already refused for push.
#[test]
fn a_stored_upload_pack_is_refused() {
    each_git(|lab| {
        lab.repo("r");
        lab.real("", &["init", "-q", "--bare", "remote.git"]);
        let ran = lab.path("ran");
        let prog = lab.path("up");
        std::fs::write(
            &prog,
            format!("#!/bin/sh\ntouch '{}'\nexit 1\n", ran.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let remote = lab.path("remote.git").display().to_string();
        lab.real("r", &["remote", "add", "ok", &remote]);
        let config = std::fs::read_to_string(lab.path("r/.git/config")).unwrap();
        std::fs::write(
            lab.path("r/.git/config"),
            format!(
                "{config}[remote \"x\"]\n\turl = {remote}\n\tuploadpack = {}\n",
                prog.display()
            ),
        )
        .unwrap();
        for args in [
            &["fetch", "x"][..],
            &["ls-remote", "x"],
            &["fetch", "--all"],
            &["pull", "x", "main"],
            &["remote", "update"],
        ] {
            let out = lab.git("r", args);
            assert!(refused(&out), "{args:?}: {out:?}");
            assert!(!ran.exists(), "{args:?} ran the program");
        }
        // Control: without it, the same fetch works.
        std::fs::write(lab.path("r/.git/config"), &config).unwrap();
        let out = lab.git("r", &["fetch", "ok"]);
        assert!(out.status.success(), "{out:?}");
    });
}
