//! The host's own git never runs a program the agent wrote into `.git`
//! (issue 36): from inside a real sandbox, as the agent, each class of key
//! git runs a program from is written into every file the host's git reads
//! configuration or hooks from (`.git/config`, `config.worktree`,
//! `info/attributes`, a submodule's config and hooks, a linked worktree's
//! admin files), directly, through git, and by renaming the file or a
//! parent away; then the user's plain `git status`, `log -p` (in a
//! terminal, for the pager), `diff`, `fetch`, `push` and `commit` run on
//! the host, in the checkout, its submodule and its linked worktree, and a
//! canary outside the repository must not appear.

use std::path::{Path, PathBuf};
use std::process::Command;

use sbx_e2e::{Repo, attack_repo, started, text};

/// The files whose bytes the host's git reads as configuration or code.
const WATCHED: &[&str] = &[
    ".git/config",
    ".git/config.worktree",
    ".git/info/attributes",
    ".git/modules/sub/config",
    ".git/modules/sub/hooks/pre-commit",
    ".git/worktrees/wt/config.worktree",
    ".git/worktrees/wt/commondir",
    // Not the agent's either (its work tree is not in the sandbox).
    ".git/worktrees/wt/HEAD",
];

fn repo() -> Repo {
    let repo = attack_repo("hostcfg", &["-qm", "one"], &["/evil*"], &[]);
    let git = |args: &[&str]| repo.git(args);
    let remote = repo.path.join("remote.git");
    let remote = remote.to_str().unwrap();
    // attack_repo's origin is the sandbox's path: the host's own here.
    git(&["remote", "set-url", "origin", remote]);
    git(&["fetch", "-q", "origin"]);
    git(&["branch", "-q", "--set-upstream-to", "origin/main"]);
    // config.worktree is read only with this extension.
    git(&["config", "core.repositoryFormatVersion", "1"]);
    git(&["config", "extensions.worktreeConfig", "true"]);
    git(&[
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        "-q",
        "-b",
        "main",
        remote,
        "sub",
    ]);
    git(&["commit", "-qm", "sub"]);
    let wt = repo.root().join("wt");
    git(&["worktree", "add", "-q", "-b", "wt", wt.to_str().unwrap()]);
    // Root's, as the README has a new user work: the sandbox gets an
    // idmapped view, and the host's git here, as root, trusts the checkout
    // (one given to uid 1000 it would refuse outright, as dubious).
    repo
}

/// Every key class git runs a program from, as `.git/config` lines, with
/// `@P@` for the program.
fn classes() -> Vec<(&'static str, &'static str)> {
    vec![
        ("fsmonitor", "[core]\n\tfsmonitor = @P@\n"),
        (
            "pager, diff.external, textconv",
            "[core]\n\tpager = @P@\n[pager]\n\tlog = @P@\n[diff]\n\texternal = @P@\n[diff \"x\"]\n\ttextconv = @P@\n",
        ),
        (
            "filter and merge driver",
            "[filter \"x\"]\n\tclean = @P@\n\tsmudge = @P@\n\tprocess = @P@\n[merge \"x\"]\n\tdriver = @P@\n",
        ),
        ("alias", "[alias]\n\tst = !@P@\n\tlg = !@P@\n"),
        (
            "include, includeIf",
            "[include]\n\tpath = ../evil.cfg\n[includeIf \"gitdir:/\"]\n\tpath = ../evil.cfg\n",
        ),
        ("hooksPath", "[core]\n\thooksPath = evilhooks\n"),
        (
            "credential helper, sshCommand",
            "[credential]\n\thelper = !@P@\n[core]\n\tsshCommand = @P@\n[remote \"origin\"]\n\tuploadpack = @P@\n\treceivepack = @P@\n",
        ),
    ]
}

/// The agent's ways to get `lines` into `file` (a config file of a git
/// dir): append, through git, replace by rename, rename the file or its
/// directories away and write a fresh one.
fn attack_config(file: &str, lines: &str) -> String {
    let dir = Path::new(file).parent().unwrap().to_str().unwrap();
    format!(
        "L='{lines}'\n\
         printf '%s' \"$L\" >> {file}\n\
         git config -f {file} core.fsmonitor \"$P\"\n\
         cp {file} /tmp/c 2>/dev/null; printf '%s' \"$L\" >> /tmp/c; mv -f /tmp/c {file}\n\
         mv {file} {file}.old && printf '%s' \"$L\" > {file}\n\
         rm -f {file}; printf '%s' \"$L\" > {file}\n\
         mv {dir} {dir}.old && mkdir -p {dir} && cp -r {dir}.old/. {dir}/ && printf '%s' \"$L\" >> {file}\n\
         true\n"
    )
}

/// The user's plain git on the host: in the checkout, its submodule and
/// its linked worktree.
fn host_git(repo: &Repo) -> String {
    let mut out = String::new();
    // A change for diff, the filters and commit -a to see.
    let a = repo.path.join("a");
    let mut text_a = std::fs::read_to_string(&a).unwrap_or_default();
    text_a.push_str("host\n");
    std::fs::write(&a, text_a).unwrap();
    let wt = repo.root().join("wt");
    let runs: Vec<(PathBuf, Vec<&str>)> = vec![
        (repo.path.clone(), vec!["status"]),
        (repo.path.clone(), vec!["diff"]),
        (repo.path.clone(), vec!["log", "-p", "-1"]),
        (repo.path.clone(), vec!["fetch", "origin"]),
        (repo.path.clone(), vec!["push", "origin", "main"]),
        (repo.path.clone(), vec!["commit", "-qam", "host"]),
        (repo.path.clone(), vec!["st"]),
        (repo.path.join("sub"), vec!["status"]),
        (
            repo.path.join("sub"),
            vec!["commit", "-q", "--allow-empty", "-m", "h"],
        ),
        (wt.clone(), vec!["status"]),
        (wt, vec!["commit", "-q", "--allow-empty", "-m", "h"]),
    ];
    for (dir, args) in runs {
        let o = Command::new("git")
            .env("GIT_AUTHOR_NAME", "u")
            .env("GIT_AUTHOR_EMAIL", "u@h")
            .env("GIT_COMMITTER_NAME", "u")
            .env("GIT_COMMITTER_EMAIL", "u@h")
            .args(&args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let t = text(&o);
        // The user's git works here (not refused as dubious ownership).
        assert!(
            !t.contains("dubious ownership") && !t.contains("not a git repository"),
            "host git {args:?} in {}: {t}",
            dir.display()
        );
        out.push_str(&format!("git {args:?} in {}: {t}\n", dir.display()));
    }
    // In a terminal, so git starts its pager.
    let o = Command::new("script")
        .args(["-qec", "git log -p -1; git diff HEAD~1", "/dev/null"])
        .current_dir(&repo.path)
        .output()
        .unwrap();
    out.push_str(&text(&o));
    out
}

fn snapshot(repo: &Repo) -> Vec<Option<Vec<u8>>> {
    WATCHED
        .iter()
        .map(|f| std::fs::read(repo.path.join(f)).ok())
        .collect()
}

/// Put the watched files back as they were, in place (a rename on the host
/// would replace the file the sandbox's read-only mount holds), and the
/// checkout at its commit.
fn restore(repo: &Repo, snap: &[Option<Vec<u8>>]) {
    for (f, bytes) in WATCHED.iter().zip(snap) {
        let p = repo.path.join(f);
        match bytes {
            Some(b) => {
                if std::fs::read(&p).ok().as_ref() != Some(b) {
                    let _ = std::fs::write(&p, b);
                }
            }
            None => {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
    let _ = Command::new("git")
        .args(["reset", "-q", "--hard", "origin/main"])
        .current_dir(&repo.path)
        .status();
}

#[test]
fn nothing_the_agent_writes_in_git_runs_on_the_host() {
    let Some(repo) = started(repo) else { return };
    let canary = repo.root().join("canary");
    let p = format!("touch {}", canary.display());
    // The agent's own files the attacks point at: an include, a hooks
    // directory, attributes naming the drivers.
    let o = repo.agent(&format!(
        "printf '[core]\\n\\tfsmonitor = {p}\\n' > evil.cfg && mkdir -p evilhooks && \
         printf '#!/bin/sh\\n{p}\\n' > evilhooks/pre-commit && chmod +x evilhooks/pre-commit && \
         printf '* diff=x filter=x merge=x\\n' > .gitattributes && echo 2 >> a"
    ));
    assert!(o.status.success(), "set-up: {}", text(&o));
    let before = snapshot(&repo);
    let mut through = Vec::new();
    let mut targets: Vec<(&str, String)> = Vec::new();
    for (class, lines) in classes() {
        let mut script = format!("P='{p}'\n");
        for file in [
            ".git/config",
            ".git/config.worktree",
            ".git/modules/sub/config",
            ".git/worktrees/wt/config.worktree",
        ] {
            script.push_str(&attack_config(file, &lines.replace("@P@", &p)));
        }
        targets.push((class, script));
    }
    targets.push((
        "info/attributes",
        "printf '* diff=x filter=x merge=x\\n' >> .git/info/attributes; \
         mv .git/info .git/info.old && mkdir .git/info && printf '* filter=x\\n' > .git/info/attributes; true"
            .to_owned(),
    ));
    targets.push((
        "submodule hooks",
        format!(
            "printf '#!/bin/sh\\n{p}\\n' > .git/modules/sub/hooks/pre-commit; chmod +x .git/modules/sub/hooks/pre-commit; \
             mv .git/modules/sub/hooks .git/modules/sub/h2 && mkdir .git/modules/sub/hooks && \
             printf '#!/bin/sh\\n{p}\\n' > .git/modules/sub/hooks/pre-commit && chmod +x .git/modules/sub/hooks/pre-commit; \
             mv .git/modules .git/m2 && cp -r .git/m2 .git/modules && \
             printf '[core]\\n\\tfsmonitor = {p}\\n' >> .git/modules/sub/config; true"
        ),
    ));
    targets.push((
        "linked worktree commondir",
        // A common dir of the agent's, whose config runs P.
        format!(
            "mkdir -p evilcommon && cp -r .git/objects .git/refs .git/HEAD evilcommon/ && \
             printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = {p}\\n' > evilcommon/config; \
             printf '../../../evilcommon\\n' > .git/worktrees/wt/commondir; \
             mv .git/worktrees/wt .git/worktrees/wt2 && cp -r .git/worktrees/wt2 .git/worktrees/wt && \
             printf '../../../evilcommon\\n' > .git/worktrees/wt/commondir; \
             git worktree prune; true"
        ),
    ));
    for (class, script) in targets {
        let o = repo.agent(&script);
        let host = host_git(&repo);
        let after = snapshot(&repo);
        let changed: Vec<&str> = WATCHED
            .iter()
            .zip(before.iter().zip(&after))
            .filter(|(_, (b, a))| b != a)
            .map(|(f, _)| *f)
            .collect();
        if canary.exists() || !changed.is_empty() {
            through.push(format!(
                "{class}: canary {}, changed {changed:?}\nagent: {}\nhost: {host}",
                canary.exists(),
                text(&o)
            ));
        }
        let _ = std::fs::remove_file(&canary);
        restore(&repo, &before);
        // The agent's renamed copies, if a rename got through.
        repo.agent(
            "rm -rf .git/info.old .git/m2 .git/modules/sub/h2 .git/worktrees/wt2 .git/*.old \
             .git/modules/sub/*.old .git/modules.old .git/modules/sub.old .git/worktrees/wt/*.old \
             .git/worktrees/wt.old evilcommon; true",
        );
    }
    assert!(
        through.is_empty(),
        "{} class(es) got through:\n{}",
        through.len(),
        through.join("\n")
    );
}

#[test]
fn the_agents_git_still_works_without_writing_config() {
    let Some(repo) = started(repo) else { return };
    // Everyday git that writes no configuration.
    let o = repo.agent(
        "echo 3 >> a && git add a && git commit -qm agent && git status --short && \
         git fetch -q ./remote.git main && git push -q ./remote.git HEAD:refs/heads/agent && git log --oneline -1",
    );
    assert!(o.status.success(), "agent's git: {}", text(&o));
    // Writing configuration fails (git's own line; `branch
    // --set-upstream-to` even exits 0) and leaves the host's file alone.
    let config = repo.path.join(".git/config");
    let before = std::fs::read(&config).unwrap();
    for cmd in [
        "git remote add other /tmp/x",
        "git config user.name agent",
        "git branch --set-upstream-to origin/main",
    ] {
        let o = repo.agent(cmd);
        let t = text(&o);
        assert!(
            t.contains("could not write config file"),
            "`{cmd}` did not say the config is read-only: {t}"
        );
        assert_eq!(
            std::fs::read(&config).unwrap(),
            before,
            "`{cmd}` wrote the host's config: {t}"
        );
    }
}

/// git on the host rewrites `.git/config` by renaming a new file over it,
/// and a rename from the host's mount namespace used to detach the
/// sandbox's read-only mount of that file: after the user's own `git
/// remote add`, the agent could write the config again. While a sandbox
/// runs the host's rename is refused instead (held there too), and once
/// it stops the host's git writes its config as before.
#[test]
#[ignore = "the host-side hold is opt-in (SBX_HOLD_GIT_ON_HOST): the host's own config rewrite lifts the pin until restart"]
fn the_hosts_own_config_write_does_not_lift_the_pin() {
    let Some(repo) = started(repo) else { return };
    let config = repo.path.join(".git/config");
    let canary = repo.root().join("canary");
    // The user's own git on the host, while the sandbox runs: it fails
    // (EBUSY) rather than lift the pin.
    let host = Command::new("git")
        .args(["remote", "add", "host-side", "/tmp/x"])
        .current_dir(&repo.path)
        .output()
        .unwrap();
    let before = std::fs::read_to_string(&config).unwrap();
    let o = repo.agent(&format!(
        "printf '[core]\\n\\tfsmonitor = touch {}\\n' >> .git/config; true",
        canary.display()
    ));
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        before,
        "the agent wrote .git/config after the host's git rewrote it: {}",
        text(&o)
    );
    let st = Command::new("git")
        .arg("status")
        .current_dir(&repo.path)
        .output()
        .unwrap();
    assert!(
        !canary.exists(),
        "the host's git status ran the agent's program: {}",
        text(&st)
    );
    assert!(
        text(&host).contains("could not write config file"),
        "host git remote add: {}",
        text(&host)
    );
    // Stopped: the host's git writes its configuration again.
    let o = sbx_e2e::sbx().arg("stop").arg(&repo.path).output().unwrap();
    assert!(o.status.success(), "stop: {}", text(&o));
    let o = Command::new("git")
        .args(["remote", "add", "after-stop", "/tmp/y"])
        .current_dir(&repo.path)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "host git config after stop: {}",
        text(&o)
    );
}
