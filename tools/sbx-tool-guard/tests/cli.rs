//! The real binary with a cleared environment: the hook protocol (exit 0
//! or 2, never anything else), the audit record, `decide` and `settings`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_sbx-tool-guard");

struct Ws {
    dir: tempfile::TempDir,
}

impl Ws {
    fn new(config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws/.agent-sandbox")).unwrap();
        std::fs::create_dir_all(dir.path().join("ws/.git")).unwrap();
        std::fs::write(dir.path().join("ws/.agent-sandbox/config.toml"), config).unwrap();
        Self { dir }
    }

    fn ws(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.dir.path())
            .env("SBX_AUDIT_LOG", self.dir.path().join("audit.jsonl"))
            .current_dir(self.ws());
        c
    }

    fn check(&self, stdin: &str) -> Output {
        let mut c = self.cmd();
        c.args(["check", "--workspace"]).arg(self.ws());
        run_with_stdin(c, stdin)
    }

    fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn run_with_stdin(mut c: Command, stdin: &str) -> Output {
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn hook(tool: &str, input: &str, cwd: &Path) -> String {
    format!(
        "{{\"session_id\":\"s\",\"hook_event_name\":\"PreToolUse\",\"cwd\":{:?},\"permission_mode\":\"bypassPermissions\",\"tool_name\":\"{tool}\",\"tool_input\":{input}}}",
        cwd.display().to_string()
    )
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn refused_call_exits_2_with_the_reason_and_is_logged() {
    let w = Ws::new("[tools]\ndisallowed = [\"Write\", \"Bash(curl:*)\"]\n");
    let o = w.check(&hook(
        "Write",
        "{\"file_path\":\"a.txt\",\"content\":\"x\"}",
        &w.ws(),
    ));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o)
            .starts_with("sbx: Write \"a.txt\" is refused by [tools].disallowed rule \"Write\""),
        "{}",
        stderr(&o)
    );
    assert!(o.stdout.is_empty());
    let o = w.check(&hook("Bash", "{\"command\":\"ls && curl -s x\"}", &w.ws()));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = w.check(&hook("Bash", "{\"command\":\"ls -la\"}", &w.ws()));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.is_empty() && o.stderr.is_empty(), "{}", stderr(&o));
    let a = w.audit();
    assert_eq!(a.len(), 3, "{a:?}");
    assert_eq!(a[0]["tool"], "tools");
    assert_eq!(a[0]["operation"], "Write");
    assert_eq!(a[0]["result"], "blocked");
    assert_eq!(a[0]["policy"], "tools.disallowed");
    assert!(a[0]["target"].as_str().unwrap().ends_with("a.txt"));
    assert_eq!(a[1]["target"], "ls && curl -s x");
    assert_eq!(a[2]["result"], "allowed");
    assert_eq!(a[2]["operation"], "Bash");
}

/// Claude Code lets a call through on any status but 2: every failure of
/// the checker must be a 2 (fail closed).
#[test]
fn every_failure_refuses_the_call() {
    let w = Ws::new("[tools]\ndisallowed = [\"Write\"]\n");
    for bad in ["", "not json", "{\"tool_input\":{}}", "[1,2]"] {
        let o = w.check(bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("the call is refused"), "{}", stderr(&o));
    }
    let broken = Ws::new("[tools]\ndisallowed = \"Write\"\n");
    let o = broken.check(&hook("Read", "{\"file_path\":\"a\"}", &broken.ws()));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("config.toml:2"), "{}", stderr(&o));
}

#[test]
fn decide_answers_without_logging() {
    let w = Ws::new("[tools]\nread-only = true\n");
    let o = w
        .cmd()
        .args(["decide", "Edit", "{\"file_path\":\"a\"}"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(77), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("[tools].read-only"));
    let o = w
        .cmd()
        .args(["--json", "decide", "Bash", "{\"command\":\"touch a\"}"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["type"], "decision");
    assert_eq!(v["data"]["result"], "allowed");
    let o = w.cmd().args(["decide", "Bash", "ls"]).output().unwrap();
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    assert!(w.audit().is_empty());
}

#[test]
fn settings_and_the_unknown_tool_warning() {
    let w = Ws::new("[tools]\ndisallowed = [\"Wirte\", \"Bash(curl:*)\"]\n");
    let o = w
        .cmd()
        .args(["settings", "--workspace", "/workspace/x"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("unknown tool \"Wirte\" (known: AskUserQuestion, Bash,"),
        "{}",
        stderr(&o)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["permissions"]["deny"],
        serde_json::json!(["Bash(curl:*)"])
    );
    assert_eq!(v["hooks"]["PreToolUse"][0]["matcher"], "*");
}

/// `Bash(npm test:*)` in `allowed` would run `npm test --node-options=…`:
/// refused when the config loads (78, one line naming the rule and how to
/// write it), and the hook refuses every call meanwhile.
#[test]
fn prefix_allow_rule_for_a_code_running_program_is_bad_config() {
    let w = Ws::new("[tools]\nallowed = [\"Read\", \"Bash(npm test:*)\"]\n");
    let mut c = w.cmd();
    c.args(["decide", "Bash", r#"{"command":"npm test"}"#, "--workspace"])
        .arg(w.ws());
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(78), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("Bash(npm test:*)") && err.contains("\"Bash(npm test)\""),
        "{err}"
    );
    let o = w.check(
        r#"{"tool_name":"Bash","tool_input":{"command":"npm test '--node-options=--import=data:text/javascript,1'"}}"#,
    );
    assert_eq!(o.status.code(), Some(2));
    let w = Ws::new("[tools]\nallowed = [\"Bash(npm test)\", \"Bash(ls:*)\"]\n");
    let o = w.check(
        r#"{"tool_name":"Bash","tool_input":{"command":"npm test '--node-options=--import=data:text/javascript,1'"}}"#,
    );
    assert_eq!(o.status.code(), Some(2));
    let o = w.check(r#"{"tool_name":"Bash","tool_input":{"command":"npm test"}}"#);
    assert_eq!(o.status.code(), Some(0));
}
