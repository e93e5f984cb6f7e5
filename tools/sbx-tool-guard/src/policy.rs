//! The decision: one tool call against `[tools]` and the masks. Pure, so
//! the hook, `sbx-run test` and the unit tests ask the same function.

use std::path::{Component, Path, PathBuf};

use sbx_core::config::{Config, RuleArg, ToolRule, Tools};
use sbx_core::glob::{PathPattern, PathSet};
use serde_json::Value;

/// Tools that write files: refused whole under `read-only`.
pub const WRITE_TOOLS: [&str; 4] = ["Write", "Edit", "MultiEdit", "NotebookEdit"];

/// Which `[tools]` key decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    ReadOnly,
    Disallowed,
    Allowed,
    DenyRead,
}

impl Key {
    /// The audit record's `policy`.
    pub fn policy(self) -> &'static str {
        match self {
            Key::ReadOnly => "tools.read-only",
            Key::Disallowed => "tools.disallowed",
            Key::Allowed => "tools.allowed",
            Key::DenyRead => "tools.deny-read",
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
        let call = Call::new(tool, input, &cwd);
        if self.tools.read_only && WRITE_TOOLS.contains(&tool) {
            return Decision::Block {
                key: Key::ReadOnly,
                reason: format!(
                    "{tool} is refused: [tools].read-only = true (the workspace is read-only)"
                ),
            };
        }
        let n_dis = self.tools.disallowed.len();
        for (i, r) in self.tools.disallowed.iter().enumerate() {
            if self.matches_any_part(r, self.globs[i].as_ref(), &call) {
                return Decision::Block {
                    key: Key::Disallowed,
                    reason: format!(
                        "{} is refused by [tools].disallowed rule \"{r}\"",
                        call.what()
                    ),
                };
            }
        }
        let mut key = None;
        if let Some(allowed) = &self.tools.allowed {
            let rules: Vec<(&ToolRule, Option<&PathSet>)> = allowed
                .iter()
                .enumerate()
                .map(|(i, r)| (r, self.globs[n_dis + i].as_ref()))
                .collect();
            if !self.allowed_by(&rules, &call) {
                return Decision::Block {
                    key: Key::Allowed,
                    reason: format!(
                        "{} is refused: no [tools].allowed rule matches it (allowed: {})",
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

    /// Disallowed: refused when any part of a compound command (or any
    /// path) matches.
    fn matches_any_part(&self, r: &ToolRule, glob: Option<&PathSet>, call: &Call) -> bool {
        if r.tool != call.tool {
            return false;
        }
        match &r.arg {
            None => true,
            Some(RuleArg::Prefix(_) | RuleArg::Exact(_)) => {
                call.commands.iter().any(|c| command_matches(r, c))
            }
            Some(RuleArg::Path(_)) => call.paths.iter().any(|p| self.path_matches(glob, p)),
            Some(RuleArg::Domain(d)) => call.host.as_deref().is_some_and(|h| domain_matches(d, h)),
        }
    }

    /// Allowed: every part of a compound command, and every path, must be
    /// matched by some rule (`npm test && curl x` is not `npm test`).
    fn allowed_by(&self, rules: &[(&ToolRule, Option<&PathSet>)], call: &Call) -> bool {
        let mine: Vec<_> = rules.iter().filter(|(r, _)| r.tool == call.tool).collect();
        if mine.iter().any(|(r, _)| r.arg.is_none()) {
            return true;
        }
        if mine.is_empty() {
            return false;
        }
        let cmds_ok = call
            .commands
            .iter()
            .all(|c| mine.iter().any(|(r, _)| command_matches(r, c)));
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

/// What a call acts on, from its input.
struct Call<'a> {
    tool: &'a str,
    /// Bash: the command split at shell operators.
    commands: Vec<String>,
    /// File tools: the path argument, absolute and normalized.
    paths: Vec<PathBuf>,
    host: Option<String>,
    whole: String,
}

impl<'a> Call<'a> {
    fn new(tool: &'a str, input: &Value, cwd: &Path) -> Self {
        let s = |k: &str| input.get(k).and_then(Value::as_str);
        let mut commands = Vec::new();
        let mut paths = Vec::new();
        let mut host = None;
        let mut whole = String::new();
        if tool == "Bash" {
            if let Some(c) = s("command") {
                commands = split_command(c);
                whole = c.to_owned();
            }
        }
        for k in ["file_path", "notebook_path", "path"] {
            if let Some(p) = s(k).filter(|p| !p.is_empty()) {
                paths.push(normalize(cwd, Path::new(p)));
                whole = p.to_owned();
            }
        }
        if let Some(u) = s("url") {
            host = url_host(u);
            whole = u.to_owned();
        }
        Self {
            tool,
            commands,
            paths,
            host,
            whole,
        }
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

/// `Bash(npm run:*)` matches `npm run x` and `npm run`, not `npm runner`.
fn command_matches(r: &ToolRule, cmd: &str) -> bool {
    match &r.arg {
        None => true,
        Some(RuleArg::Prefix(p)) => {
            let p = squash(p);
            cmd == p
                || cmd
                    .strip_prefix(&p)
                    .is_some_and(|rest| rest.starts_with(' '))
        }
        Some(RuleArg::Exact(e)) => cmd == squash(e),
        _ => false,
    }
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Split at `;`, `&`, `|`, newlines, `(`, `)` and backquotes (so `$(curl
/// x)` and `a && curl x` show their `curl`), drop leading `NAME=value`
/// assignments and a leading `sudo`, `env`, `exec`, `command`, `nohup` or
/// `time`. A convenience, not a shell parser: the OS layer (mounts,
/// firewall) is what holds against a determined `bash -c`.
pub fn split_command(cmd: &str) -> Vec<String> {
    cmd.split([';', '&', '|', '\n', '(', ')', '`'])
        .filter_map(|part| {
            let mut words: Vec<&str> = part.split_whitespace().collect();
            while let Some(w) = words.first() {
                let assignment = w.split_once('=').is_some_and(|(n, _)| {
                    !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                });
                let wrapper = matches!(
                    *w,
                    "sudo" | "env" | "exec" | "command" | "nohup" | "time" | "$" | "{" | "!"
                );
                if assignment || wrapper {
                    words.remove(0);
                } else {
                    break;
                }
            }
            (!words.is_empty()).then(|| words.join(" "))
        })
        .collect()
}

fn url_host(u: &str) -> Option<String> {
    let rest = u.split_once("://").map_or(u, |(_, r)| r);
    let auth = rest.split(['/', '?', '#']).next()?;
    let host = auth.rsplit_once('@').map_or(auth, |(_, h)| h);
    let host = host
        .split(':')
        .next()?
        .trim_end_matches('.')
        .to_ascii_lowercase();
    (!host.is_empty()).then_some(host)
}

fn domain_matches(d: &str, host: &str) -> bool {
    host == d || host.strip_suffix(d).is_some_and(|r| r.ends_with('.'))
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

#[cfg(test)]
mod tests;
