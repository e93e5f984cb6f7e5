//! Whoever owns the workspace on the host (root, the agent's uid 1000, or
//! any other uid), the agent creates, edits, renames and deletes in it,
//! what it creates is owned on the host by the workspace's owner, the agent
//! is never uid 0, and the image, /etc, the protected paths and the audit
//! log stay out of its reach. Real containers, real repositories.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use sbx_e2e::{Repo, base_image, prerequisite, sbx, sh, text};

fn ready() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        prerequisite(sbx_e2e::is_root(), "root (chown, idmapped mounts)") && base_image()
    })
}

/// A repository with a source file, a failing pre-commit hook and no
/// .husky, every file owned by `uid:uid`.
fn owned_by(uid: u32) -> Repo {
    let repo = Repo::new(&format!("own{uid}"));
    let path = &repo.path;
    std::fs::create_dir_all(path.join("src")).unwrap();
    sh(Command::new("git").args(["init", "-q"]).current_dir(path));
    std::fs::write(path.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(path.join(".git/hooks/pre-commit"), "#!/bin/sh\nexit 1\n").unwrap();
    sh(Command::new("chmod")
        .arg("755")
        .arg(path.join(".git/hooks/pre-commit")));
    sh(Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{uid}"))
        .arg(path));
    repo
}

/// Every path under `root` (`.git` internals left out), relative.
fn tree(root: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().map(Result::unwrap) {
            let rel = e
                .path()
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == ".git" {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
            out.insert(rel);
        }
    }
    out
}

fn agent_works_in_a_workspace_owned_by(uid: u32) {
    if !ready() {
        return;
    }
    let repo = owned_by(uid);
    let before = tree(&repo.path);
    let start = sbx().arg("start").arg(&repo.path).output().unwrap();
    assert!(start.status.success(), "start: {}", text(&start));

    // On the host, the idmapped view (where the owner's files are uid
    // 1000's) is out of reach of a host user with uid 1000.
    let names = sbx_run::names::Names::new(&repo.path.canonicalize().unwrap(), None);
    if uid != 1000 {
        let parent = sbx_run::workspace::run_dir(&names.container);
        let m = std::fs::metadata(&parent).unwrap();
        assert_eq!(
            (m.uid(), m.mode() & 0o777),
            (0, 0o700),
            "{}",
            parent.display()
        );
        let peek = Command::new("setpriv")
            .args(["--reuid=1000", "--regid=1000", "--clear-groups", "ls"])
            .arg(sbx_run::workspace::idmap_dir(&names.container))
            .output()
            .unwrap();
        assert!(!peek.status.success(), "host uid 1000 reached the view");
    }

    // The agent's work: create, edit, rename, delete files and directories.
    let work = repo.exec(
        "set -e; test \"$(id -u)\" != 0; id -u; \
         mkdir -p new/sub; echo hello > new/sub/f; mv new/sub/f new/sub/g; \
         echo '// edited' >> src/main.rs; mv src/main.rs src/lib.rs; \
         touch gone; rm gone; mkdir tmpd; rmdir tmpd; echo keep > created.txt; \
         mkdir old; mv old renamed",
    );
    assert!(
        work.status.success(),
        "owner {uid}: the agent could not work: {}",
        text(&work)
    );
    assert_eq!(String::from_utf8_lossy(&work.stdout).trim(), "1000");

    // On the host: the edits are there, and owned by the workspace's owner.
    let p = &repo.path;
    assert_eq!(
        std::fs::read_to_string(p.join("new/sub/g")).unwrap(),
        "hello\n"
    );
    assert_eq!(
        std::fs::read_to_string(p.join("src/lib.rs")).unwrap(),
        "fn main() {}\n// edited\n"
    );
    assert!(!p.join("src/main.rs").exists() && !p.join("gone").exists());
    for f in [
        "new",
        "new/sub",
        "new/sub/g",
        "src/lib.rs",
        "created.txt",
        "renamed",
    ] {
        let m = std::fs::metadata(p.join(f)).unwrap();
        assert_eq!(
            (m.uid(), m.gid()),
            (uid, uid),
            "owner {uid}: {f} is owned by {}:{}",
            m.uid(),
            m.gid()
        );
    }

    // The guarantees hold whoever owns the workspace. Each is an attack
    // that must fail and change nothing.
    for (what, attack) in [
        ("/etc", "echo x > /etc/sbx-pwned"),
        ("/etc/passwd", "echo 'x::0:0::/:/bin/sh' >> /etc/passwd"),
        ("an image tool", "echo x >> /usr/local/bin/sbx-git-guard"),
        ("the real git", "rm -f /usr/libexec/sbx/git"),
        ("a hook", "echo 'exit 0' > .git/hooks/pre-commit"),
        ("the hooks dir", "touch .git/hooks/post-checkout"),
        ("the audit log", "rm -f /run/sbx/host/audit.jsonl"),
        ("the old audit log path", ": > /var/log/sbx/audit.jsonl"),
        ("the audit log's contents", "cat /run/sbx/host/audit.jsonl"),
        ("root", "sudo -n true"),
        (
            "the config the next start reads",
            "mkdir -p .agent-sandbox && echo '[network]' > .agent-sandbox/config.toml",
        ),
    ] {
        let o = repo.exec(attack);
        assert!(
            !o.status.success(),
            "owner {uid}: the agent changed {what}: {}",
            text(&o)
        );
    }
    assert_eq!(
        std::fs::read_to_string(p.join(".git/hooks/pre-commit")).unwrap(),
        "#!/bin/sh\nexit 1\n"
    );
    assert!(!p.join(".git/hooks/post-checkout").exists());
    // The hook still runs (and fails) on a commit.
    let c = repo.exec("git add -A && git -c user.name=a -c user.email=a@b commit -qm x");
    assert_eq!(
        c.status.code(),
        Some(1),
        "owner {uid}: the pre-commit hook did not run: {}",
        text(&c)
    );

    // No trace the user did not ask for: exactly what the agent made, no
    // mount points (the empty .husky of old), nothing else; and the
    // idmapped view is gone from the host with the sandbox.
    let after = tree(p);
    let expected: BTreeSet<String> = before
        .iter()
        .filter(|f| *f != "src/main.rs")
        .cloned()
        .chain(
            [
                "new",
                "new/sub",
                "new/sub/g",
                "src/lib.rs",
                "created.txt",
                "renamed",
                // The mount points left on purpose: empty, read-only
                // masks of the missing protected paths, so the agent cannot
                // make them for the next start to trust (issue 37).
                ".agent-sandbox",
                ".husky",
                ".agent-precommit",
                // The project settings the user's Claude Code reads
                // (issue 38): `.claude` made for skills, `.mcp.json` a mask;
                // codex's `.codex` a mask too (a38y).
                ".claude",
                ".mcp.json",
                ".codex",
            ]
            .map(String::from),
        )
        .collect();
    assert_eq!(
        after, expected,
        "owner {uid}: the sandbox left something in the repository"
    );
    let view = sbx_run::workspace::idmap_dir(&names.container);
    assert!(sbx().args(["-q", "rm"]).arg(p).status().unwrap().success());
    assert!(!view.exists(), "{} survived rm", view.display());
}

#[test]
fn root_owned_workspace() {
    agent_works_in_a_workspace_owned_by(0);
}

#[test]
fn agent_uid_owned_workspace() {
    agent_works_in_a_workspace_owned_by(1000);
}

#[test]
fn other_uid_owned_workspace() {
    agent_works_in_a_workspace_owned_by(1234);
}

/// A filesystem without idmapped mounts (ramfs): a workspace the agent
/// could not write is refused with one line and exit 69, and nothing is
/// started or left behind.
#[test]
fn no_idmap_support_is_refused_in_one_line() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    sh(Command::new("mount")
        .args(["-t", "ramfs", "sbx-e2e-ramfs"])
        .arg(dir.path()));
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
    let _u = Unmount(dir.path());
    let path = dir.path().join("ramrepo");
    std::fs::create_dir(&path).unwrap();
    sh(Command::new("git").args(["init", "-q"]).current_dir(&path));
    sh(Command::new("chown").args(["-R", "1234:1234"]).arg(&path));
    let o = sbx().arg("start").arg(&path).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(69), "{}", text(&o));
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("ramfs") && err.contains("chown -R 1000:1000"),
        "{err}"
    );
    // doctor says the same, as one FAIL line with its fix.
    let d = sbx().args(["doctor", "-C"]).arg(&path).output().unwrap();
    assert_eq!(d.status.code(), Some(1), "{}", text(&d));
    let fail: Vec<String> = String::from_utf8_lossy(&d.stdout)
        .lines()
        .filter(|l| l.starts_with("FAIL"))
        .map(String::from)
        .collect();
    assert!(
        fail.len() == 1
            && fail[0].contains("owner 1234:1234")
            && fail[0].contains("chown -R 1000:1000"),
        "{fail:?}"
    );
    let names = sbx_run::names::Names::new(&path.canonicalize().unwrap(), None);
    let c = Command::new("docker")
        .args(["container", "inspect", &names.container])
        .output()
        .unwrap();
    assert!(
        !c.status.success(),
        "a sandbox that cannot write was started"
    );
    let _ = sbx().args(["-q", "rm", "--volumes"]).arg(&path).output();
}

/// With no .husky at start an empty read-only one is mounted, so the
/// agent cannot make one (husky's v9 layout included) for the next start
/// to trust, nor for git to run: the repository's own pre-commit hook
/// still runs.
#[test]
fn an_agent_made_husky_does_not_replace_the_hooks() {
    if !ready() {
        return;
    }
    let repo = owned_by(1000);
    let o = repo.exec(
        "mkdir -p ~/.config/git && echo .husky >> ~/.config/git/ignore && mkdir -p .husky/_ && printf '#!/bin/sh\\nexit 0\\n' > .husky/_/pre-commit && chmod +x .husky/_/pre-commit \
         && touch .husky/_/h .husky/_/husky.sh && echo x > f && git add f \
         && git -c user.name=a -c user.email=a@b commit -qm x",
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "the agent's .husky replaced the hooks: {}",
        text(&o)
    );
    let c = repo.exec("git rev-parse -q --verify HEAD");
    assert!(
        !c.status.success(),
        "a commit was made past the failing hook"
    );
}
