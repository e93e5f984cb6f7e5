//! `POST /v1/responses`: the OpenAI Responses API as codex speaks it.
//!
//! Streamed (codex always asks `stream: true`): `response.created`, then per
//! output item `response.output_item.added`, its deltas
//! (`response.output_text.delta`, `response.function_call_arguments.delta`)
//! and `response.output_item.done`, then `response.completed` with `usage`
//! (`input_tokens`, `input_tokens_details.cached_tokens`, `output_tokens`).
//! Without `stream` the same response is one JSON object.
//!
//! The script's turns are the Messages API's, with the tool call spelled
//! for codex: `"shell": "COMMAND"` becomes a call of whichever shell tool
//! the request offers (`shell_command` {command}, `exec_command` {cmd},
//! `shell` {command: [bash, -lc, …]}, or a `local_shell_call`), and
//! `"function_call": {"name": N, "arguments": {...}}` any other function.
//! `usage` may also give `cached_tokens`. The turn served is the number of
//! tool calls in the request's `input` (one call a turn), so the turn after
//! a call is served to the request carrying its output; no state is kept.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};

use crate::{Server, halves, send_json, sse_end, sse_event, sse_start};

fn calls_in(body: &Value) -> usize {
    body.get("input")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|i| {
                    i.get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|t| t.ends_with("_call"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// The tools a request offers, by name (function tools) or type.
fn offered(body: &Value) -> Vec<String> {
    body.get("tools")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|t| {
                    t.get("name")
                        .or_else(|| t.get("type"))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The output item running `cmd` with the shell tool the request offers.
fn shell_call(body: &Value, cmd: &str, call_id: &str, id: &str) -> Value {
    let tools = offered(body);
    let has = |n: &str| tools.iter().any(|t| t == n);
    let (name, args) = if has("shell_command") {
        ("shell_command", json!({"command": cmd}))
    } else if has("exec_command") {
        ("exec_command", json!({"cmd": cmd}))
    } else if has("local_shell") && !has("shell") {
        return json!({"type": "local_shell_call", "id": id, "call_id": call_id, "status": "completed",
                      "action": {"type": "exec", "command": ["bash", "-lc", cmd]}});
    } else {
        ("shell", json!({"command": ["bash", "-lc", cmd]}))
    };
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
           "arguments": args.to_string(), "status": "completed"})
}

pub fn respond(server: &Server, body: &Value, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let script = &server.script;
    let exhausted = json!({"text": script.get("exhausted_text").and_then(Value::as_str).unwrap_or("script exhausted")});
    let t = script["turns"]
        .as_array()
        .and_then(|a| a.get(calls_in(body)))
        .unwrap_or(&exhausted);
    if let Some(ms) = t.get("delay_ms").and_then(Value::as_u64) {
        std::thread::sleep(Duration::from_millis(ms));
    }
    if let Some(e) = t.get("error") {
        let status = e.get("status").and_then(Value::as_u64).unwrap_or(400) as u16;
        let msg = e
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("scripted error");
        let kind = e
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("invalid_request_error");
        return send_json(
            out,
            status,
            &json!({"error": {"message": msg, "type": kind, "param": null, "code": null}}),
        );
    }
    let n = || server.ids.fetch_add(1, Ordering::Relaxed);
    let mut items = Vec::new();
    if let Some(text) = t.get("text").and_then(Value::as_str) {
        items.push(
            json!({"type": "message", "id": format!("msg_standin_{:06}", n()), "role": "assistant",
                          "status": "completed",
                          "content": [{"type": "output_text", "text": text, "annotations": []}]}),
        );
    }
    if let Some(cmd) = t.get("shell").and_then(Value::as_str) {
        let k = n();
        items.push(shell_call(
            body,
            cmd,
            &format!("call_standin_{k:06}"),
            &format!("fc_standin_{k:06}"),
        ));
    }
    if let Some(f) = t.get("function_call") {
        let k = n();
        items.push(
            json!({"type": "function_call", "id": format!("fc_standin_{k:06}"),
                          "call_id": format!("call_standin_{k:06}"),
                          "name": f.get("name").and_then(Value::as_str).unwrap_or("tool"),
                          "arguments": f.get("arguments").cloned().unwrap_or(json!({})).to_string(),
                          "status": "completed"}),
        );
    }
    let u = |k: &str, d: u64| {
        t.pointer(&format!("/usage/{k}"))
            .and_then(Value::as_u64)
            .unwrap_or(d)
    };
    let (input, output, cached) = (
        u("input_tokens", 100),
        u("output_tokens", 20),
        u("cached_tokens", 0),
    );
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("gpt-standin");
    let id = format!("resp_standin_{:06}", n());
    let usage = json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
                       "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
                       "total_tokens": input + output});
    let response = |status: &str, output: &[Value], usage: &Value| {
        json!({"id": id, "object": "response", "created_at": crate::now_ms() / 1000, "status": status,
               "model": model, "output": output, "usage": usage})
    };
    if body.get("stream").and_then(Value::as_bool) != Some(true) {
        return send_json(out, 200, &response("completed", &items, &usage));
    }
    sse_start(out)?;
    let mut seq = 0u64;
    let mut ev = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(seq);
        seq += 1;
        sse_event(out, name, &data)
    };
    ev(
        "response.created",
        json!({"response": response("in_progress", &[], &Value::Null)}),
    )?;
    for (i, item) in items.iter().enumerate() {
        let item_id = item["id"].clone();
        let mut started = item.clone();
        started["status"] = json!("in_progress");
        match item["type"].as_str() {
            Some("message") => started["content"] = json!([]),
            Some("function_call") => started["arguments"] = json!(""),
            _ => {}
        }
        ev(
            "response.output_item.added",
            json!({"output_index": i, "item": started}),
        )?;
        if let Some(text) = item.pointer("/content/0/text").and_then(Value::as_str) {
            for part in halves(text) {
                ev(
                    "response.output_text.delta",
                    json!({"item_id": item_id, "output_index": i, "content_index": 0, "delta": part}),
                )?;
            }
            ev(
                "response.output_text.done",
                json!({"item_id": item_id, "output_index": i, "content_index": 0, "text": text}),
            )?;
        }
        if let Some(args) = item.get("arguments").and_then(Value::as_str) {
            for part in halves(args) {
                ev(
                    "response.function_call_arguments.delta",
                    json!({"item_id": item_id, "output_index": i, "delta": part}),
                )?;
            }
        }
        ev(
            "response.output_item.done",
            json!({"output_index": i, "item": item}),
        )?;
    }
    ev(
        "response.completed",
        json!({"response": response("completed", &items, &usage)}),
    )?;
    sse_end(out)
}
