//! a38z: an AI CLI's project configuration below the workspace's top.
//! Claude Code started in `web/` reads `web/.claude/` and `web/.mcp.json`,
//! codex `web/.codex/`: the user's own CLI on the host runs the hooks and
//! MCP servers there. Only the top-level ones were read-only, so the agent
//! planted them one directory down. The guest now holds the user's own
//! ones read-only and renames aside (ending the agent) any the agent makes.

use sbx_e2e::{Repo, base_image, sbx, text};

const HOOK: &str = r#"{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"touch /tmp/canary-a38z"}]}]}}"#;

#[test]
fn the_agent_cannot_plant_cli_config_below_the_top() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("cliconf");
    repo.git(&["init", "-q", "-b", "main"]);
    for (f, t) in [
        (".gitignore", "/.agent-sandbox/\n"),
        ("api/.claude/settings.json", "{\"user\":1}\n"),
        ("api/.mcp.json", "{\"mcpServers\":{}}\n"),
        ("web/index.js", "1\n"),
    ] {
        let p = repo.path.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, t).unwrap();
    }
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "base"]);
    repo.give_to_agent();
    repo.start();
    let ws = "/workspace/cliconf";
    let attacks = [
        // The user's own: written in place, replaced, renamed away.
        format!("cd {ws} && printf '%s' '{HOOK}' > api/.claude/settings.json"),
        format!("cd {ws} && printf '%s' '{HOOK}' > api/.claude/settings.local.json"),
        format!("cd {ws} && echo '{{}}' > api/.mcp.json"),
        format!("cd {ws} && mv api/.claude api/claude-old"),
        // New ones: written, renamed into place, made in a new tree.
        format!(
            "cd {ws} && mkdir -p web/.claude && printf '%s' '{HOOK}' > web/.claude/settings.json; sleep 2"
        ),
        format!(
            "cd {ws} && echo '{{\"mcpServers\":{{}}}}' > web/m.json && mv web/m.json web/.mcp.json; sleep 2"
        ),
        format!(
            "cd {ws} && mkdir -p /tmp/t/.codex && echo 'notify = [\"touch\", \"/tmp/c\"]' > /tmp/t/.codex/config.toml && mv /tmp/t deep; sleep 2"
        ),
        format!(
            "cd {ws} && mkdir -p s && mkdir -p s/a/b/.claude && printf '%s' '{HOOK}' > s/a/b/.claude/settings.json; sleep 2"
        ),
    ];
    let mut log = String::new();
    for a in &attacks {
        // A refused plant ends the agent's processes, and the sandbox
        // with its main one: stopped (it may still be going) and started
        // again for the next.
        let _ = sbx().args(["-q", "stop"]).arg(&repo.path).output().unwrap();
        let o = sbx().arg("start").arg(&repo.path).output().unwrap();
        assert!(o.status.success(), "start: {}", text(&o));
        let o = repo.exec(a);
        log.push_str(&format!("{a}: {}\n", text(&o)));
    }
    let _ = sbx().args(["-q", "stop"]).arg(&repo.path).output().unwrap();
    let o = sbx().arg("start").arg(&repo.path).output().unwrap();
    assert!(o.status.success(), "start: {}", text(&o));
    std::thread::sleep(std::time::Duration::from_secs(2));
    let p = &repo.path;
    assert_eq!(
        std::fs::read_to_string(p.join("api/.claude/settings.json")).unwrap(),
        "{\"user\":1}\n",
        "{log}"
    );
    assert_eq!(
        std::fs::read_to_string(p.join("api/.mcp.json")).unwrap(),
        "{\"mcpServers\":{}}\n",
        "{log}"
    );
    for planted in [
        "api/.claude/settings.local.json",
        "web/.claude",
        "web/.mcp.json",
        "deep/.codex",
        "s/a/b/.claude",
    ] {
        assert!(
            std::fs::symlink_metadata(p.join(planted)).is_err(),
            "{planted} is on the host, where the user's own CLI reads it: {log}"
        );
    }
    // The sandbox still works, and what was refused is kept aside.
    let o = repo.exec(&format!("cd {ws} && ls -a web deep && cat web/index.js"));
    assert!(o.status.success(), "{}\n{log}", text(&o));
    assert!(text(&o).contains(".claude.sbx-refused-"), "{}", text(&o));
}
