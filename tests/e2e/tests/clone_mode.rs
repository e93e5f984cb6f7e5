//! Clone mode (`[sandbox] workspace = "clone"`, issue 36) against a real
//! Docker engine and real git: the agent works on its own clone, plants
//! everything git runs a program from in that clone and in its commit,
//! tries the host checkout (read-only here, whole), and the user's plain
//! git on the host (status, log -p in a pty with the pager, diff, merge)
//! after `sbx-run fetch` runs none of it. And the return path fails
//! closed on what a subverted sandbox could send instead of a bundle.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sbx_e2e::{Repo, base_image, sbx, sh, text};

/// A clone-mode workspace on main with one commit, the agent's, started.
fn clone_repo(name: &str) -> Option<Repo> {
    clone_repo_with(name, |_| {})
}

/// The same, with `setup` run on the host's repository before the start.
fn clone_repo_with(name: &str, setup: impl Fn(&Repo)) -> Option<Repo> {
    if !base_image() {
        return None;
    }
    let repo = Repo::new(name);
    repo.git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.path.join("README"), "hi\n").unwrap();
    std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
    repo.git(&["add", "README", ".gitignore"]);
    repo.git(&["commit", "-qm", "one"]);
    repo.hook("post-merge", "#!/bin/sh\nexit 0\n");
    setup(&repo);
    let o = sbx().args(["-q", "init"]).arg(&repo.path).output().unwrap();
    assert!(o.status.success(), "init: {}", text(&o));
    std::fs::write(
        repo.path.join(".agent-sandbox/config.toml"),
        "[sandbox]\nworkspace = \"clone\"\n",
    )
    .unwrap();
    // The user's checkout, not the agent's: seen through the idmapped view.
    let o = sbx().arg("start").arg(&repo.path).output().unwrap();
    assert!(o.status.success(), "start: {}", text(&o));
    Some(repo)
}

fn fetch(repo: &Repo, extra: &[&str]) -> Output {
    sbx()
        .arg("fetch")
        .args(extra)
        .arg("-C")
        .arg(&repo.path)
        .output()
        .unwrap()
}

/// The host's files the agent must not change: `.git/config` and the
/// hooks, byte for byte.
fn host_state(repo: &Repo) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v = vec![(
        repo.path.join(".git/config"),
        std::fs::read(repo.path.join(".git/config")).unwrap(),
    )];
    let mut hooks: Vec<PathBuf> = std::fs::read_dir(repo.path.join(".git/hooks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    hooks.sort();
    for h in hooks {
        let b = std::fs::read(&h).unwrap();
        v.push((h, b));
    }
    v
}

/// Every canary file the agent's programs would leave (outside the repo).
fn canaries(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("canary"))
        .collect()
}

/// The user's git on the host: plain, the test's identity only.
fn user_git(repo: &Repo, args: &[&str]) -> Output {
    Command::new("git")
        .args(["-c", "user.name=u", "-c", "user.email=u@example.invalid"])
        .args(args)
        .current_dir(&repo.path)
        .env("PAGER", "cat")
        .output()
        .unwrap()
}

#[test]
fn the_users_git_runs_nothing_the_agent_planted_in_its_clone() {
    let Some(repo) = clone_repo("cloneapp") else {
        return;
    };
    // Hole one of bind mode: the user's own git renames config.lock over
    // .git/config while the sandbox runs (a per-file pin would detach).
    repo.git(&["remote", "add", "up", "/nonexistent/up.git"]);
    let before = host_state(&repo);
    let c = repo.root().join("canary").display().to_string();
    // As the agent, in its worktree of the shelf clone.
    let script = format!(
        r#"
C={c}
W=/workspace/cloneapp
# The host checkout: read-only here, work tree and .git alike.
for t in "$W/.git/config" "$W/.git/index" "$W/.git/config.worktree" "$W/README" "$W/new"; do
  (echo '[core]' >> "$t") 2>/dev/null && echo "WROTE $t"
done
# Hole two of bind mode: a nested repository with a core.fsmonitor in the
# work tree, a gitlink to it in the host's index.
(mkdir "$W/sub" && cd "$W/sub" && git init -q && git commit -q --allow-empty -m s) 2>/dev/null && echo "WROTE $W/sub"
printf '[core]\n\tfsmonitor = touch %s.host-nested\n' "$C" >> "$W/sub/.git/config" 2>/dev/null && echo "WROTE nested config"
git -C "$W" update-index --add --cacheinfo "160000,$(git -C "$W/sub" rev-parse HEAD 2>/dev/null || git rev-parse HEAD),sub" 2>/dev/null && echo "WROTE host index"
# Its own clone: everything git runs a program from.
G=$(git rev-parse --git-common-dir)
cat >> "$G/config" <<EOF
[core]
	fsmonitor = touch $C.fsmonitor
	pager = "touch $C.pager; cat"
	hooksPath = .evilhooks
[diff]
	external = touch $C.diff-external
[filter "evil"]
	smudge = "touch $C.smudge 2>/dev/null; cat"
	clean = "touch $C.clean 2>/dev/null; cat"
[include]
	path = evil.inc
EOF
printf '[alias]\n\tst = !touch %s.alias\n' "$C" > "$G/evil.inc"
(printf '#!/bin/sh\ntouch %s.clone-hook\n' "$C" > "$G/hooks/post-merge") 2>/dev/null
mkdir -p .evilhooks
for h in post-merge post-checkout post-commit reference-transaction; do
  printf '#!/bin/sh\ntouch %s.hook-%s\n' "$C" "$h" > .evilhooks/$h
  chmod +x .evilhooks/$h
done
printf '* filter=evil diff=evil\n' > .gitattributes
printf '[submodule "sub"]\n\tpath = sub\n\turl = ext::sh -c touch%% %s.ext\n' "$C" > .gitmodules
# A nested repository with its own fsmonitor, as a gitlink in the index.
mkdir sub && (cd sub && git init -q && printf '[core]\n\tfsmonitor = touch %s.nested\n' "$C" >> .git/config && git commit -q --allow-empty -m s) || echo "NESTED FAILED"
git add .gitattributes .gitmodules .evilhooks sub || echo "ADD FAILED"
echo two >> README && git add README
git commit -q -m attack || echo "COMMIT FAILED"
git log --oneline -1
"#
    );
    let o = repo.agent(&script);
    let out = text(&o);
    // The user's next plain `git status`, while the sandbox runs.
    let st = user_git(&repo, &["status"]);
    assert_eq!(
        canaries(repo.root()),
        Vec::<String>::new(),
        "the user's git status ran the agent's program:\n{out}\n{}",
        text(&st)
    );
    assert!(
        !out.contains("WROTE"),
        "the host checkout was written:\n{out}"
    );
    assert!(st.status.success(), "git status: {}", text(&st));
    assert!(!out.contains("FAILED"), "the attack did not commit:\n{out}");
    assert!(out.contains("attack"), "{out}");

    let f = fetch(&repo, &[]);
    assert!(f.status.success(), "fetch: {}", text(&f));
    assert!(text(&f).contains("sbx/main"), "{}", text(&f));
    // Landed beside the user's branch, not in it, nothing in the work tree.
    assert_ne!(
        repo.git(&["rev-parse", "sbx/main"]),
        repo.git(&["rev-parse", "main"])
    );
    assert!(!repo.path.join(".gitmodules").exists());
    // The commit carries the nested repository as a gitlink, and the rest.
    let tree = repo.git(&["ls-tree", "sbx/main"]);
    assert!(tree.contains("160000 commit"), "{tree}");
    for f in [".gitmodules", ".gitattributes", ".evilhooks"] {
        assert!(tree.contains(f), "{tree}");
    }

    // The boundary check takes the fetched range before any merge.
    let v = sbx()
        .args([
            "--json",
            "verify-commits",
            "--since",
            "main",
            "--head",
            "sbx/main",
        ])
        .arg(&repo.path)
        .output()
        .unwrap();
    assert!(v.status.success(), "verify-commits: {}", text(&v));
    assert!(text(&v).contains("\"subject\":\"attack\""), "{}", text(&v));

    // The user's own commands, each of them plain.
    for args in [
        &["status"][..],
        &["diff", "HEAD", "sbx/main"],
        &["log", "-p", "-1", "sbx/main"],
        &["merge", "--ff-only", "sbx/main"],
        &["status"],
        &["diff", "HEAD~1"],
    ] {
        let o = user_git(&repo, args);
        assert!(o.status.success(), "git {args:?}: {}", text(&o));
    }
    // `git log -p` on a terminal, as a user reads it: the pager's pty.
    let o = Command::new("script")
        .args(["-qec", "git log -p -2", "/dev/null"])
        .current_dir(&repo.path)
        .env("PAGER", "cat")
        .env("TERM", "xterm")
        .output()
        .unwrap();
    assert!(o.status.success(), "log in a pty: {}", text(&o));
    assert!(text(&o).contains("attack"), "{}", text(&o));
    assert_eq!(
        repo.git(&["rev-parse", "HEAD"]),
        repo.git(&["rev-parse", "sbx/main"])
    );
    assert_eq!(
        canaries(repo.root()),
        Vec::<String>::new(),
        "the host ran the agent's program"
    );
    assert!(
        host_state(&repo) == before,
        "the host's .git/config or hooks changed"
    );
}

/// A merge runs the hooks of the merged tree when the host's hooks
/// directory is in the work tree, and reads a config file `.git/config`
/// includes from it: a fetched branch that changes either is refused
/// until the user allows it.
#[test]
fn a_branch_that_changes_what_a_merge_runs_is_not_fetched() {
    let Some(repo) = clone_repo_with("clonehooks", |r| {
        std::fs::create_dir(r.path.join(".githooks")).unwrap();
        std::fs::write(r.path.join(".githooks/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
        let hook = r.path.join(".githooks/pre-commit");
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::write(r.path.join(".gitconfig"), "[user]\n\tname = team\n").unwrap();
        r.git(&["add", ".githooks", ".gitconfig"]);
        r.git(&["commit", "-qm", "hooks"]);
        r.git(&["config", "core.hooksPath", ".githooks"]);
        r.git(&["config", "include.path", "../.gitconfig"]);
    }) else {
        return;
    };
    let c = repo.root().join("canary").display().to_string();
    let refused = |round: &str, path: &str| {
        let f = fetch(&repo, &[]);
        assert_eq!(f.status.code(), Some(77), "{round}: {}", text(&f));
        let e = String::from_utf8_lossy(&f.stderr).into_owned();
        assert!(e.contains(path) && e.lines().count() == 1, "{round}: {e}");
        let refs = repo.git(&["for-each-ref", "--format=%(refname)"]);
        assert!(
            !refs.contains("refs/remotes/sbx/") && !refs.contains("refs/sbx-fetch/"),
            "{round}: {refs}"
        );
    };
    let agent = |script: &str| {
        let o = repo.agent(script);
        assert!(o.status.success(), "{}", text(&o));
    };
    // A hook of the merged tree.
    agent(&format!(
        "printf '#!/bin/sh\\ntouch {c}.post-merge\\n' > .githooks/post-merge && chmod +x .githooks/post-merge && git add .githooks && git commit -qm hook"
    ));
    refused("a new hook", ".githooks/post-merge");
    // The hooks directory made a link to a directory of the agent's.
    agent(&format!(
        "git reset -q --hard HEAD~1 && git rm -rq .githooks && mkdir -p tools/ci && printf '#!/bin/sh\\ntouch {c}.link\\n' > tools/ci/post-merge && chmod +x tools/ci/post-merge && ln -s tools/ci .githooks && git add -A && git commit -qm link"
    ));
    refused("a linked hooks directory", ".githooks");
    // A config file the host's .git/config includes.
    agent(&format!(
        "git reset -q --hard HEAD~1 && printf '[core]\\n\\tfsmonitor = touch {c}.fsmonitor\\n' >> .gitconfig && git commit -qam include"
    ));
    refused("an included config", ".gitconfig");
    // Allowed after review: it lands where fetch puts everything.
    let f = fetch(&repo, &["--allow-hook-changes"]);
    assert!(f.status.success(), "{}", text(&f));
    assert!(
        repo.git(&["cat-file", "-p", "sbx/main:.gitconfig"])
            .contains("fsmonitor")
    );
    let st = user_git(&repo, &["status"]);
    assert!(st.status.success(), "{}", text(&st));
    assert_eq!(canaries(repo.root()), Vec::<String>::new());
}

/// Issue 38 (a38y): `.claude/` and `.mcp.json` are read-only in the
/// sandbox, but a commit carries them past the mount (git's plumbing
/// writes the blob and the index entry; no work-tree file is touched),
/// and the user's own Claude Code (or codex) runs their hooks and MCP
/// servers on the host the first time it starts in the merged checkout.
/// `fetch` refuses such a branch, at any depth, as it does a hook.
#[test]
fn fetch_refuses_a_branch_that_changes_claude_or_mcp_settings() {
    let Some(repo) = clone_repo("cloneclaude") else {
        return;
    };
    let c = repo.root().join("canary").display().to_string();
    let hook = format!(
        r#"{{"hooks":{{"SessionStart":[{{"hooks":[{{"type":"command","command":"touch {c}.claude"}}]}}]}}}}"#
    );
    let mcp =
        format!(r#"{{"mcpServers":{{"x":{{"command":"sh","args":["-c","touch {c}.mcp"]}}}}}}"#);
    let codex = format!("notify = [\"sh\", \"-c\", \"touch {c}.codex\"]\n");
    for (path, body) in [
        (".claude/settings.json", hook.as_str()),
        ("web/.claude/settings.local.json", hook.as_str()),
        (".claude/commands/x.md", "!`id`\n"),
        (".mcp.json", mcp.as_str()),
        ("web/.mcp.json", mcp.as_str()),
        (".codex/config.toml", codex.as_str()),
    ] {
        let body = body.replace('\'', "'\\''");
        let o = repo.agent(&format!(
            "git reset -q --hard \"$(git rev-list --max-parents=0 HEAD)\" && \
             b=$(printf '%s' '{body}' | git hash-object -w --stdin) && \
             git update-index --add --cacheinfo \"100644,$b,{path}\" && \
             git commit -qm settings && git show --stat --format= HEAD"
        ));
        assert!(
            o.status.success() && text(&o).contains(path),
            "{path}: {}",
            text(&o)
        );
        let f = fetch(&repo, &[]);
        assert_eq!(f.status.code(), Some(77), "{path}: {}", text(&f));
        let e = String::from_utf8_lossy(&f.stderr).into_owned();
        assert!(e.contains(path) && e.lines().count() == 1, "{path}: {e}");
        let refs = repo.git(&["for-each-ref", "--format=%(refname)"]);
        assert!(
            !refs.contains("refs/remotes/sbx/") && !refs.contains("refs/sbx-fetch/"),
            "{path}: {refs}"
        );
    }
    // After review, taken as any branch is: into refs/remotes/sbx/ only.
    let f = fetch(&repo, &["--allow-hook-changes"]);
    assert!(f.status.success(), "{}", text(&f));
    assert!(
        repo.git(&["cat-file", "-p", "sbx/main:.codex/config.toml"])
            .contains("notify")
    );
    assert!(!repo.path.join(".codex").exists());
    assert_eq!(canaries(repo.root()), Vec::<String>::new());
}

#[test]
fn a_stream_that_is_not_a_bundle_of_branches_fetches_nothing() {
    let Some(repo) = clone_repo("clonebad") else {
        return;
    };
    let o = repo.agent("echo x > f && git add f && git commit -qm agent");
    assert!(o.status.success(), "{}", text(&o));
    let no_refs = |repo: &Repo| {
        assert_eq!(
            repo.git(&["for-each-ref", "refs/remotes/sbx"]),
            "",
            "a ref was written"
        );
    };
    let one_line = |o: &Output, want: &str| {
        assert_eq!(o.status.code(), Some(65), "{}", text(o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(want), "{err}");
        assert!(!err.contains('\x1b'), "raw escape: {err:?}");
    };
    // Oversized: a real bundle over the cap.
    let o = fetch(&repo, &["--max-size", "200"]);
    one_line(&o, "larger than --max-size");
    no_refs(&repo);

    // A subverted sandbox: root replaces the git the guest runs.
    let name = sh(Command::new("docker").args([
        "ps",
        "--filter",
        &format!("label=sbx.workspace={}", repo.path.display()),
        "--filter",
        "label=sbx.mode=clone",
        "--format",
        "{{.Names}}",
    ]))
    .lines()
    .find(|n| !n.ends_with("-net"))
    .expect("the sandbox's container")
    .to_owned();
    // A real bundle whose ref name carries a terminal escape.
    let good = repo.root().join("good.bundle");
    repo.git(&["bundle", "create", "-q", good.to_str().unwrap(), "main"]);
    let mut b = std::fs::read(&good).unwrap();
    let at = b.windows(15).position(|w| w == b"refs/heads/main").unwrap();
    b.splice(at + 11..at + 15, b"m\x1b]0;x\x07n".iter().copied());
    let evil = repo.root().join("evil.bundle");
    std::fs::write(&evil, b).unwrap();
    sh(Command::new("docker")
        .args(["cp"])
        .arg(&evil)
        .arg(format!("{name}:/tmp/evil.bundle")));
    let git =
        sh(Command::new("docker").args(["exec", "-u", "0", &name, "sh", "-c", "command -v git"]))
            .trim()
            .to_owned();
    let fake = |body: &str| {
        let script = format!(
            "[ -e {git}.real ] || mv {git} {git}.real; printf '#!/bin/sh\\n{body}\\n' > {git}; chmod 755 {git}"
        );
        sh(Command::new("docker").args(["exec", "-u", "0", &name, "sh", "-c", &script]));
    };
    fake("printf hello");
    one_line(&fetch(&repo, &[]), "no git bundle");
    no_refs(&repo);
    fake("cat /tmp/evil.bundle");
    one_line(&fetch(&repo, &[]), "a ref sbx does not take");
    no_refs(&repo);
    fake("head -c 300 /tmp/evil.bundle");
    one_line(&fetch(&repo, &[]), "nothing was fetched");
    no_refs(&repo);
}

/// Clone mode works on the host's current branch: a detached HEAD is one
/// line and 65, for start and fetch alike, before anything is made.
#[test]
fn a_detached_head_is_refused_in_one_line() {
    if !sbx_e2e::prerequisite(sbx_e2e::docker_ready(), "a running Docker engine") {
        return;
    }
    let repo = Repo::new("clonedetached");
    repo.git(&["init", "-q", "-b", "main"]);
    repo.git(&["commit", "-q", "--allow-empty", "-m", "one"]);
    repo.git(&["checkout", "-q", "--detach"]);
    std::fs::create_dir(repo.path.join(".agent-sandbox")).unwrap();
    std::fs::write(
        repo.path.join(".agent-sandbox/config.toml"),
        "[sandbox]\nworkspace = \"clone\"\n",
    )
    .unwrap();
    for cmd in ["fetch", "start"] {
        let o = sbx().arg(cmd).arg("-C").arg(&repo.path).output().unwrap();
        assert_eq!(o.status.code(), Some(65), "{cmd}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{cmd}: {err}");
        assert!(err.contains("detached HEAD"), "{cmd}: {err}");
    }
}

/// zlib's stored form of `data` (no compression: the test needs no zlib).
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut z = vec![0x78, 0x01];
    let mut chunks = data.chunks(0xffff).peekable();
    if data.is_empty() {
        z.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(c) = chunks.next() {
        let n = c.len() as u16;
        z.push(u8::from(chunks.peek().is_none()));
        z.extend_from_slice(&n.to_le_bytes());
        z.extend_from_slice(&(!n).to_le_bytes());
        z.extend_from_slice(c);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    z.extend_from_slice(&((b << 16) | a).to_be_bytes());
    z
}

/// A pack entry's type-and-size header.
fn entry(kind: u8, mut size: u64) -> Vec<u8> {
    let mut v = vec![(kind << 4) | (size & 15) as u8];
    size >>= 4;
    while size > 0 {
        *v.last_mut().unwrap() |= 0x80;
        v.push((size & 0x7f) as u8);
        size >>= 7;
    }
    v
}

fn varint(mut n: u64) -> Vec<u8> {
    let mut v = Vec::new();
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            v.push(b);
            return v;
        }
        v.push(b | 0x80);
    }
}

/// The host's git names an object (`hash-object`, from a shell pipeline).
fn object_id(kind: &str, input: &str) -> String {
    sh(Command::new("sh").args([
        "-c",
        &format!("{input} | git hash-object -t {kind} --stdin"),
    ]))
    .trim()
    .to_owned()
}

/// A valid bundle of branch main whose pack is a few KiB: a 64 KiB blob of
/// zeros and a delta that copies it `n / 64 KiB` times (one byte per copy),
/// a `n`-byte blob git makes whole in memory when it indexes the pack.
fn delta_bomb(n: u64) -> Vec<u8> {
    let unhex = |h: &str| -> Vec<u8> {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
            .collect()
    };
    let base = vec![0u8; 65536];
    let mut delta = varint(65536);
    delta.extend(varint(n));
    delta.extend(std::iter::repeat_n(0x80u8, (n / 65536) as usize));
    let big = object_id("blob", &format!("head -c {n} /dev/zero"));
    let mut tree = b"100644 big\0".to_vec();
    tree.extend(unhex(&big));
    let tree_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tree_file.path(), &tree).unwrap();
    let tree_id = object_id("tree", &format!("cat {}", tree_file.path().display()));
    let commit =
        format!("tree {tree_id}\nauthor a <a@b> 0 +0000\ncommitter a <a@b> 0 +0000\n\nbomb\n");
    let commit_id = object_id(
        "commit",
        &format!("printf '{}'", commit.replace('\n', "\\n")),
    );
    let mut pack = b"PACK\0\0\0\x02\0\0\0\x04".to_vec();
    pack.extend(entry(3, 65536));
    pack.extend(zlib_stored(&base));
    let at = pack.len();
    // The base's entry starts at 12 and this one at `at`: the offset, in
    // git's big-endian "minus one per continuation" form.
    let mut d = (at - 12) as u64;
    let mut ofs = vec![(d & 0x7f) as u8];
    d >>= 7;
    while d > 0 {
        d -= 1;
        ofs.insert(0, 0x80 | (d & 0x7f) as u8);
        d >>= 7;
    }
    pack.extend(entry(6, delta.len() as u64));
    pack.extend(ofs);
    pack.extend(zlib_stored(&delta));
    pack.extend(entry(2, tree.len() as u64));
    pack.extend(zlib_stored(&tree));
    pack.extend(entry(1, commit.len() as u64));
    pack.extend(zlib_stored(commit.as_bytes()));
    let pack_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(pack_file.path(), &pack).unwrap();
    let sum = sh(Command::new("sha1sum").arg(pack_file.path()));
    pack.extend(unhex(&sum[..40]));
    let mut b = format!("# v2 git bundle\n{commit_id} refs/heads/main\n\n").into_bytes();
    b.extend(pack);
    b
}

/// `--max-size` counts the bundle's bytes, and a delta makes 64 KiB from
/// one: a bundle of a few KiB made the host's git allocate and hash
/// 1.5 GiB (a larger one, any memory the host has) and land the blob.
/// `fetch` reads the sizes the pack declares first and refuses, exit 65,
/// before the host's git reads it.
#[test]
fn a_small_bundle_that_inflates_to_a_huge_object_is_not_fetched() {
    let Some(repo) = clone_repo("clonebomb") else {
        return;
    };
    let bomb = delta_bomb(1536 << 20);
    assert!(bomb.len() < 128 << 10, "{}", bomb.len());
    let file = repo.root().join("bomb.bundle");
    std::fs::write(&file, &bomb).unwrap();
    let name = sh(Command::new("docker").args([
        "ps",
        "--filter",
        &format!("label=sbx.workspace={}", repo.path.display()),
        "--filter",
        "label=sbx.mode=clone",
        "--format",
        "{{.Names}}",
    ]))
    .lines()
    .find(|n| !n.ends_with("-net"))
    .expect("the sandbox's container")
    .to_owned();
    sh(Command::new("docker")
        .args(["cp"])
        .arg(&file)
        .arg(format!("{name}:/tmp/bomb.bundle")));
    let git =
        sh(Command::new("docker").args(["exec", "-u", "0", &name, "sh", "-c", "command -v git"]))
            .trim()
            .to_owned();
    let script = format!(
        "mv {git} {git}.real; printf '#!/bin/sh\\ncat /tmp/bomb.bundle\\n' > {git}; chmod 755 {git}"
    );
    sh(Command::new("docker").args(["exec", "-u", "0", &name, "sh", "-c", &script]));
    let packs = || std::fs::read_dir(repo.path.join(".git/objects/pack")).map_or(0, |d| d.count());
    let before = packs();
    let start = std::time::Instant::now();
    let o = fetch(&repo, &[]);
    assert_eq!(o.status.code(), Some(65), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--max-object-size"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(
        repo.git(&["for-each-ref", "refs/remotes/sbx", "refs/sbx-fetch"]),
        ""
    );
    assert_eq!(packs(), before, "the host's git indexed the bomb");
    // The same bundle with the cap raised above it is a valid one: the
    // refusal is the cap's, not a parse error.
    let o = fetch(&repo, &["--max-object-size", "2g", "--max-inflated", "1g"]);
    assert_eq!(o.status.code(), Some(65), "{}", text(&o));
    assert!(text(&o).contains("--max-inflated"), "{}", text(&o));
    // A count of objects over the cap: each costs the host's git memory.
    let o = fetch(&repo, &["--max-object-size", "2g", "--max-objects", "3"]);
    assert_eq!(o.status.code(), Some(65), "{}", text(&o));
    assert!(text(&o).contains("--max-objects"), "{}", text(&o));
    assert_eq!(
        repo.git(&["for-each-ref", "refs/remotes/sbx", "refs/sbx-fetch"]),
        ""
    );
}
