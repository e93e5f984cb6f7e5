//! `[agent]`: `sbx-run agent` (headless Claude Code / Codex runs).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer};

use super::{Argv, Interval};

/// The host variables naming the agent CLIs' endpoints (Claude Code's,
/// Codex's): `sbx-run start` hands the ones set to the sandbox as
/// [`SANDBOX_API_VAR`], whose hosts sbx-fw allowlists like `base-url`'s.
pub const HOST_API_VARS: [&str; 2] = ["ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"];

/// The sandbox's variable holding those URLs, separated by spaces.
pub const SANDBOX_API_VAR: &str = "SBX_AGENT_API";

/// [`SANDBOX_API_VAR`]'s value for a host environment, `None` when no
/// endpoint is set. A URL that does not parse is left out: `sbx-run agent`
/// refuses it by name before any run.
pub fn sandbox_api_value(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    let urls: Vec<String> = HOST_API_VARS
        .iter()
        .filter_map(|k| var(k))
        .filter(|v| v.parse::<BaseUrl>().is_ok())
        .collect();
    (!urls.is_empty()).then(|| urls.join(" "))
}

/// `[agent]`: headless Claude Code or Codex runs (`sbx-run agent`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Agent {
    /// The agent CLI `sbx-run agent` runs (`--cli` overrides it).
    /// Default: `"claude"`
    /// Example: `"codex"`
    pub cli: AgentCli,
    /// The Messages API endpoint given to the CLI as ANTHROPIC_BASE_URL;
    /// its host is allowlisted by sbx-fw. `ANTHROPIC_BASE_URL` on the host wins.
    /// Example: `"https://llm-gateway.corp.example"`
    pub base_url: Option<BaseUrl>,
    /// A file on the host holding the API key (first line). `ANTHROPIC_API_KEY`
    /// on the host wins. Never copied into the sandbox.
    /// Example: `"/home/me/.config/sbx/anthropic-key"`
    pub credential_file: Option<std::path::PathBuf>,
    /// The model the CLI is asked for (`--model`); unset, the CLI's own default.
    /// Example: `"claude-sonnet-4-5"`
    pub model: Option<String>,
    /// The most agent turns in one run (`--max-turns`; exit 3 when reached);
    /// Claude Code only. Unset: no limit.
    /// Example: `20`
    pub max_turns: Option<u32>,
    /// Claude Code's permission mode for a run; unset, `bypassPermissions`
    /// (a headless run has nobody to answer a prompt; the sandbox is the guard).
    /// Example: `"acceptEdits"`
    pub permission_mode: Option<PermissionMode>,
    /// Kill the run (the CLI's whole process group) after this long.
    /// Example: `"30m"`
    pub timeout: Option<Interval>,
    /// `sbx-run prune --chats` removes chats idle longer than this.
    /// Default: `"7d"`
    /// Example: `"30d"`
    pub chat_retention: Interval,
    /// MCP servers written to `.mcp.json` and passed with `--mcp-config`.
    pub mcp: BTreeMap<String, McpServer>,
    /// Host commands the agent may call as MCP tools (argv only, audited).
    pub host_tools: BTreeMap<ToolName, HostTool>,
}

impl Default for Agent {
    fn default() -> Self {
        Self {
            cli: AgentCli::Claude,
            base_url: None,
            credential_file: None,
            model: None,
            max_turns: None,
            permission_mode: None,
            timeout: None,
            chat_retention: Interval(Duration::from_secs(7 * 24 * 3600)),
            mcp: BTreeMap::new(),
            host_tools: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentCli {
    Claude,
    Codex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum PermissionMode {
    #[serde(rename = "default")]
    Default,
    #[serde(rename = "acceptEdits")]
    AcceptEdits,
    #[serde(rename = "bypassPermissions")]
    BypassPermissions,
    #[serde(rename = "plan")]
    Plan,
}

impl PermissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::AcceptEdits => "acceptEdits",
            Self::BypassPermissions => "bypassPermissions",
            Self::Plan => "plan",
        }
    }
}

impl std::str::FromStr for PermissionMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "default" => Ok(Self::Default),
            "acceptEdits" => Ok(Self::AcceptEdits),
            "bypassPermissions" => Ok(Self::BypassPermissions),
            "plan" => Ok(Self::Plan),
            _ => Err(format!(
                "unknown permission mode \"{s}\": use default, acceptEdits, bypassPermissions or plan"
            )),
        }
    }
}

/// An http(s) URL with a host; `host` is what sbx-fw allowlists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseUrl {
    pub text: String,
    pub host: String,
}

impl BaseUrl {
    /// Loopback needs no allowlist entry (it never leaves the sandbox).
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost"
            || self
                .host
                .trim_matches(|c| c == '[' || c == ']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

impl std::str::FromStr for BaseUrl {
    type Err = String;
    /// Parsed as the CLI's own URL parser (WHATWG) reads it, so the host
    /// allowlisted is the host the CLI connects to.
    fn from_str(s: &str) -> Result<Self, String> {
        let u = url::Url::parse(s).map_err(|e| format!("invalid base-url \"{s}\": {e}"))?;
        if !matches!(u.scheme(), "http" | "https") {
            return Err(format!(
                "invalid base-url \"{s}\": expected http:// or https://"
            ));
        }
        if !u.username().is_empty() || u.password().is_some() {
            return Err(format!(
                "invalid base-url \"{s}\": no user or password in the URL (use credential-file)"
            ));
        }
        let host = u.host_str().unwrap_or_default();
        if host.is_empty() {
            return Err(format!("invalid base-url \"{s}\": no host"));
        }
        Ok(Self {
            text: s.to_owned(),
            host: host.to_ascii_lowercase(),
        })
    }
}

impl<'de> Deserialize<'de> for BaseUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

/// An MCP stdio server for `.mcp.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// The server's program and arguments (stdio transport).
    /// Example: `["npx", "docs-mcp"]`
    pub command: Argv,
    /// Variables set for the server.
    /// Default: `{}`
    /// Example: `{ DOCS_ROOT = "docs" }`
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// A host tool's name: what the agent calls it (`[A-Za-z0-9_-]{1,64}`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ToolName(pub String);

impl std::str::FromStr for ToolName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.is_empty()
            || s.len() > 64
            || !s
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!(
                "invalid host tool name \"{s}\": 1-64 letters, digits, _ or -"
            ));
        }
        Ok(Self(s.to_owned()))
    }
}

impl<'de> Deserialize<'de> for ToolName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

/// A host command the agent may call: `argv` elements that are exactly
/// `{param}` are replaced by the call's argument of that name, one argv
/// element each (never through a shell).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostTool {
    /// The host command; an element that is exactly `{param}` becomes the
    /// call's argument of that name, as one element, never through a shell;
    /// a value beginning with `-` is refused unless a literal `--` comes
    /// before its `{param}`.
    /// Example: `["gh", "issue", "view", "--", "{number}"]`
    pub argv: HostArgv,
    /// What the tool does, shown to the model.
    /// Example: `"Show a GitHub issue of this repository"`
    pub description: String,
    /// The command's process group is killed after this long.
    /// Default: `"30s"`
    /// Example: `"20s"`
    #[serde(default = "default_tool_timeout")]
    pub timeout: Interval,
    /// Whether the tool may change files or state on the host. Under
    /// `[tools].read-only = true` a tool that writes is refused: sbx cannot
    /// tell what a host command does, so a tool counts as writing unless
    /// this says it does not.
    /// Default: `true`
    /// Example: `false`
    #[serde(default = "default_true")]
    pub writes: bool,
}

fn default_true() -> bool {
    true
}

fn default_tool_timeout() -> Interval {
    Interval(Duration::from_secs(30))
}

/// A host tool's command: the program and its arguments, where an element
/// that is exactly `{name}` is a parameter the agent fills in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostArgv(pub Vec<String>);

impl HostArgv {
    /// The parameter names, in order of first use.
    pub fn params(&self) -> Vec<&str> {
        let mut v: Vec<&str> = Vec::new();
        for a in &self.0 {
            if let Some(p) = param(a)
                && !v.contains(&p)
            {
                v.push(p);
            }
        }
        v
    }
}

/// `{name}` as a whole element names a parameter.
pub fn param(arg: &str) -> Option<&str> {
    arg.strip_prefix('{')?.strip_suffix('}')
}

impl<'de> Deserialize<'de> for HostArgv {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<String>::deserialize(d)?;
        match v.first() {
            Some(p) if !p.is_empty() && param(p).is_none() => {}
            _ => {
                return Err(de::Error::custom(
                    "give the program (a fixed word, not a {parameter}) and its arguments, e.g. [\"git\", \"log\", \"-n\", \"{count}\"]",
                ));
            }
        }
        for a in &v {
            if let Some(p) = param(a)
                && (p.is_empty() || !p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            {
                return Err(de::Error::custom(format!(
                    "invalid parameter \"{a}\": use {{name}} with letters, digits and _"
                )));
            }
        }
        Ok(Self(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        for (u, host, lo) in [
            ("https://api.example.com/v1", Some("api.example.com"), false),
            ("http://127.0.0.1:8089", Some("127.0.0.1"), true),
            ("http://localhost", Some("localhost"), true),
            ("http://[::1]:80/", Some("[::1]"), true),
            ("https://Gateway.Corp:8443", Some("gateway.corp"), false),
            ("http://[::1]", Some("[::1]"), true),
            ("http://[2001:DB8::1]:8080/v1", Some("[2001:db8::1]"), false),
            ("https://api.example.com/", Some("api.example.com"), false),
            (
                "https://api.example.com.:443",
                Some("api.example.com."),
                false,
            ),
            ("http://127.1:8089", Some("127.0.0.1"), true),
            ("ftp://x", None, false),
            ("https://user:pw@x.test", None, false),
            ("https://user@x.test", None, false),
            ("https://:pw@x.test", None, false),
            // A backslash ends the authority for the CLI's parser: the
            // host it reaches is a.test, and a.test is what gets allowed.
            ("https://a.test\\@b.test/", Some("a.test"), false),
            ("https://", None, false),
            ("https://[::1/", None, false),
            ("https://a b.test/", None, false),
            ("api.example.com", None, false),
        ] {
            let got = u.parse::<BaseUrl>();
            assert_eq!(got.as_ref().ok().map(|b| b.host.as_str()), host, "{u}");
            if let Ok(b) = got {
                assert_eq!(b.is_loopback(), lo, "{u}");
            }
        }
    }

    #[test]
    fn host_tool_argv() {
        let ok: HostArgv =
            serde_json::from_str(r#"["git","log","-n","{count}","{count}"]"#).unwrap();
        assert_eq!(ok.params(), vec!["count"]);
        for bad in [
            r#"[]"#,
            r#"["{prog}"]"#,
            r#"["git","{a b}"]"#,
            r#"["git","{}"]"#,
        ] {
            assert!(serde_json::from_str::<HostArgv>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn agent_table_parses_and_refuses_unknown_keys() {
        let a: Agent = toml::from_str(
            "cli = \"codex\"\nbase-url = \"https://gw.test\"\nmax-turns = 3\npermission-mode = \"plan\"\ntimeout = \"10m\"\n[mcp.fs]\ncommand = [\"mcp-fs\", \"/w\"]\n[host-tools.log]\nargv = [\"git\", \"log\"]\ndescription = \"git log\"\n",
        )
        .unwrap();
        assert_eq!(a.cli, AgentCli::Codex);
        assert_eq!(a.permission_mode, Some(PermissionMode::Plan));
        assert_eq!(a.host_tools.len(), 1);
        assert!(toml::from_str::<Agent>("colour = 1").is_err());
        assert!(toml::from_str::<Agent>("permission-mode = \"yolo\"").is_err());
    }
}
