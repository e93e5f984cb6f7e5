//! Claude Code's managed settings for a `[tools]` policy: static deny
//! rules Claude applies itself, and the PreToolUse hook that asks
//! `sbx-tool-guard check` about every call (allow lists, paths, audit).

use sbx_core::config::{Config, RuleArg, ToolRule};
use serde_json::{Value, json};

/// Where Claude Code reads managed settings on Linux; sbx-run binds the
/// file there read-only, so the agent user can neither edit nor replace it.
pub const MANAGED_PATH: &str = "/etc/claude-code/managed-settings.json";
/// The checker, root-owned in the image.
pub const CHECKER: &str = "/usr/local/bin/sbx-tool-guard";

/// The managed settings for `cfg`, or `None` without a `[tools]` table.
pub fn managed(cfg: &Config, workspace: &str) -> Option<Value> {
    let tools = cfg.tools.as_ref()?;
    let mut deny: Vec<String> = Vec::new();
    let mut push = |s: String| {
        if !deny.contains(&s) {
            deny.push(s);
        }
    };
    // A bare tool name in `deny` makes Claude drop the tool from the
    // model's list: the hook would never see an attempt, and each one must
    // be logged. Bare names are the hook's (it holds under bypass
    // modes, tests/e2e/tests/tools.rs); rules with an argument are also
    // Claude's own, as a second check after the hook.
    for r in tools.disallowed.iter().filter(|r| r.arg.is_some()) {
        push(claude_rule(r, workspace));
    }
    for g in tools.deny_read.iter() {
        push(format!("Read({})", claude_path(&g.0.text, workspace)));
    }
    let command = format!("{CHECKER} check --workspace {}", quote(workspace));
    // allowManagedHooksOnly: hooks from the agent's own settings files
    // (which it can write) do not run beside ours; disableAllHooks there
    // cannot switch ours off either way (tests/e2e/tests/tools.rs).
    Some(json!({
        "allowManagedHooksOnly": true,
        "permissions": { "deny": deny },
        "hooks": {
            "PreToolUse": [{
                "matcher": "*",
                "hooks": [{ "type": "command", "command": command, "timeout": 30 }]
            }]
        },
        "env": { "SBX_TOOL_GUARD": "1" }
    }))
}

/// Where Codex reads the requirements an admin sets.
pub const CODEX_REQUIREMENTS: &str = "/etc/codex/requirements.toml";

/// Codex has no per-tool hook; what it can enforce is its sandbox mode.
/// With `read-only = true`, Codex (0.169, checked in the image) downgrades
/// `--sandbox workspace-write` to read-only and refuses
/// `--dangerously-bypass-approvals-and-sandbox`. Otherwise nothing: a
/// requirement there would refuse the bypass mode sbx's users run Codex in.
pub fn codex_requirements(cfg: &Config) -> Option<String> {
    cfg.read_only().then(|| {
        "# Written by sbx-run for [tools].read-only = true; read-only to the agent.\nallowed_sandbox_modes = [\"read-only\"]\n".to_owned()
    })
}

/// Our rule in Claude's spelling: path globs become absolute (`//` is
/// Claude's absolute-path prefix), since ours are workspace-relative.
fn claude_rule(r: &ToolRule, workspace: &str) -> String {
    match &r.arg {
        Some(RuleArg::Path(p)) => format!("{}({})", r.tool, claude_path(&p.text, workspace)),
        _ => r.to_string(),
    }
}

fn claude_path(glob: &str, workspace: &str) -> String {
    let body = glob.trim_end_matches('/');
    let body = body.strip_prefix("./").unwrap_or(body);
    let ws = workspace.trim_end_matches('/');
    let anchored = if body.contains('/') {
        body.trim_start_matches('/').to_owned()
    } else {
        format!("**/{body}")
    };
    let dir = if glob.ends_with('/') { "/**" } else { "" };
    format!("/{ws}/{anchored}{dir}")
}

fn quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn deny_rules_and_hook() {
        let cfg = sbx_core::config::parse_toml(
            "[tools]\ndisallowed = [\"Write\", \"Bash(curl:*)\", \"Read(config/*.yml)\"]\nread-only = true\ndeny-read = [\"**/.env*\", \"keys/\"]\n",
            Path::new("c.toml"),
        )
        .unwrap();
        let v = managed(&cfg, "/workspace").unwrap();
        assert_eq!(v["allowManagedHooksOnly"], true);
        assert_eq!(
            v["permissions"]["deny"],
            json!([
                "Bash(curl:*)",
                "Read(//workspace/config/*.yml)",
                "Read(//workspace/**/.env*)",
                "Read(//workspace/**/keys/**)"
            ])
        );
        assert_eq!(
            v["hooks"]["PreToolUse"][0]["hooks"][0]["command"],
            "/usr/local/bin/sbx-tool-guard check --workspace /workspace"
        );
        let none = sbx_core::config::parse_toml("", Path::new("c.toml")).unwrap();
        assert!(managed(&none, "/workspace").is_none());
    }
}
