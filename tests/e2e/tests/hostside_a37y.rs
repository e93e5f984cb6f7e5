//! A fresh attack on the host boundary (a37y): what the agent in a real
//! bind-mode sandbox writes, then what the user does on the host as the
//! README says (their own plain `git status` in the checkout).

use std::path::Path;
use std::process::Command;

use sbx_e2e::{Repo, base_image, fsmonitor_lines as fsmonitor, started_repo, text};

/// The user's plain `git status` in `dir`, as root on the host.
fn status(dir: &Path) -> std::process::Output {
    Command::new("git")
        .arg("status")
        .current_dir(dir)
        .output()
        .unwrap()
}

/// Route a37y-1: the repository's `.git/config` includes a file of the
/// work tree (`include.path = ../.gitconfig`, how projects share their git
/// settings; or a git-ignored `../.gitconfig.local`, or one under `.git`
/// itself). `.git/config` is read-only in the sandbox, but the files it
/// includes were ordinary files the agent wrote: a `core.fsmonitor` there
/// ran on the user's next plain `git status` on the host, as root. Each
/// included file inside the workspace is now held read-only as `.git/config`
/// is, made empty when missing (git reads a missing include as empty).
#[test]
fn a_file_the_repositorys_config_includes_is_not_the_agents() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("incl");
    repo.git(&["init", "-q", "-b", "main"]);
    std::fs::write(
        repo.path.join(".gitignore"),
        "/.agent-sandbox/\n/.gitconfig.local\n",
    )
    .unwrap();
    std::fs::write(repo.path.join(".gitconfig"), "[color]\n\tui = auto\n").unwrap();
    std::fs::create_dir_all(repo.path.join("conf/git")).unwrap();
    std::fs::write(repo.path.join("conf/git/shared"), "").unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "base"]);
    // Present and tracked; present, nested and reached through a
    // conditional include; missing and ignored; under `.git`.
    repo.git(&["config", "include.path", "../.gitconfig"]);
    repo.git(&["config", "--add", "include.path", "../.gitconfig.local"]);
    repo.git(&["config", "includeIf.gitdir:/.path", "../conf/git/shared"]);
    repo.git(&["config", "--add", "include.path", "config.local"]);
    std::fs::write(repo.path.join(".git/config.local"), "").unwrap();
    repo.start();
    let canary = repo.root().join("canary");
    let evil = fsmonitor(&canary);
    let o = repo.exec(&format!(
        "cd /workspace/incl; for f in .gitconfig .gitconfig.local conf/git/shared .git/config.local; do \
           printf '{evil}' >> $f; echo \"$f: $?\"; done; \
         mv conf c2 && mkdir -p conf/git && printf '{evil}' > conf/git/shared; \
         mv .gitconfig g2 && printf '{evil}' > .gitconfig; \
         cat .gitconfig .gitconfig.local conf/git/shared"
    ));
    let s = status(&repo.path);
    assert!(
        !canary.exists(),
        "the user's git status ran the agent's fsmonitor: agent {} / status {}",
        text(&o),
        text(&s)
    );
    assert!(s.status.success(), "the user's git status: {}", text(&s));
    let body = std::fs::read_to_string(repo.path.join(".gitconfig")).unwrap();
    assert_eq!(body, "[color]\n\tui = auto\n", "{}", text(&o));
}

/// Route a37y-2: the workspace is a linked worktree (`git worktree add
/// ../feature`, then `sbx-run` there), whose `.git` is a file naming its
/// git dir. Nothing held it: the agent rewrote it to `gitdir: .evil`, a
/// git dir of its own whose config has a `core.fsmonitor`, and the user's
/// next plain `git status` in the worktree ran it as root. A `.git` file
/// is now held read-only.
#[test]
fn a_worktrees_git_file_is_not_the_agents() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("main");
    repo.git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n/.evil/\n").unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "base"]);
    let wt = repo.root().join("feature");
    repo.git(&[
        "worktree",
        "add",
        "-q",
        "-b",
        "feature",
        wt.to_str().unwrap(),
    ]);
    let before = std::fs::read(wt.join(".git")).unwrap();
    for args in [&["-q", "init"][..], &["start"][..]] {
        let o = sbx_e2e::sbx().args(args).arg(&wt).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    let canary = repo.root().join("canary");
    let evil = fsmonitor(&canary);
    let o = sbx_e2e::sbx()
        .args(["exec", "-C"])
        .arg(&wt)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "cd /workspace/feature; mkdir -p .evil/objects .evil/refs && \
             echo 'ref: refs/heads/x' > .evil/HEAD && printf '{evil}' > .evil/config; \
             echo 'gitdir: .evil' > .git; echo \"write: $?\"; \
             mv .git g2; echo \"mv: $?\"; echo 'gitdir: .evil' > .git; cat .git"
        ))
        .output()
        .unwrap();
    let s = status(&wt);
    let _ = sbx_e2e::sbx()
        .args(["-q", "rm", "--volumes"])
        .arg(&wt)
        .output();
    assert!(
        !canary.exists(),
        "the user's git status ran the agent's fsmonitor: agent {} / status {}",
        text(&o),
        text(&s)
    );
    assert_eq!(
        std::fs::read(wt.join(".git")).unwrap(),
        before,
        "{}",
        text(&o)
    );
}

/// The agent's index writer (after `PY_INDEX_LIB`): an index of HEAD's
/// tree plus an entry NAME for the blob holding TEXT
/// (git's own commands refuse such a name; the index file is the agent's
/// to write in bind mode, as git's staging area).
const EVIL_INDEX: &str = r#"
ents = [(name, sha)]
for line in subprocess.check_output(['git', 'ls-tree', '-r', 'HEAD']).decode().splitlines():
    meta, path = line.split('\t', 1)
    ents.append((path.encode(), meta.split()[2]))
ents.sort()
put(b'DIRC' + struct.pack('>II', 2, len(ents)) + b''.join(ent(n, s) for n, s in ents))
"#;

/// Route a37y-3: the index is the agent's to write in bind mode (git's
/// staging area), and the host's git writes what an index entry names
/// without checking the name: an entry `../canary` (git's own commands
/// refuse it; the agent wrote the file by hand) and the user's `git
/// restore .` or `git checkout -- .` on the host, to throw away the
/// agent's changes, wrote the agent's bytes outside the checkout as root
/// (`../../../../root/.bashrc` reaches any file). The guest's watcher
/// now checks every index written under `.git`: one with such a name has
/// the agent's processes killed and is moved aside.
#[test]
fn an_index_entry_never_writes_outside_the_checkout() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("idx");
    repo.git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
    std::fs::write(repo.path.join("a"), "1\n").unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "base"]);
    repo.start();
    let canary = repo.root().join("canary");
    std::fs::write(
        repo.path.join(".evil-index.py"),
        format!("{}{EVIL_INDEX}", sbx_e2e::PY_INDEX_LIB),
    )
    .unwrap();
    let o = repo.exec(
        "cd /workspace/idx && python3 .evil-index.py ../canary PWNED && rm .evil-index.py; \
         echo \"index: $?\"; sleep 1",
    );
    let mut outs = Vec::new();
    for args in [
        &["restore", "."][..],
        &["checkout", "--", "."],
        &["checkout-index", "-a", "-f"],
    ] {
        outs.push(text(
            &Command::new("git")
                .args(args)
                .current_dir(&repo.path)
                .output()
                .unwrap(),
        ));
    }
    assert!(
        !canary.exists(),
        "the user's git wrote the agent's index entry outside the checkout: agent {} / git {outs:?}",
        text(&o)
    );
    // The guest moved it aside (and ended the agent's processes).
    assert!(
        repo.path.join(".git/index.sbx-refused").is_file(),
        "{}",
        text(&o)
    );
}

/// Route a37y-4: a symlink the agent makes under `.git`, which the host's
/// git follows. `.git/worktrees` (missing in most repositories) made a
/// link to a host directory: the user's `git gc` (or `git worktree
/// prune`) took each entry there for a worktree's admin dir without a
/// `gitdir` and deleted it, recursively, as root. The guest now removes a
/// link made under `.git` and ends the agent's processes.
#[test]
fn a_link_under_git_never_has_the_hosts_gc_delete_host_files() {
    if !base_image() {
        return;
    }
    let repo = started_repo("wtlink");
    let victim = repo.root().join("victim");
    std::fs::create_dir_all(victim.join("sub")).unwrap();
    std::fs::write(victim.join("precious"), "keep\n").unwrap();
    std::fs::write(victim.join("sub/f"), "keep\n").unwrap();
    let o = repo.exec(&format!(
        "cd /workspace/wtlink && ln -s {} .git/worktrees; echo \"link: $?\"; sleep 1",
        victim.display()
    ));
    let g = Command::new("git")
        .args(["gc", "-q"])
        .current_dir(&repo.path)
        .output()
        .unwrap();
    let p = Command::new("git")
        .args(["worktree", "prune", "-v"])
        .current_dir(&repo.path)
        .output()
        .unwrap();
    assert!(
        victim.join("precious").is_file() && victim.join("sub/f").is_file(),
        "the user's git gc deleted host files through the agent's link: agent {} / gc {} / prune {}",
        text(&o),
        text(&g),
        text(&p)
    );
}

/// Route a37y-4, the reflog: `.git/logs/HEAD` made a link to a host file
/// (`/root/.bashrc`), and every ref update of the user's git on the host
/// appended a line to it, with a branch name the agent chose
/// (`checkout: moving from main to x$(cmd)` runs at the next login).
#[test]
fn a_link_under_git_never_has_the_hosts_reflog_append_to_host_files() {
    if !base_image() {
        return;
    }
    let repo = started_repo("loglink");
    let rc = repo.root().join("bashrc");
    std::fs::write(&rc, "# rc\n").unwrap();
    let o = repo.exec(&format!(
        "cd /workspace/loglink && rm -f .git/logs/HEAD && ln -s {} .git/logs/HEAD; \
         echo \"link: $?\"; sleep 1",
        rc.display()
    ));
    let c = Command::new("git")
        .args(["-c", "user.name=u", "-c", "user.email=u@example.invalid"])
        .args(["commit", "-q", "--allow-empty", "-m", "user"])
        .current_dir(&repo.path)
        .output()
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(&rc).unwrap(),
        "# rc\n",
        "the user's commit appended to a host file through the agent's link: agent {} / commit {}",
        text(&o),
        text(&c)
    );
}

/// Route a37y-5: a FIFO the agent makes under `.git` (`packed-refs`,
/// read by every ref lookup): the user's `git status` and `sbx-run
/// start`'s own reading of git's objects hung on it forever. The guest
/// removes it as it removes a link.
#[test]
fn a_fifo_under_git_never_hangs_the_hosts_git() {
    if !base_image() {
        return;
    }
    let repo = started_repo("fifo");
    let o = repo.exec("cd /workspace/fifo && mkfifo .git/packed-refs; echo \"fifo: $?\"; sleep 1");
    let s = Command::new("timeout")
        .args(["20", "git", "status"])
        .current_dir(&repo.path)
        .output()
        .unwrap();
    assert!(
        s.status.success(),
        "the user's git status hung on the agent's FIFO: agent {} / status {}",
        text(&o),
        text(&s)
    );
}
