//! The wire format between `sbx-run agent` (host) and `sbx-guest
//! agent-launch --host-tools` / `mcp-host-tools` (sandbox) for
//! `[agent.host-tools]`: one definition, so both ends parse the same way.
//!
//! Host to sandbox, on the exec's stdin: the key line, a [`Header`] line,
//! the prompt (`prompt_bytes`), then one [`Answer`] per line. Sandbox to
//! host, on the exec's stdout: the CLI's lines, and each [`Call`] as one
//! line starting with [`MARK`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The server's name in the CLI's MCP config: tools are `mcp__sbx-host__NAME`.
pub const SERVER: &str = "sbx-host";
/// Where `mcp-host-tools` finds the launcher's socket (set on the CLI only).
pub const SOCKET_ENV: &str = "SBX_HOST_TOOLS_SOCKET";
/// First byte of a tool-call line in agent-launch's stdout. The CLI's own
/// lines are JSON and never start with it (a line that does is escaped).
pub const MARK: u8 = 0x1e;

/// A tool as the host describes it: name, description, parameter names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub params: Vec<String>,
}

/// A call, relayed to the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    pub id: u64,
    pub name: String,
    pub arguments: Value,
}

/// What the host decided for the sandbox's audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditNote {
    pub allowed: bool,
    pub target: String,
    pub reason: String,
}

impl AuditNote {
    /// The audit record of a call, as `tool` writes it (the host's log and
    /// the sandbox's carry the same facts).
    pub fn record<'a>(&'a self, tool: &'a str) -> crate::audit::Record<'a> {
        use crate::audit::{Outcome, Record};
        let outcome = if self.allowed {
            Outcome::Allowed
        } else {
            Outcome::Blocked
        };
        Record::new(tool, "host-tool", &self.target, outcome, "agent.host-tools")
            .reason(&self.reason)
    }
}

/// The host's answer to a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    pub id: u64,
    pub text: String,
    pub is_error: bool,
    pub audit: AuditNote,
}

/// The header `sbx-run agent` writes after the key line, before the prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub tools: Vec<ToolSpec>,
    pub prompt_bytes: usize,
}
