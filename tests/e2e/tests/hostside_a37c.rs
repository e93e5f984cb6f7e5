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
