//! sbx-msgapi: a scripted stand-in for the Anthropic Messages API and the
//! OpenAI Responses API (see [`responses`]).
//!
//! The agent e2e tests point the real Claude Code CLI at it with
//! `ANTHROPIC_BASE_URL`, and the real codex CLI through a model provider's
//! `base_url`. It serves `POST /v1/messages` as SSE (`stream: true`) or plain
//! JSON, and `POST /v1/responses`, from a script of turns, and logs every
//! request (headers and body) as one JSON line, so tests can assert what the
//! CLI sent.
//!
//! Script (JSON):
//! ```json
//! {"turns": [
//!   {"tool_use": {"name": "Bash", "input": {"command": "echo hi > f"}}},
//!   {"text": "done", "usage": {"input_tokens": 120, "output_tokens": 7}}
//! ],
//!  "side_text": "ok"}
//! ```
//! A turn has `text`, `tool_use` (one object or a list), both, or `error`
//! (`{"status": 400, "type": "invalid_request_error", "message": "…"}`), and
//! optionally `delay_ms` (sleep before answering), `hold_file` (answer once
//! that file exists, at most two minutes on) and `usage`.
//! The turn served is the number of assistant messages in the request, so the
//! turn after a `tool_use` is served to the request carrying its `tool_result`,
//! and the server keeps no per-conversation state. Past the last turn it
//! answers `exhausted_text` (default "script exhausted"). A request without a
//! `tools` array is a side request of the CLI (titles, quota probes) and gets
//! `side_text`, unless the script sets `"side_requests": false`.
//!
//! Usage: `sbx-msgapi --script FILE --log FILE [--listen ADDR] [--port-file FILE]
//! [--require-key KEY [--refresh-token TOKEN]] [--tls NAME,... --tls-ca DIR]`.
//! The key is taken as `x-api-key` or as an OAuth `Authorization: Bearer`
//! token; with `--refresh-token`, `POST /v1/oauth/token` answers a refresh
//! (Claude Code's: JSON, `grant_type` `refresh_token`) bringing that
//! token with the key as the new access token, `invalid_grant` to any
//! other. With `--token-life SECS` the tokens rotate: each refresh gives
//! a new access token (`KEY-rN`) and refresh token (`TOKEN-rN`) good for
//! SECS, and only the newest access token is taken (the old ones are
//! revoked at once, so a client still sending one gets 401). Every record
//! carries the client's address (`peer`). Prints `listening ADDR`
//! on stdout once bound. With `--tls` it serves HTTPS under those names, its
//! leaf signed by the root in DIR, which `sbx-msgapi --new-ca DIR` makes
//! (the credential-injection test trusts that root in the proxy alone).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

mod responses;
mod tls;

struct Opts {
    script: PathBuf,
    log: PathBuf,
    listen: String,
    port_file: Option<PathBuf>,
    require_key: Option<String>,
    refresh_token: Option<String>,
    token_life: Option<u64>,
    tls: Option<(Vec<String>, PathBuf)>,
}

struct Server {
    script: Value,
    log: Mutex<File>,
    /// The access and refresh tokens taken now, and the refreshes so far.
    tokens: Mutex<(Option<String>, Option<String>, u64)>,
    token_life: Option<u64>,
    ids: AtomicU64,
}

fn usage() -> &'static str {
    "usage: sbx-msgapi --script FILE --log FILE [--listen ADDR] [--port-file FILE] [--require-key KEY [--refresh-token TOKEN]] [--tls NAME,... --tls-ca DIR] | --new-ca DIR"
}

fn parse_args() -> Result<Opts, String> {
    let mut args = std::env::args().skip(1);
    let (mut script, mut log, mut listen, mut port_file, mut require_key) =
        (None, None, "127.0.0.1:0".to_owned(), None, None);
    let (mut tls, mut tls_ca, mut refresh_token) = (None, None, None);
    let mut token_life = None;
    while let Some(a) = args.next() {
        let mut val = || {
            args.next()
                .ok_or_else(|| format!("{a} needs a value; {}", usage()))
        };
        match a.as_str() {
            "--script" => script = Some(PathBuf::from(val()?)),
            "--log" => log = Some(PathBuf::from(val()?)),
            "--listen" => listen = val()?,
            "--port-file" => port_file = Some(PathBuf::from(val()?)),
            "--require-key" => require_key = Some(val()?),
            "--refresh-token" => refresh_token = Some(val()?),
            "--token-life" => {
                token_life = Some(
                    val()?
                        .parse()
                        .map_err(|_| "--token-life: seconds".to_owned())?,
                );
            }
            "--tls" => tls = Some(val()?.split(',').map(str::to_owned).collect()),
            "--tls-ca" => tls_ca = Some(PathBuf::from(val()?)),
            "-h" | "--help" => return Err(usage().to_owned()),
            other => return Err(format!("unknown argument {other:?}; {}", usage())),
        }
    }
    Ok(Opts {
        script: script.ok_or_else(|| format!("--script is required; {}", usage()))?,
        log: log.ok_or_else(|| format!("--log is required; {}", usage()))?,
        listen,
        port_file,
        require_key,
        refresh_token,
        token_life,
        tls: match (tls, tls_ca) {
            (Some(n), Some(d)) => Some((n, d)),
            (None, None) => None,
            _ => return Err(format!("--tls and --tls-ca go together; {}", usage())),
        },
    })
}

fn main() -> ExitCode {
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sbx-msgapi: error: {e}");
            ExitCode::from(64)
        }
    }
}

fn real_main() -> Result<(), String> {
    if let [flag, dir] = &std::env::args().skip(1).collect::<Vec<_>>()[..]
        && flag == "--new-ca"
    {
        return tls::new_ca(std::path::Path::new(dir));
    }
    let o = parse_args()?;
    let text = std::fs::read_to_string(&o.script)
        .map_err(|e| format!("reading script {}: {e}", o.script.display()))?;
    let script: Value = serde_json::from_str(&text)
        .map_err(|e| format!("script {} is not JSON: {e}", o.script.display()))?;
    if !script.get("turns").is_some_and(Value::is_array) {
        return Err(format!(
            "script {}: `turns` must be an array",
            o.script.display()
        ));
    }
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&o.log)
        .map_err(|e| format!("opening log {}: {e}", o.log.display()))?;
    let listener =
        TcpListener::bind(&o.listen).map_err(|e| format!("binding {}: {e}", o.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    if let Some(p) = &o.port_file {
        // Write then rename so a reader never sees a half-written port.
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, addr.port().to_string())
            .and_then(|()| std::fs::rename(&tmp, p))
            .map_err(|e| format!("writing {}: {e}", p.display()))?;
    }
    let tls = match &o.tls {
        Some((names, dir)) => Some(tls::server(names, dir)?),
        None => None,
    };
    println!("listening {addr}");
    let _ = std::io::stdout().flush();
    let server = Arc::new(Server {
        script,
        log: Mutex::new(log),
        tokens: Mutex::new((o.require_key, o.refresh_token, 0)),
        token_life: o.token_life,
        ids: AtomicU64::new(1),
    });
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let server = Arc::clone(&server);
        let tls = tls.clone();
        std::thread::spawn(move || {
            let _ = match tls {
                Some(c) => tls::serve(&server, c, conn),
                None => serve_conn(&server, conn),
            };
        });
    }
    Ok(())
}

struct Request {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

fn read_request(r: &mut impl BufRead) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let mut body = Vec::new();
    if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = headers
        .get("content-length")
        .and_then(|v| v.parse::<usize>().ok())
    {
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    }
    Ok(Some(Request {
        method,
        path,
        headers,
        body,
    }))
}

fn serve_conn(server: &Server, conn: TcpStream) -> std::io::Result<()> {
    let mut out = conn.try_clone()?;
    let peer = conn
        .peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    serve_stream(server, BufReader::new(conn), &mut out, &peer)
}

/// Keep-alive: clients reuse connections; serve requests until EOF.
fn serve_stream(
    server: &Server,
    mut r: impl BufRead,
    out: &mut dyn Write,
    peer: &str,
) -> std::io::Result<()> {
    while let Some(req) = read_request(&mut r)? {
        handle(server, &req, out, peer)?;
    }
    Ok(())
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn handle(server: &Server, req: &Request, out: &mut dyn Write, peer: &str) -> std::io::Result<()> {
    let path = req.path.split('?').next().unwrap_or_default();
    let body: Value = serde_json::from_slice(&req.body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&req.body).into_owned()));
    let turn = assistant_turns(&body);
    let side = is_side_request(&server.script, &body);
    let record = json!({
        "ts_ms": now_ms() as u64,
        "method": req.method,
        "path": req.path,
        "headers": req.headers,
        "body": body,
        "turn": turn,
        "side": side,
        "peer": peer,
    });
    if let Ok(mut f) = server.log.lock() {
        let mut line = record.to_string();
        line.push('\n');
        let _ = f.write_all(line.as_bytes());
    }
    let (key, token) = {
        let t = server.tokens.lock().unwrap_or_else(|e| e.into_inner());
        (t.0.clone(), t.1.clone())
    };
    if let (Some(key), Some(token)) = (&key, &token)
        && (req.method.as_str(), path) == ("POST", "/v1/oauth/token")
    {
        if body["grant_type"] != "refresh_token" || body["refresh_token"] != *token {
            return send_json(
                out,
                400,
                &json!({"error": "invalid_grant", "error_description": "Invalid refresh token"}),
            );
        }
        let Some(life) = server.token_life else {
            return send_json(
                out,
                200,
                &json!({"access_token": key, "refresh_token": token, "expires_in": 28800,
                        "scope": "user:inference user:profile", "token_type": "Bearer"}),
            );
        };
        let (access, refresh) = {
            let mut t = server.tokens.lock().unwrap_or_else(|e| e.into_inner());
            t.2 += 1;
            let base = |s: &str| s.split("-r").next().unwrap_or(s).to_owned();
            let access = format!("{}-r{}", base(key), t.2);
            let refresh = format!("{}-r{}", base(token), t.2);
            t.0 = Some(access.clone());
            t.1 = Some(refresh.clone());
            (access, refresh)
        };
        return send_json(
            out,
            200,
            &json!({"access_token": access, "refresh_token": refresh, "expires_in": life,
                    "scope": "user:inference user:profile", "token_type": "Bearer"}),
        );
    }
    if let Some(key) = &key
        && path.starts_with("/v1/")
        && req.headers.get("x-api-key") != Some(key)
        && req
            .headers
            .get("authorization")
            .map(|a| a.trim_start_matches("Bearer "))
            != Some(key)
    {
        return send_json(
            out,
            401,
            &api_error("authentication_error", "invalid x-api-key"),
        );
    }
    match (req.method.as_str(), path) {
        ("POST", "/v1/messages") => messages(server, &body, turn, side, out),
        ("POST", "/v1/responses") => responses::respond(server, &body, out),
        ("POST", "/v1/messages/count_tokens") => send_json(out, 200, &json!({"input_tokens": 100})),
        ("GET", "/v1/models") => send_json(
            out,
            200,
            &json!({"data": [{"type": "model", "id": "claude-sonnet-4-5", "display_name": "Stand-in",
                    "created_at": "2025-01-01T00:00:00Z"}], "has_more": false,
                    "first_id": "claude-sonnet-4-5", "last_id": "claude-sonnet-4-5"}),
        ),
        _ => send_json(out, 200, &json!({})),
    }
}

fn api_error(kind: &str, msg: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": msg}})
}

fn assistant_turns(body: &Value) -> usize {
    body.get("messages")
        .and_then(Value::as_array)
        .map(|m| {
            m.iter()
                .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
                .count()
        })
        .unwrap_or(0)
}

fn is_side_request(script: &Value, body: &Value) -> bool {
    script.get("side_requests").and_then(Value::as_bool) != Some(false)
        && body.get("messages").is_some()
        && body
            .get("tools")
            .and_then(Value::as_array)
            .is_none_or(|t| t.is_empty())
}

fn send_json(out: &mut dyn Write, status: u16, v: &Value) -> std::io::Result<()> {
    let body = v.to_string();
    write!(
        out,
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nrequest-id: req_standin\r\n\r\n{body}",
        reason(status),
        body.len()
    )?;
    out.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        _ => "Status",
    }
}

/// One content block of a reply.
enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

fn messages(
    server: &Server,
    body: &Value,
    turn: usize,
    side: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let script = &server.script;
    let exhausted = json!({"text": script.get("exhausted_text").and_then(Value::as_str).unwrap_or("script exhausted")});
    let side_turn =
        json!({"text": script.get("side_text").and_then(Value::as_str).unwrap_or("ok")});
    let t = if side {
        &side_turn
    } else {
        script["turns"]
            .as_array()
            .and_then(|a| a.get(turn))
            .unwrap_or(&exhausted)
    };
    if let Some(ms) = t.get("delay_ms").and_then(Value::as_u64) {
        std::thread::sleep(Duration::from_millis(ms));
    }
    // A test looks at the waiting client, then lets the answer go.
    if let Some(f) = t.get("hold_file").and_then(Value::as_str) {
        let until = std::time::Instant::now() + Duration::from_secs(120);
        while !std::path::Path::new(f).exists() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    if let Some(e) = t.get("error") {
        let status = e.get("status").and_then(Value::as_u64).unwrap_or(400) as u16;
        let kind = e
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("invalid_request_error");
        let msg = e
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("scripted error");
        return send_json(out, status, &api_error(kind, msg));
    }
    let mut blocks = Vec::new();
    if let Some(text) = t.get("text").and_then(Value::as_str) {
        blocks.push(Block::Text(text.to_owned()));
    }
    let uses = match t.get("tool_use") {
        Some(Value::Array(a)) => a.clone(),
        Some(v @ Value::Object(_)) => vec![v.clone()],
        _ => Vec::new(),
    };
    for u in uses {
        let n = server.ids.fetch_add(1, Ordering::Relaxed);
        blocks.push(Block::ToolUse {
            id: format!("toolu_standin_{n:06}"),
            name: u
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("Bash")
                .to_owned(),
            input: u.get("input").cloned().unwrap_or_else(|| json!({})),
        });
    }
    let stop = if blocks.iter().any(|b| matches!(b, Block::ToolUse { .. })) {
        "tool_use"
    } else {
        "end_turn"
    };
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("claude-sonnet-4-5");
    let input_tokens = t
        .pointer("/usage/input_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(100);
    let output_tokens = t
        .pointer("/usage/output_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(20);
    let msg_id = format!(
        "msg_standin_{:06}",
        server.ids.fetch_add(1, Ordering::Relaxed)
    );
    let usage = json!({"input_tokens": input_tokens, "output_tokens": output_tokens,
                       "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    if body.get("stream").and_then(Value::as_bool) != Some(true) {
        let content: Vec<Value> = blocks
            .iter()
            .map(|b| match b {
                Block::Text(t) => json!({"type": "text", "text": t}),
                Block::ToolUse { id, name, input } => {
                    json!({"type": "tool_use", "id": id, "name": name, "input": input})
                }
            })
            .collect();
        return send_json(
            out,
            200,
            &json!({"id": msg_id, "type": "message", "role": "assistant", "model": model,
                    "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage}),
        );
    }
    sse_start(out)?;
    let mut ev = |name: &str, data: Value| sse_event(out, name, &data);
    ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": msg_id, "type": "message", "role": "assistant",
               "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
               "usage": {"input_tokens": input_tokens, "output_tokens": 1,
                         "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}}),
    )?;
    ev("ping", json!({"type": "ping"}))?;
    for (i, b) in blocks.iter().enumerate() {
        match b {
            Block::Text(text) => {
                ev(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}),
                )?;
                for part in halves(text) {
                    if !part.is_empty() {
                        ev(
                            "content_block_delta",
                            json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": part}}),
                        )?;
                    }
                }
            }
            Block::ToolUse { id, name, input } => {
                ev(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                )?;
                let js = input.to_string();
                for part in halves(&js) {
                    ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": part}}),
                    )?;
                }
            }
        }
        ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        )?;
    }
    ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": output_tokens}}),
    )?;
    ev("message_stop", json!({"type": "message_stop"}))?;
    sse_end(out)
}

/// An SSE response's head; its events go out as HTTP chunks.
fn sse_start(out: &mut dyn Write) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nrequest-id: req_standin\r\ntransfer-encoding: chunked\r\n\r\n"
    )
}

fn sse_event(out: &mut dyn Write, name: &str, data: &Value) -> std::io::Result<()> {
    let payload = format!("event: {name}\ndata: {data}\n\n");
    write!(out, "{:x}\r\n{payload}\r\n", payload.len())?;
    out.flush()
}

fn sse_end(out: &mut dyn Write) -> std::io::Result<()> {
    write!(out, "0\r\n\r\n")?;
    out.flush()
}

/// A text's two halves (so clients see real streaming).
fn halves(text: &str) -> [&str; 2] {
    let mid = text
        .char_indices()
        .nth(text.chars().count() / 2)
        .map_or(text.len(), |(p, _)| p);
    [&text[..mid], &text[mid..]]
}
