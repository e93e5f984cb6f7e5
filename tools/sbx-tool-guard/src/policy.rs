//! The decision: one tool call against `[tools]` and the masks. Pure, so
//! the hook, `sbx-run test` and the unit tests ask the same function.

use std::path::{Component, Path, PathBuf};

use sbx_core::config::{
    Config, RuleArg, TOOL_FAMILIES, ToolRule, Tools, rule_covers, writing_tools,
};
use sbx_core::glob::{PathPattern, PathSet};
use serde_json::Value;

use crate::shell::{self, SimpleCmd, Word};
use crate::tools::{self as known, Class};

/// Which `[tools]` key decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    ReadOnly,
    Disallowed,
    Allowed,
    DenyRead,
    /// A tool sbx does not know, under rules that depend on what it does.
    UnknownTool,
    /// A write to an AI CLI's own configuration, under rules that depend
    /// on what runs: the CLI runs what it names itself, past the hook.
    CliConfig,
}

impl Key {
    /// The audit record's `policy`.
    pub fn policy(self) -> &'static str {
        match self {
            Key::ReadOnly => "tools.read-only",
            Key::Disallowed => "tools.disallowed",
            Key::Allowed => "tools.allowed",
            Key::DenyRead => "tools.deny-read",
            Key::UnknownTool => "tools.unknown-tool",
            Key::CliConfig => "tools.cli-config",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No rule refused it; `Key::Allowed` when an allowed rule matched.
    Allow(Option<Key>),
    Block {
        key: Key,
        reason: String,
    },
}

impl Decision {
    pub fn blocked(&self) -> bool {
        matches!(self, Decision::Block { .. })
    }
}

/// A compiled policy.
#[derive(Debug)]
pub struct Policy {
    tools: Tools,
    /// Per rule of `disallowed` then `allowed`: its path glob compiled.
    globs: Vec<Option<PathSet>>,
    blocked: PathSet,
    unmasked: PathSet,
    workspace: PathBuf,
}

#[derive(Debug, thiserror::Error)]
#[error("[tools]: {0}")]
pub struct PolicyError(String);

impl Policy {
    /// `workspace`: the sandbox's workspace path (what relative paths and
    /// the masks are relative to).
    pub fn new(cfg: &Config, workspace: &Path) -> Result<Self, PolicyError> {
        let tools = cfg.tools.clone().unwrap_or_default();
        let set = |p: &[PathPattern]| PathSet::new(p).map_err(|e| PolicyError(e.to_string()));
        let mut globs = Vec::new();
        for r in tools
            .disallowed
            .iter()
            .chain(tools.allowed.iter().flat_map(|a| a.iter()))
        {
            globs.push(match &r.arg {
                Some(RuleArg::Path(p)) => Some(set(std::slice::from_ref(p))?),
                _ => None,
            });
        }
        Ok(Self {
            blocked: set(&cfg.blocked_files())?,
            unmasked: set(&cfg.allowed_files())?,
            tools,
            globs,
            workspace: normalize(Path::new("/"), workspace),
        })
    }

    pub fn decide(&self, tool: &str, input: &Value, cwd: Option<&Path>) -> Decision {
        let cwd = cwd.map_or_else(|| self.workspace.clone(), |c| normalize(&self.workspace, c));
        let class = known::class(tool, input);
        let call = Call::new(tool, class, input, &cwd);
        let named = |r: &ToolRule| r.tool == tool && r.arg.is_none();
        if class.is_none()
            && self.depends_on_tools()
            && !self.tools.allowed.iter().flat_map(|a| a.iter()).any(named)
        {
            return Decision::Block {
                key: Key::UnknownTool,
                reason: format!(
                    "{tool} is refused: sbx does not know what this tool does (its table is Claude Code {}'s), and [tools] has rules for shells or files; name it in [tools].allowed to let it through",
                    known::CLAUDE_VERSION
                ),
            };
        }
        // The CLI's own configuration (`~/.claude.json`'s MCP servers,
        // `~/.claude/settings.json`'s `otelHeadersHelper`, `.codex/`): its
        // next session runs the commands written there itself, never
        // through this hook, so a Write could buy what a Bash ban refuses,
        // unaudited (issue 38, a38y).
        if self.depends_on_tools()
            && (writing_tools().contains(&tool) || class == Some(Class::Edit))
            && let Some(p) = call
                .paths
                .iter()
                .find(|p| cli_config(p) || shell_startup(p))
        {
            return Decision::Block {
                key: Key::CliConfig,
                reason: format!(
                    "{tool} of {} is refused: it is an AI CLI's own configuration, whose hooks, MCP servers and helper commands the CLI runs without asking this hook, and [tools] has rules for shells or files",
                    p.display()
                ),
            };
        }
        // The same files through a shell call's redirections: an allowed
        // `echo … >> ~/.claude/shell-snapshots/snapshot-bash-*` made the
        // session's next `echo hi` run a function (a38z).
        if self.depends_on_tools()
            && let Some(w) = call.cli_config_write(self.tools.allowed.is_some())
        {
            return Decision::Block {
                key: Key::CliConfig,
                reason: format!(
                    "{} is refused: it writes {w}, which may be an AI CLI's own configuration or its shell snapshot, whose commands the CLI runs without asking this hook; write the file's name out literally, outside .claude/",
                    call.what()
                ),
            };
        }
        if self.tools.read_only && (writing_tools().contains(&tool) || class == Some(Class::Writes))
        {
            return Decision::Block {
                key: Key::ReadOnly,
                reason: format!(
                    "{tool} is refused: [tools].read-only = true (the workspace is read-only)"
                ),
            };
        }
        let n_dis = self.tools.disallowed.len();
        for (i, r) in self.tools.disallowed.iter().enumerate() {
            let m = self.matches_any_part(r, self.globs[i].as_ref(), &call);
            let reason = match m {
                M::No => continue,
                M::Yes => format!(
                    "{} is refused by [tools].disallowed rule \"{r}\"",
                    call.what()
                ),
                M::Unknown(why) => format!(
                    "{} is refused: [tools].disallowed rule \"{r}\" cannot be checked, as {why}; write the command out literally",
                    call.what()
                ),
            };
            return Decision::Block {
                key: Key::Disallowed,
                reason,
            };
        }
        let mut key = None;
        if let Some(allowed) = &self.tools.allowed {
            let rules: Vec<(&ToolRule, Option<&PathSet>)> = allowed
                .iter()
                .enumerate()
                .map(|(i, r)| (r, self.globs[n_dis + i].as_ref()))
                .collect();
            if !self.allowed_by(&rules, &call) {
                let why = match &call.unknown {
                    Some(u)
                        if !rules
                            .iter()
                            .any(|(r, _)| r.tool == "Bash" && r.arg.is_none()) =>
                    {
                        format!(" ({u})")
                    }
                    _ => String::new(),
                };
                return Decision::Block {
                    key: Key::Allowed,
                    reason: format!(
                        "{} is refused: no [tools].allowed rule matches it{why} (allowed: {})",
                        call.what(),
                        allowed
                            .iter()
                            .map(|r| r.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
            }
            key = Some(Key::Allowed);
        }
        for p in &call.paths {
            if let Some(pat) = self.masked(p) {
                return Decision::Block {
                    key: Key::DenyRead,
                    reason: format!(
                        "{tool} of {} is refused: it matches \"{}\" ([tools].deny-read / [filesystem].blocked; masked in the sandbox)",
                        p.display(),
                        pat
                    ),
                };
            }
        }
        Decision::Allow(key)
    }

    /// The mask an argument of a host tool reaches, as `(path, pattern)`.
    /// Host tools run on the host, where nothing is masked, and sbx cannot
    /// know which argument a command opens: every argument counts as a
    /// path (`{file}` as much as `{path}`), resolved like a file tool's,
    /// and so does what follows a `:` or `=` in it (`HEAD:.env`,
    /// `--file=.env`) or a leading `@` (`body=@.env`). A directory reaches
    /// everything below it (`grep -r`). Text with blanks that names nothing
    /// on disk is prose (a message, a query), not a path.
    pub fn masked_argument(&self, value: &str, cwd: &Path) -> Option<(PathBuf, String)> {
        let cwd = normalize(&self.workspace, cwd);
        let tails = [':', '='].map(|c| value.split_once(c).map(|(_, t)| t));
        let cands = std::iter::once(value).chain(tails.into_iter().flatten());
        // `@FILE` is a file to read for curl, gh (`-F body=@.env`), gcc and
        // every program with response files.
        let cands = cands.flat_map(|c| std::iter::once(c).chain(c.strip_prefix('@')));
        for cand in cands {
            if cand.is_empty() || cand.contains('\0') {
                continue;
            }
            let lexical = normalize(&cwd, Path::new(cand));
            let prose =
                cand.contains(char::is_whitespace) && std::fs::symlink_metadata(&lexical).is_err();
            if prose {
                continue;
            }
            let mut paths: Vec<PathBuf> = std::iter::once(lexical)
                .chain(resolve(&cwd.join(cand)))
                .collect();
            paths.dedup();
            for p in paths {
                if let Some(pat) = self.masked(&p) {
                    return Some((p, pat));
                }
                // A directory hands the program everything below it
                // (`grep -r`, `tar`, `rg`): none of it may be masked.
                if p.is_dir() {
                    let mut budget = MAX_WALK;
                    if let Some(hit) = self.masked_below(&p, &mut budget) {
                        return Some(hit);
                    }
                }
            }
        }
        None
    }

    /// The first masked path below directory `dir` (links are not
    /// followed, but checked where they point). A tree of more than
    /// `MAX_WALK` entries is not searched to the end, and counts as
    /// masked: it cannot be shown to hold no secret.
    fn masked_below(&self, dir: &Path, budget: &mut usize) -> Option<(PathBuf, String)> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return None;
        };
        for e in entries.flatten() {
            let p = e.path();
            if *budget == 0 {
                return Some((
                    dir.to_path_buf(),
                    format!(
                        "a directory of more than {MAX_WALK} entries, too many to check for masked files"
                    ),
                ));
            }
            *budget -= 1;
            if let Some(pat) = self.masked(&p) {
                return Some((p, pat));
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                if let Some(hit) = self.masked_below(&p, budget) {
                    return Some(hit);
                }
            }
        }
        None
    }

    /// Whether a rule depends on what a call runs or touches: one naming
    /// Bash or a file tool, `read-only`, `deny-read`.
    fn depends_on_tools(&self) -> bool {
        let file_tools = |t: &str| {
            t == "Bash"
                || TOOL_FAMILIES
                    .iter()
                    .any(|(f, members)| *f == t || members.contains(&t))
        };
        self.tools.read_only
            || !self.tools.deny_read.is_empty()
            || self
                .tools
                .disallowed
                .iter()
                .chain(self.tools.allowed.iter().flat_map(|a| a.iter()))
                .any(|r| file_tools(&r.tool))
    }

    /// The pattern masking `p` (or, when `p` exists, the file it resolves
    /// to), unless an `[filesystem].allowed` exception covers it.
    fn masked(&self, p: &Path) -> Option<String> {
        let mut cands = vec![p.to_path_buf()];
        if let Ok(real) = std::fs::canonicalize(p) {
            if real != p {
                cands.push(real);
            }
        }
        for c in cands {
            let rel = self.relative(&c);
            // A path that does not exist yet may become a directory.
            let is_dir = c.is_dir() || !c.exists();
            // A file inside a masked directory is masked too.
            for a in rel.ancestors().filter(|a| !a.as_os_str().is_empty()) {
                let dir = a != rel || is_dir;
                if let Some(m) = self.blocked.first_match(a, dir) {
                    if self.unmasked.first_match(a, dir).is_none() {
                        return Some(m.text.clone());
                    }
                }
            }
        }
        None
    }

    /// Workspace-relative when inside it; otherwise the absolute path
    /// without its `/`, so `**/` globs still reach it.
    fn relative(&self, p: &Path) -> PathBuf {
        match p.strip_prefix(&self.workspace) {
            Ok(r) => r.to_path_buf(),
            Err(_) => p.strip_prefix("/").unwrap_or(p).to_path_buf(),
        }
    }

    /// Disallowed: refused when any command the call runs (or any path)
    /// matches, and when what runs cannot be known.
    fn matches_any_part(&self, r: &ToolRule, glob: Option<&PathSet>, call: &Call) -> M {
        if !covers_call(&r.tool, call) {
            return M::No;
        }
        let yes = |b: bool| if b { M::Yes } else { M::No };
        match &r.arg {
            None => M::Yes,
            Some(RuleArg::Prefix(_) | RuleArg::Exact(_)) => {
                let mut unknown = None;
                for c in &call.commands {
                    match command_matches(r, c) {
                        M::Yes => return M::Yes,
                        M::Unknown(w) => {
                            unknown.get_or_insert(w);
                        }
                        M::No => {}
                    }
                }
                match (unknown, &call.unknown) {
                    (Some(w), _) => M::Unknown(w),
                    (None, Some(u)) => M::Unknown(u.clone()),
                    (None, None) => M::No,
                }
            }
            // Grep, Glob and LS read the files below their path: refused
            // when a file directly in it would be (`Read(private/**)` and
            // `Grep` in `private`). A search from higher up still reads them.
            Some(RuleArg::Path(_)) => yes(call.paths.iter().any(|p| {
                self.path_matches(glob, p)
                    || (matches!(call.tool, "Grep" | "Glob" | "LS")
                        && self.path_matches(glob, &p.join("sbx-probe")))
            })),
            Some(RuleArg::Domain(d)) => {
                yes(call.host.as_deref().is_some_and(|h| domain_matches(d, h)))
            }
        }
    }

    /// Allowed: every part of a compound command, and every path, must be
    /// matched by some rule (`npm test && curl x` is not `npm test`).
    fn allowed_by(&self, rules: &[(&ToolRule, Option<&PathSet>)], call: &Call) -> bool {
        let mine: Vec<_> = rules
            .iter()
            .filter(|(r, _)| covers_call(&r.tool, call))
            .collect();
        if mine.iter().any(|(r, _)| r.arg.is_none()) {
            return true;
        }
        if mine.is_empty() {
            return false;
        }
        // An allow rule only lets through what it can see.
        let cmds_ok = call.unknown.is_none()
            && call
                .commands
                .iter()
                .all(|c| mine.iter().any(|(r, _)| command_matches(r, c) == M::Yes));
        let paths_ok = call
            .paths
            .iter()
            .all(|p| mine.iter().any(|(_, g)| self.path_matches(*g, p)));
        let host_ok = call.host.as_deref().is_none_or(|h| {
            mine.iter()
                .any(|(r, _)| matches!(&r.arg, Some(RuleArg::Domain(d)) if domain_matches(d, h)))
        });
        // A call with nothing to match (a Bash call without a command)
        // is not matched by an argument rule.
        let something = !call.commands.is_empty() || !call.paths.is_empty() || call.host.is_some();
        something && cmds_ok && paths_ok && host_ok
    }

    fn path_matches(&self, glob: Option<&PathSet>, p: &Path) -> bool {
        glob.is_some_and(|g| g.first_match(&self.relative(p), p.is_dir()).is_some())
    }
}

/// Whether a rule naming `rule` covers a call of `tool`: by name and
/// family, and by what the tool does (a shell is covered by `Bash` rules,
/// a tool running unreadable code too, a file-changing one by `Edit`).
fn covers(rule: &str, tool: &str, class: Option<Class>) -> bool {
    rule_covers(rule, tool)
        || match class {
            Some(Class::Shell(_) | Class::Code) => rule == "Bash",
            Some(Class::Writes) => rule == "Edit",
            _ => false,
        }
}

/// `covers`, and `WebFetch` rules over any other tool that opens a URL
/// (Monitor's `ws`): `disallowed = ["WebFetch"]` let Monitor reach any
/// host (a38f).
fn covers_call(rule: &str, call: &Call) -> bool {
    covers(rule, call.tool, call.class) || (rule == "WebFetch" && call.host.is_some())
}

/// Whether `p` is a startup file bash or zsh reads in the agent's home,
/// where Claude Code's Bash tool takes its functions from (a38z).
fn shell_startup(p: &Path) -> bool {
    p.parent() == Some(Path::new("/home/agent"))
        && p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| sbx_core::SHELL_STARTUP.contains(&n))
}

/// What a call acts on, from its input.
/// Whether `p` (absolute, normalized) is where Claude Code or codex read
/// their settings, hooks, MCP servers, agents, commands or skills: a
/// `.claude` directory or `.claude.json` (and its backups) anywhere, a
/// `.mcp.json`, a `.codex` directory, `~/.config/claude`.
pub fn cli_config(p: &Path) -> bool {
    let names: Vec<&std::ffi::OsStr> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let is = |n: &std::ffi::OsStr, s: &str| n == std::ffi::OsStr::new(s);
    names.iter().any(|n| is(n, ".claude") || is(n, ".codex"))
        || names
            .windows(2)
            .any(|w| is(w[0], ".config") && is(w[1], "claude"))
        || names.last().is_some_and(|n| {
            let n = n.to_string_lossy();
            n == ".mcp.json" || n.starts_with(".claude.json")
        })
}

struct Call<'a> {
    tool: &'a str,
    class: Option<Class>,
    /// Bash: every simple command it runs.
    commands: Vec<SimpleCmd>,
    /// Bash: why what it runs cannot be known, when it cannot.
    unknown: Option<String>,
    /// File tools: the path argument, absolute and normalized.
    paths: Vec<PathBuf>,
    /// Bash: the files its redirections write.
    writes: Vec<shell::Word>,
    cwd: PathBuf,
    host: Option<String>,
    whole: String,
}

impl<'a> Call<'a> {
    fn new(tool: &'a str, class: Option<Class>, input: &Value, cwd: &Path) -> Self {
        let s = |k: &str| input.get(k).and_then(Value::as_str);
        let mut commands = Vec::new();
        let mut unknown = None;
        let mut writes = Vec::new();
        let mut paths = Vec::new();
        let mut host = None;
        let mut whole = String::new();
        match class {
            Some(Class::Shell(field)) => {
                if let Some(c) = s(field) {
                    let script = shell::analyze(c);
                    commands = script.commands;
                    unknown = script.unknown;
                    writes = script.writes;
                    whole = c.to_owned();
                } else if input.get(field).is_some() {
                    unknown = Some(format!("its {field} is not a string"));
                }
            }
            Some(Class::Code) => {
                unknown = Some(format!("{tool} runs code sbx cannot read"));
            }
            _ => {}
        }
        for k in ["file_path", "notebook_path", "path"] {
            if let Some(p) = s(k).filter(|p| !p.is_empty()) {
                let lexical = normalize(cwd, Path::new(p));
                // The file the kernel reaches: through symlinks, and `..`
                // after a symlink (`d/../x`) taken from its target.
                let real = resolve(&cwd.join(p));
                paths.push(lexical.clone());
                if let Some(r) = real.filter(|r| *r != lexical) {
                    paths.push(r);
                }
                whole = p.to_owned();
            }
        }
        // Monitor's `ws` opens a WebSocket (a38f): a fetch for the rules,
        // as WebFetch's `url` is.
        let ws = (tool == "Monitor")
            .then(|| input.get("ws").and_then(|w| w.get("url")))
            .flatten()
            .and_then(Value::as_str);
        if let Some(u) = s("url").or(ws) {
            host = url_host(u);
            whole = u.to_owned();
        }
        Self {
            tool,
            class,
            commands,
            unknown,
            paths,
            writes,
            cwd: cwd.to_path_buf(),
            host,
            whole,
        }
    }

    /// A file this shell call's redirections write that is, or may be, an
    /// AI CLI's own configuration or the shell's snapshot of it: a literal
    /// one that `cli_config` names, a pattern whose text names one
    /// (`~/.claude/shell-snapshots/snapshot-bash-*`), or, under an allow
    /// list, one the shell computes (`> "$F"`).
    fn cli_config_write(&self, strict: bool) -> Option<String> {
        for w in &self.writes {
            let text = match w {
                shell::Word::Lit(t) | shell::Word::Pattern(t) => t,
                shell::Word::Dynamic if strict => {
                    return Some("a file whose name the shell computes".into());
                }
                shell::Word::Dynamic => continue,
            };
            // `~` is the agent's home (HOME is pinned by the managed
            // settings); `~user` is another's.
            let expanded = match text.strip_prefix('~') {
                Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                    format!("/home/agent{rest}")
                }
                _ => text.clone(),
            };
            let lexical = normalize(&self.cwd, Path::new(&expanded));
            let real = resolve(&self.cwd.join(&expanded));
            if std::iter::once(lexical)
                .chain(real)
                .any(|p| cli_config(&p) || shell_startup(&p))
            {
                return Some(text.clone());
            }
        }
        None
    }

    fn what(&self) -> String {
        if self.whole.is_empty() {
            self.tool.to_owned()
        } else {
            format!("{} {:?}", self.tool, self.whole)
        }
    }
}

/// The call's target for the audit record.
pub fn target(tool: &str, input: &Value) -> String {
    let s = |k: &str| input.get(k).and_then(Value::as_str);
    [
        "command",
        "file_path",
        "notebook_path",
        "path",
        "url",
        "pattern",
    ]
    .iter()
    .find_map(|k| s(k))
    .unwrap_or(tool)
    .chars()
    .take(1024)
    .collect()
}

/// A rule against one command: matched, not, or undecidable because a
/// word it needs is computed when the command runs.
#[derive(Debug, PartialEq, Eq)]
enum M {
    Yes,
    No,
    Unknown(String),
}

/// `Bash(npm run:*)` matches `npm run x` and `npm run`, not `npm runner`;
/// `Bash(curl:*)` matches `/usr/bin/curl` too (a rule word with a `/`
/// must match the command word whole).
fn command_matches(r: &ToolRule, cmd: &SimpleCmd) -> M {
    let (rule, exact) = match &r.arg {
        None => return M::Yes,
        Some(RuleArg::Prefix(p)) => (p, false),
        Some(RuleArg::Exact(e)) => (e, true),
        _ => return M::No,
    };
    let rule: Vec<&str> = rule.split_whitespace().collect();
    let words = &cmd.0;
    if words.len() < rule.len() || (exact && words.len() != rule.len()) {
        return M::No;
    }
    let mut unknown = None;
    for (i, (want, got)) in rule.iter().zip(words).enumerate() {
        let first = i == 0 && !want.contains('/');
        match got {
            Word::Lit(s) => {
                let s = if first { basename(s) } else { s };
                if s != *want {
                    return M::No;
                }
            }
            Word::Pattern(p) => {
                let p = if first { basename(p) } else { p };
                if !shell::wild_match(p, want) {
                    return M::No;
                }
                unknown.get_or_insert_with(|| {
                    format!("a word of the command is a pattern the shell expands ({p})")
                });
            }
            Word::Dynamic => {
                unknown.get_or_insert_with(|| {
                    if i == 0 {
                        "the command word is computed at run time ($…, `…` or a substitution)"
                            .to_owned()
                    } else {
                        format!("word {} of a command is computed at run time", i + 1)
                    }
                });
            }
        }
    }
    unknown.map_or(M::Yes, M::Unknown)
}

fn basename(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// The host a WebFetch URL reaches, read as the CLI's WHATWG parser reads
/// it (a `\\` ends the authority, `user@` is not the host, `%61` is `a`).
/// A URL without a scheme is taken as https.
fn url_host(u: &str) -> Option<String> {
    let parsed = match url::Url::parse(u) {
        Ok(p) if p.host().is_some() => p,
        _ if !u.contains("://") => url::Url::parse(&format!("https://{u}")).ok()?,
        _ => return None,
    };
    let host = parsed
        .host_str()?
        .trim_end_matches('.')
        .to_ascii_lowercase();
    (!host.is_empty()).then_some(host)
}

fn domain_matches(d: &str, host: &str) -> bool {
    host == d || host.strip_suffix(d).is_some_and(|r| r.ends_with('.'))
}

/// `p` as the kernel resolves it: the longest prefix that exists
/// canonicalized, the rest appended (`..` in it taken lexically).
fn resolve(p: &Path) -> Option<PathBuf> {
    // A dangling symlink: writing it creates its target.
    let mut p = p.to_path_buf();
    for _ in 0..40 {
        match std::fs::read_link(&p) {
            Ok(t) if std::fs::canonicalize(&p).is_err() => {
                p = p.parent().map_or_else(|| t.clone(), |d| d.join(&t));
            }
            _ => break,
        }
    }
    let comps: Vec<Component> = p.components().collect();
    for k in (1..=comps.len()).rev() {
        let prefix: PathBuf = comps[..k].iter().collect();
        if let Ok(mut out) = std::fs::canonicalize(&prefix) {
            for c in &comps[k..] {
                match c {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::Normal(n) => out.push(n),
                    _ => {}
                }
            }
            return Some(out);
        }
    }
    None
}

/// `p` made absolute against `base`, `.` and `..` resolved lexically
/// (`..` at the root stays at the root, as the kernel does).
pub fn normalize(base: &Path, p: &Path) -> PathBuf {
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Entries a host tool's directory argument is searched for masked files.
const MAX_WALK: usize = 20_000;

#[cfg(test)]
mod tests;
