//! `codex exec --json` lines translated into sbx's agent events (the
//! schema of [`super::events`]). The one parser of codex's JSONL.
//!
//! Codex prints one event a line: `thread.started`, `turn.started`,
//! `item.started` / `item.updated` / `item.completed` (each with an `item`
//! of a `type`), `turn.completed` (with `usage`), `turn.failed` and `error`.
//! It prints no line of its own for the run's end, so the translator gives
//! `usage` and `result` at `turn.completed` / `turn.failed`. Codex keeps
//! state across lines (a tool call's start and its end), so does this.
//!
//! | codex line | sbx event |
//! |---|---|
//! | `thread.started` | `session` (`session_id` = `thread_id`) |
//! | `turn.started` | none: counted into `result.turns` |
//! | `item.started` `command_execution` | `tool_use` (`name` "shell", `input.command`) |
//! | `item.completed` `command_execution` | `tool_result` (`content` = `aggregated_output`, `is_error` unless status completed and exit 0) |
//! | `item.started` `mcp_tool_call` | `tool_use` (`name` "mcp__SERVER__TOOL", `input` = `arguments`) |
//! | `item.completed` `mcp_tool_call` | `tool_result` (text of `result.content`, or `error.message`) |
//! | `item.*` `file_change` | `tool_use` "apply_patch" (`input.changes`) at its start, `tool_result` (one "KIND PATH" a line) at its end |
//! | `item.*` `web_search` | `tool_use` "web_search" (`input.query`), `tool_result` |
//! | `item.completed` `agent_message` | `text` |
//! | `item.completed` `error` | `error` |
//! | `turn.completed` | `usage` (`cached_input_tokens` as `cache_read_input_tokens`, `cost_usd` null: codex reports none), then `result` success |
//! | `turn.failed` | `error`, then `result` error |
//! | `error` | `error` |
//! | anything else (`reasoning`, `todo_list`, `item.updated`, new types) | `raw` |
//!
//! A completed item whose start was not seen gives its `tool_use` first, so
//! every `tool_result` follows its `tool_use`.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::events::Event;

#[derive(Debug, Default)]
pub struct CodexStream {
    started: HashSet<String>,
    turns: u64,
    thread: Value,
    last_text: Option<String>,
}

fn raw(line: &str, reason: &str) -> Event {
    Event::new("raw", json!({"line": line, "reason": reason}))
}

fn str_of<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// The `tool_use` of a tool-like item, or None for other item types.
fn tool_use(item: &Value) -> Option<Event> {
    let (name, input) = match str_of(item, "type") {
        "command_execution" => ("shell".to_owned(), json!({"command": item.get("command")})),
        "mcp_tool_call" => (
            format!("mcp__{}__{}", str_of(item, "server"), str_of(item, "tool")),
            item.get("arguments").cloned().unwrap_or(Value::Null),
        ),
        "file_change" => (
            "apply_patch".to_owned(),
            json!({"changes": item.get("changes")}),
        ),
        "web_search" => ("web_search".to_owned(), json!({"query": item.get("query")})),
        _ => return None,
    };
    Some(Event::new(
        "tool_use",
        json!({"id": item.get("id"), "name": name, "input": input}),
    ))
}

/// The `tool_result` of a completed tool-like item.
fn tool_result(item: &Value) -> Option<Event> {
    let status = str_of(item, "status");
    let (content, is_error) = match str_of(item, "type") {
        "command_execution" => (
            str_of(item, "aggregated_output").to_owned(),
            status != "completed" || item.get("exit_code").and_then(Value::as_i64) != Some(0),
        ),
        "mcp_tool_call" => {
            let text = match item.pointer("/error/message").and_then(Value::as_str) {
                Some(m) => m.to_owned(),
                None => item
                    .pointer("/result/content")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|b| b.get("text").and_then(Value::as_str))
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                    .unwrap_or_default(),
            };
            (
                text,
                status != "completed" || item.get("error").is_some_and(|e| !e.is_null()),
            )
        }
        "file_change" => (
            item.get("changes")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|c| format!("{} {}", str_of(c, "kind"), str_of(c, "path")))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default(),
            status != "completed",
        ),
        "web_search" => (String::new(), false),
        _ => return None,
    };
    Some(Event::new(
        "tool_result",
        json!({"tool_use_id": item.get("id"), "is_error": is_error, "content": content}),
    ))
}

impl CodexStream {
    pub fn new() -> Self {
        Self::default()
    }

    /// Translate one line of `codex exec --json`.
    pub fn line(&mut self, line: &str) -> Vec<Event> {
        let line = line.trim_end_matches(['\r', '\n']);
        if line.trim().is_empty() {
            return Vec::new();
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return vec![raw(line, "not JSON")];
        };
        match v.get("type").and_then(Value::as_str) {
            Some("thread.started") => {
                self.thread = v.get("thread_id").cloned().unwrap_or(Value::Null);
                vec![Event::new(
                    "session",
                    json!({"session_id": self.thread, "model": null, "cwd": null,
                           "tools": null, "mcp_servers": null}),
                )]
            }
            Some("turn.started") => {
                self.turns += 1;
                Vec::new()
            }
            Some("item.started") => match v.get("item").and_then(tool_use) {
                Some(e) => {
                    self.started.insert(item_id(&v));
                    vec![e]
                }
                None => vec![raw(line, "untranslated item type")],
            },
            Some("item.completed") => self.completed(&v, line),
            Some("turn.completed") => {
                let u = |k: &str| {
                    v.pointer(&format!("/usage/{k}"))
                        .and_then(Value::as_u64)
                        .unwrap_or(0)
                };
                vec![
                    Event::new(
                        "usage",
                        json!({"input_tokens": u("input_tokens"), "output_tokens": u("output_tokens"),
                               "cache_read_input_tokens": u("cached_input_tokens"),
                               "cache_creation_input_tokens": 0, "cost_usd": null}),
                    ),
                    self.result("success"),
                ]
            }
            Some("turn.failed") => vec![
                Event::new(
                    "error",
                    json!({"message": v.pointer("/error/message").cloned().unwrap_or(Value::Null)}),
                ),
                self.result("error"),
            ],
            Some("error") => vec![Event::new(
                "error",
                json!({"message": v.get("message").cloned().unwrap_or(Value::Null)}),
            )],
            _ => vec![raw(line, "unknown line type")],
        }
    }

    fn completed(&mut self, v: &Value, line: &str) -> Vec<Event> {
        let Some(item) = v.get("item") else {
            return vec![raw(line, "item line without an item")];
        };
        match str_of(item, "type") {
            "agent_message" => {
                let text = str_of(item, "text").to_owned();
                self.last_text = Some(text.clone());
                vec![Event::new("text", json!({"text": text}))]
            }
            "error" => vec![Event::new(
                "error",
                json!({"message": item.get("message").cloned().unwrap_or(Value::Null)}),
            )],
            _ => {
                let Some(result) = tool_result(item) else {
                    return vec![raw(line, "untranslated item type")];
                };
                let mut out = Vec::new();
                if !self.started.remove(&item_id(v)) {
                    out.extend(tool_use(item));
                }
                out.push(result);
                out
            }
        }
    }

    fn result(&self, status: &str) -> Event {
        Event::new(
            "result",
            json!({"status": status, "turns": self.turns, "duration_ms": null,
                   "text": self.last_text, "session_id": self.thread}),
        )
    }
}

fn item_id(v: &Value) -> String {
    v.pointer("/item/id")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: &mut CodexStream, line: &str) -> Vec<&'static str> {
        s.line(line).iter().map(|e| e.kind).collect()
    }

    #[test]
    fn a_run_with_a_shell_call() {
        let mut s = CodexStream::new();
        let cases: &[(&str, &[&str])] = &[
            (
                r#"{"type":"thread.started","thread_id":"th1"}"#,
                &["session"],
            ),
            (r#"{"type":"turn.started"}"#, &[]),
            (
                r#"{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"hm"}}"#,
                &["raw"],
            ),
            (
                r#"{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"bash -lc 'echo hi > f'","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#,
                &["tool_use"],
            ),
            (
                r#"{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc 'echo hi > f'","aggregated_output":"ok\n","exit_code":0,"status":"completed"}}"#,
                &["tool_result"],
            ),
            (
                r#"{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"Done."}}"#,
                &["text"],
            ),
            (
                r#"{"type":"turn.completed","usage":{"input_tokens":50,"cached_input_tokens":8,"output_tokens":9}}"#,
                &["usage", "result"],
            ),
            (r#"{"type":"brand.new","x":1}"#, &["raw"]),
            ("not json", &["raw"]),
            (
                r#"{"type":"item.updated","item":{"id":"t","type":"todo_list","items":[]}}"#,
                &["raw"],
            ),
            ("", &[]),
        ];
        for (line, want) in cases {
            assert_eq!(&kinds(&mut s, line), want, "line {line}");
        }
        let mut s = CodexStream::new();
        s.line(r#"{"type":"thread.started","thread_id":"th1"}"#);
        s.line(r#"{"type":"turn.started"}"#);
        let tu = &s.line(r#"{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"ls","status":"in_progress"}}"#)[0];
        assert_eq!(tu.data["name"], "shell");
        assert_eq!(tu.data["input"]["command"], "ls");
        let tr = &s.line(r#"{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"ls","aggregated_output":"a\n","exit_code":2,"status":"failed"}}"#)[0];
        assert_eq!(tr.data["tool_use_id"], "item_1");
        assert_eq!(tr.data["is_error"], true);
        assert_eq!(tr.data["content"], "a\n");
        s.line(r#"{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"Done."}}"#);
        let ev = s.line(r#"{"type":"turn.completed","usage":{"input_tokens":50,"cached_input_tokens":8,"output_tokens":9}}"#);
        assert_eq!(ev[0].data["input_tokens"], 50);
        assert_eq!(ev[0].data["cache_read_input_tokens"], 8);
        assert_eq!(ev[0].data["output_tokens"], 9);
        assert_eq!(ev[1].data["status"], "success");
        assert_eq!(ev[1].data["turns"], 1);
        assert_eq!(ev[1].data["text"], "Done.");
        assert_eq!(ev[1].data["session_id"], "th1");
    }

    #[test]
    fn a_completed_item_without_its_start_gives_both() {
        let mut s = CodexStream::new();
        let ev = s.line(r#"{"type":"item.completed","item":{"id":"f1","type":"file_change","changes":[{"path":"a.txt","kind":"add"}],"status":"completed"}}"#);
        let k: Vec<_> = ev.iter().map(|e| e.kind).collect();
        assert_eq!(k, ["tool_use", "tool_result"]);
        assert_eq!(ev[0].data["name"], "apply_patch");
        assert_eq!(ev[1].data["content"], "add a.txt");
        let ev = s.line(r#"{"type":"item.completed","item":{"id":"m1","type":"mcp_tool_call","server":"sbx-host","tool":"greet","arguments":{"who":"x"},"result":{"content":[{"type":"text","text":"hello x"}]},"status":"completed"}}"#);
        assert_eq!(ev[0].data["name"], "mcp__sbx-host__greet");
        assert_eq!(ev[1].data["content"], "hello x");
        assert_eq!(ev[1].data["is_error"], false);
    }

    #[test]
    fn failures_are_errors_and_an_error_result() {
        let mut s = CodexStream::new();
        let ev = s.line(r#"{"type":"turn.failed","error":{"message":"unexpected status 401"}}"#);
        assert_eq!(ev[0].kind, "error");
        assert_eq!(ev[0].data["message"], "unexpected status 401");
        assert_eq!(ev[1].data["status"], "error");
        let ev = s.line(r#"{"type":"error","message":"stream disconnected"}"#);
        assert_eq!(ev[0].kind, "error");
        let ev =
            s.line(r#"{"type":"item.completed","item":{"id":"e","type":"error","message":"bad"}}"#);
        assert_eq!(ev[0].kind, "error");
    }

    #[test]
    fn raw_keeps_the_whole_line() {
        let mut s = CodexStream::new();
        let line = r#"{"type":"item.completed","item":{"id":"t","type":"todo_list","items":[{"text":"x","completed":false}]}}"#;
        assert_eq!(s.line(line)[0].data["line"], line);
    }
}
