//! The last routes by which the user's own git on the host ran what the
//! agent wrote in a bind-mode sandbox (issue 36): a nested repository
//! the index names as a submodule, and a rebase left half done. The
//! agent attacks inside a real sandbox; then the user's plain command runs
//! on the host as root, and a canary outside the repository is checked.

use std::path::Path;
use std::process::Command;

use sbx_e2e::{Repo, base_image, fsmonitor_lines as fsmonitor, started_repo, text};

/// The user's plain `git ARGS` in `dir`, as root on the host.
fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// Route 36-1: a gitlink in the index whose work-tree directory is a
/// repository the agent made. The user's plain `git status` (and `git
/// diff`) on the host runs `git status` inside each populated submodule,
/// which reads that repository's config: a `core.fsmonitor` there ran as
/// root. The agent made the repository with `git init`, by hand with a
/// `.git` file naming a git dir elsewhere in the work tree, or as a new
/// git dir under `.git/modules` (none of them held read-only); it put the
/// gitlink in the index before or after. The guest now refuses a gitlink
/// whose `.git` is not a git dir the host holds read-only.
#[test]
fn a_nested_repository_in_the_index_never_runs_on_the_hosts_status() {
    if !base_image() {
        return;
    }
    // (name, the agent's script making `sub` a repository with the
    // config in $EVIL, and the gitlink). The broker refuses `git init`
    // under `.git`: `gitdir DIR` makes one by hand.
    let gitlink = "git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),sub";
    let cases = [
        (
            "init",
            format!("git init -q sub && printf \"$EVIL\" >> sub/.git/config && {gitlink}"),
        ),
        (
            "gitfile after the gitlink",
            format!(
                "mkdir sub && {gitlink} && sleep 1 && gitdir .hide/g && echo 'gitdir: ../.hide/g' > sub/.git"
            ),
        ),
        (
            "new dir under .git/modules",
            format!(
                "gitdir .git/modules/evil && \
                 printf 'gitdir: ../.git/modules/evil\\n' > g && mkdir sub && mv g sub/.git && {gitlink}"
            ),
        ),
    ];
    let mut ran = Vec::new();
    for (name, script) in cases {
        let repo = started_repo("nest");
        let canary = repo.root().join("canary");
        let o = repo.exec(&format!(
            "cd /workspace/nest; EVIL='{}'; \
             gitdir() {{ mkdir -p $1/objects $1/refs && echo 'ref: refs/heads/x' > $1/HEAD && printf \"$EVIL\" > $1/config; }}; \
             {script}; echo \"attack: $?\"; sleep 1",
            fsmonitor(&canary)
        ));
        let s = git(&repo.path, &["status"]);
        let d = git(&repo.path, &["diff"]);
        if canary.exists() {
            ran.push(format!(
                "{name}: agent {} / status {} / diff {}",
                text(&o),
                text(&s),
                text(&d)
            ));
        }
    }
    assert!(
        ran.is_empty(),
        "the user's git status ran the agent's submodule fsmonitor: {ran:#?}"
    );
}

/// The check above leaves a submodule the user added alone: its git dir
/// under `.git/modules` is held read-only from the start, so the agent
/// works in it, and stages and commits it, without being stopped. A
/// `git submodule add` in the sandbox (which could not register the
/// submodule in the held `.git/config` anyway) is refused by the broker
/// before it makes a git dir, so the agent is not ended for it.
#[test]
fn a_submodule_the_user_added_keeps_working() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("top");
    let lib = repo.root().join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    let lib_git = |args: &[&str]| {
        sbx_e2e::sh(
            Command::new("git")
                .args(["-c", "user.name=a", "-c", "user.email=a@b"])
                .args(args)
                .current_dir(&lib),
        )
    };
    lib_git(&["init", "-q", "-b", "main"]);
    std::fs::write(lib.join("f"), "1\n").unwrap();
    lib_git(&["add", "f"]);
    lib_git(&["commit", "-qm", "lib"]);
    repo.git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
    repo.git(&[
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        "-q",
        lib.to_str().unwrap(),
        "lib",
    ]);
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "base"]);
    repo.start();
    let o = repo.agent(
        "cd /workspace/top/lib && echo 2 >> f && git add f && git commit -qm two && cd .. && \
         git add lib && git commit -qm bump && git status --short; echo \"agent: $?\"; \
         rm -rf /tmp/s2 && git init -q /tmp/s2 && git -C /tmp/s2 commit -q --allow-empty -m s && \
         git -c protocol.file.allow=always submodule add -q /tmp/s2 s2; echo \"add: $?\"; sleep 1",
    );
    let again = repo.exec("echo alive");
    let s = git(&repo.path, &["status", "--short"]);
    assert!(text(&o).contains("agent: 0"), "{}", text(&o));
    assert!(
        text(&o).contains("add: 77") && text(&o).contains("blocked (git-dir)"),
        "{}",
        text(&o)
    );
    assert!(!repo.path.join(".git/modules/s2").exists(), "{}", text(&o));
    assert!(
        text(&again).contains("alive"),
        "{} / {}",
        text(&o),
        text(&again)
    );
    assert!(
        !repo.path.join(".git/index.sbx-refused").exists(),
        "{}",
        text(&o)
    );
    assert!(
        s.status.success() && text(&s).trim().is_empty(),
        "{}",
        text(&s)
    );
}

/// Route 36-2: a rebase the sandbox left half done. `.git/rebase-merge/`
/// is the agent's to write (git needs it), and the user's `git rebase
/// --continue` on the host runs what the rest of its todo list says: an
/// `exec` line as a shell command, and for a `pick`, a merge strategy
/// that is not git's own as `git-merge-NAME` (a program in the work tree
/// when NAME holds `/`). The broker refuses `--exec` and such strategies,
/// so the agent wrote them by hand; the guest now moves such a file aside
/// and ends the agent.
#[test]
fn a_rebase_left_half_done_never_runs_the_agents_commands_on_the_host() {
    if !base_image() {
        return;
    }
    let cases = [
        (
            "exec line",
            "printf 'exec touch %s\\n' \"$C\" >> .git/rebase-merge/git-rebase-todo",
        ),
        (
            "strategy",
            "mkdir -p git-merge-../x && printf '#!/bin/sh\\ntouch %s\\nexit 1\\n' \"$C\" > git-merge-../x/evil && \
             chmod +x git-merge-../x/evil && printf '../x/evil\\n' > .git/rebase-merge/strategy",
        ),
    ];
    let mut ran = Vec::new();
    for (name, attack) in cases {
        let repo = Repo::new("reb");
        repo.git(&["init", "-q", "-b", "main"]);
        std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-qm", "base"]);
        for n in ["1", "2"] {
            std::fs::write(repo.path.join(n), n).unwrap();
            repo.git(&["add", n]);
            repo.git(&["commit", "-qm", n]);
        }
        repo.start();
        let canary = repo.root().join("canary");
        let o = repo.agent(&format!(
            "cd /workspace/reb && C={}; \
             GIT_SEQUENCE_EDITOR='sed -i 1s/^pick/edit/' git rebase -q -i HEAD~2; echo \"rebase: $?\"; \
             git commit -q --amend -m 1b; \
             {attack}; echo \"attack: $?\"; cat .git/rebase-merge/git-rebase-todo; sleep 1",
            canary.display()
        ));
        let c = Command::new("git")
            .args([
                "-c",
                "user.name=u",
                "-c",
                "user.email=u@h",
                "rebase",
                "--continue",
            ])
            .env("GIT_EDITOR", "true")
            .current_dir(&repo.path)
            .output()
            .unwrap();
        if canary.exists() {
            ran.push(format!(
                "{name}: agent {} / continue {}",
                text(&o),
                text(&c)
            ));
        }
        assert!(text(&o).contains("rebase: 0"), "{name}: {}", text(&o));
    }
    assert!(
        ran.is_empty(),
        "the user's git rebase --continue ran the agent's command: {ran:#?}"
    );
}

/// The agent's index writer for route 36-3 (after `PY_INDEX_LIB`): an
/// index of 20000 plain entries whose offset table (`IEOT`, with a
/// valid `EOIE`) points its last block at one more entry NAME hidden in
/// an optional extension, where a sequential read never looks.
const HIDDEN_ENTRY_INDEX: &str = r#"
N = 20000
body = b'DIRC' + struct.pack('>II', 2, N)
offs = []
for i in range(N):
    offs.append(len(body))
    body += ent(b'f/%05d' % i, sha)
ext_at = len(body)
hidden = ent(name, sha)
zz = b'ZZZZ' + struct.pack('>I', len(hidden)) + hidden
ieot_body = struct.pack('>I', 1) + struct.pack('>II', offs[0], N - 1) + struct.pack('>II', ext_at + 8, 1)
ieot = b'IEOT' + struct.pack('>I', len(ieot_body)) + ieot_body
h = hashlib.sha1(b'ZZZZ' + struct.pack('>I', len(hidden)) + b'IEOT' + struct.pack('>I', len(ieot_body))).digest()
eoie_body = struct.pack('>I', ext_at) + h
put(body + zz + ieot + b'EOIE' + struct.pack('>I', len(eoie_body)) + eoie_body)
"#;

/// Route 36-3: names inside the index's extensions. git reads the
/// entries with several threads when the index has an offset table
/// (`IEOT`) and `index.threads` allows three or more (the default on a
/// machine with 3 cores and 30000 entries; set here, as this one has
/// 2): each thread starts at an offset the table gives. The agent's
/// table pointed a block at an entry `../canary` hidden in an extension,
/// which the guest's check (reading entries in order) never saw, and the
/// user's `git checkout-index -a -f` wrote the agent's bytes outside the
/// checkout. The guest now refuses a table (or an end-of-entries mark)
/// that does not point where its own read found the entries.
#[test]
fn an_index_offset_table_never_hides_an_entry() {
    if !base_image() {
        return;
    }
    let repo = started_repo("ieot");
    let canary = repo.root().join("canary");
    std::fs::write(
        repo.path.join(".evil-index.py"),
        format!("{}{HIDDEN_ENTRY_INDEX}", sbx_e2e::PY_INDEX_LIB),
    )
    .unwrap();
    let o = repo.exec(
        "cd /workspace/ieot && python3 .evil-index.py ../canary PWNED; echo \"index: $?\"; \
         rm -f .evil-index.py; sleep 1",
    );
    let mut outs = Vec::new();
    for args in [&["checkout-index", "-a", "-f"][..], &["restore", "."]] {
        outs.push(text(&git(
            &repo.path,
            &[&["-c", "index.threads=3"][..], args].concat(),
        )));
    }
    assert!(
        !canary.exists(),
        "the user's git wrote an entry hidden behind the agent's offset table: agent {} / git {outs:?}",
        text(&o)
    );
    // The guest ends the agent's processes when it refuses the index,
    // often before the shell's echo: the index moved aside is the proof.
    assert!(
        repo.path.join(".git/index.sbx-refused").is_file(),
        "the guest never refused the agent's index: {}",
        text(&o)
    );
}
