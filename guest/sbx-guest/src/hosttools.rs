//! Host tools for `sbx-run agent`: `[agent.host-tools]` reach the agent CLI
//! as the tools of one MCP stdio server, `sbx-guest mcp-host-tools`.
//!
//! The path of a call: the CLI writes JSON-RPC to `mcp-host-tools` (its
//! child, agent uid); that process holds the one connection `agent-launch`
//! accepts on a socket in a private directory (the peer must be the CLI's
//! child running this binary; the socket is removed after that first
//! connection, so no later process can connect); `agent-launch` writes the
//! call as one marked line into the exec's stdout, where `sbx-run agent` on
//! the host decides and runs it, and the reply comes back on the exec's
//! stdin. The host is the only decision maker: everything in the sandbox is
//! a relay, so a compromised relay can ask for nothing the model could not.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::ExitCode;

use serde_json::{Value, json};

pub use sbx_core::hosttools::{Answer, Call, Header, MARK, SERVER, SOCKET_ENV, ToolSpec};

/// Protocol versions this server speaks (newest last).
const VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

fn rpc_error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// Answer one JSON-RPC message; `call` runs a tools/call. None for a
/// notification (no reply is due).
pub fn handle(
    msg: &Value,
    tools: &[ToolSpec],
    call: &mut dyn FnMut(&str, &Value) -> (String, bool),
) -> Option<Value> {
    let id = msg.get("id")?.clone();
    let Some(method) = msg.get("method").and_then(Value::as_str) else {
        return Some(rpc_error(&id, -32600, "invalid request: no method"));
    };
    let params = msg.get("params").cloned().unwrap_or(json!({}));
    let result = match method {
        "initialize" => {
            let asked = params["protocolVersion"].as_str().unwrap_or("");
            let version = VERSIONS
                .iter()
                .find(|v| **v == asked)
                .or(VERSIONS.last())
                .copied()
                .unwrap_or("2025-06-18");
            json!({
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": {"name": "sbx-host-tools", "version": env!("CARGO_PKG_VERSION")},
                "instructions": "Commands on the developer's host, run by sbx with your arguments as whole argv elements (no shell)."
            })
        }
        "ping" => json!({}),
        "tools/list" => {
            let list: Vec<Value> = tools
                .iter()
                .map(|t| {
                    let props: serde_json::Map<String, Value> = t
                        .params
                        .iter()
                        .map(|p| (p.clone(), json!({"type": "string"})))
                        .collect();
                    json!({
                        "name": t.name,
                        "description": t.description,
                        "inputSchema": {"type": "object", "properties": props, "required": t.params, "additionalProperties": false}
                    })
                })
                .collect();
            json!({"tools": list})
        }
        "tools/call" => {
            let Some(name) = params["name"].as_str() else {
                return Some(rpc_error(&id, -32602, "tools/call: no tool name"));
            };
            let args = params.get("arguments").cloned().unwrap_or(json!({}));
            // Unknown names go to the host too: it decides, and logs the refusal.
            let (text, is_error) = call(name, &args);
            json!({"content": [{"type": "text", "text": text}], "isError": is_error})
        }
        "resources/list" => json!({"resources": []}),
        "prompts/list" => json!({"prompts": []}),
        _ => {
            return Some(rpc_error(
                &id,
                -32601,
                &format!("method not found: {method}"),
            ));
        }
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// `sbx-guest mcp-host-tools`: the MCP server the CLI starts.
pub fn serve() -> ExitCode {
    let Some(path) = std::env::var_os(SOCKET_ENV) else {
        sbx_core::output::error(&format!(
            "mcp-host-tools: {SOCKET_ENV} is not set: this server runs only under `sbx-run agent`"
        ));
        return ExitCode::from(77);
    };
    match serve_inner(Path::new(&path)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            sbx_core::output::error(&format!("mcp-host-tools: {e}"));
            ExitCode::from(77)
        }
    }
}

fn serve_inner(socket: &Path) -> std::io::Result<()> {
    let conn = UnixStream::connect(socket).map_err(|e| {
        std::io::Error::other(format!(
            "{}: {e} (host tools serve one connection, the agent CLI's)",
            socket.display()
        ))
    })?;
    let mut up = conn.try_clone()?;
    let mut down = BufReader::new(conn);
    let mut first = String::new();
    down.read_line(&mut first)?;
    let tools: Vec<ToolSpec> = serde_json::from_str(first.trim_end()).map_err(|e| {
        std::io::Error::other(format!(
            "tool list from agent-launch: {e} (refused: host tools serve one connection, the agent CLI's)"
        ))
    })?;
    // Accepted (the launcher read our /proc/PID/exe, so not earlier): from
    // now on other agent processes may not ptrace us or open our socket.
    let _ = nix::sys::prctl::set_dumpable(false);
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    let mut next = 0u64;
    for line in stdin.lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Value>(&line) {
            Err(e) => Some(rpc_error(
                &Value::Null,
                -32700,
                &format!("parse error: {e}"),
            )),
            Ok(msg) => handle(&msg, &tools, &mut |name, args| {
                next += 1;
                let c = Call {
                    id: next,
                    name: name.to_owned(),
                    arguments: args.clone(),
                };
                relay_call(&mut up, &mut down, &c)
                    .unwrap_or_else(|e| (format!("host tools unavailable: {e}"), true))
            }),
        };
        if let Some(r) = reply {
            writeln!(stdout, "{r}")?;
            stdout.flush()?;
        }
    }
    Ok(())
}

fn relay_call(
    up: &mut UnixStream,
    down: &mut BufReader<UnixStream>,
    c: &Call,
) -> std::io::Result<(String, bool)> {
    let mut line = serde_json::to_vec(c).map_err(std::io::Error::other)?;
    line.push(b'\n');
    up.write_all(&line)?;
    let mut ans = String::new();
    if down.read_line(&mut ans)? == 0 {
        return Err(std::io::Error::other("the run ended"));
    }
    let a: Answer = serde_json::from_str(ans.trim_end()).map_err(std::io::Error::other)?;
    if a.id != c.id {
        return Err(std::io::Error::other("answer out of order"));
    }
    Ok((a.text, a.is_error))
}

/// The launcher's end: a listener in a private 0700 directory that takes
/// exactly one connection, from a child of the CLI running sbx-guest.
pub struct Listener {
    pub dir: tempfile_dir::Dir,
    pub listener: UnixListener,
}

/// A private directory removed on drop (no tempfile dependency in the guest).
pub mod tempfile_dir {
    use std::path::{Path, PathBuf};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new() -> std::io::Result<Self> {
            use std::os::unix::fs::DirBuilderExt;
            let base = std::env::temp_dir();
            for i in 0..16u32 {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(0);
                let p = base.join(format!("sbx-tools-{}-{nanos}-{i}", std::process::id()));
                // mkdir fails on anything already there: no squatting.
                match std::fs::DirBuilder::new().mode(0o700).create(&p) {
                    Ok(()) => return Ok(Self(p)),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e),
                }
            }
            Err(std::io::Error::other(
                "no fresh directory for the host tools socket",
            ))
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Listener {
    pub fn bind() -> std::io::Result<Self> {
        let dir = tempfile_dir::Dir::new()?;
        let listener = UnixListener::bind(dir.path().join("tools.sock"))?;
        Ok(Self { dir, listener })
    }

    pub fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("tools.sock")
    }
}

/// agent-launch's side: reads the header and the prompt, serves the socket,
/// relays calls up and answers down, audits each answer through the guest.
pub mod launcher {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::os::unix::net::UnixStream;
    use std::path::PathBuf;
    use std::process::Child;
    use std::sync::{Arc, Mutex, mpsc};
    use std::time::Duration;

    use sbx_core::audit;

    use super::{Answer, Call, Header, Listener, MARK, ToolSpec, escape_cli_line, is_cli_child};

    /// Largest prompt and largest relayed line.
    const MAX_PROMPT: usize = 16 << 20;
    const MAX_LINE: usize = 4 << 20;

    pub struct Session {
        listener: Listener,
        tools: Vec<ToolSpec>,
        prompt: Vec<u8>,
    }

    pub struct Relay {
        done: mpsc::Receiver<()>,
    }

    impl Relay {
        /// Wait (bounded) until the CLI's stdout is copied out.
        pub fn drain(self, t: Duration) {
            let _ = self.done.recv_timeout(t);
        }
    }

    fn read_line_bounded(r: &mut impl BufRead) -> std::io::Result<Option<Vec<u8>>> {
        let mut buf = Vec::new();
        let n = r.take(MAX_LINE as u64 + 1).read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        if buf.len() > MAX_LINE {
            return Err(std::io::Error::other("line longer than 4 MiB"));
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        Ok(Some(buf))
    }

    impl Session {
        /// Read the header line and the prompt from stdin (after the key).
        pub fn start() -> std::io::Result<Self> {
            let stdin = std::io::stdin();
            let mut r = stdin.lock();
            let line = read_line_bounded(&mut r)?
                .ok_or_else(|| std::io::Error::other("no host tools header"))?;
            let h: Header = serde_json::from_slice(&line)
                .map_err(|e| std::io::Error::other(format!("host tools header: {e}")))?;
            if h.prompt_bytes > MAX_PROMPT {
                return Err(std::io::Error::other("prompt longer than 16 MiB"));
            }
            let mut prompt = vec![0u8; h.prompt_bytes];
            r.read_exact(&mut prompt)?;
            Ok(Self {
                listener: Listener::bind()?,
                tools: h.tools,
                prompt,
            })
        }

        pub fn socket(&self) -> PathBuf {
            self.listener.socket()
        }

        /// Start the relay threads for the spawned CLI.
        pub fn run(self, child: &mut Child) -> std::io::Result<Relay> {
            // Other agent processes may not open our stdout through /proc
            // (a forged call line) or ptrace us.
            let _ = nix::sys::prctl::set_dumpable(false);
            let cli = child.id() as i32;
            if let Some(mut w) = child.stdin.take() {
                let prompt = self.prompt;
                std::thread::spawn(move || {
                    let _ = w.write_all(&prompt);
                });
            }
            let out = Arc::new(Mutex::new(std::io::stdout()));
            let (tx, done) = mpsc::channel();
            if let Some(r) = child.stdout.take() {
                let out = out.clone();
                std::thread::spawn(move || {
                    let mut r = BufReader::new(r);
                    let mut buf = Vec::new();
                    while r.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
                        escape_cli_line(&mut buf);
                        let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
                        let _ = o.write_all(&buf).and_then(|()| o.flush());
                        buf.clear();
                    }
                    let _ = tx.send(());
                });
            }
            let conn_slot: Arc<Mutex<Option<UnixStream>>> = Arc::new(Mutex::new(None));
            let slot = conn_slot.clone();
            let tools = self.tools;
            let listener = self.listener;
            std::thread::spawn(move || accept_and_relay(listener, cli, tools, slot, out));
            std::thread::spawn(move || answers_down(conn_slot));
            Ok(Relay { done })
        }
    }

    fn accept_and_relay(
        l: Listener,
        cli: i32,
        tools: Vec<ToolSpec>,
        slot: Arc<Mutex<Option<UnixStream>>>,
        out: Arc<Mutex<std::io::Stdout>>,
    ) {
        let conn = loop {
            let Ok((c, _)) = l.listener.accept() else {
                return;
            };
            let peer = nix::sys::socket::getsockopt(&c, nix::sys::socket::sockopt::PeerCredentials)
                .map(|c| c.pid())
                .unwrap_or(-1);
            if is_cli_child(peer, cli, crate::agent::parent_of) {
                break c;
            }
            // Anyone else: closed at once; keep waiting for the CLI's child.
        };
        // One connection only: nobody can connect after this.
        drop(l);
        let Ok(mut w) = conn.try_clone() else { return };
        let mut first = serde_json::to_vec(&tools).unwrap_or_else(|_| b"[]".to_vec());
        first.push(b'\n');
        if w.write_all(&first).is_err() {
            return;
        }
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(w);
        let mut r = BufReader::new(conn);
        while let Ok(Some(line)) = read_line_bounded(&mut r) {
            // Re-encoded from the parsed call: only a well-formed call goes up.
            let Ok(call) = serde_json::from_slice::<Call>(&line) else {
                break;
            };
            let Ok(text) = serde_json::to_vec(&call) else {
                break;
            };
            let mut up = vec![MARK];
            up.extend_from_slice(&text);
            up.push(b'\n');
            let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
            if o.write_all(&up).and_then(|()| o.flush()).is_err() {
                break;
            }
        }
    }

    fn answers_down(slot: Arc<Mutex<Option<UnixStream>>>) {
        let stdin = std::io::stdin();
        let mut r = stdin.lock();
        while let Ok(Some(line)) = read_line_bounded(&mut r) {
            let Ok(a) = serde_json::from_slice::<Answer>(&line) else {
                continue;
            };
            // The sandbox's log has every call; the guest is its only writer.
            let _ = audit::append_verified(&a.audit.record("sbx-host-tools"));
            let mut g = slot.lock().unwrap_or_else(|e| e.into_inner());
            if let (Some(w), Ok(mut text)) = (g.as_mut(), serde_json::to_vec(&a)) {
                text.push(b'\n');
                let _ = w.write_all(&text);
            }
        }
    }
}

/// Is `peer` the CLI's MCP child: its parent (or, through a shell, its
/// grandparent) is `cli` and it runs this very binary.
pub fn is_cli_child(peer: i32, cli: i32, parent_of: impl Fn(i32) -> Option<i32>) -> bool {
    let p1 = parent_of(peer);
    let p2 = p1.and_then(&parent_of);
    if p1 != Some(cli) && p2 != Some(cli) {
        return false;
    }
    let exe = std::fs::read_link(format!("/proc/{peer}/exe")).ok();
    let ours = std::env::current_exe().ok();
    exe.is_some() && exe == ours
}

/// The escaped form of a CLI line that starts with [`MARK`]: the host then
/// sees an ordinary (unparseable, so `raw`) line, never a call.
pub fn escape_cli_line(line: &mut Vec<u8>) {
    if line.first() == Some(&MARK) {
        line.splice(0..1, b"\\u001e".iter().copied());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "echo".into(),
            description: "echo it".into(),
            params: vec!["msg".into()],
        }]
    }

    fn run(msg: Value) -> (Option<Value>, Vec<(String, Value)>) {
        let mut calls = Vec::new();
        let r = handle(&msg, &tools(), &mut |n, a| {
            calls.push((n.to_owned(), a.clone()));
            ("out".into(), false)
        });
        (r, calls)
    }

    #[test]
    fn mcp_lifecycle_and_calls() {
        let (r, _) = run(
            json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}),
        );
        let r = r.unwrap();
        assert_eq!(r["id"], 0);
        assert_eq!(r["result"]["protocolVersion"], "2025-06-18");
        assert!(r["result"]["capabilities"]["tools"].is_object());
        let (r, _) = run(
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2099-01-01"}}),
        );
        assert_eq!(r.unwrap()["result"]["protocolVersion"], "2025-11-25");
        // A notification gets no reply.
        assert!(
            run(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
                .0
                .is_none()
        );
        let (r, _) = run(json!({"jsonrpc":"2.0","id":"a","method":"tools/list"}));
        let t = &r.unwrap()["result"]["tools"][0];
        assert_eq!(t["name"], "echo");
        assert_eq!(t["inputSchema"]["required"], json!(["msg"]));
        let (r, calls) = run(
            json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"other","arguments":{"x":"1"}}}),
        );
        // Unknown names are the host's to refuse: forwarded as they are.
        assert_eq!(calls, vec![("other".to_owned(), json!({"x":"1"}))]);
        assert_eq!(r.unwrap()["result"]["content"][0]["text"], "out");
        let (r, _) = run(json!({"jsonrpc":"2.0","id":3,"method":"nope"}));
        assert_eq!(r.unwrap()["error"]["code"], -32601);
        let (r, calls) = run(json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{}}));
        assert!(calls.is_empty());
        assert_eq!(r.unwrap()["error"]["code"], -32602);
    }

    #[test]
    fn marked_cli_lines_are_escaped() {
        let mut l = b"\x1e{\"id\":1}".to_vec();
        escape_cli_line(&mut l);
        assert_eq!(l, b"\\u001e{\"id\":1}");
        let mut l = b"{\"type\":\"x\"}".to_vec();
        escape_cli_line(&mut l);
        assert_eq!(l, b"{\"type\":\"x\"}");
    }

    #[test]
    fn peer_must_be_the_clis_child() {
        let me = std::process::id() as i32;
        // Parent map: me -> 10 -> 20.
        let parent = |p: i32| match p {
            p if p == me => Some(10),
            10 => Some(20),
            _ => None,
        };
        assert!(is_cli_child(me, 10, parent));
        assert!(is_cli_child(me, 20, parent));
        assert!(!is_cli_child(me, 30, parent));
    }
}
