//! A fresh attack on the host boundary (a37b): what the agent in a real
//! sandbox writes, then what the user does on the host as the README
//! says (`restart`, `verify-commits`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use sbx_e2e::{Repo, base_image, sbx, sh, text};

fn run(repo: &Repo, args: &[&str]) -> Output {
    sbx().args(args).arg("-C").arg(&repo.path).output().unwrap()
}

fn write_exec(p: &Path, body: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

const LINT_BAD: &str = "#!/bin/sh\nif git diff --cached --name-only | grep -qx bad; then echo 'lint: bad file staged' >&2; exit 3; fi\n";

/// A repository whose hooks are tracked in `.githooks`
/// (`core.hooksPath = .githooks`, as many projects set it), its main
/// pushed to a bare remote beside it, the whole tree the agent's (uid
/// 1000), sandbox started.
fn githooks_repo() -> Repo {
    let repo = Repo::new("ws");
    repo.git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.path.join("a"), "1\n").unwrap();
    std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
    write_exec(&repo.path.join(".githooks/pre-commit"), LINT_BAD);
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "base"]);
    repo.git(&["config", "core.hooksPath", ".githooks"]);
    let remote = repo.root().join("remote.git");
    sh(Command::new("git")
        .args(["init", "-q", "--bare", "-b", "main"])
        .arg(&remote));
    repo.git(&["remote", "add", "origin", remote.to_str().unwrap()]);
    repo.git(&["push", "-q", "-u", "origin", "main"]);
    repo.give_to_agent();
    repo.start();
    repo
}

/// Route a37b-1: `core.hooksPath` names a directory of the work tree
/// (`.githooks`). `start` records its hooks for `verify-commits`, but the
/// directory was the agent's to write: the agent rewrote
/// `.githooks/pre-commit` to `exit 0`, and at the user's next `restart`
/// (or `rm` + `start`, a `--branch` start) that became the trusted hook,
/// so `verify-commits` passed a commit the real hook refuses. The
/// recorded work-tree hooks directory is now held read-only in the
/// sandbox, like `.husky`.
#[test]
fn the_agent_cannot_rewrite_the_hooks_verify_commits_trusts() {
    if !base_image() {
        return;
    }
    let repo = githooks_repo();
    let o = repo.agent(
        "cd /workspace/ws && echo x > bad && git add bad && \
         git commit -q -m 'skipped the hook'; \
         printf '#!/bin/sh\\nexit 0\\n' > .githooks/pre-commit; \
         cat .githooks/pre-commit",
    );
    // The sandbox's git runs the hooks of `.git/hooks` (empty here), not
    // `.githooks`: the commit lands, and only the boundary check sees it.
    assert!(o.status.success(), "the agent's commit: {}", text(&o));
    let o = run(&repo, &["-q", "restart"]);
    assert!(o.status.success(), "restart: {}", text(&o));
    let o = sbx()
        .arg("verify-commits")
        .arg(&repo.path)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("skipped the hook: pre-commit exited 3"),
        "{}",
        text(&o)
    );
    let hook = std::fs::read_to_string(repo.path.join(".githooks/pre-commit")).unwrap();
    assert_eq!(hook, LINT_BAD, "the agent rewrote the hook: {}", text(&o));
}

/// Route a37b-1, the link variant: the agent replaces the work-tree hooks
/// directory with a link to a host directory; `start` read the host's
/// files there into the record (then into the clean room) as hooks.
#[test]
fn the_hooks_record_follows_no_agent_link() {
    if !base_image() {
        return;
    }
    let repo = githooks_repo();
    // The user's secret directory outside the workspace.
    let secret = repo.root().join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(secret.join("id_ed25519"), "SECRET-KEY\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Done on the host as the agent would (the directory is read-only in
    // the sandbox now): the link in place while the sandbox is down.
    let o = run(&repo, &["-q", "stop"]);
    assert!(o.status.success(), "stop: {}", text(&o));
    std::fs::remove_dir_all(repo.path.join(".githooks")).unwrap();
    std::os::unix::fs::symlink(&secret, repo.path.join(".githooks")).unwrap();
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(&std::env::var_os("HOME").unwrap()).join(".local/state"));
    let top = repo.path.canonicalize().unwrap();
    let rec = sbx_run::verify::record::dir_in(&state.join("sbx"), &sbx_run::names::path_hash(&top));
    let o = run(&repo, &["-q", "start"]);
    // The link is refused (a protected path), and the record never holds
    // the host's file.
    assert!(!o.status.success(), "start took the link: {}", text(&o));
    assert!(
        !rec.join("hooks/id_ed25519").exists(),
        "the host's file was recorded as a hook: {}",
        text(&o)
    );
}

/// Route a37b-2: `.git/commondir`, missing in a plain checkout, was the
/// agent's to create. git reads it in any git dir and takes config, hooks
/// and refs from the directory it names: the agent copied `.git`'s refs
/// and objects into `evil/` beside a config holding a `core.fsmonitor`,
/// wrote `../evil` into `.git/commondir`, and the user's plain `git
/// status` on the host ran the agent's program. `start` now makes the
/// file naming the git dir itself (`.`), held read-only like `config`.
#[test]
fn the_agent_cannot_point_git_at_a_common_dir_of_its_own() {
    if !base_image() {
        return;
    }
    // Root's, as the README has a new user work (the host's git, as root,
    // trusts it; the sandbox gets an idmapped view).
    let repo = sbx_e2e::attack_repo("cd", &["-qm", "one"], &["/evil/"], &[]);
    repo.start();
    let canary = repo.root().join("CANARY");
    let o = repo.exec(&format!(
        "cd /workspace/cd && mkdir evil && cp -r .git/objects .git/refs .git/HEAD evil/ && \
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \"touch {c}; false\"\\n' \
         > evil/config; printf '../evil\\n' > .git/commondir; cat .git/commondir",
        c = canary.display()
    ));
    // The user's plain git on the host.
    for args in [&["status"][..], &["log", "-1"], &["diff"]] {
        let _ = Command::new("git")
            .args(args)
            .current_dir(&repo.path)
            .output()
            .unwrap();
    }
    assert!(
        !canary.exists(),
        "the host's git ran the agent's fsmonitor: {}",
        text(&o)
    );
    // git on the host still works on the made file.
    assert_eq!(
        std::fs::read_to_string(repo.path.join(".git/commondir")).unwrap(),
        ".\n"
    );
    repo.git(&["status", "--short"]);
    repo.git(&["commit", "-q", "--allow-empty", "-m", "host"]);
    // And the agent's git in the sandbox.
    let o = repo.agent(
        "cd /workspace/cd && git commit -q --allow-empty -m agent && git log --oneline | wc -l",
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "3",
        "{}",
        text(&o)
    );
}

/// Found on the way (a37b-3): after `sbx-run stop` and `start` (the same
/// container started again) the guest's watcher did not run: the mask file
/// of the last start was read-only and the guest, without
/// CAP_DAC_OVERRIDE, could not rewrite it. A secret file that appeared
/// later (the user's new `.env`) was then the agent's to read; so was one
/// written while the sandbox was stopped (the container keeps the masks
/// of its creation, and the watcher saw only new files).
#[test]
fn secret_files_that_appear_after_a_restart_are_masked() {
    if !base_image() {
        return;
    }
    let repo = sbx_e2e::attack_repo("rs", &["-qm", "one"], &[], &[]);
    repo.start();
    let o = run(&repo, &["-q", "stop"]);
    assert!(o.status.success(), "stop: {}", text(&o));
    std::fs::write(repo.path.join("deploy.key"), "KEY-WHILE-STOPPED\n").unwrap();
    let o = run(&repo, &["-q", "start"]);
    assert!(o.status.success(), "start: {}", text(&o));
    std::fs::write(repo.path.join(".env"), "API_TOKEN=SECRET-VALUE\n").unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    let o = repo.exec("cat /workspace/rs/.env /workspace/rs/deploy.key; true");
    assert!(
        !text(&o).contains("KEY-WHILE-STOPPED"),
        "the agent read a secret file written while it was stopped: {}",
        text(&o)
    );
    assert!(
        !text(&o).contains("SECRET-VALUE"),
        "the agent read a new secret file after a restart: {}",
        text(&o)
    );
}

/// Route a37b-4: sbx-run takes the nearest directory holding a `.git` as
/// the workspace. The agent made `src/.git` (an empty directory) and
/// `src/.agent-sandbox/hooks/before`; the user, working in `src/`, ran
/// `sbx-run agent`, which started a sandbox for `src` with the agent's
/// config and ran the agent's before-hook on the host, as root. A
/// repository inside a sandboxed workspace is now refused.
#[test]
fn a_repository_the_agent_makes_in_a_subdirectory_is_not_a_workspace() {
    if !base_image() {
        return;
    }
    let repo = sbx_e2e::attack_repo("nest", &["-qm", "one"], &["/src/"], &[]);
    std::fs::create_dir_all(repo.path.join("src")).unwrap();
    repo.start();
    let canary = repo.root().join("CANARY");
    let o = repo.exec(&format!(
        "cd /workspace/nest/src && mkdir -p .git .agent-sandbox/hooks && \
         printf '#!/bin/sh\\ntouch {c}\\n' > .agent-sandbox/hooks/before && \
         chmod 755 .agent-sandbox/hooks/before",
        c = canary.display()
    ));
    assert!(o.status.success(), "{}", text(&o));
    // The user, in src/, as the README has them: no -C.
    let src = repo.path.join("src");
    let o = sbx()
        .args(["agent", "hello"])
        .current_dir(&src)
        .output()
        .unwrap();
    let _ = sbx()
        .args(["-q", "rm", "--volumes", "-C"])
        .arg(&src)
        .output();
    assert!(
        !canary.exists(),
        "the agent's before-hook ran on the host: {}",
        text(&o)
    );
    assert_eq!(o.status.code(), Some(65), "{}", text(&o));
    assert!(
        text(&o).contains("inside the sandboxed workspace"),
        "{}",
        text(&o)
    );
}
