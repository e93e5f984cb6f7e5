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
    let mut env = serde_json::Map::new();
    env.insert("SBX_TOOL_GUARD".into(), "1".into());
    for v in PINNED_ENV {
        env.insert((*v).into(), "".into());
    }
    for (k, v) in PINNED_PLACES {
        env.insert((*k).into(), (*v).into());
    }
    // allowManagedHooksOnly: hooks from the agent's own settings files
    // (which it can write) do not run beside ours; disableAllHooks there
    // cannot switch ours off either way (tests/e2e/tests/tools.rs).
    Some(json!({
        "allowManagedHooksOnly": true,
        "permissions": { "deny": deny },
        "hooks": {
            "PreToolUse": [{
                "matcher": "*",
                "hooks": [hook(workspace)]
            }]
        },
        "env": env
    }))
}

/// The hook entry. Exec form (`args`): the CLI spawns the static checker
/// itself, so no shell (and no `CLAUDE_CODE_SHELL_PREFIX`, `BASH_ENV`)
/// stands between the CLI and the verdict. `onFailure: "block"`: a checker
/// that is killed, stopped past its timeout, cannot start (`RLIMIT_NPROC`)
/// or exits with anything but 0 or 2 refuses the call (Claude Code 2.1.332;
/// older CLIs ignore the key and let such a call through, so sbx-run
/// installs the version it pins: tests/e2e/tests/tools.rs).
pub fn hook(workspace: &str) -> Value {
    json!({
        "type": "command",
        "command": CHECKER,
        "args": ["check", "--workspace", workspace],
        "timeout": HOOK_TIMEOUT,
        "onFailure": "block"
    })
}

/// Seconds the CLI waits for the checker before taking it as failed.
pub const HOOK_TIMEOUT: u64 = 30;

/// Variables the agent's own settings `env` could set to take over what
/// the CLI starts (its hooks, its Bash tool's shell), set empty here too.
/// The checker does not rely on it: it is static and has no loader to
/// take over; this is for the other programs the CLI runs.
pub const PINNED_ENV: &[&str] = &[
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "LD_DEBUG_OUTPUT",
    "LD_PROFILE",
    "GCONV_PATH",
    "GLIBC_TUNABLES",
    "MALLOC_TRACE",
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "NODE_OPTIONS",
    "CLAUDE_CODE_SHELL_PREFIX",
];

/// Variables that say where the CLI's Bash tool finds the shell and the
/// startup files its snapshot reads, set to the image's own: the agent's
/// settings `env` moved `HOME` to a directory it wrote a `.bashrc` in, and
/// a function there ran in place of an allowed `echo` (a38z; the home's
/// own startup files are read-only under `[tools]`, sbx-guest's
/// rcfiles.rs). The home is the volume sbx-run mounts at /home/agent.
pub const PINNED_PLACES: &[(&str, &str)] = &[
    ("HOME", "/home/agent"),
    ("ZDOTDIR", "/home/agent"),
    ("SHELL", "/bin/bash"),
    ("CLAUDE_CODE_SHELL", "/bin/bash"),
];

/// Where Codex reads the requirements an admin sets.
pub const CODEX_REQUIREMENTS: &str = "/etc/codex/requirements.toml";

/// Codex has no per-tool hook, and its own sandbox (bwrap) cannot start
/// inside the container (`pivot_root` is refused), so a requirement
/// forcing `read-only` left it unable to run any command (issue 38).
/// `read-only = true` is the workspace mount, which holds for codex as for
/// any program: nothing is installed for Codex.
pub fn codex_requirements(_cfg: &Config) -> Option<String> {
    None
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
        let h = &v["hooks"]["PreToolUse"][0]["hooks"][0];
        assert_eq!(h["command"], "/usr/local/bin/sbx-tool-guard");
        assert_eq!(h["args"], json!(["check", "--workspace", "/workspace"]));
        assert_eq!(h["onFailure"], "block");
        assert_eq!(v["env"]["LD_LIBRARY_PATH"], "");
        assert_eq!(v["env"]["HOME"], "/home/agent");
        assert_eq!(v["env"]["CLAUDE_CODE_SHELL"], "/bin/bash");
        let none = sbx_core::config::parse_toml("", Path::new("c.toml")).unwrap();
        assert!(managed(&none, "/workspace").is_none());
    }
}
