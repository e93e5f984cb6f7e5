//! `.agent-sandbox/config.toml`: the one file every tool reads. Unknown keys,
//! wrong types and bad values are refused with file, line, column and key,
//! before any tool acts on a half-understood policy.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer};

use crate::glob::{PathPattern, name_glob};

pub mod agent;
use crate::{Exit, SbxError};
pub use agent::Agent;

pub const DIR: &str = ".agent-sandbox";
pub const FILE: &str = "config.toml";
pub const LEGACY_FILE: &str = "config.json";

/// Always read-only inside the sandbox, whatever the config says.
/// The fourth is agent-precommit's user context: the
/// agent must not rewrite what the pre-commit checks are told about it.
/// `.claude` and `.mcp.json` are the project settings the user's own
/// Claude Code on the host reads: its hooks and MCP servers are commands
/// it runs there (issue 38); `.codex` is codex's (its `config.toml` names
/// MCP servers and a `notify` program, run in a project the user trusts).
pub const ALWAYS_PROTECTED: [&str; 7] = [
    ".git/hooks",
    ".husky",
    ".agent-sandbox",
    ".agent-precommit/user-context.json",
    ".claude",
    ".mcp.json",
    ".codex",
];

/// Secret files masked by default.
pub const DEFAULT_BLOCKED_FILES: [&str; 9] = [
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*credentials*",
    "*secret*",
    ".aws/",
    ".ssh/",
    ".gnupg/",
];

pub const DEFAULT_ALLOWED_FILES: [&str; 1] = [".env.example"];

// ---------------------------------------------------------------- schema

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Config {
    pub sandbox: Sandbox,
    pub filesystem: Filesystem,
    pub environment: Environment,
    pub network: Network,
    pub git: Git,
    pub backup: Backup,
    pub guest: Guest,
    pub agent: Agent,
    pub lifecycle: Lifecycle,
    pub ssh: Ssh,
    /// `None`: no `[tools]` table, no managed agent settings.
    pub tools: Option<Tools>,
    pub secrets: std::collections::BTreeMap<String, Secret>,
}

/// `[lifecycle]`: snapshots of the whole sandbox (`sbx-run snapshot`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Lifecycle {
    /// Snapshots kept per workspace: each new one removes the oldest
    /// beyond this (its image and record), never the one the sandbox
    /// runs from. Unset: all are kept; 0 is refused (78).
    /// Example: `3`
    pub keep_snapshots: Option<u32>,
    /// Stop the sandbox after this long without activity (execs, terminal
    /// input, agent runs, open terminal sessions, CPU use above 5% of a
    /// core): its guest makes the final backup and stops, and `sbx-run
    /// list` shows `stopped (idle)`. Unset: never; under 1s is refused (78).
    /// Example: `"30m"`
    pub idle_stop: Option<Interval>,
}

/// `[ssh]`: an SSH server in the sandbox for IDEs (VS Code Remote-SSH)
/// and terminals, with a key pair of the project's own (`sbx-run ssh`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Ssh {
    /// Run sshd in the sandbox as the agent (never root), on a port published
    /// to 127.0.0.1 (`sbx-run start --ssh-listen ADDR:PORT` widens it); only
    /// the project's key logs in, and the session is the agent's under every
    /// guard. The key pair is made on the host at the first start.
    /// Default: `false`
    /// Example: `true`
    pub enabled: bool,
}

/// The port sshd listens on inside the sandbox (published by the holder,
/// let in by sbx-fw when `[ssh] enabled`).
pub const SSH_PORT: u16 = 2222;

/// `[tools]`: agent tool permissions. Enforced at
/// the agent by sbx-tool-guard (Claude Code managed settings and a
/// PreToolUse hook) and by the OS (`read-only` mounts, `deny-read` masks).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Tools {
    /// Refused tool calls: `Write`, `Bash(curl:*)`, `Read(**/*.sql)`.
    /// Default: `[]`
    /// Example: `["Write", "Bash(curl:*)", "Read(**/*.sql)"]`
    pub disallowed: Unique<ToolRule>,
    /// When set, every call no rule here matches is refused.
    /// Example: `["Read", "Grep", "Glob", "Bash(npm test)"]`
    #[serde(deserialize_with = "allow_rules")]
    pub allowed: Option<Unique<ToolRule>>,
    /// The workspace (and repo-shelf) mounted read-only, and the agent's
    /// file-writing tools refused.
    /// Default: `false`
    /// Example: `true`
    pub read_only: bool,
    /// Masked like `[filesystem].blocked` (its `allowed` exceptions apply),
    /// and refused to the agent's file tools.
    /// Default: `[]`
    /// Example: `["**/.env*", "secrets/"]`
    pub deny_read: Unique<PathGlob>,
}

/// Programs that run code named by a flag or the environment
/// (`npm test --node-options=--require=…`, `git -c alias.x=!…`, `make
/// SHELL=…`, `python -c`): a `Bash(P …:*)` allow rule, which lets any
/// further word through, would run the agent's code.
pub const CODE_FROM_FLAGS: &[&str] = &[
    "npm",
    "npx",
    "pnpm",
    "yarn",
    "bun",
    "bunx",
    "deno",
    "node",
    "nodejs",
    "python",
    "python3",
    "pip",
    "pip3",
    "uv",
    "uvx",
    "poetry",
    "ruby",
    "perl",
    "php",
    "lua",
    "git",
    "make",
    "gmake",
    "cmake",
    "ninja",
    "cargo",
    "rustc",
    "go",
    "gcc",
    "cc",
    "clang",
    "java",
    "mvn",
    "gradle",
    "dotnet",
    "bash",
    "sh",
    "dash",
    "zsh",
    "ksh",
    "fish",
    "env",
    "sudo",
    "xargs",
    "find",
    "awk",
    "gawk",
    "sed",
    "tar",
    "rsync",
    "ssh",
    "scp",
    "docker",
    "kubectl",
    "terraform",
    "eval",
    "exec",
    "command",
    "builtin",
    "source",
    ".",
    "time",
    "timeout",
    "nice",
    "nohup",
    "watch",
    "script",
    "vim",
    "vi",
    "nvim",
    "emacs",
    "less",
    "man",
    "jq",
    "yq",
    "curl",
    "wget",
];

/// `[tools].allowed`: a `:*` rule for a program in `CODE_FROM_FLAGS` is
/// refused when the config loads, with how to write it instead.
fn allow_rules<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Unique<ToolRule>>, D::Error> {
    let rules = Option::<Unique<ToolRule>>::deserialize(d)?;
    for r in rules.iter().flat_map(|u| u.iter()) {
        if let Some(RuleArg::Prefix(p)) = &r.arg {
            let words: Vec<&str> = p.split_whitespace().collect();
            let first = words
                .first()
                .map_or("", |w| w.rsplit('/').next().unwrap_or(w));
            if CODE_FROM_FLAGS.contains(&first) {
                return Err(serde::de::Error::custom(format!(
                    "\"{r}\" lets any further words through, and {first} runs code named by a flag or the environment; list each command exactly, like \"Bash({p})\" and \"Bash({p} --watch)\""
                )));
            }
        }
    }
    Ok(rules)
}

/// Claude Code's built-in tool names; `mcp__…` names are MCP tools.
pub const KNOWN_TOOLS: [&str; 25] = [
    "AskUserQuestion",
    "Bash",
    "BashOutput",
    "Edit",
    "ExitPlanMode",
    "Glob",
    "Grep",
    "KillShell",
    "LS",
    "Monitor",
    "MultiEdit",
    "NotebookEdit",
    "NotebookRead",
    "PowerShell",
    "REPL",
    "Read",
    "Skill",
    "SlashCommand",
    "Task",
    "TodoWrite",
    "ToolSearch",
    "WebFetch",
    "WebSearch",
    "Workflow",
    "Write",
];

/// What a rule naming a tool covers, the one table every `[tools]` check
/// reads. Claude Code's own reading: Edit rules apply to every built-in tool
/// that changes a file (Write too: it replaces a file wholesale, so refusing
/// Edit but not Write would refuse nothing), Read rules to every tool that
/// reads one. `read-only` refuses the Edit family. Other names cover
/// themselves (`Write` is only the Write tool).
pub const TOOL_FAMILIES: [(&str, &[&str]); 2] = [
    ("Edit", &["Edit", "MultiEdit", "NotebookEdit", "Write"]),
    ("Read", &["Read", "NotebookRead", "Grep", "Glob", "LS"]),
];

/// Whether a rule naming `rule_tool` covers a call of `call_tool`.
pub fn rule_covers(rule_tool: &str, call_tool: &str) -> bool {
    rule_tool == call_tool
        // Claude Code's reading: `mcp__server` is every tool of the server.
        || rule_tool.strip_prefix("mcp__").is_some_and(|server| {
            !server.contains("__")
                && call_tool
                    .strip_prefix(rule_tool)
                    .is_some_and(|t| t.starts_with("__"))
        })
        || TOOL_FAMILIES
            .iter()
            .any(|(name, members)| *name == rule_tool && members.contains(&call_tool))
}

/// The tools that change files: refused whole under `read-only`.
pub fn writing_tools() -> &'static [&'static str] {
    TOOL_FAMILIES[0].1
}

/// Tools whose argument is a file path, matched against the workspace.
pub const PATH_TOOLS: [&str; 8] = [
    "Read",
    "Write",
    "Edit",
    "MultiEdit",
    "NotebookEdit",
    "NotebookRead",
    "Glob",
    "Grep",
];

impl Tools {
    /// Unknown tool names: loaded (a later agent version may have them),
    /// but said out loud, since a typo would otherwise refuse nothing.
    pub fn warnings(&self) -> Vec<String> {
        let all = self.disallowed.iter().map(|r| ("disallowed", r));
        let all = all.chain(
            self.allowed
                .iter()
                .flat_map(|l| l.iter().map(|r| ("allowed", r))),
        );
        all.filter(|(_, r)| !r.is_known())
            .map(|(key, r)| {
                format!(
                    "[tools].{key}: unknown tool \"{}\" (known: {}, and mcp__<server>__<tool>)",
                    r.tool,
                    KNOWN_TOOLS.join(", ")
                )
            })
            .collect()
    }
}

/// `[sandbox].enabled` of legacy policy files: `true` is accepted (sbx is
/// always on); `false` is refused, as there is no off switch in the file.
#[derive(Debug, Clone, Copy, Default)]
pub struct Enabled;

impl<'de> Deserialize<'de> for Enabled {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match bool::deserialize(d) {
            Ok(true) => Ok(Enabled),
            Ok(false) => Err(de::Error::custom(
                "sbx has no off switch in the config: remove `enabled = false` and run the agent without sbx-run if it must run unguarded",
            )),
            Err(_) => Err(de::Error::custom(
                "expected true (sbx is always on; the key can be left out)",
            )),
        }
    }
}

/// `[guest]`: what sbx-guest runs besides the agent's command.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Guest {
    /// Supervised with restart and backoff, always as the agent user: a
    /// repository's config never gets a root process (those come only from
    /// the image's /etc/sbx/guest.toml).
    pub services: std::collections::BTreeMap<String, GuestService>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestService {
    /// The program and its arguments, run as the agent user.
    /// Example: `["ttyd", "-p", "7681", "tmux"]`
    pub command: Argv,
}

/// A program and its arguments: at least the program, no empty word first.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Vec<String>")]
pub struct Argv(pub Vec<String>);

impl TryFrom<Vec<String>> for Argv {
    type Error = String;
    fn try_from(v: Vec<String>) -> Result<Self, String> {
        match v.first() {
            Some(p) if !p.is_empty() => Ok(Argv(v)),
            _ => Err("give the program and its arguments, e.g. [\"ttyd\", \"tmux\"]".into()),
        }
    }
}

/// `[sandbox]`: the container's limits, published ports and read-only paths.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Sandbox {
    /// The container's memory limit (docker `--memory`).
    /// Default: `"4g"`
    /// Example: `"8g"`
    pub memory: Size,
    /// CPUs the container may use (docker `--cpus`), 0.01 to 1024.
    /// Default: `2.0`
    /// Example: `1.5`
    pub cpus: Cpus,
    /// The most processes the container may run (docker `--pids-limit`), 16 to 4194304.
    /// Default: `1024`
    /// Example: `4096`
    pub pids: Pids,
    /// Ports published from the container, in docker's `-p` syntax.
    /// Default: `[]`
    /// Example: `["3000", "127.0.0.1:8080:80"]`
    pub ports: Unique<Port>,
    /// Paths mounted read-only inside the sandbox, added to the ones always
    /// protected ([`ALWAYS_PROTECTED`]: `.git/hooks`, `.husky`,
    /// `.agent-sandbox`, `.agent-precommit/user-context.json`, `.claude`,
    /// `.mcp.json` and `.codex`).
    /// Default: `[]`
    /// Example: `[".github/workflows", "Makefile"]`
    pub protected: Unique<RelPath>,
    /// What the agent works on: `"bind"` mounts the host checkout (work
    /// tree and `.git`) into the sandbox; `"clone"` gives it a worktree of
    /// its own clone on the repo shelf, on the host's current branch, with
    /// the host checkout read-only, and `sbx-run fetch` brings its commits
    /// back as data. Use `"clone"` against an agent you do not trust: in
    /// bind mode the agent writes the `.git` your own git then reads.
    /// Default: `"bind"`
    /// Example: `"clone"`
    pub workspace: WorkspaceMode,
    /// Legacy policy files' `enabled`; only `true` loads.
    /// Example: `true`
    pub enabled: Option<Enabled>,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self {
            memory: Size {
                text: "4g".into(),
                bytes: 4 << 30,
            },
            cpus: Cpus(2.0),
            pids: Pids(1024),
            ports: Unique::default(),
            protected: Unique::default(),
            workspace: WorkspaceMode::default(),
            enabled: None,
        }
    }
}

/// `[sandbox] workspace`: `bind` (default) shares the host checkout with
/// the sandbox; `clone` keeps it read-only there and lets the agent work
/// on its own clone (docs/security.md, "The host boundary for `.git`").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkspaceMode {
    #[default]
    Bind,
    Clone,
}

/// `[filesystem]`: secret files hidden inside the sandbox (masked, not deleted).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Filesystem {
    /// Files masked inside the sandbox (an empty read-only file or directory
    /// over each match, also for files that appear later), added to
    /// [`DEFAULT_BLOCKED_FILES`] (`.env`, `.env.*`, `*.pem`, `*.key`,
    /// `*credentials*`, `*secret*`, `.aws/`, `.ssh/`, `.gnupg/`); a list here
    /// cannot unmask a default.
    /// `blocked-patterns` is the legacy policy files' spelling.
    /// Default: `[]`
    /// Example: `["config/deploy/*.env", "*.p12"]`
    #[serde(alias = "blocked-patterns")]
    pub blocked: Unique<PathGlob>,
    /// Exceptions to `blocked` and the built-in masks;
    /// [`DEFAULT_ALLOWED_FILES`] (`.env.example`) when unset.
    /// Example: `[".env.example", ".env.test"]`
    #[serde(alias = "allowed-patterns")]
    pub allowed: Option<Unique<PathGlob>>,
    /// Masked paths accepted in git's objects (tracked, or in the history
    /// of any ref or reflog). Any other masked path found there makes
    /// `sbx-run start` refuse (exit 77): the agent could read its bytes with
    /// `git show` or from `.git/objects`, whatever the mask hides.
    /// Default: `[]`
    /// Example: `[".env.test", "fixtures/*.pem"]`
    pub accept_in_git: Unique<PathGlob>,
}

/// `[environment]`: which host variables cross into the sandbox. Precedence:
/// `block`, then `pass`, then the baseline, then secret-looking names (with
/// `filter-secrets`), then `allow`, then secret-looking values.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Environment {
    /// Drop host variables whose name looks like a secret (`*_KEY`, `*_TOKEN`,
    /// `*SECRET*`, `*PASSWORD*`, `AWS_*`, `GITHUB_*`, …) or whose value holds a
    /// credential.
    /// Default: `true`
    /// Example: `false`
    pub filter_secrets: bool,
    /// Host variables let into the sandbox besides the baseline (`TERM`, `LANG`,
    /// `LC_*`, `TZ`, …); cannot rescue a secret-looking name (that takes `pass`).
    /// Default: `[]`
    /// Example: `["NODE_ENV", "RUST_LOG"]`
    pub allow: Unique<NameGlob>,
    /// Host variables always dropped; wins over every other rule.
    /// Default: `[]`
    /// Example: `["AWS_*", "GITHUB_TOKEN"]`
    pub block: Unique<NameGlob>,
    /// Host variables passed even when they look like secrets; each one is
    /// written to the audit log.
    /// Default: `[]`
    /// Example: `["ANTHROPIC_API_KEY"]`
    pub pass: Unique<NameGlob>,
}

impl Default for Environment {
    fn default() -> Self {
        Self {
            filter_secrets: true,
            allow: Unique::default(),
            block: Unique::default(),
            pass: Unique::default(),
        }
    }
}

/// `[network]`: the egress firewall (sbx-fw). Default deny in both address
/// families; the agent reaches TCP 443 on the addresses of allowlisted names.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Network {
    /// Added to the built-in allowlist.
    /// Default: `[]`
    /// Example: `["api.example.com", "*.cdn.example"]`
    pub allow_domains: Unique<Domain>,
    /// Names that must resolve at init, or init fails (closed).
    /// Default: `[]`
    /// Example: `["api.example.com"]`
    pub required: Unique<Domain>,
    /// Allow the package registries the image's npm, pip, cargo and apt are
    /// configured to use (read from their config, never hard-coded).
    /// Default: `true`
    /// Example: `false`
    pub registries: bool,
    /// Allow GitHub's names and its published address ranges (443, and 22 with
    /// `allow-git`).
    /// Default: `true`
    /// Example: `false`
    pub github: bool,
    /// Allow traffic to the sandbox's own loopback interface.
    /// Default: `true`
    /// Example: `false`
    pub allow_localhost: bool,
    /// Turn the firewall off: every destination is reachable (logged loudly).
    /// Default: `false`
    /// Example: `true`
    pub allow_external: bool,
    /// Git over SSH: TCP 22 to GitHub's ranges (with `github = true`).
    /// `false` closes port 22 everywhere; git over HTTPS is unaffected.
    /// Default: `true`
    /// Example: `false`
    pub allow_git: bool,
    /// How egress is judged: by name through sbx-fw's proxy (every
    /// connection's TLS server name or HTTP Host), or by address only.
    /// Default: `"proxy"`
    /// Example: `"address"`
    pub mode: NetMode,
    /// Query types the DNS filter forwards besides A, AAAA, CNAME, HTTPS and
    /// SVCB (each one more way to choose bits the resolver sees).
    /// Default: `[]`
    /// Example: `["TXT"]`
    pub dns_types: Unique<DnsType>,
    /// Requests let through to a host, by method and path (proxy mode
    /// only): the proxy ends TLS for these hosts alone and refuses, with a
    /// 403 and an audit record, every request no rule allows. A value is a
    /// preset (`read-only`, `repo-only`, `off`) or a list of `METHOD PATH`
    /// rules and presets; `statsig.anthropic.com`, `sentry.io` and
    /// `statsig.com` (and below) are `off` unless given here. The
    /// language: docs/guide.md, "Rules by method and path".
    /// Default: `{}`
    /// Example: `{ "github.com" = "repo-only", "registry.example.org" = "read-only" }`
    pub rules: std::collections::BTreeMap<Domain, crate::netrules::HostRules>,
    /// A host program run for each refused name while `sbx-run agent` or
    /// `shell` runs, with the refusal as JSON on stdin (no shell; the name
    /// is never a word of its command line). Exit 0 opens the name for the
    /// duration it prints ("30m"), or an hour; anything else, or no answer
    /// within `on-block-timeout`, keeps it refused.
    /// Example: `"/usr/local/bin/ask-on-chat --channel sbx"`
    pub on_block: Option<HostCommand>,
    /// How long `on-block` may take to answer before the name stays refused.
    /// Default: `"2m"`
    /// Example: `"10m"`
    pub on_block_timeout: Interval,
}

/// `[network] mode`: `proxy` (default) checks every connection's TLS
/// server name or HTTP Host in `sbx-fw proxy` as well as its address, so
/// a shared CDN address cannot carry another name (domain fronting);
/// `address` allows TCP 443 to the addresses allowlisted names resolved to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetMode {
    Address,
    #[default]
    Proxy,
}

impl Default for Network {
    fn default() -> Self {
        Self {
            allow_domains: Unique::default(),
            required: Unique::default(),
            registries: true,
            github: true,
            allow_localhost: true,
            allow_external: false,
            allow_git: true,
            mode: NetMode::Proxy,
            dns_types: Unique::default(),
            rules: std::collections::BTreeMap::new(),
            on_block: None,
            on_block_timeout: Interval(Duration::from_secs(120)),
        }
    }
}

/// `[git]`: the git guard's switches.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Git {
    /// Refuse git commands that would skip the repository's hooks
    /// (`--no-verify` in any spelling, commits that skipped pre-commit).
    /// Default: `true`
    /// Example: `false`
    pub block_no_verify: bool,
    /// Refuse force pushes and branch deletions on a remote.
    /// Default: `true`
    /// Example: `false`
    pub block_force_push: bool,
    /// Refuse `git config --global` and `--system`, which change every
    /// repository's configuration.
    /// Default: `true`
    /// Example: `false`
    pub block_global_config: bool,
    /// Let a push send refs that point at a blob or a tree (directly or
    /// through an annotated tag): content no commit carried, so no hook saw.
    /// Default: `false`
    /// Example: `true`
    pub push_non_commits: bool,
}

impl Default for Git {
    fn default() -> Self {
        Self {
            block_no_verify: true,
            block_force_push: true,
            block_global_config: true,
            push_non_commits: false,
        }
    }
}

/// `[backup]`: incremental backups of the agent's home to an object store.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Backup {
    /// No URL: backups are off.
    /// Example: `"s3://bucket/sbx"`
    pub url: Option<StoreUrl>,
    /// Time between incremental backups.
    /// Default: `"5m"`
    /// Example: `"15m"`
    pub interval: Interval,
    /// Paths in the home left out of backups.
    /// Default: `[]`
    /// Example: `["node_modules/", "target/", ".cache/"]`
    pub exclude: Unique<PathGlob>,
    /// Snapshots kept; older ones are deleted after each commit.
    /// Default: `10`
    /// Example: `30`
    pub keep: u32,
}

impl Default for Backup {
    fn default() -> Self {
        Self {
            url: None,
            interval: Interval(Duration::from_secs(300)),
            exclude: Unique::default(),
            keep: 10,
        }
    }
}

impl Config {
    /// Protected paths: the three defaults, then the configured ones.
    pub fn protected_paths(&self) -> Vec<String> {
        let mut v: Vec<String> = ALWAYS_PROTECTED.iter().map(|s| s.to_string()).collect();
        for p in &self.sandbox.protected.0 {
            if !v.contains(&p.0) {
                v.push(p.0.clone());
            }
        }
        v
    }

    /// Masked file patterns: the defaults, then the configured ones.
    pub fn blocked_files(&self) -> Vec<PathPattern> {
        let mut v: Vec<PathPattern> = DEFAULT_BLOCKED_FILES
            .iter()
            .map(|p| PathPattern::new(p).expect("built-in pattern"))
            .collect();
        v.extend(self.filesystem.blocked.0.iter().map(|g| g.0.clone()));
        if let Some(t) = &self.tools {
            v.extend(t.deny_read.0.iter().map(|g| g.0.clone()));
        }
        v
    }

    /// `[sandbox] workspace = "clone"`.
    pub fn clone_mode(&self) -> bool {
        self.sandbox.workspace == WorkspaceMode::Clone
    }

    /// `[filesystem].accept-in-git`.
    pub fn accepted_in_git(&self) -> Vec<PathPattern> {
        self.filesystem
            .accept_in_git
            .0
            .iter()
            .map(|g| g.0.clone())
            .collect()
    }

    /// Which key masks files by `pattern` (a [`Config::blocked_files`]
    /// entry's text), for messages.
    pub fn blocked_key(&self, pattern: &str) -> &'static str {
        if DEFAULT_BLOCKED_FILES.contains(&pattern) {
            "the built-in secret patterns"
        } else if self
            .filesystem
            .blocked
            .0
            .iter()
            .any(|g| g.0.text == pattern)
        {
            "[filesystem].blocked"
        } else {
            "[tools].deny-read"
        }
    }

    /// `[tools].read-only`.
    /// The first `[tools]` key Codex cannot apply, with why. Codex has no
    /// per-tool hook: rules on tool calls would be silently ignored, so a
    /// run under them is refused. `read-only` and `deny-read` are mounts,
    /// which hold for any program.
    pub fn codex_cannot_apply(&self) -> Option<&'static str> {
        let t = self.tools.as_ref()?;
        if !t.disallowed.is_empty() {
            Some("tools.disallowed")
        } else if t.allowed.is_some() {
            Some("tools.allowed")
        } else {
            None
        }
    }

    pub fn read_only(&self) -> bool {
        self.tools.as_ref().is_some_and(|t| t.read_only)
    }

    pub fn allowed_files(&self) -> Vec<PathPattern> {
        match &self.filesystem.allowed {
            Some(list) => list.0.iter().map(|g| g.0.clone()).collect(),
            None => DEFAULT_ALLOWED_FILES
                .iter()
                .map(|p| PathPattern::new(p).expect("built-in pattern"))
                .collect(),
        }
    }
}

// ---------------------------------------------------------------- value types

/// A list whose entries must be distinct (a duplicate is usually a typo).
#[derive(Debug, Clone, PartialEq)]
pub struct Unique<T>(pub Vec<T>);

impl<T> Default for Unique<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<'de, T: Deserialize<'de> + fmt::Display> Deserialize<'de> for Unique<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<T>::deserialize(d)?;
        let mut seen = HashSet::new();
        for item in &v {
            if !seen.insert(item.to_string()) {
                return Err(de::Error::custom(format!("duplicate entry \"{item}\"")));
            }
        }
        Ok(Self(v))
    }
}

impl<T> std::ops::Deref for Unique<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

macro_rules! from_str_deserialize {
    ($t:ty) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(de::Error::custom)
            }
        }
    };
}

/// A memory size in docker's notation ("4g", "512m", "1.5g").
#[derive(Debug, Clone, PartialEq)]
pub struct Size {
    pub text: String,
    pub bytes: u64,
}

impl Size {
    /// Any size in the same notation, no minimum (a cap, not a memory limit).
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "invalid size \"{s}\": expected a number with an optional unit b, k, m or g (like \"4g\")"
            )
        };
        let t = s.trim().to_ascii_lowercase();
        let t = t.strip_suffix('b').unwrap_or(&t);
        let t = t.strip_suffix('i').unwrap_or(t);
        let (num, mult) = match t.chars().last() {
            Some('k') => (&t[..t.len() - 1], 1u64 << 10),
            Some('m') => (&t[..t.len() - 1], 1 << 20),
            Some('g') => (&t[..t.len() - 1], 1 << 30),
            Some('t') => (&t[..t.len() - 1], 1 << 40),
            _ => (t, 1),
        };
        if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return Err(bad());
        }
        let n: f64 = num.parse().map_err(|_| bad())?;
        Ok(Self {
            text: s.trim().to_owned(),
            bytes: (n * mult as f64) as u64,
        })
    }
}

impl std::str::FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let size = Self::parse(s)?;
        // Docker refuses less than 6 MiB for --memory.
        if size.bytes < 6 << 20 {
            return Err(format!("size \"{s}\" is too small: the minimum is 6m"));
        }
        Ok(size)
    }
}
from_str_deserialize!(Size);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A number of CPUs, whole or fractional (`2`, `1.5`), 0.01 to 1024.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cpus(pub f64);

impl<'de> Deserialize<'de> for Cpus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Num {
            F(f64),
            I(i64),
        }
        let v = match Num::deserialize(d)
            .map_err(|_| de::Error::custom("expected a number of CPUs, like 2 or 1.5"))?
        {
            Num::F(f) => f,
            Num::I(i) => i as f64,
        };
        // Docker refuses less than 0.01 CPUs at `docker run`: refuse it here.
        if !(0.01..=1024.0).contains(&v) {
            return Err(de::Error::custom(format!(
                "cpus = {v} is out of range: use 0.01 to 1024 (like 2 or 0.5)"
            )));
        }
        Ok(Self(v))
    }
}

/// A process count, 16 to 4194304 (an unlimited count is not allowed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pids(pub u32);

impl<'de> Deserialize<'de> for Pids {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = i64::deserialize(d)?;
        if !(16..=4_194_304).contains(&v) {
            return Err(de::Error::custom(format!(
                "pids = {v} is out of range: use 16 to 4194304 (an unlimited count is not allowed)"
            )));
        }
        Ok(Self(v as u32))
    }
}

/// A published port: "3000", "8080:3000" or "127.0.0.1:8080:3000", each
/// optionally with "/tcp" or "/udp" (docker's -p syntax, minus ranges).
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    pub text: String,
    /// The port inside the container, and whether it is UDP: for users of
    /// the port (sbx-fw's inbound rules) so they need not parse `text`.
    pub container: u16,
    pub udp: bool,
}

impl std::str::FromStr for Port {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            |why: &str| format!("invalid port \"{s}\": {why} (like \"3000\" or \"8080:3000\")");
        let (spec, proto) = match s.rsplit_once('/') {
            Some((a, p)) if p == "tcp" || p == "udp" => (a, Some(p)),
            Some(_) => return Err(bad("protocol must be tcp or udp")),
            None => (s, None),
        };
        let parts: Vec<&str> = spec.split(':').collect();
        let ports = match parts.as_slice() {
            [c] => vec![*c],
            [h, c] => vec![*h, *c],
            [ip, h, c] => {
                if ip.parse::<std::net::Ipv4Addr>().is_err() {
                    return Err(bad("the host address must be an IPv4 address"));
                }
                vec![*h, *c]
            }
            _ => return Err(bad("too many fields")),
        };
        let mut container = 0;
        for p in ports {
            match p.parse::<u16>() {
                Ok(n) if n > 0 => container = n,
                _ => return Err(bad("ports are numbers from 1 to 65535")),
            }
        }
        Ok(Self {
            text: s.to_owned(),
            container,
            udp: proto == Some("udp"),
        })
    }
}

impl<'de> Deserialize<'de> for Port {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum P {
            S(String),
            N(i64),
        }
        let s = match P::deserialize(d)
            .map_err(|_| de::Error::custom("expected a port as a string or number"))?
        {
            P::S(s) => s,
            P::N(n) => n.to_string(),
        };
        s.parse().map_err(de::Error::custom)
    }
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A path relative to the workspace root, without `..`.
#[derive(Debug, Clone, PartialEq)]
pub struct RelPath(pub String);

impl std::str::FromStr for RelPath {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim_end_matches('/');
        let t = t.strip_prefix("./").unwrap_or(t);
        if t.is_empty() || t == "." {
            return Err(format!(
                "invalid path \"{s}\": name a file or directory inside the workspace"
            ));
        }
        if t.starts_with('/') {
            return Err(format!(
                "invalid path \"{s}\": use a path relative to the workspace root"
            ));
        }
        if t.split('/').any(|c| c == ".." || c.is_empty()) {
            return Err(format!(
                "invalid path \"{s}\": \"..\" and empty components are not allowed"
            ));
        }
        // A path, not a pattern: accepting `docs/*.md` and then protecting a
        // file literally named so would be a guard that silently means less.
        if t.contains(['*', '?', '[', ']', '{', '}', '\\']) {
            return Err(format!(
                "invalid path \"{s}\": protected paths are literal paths, not globs; list each file or directory (or its parent directory)"
            ));
        }
        Ok(Self(t.to_owned()))
    }
}
from_str_deserialize!(RelPath);

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A case-insensitive glob over environment variable names.
#[derive(Debug, Clone, PartialEq)]
pub struct NameGlob(pub String);

impl std::str::FromStr for NameGlob {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.is_empty() || s.contains('=') {
            return Err(format!(
                "invalid variable pattern \"{s}\": a name or glob without '='"
            ));
        }
        name_glob(s).map_err(|e| format!("invalid glob \"{s}\": {}", e.kind()))?;
        Ok(Self(s.to_owned()))
    }
}
from_str_deserialize!(NameGlob);

impl fmt::Display for NameGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A gitignore-like path glob.
#[derive(Debug, Clone)]
pub struct PathGlob(pub PathPattern);

impl std::str::FromStr for PathGlob {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.is_empty() || s == "/" {
            return Err(format!("invalid path pattern \"{s}\""));
        }
        if s.split('/').any(|c| c == "..") {
            return Err(format!(
                "invalid path pattern \"{s}\": \"..\" is not allowed"
            ));
        }
        // What the matcher sees (PathPattern's own trimming): an empty body
        // would be `**/`, every directory; an empty or `.` component never
        // matches a walked path, a silent no-op.
        let body = s.trim_end_matches('/');
        let body = body.strip_prefix("./").unwrap_or(body);
        let body = body.strip_prefix('/').unwrap_or(body);
        if body.split('/').any(|c| c.is_empty() || c == ".") {
            return Err(format!(
                "invalid path pattern \"{s}\": empty and \".\" components are not allowed (like \".env\", \"config/*.key\" or \"node_modules/\")"
            ));
        }
        PathPattern::new(s)
            .map(Self)
            .map_err(|e| format!("invalid glob \"{s}\": {}", e.kind()))
    }
}
from_str_deserialize!(PathGlob);

impl fmt::Display for PathGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.text)
    }
}

/// A DNS name, optionally a `*.` wildcard for every name below it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Domain {
    pub name: String,
    pub wildcard: bool,
}

impl std::str::FromStr for Domain {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.trim_end_matches('.').to_ascii_lowercase();
        let (wildcard, name) = match lower.strip_prefix("*.") {
            Some(rest) => (true, rest.to_owned()),
            None => (false, lower.clone()),
        };
        let bad = |why: &str| format!("invalid domain \"{s}\": {why}");
        if name.is_empty() || name.len() > 253 {
            return Err(bad(
                "expected a host name like api.example.com or *.example.com",
            ));
        }
        if !name.is_ascii() {
            return Err(bad("write internationalized names in punycode (xn--…)"));
        }
        if name.parse::<std::net::IpAddr>().is_ok() {
            return Err(bad("addresses are not allowed here, only names"));
        }
        for label in name.split('.') {
            let ok = !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !label.starts_with('-')
                && !label.ends_with('-');
            if !ok {
                return Err(bad("each label is 1 to 63 letters, digits or '-'"));
            }
        }
        if wildcard && !name.contains('.') {
            return Err(bad(
                "a wildcard must stand below a registered name, like *.example.com",
            ));
        }
        Ok(Self { name, wildcard })
    }
}
from_str_deserialize!(Domain);

/// As written in the config (`*.example.com`), so it reads back the same.
impl serde::Serialize for Domain {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.wildcard {
            write!(f, "*.{}", self.name)
        } else {
            f.write_str(&self.name)
        }
    }
}

/// `[secrets.NAME]`: a credential the sandbox never holds. The sandbox
/// gets a placeholder; sbx-fw's proxy (proxy mode) puts the real value
/// into `header` on requests to `host` only.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Secret {
    /// Where the value is read on the host when the sandbox starts
    /// (`claude-login:`: the access token of a Claude Code login file,
    /// sent as `Authorization: Bearer`; the sandbox's CLI gets a login
    /// of placeholders).
    /// Example: `"env:ANTHROPIC_API_KEY"`
    pub from: SecretFrom,
    /// The one host the value is sent to (no wildcard).
    /// Example: `"api.anthropic.com"`
    pub host: SecretHost,
    /// The request header that carries it (the placeholder in it, or a
    /// `Bearer` placeholder, is replaced).
    /// Example: `"x-api-key"`
    pub header: HeaderName,
}

/// Where a secret comes from: `env:NAME` (the host's environment),
/// `file:/abs/path` (not through a link, not group- or world-writable) or
/// `cmd:PROGRAM ARGS` (run on the host at start, no shell; its stdout),
/// `claude-login:/abs/path` (a Claude Code `.credentials.json` on the
/// host, read as `file:` is: its OAuth access token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretFrom {
    Env(String),
    File(PathBuf),
    Cmd(Vec<String>),
    ClaudeLogin(PathBuf),
}

impl std::str::FromStr for SecretFrom {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("secret source \"{s}\": {why}");
        match s.split_once(':') {
            Some(("env", v)) => {
                let ok = !v.is_empty()
                    && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    && !v.as_bytes()[0].is_ascii_digit();
                ok.then(|| Self::Env(v.to_owned()))
                    .ok_or_else(|| bad("env: takes a variable name like ANTHROPIC_API_KEY"))
            }
            Some((kind @ ("file" | "claude-login"), v)) => {
                let p = Path::new(v);
                if !p.is_absolute() || p.components().any(|c| c == std::path::Component::ParentDir)
                {
                    return Err(bad(&format!("{kind}: takes an absolute path without '..'")));
                }
                Ok(if kind == "file" {
                    Self::File(p.to_owned())
                } else {
                    Self::ClaudeLogin(p.to_owned())
                })
            }
            Some(("cmd", v)) => match shlex::split(v) {
                Some(argv) if !argv.is_empty() && !argv[0].is_empty() => Ok(Self::Cmd(argv)),
                _ => Err(bad(
                    "cmd: takes a program and its arguments, quoted as in a shell",
                )),
            },
            _ => Err(bad(
                "write env:NAME, file:/absolute/path, cmd:PROGRAM ARGS or claude-login:/absolute/path",
            )),
        }
    }
}
from_str_deserialize!(SecretFrom);

/// A host program and its arguments, written as one string quoted as in a
/// shell but run without one (`[network] on-block`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCommand {
    pub text: String,
    pub argv: Vec<String>,
}

impl std::str::FromStr for HostCommand {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match shlex::split(s) {
            Some(argv) if !argv.is_empty() && !argv[0].is_empty() => Ok(Self {
                text: s.to_owned(),
                argv,
            }),
            _ => Err(format!(
                "command \"{s}\": write a program and its arguments, quoted as in a shell"
            )),
        }
    }
}
from_str_deserialize!(HostCommand);

impl fmt::Display for SecretFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Env(v) => write!(f, "env:{v}"),
            Self::File(p) => write!(f, "file:{}", p.display()),
            Self::ClaudeLogin(p) => write!(f, "claude-login:{}", p.display()),
            Self::Cmd(argv) => write!(
                f,
                "cmd:{}",
                shlex::try_join(argv.iter().map(String::as_str)).unwrap_or_default()
            ),
        }
    }
}

/// A host name a secret is bound to: a name, not a wildcard or an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretHost(pub String);

impl std::str::FromStr for SecretHost {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let d: Domain = s.parse()?;
        if d.wildcard {
            return Err(format!(
                "\"{s}\": a secret goes to one host, not a wildcard: name the host"
            ));
        }
        Ok(Self(d.name))
    }
}
from_str_deserialize!(SecretHost);

/// An HTTP header name (an RFC 9110 token), kept in lower case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderName(pub String);

impl std::str::FromStr for HeaderName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if s.is_empty() || !s.bytes().all(tchar) {
            return Err(format!(
                "header name \"{s}\": letters, digits and - only, like x-api-key"
            ));
        }
        let lower = s.to_ascii_lowercase();
        // These frame or route the request: a secret there would change
        // what the proxy checked, not authenticate it.
        if [
            "host",
            "content-length",
            "transfer-encoding",
            "connection",
            "upgrade",
            "te",
            "trailer",
        ]
        .contains(&lower.as_str())
        {
            return Err(format!(
                "header name \"{s}\" frames or routes the request: use the credential's own header"
            ));
        }
        Ok(Self(lower))
    }
}
from_str_deserialize!(HeaderName);

/// A DNS query type by its mnemonic ("MX", "TXT") or RFC 3597's "TYPE99".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DnsType(pub u16);

const DNS_TYPES: &[(&str, u16)] = &[
    ("A", 1),
    ("NS", 2),
    ("CNAME", 5),
    ("SOA", 6),
    ("PTR", 12),
    ("MX", 15),
    ("TXT", 16),
    ("AAAA", 28),
    ("SRV", 33),
    ("NAPTR", 35),
    ("DS", 43),
    ("SSHFP", 44),
    ("DNSKEY", 48),
    ("TLSA", 52),
    ("SVCB", 64),
    ("HTTPS", 65),
    ("CAA", 257),
];

impl std::str::FromStr for DnsType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let up = s.to_ascii_uppercase();
        if let Some((_, t)) = DNS_TYPES.iter().find(|(n, _)| *n == up) {
            return Ok(Self(*t));
        }
        match up.strip_prefix("TYPE").map(str::parse::<u16>) {
            // Meta types (OPT, AXFR, ANY...) are no record a name has.
            Some(Ok(t)) if t != 0 && !(41..=41).contains(&t) && !(128..=255).contains(&t) => {
                Ok(Self(t))
            }
            _ => Err(format!(
                "invalid DNS query type \"{s}\": expected a record type like \"MX\" or \"TXT\", or \"TYPE99\""
            )),
        }
    }
}
from_str_deserialize!(DnsType);

impl fmt::Display for DnsType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match DNS_TYPES.iter().find(|(_, t)| *t == self.0) {
            Some((n, _)) => f.write_str(n),
            None => write!(f, "TYPE{}", self.0),
        }
    }
}

/// A duration like "5m", "30s" or "1h 30m".
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval(pub Duration);

impl std::str::FromStr for Interval {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let d = humantime::parse_duration(s)
            .map_err(|e| format!("invalid duration \"{s}\": {e} (like \"5m\" or \"30s\")"))?;
        if d < Duration::from_secs(1) {
            return Err(format!("invalid duration \"{s}\": must be at least 1s"));
        }
        Ok(Self(d))
    }
}
from_str_deserialize!(Interval);

/// An object store URL: gs://bucket/prefix, s3://bucket/prefix,
/// file:///absolute/path or memory://. Parsed once here; sbx-backup opens
/// the store from these fields and sbx-fw derives the store's endpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreUrl {
    pub kind: StoreKind,
    /// The bucket of gs:// and s3://; empty otherwise.
    pub bucket: String,
    /// The prefix inside the bucket (no leading or trailing `/`), or the
    /// absolute directory of file://.
    pub path: String,
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Gs,
    S3,
    File,
    Memory,
}

impl std::str::FromStr for StoreUrl {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let usage = "use gs://, s3://, file:// or memory://";
        let u = url::Url::parse(s).map_err(|e| format!("invalid URL \"{s}\": {e} ({usage})"))?;
        let kind = match u.scheme() {
            "gs" => StoreKind::Gs,
            "s3" => StoreKind::S3,
            "file" => StoreKind::File,
            "memory" => StoreKind::Memory,
            other => {
                return Err(format!(
                    "unknown URL scheme \"{other}\" in \"{s}\": {usage}"
                ));
            }
        };
        // Credentials, a port, a query or a fragment would be dropped
        // without a word (and credentials logged with the URL): refused.
        if !u.username().is_empty() || u.password().is_some() {
            return Err(format!(
                "invalid URL \"{s}\": no user or password in a store URL (credentials come from the environment)"
            ));
        }
        if u.port().is_some() || u.query().is_some() || u.fragment().is_some() {
            return Err(format!(
                "invalid URL \"{s}\": a store URL has no port, ? or # (an S3 endpoint is set with AWS_ENDPOINT)"
            ));
        }
        let (bucket, path) = match kind {
            StoreKind::Gs | StoreKind::S3 => match u.host() {
                Some(url::Host::Domain(b)) if !b.is_empty() => {
                    (b.to_owned(), u.path().trim_matches('/').to_owned())
                }
                _ => {
                    return Err(format!(
                        "invalid URL \"{s}\": name a bucket, like {}://bucket/prefix",
                        u.scheme()
                    ));
                }
            },
            StoreKind::File => {
                if u.host_str().is_some_and(|h| !h.is_empty()) {
                    return Err(format!(
                        "invalid URL \"{s}\": file URLs need an absolute path (file:///var/tmp/x)"
                    ));
                }
                let dir = u
                    .to_file_path()
                    .map_err(|()| format!("invalid URL \"{s}\": not a local path"))?;
                (String::new(), dir.to_string_lossy().into_owned())
            }
            StoreKind::Memory => (String::new(), String::new()),
        };
        Ok(Self {
            kind,
            bucket,
            path,
            text: s.to_owned(),
        })
    }
}
from_str_deserialize!(StoreUrl);

impl StoreUrl {
    /// The store one level down, `<this>/<dir>/<name>`, each a path segment
    /// of its own (percent-encoded as needed): a branch sandbox's home gets
    /// its own prefix beside the main sandbox's, not a second writer on it.
    pub fn child(&self, dir: &str, name: &str) -> Result<StoreUrl, String> {
        // The url crate resolves `.` and `..` segments as it pushes them.
        if [dir, name].iter().any(|p| matches!(*p, "" | "." | "..")) {
            return Err(format!(
                "\"{name}\" cannot name a store under {}",
                self.text
            ));
        }
        let mut u = url::Url::parse(&self.text).map_err(|e| e.to_string())?;
        u.path_segments_mut()
            .map_err(|()| format!("\"{}\" has no path", self.text))?
            .pop_if_empty()
            .push(dir)
            .push(name);
        u.as_str().parse()
    }
}

/// One tool rule, Claude Code's spelling: `Name` or `Name(argument)`.
#[derive(Debug, Clone)]
pub struct ToolRule {
    pub tool: String,
    pub arg: Option<RuleArg>,
}

#[derive(Debug, Clone)]
pub enum RuleArg {
    /// `Bash(npm run test:*)`: the command or a compound's part starts
    /// with this, word-wise.
    Prefix(String),
    /// `Bash(git status)`: exactly this command.
    Exact(String),
    /// `Read(**/*.sql)`: a path glob of `[filesystem]`'s dialect.
    Path(PathPattern),
    /// `WebFetch(domain:example.com)`.
    Domain(String),
}

impl ToolRule {
    pub fn is_known(&self) -> bool {
        KNOWN_TOOLS.contains(&self.tool.as_str()) || self.tool.starts_with("mcp__")
    }
}

impl std::str::FromStr for ToolRule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (tool, arg) = match s.split_once('(') {
            Some((t, rest)) => match rest.strip_suffix(')') {
                Some(a) => (t, Some(a)),
                None => {
                    return Err(format!(
                        "invalid tool rule \"{s}\": close the argument with ')', like \"Bash(curl:*)\""
                    ));
                }
            },
            None => (s, None),
        };
        let name_ok = tool.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && tool
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !name_ok {
            return Err(format!(
                "invalid tool rule \"{s}\": expected a tool name like \"Write\" or \"Bash(curl:*)\""
            ));
        }
        let arg = match arg {
            None => None,
            Some(a) if a.trim().is_empty() => {
                return Err(format!(
                    "invalid tool rule \"{s}\": empty argument (write \"{tool}\" for every call)"
                ));
            }
            Some(a) if tool == "Bash" => Some(match a.strip_suffix(":*") {
                Some(p) if !p.trim().is_empty() => RuleArg::Prefix(p.trim().to_owned()),
                Some(_) => {
                    return Err(format!(
                        "invalid tool rule \"{s}\": name a command before \":*\" (write \"Bash\" for every command)"
                    ));
                }
                None => RuleArg::Exact(a.trim().to_owned()),
            }),
            Some(a) if PATH_TOOLS.contains(&tool) => {
                let g: PathGlob = a.parse()?;
                Some(RuleArg::Path(g.0))
            }
            Some(a) if tool == "WebFetch" => match a.strip_prefix("domain:") {
                Some(d) => Some(RuleArg::Domain(d.parse::<Domain>()?.to_string())),
                None => {
                    return Err(format!(
                        "invalid tool rule \"{s}\": WebFetch takes \"domain:NAME\""
                    ));
                }
            },
            Some(_) => {
                return Err(format!(
                    "invalid tool rule \"{s}\": sbx cannot match the arguments of {tool}; list the tool by name"
                ));
            }
        };
        Ok(Self {
            tool: tool.to_owned(),
            arg,
        })
    }
}
from_str_deserialize!(ToolRule);

impl fmt::Display for ToolRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.tool)?;
        match &self.arg {
            None => Ok(()),
            Some(RuleArg::Prefix(p)) => write!(f, "({p}:*)"),
            Some(RuleArg::Exact(c)) => write!(f, "({c})"),
            Some(RuleArg::Path(p)) => write!(f, "({})", p.text),
            Some(RuleArg::Domain(d)) => write!(f, "(domain:{d})"),
        }
    }
}

// ---------------------------------------------------------------- legacy

/// `.agent-sandbox/config.json` of the TypeScript agent-sandbox.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Legacy {
    ports: Unique<Port>,
    readonly: Unique<RelPath>,
    egress_allow_domains: Unique<Domain>,
}

impl From<Legacy> for Config {
    fn from(l: Legacy) -> Self {
        let mut c = Config::default();
        c.sandbox.ports = l.ports;
        c.sandbox.protected = l.readonly;
        c.network.allow_domains = l.egress_allow_domains;
        c
    }
}

// ---------------------------------------------------------------- loading

/// Where the effective config came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    File(PathBuf),
    Legacy(PathBuf),
    /// No file found: built-in defaults.
    Default,
}

#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub source: Source,
}

impl Loaded {
    pub fn describe(&self) -> String {
        match &self.source {
            Source::File(p) => p.display().to_string(),
            Source::Legacy(p) => format!("{} (legacy JSON)", p.display()),
            Source::Default => "built-in defaults (no config file found)".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read config: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {key}{message}", path.display(), key = key_prefix(key))]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        key: String,
        message: String,
    },
}

fn key_prefix(key: &str) -> String {
    if key.is_empty() || key == "." {
        String::new()
    } else {
        format!("{key}: ")
    }
}

impl SbxError for ConfigError {
    fn exit(&self) -> Exit {
        Exit::Config
    }
}

/// Find and load the config: `explicit`, then `$SBX_CONFIG`, then the first
/// `.agent-sandbox/config.toml` (or legacy `config.json`) walking up from
/// `cwd` to the repository root. None found: defaults.
pub fn discover(
    explicit: Option<&Path>,
    env_config: Option<&Path>,
    cwd: &Path,
) -> Result<Loaded, ConfigError> {
    if let Some(p) = explicit.or(env_config) {
        return load_file(p);
    }
    for dir in cwd.ancestors() {
        let toml = dir.join(DIR).join(FILE);
        if toml.is_file() {
            return load_file(&toml);
        }
        let json = dir.join(DIR).join(LEGACY_FILE);
        if json.is_file() {
            return load_file(&json);
        }
        // Stop at the repository root: a config above it belongs to someone else.
        if dir.join(".git").exists() {
            break;
        }
    }
    Ok(Loaded {
        config: Config::default(),
        source: Source::Default,
    })
}

/// Inside a sandbox the config is the read-only `/.agent-sandbox/` one:
/// `--config` and `SBX_CONFIG` would let the agent choose a laxer policy.
pub const SANDBOX_DIR: &str = "/.agent-sandbox";

fn in_sandbox() -> bool {
    Path::new(SANDBOX_DIR).is_dir() && Path::new(crate::audit::SANDBOX_MARKER).exists()
}

/// Load with the process's own `--config`/`SBX_CONFIG`/cwd.
pub fn discover_from_env(explicit: Option<&Path>) -> Result<Loaded, ConfigError> {
    if in_sandbox() {
        if explicit.is_some() || std::env::var_os("SBX_CONFIG").is_some() {
            crate::output::warn(
                "inside the sandbox the config is /.agent-sandbox/config.toml; --config and SBX_CONFIG are ignored",
            );
        }
        let root = Path::new(SANDBOX_DIR);
        for f in [FILE, LEGACY_FILE] {
            if root.join(f).is_file() {
                return load_file(&root.join(f));
            }
        }
        return Ok(Loaded {
            config: Config::default(),
            source: Source::Default,
        });
    }
    let env = std::env::var_os("SBX_CONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    discover(explicit, env.as_deref(), &cwd)
}

/// Load one file; `.json` is read as the legacy format.
pub fn load_file(path: &Path) -> Result<Loaded, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    if path.extension().is_some_and(|e| e == "json") {
        let config = parse_legacy(&text, path)?;
        Ok(Loaded {
            config,
            source: Source::Legacy(path.to_owned()),
        })
    } else {
        let config = parse_toml(&text, path)?;
        if let Some(t) = &config.tools {
            for w in t.warnings() {
                crate::output::warn(&format!("{}: {w}", path.display()));
            }
        }
        Ok(Loaded {
            config,
            source: Source::File(path.to_owned()),
        })
    }
}

pub fn parse_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let de = toml::Deserializer::parse(text).map_err(|e| toml_error(path, text, "", &e))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        toml_error(path, text, &key, e.inner())
    })
}

fn toml_error(path: &Path, text: &str, key: &str, e: &toml::de::Error) -> ConfigError {
    let (line, column) = e.span().map_or((1, 1), |s| line_col(text, s.start));
    ConfigError::Invalid {
        path: path.to_owned(),
        line,
        column,
        key: key.to_owned(),
        message: e.message().trim().replace('\n', " "),
    }
}

fn parse_legacy(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let legacy: Legacy = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let inner = e.inner();
        ConfigError::Invalid {
            path: path.to_owned(),
            line: inner.line(),
            column: inner.column(),
            key: e.path().to_string(),
            message: strip_json_position(&inner.to_string()),
        }
    })?;
    de.end().map_err(|e| ConfigError::Invalid {
        path: path.to_owned(),
        line: e.line(),
        column: e.column(),
        key: String::new(),
        message: strip_json_position(&e.to_string()),
    })?;
    Ok(legacy.into())
}

/// serde_json appends " at line L column C"; we print that in front.
fn strip_json_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_owned(),
        None => msg.to_owned(),
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests;

/// `--check-config` for every tool: load, report where from, exit 0 or 78.
pub fn check(common: &crate::cli::CommonArgs) -> Result<Exit, crate::error::BoxError> {
    let loaded = discover_from_env(common.config.as_deref())?;
    let mut out = std::io::stdout().lock();
    if common.json {
        let path = match &loaded.source {
            Source::File(p) | Source::Legacy(p) => Some(p.display().to_string()),
            Source::Default => None,
        };
        crate::output::json_line(
            &mut out,
            "config",
            &serde_json::json!({"path": path, "ok": true}),
        )
        .map_err(|e| crate::error::Message::new(Exit::IoErr, e.to_string()))?;
    } else if !common.quiet {
        use std::io::Write;
        writeln!(out, "{}: ok", loaded.describe())
            .map_err(|e| crate::error::Message::new(Exit::IoErr, e.to_string()))?;
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod dns_type_tests {
    use super::DnsType;

    #[test]
    fn dns_types_by_name_or_number_and_no_meta_types() {
        let t = |s: &str| s.parse::<DnsType>().map(|t| (t.0, t.to_string()));
        assert_eq!(t("txt"), Ok((16, "TXT".into())));
        assert_eq!(t("MX"), Ok((15, "MX".into())));
        assert_eq!(t("TYPE99"), Ok((99, "TYPE99".into())));
        assert_eq!(t("type16"), Ok((16, "TXT".into())));
        for bad in ["", "ANY", "TYPE0", "TYPE41", "TYPE255", "TYPE70000", "MXX"] {
            assert!(t(bad).is_err(), "{bad}");
        }
    }
}
