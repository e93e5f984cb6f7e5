//! Issues 36 and 37, the host boundary's leftovers: each test is the
//! attack from inside a real sandbox as the agent, then the user's command
//! on the host, then a canary checked.

use std::process::Command;

use sbx_e2e::{Repo, base_image, sbx, sh, text};

use sbx_e2e::plain_repo as repo;

/// A volume removed when dropped.
struct Volume(String);

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", &self.0])
            .output();
    }
}

fn image() -> String {
    format!("agent-sandbox-base:{}", sbx_run::image::default_base_tag())
}

/// Run `script` as root in a throwaway container with `vol` at /v.
fn in_volume(vol: &str, script: &str) -> String {
    let o = Command::new("docker")
        .args(["run", "--rm", "--user", "0", "--mount"])
        .arg(format!("type=volume,source={vol},target=/v"))
        .args(["--entrypoint", "/bin/sh", &image(), "-c", script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{script}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Item 2: the helper that loads the machine's login into a workspace
/// (used without root, and with SBX_LOGIN_VIA_HELPER=1) wrote its copy
/// through `~/.claude/.credentials.json.sbx-$$`, a name the agent can
/// guess (`$$` is PID 1 in the helper). The agent plants a link there to
/// the Codex store's `auth.json`, as the helper container sees it, and
/// removes its own login so the next start loads one. The user restarts:
/// the Codex store (the canary) must be unchanged, and the workspace gets
/// the Claude login as a plain file.
#[test]
fn the_login_helper_follows_no_link_planted_at_its_temp_name() {
    if !base_image() {
        return;
    }
    let id = std::process::id();
    let claude = Volume(format!("sbx-test-h37z-claude-{id}"));
    let codex = Volume(format!("sbx-test-h37z-codex-{id}"));
    // The agent's, as `sbx-run login` leaves them.
    in_volume(
        &claude.0,
        "printf '{\"user\":\"login\"}' > /v/.credentials.json && chown -R 1000:1000 /v",
    );
    in_volume(
        &codex.0,
        "printf '{\"codex\":\"canary\"}' > /v/auth.json && chown -R 1000:1000 /v",
    );
    let r = repo("h37z-login-tmp");
    r.give_to_agent();
    let with_stores = |args: &[&str]| {
        sbx()
            .args(args)
            .arg(&r.path)
            .env("SBX_CLAUDE_VOLUME", &claude.0)
            .env("SBX_CODEX_VOLUME", &codex.0)
            .env("SBX_LOGIN_VIA_HELPER", "1")
            .output()
            .unwrap()
    };
    for args in [&["-q", "init"][..], &["start"][..]] {
        let o = with_stores(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    let o = r.exec(
        "cat ~/.claude/.credentials.json && rm ~/.claude/.credentials.json && \
         for p in 1 2 3 4 5 6 7 8 9 10; do ln -s /s/codex/auth.json ~/.claude/.credentials.json.sbx-$p; done",
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("login"),
        "first start loaded: {}",
        text(&o)
    );
    let o = with_stores(&["restart"]);
    assert!(o.status.success(), "restart: {}", text(&o));
    assert_eq!(
        in_volume(&codex.0, "cat /v/auth.json"),
        "{\"codex\":\"canary\"}",
        "the Codex store was written through the agent's link"
    );
    let o = r.exec("test -f ~/.claude/.credentials.json && test ! -L ~/.claude/.credentials.json && cat ~/.claude/.credentials.json && ls -A ~/.claude");
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("\"user\""), "{}", text(&o));
    let o = r.exec("stat -c '%a %U' ~/.claude/.credentials.json");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "600 agent\n",
        "{}",
        text(&o)
    );
    // No temporary directory is left behind.
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(!out.lines().any(|l| l.starts_with(".sbx-")), "{out}");
    let _ = with_stores(&["-q", "rm", "--volumes"]);
}

/// Item 5: sbx holds git's configuration and hooks, but what a hook runs
/// from the work tree (`npx lint-staged`, `make lint`, `./scripts/x`) is
/// repository content the agent writes in bind mode, which the user's own
/// `git commit` on the host runs. `start` says so in one line, once per
/// set of hooks, when a recorded hook runs such a tool; a plain hook gets
/// no line.
#[test]
fn start_says_once_that_a_hook_runs_work_tree_tools() {
    if !base_image() {
        return;
    }
    let line = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stderr)
            .lines()
            .filter(|l| l.contains("from the work tree, which the agent writes"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let hook = |r: &Repo, text: &str| {
        let p = r.path.join(".git/hooks/pre-commit");
        std::fs::write(&p, text).unwrap();
        sh(Command::new("chmod").arg("755").arg(&p));
    };
    let start = |r: &Repo, args: &[&str]| {
        let o = sbx().args(args).arg(&r.path).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        o
    };

    let lint = repo("h37z-hook-lint");
    hook(&lint, "#!/bin/sh\n# checks staged files\nnpx lint-staged\n");
    lint.give_to_agent();
    start(&lint, &["-q", "init"]);
    let o = start(&lint, &["start"]);
    let said = line(&o);
    assert_eq!(said.len(), 1, "one line: {}", text(&o));
    assert!(
        said[0].contains("pre-commit")
            && said[0].contains("npx")
            && said[0].contains("verify-commits"),
        "{}",
        said[0]
    );
    // Once: the next start with the same hooks says nothing.
    let o = start(&lint, &["restart"]);
    assert!(line(&o).is_empty(), "said again: {}", text(&o));
    let _ = sbx()
        .args(["-q", "rm", "--volumes"])
        .arg(&lint.path)
        .output();

    let plain = repo("h37z-hook-plain");
    hook(
        &plain,
        "#!/bin/sh\n# make sure nothing is staged that should not be\ngit diff --cached --check\n",
    );
    plain.give_to_agent();
    start(&plain, &["-q", "init"]);
    let o = start(&plain, &["start"]);
    assert!(line(&o).is_empty(), "a plain hook: {}", text(&o));
    let _ = sbx()
        .args(["-q", "rm", "--volumes"])
        .arg(&plain.path)
        .output();
}

/// Item 3: why a swap cannot reach `checkout`'s provisioning container
/// without root (where `.git` is given to docker by name) or a secret's
/// mask: in every running sandbox of the workspace `.git` (a pinned
/// parent of `.git/hooks`) and each masked secret are mount points, which
/// rename(2) and renameat2's exchange refuse (EBUSY). The agent tries to
/// put a link to another repository in `.git`'s place and one in
/// `.env`'s; both fail, and the user's `checkout` provisions from the
/// workspace's own repository.
#[test]
fn the_agent_cannot_swap_git_or_a_masked_secret_for_a_link() {
    if !base_image() {
        return;
    }
    let r = sbx_e2e::attack_repo("h37z-swap", &["-qm", "mine"], &[".env"], &[]);
    r.git(&["update-ref", "refs/remotes/origin/main", "HEAD"]);
    r.git(&[
        "symbolic-ref",
        "refs/remotes/origin/HEAD",
        "refs/remotes/origin/main",
    ]);
    std::fs::write(r.path.join(".env"), "API_KEY=SECRET-h37z\n").unwrap();
    let other = r.root().join("other");
    sh(Command::new("git").args(["init", "-q"]).arg(&other));
    r.give_to_agent();
    sh(Command::new("chown").args(["-R", "1000:1000"]).arg(&other));
    for args in [&["-q", "init"][..], &["start"][..]] {
        let o = sbx().args(args).arg(&r.path).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    let swap = |name: &str| {
        format!(
            "ln -sfn {}/.git {name}.l && python3 -c 'import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); \
             r=l.renameat2(-100,b\"{name}\",-100,b\"{name}.l\",2); sys.exit(ctypes.get_errno() if r else 0)'; \
             echo exchange=$?; mv {name} {name}.moved; echo mv=$?",
            other.display()
        )
    };
    for name in [".git", ".env"] {
        let o = r.exec(&swap(name));
        let t = text(&o);
        assert!(
            t.contains("exchange=16") && t.contains("mv=1"),
            "{name}: the agent swapped or moved it: {t}"
        );
    }
    assert!(r.path.join(".git").is_dir() && !r.path.join(".git").is_symlink());
    let o = sbx()
        .args(["checkout", "-C"])
        .arg(&r.path)
        .arg("b1")
        .output()
        .unwrap();
    assert!(o.status.success(), "checkout: {}", text(&o));
    // The workspace's own commit (the other repository has none).
    let o = r.exec("cat /repo-shelf/worktrees/b1/a");
    let _ = sbx().args(["-q", "rm", "--volumes"]).arg(&r.path).output();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "1\n", "{}", text(&o));
}
