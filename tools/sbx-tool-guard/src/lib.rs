//! sbx-tool-guard: decide an AI agent's tool calls by `[tools]`. Claude
//! Code runs `sbx-tool-guard check` as a PreToolUse hook from the managed
//! settings sbx-run installs; every decision is one audit record.
#![forbid(unsafe_code)]

pub mod policy;
pub mod settings;
pub mod shell;
pub mod tools;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use sbx_core::audit::{self, Outcome, Record};
use sbx_core::cli::CommonArgs;
use sbx_core::error::{BoxError, Message};
use sbx_core::{Exit, SbxError, config, output};
use serde::Deserialize;
use serde_json::Value;

pub use policy::{Decision, Key, Policy};

const TOOL: &str = "sbx-tool-guard";
/// The audit records' `tool`: the source of the decision.
pub const SOURCE: &str = "tools";
/// Claude Code's hook protocol: exit 2 blocks the call and feeds stderr to
/// the model. Any other status is a failure, which the managed hook's
/// `onFailure: "block"` also refuses; `check` still ends every failure of
/// its own here, so the refusal carries a reason and an audit record.
const HOOK_BLOCK: u8 = 2;
/// Hook input larger than this is refused (a Write carries its content).
const MAX_INPUT: u64 = 64 << 20;
/// The checker thread's stack (reserved, touched only as deep as it goes).
const STACK: usize = 256 << 20;

#[derive(Debug, Parser)]
#[command(
    name = "sbx-tool-guard",
    version,
    about = "Decide an AI agent's tool calls by [tools]: Claude Code's PreToolUse hook and managed settings",
    long_about = "Decide an AI agent's tool calls by the [tools] table of .agent-sandbox/config.toml.\n\n\
        Inside a sandbox, Claude Code runs `sbx-tool-guard check` before every tool call (a PreToolUse \
        hook in the root-owned, read-only /etc/claude-code/managed-settings.json that sbx-run installs). \
        It reads the hook's JSON on stdin, decides, writes one audit record (tool \"tools\") and, when \
        the call is refused, exits 2 with the reason on stderr, which Claude shows the model. Any failure \
        (bad input, unreadable config) refuses the call.",
    after_long_help = AFTER_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(subcommand)]
    pub command: Cmd,
}

const AFTER_HELP: &str = "\
Rules, in order; the first that refuses decides:
  1. read-only    [tools].read-only = true refuses Write, Edit, MultiEdit, NotebookEdit
  2. disallowed   any rule matching the call (Bash: any command it runs)
  3. allowed      when set, every command and path of the call must match one of its rules
  4. deny-read    a path argument that is masked ([tools].deny-read, [filesystem].blocked
                  minus [filesystem].allowed); `..` is resolved, symlinks are followed
Rules: Name, Bash(prefix:*), Bash(exact command), Read(glob) (and the other file tools),
WebFetch(domain:NAME). Edit rules cover Edit, MultiEdit, NotebookEdit and Write; Read
rules cover Read, NotebookRead, Grep, Glob and LS. Bash rules cover every tool that runs
a command (Monitor, PowerShell) and refuse those that run code sbx cannot read (REPL,
Workflow, Skill); a tool sbx does not know is refused when a rule names Bash or a file
tool, unless allowed names it; so is a write to an AI CLI's own configuration
(.claude/, .claude.json, .mcp.json, .codex/), whose commands the CLI runs past this
hook. An allowed Bash(P:*) rule for a program that takes code
from flags or the environment (npm, node, python, git, make, cargo, sh, env, ...) is a
config error: list each command exactly, like Bash(npm test).

Bash rules see the command as bash parses it: quotes undone (c''url), a path
prefix dropped (/usr/bin/curl), wrappers unwrapped (env, sudo, xargs, command,
exec, nice, nohup, timeout, stdbuf, time, setsid, ionice, doas, find -exec,
flock, chroot, unshare, nsenter, taskset, chrt, strace, watch, git's global
options), and the scripts of sh/bash -c, eval, su -c, script -c, trap, alias,
command-valued variables (GIT_SSH_COMMAND, PAGER, EDITOR), git -c settings git
runs and $(…) read too. A command word the shell computes ($X, a glob, a shell
reading stdin) is refused under a Bash rule, and so is what makes bash run data:
arithmetic on variables, ${x@P}, set -x, a computed trap, -C callbacks, BASH_FUNC_
through env, sed's e command; prlimit and setarch are unwrapped. Advisory still: a script written
to a file and run is not read, nor is python -c; Read rules do not stop a Grep
rooted above the denied directory (use deny-read); the workspace mounts and
the firewall are what hold.

The hook is an exec-form entry with \"onFailure\": \"block\": a checker that is killed,
times out or cannot start refuses the call; link it statically (make build does).

Exit status: check: 0 let through, 2 refused (Claude Code's hook protocol);
decide: 0 allowed, 77 refused; 78 bad config.

Examples:
  echo '{\"tool_name\":\"Write\",\"tool_input\":{\"file_path\":\"a\"}}' | sbx-tool-guard check
  sbx-tool-guard decide Bash '{\"command\":\"curl x\"}'
  sbx-tool-guard settings --workspace /workspace";

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// The PreToolUse hook: hook JSON on stdin; exit 2 with the reason refuses the call.
    Check {
        /// The sandbox's workspace (relative paths and masks are relative to it).
        #[arg(long, value_name = "PATH", default_value = "/workspace")]
        workspace: PathBuf,
    },
    /// Decide one call without logging it: exit 0 allowed, 77 refused.
    Decide {
        /// The tool's name, like Write or Bash.
        tool: String,
        /// The tool's input as JSON, like '{"command":"ls"}'.
        #[arg(default_value = "{}")]
        input: String,
        #[arg(long, value_name = "PATH", default_value = "/workspace")]
        workspace: PathBuf,
    },
    /// Print the Claude Code managed settings for the config (JSON).
    Settings {
        #[arg(long, value_name = "PATH", default_value = "/workspace")]
        workspace: PathBuf,
    },
}

pub fn command() -> clap::Command {
    Cli::command()
}

#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("hook input: {0}")]
    Input(String),
    #[error("tool input {0:?} is not a JSON object")]
    BadInput(String),
    #[error("{0}")]
    Policy(#[from] policy::PolicyError),
}

impl SbxError for GuardError {
    fn exit(&self) -> Exit {
        match self {
            Self::Input(_) | Self::BadInput(_) => Exit::DataErr,
            Self::Policy(_) => Exit::Config,
        }
    }
}

/// What Claude Code sends a PreToolUse hook (fields sbx reads).
#[derive(Debug, Deserialize)]
struct HookInput {
    tool_name: String,
    #[serde(default)]
    tool_input: Value,
    #[serde(default)]
    cwd: Option<PathBuf>,
}

pub fn run(cli: Cli) -> Result<ExitCode, BoxError> {
    output::init(TOOL, &cli.common);
    match cli.command {
        Cmd::Check { workspace } => Ok(check(&cli.common, &workspace)),
        Cmd::Decide {
            tool,
            input,
            workspace,
        } => decide(&cli.common, &tool, &input, &workspace),
        Cmd::Settings { workspace } => {
            let loaded = config::discover_from_env(cli.common.config.as_deref())?;
            let v = settings::managed(&loaded.config, &workspace.to_string_lossy())
                .unwrap_or_else(|| serde_json::json!({}));
            let mut out = std::io::stdout().lock();
            // Plain: the file itself, as installed; --json: in the envelope.
            let r = if cli.common.json {
                output::json_line(&mut out, "settings", &v)
            } else {
                let text = serde_json::to_string_pretty(&v)
                    .map_err(|e| Message::new(Exit::Software, e.to_string()))?;
                writeln!(out, "{text}")
            };
            r.map_err(|e| Message::new(Exit::IoErr, e.to_string()))?;
            Ok(Exit::Ok.into())
        }
    }
}

/// The hook. Never returns anything but 0 (let through) or 2 (refused).
fn check(common: &CommonArgs, workspace: &std::path::Path) -> ExitCode {
    // A stack of its own, larger than main's: the shell parser recurses,
    // and a stack overflow aborts (a status Claude Code lets through).
    let r = std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(STACK)
            .spawn_scoped(s, || {
                std::panic::catch_unwind(|| {
                    check_inner(common, workspace).map_err(|e| sbx_core::entry::chain(e.as_ref()))
                })
            })
            .map_err(|_| ())
            .and_then(|h| h.join().map_err(|_| ()))
    });
    let r = match r {
        Ok(r) => r,
        Err(()) => Err(Box::new("thread") as Box<dyn std::any::Any + Send>),
    };
    match r {
        Ok(Ok(None)) => ExitCode::SUCCESS,
        Ok(Ok(Some(reason))) => {
            eprintln!("sbx: {reason}");
            ExitCode::from(HOOK_BLOCK)
        }
        Ok(Err(e)) => {
            eprintln!("sbx-tool-guard: {e}; the call is refused");
            ExitCode::from(HOOK_BLOCK)
        }
        Err(_) => {
            eprintln!("sbx-tool-guard: internal error; the call is refused");
            ExitCode::from(HOOK_BLOCK)
        }
    }
}

/// `Some(reason)` when refused.
fn check_inner(
    common: &CommonArgs,
    workspace: &std::path::Path,
) -> Result<Option<String>, BoxError> {
    let mut buf = Vec::new();
    std::io::stdin()
        .take(MAX_INPUT + 1)
        .read_to_end(&mut buf)
        .map_err(|e| GuardError::Input(e.to_string()))?;
    if buf.len() as u64 > MAX_INPUT {
        return Err(GuardError::Input(format!("larger than {MAX_INPUT} bytes")).into());
    }
    let hook: HookInput =
        serde_json::from_slice(&buf).map_err(|e| GuardError::Input(e.to_string()))?;
    let loaded = config::discover_from_env(common.config.as_deref())?;
    let policy = Policy::new(&loaded.config, workspace).map_err(GuardError::from)?;
    let d = policy.decide(&hook.tool_name, &hook.tool_input, hook.cwd.as_deref());
    let target = policy::target(&hook.tool_name, &hook.tool_input);
    let (outcome, key, reason) = match &d {
        Decision::Allow(k) => (Outcome::Allowed, *k, None),
        Decision::Block { key, reason } => (Outcome::Blocked, Some(*key), Some(reason.as_str())),
    };
    let mut rec = Record::new(
        SOURCE,
        &hook.tool_name,
        &target,
        outcome,
        key.map_or(SOURCE, Key::policy),
    );
    if std::env::var_os("SBX_AGENT").is_none() {
        rec = rec.agent("claude");
    }
    if let Some(r) = reason {
        rec = rec.reason(r);
    }
    // A call whose record is not in the log does not run: the agent cannot
    // buy an unrecorded call by flooding or stalling the sink.
    if !audit::append_verified(&rec) && reason.is_none() {
        return Ok(Some(
            "the audit sink did not take this call's record; the call is refused".into(),
        ));
    }
    Ok(reason.map(str::to_owned))
}

fn decide(
    common: &CommonArgs,
    tool: &str,
    input: &str,
    workspace: &std::path::Path,
) -> Result<ExitCode, BoxError> {
    let input: Value = serde_json::from_str(input)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| GuardError::BadInput(input.to_owned()))?;
    let loaded = config::discover_from_env(common.config.as_deref())?;
    let policy = Policy::new(&loaded.config, workspace).map_err(GuardError::from)?;
    let d = policy.decide(tool, &input, None);
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| Message::new(Exit::IoErr, e.to_string());
    if common.json {
        let (result, key, reason) = match &d {
            Decision::Allow(k) => ("allowed", k.map(Key::policy), None),
            Decision::Block { key, reason } => {
                ("blocked", Some(key.policy()), Some(reason.clone()))
            }
        };
        output::json_line(
            &mut out,
            "decision",
            &serde_json::json!({"tool": tool, "result": result, "policy": key, "reason": reason}),
        )
        .map_err(io)?;
    } else if !common.quiet {
        match &d {
            Decision::Allow(_) => writeln!(out, "allowed: {tool}").map_err(io)?,
            Decision::Block { reason, .. } => writeln!(out, "blocked: {reason}").map_err(io)?,
        }
    }
    Ok(if d.blocked() { Exit::Denied } else { Exit::Ok }.into())
}
