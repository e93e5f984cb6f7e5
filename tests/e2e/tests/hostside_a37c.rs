//! A fresh attack on the host boundary (a37c): what the agent in a real
//! sandbox writes, then what the user does on the host as the README
//! says (their own `git commit` in the checkout).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use sbx_e2e::{Repo, base_image, text};

fn write_exec(p: &Path, body: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Route a37c-2: a hook in `.git/hooks` that is a link into the work tree
/// (`ln -s ../../scripts/pre-commit .git/hooks/pre-commit`, how many
/// projects install their tracked hooks). `.git/hooks` is read-only in
/// the sandbox, but the link's target is an ordinary work-tree file: the
/// agent rewrote `scripts/pre-commit`, and the user's next plain `git
/// commit` on the host ran it (as root). The target of such a link is now
/// held read-only in the sandbox, as a work-tree hooks directory is.
#[test]
fn a_hook_linked_into_the_work_tree_is_not_the_agents_to_rewrite() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("ws");
    repo.git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.path.join("a"), "1\n").unwrap();
    std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
    let hook = "#!/bin/sh\nexit 0\n";
    write_exec(&repo.path.join("scripts/hooks/pre-commit"), hook);
    write_exec(&repo.path.join("tools/post-commit"), hook);
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "base"]);
    // One relative link to a file, one absolute link to another file.
    std::os::unix::fs::symlink(
        "../../scripts/hooks/pre-commit",
        repo.path.join(".git/hooks/pre-commit"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        repo.path.join("tools/post-commit"),
        repo.path.join(".git/hooks/post-commit"),
    )
    .unwrap();
    // Root's checkout, as the README runs it (the agent sees it idmapped).
    repo.start();
    let canary = repo.root().join("canary");
    let evil = format!("#!/bin/sh\\ntouch {}\\n", canary.display());
    let o = repo.exec(&format!(
        "cd /workspace/ws; printf '{evil}' > scripts/hooks/pre-commit; \
         printf '{evil}' > tools/post-commit; \
         mv scripts/hooks scripts/h2 && mkdir scripts/hooks && \
         printf '{evil}' > scripts/hooks/pre-commit && chmod 755 scripts/hooks/pre-commit; \
         mv tools t2 && mkdir tools && printf '{evil}' > tools/post-commit && chmod 755 tools/post-commit; \
         cat scripts/hooks/pre-commit tools/post-commit"
    ));
    // The user's own commit on the host, as root.
    std::fs::write(repo.path.join("b"), "2\n").unwrap();
    repo.git(&["add", "b"]);
    let c = Command::new("git")
        .args(["-c", "user.name=u", "-c", "user.email=u@example.invalid"])
        .args(["commit", "-qm", "user"])
        .current_dir(&repo.path)
        .output()
        .unwrap();
    assert!(
        !canary.exists(),
        "the user's git commit ran the agent's hook: agent {} / commit {}",
        text(&o),
        text(&c)
    );
    assert!(c.status.success(), "the user's commit: {}", text(&c));
    for p in ["scripts/hooks/pre-commit", "tools/post-commit"] {
        let body = std::fs::read_to_string(repo.path.join(p)).unwrap();
        assert_eq!(body, hook, "{p}: {}", text(&o));
    }
}

/// Route a37c-2 through clone mode's return path: the host's
/// `.git/hooks/post-merge` is a link to the tracked `scripts/post-merge`;
/// the agent commits its own version of that file in its clone, `sbx-run
/// fetch` took the branch, and the user's `git merge --ff-only sbx/main`
/// (as `fetch` suggests) ran it as root the moment the merge landed.
/// `fetch` now refuses a branch that changes a file a hook links to.
#[test]
fn fetch_refuses_a_branch_that_changes_a_file_a_hook_links_to() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("clonelink");
    repo.git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
    write_exec(&repo.path.join("scripts/post-merge"), "#!/bin/sh\nexit 0\n");
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "base"]);
    std::os::unix::fs::symlink(
        "../../scripts/post-merge",
        repo.path.join(".git/hooks/post-merge"),
    )
    .unwrap();
    let o = sbx_e2e::sbx()
        .args(["-q", "init"])
        .arg(&repo.path)
        .output()
        .unwrap();
    assert!(o.status.success(), "init: {}", text(&o));
    std::fs::write(
        repo.path.join(".agent-sandbox/config.toml"),
        "[sandbox]\nworkspace = \"clone\"\n",
    )
    .unwrap();
    let o = sbx_e2e::sbx()
        .arg("start")
        .arg(&repo.path)
        .output()
        .unwrap();
    assert!(o.status.success(), "start: {}", text(&o));
    let canary = repo.root().join("canary");
    let o = repo.agent(&format!(
        "printf '#!/bin/sh\\ntouch {}\\n' > scripts/post-merge && git commit -qam lint",
        canary.display()
    ));
    assert!(o.status.success(), "{}", text(&o));
    let f = sbx_e2e::sbx()
        .args(["fetch", "-C"])
        .arg(&repo.path)
        .output()
        .unwrap();
    // What the user does next, as `fetch` tells them (if it fetched).
    let m = Command::new("git")
        .args(["merge", "-q", "--ff-only", "sbx/main"])
        .current_dir(&repo.path)
        .output()
        .unwrap();
    assert!(
        !canary.exists(),
        "the merge ran the agent's hook: fetch {} / merge {}",
        text(&f),
        text(&m)
    );
    assert_eq!(f.status.code(), Some(77), "{}", text(&f));
    let e = String::from_utf8_lossy(&f.stderr);
    assert!(
        e.contains("scripts/post-merge") && e.lines().count() == 1,
        "{e}"
    );
}

/// Route a37c-3: `sbx-run cp :DIR -` on a terminal (the user forgot the
/// `| tar -x`) wrote the tar stream, the agent's names and bytes raw,
/// to it: a file holding `\e]0;...\a` or `\e[2J` drove the terminal.
/// It is now refused there, as tar refuses, and still streams to a pipe.
#[test]
fn cp_to_a_stream_writes_no_agent_bytes_to_a_terminal() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("ws");
    repo.git(&["init", "-q", "-b", "main"]);
    repo.start();
    let o = repo.exec(
        "mkdir -p /workspace/ws/out && printf 'x\\033]0;pwned\\007\\033[2J' > /workspace/ws/out/f",
    );
    assert!(o.status.success(), "{}", text(&o));
    let cmd = format!(
        "{} cp -C {} :/workspace/ws/out -",
        sbx_e2e::bin("sbx-run").display(),
        repo.path.display()
    );
    let t = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("SBX_BIN_DIR", sbx_e2e::bin("sbx-run").parent().unwrap())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&t.stdout);
    assert!(
        !out.contains("\x1b]0;pwned"),
        "raw escape on the terminal ({} bytes of tar)",
        out.len()
    );
    assert!(out.contains("terminal"), "{out:?}");
    // A pipe still gets the stream.
    let p = sbx_e2e::sbx()
        .args(["cp", "-C"])
        .arg(&repo.path)
        .args([":/workspace/ws/out", "-"])
        .output()
        .unwrap();
    assert!(p.status.success(), "{}", text(&p));
    assert!(p.stdout.windows(5).any(|w| w == b"pwned"));
}

/// Route a37c-2 in a submodule: `.git/modules/sub/hooks` is held
/// read-only, but a hook there that is a link into the submodule's work
/// tree ran the agent's file on the user's `git commit` in `sub`.
#[test]
fn a_submodule_hook_linked_into_its_work_tree_is_held_too() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("ws");
    let src = repo.root().join("subsrc");
    std::fs::create_dir_all(&src).unwrap();
    let g = |dir: &Path, args: &[&str]| {
        let o = Command::new("git")
            .args(["-c", "user.name=a", "-c", "user.email=a@b"])
            .args(["-c", "protocol.file.allow=always"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    };
    g(&src, &["init", "-q", "-b", "main"]);
    write_exec(&src.join("scripts/pre-commit"), "#!/bin/sh\nexit 0\n");
    g(&src, &["add", "-A"]);
    g(&src, &["commit", "-qm", "sub"]);
    g(&repo.path, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
    g(
        &repo.path,
        &["submodule", "add", "-q", src.to_str().unwrap(), "sub"],
    );
    g(&repo.path, &["add", "-A"]);
    g(&repo.path, &["commit", "-qm", "base"]);
    std::os::unix::fs::symlink(
        "../../../../sub/scripts/pre-commit",
        repo.path.join(".git/modules/sub/hooks/pre-commit"),
    )
    .unwrap();
    repo.start();
    let canary = repo.root().join("canary");
    let o = repo.exec(&format!(
        "cd /workspace/ws/sub; printf '#!/bin/sh\\ntouch {}\\n' > scripts/pre-commit; cat scripts/pre-commit",
        canary.display()
    ));
    std::fs::write(repo.path.join("sub/b"), "2\n").unwrap();
    g(&repo.path.join("sub"), &["add", "b"]);
    let c = Command::new("git")
        .args(["-c", "user.name=u", "-c", "user.email=u@example.invalid"])
        .args(["commit", "-qm", "user"])
        .current_dir(repo.path.join("sub"))
        .output()
        .unwrap();
    assert!(
        !canary.exists(),
        "the user's commit in sub ran the agent's hook: agent {} / commit {}",
        text(&o),
        text(&c)
    );
    assert!(c.status.success(), "{}", text(&c));
}
