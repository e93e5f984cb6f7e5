//! sbx's own agent events (schema version [`SCHEMA`]), and Claude Code's
//! stream-json lines translated into them (codex's `exec --json` lines:
//! [`super::codex_events`]). One CLI line may give several events; a line
//! that is not JSON or of a type this version does not know becomes a `raw`
//! event carrying it whole: nothing is dropped.
//!
//! Each event is printed under `--json` as
//! `{"type": KIND, "v": 1, "data": {...}}`. Kinds:
//!
//! | type | data |
//! |---|---|
//! | `session` | `session_id`, `model`, `cwd`, `tools`, `mcp_servers` |
//! | `text` | `text` |
//! | `tool_use` | `id`, `name`, `input` |
//! | `tool_result` | `tool_use_id`, `is_error`, `content` (text) |
//! | `usage` | `input_tokens`, `output_tokens`, `cache_read_input_tokens`, `cache_creation_input_tokens`, `cost_usd` |
//! | `result` | `status` (success, error, max_turns, timeout, refused, stopped), `turns`, `duration_ms`, `text`, `session_id`, `exit` |
//! | `error` | `message` |
//! | `raw` | `line` (the CLI's line as text), `reason` |

use serde_json::{Value, json};

pub const SCHEMA: u32 = 1;

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub kind: &'static str,
    pub data: Value,
}

impl Event {
    pub fn new(kind: &'static str, data: Value) -> Self {
        Self { kind, data }
    }

    pub fn to_json(&self) -> Value {
        json!({"type": self.kind, "v": SCHEMA, "data": self.data})
    }
}

fn raw(line: &str, reason: &str) -> Event {
    Event::new("raw", json!({"line": line, "reason": reason}))
}

/// Flatten a tool_result's content (a string or a list of blocks) to text.
fn result_text(c: Option<&Value>) -> String {
    match c {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Translate one line of Claude Code's `--output-format stream-json`.
pub fn translate_claude(line: &str) -> Vec<Event> {
    let line = line.trim_end_matches(['\r', '\n']);
    if line.trim().is_empty() {
        return Vec::new();
    }
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        return vec![raw(line, "not JSON")];
    };
    let s = |p: &str| v.pointer(p).cloned().unwrap_or(Value::Null);
    match v.get("type").and_then(Value::as_str) {
        Some("system") if v.get("subtype").and_then(Value::as_str) == Some("init") => {
            vec![Event::new(
                "session",
                json!({"session_id": s("/session_id"), "model": s("/model"), "cwd": s("/cwd"),
                       "tools": s("/tools"), "mcp_servers": s("/mcp_servers")}),
            )]
        }
        Some("assistant") => blocks(&v, line, |b| match b.get("type").and_then(Value::as_str) {
            Some("text") => Some(Event::new(
                "text",
                json!({"text": b.get("text").cloned().unwrap_or(Value::Null)}),
            )),
            Some("tool_use") => Some(Event::new(
                "tool_use",
                json!({"id": b.get("id"), "name": b.get("name"), "input": b.get("input")}),
            )),
            _ => None,
        }),
        Some("user") => blocks(&v, line, |b| {
            (b.get("type").and_then(Value::as_str) == Some("tool_result")).then(|| {
                Event::new(
                    "tool_result",
                    json!({"tool_use_id": b.get("tool_use_id"),
                           "is_error": b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                           "content": result_text(b.get("content"))}),
                )
            })
        }),
        Some("result") => {
            let u = |k: &str| {
                v.pointer(&format!("/usage/{k}"))
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
            };
            let subtype = v.get("subtype").and_then(Value::as_str).unwrap_or("");
            let is_error = v.get("is_error").and_then(Value::as_bool).unwrap_or(false);
            let status = match subtype {
                "success" if !is_error => "success",
                "error_max_turns" => "max_turns",
                _ => "error",
            };
            vec![
                Event::new(
                    "usage",
                    json!({"input_tokens": u("input_tokens"), "output_tokens": u("output_tokens"),
                           "cache_read_input_tokens": u("cache_read_input_tokens"),
                           "cache_creation_input_tokens": u("cache_creation_input_tokens"),
                           "cost_usd": v.get("total_cost_usd").and_then(Value::as_f64).unwrap_or(0.0)}),
                ),
                Event::new(
                    "result",
                    json!({"status": status, "turns": s("/num_turns"), "duration_ms": s("/duration_ms"),
                           "text": s("/result"), "session_id": s("/session_id"), "cli_subtype": subtype}),
                ),
            ]
        }
        _ => vec![raw(line, "unknown line type")],
    }
}

/// Events from a message's content blocks; blocks of kinds this version
/// does not translate (thinking, images) go out as one `raw` event.
fn blocks(v: &Value, line: &str, f: impl Fn(&Value) -> Option<Event>) -> Vec<Event> {
    let Some(content) = v.pointer("/message/content") else {
        return vec![raw(line, "message without content")];
    };
    let list: Vec<Value> = match content {
        Value::Array(a) => a.clone(),
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        _ => return vec![raw(line, "message without content")],
    };
    let mut out = Vec::new();
    let mut untranslated = false;
    for b in &list {
        match f(b) {
            Some(e) => out.push(e),
            None => untranslated = true,
        }
    }
    if untranslated {
        out.push(raw(line, "content block of an untranslated kind"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translates_each_kind_and_keeps_unknown_lines() {
        let cases: &[(&str, &[&str])] = &[
            (
                r#"{"type":"system","subtype":"init","session_id":"s","model":"m","tools":["Bash"]}"#,
                &["session"],
            ),
            (
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}"#,
                &["text", "tool_use"],
            ),
            (
                r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"out","is_error":false}]}}"#,
                &["tool_result"],
            ),
            (
                r#"{"type":"result","subtype":"success","is_error":false,"num_turns":2,"total_cost_usd":0.5,"usage":{"input_tokens":3,"output_tokens":4}}"#,
                &["usage", "result"],
            ),
            (r#"{"type":"brand_new_kind","x":1}"#, &["raw"]),
            ("not json at all", &["raw"]),
            (
                r#"{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"hm"}]}}"#,
                &["raw"],
            ),
            (
                r#"{"type":"system","subtype":"compact_boundary"}"#,
                &["raw"],
            ),
            ("", &[]),
        ];
        for (line, kinds) in cases {
            let got: Vec<&str> = translate_claude(line).iter().map(|e| e.kind).collect();
            assert_eq!(&got, kinds, "line {line}");
        }
    }

    #[test]
    fn raw_keeps_the_whole_line() {
        let e = &translate_claude("garbage {")[0];
        assert_eq!(e.data["line"], "garbage {");
        assert_eq!(e.to_json()["v"], SCHEMA);
    }

    #[test]
    fn result_status_and_usage() {
        let ev = translate_claude(
            r#"{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":1,"total_cost_usd":0.25,"usage":{"input_tokens":7,"output_tokens":9,"cache_read_input_tokens":2}}"#,
        );
        assert_eq!(ev[0].data["input_tokens"], 7);
        assert_eq!(ev[0].data["cache_read_input_tokens"], 2);
        assert_eq!(ev[0].data["cost_usd"], 0.25);
        assert_eq!(ev[1].data["status"], "max_turns");
        let ev = translate_claude(r#"{"type":"result","subtype":"success","is_error":true}"#);
        assert_eq!(ev[1].data["status"], "error");
    }

    #[test]
    fn tool_result_content_blocks_flatten_to_text() {
        let ev = translate_claude(
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]}]}}"#,
        );
        assert_eq!(ev[0].data["content"], "x\ny");
    }
}
