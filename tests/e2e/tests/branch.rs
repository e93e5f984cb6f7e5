//! Branch mode against a real Docker engine: two branch sandboxes at once
//! on one repo shelf, a commit and a plain `git push` that lands in the
//! host checkout (owned by a uid that is not the agent's) while the host
//! has main checked out, the guard still refusing a force push, git still
//! refusing a push to the checked-out branch, and a bind-mode sandbox
//! working in a branch's worktree.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sbx_e2e::{base_image, sbx, sh, text};
use serde_json::Value;

const OWNER: u32 = 1234;

struct Repo {
    _dir: tempfile::TempDir,
    path: PathBuf,
    branches: Vec<&'static str>,
}

fn git(dir: &Path, args: &[&str]) -> String {
    sh(Command::new("git")
        .arg("-c")
        .arg(format!("safe.directory={}", dir.display()))
        .arg("-C")
        .arg(dir)
        .args(args))
    .trim()
    .to_owned()
}

impl Repo {
    /// A host checkout on main, owned by `owner` (not the agent: the
    /// agent sees it through the idmapped view), with a pre-push hook that
    /// leaves a mark.
    fn new(owner: u32) -> Self {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("shelfapp");
        std::fs::create_dir_all(&path).unwrap();
        git(&path, &["init", "-q", "-b", "main"]);
        std::fs::write(path.join("README"), "hi\n").unwrap();
        git(&path, &["add", "README"]);
        git(
            &path,
            &[
                "-c",
                "user.name=Dev",
                "-c",
                "user.email=d@example.invalid",
                "commit",
                "-qm",
                "one",
            ],
        );
        let hook = path.join(".git/hooks/pre-push");
        std::fs::write(&hook, "#!/bin/sh\necho ran > /tmp/pre-push-ran\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        sh(Command::new("chown")
            .args(["-R", &format!("{owner}:{owner}")])
            .arg(dir.path()));
        Self {
            _dir: dir,
            path,
            branches: Vec::new(),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        sbx().args(args).arg("-C").arg(&self.path).output().unwrap()
    }

    /// `sh -c script` as the agent, in BRANCH's sandbox (None: bind mode).
    fn exec(&self, branch: Option<&str>, script: &str) -> Output {
        let mut c = sbx();
        c.arg("exec").arg("-C").arg(&self.path);
        if let Some(b) = branch {
            c.arg(format!("--branch={b}"));
        }
        c.args(["--", "sh", "-c", script]).output().unwrap()
    }

    fn ok(&self, branch: Option<&str>, script: &str) -> String {
        let o = self.exec(branch, script);
        assert!(o.status.success(), "{script}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    }

    fn names(&self, branch: Option<&str>) -> sbx_run::names::Names {
        sbx_run::names::Names::new(&self.path.canonicalize().unwrap(), branch)
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        for b in &self.branches {
            let _ = self.run(&["-q", "rm", &format!("--branch={b}")]);
        }
        let _ = self.run(&["-q", "rm", "--volumes"]);
    }
}

const COMMIT: &str = "git -c user.name=Agent -c user.email=agent@example.invalid commit -qm";

#[test]
fn branch_sandboxes_share_a_shelf_and_push_to_the_host() {
    if !base_image() {
        return;
    }
    let mut repo = Repo::new(OWNER);
    repo.branches = vec!["feat/a", "feat/b", "feat/c", "feat/d", "feat__a", "feat__c"];
    let main_before = git(&repo.path, &["rev-parse", "main"]);

    // Bad names are refused in one line, before any container starts.
    let bad = repo.run(&["checkout", "a..b"]);
    assert_eq!(bad.status.code(), Some(64), "{}", text(&bad));
    assert!(
        text(&bad).contains("git refuses this name"),
        "{}",
        text(&bad)
    );

    let bad = repo.run(&["start", "--branch=a..b"]);
    assert_eq!(bad.status.code(), Some(64), "{}", text(&bad));
    assert!(text(&bad).contains("git refuses this name"));
    let none = sh(Command::new("docker").args([
        "ps",
        "-aq",
        "--filter",
        &format!("name={}", repo.names(Some("a..b")).container),
    ]));
    assert!(none.trim().is_empty(), "no container for a refused name");

    for b in ["feat/a", "feat/b"] {
        let o = repo.run(&["start", &format!("--branch={b}")]);
        assert!(o.status.success(), "start {b}: {}", text(&o));
    }
    // Both run at once, each in its own worktree, on one shelf volume.
    let shelf = repo.names(None).repo_shelf;
    for (b, san) in [("feat/a", "feat__a"), ("feat/b", "feat__b")] {
        let n = repo.names(Some(b));
        let c: Value = serde_json::from_str(&sh(Command::new("docker").args([
            "inspect",
            "--format",
            "{{json .}}",
            &n.container,
        ])))
        .unwrap();
        assert_eq!(c["State"]["Running"], true, "{b}");
        // Docker's workdir is the shelf (docker would make a missing one,
        // root's); the guest moves into the worktree it provisioned.
        assert_eq!(c["Config"]["WorkingDir"], "/repo-shelf");
        assert_eq!(c["Config"]["Labels"]["sbx.mode"], "branch");
        assert_eq!(c["Config"]["Labels"]["sbx.branch"], b);
        assert!(
            c["Mounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["Name"] == shelf.as_str() && m["Destination"] == "/repo-shelf"),
            "{b} mounts {shelf}"
        );
        assert_eq!(
            repo.ok(Some(b), "pwd; git symbolic-ref --short HEAD"),
            format!("/repo-shelf/worktrees/{san}\n{b}")
        );
    }
    // list: mode, branch and workdir from the labels.
    let list = sbx().args(["list", "--json"]).output().unwrap();
    let rows: Vec<Value> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["data"].clone())
        .filter(|d| d["workspace"] == repo.path.canonicalize().unwrap().to_str().unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for r in &rows {
        assert_eq!(r["mode"], "branch");
        assert!(
            r["workdir"]
                .as_str()
                .unwrap()
                .starts_with("/repo-shelf/worktrees/feat__")
        );
    }

    // Commit in A and a plain `git push`: lands in the host, which stays on
    // main; the host's pre-push hook ran (pinned over the shelf's hooks).
    let head = repo.ok(
        Some("feat/a"),
        &format!("echo a > a.txt && git add a.txt && {COMMIT} a && git push -q && rm -f /tmp/x; cat /tmp/pre-push-ran; git rev-parse HEAD"),
    );
    let (ran, head) = head.split_once('\n').unwrap();
    assert_eq!(ran, "ran");
    assert_eq!(git(&repo.path, &["rev-parse", "refs/heads/feat/a"]), head);
    assert_eq!(
        git(&repo.path, &["symbolic-ref", "HEAD"]),
        "refs/heads/main"
    );
    // ... owned by the host checkout's owner, not by the agent's uid.
    let loose = repo
        .path
        .join(".git/objects")
        .join(&head[..2])
        .join(&head[2..]);
    let refs = repo.path.join(".git/refs/heads/feat/a");
    for p in [&loose, &refs] {
        assert_eq!(
            std::fs::metadata(p).unwrap().uid(),
            OWNER,
            "{}",
            p.display()
        );
    }
    // The worktrees are independent; the shelf is shared.
    assert_eq!(
        repo.ok(
            Some("feat/b"),
            "test -e a.txt && echo yes || echo no; cat ../feat__a/a.txt"
        ),
        "no\na"
    );

    // The guard still stands: a force push to host is refused (77), the
    // host's ref stays.
    let force = repo.exec(
        Some("feat/a"),
        &format!("{COMMIT} amended --amend && git push --force host feat/a"),
    );
    assert_eq!(force.status.code(), Some(77), "{}", text(&force));
    assert_eq!(git(&repo.path, &["rev-parse", "refs/heads/feat/a"]), head);
    // Git's own refusal stands: no push into the host's checked-out branch.
    let cur = repo.exec(
        Some("feat/a"),
        "git reset -q --hard @{u} && git push host HEAD:main",
    );
    assert_ne!(cur.status.code(), Some(0), "{}", text(&cur));
    assert!(text(&cur).contains("checked out"), "{}", text(&cur));
    assert_eq!(git(&repo.path, &["rev-parse", "main"]), main_before);

    // Bind mode sees the shelf and works in a branch's worktree.
    let bind = repo.ok(
        None,
        &format!(
            "cd /repo-shelf/worktrees/feat__b && echo b > b.txt && git add b.txt && {COMMIT} b && git push -q && git rev-parse HEAD"
        ),
    );
    assert_eq!(git(&repo.path, &["rev-parse", "refs/heads/feat/b"]), bind);

    // show-run says who provisions and where the branch works.
    let show = repo.run(&["show-run", "--branch=feat/a"]);
    let t = text(&show);
    assert!(show.status.success(), "{t}");
    assert!(t.contains("--env 'SBX_BRANCH=feat/a'"), "{t}");
    assert!(
        t.contains("sbx-guest provisions /repo-shelf/worktrees/feat__a"),
        "{t}"
    );

    // Two names, one directory: the second start is refused (64), naming
    // both, though feat/a's worktree is there to be (wrongly) reused.
    let twin = repo.run(&["start", "--branch=feat__a"]);
    assert_eq!(twin.status.code(), Some(64), "{}", text(&twin));
    assert!(
        text(&twin).contains("\"feat__a\" and \"feat/a\""),
        "{}",
        text(&twin)
    );

    // What the guest made in a worktree (the mount points of the pinned
    // protected paths) is the agent's: seen from bind mode, where nothing
    // is mounted over it, and removable once the branch's sandbox is gone.
    assert_eq!(
        repo.ok(
            None,
            "cd /repo-shelf/worktrees/feat__b && stat -c '%u %n' .agent-precommit .agent-precommit/user-context.json .agent-sandbox"
        ),
        "1000 .agent-precommit\n1000 .agent-precommit/user-context.json\n1000 .agent-sandbox"
    );

    // Attack: the agent in feat/a arms the shelf's config (a hooks
    // directory and core.fsmonitor of its own, aliases named like
    // provisioning's sub-commands, its own hook in the clone's hooks,
    // which the host's hooks mask in the sandbox). Provisioning feat/c
    // (root in its container) runs none of it, and still works.
    let arm = r#"set -e
m=/repo-shelf/marks; mkdir -p $m /repo-shelf/evil-hooks
printf '#!/bin/sh\necho "$(id -u) $0" >> /repo-shelf/marks/ran\ncat\n' > /repo-shelf/evil
chmod 755 /repo-shelf/evil
for h in post-checkout reference-transaction post-index-change; do cp /repo-shelf/evil /repo-shelf/evil-hooks/$h; done
c=/repo-shelf/repo/.git/config
printf '[core]\n\thooksPath = /repo-shelf/evil-hooks\n\tfsmonitor = /repo-shelf/evil\n[alias]\n\tfetch = !/repo-shelf/evil\n\tworktree = !/repo-shelf/evil\n' >> $c
echo armed"#;
    assert_eq!(repo.ok(Some("feat/a"), arm), "armed");
    let c = repo.run(&["checkout", "feat/c"]);
    assert!(c.status.success(), "{}", text(&c));
    // feat/c has a worktree and no sandbox: a start of feat__c gets as far
    // as its guest, whose sbx-worktree refuses it; its line and 64 come back.
    let twin = repo.run(&["start", "--branch=feat__c"]);
    assert_eq!(twin.status.code(), Some(64), "{}", text(&twin));
    assert!(
        text(&twin).contains("\"feat__c\" and \"feat/c\""),
        "{}",
        text(&twin)
    );
    assert_eq!(
        repo.ok(
            Some("feat/a"),
            "cat /repo-shelf/marks/ran 2>/dev/null; ls /repo-shelf/worktrees"
        ),
        "feat__a\nfeat__b\nfeat__c"
    );
    // A smudge filter every file gets: the shelf is refused (77), no
    // worktree, nothing ran.
    let filter = r#"set -e
printf '* filter=x\n' > /repo-shelf/repo/.git/info/attributes
printf '[filter "x"]\n\tsmudge = /repo-shelf/evil\n' >> /repo-shelf/repo/.git/config
echo armed"#;
    assert_eq!(repo.ok(Some("feat/a"), filter), "armed");
    // Through a start, whose guest provisions: the same refusal and status.
    let d = repo.run(&["start", "--branch=feat/d"]);
    assert_eq!(d.status.code(), Some(77), "{}", text(&d));
    assert!(
        text(&d).contains("filter.x.smudge is not allowed"),
        "{}",
        text(&d)
    );
    assert_eq!(
        repo.ok(
            Some("feat/a"),
            "cat /repo-shelf/marks/ran 2>/dev/null; ls /repo-shelf/worktrees"
        ),
        "feat__a\nfeat__b\nfeat__c"
    );

    // feat/b's sandbox gone, its worktree goes from a bind-mode sandbox,
    // the agent's alone: nothing in it is root's.
    let rm = repo.run(&["-q", "rm", "--branch=feat/b"]);
    assert!(rm.status.success(), "{}", text(&rm));
    assert_eq!(
        repo.ok(
            None,
            "rm -rf /repo-shelf/worktrees/feat__b && git -C /repo-shelf/repo worktree prune && echo gone"
        ),
        "gone"
    );

    // Volumes: while branch sandboxes are left, `rm --volumes` is refused
    // and removes nothing; a branch's `rm --volumes` takes its home only;
    // the last `rm --volumes` takes the rest, branch homes included.
    let ws = repo.path.canonicalize().unwrap();
    let labelled = |what: &str, format: &str| -> Vec<String> {
        let filter = format!("label=sbx.workspace={}", ws.display());
        let mut args = vec![what, "--filter", &filter, "--format", format];
        if what == "ps" {
            args.insert(1, "--all");
        } else {
            args.insert(0, "volume");
        }
        let mut v: Vec<String> = sh(Command::new("docker").args(&args))
            .lines()
            .map(str::to_owned)
            .collect();
        v.sort();
        v
    };
    let vols = || labelled("ls", "{{.Name}}");
    let before = vols();
    let (shelf, home_a) = (repo.names(None).repo_shelf, repo.names(Some("feat/a")).home);
    assert!(
        before.contains(&shelf) && before.contains(&home_a),
        "{before:?}"
    );
    let refused = repo.run(&["rm", "--volumes"]);
    assert_eq!(refused.status.code(), Some(64), "{}", text(&refused));
    assert!(text(&refused).contains("feat/a"), "{}", text(&refused));
    assert_eq!(vols(), before);
    for b in labelled("ps", "{{.Label \"sbx.branch\"}}") {
        let o = repo.run(&["-q", "rm", "--volumes", &format!("--branch={b}")]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let left = vols();
    assert!(left.contains(&shelf) && !left.contains(&home_a), "{left:?}");
    let o = repo.run(&["-q", "rm", "--volumes"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(vols(), Vec::<String>::new());
}

/// A host checkout owned by root: provisioning reads it through the
/// idmapped view of its .git, the agent commits in its branch sandbox and
/// `git push` lands in the host, root-owned.
#[test]
fn a_root_owned_host_checkout_works_in_branch_mode() {
    if !base_image() {
        return;
    }
    let mut repo = Repo::new(0);
    repo.branches = vec!["work", "feature"];
    // A remote origin the provisioning container could not reach (it has
    // no network): origin's branches come from the host's origin/* refs.
    let p = &repo.path;
    git(
        p,
        &["remote", "add", "origin", "https://127.0.0.1:9/app.git"],
    );
    git(p, &["update-ref", "refs/remotes/origin/main", "HEAD"]);
    git(
        p,
        &[
            "symbolic-ref",
            "refs/remotes/origin/HEAD",
            "refs/remotes/origin/main",
        ],
    );
    let tree = git(p, &["rev-parse", "HEAD^{tree}"]);
    let feature = git(
        p,
        &[
            "-c",
            "user.name=Up",
            "-c",
            "user.email=u@example.invalid",
            "commit-tree",
            &tree,
            "-p",
            "HEAD",
            "-m",
            "upstream",
        ],
    );
    git(p, &["update-ref", "refs/remotes/origin/feature", &feature]);
    let o = repo.run(&["checkout", "feature"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        repo.ok(
            Some("feature"),
            "git rev-parse HEAD; git config branch.feature.remote"
        ),
        format!("{feature}\nhost")
    );
    let o = repo.run(&["checkout", "work"]);
    assert!(o.status.success(), "{}", text(&o));
    let head = repo.ok(
        Some("work"),
        &format!("id -u; echo w > w.txt && git add w.txt && {COMMIT} w && git push -q && git rev-parse HEAD"),
    );
    let (uid, head) = head.split_once('\n').unwrap();
    assert_eq!(uid, "1000");
    // The host checkout is root's; what the guest made in the worktree is
    // still the agent's.
    assert_eq!(
        repo.ok(Some("work"), "stat -c '%u' .agent-precommit"),
        "1000"
    );
    assert_eq!(git(&repo.path, &["rev-parse", "refs/heads/work"]), head);
    let refs = repo.path.join(".git/refs/heads/work");
    assert_eq!(std::fs::metadata(&refs).unwrap().uid(), 0);
    assert_eq!(
        git(&repo.path, &["symbolic-ref", "HEAD"]),
        "refs/heads/main"
    );
}

/// Through a start, whose guest provisions: a host on a detached HEAD is
/// refused (65, sbx-worktree's line); the private git copy provisioning
/// ran is gone before the agent starts; and a pin target another sandbox
/// turned into a symbolic link is refused, nothing mounted through it.
#[test]
fn a_start_refuses_a_detached_host_and_a_linked_pin_target() {
    if !base_image() {
        return;
    }
    let mut repo = Repo::new(OWNER);
    repo.branches = vec!["x", "y"];
    git(&repo.path, &["checkout", "-q", "--detach"]);
    let o = repo.run(&["start", "--branch=x"]);
    assert_eq!(o.status.code(), Some(65), "{}", text(&o));
    assert!(text(&o).contains("HEAD is detached"), "{}", text(&o));
    git(&repo.path, &["checkout", "-q", "main"]);

    let o = repo.run(&["start", "--branch=x"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        repo.ok(Some("x"), "ls -d /run/sbx-git.* 2>/dev/null; pwd"),
        "/repo-shelf/worktrees/x"
    );
    let o = repo.run(&["checkout", "y"]);
    assert!(o.status.success(), "{}", text(&o));
    // The agent's home is there in every sandbox: the link resolves in y too.
    let plant = "cd /repo-shelf/worktrees/y && rm -rf .agent-precommit && ln -s /home/agent .agent-precommit && echo planted";
    assert_eq!(repo.ok(Some("x"), plant), "planted");
    let o = repo.run(&["start", "--branch=y"]);
    assert_eq!(o.status.code(), Some(71), "{}", text(&o));
    assert!(text(&o).contains("symbolic link"), "{}", text(&o));
}

/// A fresh machine, as a user meets it: no shelf volume yet, a host
/// checkout owned by root or by a uid that is neither root nor the
/// agent's, and the first thing run is `sbx-run start --branch` (its guest
/// clones the shelf). A commit and a plain `git push` land in the host as
/// its owner's, a second branch starts while the first runs, and the
/// host's own git still reads its repository.
#[test]
fn a_first_branch_start_works_for_any_host_owner() {
    if !base_image() {
        return;
    }
    for owner in [0, OWNER] {
        let mut repo = Repo::new(owner);
        repo.branches = vec!["feat/one", "two"];
        let shelf = repo.names(None).repo_shelf;
        let vols = sh(Command::new("docker")
            .args(["volume", "ls", "-q", "--filter"])
            .arg(format!("name={shelf}")));
        assert!(
            vols.trim().is_empty(),
            "owner {owner}: a shelf volume before the first start"
        );

        let o = repo.run(&["start", "--branch=feat/one"]);
        assert!(o.status.success(), "owner {owner}: {}", text(&o));
        let out = repo.ok(
            Some("feat/one"),
            &format!("id -u; pwd; git config branch.feat/one.remote; echo 1 > one.txt && git add one.txt && {COMMIT} one && git push -q && git rev-parse HEAD"),
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[..3],
            ["1000", "/repo-shelf/worktrees/feat__one", "host"],
            "owner {owner}"
        );
        let head = lines[3];
        assert_eq!(
            git(&repo.path, &["rev-parse", "refs/heads/feat/one"]),
            head,
            "owner {owner}"
        );
        let refs = repo.path.join(".git/refs/heads/feat/one");
        let loose = repo
            .path
            .join(".git/objects")
            .join(&head[..2])
            .join(&head[2..]);
        for p in [&refs, &loose] {
            assert_eq!(
                std::fs::metadata(p).unwrap().uid(),
                owner,
                "{}",
                p.display()
            );
        }
        assert_eq!(
            git(&repo.path, &["symbolic-ref", "HEAD"]),
            "refs/heads/main"
        );
        git(&repo.path, &["fsck", "--no-dangling", "--no-progress"]);

        // A second branch while the first runs: its own worktree, from main.
        let o = repo.run(&["start", "--branch=two"]);
        assert!(o.status.success(), "owner {owner}: {}", text(&o));
        let two = repo.ok(
            Some("two"),
            &format!("test -e one.txt && echo leaked; echo 2 > two.txt && git add two.txt && {COMMIT} two && git push -q && git rev-parse HEAD HEAD~1"),
        );
        let (two, base) = two.split_once('\n').unwrap();
        assert_eq!(
            base,
            git(&repo.path, &["rev-parse", "main"]),
            "owner {owner}"
        );
        assert_eq!(git(&repo.path, &["rev-parse", "refs/heads/two"]), two);
        assert_eq!(
            std::fs::metadata(repo.path.join(".git/refs/heads/two"))
                .unwrap()
                .uid(),
            owner
        );
        // The host's own git, as the owner, sees both branches.
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            &owner.to_string(),
            "--regid",
            &owner.to_string(),
            "--clear-groups",
            "git",
            "-C",
        ])
        .arg(&repo.path)
        .args(["for-each-ref", "--format=%(refname)", "refs/heads/"]);
        assert_eq!(
            sh(c.env("HOME", "/nonexistent")).trim(),
            "refs/heads/feat/one\nrefs/heads/main\nrefs/heads/two",
            "owner {owner}"
        );
    }
}
