//! `sbx-run agent`: a headless Claude Code (or Codex) run in the
//! repository's sandbox, its output translated into sbx's own events.

pub mod chats;
pub mod codex;
pub mod codex_events;
pub mod events;
pub mod exec;
pub mod hosttools;
pub mod skills;

use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Instant;

use clap::Args;
use sbx_core::audit::{self, Outcome, Record};
use sbx_core::cli::CommonArgs;
use sbx_core::config::agent::AgentCli;
use sbx_core::error::BoxError;
use sbx_core::hosttools::{Call, Header, MARK, SERVER};
use sbx_core::{Exit, output};
use serde_json::{Value, json};

use crate::RunError;
use crate::workspace::Workspace;
use events::Event;

/// Exit statuses of `sbx-run agent` beyond the shared table.
pub const EXIT_FAILED: u8 = 1;
pub const EXIT_MAX_TURNS: u8 = 3;
pub const EXIT_TIMEOUT: u8 = 124;

/// The longest line of the CLI's output read whole. The sandbox writes
/// that output, so one endless line must not take the host's memory; a
/// tool result as large as a file the agent read fits well within.
const MAX_CLI_LINE: usize = 64 << 20;

enum Line {
    Whole,
    Overlong,
}

/// The next line of `r` into `buf`, without its newline, when it has at
/// most `max` bytes; a longer one is skipped to its end, never held.
/// `None` at the end of the stream.
fn capped_line(
    r: &mut impl BufRead,
    max: usize,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<Line>> {
    buf.clear();
    let n = r.by_ref().take(max as u64 + 1).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        return Ok(Some(Line::Whole));
    }
    if n <= max {
        return Ok(Some(Line::Whole)); // the last line, with no newline
    }
    buf.clear();
    loop {
        let avail = r.fill_buf()?;
        if avail.is_empty() {
            break;
        }
        match avail.iter().position(|&b| b == b'\n') {
            Some(i) => {
                r.consume(i + 1);
                break;
            }
            None => {
                let l = avail.len();
                r.consume(l);
            }
        }
    }
    Ok(Some(Line::Overlong))
}

#[derive(Debug, Clone, Args)]
pub struct AgentOpts {
    /// Workspace: a git repository or a directory in one (default: the current directory).
    #[arg(short = 'C', long = "path", value_name = "PATH")]
    pub path: Option<PathBuf>,
    /// Keep a conversation: earlier turns of chat ID are given to this run, and this run's are kept.
    #[arg(long, value_name = "ID")]
    pub chat: Option<String>,
    /// With --chat: give the run the chat's own scratch directory, /scratch/ID in the sandbox
    /// ($SBX_SCRATCH), kept across the chat's runs until `sbx-run prune --chats` removes the chat.
    #[arg(long, requires = "chat")]
    pub scratch: bool,
    /// Model for the CLI's --model.
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// Stop after N agent turns (exit 3).
    #[arg(long, value_name = "N")]
    pub max_turns: Option<u32>,
    /// The CLI's permission mode (default: [agent].permission-mode, else bypassPermissions: the sandbox is the guard).
    #[arg(long, value_name = "MODE")]
    pub permission_mode: Option<String>,
    /// Kill the run (the CLI's whole process group in the sandbox) after DUR, e.g. 10m (exit 124).
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<String>,
    /// Which agent CLI (default: [agent].cli, else claude).
    #[arg(long, value_name = "CLI", value_parser = ["claude", "codex"])]
    pub cli: Option<String>,
    /// List this workspace's chats and exit.
    #[arg(long, conflicts_with_all = ["show_chat", "prompt"])]
    pub list_chats: bool,
    /// Print chat ID's turns and exit.
    #[arg(long, value_name = "ID", conflicts_with = "prompt")]
    pub show_chat: Option<String>,
    /// The prompt, or - to read it from stdin.
    #[arg(value_name = "PROMPT")]
    pub prompt: Option<String>,
}

pub const AFTER_HELP: &str = "\
Runs `claude --print --output-format stream-json --verbose` (or `codex exec --json`) in the
repository's sandbox as the agent user, starting the sandbox when needed.

Output: the assistant's text as it streams, one dim line per tool call, and a last line with
turns, tokens, cost and time. --json prints sbx's agent events (schema v1), one a line:
  {\"type\": KIND, \"v\": 1, \"data\": {...}}   KIND: session text tool_use tool_result usage
  result error raw. A CLI line sbx does not know is passed on whole as `raw`, never dropped.
  result.status: success error max_turns timeout refused stopped.

Endpoint and key: ANTHROPIC_BASE_URL (host environment, else [agent].base-url) is given to the
CLI; its host is allowlisted by sbx-fw (loopback needs nothing; the host's variable is read when
the sandbox's container is created: set later, it takes `sbx-run rm` and a new start). The key comes from the host's
ANTHROPIC_API_KEY, else [agent].credential-file. It is written into the exec's stdin, read by
`sbx-guest agent-launch` and served once over a socket to the CLI's apiKeyHelper: it is never in
the container's environment, any process's environment, a workspace file or the audit log.

Workspace preparation: .agent-sandbox/skills/<name>/SKILL.md (validated: name a-z 0-9 -, up to
64, equal to the directory; description 1-1024 chars) are copied to .claude/skills/;
[agent.mcp] servers are passed with --mcp-config as a JSON string, beside the workspace's
own .mcp.json (never written; a name in both is refused). .claude and .mcp.json are
read-only in the sandbox.

Host tools: [agent.host-tools.NAME] (argv, description, timeout) are MCP tools
mcp__sbx-host__NAME, served in the sandbox by `sbx-guest mcp-host-tools` and run on the host:
only configured commands, each {param} element replaced by one argument as one argv element
(never a shell), environment cleared but PATH HOME USER LOGNAME LANG LC_ALL TZ, the process
group killed at the timeout (default 30s), every call audit-logged (host and sandbox).

Hooks: .agent-sandbox/hooks/before and hooks/after run on the host around the run, in the
workspace, with SBX_SANDBOX, SBX_WORKSPACE, SBX_CHAT_ID, SBX_PROMPT_FILE and (after)
SBX_RESULT_FILE set; `sbx-run exec` reaches the same sandbox. A failing before-hook stops the
run (77); a failing after-hook is reported, the result stands. Hooks are audit-logged.

Chats: --chat ID stores the turns under $XDG_STATE_HOME/sbx/chats/<workspace-hash>/ID/ and gives
earlier turns to the next run in its system prompt. --chat ID --scratch also gives the run the
chat's scratch directory, /scratch/ID in the sandbox ($SBX_SCRATCH, --add-dir, named in the system
prompt; the repository stays the working directory), kept on the host in
$XDG_STATE_HOME/sbx/scratch/<workspace-hash>/ID and owned like the repository. --list-chats,
--show-chat ID; `sbx-run prune --chats [--older-than 7d]` removes stale chats with their scratch
directories ([agent].chat-retention).

Codex: --cli codex runs `codex exec --json --dangerously-bypass-approvals-and-sandbox` (also under
[tools] read-only, whose mounts hold; plan: --sandbox read-only; other modes workspace-write);
--max-turns and [tools] disallowed/allowed (codex has no per-tool hook) are refused. [agent.mcp] and the
host tools are given to it as `-c mcp_servers.NAME={...}` (names of letters, digits, _ and -
only), not through .mcp.json. OPENAI_BASE_URL (else [agent].base-url) and OPENAI_API_KEY (else
[agent].credential-file) make a model provider `sbx` (Responses API); the key reaches codex only
through its token command (model_providers.sbx.auth = sbx-guest agent-key SOCKET, served once).
Its lines become events: thread.started session; item.started/completed of command_execution,
mcp_tool_call, file_change, web_search tool_use/tool_result (name shell, mcp__S__T, apply_patch,
web_search); agent_message text; error items and lines error; turn.completed usage (cost null)
and result success; turn.failed error and result error; anything else raw.

Stopping: SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to the CLI's process group in the
sandbox; its whole process tree is killed 3 s later (at once on a second signal); exit 128+N,
result status `stopped`. If sbx-run dies (SIGKILL) the guest sees the connection close, sends
SIGTERM, and kills the tree 5 s later: nothing of the run outlives sbx-run.

-vv prints sbx-run's own phase times (before the exec, first CLI line, exec exit, done) on stderr.

Exit status: 0 success; 1 the CLI or the API reported an error; 3 max turns reached; 77 the
before-hook refused; 124 timeout; 128+N stopped by signal N; 64 usage; 66 no workspace; 69
Docker unavailable; 78 bad config or skill.

Examples:
  sbx-run agent 'fix the failing test'
  git diff | sbx-run agent --json - > events.jsonl
  sbx-run agent --chat review --max-turns 5 'and now the docs'";

type Res = Result<ExitCode, BoxError>;

fn config_err(msg: String) -> BoxError {
    Box::new(RunError::Config(msg))
}

fn usage_err(msg: String) -> BoxError {
    Box::new(RunError::Usage(msg))
}

/// Host state for the agent's API access, resolved before anything starts.
struct Access {
    base_url: Option<String>,
    key: Option<String>,
}

/// The host variables naming each CLI's endpoint and key.
fn access_vars(cli: AgentCli) -> (&'static str, &'static str) {
    match cli {
        AgentCli::Claude => ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"),
        AgentCli::Codex => ("OPENAI_BASE_URL", "OPENAI_API_KEY"),
    }
}

/// The host each CLI sends its requests to when no base URL is set.
fn default_host(cli: AgentCli) -> &'static str {
    match cli {
        AgentCli::Claude => "api.anthropic.com",
        AgentCli::Codex => "api.openai.com",
    }
}

fn access(ws: &Workspace, cli: AgentCli) -> Result<Access, BoxError> {
    let agent = &ws.loaded.config.agent;
    let (url_var, key_var) = access_vars(cli);
    let base_url = match std::env::var(url_var).ok().filter(|v| !v.is_empty()) {
        Some(u) => Some(
            u.parse::<sbx_core::config::agent::BaseUrl>()
                .map_err(|e| usage_err(format!("{url_var}: {e}")))?
                .text,
        ),
        None => agent.base_url.as_ref().map(|u| u.text.clone()),
    };
    let key = match std::env::var(key_var).ok().filter(|v| !v.is_empty()) {
        Some(k) => Some(k),
        None => match &agent.credential_file {
            Some(f) => {
                let text = std::fs::read_to_string(f).map_err(|e| {
                    config_err(format!(
                        "{}: [agent].credential-file {}: {e}",
                        ws.loaded.describe(),
                        f.display()
                    ))
                })?;
                let k = text.lines().next().unwrap_or("").trim().to_owned();
                if k.is_empty() {
                    return Err(config_err(format!(
                        "{}: [agent].credential-file {} is empty: put the API key on its first line",
                        ws.loaded.describe(),
                        f.display()
                    )));
                }
                Some(k)
            }
            None => None,
        },
    };
    if key.as_deref().is_some_and(|k| k.contains(['\n', '\r'])) {
        return Err(usage_err(format!("{key_var} holds a line break")));
    }
    // A key the proxy injects ([secrets] reading this variable, or bound
    // to the endpoint's host) is never handed in: the CLI gets its
    // placeholder, the proxy puts the key in on the way out.
    let host = match base_url.as_deref() {
        Some(u) => u
            .parse::<sbx_core::config::agent::BaseUrl>()
            .ok()
            .map(|u| u.host),
        // No base URL: the CLI's own endpoint, the host most [secrets]
        // entries name.
        None => Some(default_host(cli).to_owned()),
    };
    let injected = ws.loaded.config.secrets.iter().find(|(_, s)| {
        s.from == sbx_core::config::SecretFrom::Env(key_var.to_owned())
            || host.as_deref() == Some(s.host.0.as_str())
    });
    let key = match injected {
        // A login ([secrets] claude-login:): no key at all, the CLI uses
        // the placeholder login start put in its ~/.claude.
        Some((_, s)) if matches!(s.from, sbx_core::config::SecretFrom::ClaudeLogin(_)) => None,
        Some((name, _)) => Some(sbx_core::secrets::placeholder(name)),
        None => key,
    };
    Ok(Access { base_url, key })
}

fn read_prompt(p: Option<&str>) -> Result<String, BoxError> {
    match p {
        Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| Box::new(RunError::Io("stdin".into(), e)) as BoxError)?;
            Ok(s)
        }
        Some(p) if !p.trim().is_empty() => Ok(p.to_owned()),
        _ => Err(usage_err(
            "give a prompt (sbx-run agent 'fix the test'), or - to read it from stdin".into(),
        )),
    }
}

/// Copy the skills into `.claude/skills/`; return --mcp-config's values.
/// Every write goes through `sbx_sys::beneath` (issue 37: the agent's links
/// had these writes land anywhere on the host): a link on the way is
/// refused, files are replaced by rename, never written through.
/// `.claude` and `.mcp.json` are read-only in the sandbox (issue 38), and
/// sbx's servers are given as a JSON string, never written: the user's own
/// `.mcp.json` is left as it is and passed as well, and a server name both
/// use is refused rather than one silently replacing the other.
fn prepare_workspace(ws: &Workspace) -> Result<Vec<String>, BoxError> {
    let bad = |e: std::io::Error| Box::new(RunError::BadWorkspace(e.to_string())) as BoxError;
    let root = sbx_sys::beneath::Root::open(&ws.path).map_err(bad)?;
    let list = skills::load(&ws.config_dir().join("skills")).map_err(config_err)?;
    for s in &list {
        let to = Path::new(".claude").join("skills").join(&s.name);
        skills::copy_tree(&s.dir, &root, &to, ws.owner).map_err(bad)?;
    }
    let mcp = &ws.loaded.config.agent.mcp;
    let host_tools = !ws.loaded.config.agent.host_tools.is_empty();
    let mut servers: serde_json::Map<String, Value> = mcp
        .iter()
        .map(|(name, s)| {
            let (cmd, args) = s
                .command
                .0
                .split_first()
                .map_or(("", &[][..]), |(c, a)| (c.as_str(), a));
            (
                name.clone(),
                json!({"type": "stdio", "command": cmd, "args": args, "env": s.env}),
            )
        })
        .collect();
    if host_tools {
        // The guest's relay; it reaches the host only through agent-launch.
        servers.insert(
            SERVER.into(),
            json!({"type": "stdio", "command": "/usr/local/bin/sbx-guest", "args": ["mcp-host-tools"], "env": {}}),
        );
    }
    let rel = Path::new(".mcp.json");
    let mut out = Vec::new();
    // A missing `.mcp.json` is an empty read-only directory in the sandbox.
    if let Some(doc) = read_mcp_json(&root, rel).map_err(bad)? {
        let theirs = doc.get("mcpServers").and_then(Value::as_object);
        if let Some(n) = theirs.and_then(|t| t.keys().find(|k| servers.contains_key(*k))) {
            return Err(config_err(format!(
                "{}: MCP server \"{n}\" is in {} and in [agent.mcp] (or is sbx's host-tools relay): rename one",
                ws.loaded.describe(),
                ws.path.join(rel).display()
            )));
        }
        out.push(".mcp.json".to_owned());
    }
    if !servers.is_empty() {
        out.push(json!({ "mcpServers": servers }).to_string());
    }
    Ok(out)
}

/// The workspace's `.mcp.json` as a JSON object (None when missing, or a
/// directory: the mask a missing one gets in the sandbox).
fn read_mcp_json(
    root: &sbx_sys::beneath::Root,
    rel: &Path,
) -> std::io::Result<Option<serde_json::Map<String, Value>>> {
    match root.open_path(rel) {
        Ok(fd) if sbx_sys::beneath::kind(&fd)? == sbx_sys::beneath::Kind::Dir => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        _ => {}
    }
    let f = root.open_read(rel)?;
    let mut data = Vec::new();
    f.take(1 << 20).read_to_end(&mut data)?;
    serde_json::from_slice(&data).map(Some).map_err(|e| {
        std::io::Error::other(format!(
            "{}: not a JSON object ({e}): fix or remove it (sbx-run agent gives it to Claude Code)",
            root.path().join(rel).display()
        ))
    })
}

/// Hooks print to our stderr, so stdout stays the events.
fn stderr_stdio() -> Stdio {
    use std::os::fd::AsFd;
    match std::io::stderr().as_fd().try_clone_to_owned() {
        Ok(fd) => Stdio::from(fd),
        Err(_) => Stdio::null(),
    }
}

fn hook_path(ws: &Workspace, which: &str) -> PathBuf {
    ws.config_dir().join("hooks").join(which)
}

/// Run a hook if present; Ok(true) when absent or it exited 0.
fn run_hook(
    ws: &Workspace,
    which: &str,
    env: &[(&str, &Path)],
    chat: Option<&str>,
) -> Result<bool, BoxError> {
    let hook = hook_path(ws, which);
    if !hook.exists() {
        return Ok(true);
    }
    let mut c = std::process::Command::new(&hook);
    c.current_dir(&ws.path)
        .env("SBX_SANDBOX", &ws.names.container)
        .env("SBX_WORKSPACE", &ws.path)
        .env("SBX_CHAT_ID", chat.unwrap_or(""))
        .env_remove("ANTHROPIC_API_KEY")
        .stdin(Stdio::null())
        .stdout(stderr_stdio());
    for (k, v) in env {
        c.env(k, v);
    }
    let target = hook.display().to_string();
    let ok = match c.status() {
        Ok(s) => s.success(),
        Err(e) => {
            output::warn(&format!("{target}: {e}"));
            false
        }
    };
    let op = format!("hook-{which}");
    audit::append(
        &Record::new(
            "sbx-run",
            &op,
            &target,
            if ok {
                Outcome::Allowed
            } else {
                Outcome::Blocked
            },
            "agent-hooks",
        )
        .agent("sbx-run-agent"),
    );
    Ok(ok)
}

struct Printer {
    json: bool,
    color: bool,
    quiet: bool,
}

impl Printer {
    fn emit(&self, out: &mut impl Write, e: &Event) {
        if self.json {
            let _ = writeln!(out, "{}", e.to_json());
        } else if !self.quiet {
            let dim = |s: String| {
                if self.color {
                    format!("\x1b[2m{s}\x1b[0m")
                } else {
                    s
                }
            };
            match e.kind {
                "text" => {
                    // The model's text: lines kept, escape sequences shown.
                    let t = e.data["text"].as_str().unwrap_or("");
                    let _ = writeln!(out, "{}", sbx_core::sanitize::text(t));
                }
                "tool_use" => {
                    let input = e.data["input"].to_string();
                    let short: String = input.chars().take(100).collect();
                    let _ = writeln!(
                        out,
                        "{}",
                        dim(format!(
                            "→ {} {}",
                            sbx_core::sanitize::field(e.data["name"].as_str().unwrap_or("?")),
                            sbx_core::sanitize::field(&short)
                        ))
                    );
                }
                "error" => output::error(e.data["message"].as_str().unwrap_or("")),
                _ => {}
            }
        }
        let _ = out.flush();
    }
}

/// `-vv`: each phase's time since `run` began, on stderr, to see
/// what sbx adds around the CLI (bench/agent.sh reads them).
struct Timing {
    on: bool,
    seen_first: bool,
    t0: Instant,
}

impl Timing {
    fn new(on: bool) -> Self {
        Timing {
            on,
            seen_first: false,
            t0: Instant::now(),
        }
    }

    fn mark(&mut self, what: &str) {
        if self.on {
            let ms = self.t0.elapsed().as_secs_f64() * 1000.0;
            eprintln!("sbx-run agent: {ms:7.2} ms {what}");
        }
    }

    fn first(&mut self, what: &str) {
        if !self.seen_first {
            self.seen_first = true;
            self.mark(what);
        }
    }
}

pub fn run(common: &CommonArgs, o: &AgentOpts) -> Res {
    if o.list_chats || o.show_chat.is_some() {
        let ws = Workspace::open(common, o.path.clone())?;
        return chats::cli(common, &ws, o.list_chats, o.show_chat.as_deref());
    }
    let mut timing = Timing::new(common.verbose >= 2);
    let prompt = read_prompt(o.prompt.as_deref())?;
    if let Some(id) = &o.chat {
        chats::check_id(id).map_err(usage_err)?;
    }
    let timeout = match &o.timeout {
        Some(t) => Some(
            humantime::parse_duration(t)
                .map_err(|e| usage_err(format!("--timeout {t}: {e} (like 30s or 10m)")))?,
        ),
        None => None,
    };
    // Everything that can be refused is checked before the sandbox starts.
    let ws0 = Workspace::open(common, o.path.clone())?;
    let cfg = ws0.loaded.config.agent.clone();
    let timeout = timeout.or(cfg.timeout.map(|i| i.0));
    if !cfg.host_tools.is_empty() && cfg.mcp.contains_key(SERVER) {
        return Err(config_err(format!(
            "{}: [agent.mcp.{SERVER}]: the name is sbx's server for [agent.host-tools]; rename it",
            ws0.loaded.describe()
        )));
    }
    let cli = match o.cli.as_deref() {
        Some("codex") => AgentCli::Codex,
        Some(_) => AgentCli::Claude,
        None => cfg.cli,
    };
    if cli == AgentCli::Codex
        && let Some(key) = ws0.loaded.config.codex_cannot_apply()
    {
        return Err(config_err(format!(
            "{}: [{}] has rules codex cannot apply (it has no per-tool hook, so they would be ignored): remove them, keep read-only / deny-read (mounts, which hold for codex), or use --cli claude",
            ws0.loaded.describe(),
            key.replace('.', "].")
        )));
    }
    if cli == AgentCli::Codex && o.max_turns.is_some() {
        return Err(usage_err(
            "--max-turns: codex exec has no turn limit; drop it, or use --cli claude".into(),
        ));
    }
    let acc = access(&ws0, cli)?;
    timing.mark("config loaded");
    let codex_mcp = match cli {
        AgentCli::Codex => codex::mcp_args(&cfg.mcp, !cfg.host_tools.is_empty())
            .map_err(|e| config_err(format!("{}: {e}", ws0.loaded.describe())))?,
        AgentCli::Claude => Vec::new(),
    };
    let mode = match &o.permission_mode {
        Some(m) => m
            .parse::<sbx_core::config::agent::PermissionMode>()
            .map_err(|e| usage_err(format!("--permission-mode: {e}")))?
            .as_str(),
        None => cfg
            .permission_mode
            .map_or("bypassPermissions", |m| m.as_str()),
    };
    let mcp_config = prepare_workspace(&ws0)?;
    let history = match &o.chat {
        Some(id) => chats::history_prompt(&chats::load(&ws0, id)?),
        None => None,
    };
    timing.mark("workspace prepared");
    let scratch = match (&o.chat, o.scratch) {
        (Some(id), true) => Some(chats::scratch_in_sandbox(id)),
        _ => None,
    };
    let system: Vec<String> = history
        .into_iter()
        .chain(scratch.as_deref().map(chats::scratch_prompt))
        .collect();
    let system = (!system.is_empty()).then(|| system.join("\n\n"));
    // A running sandbox answers on its guest socket (only sbx-run makes that
    // socket, in the host directory of this workspace's container): then no
    // engine inspection and no second config load, as `sbx-run exec` does.
    // The probe's connection then carries the exec, unless a before-hook
    // runs first (the guest wants the request within its handshake time).
    let (ws, mut conn) = match crate::guestexec::connect(&crate::guestexec::socket_for(&ws0)) {
        Ok(c) => (ws0, Some(c)),
        Err(_) => (crate::lifecycle::start(common, o.path.clone(), None)?, None),
    };
    if hook_path(&ws, "before").exists() {
        conn = None;
    }
    // Refused names go to [network] on-block while the run lasts.
    let _asks = crate::onblock::spawn(&ws);
    // A claude-login: is refreshed on the host while the run lasts.
    let _logins = crate::loginrefresh::spawn(&ws);
    timing.mark("sandbox ready");

    // Files the hooks read live in a private temporary directory.
    let tmp = tempfile::Builder::new()
        .prefix("sbx-agent-")
        .tempdir()
        .map_err(|e| Box::new(RunError::Io(std::env::temp_dir(), e)) as BoxError)?;
    let prompt_file = tmp.path().join("prompt.txt");
    std::fs::write(&prompt_file, &prompt)
        .map_err(|e| Box::new(RunError::Io(prompt_file.clone(), e)) as BoxError)?;
    if !run_hook(
        &ws,
        "before",
        &[("SBX_PROMPT_FILE", &prompt_file)],
        o.chat.as_deref(),
    )? {
        let msg = format!(
            "{}: refused the run (exit non-zero); nothing was run",
            hook_path(&ws, "before").display()
        );
        let p = Printer {
            json: common.json,
            color: false,
            quiet: common.quiet,
        };
        let mut out = std::io::stdout().lock();
        p.emit(&mut out, &Event::new("error", json!({"message": msg})));
        p.emit(
            &mut out,
            &Event::new("result", json!({"status": "refused", "exit": 77})),
        );
        return Ok(Exit::Denied.into());
    }

    let mut argv: Vec<String> = match cli {
        AgentCli::Claude => {
            let mut a: Vec<String> = [
                "claude",
                "--print",
                "--output-format",
                "stream-json",
                "--verbose",
            ]
            .map(String::from)
            .into();
            a.extend(["--permission-mode".into(), mode.into()]);
            if let Some(m) = o.model.clone().or(cfg.model.clone()) {
                a.extend(["--model".into(), m]);
            }
            if let Some(n) = o.max_turns.or(cfg.max_turns) {
                a.extend(["--max-turns".into(), n.to_string()]);
            }
            for m in &mcp_config {
                a.extend(["--mcp-config".into(), m.clone()]);
            }
            if let Some(d) = &scratch {
                a.extend(["--add-dir".into(), d.clone()]);
            }
            if let Some(h) = &system {
                a.extend(["--append-system-prompt".into(), h.clone()]);
            }
            a
        }
        AgentCli::Codex => {
            let mut a: Vec<String> = ["codex", "exec", "--json"].map(String::from).into();
            // The sandbox is the guard, as bypassPermissions is for Claude.
            // [tools] read-only too: codex's own sandbox (bwrap) cannot
            // start inside the container (pivot_root is refused), and the
            // read-only workspace mount is what holds (issue 38).
            let read_only = ws.loaded.config.read_only();
            match mode {
                _ if read_only => a.push("--dangerously-bypass-approvals-and-sandbox".into()),
                "bypassPermissions" => a.push("--dangerously-bypass-approvals-and-sandbox".into()),
                "plan" => a.extend(["--sandbox".into(), "read-only".into()]),
                _ => a.extend(["--sandbox".into(), "workspace-write".into()]),
            }
            if let Some(m) = o.model.clone().or(cfg.model.clone()) {
                a.extend(["--model".into(), m]);
            }
            a.extend(codex::provider_args(
                acc.base_url.as_deref(),
                acc.key.is_some(),
            ));
            a.extend(codex_mcp);
            if let Some(d) = &scratch {
                // One word: the prompt's `-` can never be taken for a directory.
                a.push(format!("--add-dir={d}"));
            }
            a.push("-".into());
            a
        }
    };
    let mut launch: Vec<String> = vec!["sbx-guest".into(), "agent-launch".into()];
    if cli == AgentCli::Codex {
        launch.extend(["--cli".into(), "codex".into()]);
    }
    if let Some(t) = timeout {
        launch.extend(["--timeout".into(), t.as_secs().max(1).to_string()]);
    }
    let host_tools = match cfg.host_tools.is_empty() {
        true => None,
        false => Some(std::sync::Arc::new(
            hosttools::HostTools::new(
                &ws.loaded.config,
                ws.path.clone(),
                match cli {
                    AgentCli::Claude => "claude",
                    AgentCli::Codex => "codex",
                },
            )
            .map_err(|e| config_err(format!("{}: {e}", ws.loaded.describe())))?,
        )),
    };
    if host_tools.is_some() {
        launch.push("--host-tools".into());
    }
    if let Some(d) = &scratch {
        launch.extend(["--scratch".into(), d.clone()]);
    }
    launch.push("--".into());
    launch.append(&mut argv);
    let mut env: Vec<(String, String)> = vec![
        (
            "SBX_AGENT".into(),
            match cli {
                AgentCli::Claude => "claude".into(),
                AgentCli::Codex => "codex".into(),
            },
        ),
        (
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
            "1".into(),
        ),
        ("DISABLE_AUTOUPDATER".into(), "1".into()),
    ];
    if let (AgentCli::Claude, Some(u)) = (cli, &acc.base_url) {
        env.push(("ANTHROPIC_BASE_URL".into(), u.clone()));
    }

    let started = Instant::now();
    timing.mark("exec");
    let mut child = exec::spawn(&ws, &launch, &env, conn)?;
    let stopped_by = child.stopped_by.take();
    // With host tools stdin stays open for their answers; else it closes
    // after the prompt (the CLI reads it to the end).
    let stdin = std::sync::Arc::new(std::sync::Mutex::new(child.stdin.take()));
    {
        // The key line first (empty: the CLI's own login), then the prompt.
        let mut buf = acc.key.clone().unwrap_or_default().into_bytes();
        buf.push(b'\n');
        if host_tools.is_some() {
            let h = Header {
                tools: hosttools::specs(&cfg.host_tools),
                prompt_bytes: prompt.len(),
            };
            buf.extend_from_slice(&serde_json::to_vec(&h).unwrap_or_default());
            buf.push(b'\n');
        }
        buf.extend_from_slice(prompt.as_bytes());
        let stdin = stdin.clone();
        let keep_open = host_tools.is_some();
        std::thread::spawn(move || {
            let mut g = stdin.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(w) = g.as_mut() {
                let _ = w.write_all(&buf);
            }
            if !keep_open {
                *g = None;
            }
        });
    }
    let printer = Printer {
        json: common.json,
        color: output::use_color(common.color, std::io::stdout().is_terminal()),
        quiet: common.quiet,
    };
    let mut out = std::io::stdout().lock();
    let mut result: Option<Value> = None;
    let mut usage: Option<Value> = None;
    let mut final_text = String::new();
    let mut calls = Vec::new();
    let mut codex_stream = (cli == AgentCli::Codex).then(codex_events::CodexStream::new);
    if let Some(stdout) = child.stdout.take() {
        let mut reader = BufReader::new(stdout);
        let mut raw = Vec::new();
        loop {
            let line = match capped_line(&mut reader, MAX_CLI_LINE, &mut raw) {
                Ok(Some(Line::Whole)) => match std::str::from_utf8(&raw) {
                    Ok(l) => l.to_owned(),
                    Err(_) => break,
                },
                Ok(Some(Line::Overlong)) => {
                    output::warn(&format!(
                        "a line of the CLI's output over {} MiB was dropped",
                        MAX_CLI_LINE >> 20
                    ));
                    continue;
                }
                Ok(None) | Err(_) => break,
            };
            timing.first("first CLI line");
            if let (Some(ht), Some(call)) = (&host_tools, line.strip_prefix(char::from(MARK))) {
                calls.extend(host_tool_call(ht, call, &stdin));
                continue;
            }
            let evs = match &mut codex_stream {
                None => events::translate_claude(&line),
                Some(s) => s.line(&line),
            };
            for e in evs {
                match e.kind {
                    "result" => {
                        result = Some(e.data.clone());
                        continue; // printed last, with the exit status
                    }
                    "usage" => {
                        usage = Some(e.data.clone());
                    }
                    "text" => {
                        if let Some(t) = e.data["text"].as_str() {
                            final_text = t.to_owned();
                        }
                    }
                    _ => {}
                }
                printer.emit(&mut out, &e);
            }
        }
    }
    // The launcher is done: no more answers; calls still running are killed.
    *stdin.lock().unwrap_or_else(|e| e.into_inner()) = None;
    if let Some(ht) = &host_tools {
        ht.kill_all();
    }
    // Every call that reached the host is audited before we exit.
    for c in calls {
        let _ = c.join();
    }
    timing.mark("CLI output ended");
    let code = child
        .wait()
        .map_err(|e| Box::new(RunError::Io("agent exec".into(), e)) as BoxError)?;
    timing.mark("exec exited");
    let elapsed = started.elapsed();
    let mut result = result.unwrap_or_else(|| json!({"status": "error", "turns": null}));
    let stop_sig = stopped_by.map_or(0, |s| s.load(std::sync::atomic::Ordering::SeqCst));
    let exit: u8 = if stop_sig != 0 {
        result["status"] = json!("stopped");
        (128 + stop_sig).min(255) as u8
    } else if code == i32::from(EXIT_TIMEOUT) {
        result["status"] = json!("timeout");
        EXIT_TIMEOUT
    } else {
        match result["status"].as_str() {
            Some("success") if code == 0 => 0,
            Some("max_turns") => EXIT_MAX_TURNS,
            _ => {
                result["status"] = json!("error");
                EXIT_FAILED
            }
        }
    };
    result["exit"] = json!(exit);
    if stop_sig != 0 {
        printer.emit(&mut out, &Event::new("error", json!({"message": format!("stopped by signal {stop_sig}: forwarded to the CLI, its process tree ended")})));
    } else if exit == EXIT_TIMEOUT {
        printer.emit(&mut out, &Event::new("error", json!({"message": format!("timed out after {}; the CLI's process group was killed", humantime::format_duration(timeout.unwrap_or_default()))})));
    } else if exit == EXIT_FAILED && result.get("text").is_none_or(Value::is_null) {
        printer.emit(&mut out, &Event::new("error", json!({"message": format!("the agent CLI exited with status {code} without a result")})));
    }
    printer.emit(&mut out, &Event::new("result", result.clone()));
    if !common.json && !common.quiet {
        let u = usage.clone().unwrap_or(json!({}));
        let line = format!(
            "{} · turns {} · tokens {} in / {} out · ${:.4} · {:.1} s",
            result["status"].as_str().unwrap_or("error"),
            result["turns"]
                .as_u64()
                .map_or("?".into(), |n| n.to_string()),
            u["input_tokens"].as_u64().unwrap_or(0),
            u["output_tokens"].as_u64().unwrap_or(0),
            u["cost_usd"].as_f64().unwrap_or(0.0),
            elapsed.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "{}",
            if printer.color {
                format!("\x1b[2m{line}\x1b[0m")
            } else {
                line
            }
        );
    }
    drop(out);
    let target = format!(
        "{} chat={}",
        ws.names.container,
        o.chat.as_deref().unwrap_or("-")
    );
    let reason = format!(
        "status {} exit {exit}",
        result["status"].as_str().unwrap_or("error")
    );
    audit::append(
        &Record::new("sbx-run", "agent-run", &target, Outcome::Allowed, "agent")
            .agent(match cli {
                AgentCli::Claude => "claude",
                AgentCli::Codex => "codex",
            })
            .reason(&reason),
    );
    if let Some(id) = &o.chat {
        chats::append(&ws, id, &prompt, &final_text)?;
    }
    let result_file = tmp.path().join("result.json");
    let _ = std::fs::write(
        &result_file,
        json!({"result": result, "usage": usage}).to_string(),
    );
    if !run_hook(
        &ws,
        "after",
        &[
            ("SBX_PROMPT_FILE", &prompt_file),
            ("SBX_RESULT_FILE", &result_file),
        ],
        o.chat.as_deref(),
    )? {
        output::warn(&format!(
            "{}: failed; the run's result stands",
            hook_path(&ws, "after").display()
        ));
    }
    timing.mark("done");
    Ok(ExitCode::from(exit))
}

/// Run one call from the sandbox on its own thread (the events keep
/// flowing) and write the answer down the exec's stdin.
fn host_tool_call(
    ht: &std::sync::Arc<hosttools::HostTools>,
    line: &str,
    stdin: &std::sync::Arc<std::sync::Mutex<Option<Box<dyn Write + Send>>>>,
) -> Option<std::thread::JoinHandle<()>> {
    let call: Call = match serde_json::from_str(line) {
        Ok(c) => c,
        Err(e) => {
            output::warn(&format!(
                "host tools: a malformed call from the sandbox: {e}"
            ));
            return None;
        }
    };
    let (ht, stdin) = (ht.clone(), stdin.clone());
    Some(std::thread::spawn(move || {
        let a = ht.call(&call);
        ht.audit(&a);
        let mut text = serde_json::to_vec(&a).unwrap_or_default();
        text.push(b'\n');
        if let Some(w) = stdin.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            let _ = w.write_all(&text).and_then(|()| w.flush());
        }
    }))
}

/// `sbx-run prune --chats [--older-than DUR]`.
pub fn prune_chats(common: &CommonArgs, older_than: Option<&str>) -> Res {
    let age = match older_than {
        Some(t) => humantime::parse_duration(t)
            .map_err(|e| usage_err(format!("--older-than {t}: {e} (like 7d or 12h)")))?,
        None => {
            let ws = Workspace::open(common, None).ok();
            ws.map_or(std::time::Duration::from_secs(7 * 24 * 3600), |w| {
                w.loaded.config.agent.chat_retention.0
            })
        }
    };
    let n = chats::prune(age)?;
    output::info(&format!("removed {n} chat(s)"));
    Ok(Exit::Ok.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overlong_line_is_skipped_and_never_held() {
        let mut input = b"short\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 10_000));
        input.extend(b"\nexactly10!\nlast");
        let mut r = BufReader::with_capacity(64, &input[..]);
        let mut buf = Vec::new();
        let mut got = Vec::new();
        while let Some(l) = capped_line(&mut r, 10, &mut buf).unwrap() {
            assert!(buf.capacity() < 1_000, "the long line was held");
            got.push(match l {
                Line::Whole => String::from_utf8(buf.clone()).unwrap(),
                Line::Overlong => "<dropped>".into(),
            });
        }
        assert_eq!(got, ["short", "<dropped>", "exactly10!", "last"]);
    }
}
