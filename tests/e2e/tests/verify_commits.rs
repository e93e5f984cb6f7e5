//! `sbx-run verify-commits` against real repositories with real hooks, in
//! its clean room (a real container of the base image): commits made with
//! --no-verify that the hooks reject are found (hash, hook, output), good
//! ones pass, nothing is left behind. Then the attacks on the check itself,
//! each an agent's write followed by the user's `verify-commits` on the
//! host: its own scripts run by the hooks (canary outside the repository),
//! husky's generated `_` missing, a `core.hooksPath` of its own, a subject
//! that draws on the terminal.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sbx_e2e::{base_image, sbx, text};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("GIT_AUTHOR_NAME", "a")
        .env("GIT_AUTHOR_EMAIL", "a@b")
        .env("GIT_COMMITTER_NAME", "a")
        .env("GIT_COMMITTER_EMAIL", "a@b")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn write_exec(p: &Path, body: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn hook(repo: &Path, name: &str, body: &str) {
    write_exec(&repo.join(".git/hooks").join(name), body);
}

/// A checkout with one pushed commit (its upstream), in a temporary
/// directory under /var/tmp that also holds sbx-run's state.
struct Fixture {
    tmp: tempfile::TempDir,
    repo: PathBuf,
}

impl Fixture {
    fn new() -> Option<Self> {
        if !base_image() {
            return None;
        }
        let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
        let remote = tmp.path().join("remote.git");
        let repo = tmp.path().join("repo");
        let r = remote.to_str().unwrap();
        git(tmp.path(), &["init", "-q", "--bare", "-b", "main", r]);
        git(
            tmp.path(),
            &["init", "-q", "-b", "main", repo.to_str().unwrap()],
        );
        std::fs::write(repo.join("a"), "a\n").unwrap();
        git(&repo, &["add", "a"]);
        git(&repo, &["commit", "-qm", "base"]);
        git(&repo, &["remote", "add", "origin", r]);
        git(&repo, &["push", "-q", "-u", "origin", "main"]);
        Some(Self { tmp, repo })
    }

    fn state(&self) -> PathBuf {
        self.tmp.path().join("state")
    }

    /// What `sbx-run start` records before the agent runs.
    fn record(&self) {
        let top = self.repo.canonicalize().unwrap();
        sbx_run::verify::record::record_in(
            &self.state().join("sbx"),
            &top,
            &sbx_run::names::path_hash(&top),
        )
        .unwrap();
    }

    fn commit(&self, files: &[(&str, &str)], msg: &str, verify: bool) -> String {
        for (f, body) in files {
            let p = self.repo.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, body).unwrap();
            git(&self.repo, &["add", "-f", f]);
        }
        let mut args = vec!["commit", "-q", "-m", msg];
        if !verify {
            args.push("--no-verify");
        }
        git(&self.repo, &args);
        git(&self.repo, &["rev-parse", "HEAD"])
    }

    /// The user's `sbx-run verify-commits` on the host.
    fn verify(&self, extra: &[&str]) -> Output {
        let mut c = sbx();
        c.arg("verify-commits")
            .args(extra)
            .arg(&self.repo)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("HOME", self.tmp.path())
            .env("XDG_STATE_HOME", self.state())
            .env("SBX_AUDIT_LOG", self.tmp.path().join("audit.jsonl"))
            .env("GIT_CONFIG_NOSYSTEM", "1");
        if let Some(t) = std::env::var_os("SBX_BASE_TAG") {
            c.env("SBX_BASE_TAG", t);
        }
        c.output().unwrap()
    }
}

const LINT_BAD: &str = "#!/bin/sh\nif git diff --cached --name-only | grep -qx bad; then echo 'lint: bad file staged' >&2; exit 3; fi\n";
const TICKET: &str =
    "#!/bin/sh\ngrep -q '^T-[0-9]' \"$1\" || { echo 'message needs a ticket' >&2; exit 4; }\n";

#[test]
fn commits_that_skipped_the_hooks_are_found() {
    let Some(f) = Fixture::new() else { return };
    let repo = &f.repo;
    hook(repo, "pre-commit", LINT_BAD);
    hook(repo, "commit-msg", TICKET);
    f.commit(&[("good", "g\n")], "T-1 good", true);
    // No record yet: the host's current hooks, read, and said so.
    let clean = f.verify(&[]);
    assert_eq!(clean.status.code(), Some(0), "{}", text(&clean));
    assert!(
        text(&clean).contains("no hooks recorded"),
        "{}",
        text(&clean)
    );
    f.record();

    let bad = f.commit(&[("bad", "b\n")], "T-2 sneak a bad file", false);
    let nomsg = f.commit(&[("c", "c\n")], "no ticket", false);
    f.commit(&[("d", "d\n")], "T-3 fine", true);

    let o = f.verify(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!(
            "FAIL {} T-2 sneak a bad file: pre-commit exited 3",
            &bad[..12]
        )),
        "{out}"
    );
    assert!(out.contains("lint: bad file staged"), "{out}");
    assert!(
        out.contains(&format!(
            "FAIL {} no ticket: commit-msg exited 4",
            &nomsg[..12]
        )),
        "{out}"
    );
    assert_eq!(out.matches("FAIL").count(), 2, "{out}");
    assert!(!text(&o).contains("no hooks recorded"), "{}", text(&o));

    let o = f.verify(&["--json"]);
    assert_eq!(o.status.code(), Some(1));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "one record per commit since the upstream");
    let failed: Vec<_> = lines.iter().filter(|v| v["data"]["ok"] == false).collect();
    assert_eq!(failed.len(), 2);
    assert_eq!(failed[0]["data"]["commit"], bad.as_str());
    assert_eq!(failed[0]["data"]["result"], "fail");
    assert_eq!(failed[0]["data"]["hook"], "pre-commit");
    assert_eq!(failed[0]["data"]["exit_code"], 3);

    // --since narrows the range: only the last commit, which passes.
    let o = f.verify(&["--since", &nomsg]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Nothing left behind in the repository.
    assert_eq!(git(repo, &["worktree", "list"]).lines().count(), 1);
    assert_eq!(git(repo, &["status", "--porcelain"]), "");

    // No upstream and no --since: a usage error naming what to do.
    git(repo, &["branch", "--unset-upstream"]);
    let o = f.verify(&[]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(text(&o).contains("--since"), "{}", text(&o));
}

/// The sandbox writes the repository's files, and history read through
/// them is not the objects': a `.git/shallow` line, a replace ref or an
/// `info/grafts` line naming the commit that skipped pre-commit made it a
/// root, checked with nothing staged (round eight). The check reads the
/// objects alone.
#[test]
fn history_rewritten_by_repository_files_hides_no_commit() {
    let Some(f) = Fixture::new() else { return };
    let repo = &f.repo;
    hook(repo, "pre-commit", LINT_BAD);
    f.record();
    let bad = f.commit(&[("bad", "b\n")], "sneak", false);
    let found = |how: &str| {
        let o = f.verify(&[]);
        assert_eq!(o.status.code(), Some(1), "{how}: {}", text(&o));
        assert!(
            text(&o).contains(&format!("FAIL {} sneak: pre-commit exited 3", &bad[..12])),
            "{how}: {}",
            text(&o)
        );
    };
    found("control");
    std::fs::write(repo.join(".git/shallow"), format!("{bad}\n")).unwrap();
    found("shallow");
    std::fs::remove_file(repo.join(".git/shallow")).unwrap();
    git(repo, &["replace", "--graft", &bad]);
    found("replace --graft");
    git(repo, &["replace", "-d", &bad]);
    std::fs::write(repo.join(".git/info/grafts"), format!("{bad}\n")).unwrap();
    found("info/grafts");
    std::fs::remove_file(repo.join(".git/info/grafts")).unwrap();
    // Control: a real shallow clone (its parents missing) still checks.
    let shallow = f.tmp.path().join("shallow");
    let url = format!("file://{}", repo.display());
    git(
        f.tmp.path(),
        &[
            "clone",
            "-q",
            "--depth",
            "1",
            &url,
            shallow.to_str().unwrap(),
        ],
    );
    std::fs::write(shallow.join("g"), "g\n").unwrap();
    git(&shallow, &["add", "g"]);
    git(&shallow, &["commit", "-qm", "good"]);
    assert!(shallow.join(".git/shallow").exists());
    let f2 = Fixture {
        tmp: tempfile::tempdir_in("/var/tmp").unwrap(),
        repo: shallow,
    };
    let o = f2.verify(&[]);
    assert_eq!(o.status.code(), Some(0), "shallow clone: {}", text(&o));
}

/// Attack: pre-commit runs `./scripts/lint.sh` from the tree; the agent's
/// commit rewrites it to write a canary outside the repository (and pass).
/// The user's verify-commits must not run it on the host, and must flag
/// the commit for changing what the hooks run.
#[test]
fn a_script_the_hook_runs_never_runs_on_the_host() {
    let Some(f) = Fixture::new() else { return };
    let canary = f.tmp.path().join("canary");
    hook(&f.repo, "pre-commit", "#!/bin/sh\nexec ./scripts/lint.sh\n");
    write_exec(&f.repo.join("scripts/lint.sh"), LINT_BAD);
    git(&f.repo, &["add", "scripts/lint.sh"]);
    git(&f.repo, &["commit", "-qm", "lint script"]);
    git(&f.repo, &["push", "-q"]);
    f.record();
    // The agent's commit: its lint.sh writes the canary and passes anything.
    let evil = format!(
        "#!/bin/sh\necho owned > {} 2>/dev/null; echo owned > /var/tmp/sbx-verify-canary-{} 2>/dev/null; exit 0\n",
        canary.display(),
        std::process::id()
    );
    let id = f.commit(
        &[("scripts/lint.sh", &evil), ("bad", "b\n")],
        "tweak lint",
        false,
    );
    let o = f.verify(&[]);
    let host_canary = PathBuf::from(format!("/var/tmp/sbx-verify-canary-{}", std::process::id()));
    let ran_on_host = canary.exists() || host_canary.exists();
    let _ = std::fs::remove_file(&host_canary);
    assert!(
        !ran_on_host,
        "the agent's lint.sh ran on the host: {}",
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&format!(
            "FLAG {} tweak lint: hook inputs changed: scripts/lint.sh",
            &id[..12]
        )),
        "{}",
        text(&o)
    );
    // The flag is in --json too.
    let o = f.verify(&["--json"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("hook inputs changed: scripts/lint.sh"),
        "{}",
        text(&o)
    );
}

/// husky: `core.hooksPath = .husky/_`, a git-ignored directory husky
/// generates on the host. The clean room's fresh clone has none: the
/// recorded `_` is put there, so a commit that skipped `.husky/pre-commit`
/// is still caught. A commit that adds its own `.husky/_/pre-commit`
/// (exit 0) does not replace the recorded one, and is flagged.
#[test]
fn husky_hooks_are_checked_without_the_generated_directory() {
    let Some(f) = Fixture::new() else { return };
    let repo = &f.repo;
    std::fs::write(repo.join(".gitignore"), "_\n").unwrap();
    write_exec(&repo.join(".husky/pre-commit"), LINT_BAD);
    git(repo, &["add", ".gitignore", ".husky/pre-commit"]);
    git(repo, &["commit", "-qm", "husky"]);
    git(repo, &["push", "-q"]);
    // What `husky` writes into the git-ignored `.husky/_`.
    write_exec(
        &repo.join(".husky/_/pre-commit"),
        "#!/bin/sh\nexec sh \"$(dirname \"$0\")/../$(basename \"$0\")\" \"$@\"\n",
    );
    git(repo, &["config", "core.hooksPath", ".husky/_"]);
    f.record();
    let bad = f.commit(&[("bad", "b\n")], "sneak past husky", false);
    let o = f.verify(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "FAIL {} sneak past husky: pre-commit exited 3",
            &bad[..12]
        )),
        "{}",
        text(&o)
    );
    // The agent removes `.husky/_` from the checkout and commits its own.
    std::fs::remove_dir_all(repo.join(".husky/_")).unwrap();
    let own = f.commit(
        &[
            (".husky/_/pre-commit", "#!/bin/sh\nexit 0\n"),
            ("bad2", "b\n"),
        ],
        "own hook",
        false,
    );
    let o = f.verify(&["--since", &bad]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "FLAG {} own hook: hook inputs changed: .husky/_/pre-commit",
            &own[..12]
        )),
        "{}",
        text(&o)
    );
    let o = f.verify(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("FAIL {}", &bad[..12])),
        "{}",
        text(&o)
    );
}

/// Attack: after the start, the agent sets `core.hooksPath` in
/// `.git/config` to a directory of its own commit whose pre-commit passes
/// everything. The check uses the hooks recorded at the start.
#[test]
fn an_agent_set_hooks_path_is_ignored() {
    let Some(f) = Fixture::new() else { return };
    hook(&f.repo, "pre-commit", LINT_BAD);
    f.record();
    let bad = f.commit(
        &[(".tools/pre-commit", "#!/bin/sh\nexit 0\n"), ("bad", "b\n")],
        "own hooks",
        false,
    );
    std::fs::set_permissions(
        f.repo.join(".tools/pre-commit"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    git(&f.repo, &["config", "core.hooksPath", ".tools"]);
    let o = f.verify(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "FAIL {} own hooks: pre-commit exited 3",
            &bad[..12]
        )),
        "{}",
        text(&o)
    );
}

/// Attack: a failing commit whose subject holds escape sequences that
/// would erase the FAIL line and draw "every commit passes" instead.
#[test]
fn a_subject_with_escape_sequences_is_printed_escaped() {
    let Some(f) = Fixture::new() else { return };
    hook(&f.repo, "pre-commit", LINT_BAD);
    f.record();
    let subject = "x\x1b[2K\r\x1b[1Aevery commit passes\u{9b}0m";
    f.commit(&[("bad", "b\n")], subject, false);
    let o = f.verify(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !out.contains('\x1b') && !out.contains('\u{9b}') && !out.contains('\r'),
        "{out:?}"
    );
    assert!(
        out.contains("x\\e[2K\\r\\e[1Aevery commit passes\\u{9b}0m"),
        "{out:?}"
    );
}
