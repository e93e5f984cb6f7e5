//! Issue 37: host-side sbx follows no link the agent makes. Each test is
//! the attack from inside a real sandbox as the agent, then the user's
//! command on the host as the README gives it, then a canary outside the
//! workspace checked.

use std::process::Command;

use sbx_e2e::{Repo, base_image, sbx, sh, text};

/// A git repository handed to the agent, with a canary directory beside
/// it (outside the workspace) holding `secret`.
fn repo(name: &str) -> Repo {
    let r = sbx_e2e::plain_repo(name);
    let canary = r.root().join("canary");
    std::fs::create_dir_all(&canary).unwrap();
    std::fs::write(canary.join("secret"), "host-only\n").unwrap();
    r
}

fn run(r: &Repo, args: &[&str]) -> std::process::Output {
    sbx().args(args).arg(&r.path).output().unwrap()
}

fn canary_untouched(r: &Repo) {
    let c = r.root().join("canary");
    let names: Vec<_> = std::fs::read_dir(&c)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["secret"], "the canary directory changed");
    assert_eq!(
        std::fs::read_to_string(c.join("secret")).unwrap(),
        "host-only\n"
    );
}

/// Route 1: `.husky -> <host dir>` and `.agent-precommit/user-context.json
/// -> <host file>`, made by the agent, then `sbx-run restart`: the host
/// binds neither target into the sandbox and creates nothing there.
#[test]
fn protected_links_made_by_the_agent_reach_nothing_on_the_host() {
    if !base_image() {
        return;
    }
    let r = repo("hp-protected");
    r.give_to_agent();
    r.start();
    let canary = r.root().join("canary");
    let attack = format!(
        "rmdir .husky 2>/dev/null; ln -s {c} .husky; \
         rmdir .agent-precommit 2>/dev/null; mkdir -p .agent-precommit; \
         ln -s {c}/secret .agent-precommit/user-context.json; true",
        c = canary.display()
    );
    // Both are masked (missing at the start): the agent cannot plant them.
    let o = r.exec(&attack);
    assert!(
        r.exec("test -L .husky || test -L .agent-precommit/user-context.json")
            .status
            .code()
            == Some(1),
        "a link was planted: {}",
        text(&o)
    );
    let o = run(&r, &["restart"]);
    assert!(o.status.success(), "restart: {}", text(&o));
    let seen = r.exec("cat .husky/secret .agent-precommit/user-context.json 2>&1; ls -a .husky");
    assert!(!text(&seen).contains("host-only"), "{}", text(&seen));
    canary_untouched(&r);
}

/// A protected path that is a link on the host at start (made by an
/// older sbx's sandbox) is refused with one line naming it.
#[test]
fn a_protected_path_that_is_a_link_is_refused_at_start() {
    if !base_image() {
        return;
    }
    let r = repo("hp-linked");
    std::os::unix::fs::symlink(r.root().join("canary"), r.path.join(".husky")).unwrap();
    r.give_to_agent();
    sh(sbx().args(["-q", "init"]).arg(&r.path));
    let o = run(&r, &["start"]);
    assert_eq!(o.status.code(), Some(65), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains(".husky") && t.contains("symbolic link"), "{t}");
    canary_untouched(&r);
}

/// Route 3: links by secret-looking names to the read-only hook and to
/// /etc/hostname: the guest's watcher, and the next start's scan, mask
/// neither target.
#[test]
fn a_secret_named_link_blanks_nothing_it_names() {
    if !base_image() {
        return;
    }
    let r = repo("hp-masklink");
    r.hook("pre-commit", "#!/bin/sh\n# HOOK\nexit 0\n");
    r.give_to_agent();
    r.start();
    let o = r.exec("ln -s .git/hooks/pre-commit hook.key && ln -s /etc/hostname host.key");
    assert!(o.status.success(), "{}", text(&o));
    // A real secret appears too, written by the user: the guest's open
    // guard refuses the agent's own opens of a secret name no mask covers.
    std::fs::write(r.path.join("real.key"), "k\n").unwrap();
    let check = |when: &str| {
        // The watcher masks within a second: wait well past it, until the
        // real secret reads as empty.
        let o = r.exec(
            "for i in $(seq 1 60); do [ -s real.key ] || break; sleep 0.5; done; \
             test ! -s real.key && grep -q HOOK .git/hooks/pre-commit && test -s /etc/hostname",
        );
        assert!(o.status.success(), "{when}: {}", text(&o));
    };
    check("after the watcher");
    let o = run(&r, &["restart"]);
    assert!(o.status.success(), "restart: {}", text(&o));
    check("after restart");
    assert!(
        std::fs::read_to_string(r.path.join(".git/hooks/pre-commit"))
            .unwrap()
            .contains("HOOK")
    );
}

/// Route 4: `.mcp.json -> <host file>`. Since issue 38 `.mcp.json` is
/// read-only in the sandbox: the agent can neither link nor write it, and
/// `sbx-run agent` with [agent.mcp] leaves the user's own file byte for
/// byte (sbx's servers reach the CLI as a JSON string).
#[test]
fn sbx_run_agent_writes_no_mcp_json_through_a_link() {
    if !base_image() {
        return;
    }
    let r = repo("hp-mcp");
    std::fs::create_dir_all(r.path.join(".agent-sandbox")).unwrap();
    std::fs::write(
        r.path.join(".agent-sandbox/config.toml"),
        "[agent.mcp.echo]\ncommand = [\"cat\"]\n",
    )
    .unwrap();
    let mine = r#"{"mcpServers":{"mine":{"command":"true"}}}"#;
    let mcp = r.path.join(".mcp.json");
    std::fs::write(&mcp, mine).unwrap();
    r.give_to_agent();
    let o = run(&r, &["start"]);
    assert!(o.status.success(), "start: {}", text(&o));
    let canary = r.root().join("canary/secret");
    for attack in [
        format!("rm -f .mcp.json && ln -s {} .mcp.json", canary.display()),
        "mv .mcp.json x".to_owned(),
        "echo '{}' > .mcp.json".to_owned(),
    ] {
        let o = r.exec(&attack);
        assert!(!o.status.success(), "{attack}: {}", text(&o));
    }
    let _ = sbx()
        .args(["agent", "-C"])
        .arg(&r.path)
        .arg("hello")
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .output()
        .unwrap();
    canary_untouched(&r);
    assert_eq!(std::fs::read_to_string(&mcp).unwrap(), mine);
}

/// Route 5: project A's agent forges a login dated 2100; after `sbx-run
/// stop` of A, project B's new sandbox does not get it, and neither does
/// the machine's store.
#[test]
fn a_sandbox_login_never_reaches_the_store_or_another_project() {
    if !base_image() {
        return;
    }
    let store = format!("sbx-test-store-{}", std::process::id());
    let with_store = |args: &[&str], r: &Repo| {
        sbx()
            .args(args)
            .arg(&r.path)
            .env("SBX_CLAUDE_VOLUME", &store)
            .output()
            .unwrap()
    };
    let a = repo("hp-login-a");
    a.give_to_agent();
    for args in [&["-q", "init"][..], &["start"][..]] {
        let o = with_store(args, &a);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    let o = a.exec(
        "printf '{\"forged\":\"by-a\"}' > ~/.claude/.credentials.json && \
         touch -d 2100-01-01 ~/.claude/.credentials.json",
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = with_store(&["stop"], &a);
    assert!(o.status.success(), "stop: {}", text(&o));
    let b = repo("hp-login-b");
    b.give_to_agent();
    for args in [&["-q", "init"][..], &["start"][..]] {
        let o = with_store(args, &b);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    let creds = |r: &Repo| text(&r.exec("cat ~/.claude/.credentials.json 2>/dev/null; true"));
    assert!(
        !creds(&b).contains("by-a"),
        "B got A's login: {}",
        creds(&b)
    );

    // Sharing is the user's word: `sbx-run login --share -C A`, then B's
    // next start has it.
    let o = with_store(&["login", "--share", "-C"], &a);
    assert!(o.status.success(), "login --share: {}", text(&o));
    let o = with_store(&["restart"], &b);
    assert!(o.status.success(), "restart B: {}", text(&o));
    assert!(creds(&b).contains("by-a"), "B: {}", creds(&b));

    // A new machine login (what `sbx-run login` writes into the store)
    // replaces a workspace's own at its next start, whatever its dates.
    let image = format!("agent-sandbox-base:{}", sbx_run::image::default_base_tag());
    sh(Command::new("docker")
        .args(["run", "--rm", "--mount"])
        .arg(format!("type=volume,source={store},target=/s"))
        .args(["--entrypoint", "/bin/sh", &image, "-c"])
        .arg("printf '{\"user\":\"login\"}' > /s/.credentials.json"));
    let o = with_store(&["start"], &a);
    assert!(o.status.success(), "start A: {}", text(&o));
    assert!(creds(&a).contains("user"), "A: {}", creds(&a));
    let _ = with_store(&["-q", "rm", "--volumes"], &b);
    let _ = with_store(&["-q", "rm", "--volumes"], &a);
    let _ = Command::new("docker")
        .args(["volume", "rm", &store])
        .output();
}

/// Issue 37, diagnostics: a name the agent makes with a newline in it
/// must not print a second `sbx-run:` line of the agent's making. The
/// agent makes `x\nsbx-run: FORGED…/<not UTF-8>.key` (a secret name docker
/// cannot be given, so `start` refuses and names it) and a tree `cp`
/// refuses entries of; the user restarts and copies out. Every line on
/// stderr is sbx-run's own.
#[test]
fn agent_names_cannot_forge_a_diagnostic_line() {
    if !base_image() {
        return;
    }
    let r = repo("hp-forge");
    r.give_to_agent();
    r.start();
    let o = r.exec(
        "d=\"$(printf 'x\\nsbx-run: FORGED all checks passed')\"; mkdir -p \"out/$d\" \"$d\"; \
         touch \"$d/$(printf '\\377').key\"; ln -s /etc/passwd \"out/$d/l\"",
    );
    assert!(o.status.success(), "{}", text(&o));
    let forged = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stderr)
            .lines()
            .any(|l| l.starts_with("sbx-run: FORGED"))
    };
    let dest = r.root().join("dest");
    std::fs::create_dir_all(&dest).unwrap();
    let o = sbx()
        .args(["cp", "-C"])
        .arg(&r.path)
        .arg(":/workspace/hp-forge/out")
        .arg(&dest)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(!forged(&o), "cp: {}", text(&o));
    let o = run(&r, &["restart"]);
    assert_eq!(o.status.code(), Some(65), "{}", text(&o));
    assert!(text(&o).contains("\\nsbx-run: FORGED"), "{}", text(&o));
    assert!(!forged(&o), "restart: {}", text(&o));
}
