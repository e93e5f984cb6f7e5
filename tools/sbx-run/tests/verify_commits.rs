//! `sbx-run verify-commits` against a real repository with real hooks:
//! commits made with the real git and --no-verify that the hooks reject
//! are found (hash, hook, output); good ones pass; nothing is left behind.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

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

fn hook(repo: &Path, name: &str, body: &str) {
    let p = repo.join(".git/hooks").join(name);
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn verify(repo: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sbx-run"))
        .arg("verify-commits")
        .args(extra)
        .arg(repo)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("HOME", repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

#[test]
fn commits_that_skipped_the_hooks_are_found() {
    let tmp = tempfile::tempdir().unwrap();
    let remote = tmp.path().join("remote.git");
    let repo = tmp.path().join("repo");
    git(
        tmp.path(),
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            remote.to_str().unwrap(),
        ],
    );
    git(
        tmp.path(),
        &["init", "-q", "-b", "main", repo.to_str().unwrap()],
    );
    std::fs::write(repo.join("a"), "a\n").unwrap();
    git(&repo, &["add", "a"]);
    git(&repo, &["commit", "-qm", "base"]);
    git(
        &repo,
        &["remote", "add", "origin", remote.to_str().unwrap()],
    );
    git(&repo, &["push", "-q", "-u", "origin", "main"]);
    // The repository's gates: no file named `bad` (checked on what is
    // staged against HEAD), and messages start with a ticket.
    hook(
        &repo,
        "pre-commit",
        "#!/bin/sh\nif git diff --cached --name-only | grep -qx bad; then echo 'lint: bad file staged' >&2; exit 3; fi\n",
    );
    hook(
        &repo,
        "commit-msg",
        "#!/bin/sh\ngrep -q '^T-[0-9]' \"$1\" || { echo 'message needs a ticket' >&2; exit 4; }\n",
    );
    // A good commit, through the hooks.
    std::fs::write(repo.join("good"), "g\n").unwrap();
    git(&repo, &["add", "good"]);
    git(&repo, &["commit", "-qm", "T-1 good"]);
    let clean = verify(&repo, &[]);
    assert_eq!(clean.status.code(), Some(0), "{}", text(&clean));

    // What an agent with its own git does: --no-verify.
    std::fs::write(repo.join("bad"), "b\n").unwrap();
    git(&repo, &["add", "bad"]);
    git(
        &repo,
        &["commit", "-q", "--no-verify", "-m", "T-2 sneak a bad file"],
    );
    let bad = git(&repo, &["rev-parse", "HEAD"]);
    // Later commits no longer stage `bad`, so they pass pre-commit.
    std::fs::write(repo.join("c"), "c\n").unwrap();
    git(&repo, &["add", "c"]);
    git(&repo, &["commit", "-q", "--no-verify", "-m", "no ticket"]);
    let nomsg = git(&repo, &["rev-parse", "HEAD"]);
    std::fs::write(repo.join("d"), "d\n").unwrap();
    git(&repo, &["add", "d"]);
    git(&repo, &["commit", "-qm", "T-3 fine"]);

    let o = verify(&repo, &[]);
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

    let o = verify(&repo, &["--json"]);
    assert_eq!(o.status.code(), Some(1));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "one record per commit since the upstream");
    let failed: Vec<_> = lines.iter().filter(|v| v["data"]["ok"] == false).collect();
    assert_eq!(failed.len(), 2);
    assert_eq!(failed[0]["data"]["commit"], bad.as_str());
    assert_eq!(failed[0]["data"]["hook"], "pre-commit");
    assert_eq!(failed[0]["data"]["exit_code"], 3);

    // --since narrows the range: only the last commit, which passes.
    let o = verify(&repo, &["--since", &nomsg]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Nothing left behind in the repository.
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");

    // No upstream and no --since: a usage error naming what to do.
    git(&repo, &["branch", "--unset-upstream"]);
    let o = verify(&repo, &[]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(text(&o).contains("--since"), "{}", text(&o));
}

/// The sandbox writes the repository's files, and history read through
/// them is not the objects': a `.git/shallow` line, a replace ref (`git
/// replace --graft`) or an `info/grafts` line naming the commit that
/// skipped pre-commit made it a root, checked at itself with nothing
/// staged, and every commit passed (round eight). The check now reads the
/// objects alone.
#[test]
fn history_rewritten_by_repository_files_hides_no_commit() {
    let tmp = tempfile::tempdir().unwrap();
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
    hook(
        &repo,
        "pre-commit",
        "#!/bin/sh\nif git diff --cached --name-only | grep -qx bad; then echo 'lint: bad file staged' >&2; exit 3; fi\n",
    );
    std::fs::write(repo.join("bad"), "b\n").unwrap();
    git(&repo, &["add", "bad"]);
    git(&repo, &["commit", "-q", "--no-verify", "-m", "sneak"]);
    let bad = git(&repo, &["rev-parse", "HEAD"]);
    let found = |how: &str| {
        let o = verify(&repo, &[]);
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
    git(&repo, &["replace", "--graft", &bad]);
    found("replace --graft");
    git(&repo, &["replace", "-d", &bad]);
    std::fs::write(repo.join(".git/info/grafts"), format!("{bad}\n")).unwrap();
    found("info/grafts");
    // Control: a real shallow clone (its parents missing) still checks.
    let shallow = tmp.path().join("shallow");
    let url = format!("file://{}", repo.display());
    git(
        tmp.path(),
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
    let o = verify(&shallow, &[]);
    assert_eq!(o.status.code(), Some(0), "shallow clone: {}", text(&o));
}
