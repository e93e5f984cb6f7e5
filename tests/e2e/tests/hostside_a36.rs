//! A fresh attack on issue 36 (a36): options an operation left half done
//! under `.git` hands to the host's git, which writes a file wherever
//! they name, and rerere's list of conflicted paths. The agent leaves the
//! state in a real bind-mode sandbox; then the user's plain `git am
//! --skip`, `git rebase --continue` or `git commit` runs on the host as
//! root, and files outside the repository are checked.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use sbx_e2e::{Repo, base_image, text};

/// A repository `name` with commits `base` (f = a), `1` and `2`, its
/// sandbox started.
fn repo(name: &str) -> Repo {
    let repo = Repo::new(name);
    repo.git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
    std::fs::write(repo.path.join("f"), "a\n").unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "base"]);
    for n in ["1", "2"] {
        std::fs::write(repo.path.join(n), n).unwrap();
        repo.git(&["add", n]);
        repo.git(&["commit", "-qm", n]);
    }
    repo.start();
    repo
}

/// Until `file` (the agent's last write) is gone, moved aside by the
/// guest, or two seconds have passed (the check off: it stays).
fn refused_or_timeout(file: &Path) {
    let t = Instant::now();
    while file.exists() && t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The user's plain `git ARGS` on the host, as root, with an identity and
/// no editor.
fn user_git(dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(["-c", "user.name=u", "-c", "user.email=u@h"])
        .args(args)
        .env("GIT_EDITOR", "true")
        .current_dir(dir)
        .output()
        .unwrap()
}

/// Route a36-1: `git am` keeps the options it passes to `git apply` in
/// `rebase-apply/apply-opt`, and the host's `git am --skip` (`--continue`,
/// or a plain `git am`, which resumes) parses them with `git apply`'s own
/// option table: `--build-fake-ancestor=FILE` had it write an index at
/// FILE, any path on the host, as root. The guest only looked for
/// `unsafe-paths` there (which `git am` ignores: it applies to the
/// index). It now allows only the options `git am` passes on.
///
/// Route a36-2: a rebase's `strategy` may be `resolve` (git's own), whose
/// `git-merge-resolve` hands the strategy options (`strategy_opts`) to
/// `git read-tree` unquoted: `--index-output=FILE` had the host's `git
/// rebase --continue` write an index at FILE. The guest did not read
/// `strategy_opts`; it now allows only the options git's strategies take,
/// with plain values.
///
/// Route a36-3: with `.git/rr-cache` present, the host's git runs rerere
/// after a plain `git commit` and reads `MERGE_RR`, whose paths it takes
/// as they are: a resolved one (no conflict markers) is copied into
/// `rr-cache` (any host file, read as root, for the agent to read), and
/// for a negative variant the recorded resolution is merged into it and
/// written back (a host file rewritten). The guest now refuses any entry
/// in `MERGE_RR` (one in the work tree could be a link).
///
/// Route a36-4: lazygit reads `.git/lazygit.yml` when it opens a
/// repository, and a pager named there ran as the user as soon as it
/// showed a diff (lazygit 0.66.2, by hand). `start` now holds that file
/// read-only (made empty when missing), as it holds `.git/config`; the
/// agent's write, removal and rename over it fail.
#[test]
fn a_half_done_operation_never_has_the_hosts_git_write_outside() {
    if !base_image() {
        return;
    }
    let mut wrote = Vec::new();
    // One sandbox per route (a refusal ends it), started side by side.
    let [am, reb, rr] = std::thread::scope(|s| {
        ["am", "reb", "rr"]
            .map(|n| s.spawn(move || repo(n)))
            .map(|h| h.join().unwrap())
    });

    // a36-4: lazygit's per-repository config, in the git dir. A pager
    // there ran the moment the user's lazygit showed a diff.
    let lg = am.path.join(".git/lazygit.yml");
    let o = am.agent(&format!(
        "cd /workspace/am/.git; \
         printf 'git:\\n  pagers:\\n    - pager: \"touch {}; cat\"\\n' > y; \
         cat y > lazygit.yml; mv lazygit.yml x; rm -f lazygit.yml; mv -f y lazygit.yml; \
         echo \"attack: $?\"",
        am.root().join("canary").display()
    ));
    if std::fs::read(&lg).map_or(true, |b| !b.is_empty()) {
        wrote.push(format!("lazygit.yml: agent {}", text(&o)));
    }

    // a36-1: an am stopped on a conflict, with a second patch to apply.
    let canary = am.root().join("canary");
    let o = am.agent(&format!(
        "cd /workspace/am && C={}; \
         echo b > f && git commit -qam b && git format-patch -q -1 -o /tmp/p && \
         git reset -q --hard HEAD~1 && echo c > f && git commit -qam c; \
         git am -q /tmp/p/*.patch; echo \"am: $?\"; \
         H=$(git rev-parse HEAD:f) && \
         printf 'From: a <a@b>\\nSubject: x\\n\\n---\\ndiff --git a/f b/f\\nindex %s..%s 100644\\n--- a/f\\n+++ b/f\\n@@ -1 +1 @@\\n-c\\n+d\\n' \
           $H $H > .git/rebase-apply/0002 && echo 2 > .git/rebase-apply/last && \
         printf \"'--build-fake-ancestor=%s'\" \"$C\" > .git/rebase-apply/apply-opt; echo \"attack: $?\"",
        canary.display()
    ));
    assert!(!text(&o).contains("am: 0"), "am: {}", text(&o));
    refused_or_timeout(&am.path.join(".git/rebase-apply/apply-opt"));
    let c = user_git(&am.path, &["am", "--skip"]);
    if canary.exists() {
        wrote.push(format!("am: agent {} / skip {}", text(&o), text(&c)));
    }

    // a36-2: an interactive rebase stopped at an edit, the next pick no
    // fast-forward, with git's own `resolve` strategy.
    let canary = reb.root().join("canary");
    let o = reb.agent(&format!(
        "cd /workspace/reb && C={}; \
         GIT_SEQUENCE_EDITOR='sed -i 1s/^pick/edit/' git rebase -q -i HEAD~2; echo \"rebase: $?\"; \
         git commit -q --amend -m 1b; echo resolve > .git/rebase-merge/strategy && \
         echo \" --index-output=$C\" > .git/rebase-merge/strategy_opts; echo \"attack: $?\"",
        canary.display()
    ));
    assert!(text(&o).contains("rebase: 0"), "rebase: {}", text(&o));
    refused_or_timeout(&reb.path.join(".git/rebase-merge/strategy_opts"));
    let c = user_git(&reb.path, &["rebase", "--continue"]);
    if canary.exists() {
        wrote.push(format!(
            "rebase: agent {} / continue {}",
            text(&o),
            text(&c)
        ));
    }

    // a36-3: rerere's MERGE_RR, read by the user's next plain commit.
    let (target, secret) = (rr.root().join("bashrc"), rr.root().join("secret"));
    std::fs::write(&target, "x\n").unwrap();
    std::fs::write(&secret, "TOPSECRET\n").unwrap();
    let (w, r) = ("1".repeat(40), "a".repeat(40));
    let o = rr.agent(&format!(
        "cd /workspace/rr/.git && mkdir -p rr-cache/{w} rr-cache/{r} && \
         echo x > rr-cache/{w}/preimage && echo pwned > rr-cache/{w}/postimage && \
         printf '{w}.-1\\t%s\\0{r}\\t%s\\0' {} {} > MERGE_RR; echo \"attack: $?\"",
        target.display(),
        secret.display()
    ));
    refused_or_timeout(&rr.path.join(".git/MERGE_RR"));
    std::fs::write(rr.path.join("f"), "b\n").unwrap();
    let c = user_git(&rr.path, &["commit", "-qam", "b"]);
    let leaked = std::fs::read(rr.path.join(".git/rr-cache").join(&r).join("postimage"))
        .is_ok_and(|b| b.starts_with(b"TOPSECRET"));
    if leaked || std::fs::read(&target).unwrap() != b"x\n" {
        wrote.push(format!(
            "rerere (leaked {leaked}): agent {} / commit {}",
            text(&o),
            text(&c)
        ));
    }

    assert!(
        wrote.is_empty(),
        "the user's git wrote where the agent's state said: {wrote:#?}"
    );
}
