//! Every tool the agent's CLI has, classified by what it can do. A tool
//! whose input carries a command is a shell to the policy (`Bash` rules
//! cover it); one sbx does not know may be any of them, so it is refused
//! whenever a rule depends on what the call does (see `Policy::decide`).
//! The list is the CLI's at `CLAUDE_VERSION`; the e2e test
//! `every_tool_of_the_cli_is_classified` fails when a new one appears.

/// The Claude Code version the table was read from (its init message's
/// `tools` and the input types in its `sdk-tools.d.ts`).
pub const CLAUDE_VERSION: &str = "2.1.332";

/// What a tool's call can do, for the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Runs the shell command in the named input field: `Bash` rules read it.
    Shell(&'static str),
    /// Runs code sbx cannot read (a script, a skill's `!` commands):
    /// refused under any `Bash` rule that needs to know what runs.
    Code,
    /// Changes files without a path sbx can check: covered by `Edit` rules
    /// and `read-only`.
    Writes,
    /// The Edit family (`Edit`, `Write`, …): path-checked.
    Edit,
    /// The Read family: path-checked.
    Read,
    /// Runs nothing and touches no file itself (its own tool calls, if
    /// any, come through the hook one by one).
    Inert,
}

/// Claude Code's tools, the deferred ones (reached through `ToolSearch`)
/// included.
const KNOWN: &[(&str, Class)] = &[
    ("Bash", Class::Shell("command")),
    ("PowerShell", Class::Shell("command")),
    ("Monitor", Class::Shell("command")),
    ("REPL", Class::Code),
    ("Workflow", Class::Code),
    ("Skill", Class::Code),
    ("SlashCommand", Class::Code),
    ("EnterWorktree", Class::Writes),
    ("ExitWorktree", Class::Writes),
    ("Edit", Class::Edit),
    ("MultiEdit", Class::Edit),
    ("Write", Class::Edit),
    ("NotebookEdit", Class::Edit),
    ("Read", Class::Read),
    ("NotebookRead", Class::Read),
    ("Grep", Class::Read),
    ("Glob", Class::Read),
    ("LS", Class::Read),
    ("Task", Class::Inert),
    ("Agent", Class::Inert),
    ("ListAgents", Class::Inert),
    ("SendMessage", Class::Inert),
    ("TaskCreate", Class::Inert),
    ("TaskGet", Class::Inert),
    ("TaskList", Class::Inert),
    ("TaskUpdate", Class::Inert),
    ("TaskStop", Class::Inert),
    ("TaskOutput", Class::Inert),
    ("BashOutput", Class::Inert),
    ("KillShell", Class::Inert),
    ("TodoWrite", Class::Inert),
    ("ToolSearch", Class::Inert),
    ("WebFetch", Class::Inert),
    ("WebSearch", Class::Inert),
    ("AskUserQuestion", Class::Inert),
    ("EnterPlanMode", Class::Inert),
    ("ExitPlanMode", Class::Inert),
    ("CronCreate", Class::Inert),
    ("CronDelete", Class::Inert),
    ("CronList", Class::Inert),
    ("ScheduleWakeup", Class::Inert),
    ("ReportFindings", Class::Inert),
    ("PushNotification", Class::Inert),
    ("ListMcpResourcesTool", Class::Inert),
    ("ReadMcpResourceTool", Class::Inert),
];

/// Input fields that hold a command a tool sbx does not know may run.
const COMMAND_FIELDS: &[&str] = &["command", "cmd", "script", "code"];

/// The class of `tool`, or `None` when sbx does not know it. MCP tools
/// (`mcp__…`) run on their servers: `Inert` unless their input carries a
/// command-like field, which makes them `Code`.
pub fn class(tool: &str, input: &serde_json::Value) -> Option<Class> {
    if let Some((_, c)) = KNOWN.iter().find(|(n, _)| *n == tool) {
        return Some(*c);
    }
    if tool.starts_with("mcp__") {
        let runs = COMMAND_FIELDS.iter().any(|f| input.get(f).is_some());
        return Some(if runs { Class::Code } else { Class::Inert });
    }
    None
}

/// The names in the table (for the test that compares them with the CLI's).
pub fn known() -> impl Iterator<Item = &'static str> {
    KNOWN.iter().map(|(n, _)| *n)
}
