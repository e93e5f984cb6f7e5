//! The web terminal (issue 42): `GET /terminal/{project_id}` upgraded to a
//! WebSocket that speaks ttyd's protocol, bridged to a PTY the guest API
//! opens in the project's sandbox running `tmux new-session -A -s main` as
//! the agent. Every viewer is its own tmux client of the one session, so a
//! reconnect or a second tab reattaches it and the agent keeps working when
//! the browser closes; tmux also does what a slow viewer needs (it drops
//! that client's output and redraws it once it catches up), so the bridge
//! only has to keep its own queue bounded and wait.
//!
//! ttyd's framing: subprotocol `tty`; the client's first message is JSON
//! `{"AuthToken", "columns", "rows"}`, then `0`+input, `1`+resize JSON,
//! `2` pause, `3` resume; the server sends `0`+output, `1`+title,
//! `2`+preferences JSON, as binary messages.
//!
//! This crate is that bridge, the recorder and the page's embedded files,
//! shared by `sbx-server` (one terminal per project, behind its JWT) and
//! `sbx-run terminal` (the local sandbox, behind a one-time token). The
//! bridge reads and writes a [`Pty`]: the guest API's socket on this host,
//! or what sbx-server's Kubernetes backend connects (the API server's
//! exec of the guest's own client, `sbx-guest exec --tty`).
#![forbid(unsafe_code)]

pub mod conn;
pub mod web;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{LineWriter, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use axum::http::{HeaderMap, header};
use sbx_core::guestapi::{self as proto, Control, ExecReq, Kind, User, Winsize};
use serde::Deserialize;
use tokio::sync::mpsc;

/// Largest message a viewer may send (a paste): over it the socket closes.
pub const MAX_MESSAGE: usize = 64 * 1024;
/// Largest terminal a resize may ask for; bigger is clamped to it.
pub const MAX_COLS: u16 = 1000;
pub const MAX_ROWS: u16 = 500;
/// Output chunks queued for one viewer; when full, the bridge stops
/// reading the guest (whose buffer is bounded too) and tmux drops that
/// client's output until it catches up, then redraws it.
pub const QUEUE: usize = 32;
/// A viewer that takes no output for this long is closed (the accept
/// loop's bound on any stalled write).
/// (The accept loop's bound on any stalled write, in sbx-server.)
pub const SEND_STALL: Duration = Duration::from_secs(30);
/// How long the client has for its first (size) message.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Viewers of one project at once (each is a tmux client, two threads).
pub const MAX_VIEWERS: usize = 8;
/// A recording stops growing here (its last event says so).
pub const MAX_RECORDING: u64 = 64 << 20;
/// What every viewer attaches to.
pub const TMUX: [&str; 5] = ["tmux", "new-session", "-A", "-s", "main"];

/// Close codes (RFC 6455): normal, policy violation, too big, server error.
pub const NORMAL: u16 = 1000;
pub const POLICY: u16 = 1008;
pub const TOO_BIG: u16 = 1009;
pub const ERROR: u16 = 1011;

/// Does the upgrade offer ttyd's subprotocol `tty`?
pub fn offers_tty(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == "tty")
}

/// Viewers per sandbox, bounded by [`MAX_VIEWERS`]; released on drop.
static VIEWERS: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

/// One viewer's place among its sandbox's [`MAX_VIEWERS`].
#[derive(Debug)]
pub struct Viewer(String);

impl Viewer {
    /// A place among `key`'s viewers, or None when they are all taken.
    pub fn take(key: &str) -> Option<Self> {
        let mut v = VIEWERS.lock().unwrap_or_else(|e| e.into_inner());
        let n = v.entry(key.to_owned()).or_default();
        if *n >= MAX_VIEWERS {
            return None;
        }
        *n += 1;
        Some(Self(key.to_owned()))
    }
}
impl Drop for Viewer {
    fn drop(&mut self) {
        let mut v = VIEWERS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = v.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                v.remove(&self.0);
            }
        }
    }
}

/// A size from a client, clamped; None for a zero dimension (ignored).
pub fn clamp_size(columns: u64, rows: u64) -> Option<Winsize> {
    if columns == 0 || rows == 0 {
        return None;
    }
    Some(Winsize {
        cols: columns.min(u64::from(MAX_COLS)) as u16,
        rows: rows.min(u64::from(MAX_ROWS)) as u16,
    })
}

#[derive(Debug, Deserialize)]
struct Size {
    columns: u64,
    rows: u64,
}

/// The client's first message. `AuthToken` is ttyd's own credential; the
/// access token was checked before the upgrade, so it is not needed here.
#[derive(Debug, Deserialize)]
struct Hello {
    #[serde(rename = "AuthToken")]
    _auth_token: Option<String>,
    columns: u64,
    rows: u64,
}

/// What a terminal's PTY hands the viewer's socket.
#[derive(Debug)]
pub enum Out {
    Data(Vec<u8>),
    /// The session is over: a message for the viewer, and a close code.
    End(String, u16),
}

/// What the viewer's socket hands the PTY.
#[derive(Debug)]
pub enum In {
    Data(Vec<u8>),
    Resize(Winsize),
}

/// A connected terminal, whatever carries it: the guest API's socket on
/// this host (Docker) or the API server's exec (Kubernetes). Output
/// comes on a queue of [`QUEUE`] chunks: when it is full the carrier
/// stops reading, so a slow viewer holds no more than that. Dropped, it
/// hangs up (the guest then ends this tmux client).
pub struct Pty {
    pub output: mpsc::Receiver<Out>,
    pub input: mpsc::Sender<In>,
    hangup: Option<Box<dyn FnOnce() + Send>>,
}

impl Pty {
    /// The queues a carrier feeds: (its output sender, its input
    /// receiver, the PTY); `hangup` ends the carrier's connection.
    pub fn new(
        hangup: impl FnOnce() + Send + 'static,
    ) -> (mpsc::Sender<Out>, mpsc::Receiver<In>, Self) {
        let (out_tx, output) = mpsc::channel::<Out>(QUEUE);
        let (input, in_rx) = mpsc::channel::<In>(QUEUE);
        let pty = Self {
            output,
            input,
            hangup: Some(Box::new(hangup)),
        };
        (out_tx, in_rx, pty)
    }

    /// The guest API's exec on `client`, its reply read: a thread reads
    /// its output, another writes input and resizes.
    pub fn guest(client: proto::Client<UnixStream>) -> std::io::Result<Self> {
        let writer = client.stream.try_clone()?;
        let shut = client.stream.try_clone()?;
        let (out_tx, in_rx, pty) = Self::new(move || {
            let _ = shut.shutdown(std::net::Shutdown::Both);
        });
        std::thread::spawn(move || read_guest(client, &out_tx));
        std::thread::spawn(move || write_guest(writer, in_rx));
        Ok(pty)
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        if let Some(h) = self.hangup.take() {
            h();
        }
    }
}

impl std::fmt::Debug for Pty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pty")
    }
}

/// Where a viewer's terminal is.
#[derive(Debug)]
pub enum Target {
    /// The guest API's socket on this host and the agent's working
    /// directory: opened after the viewer's hello, at its size.
    Guest { socket: PathBuf, workdir: String },
    /// Connected already (opened before the upgrade, so that a refusal
    /// is the HTTP answer): resized to the hello's size.
    Connected(Pty),
}

/// Close with `code` and a reason (cut to fit a close frame).
pub async fn close(sock: &mut WebSocket, code: u16, reason: &str) {
    // A close reason is at most 123 bytes.
    let mut r: String = reason.chars().take(100).collect();
    r.truncate(120);
    let _ = sock
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: r.into(),
        })))
        .await;
}

pub fn output(data: &[u8]) -> Message {
    let mut m = Vec::with_capacity(data.len() + 1);
    m.push(b'0');
    m.extend_from_slice(data);
    Message::Binary(m.into())
}

/// A line for the viewer to read, in bold, as output.
pub fn notice(text: &str) -> Message {
    output(format!("\r\n\x1b[1m[sbx: {text}]\x1b[0m\r\n").as_bytes())
}

/// The first message: ttyd's JSON hello, within [`HELLO_TIMEOUT`].
async fn hello(sock: &mut WebSocket) -> Result<Winsize, (u16, String)> {
    let m = match tokio::time::timeout(HELLO_TIMEOUT, sock.recv()).await {
        Err(_) => {
            return Err((
                POLICY,
                format!(
                    "no size message in {} s (ttyd's protocol)",
                    HELLO_TIMEOUT.as_secs()
                ),
            ));
        }
        Ok(Some(Ok(m))) => m,
        Ok(_) => return Err((NORMAL, String::new())),
    };
    let data = match m {
        Message::Text(t) => t.as_str().as_bytes().to_vec(),
        Message::Binary(b) => b.to_vec(),
        _ => return Err((POLICY, "the first message must be ttyd's JSON hello".into())),
    };
    let h: Hello = serde_json::from_slice(&data).map_err(|e| {
        (
            POLICY,
            format!("the first message is not ttyd's JSON hello: {e}"),
        )
    })?;
    Ok(clamp_size(h.columns, h.rows).unwrap_or(Winsize { cols: 80, rows: 24 }))
}

/// Read the viewer's hello and open its terminal at `target`; None when
/// that failed (the viewer was told, its socket closed).
pub async fn attach(sock: &mut WebSocket, target: Target) -> Option<(Pty, Winsize)> {
    let size = match hello(sock).await {
        Ok(s) => s,
        Err((code, why)) => {
            close(sock, code, &why).await;
            return None;
        }
    };
    let (socket, workdir) = match target {
        Target::Connected(pty) => {
            if pty.input.send(In::Resize(size)).await.is_err() {
                let msg = "the sandbox's terminal ended before it started";
                let _ = sock.send(notice(msg)).await;
                close(sock, ERROR, msg).await;
                return None;
            }
            return Some((pty, size));
        }
        Target::Guest { socket, workdir } => (socket, workdir),
    };
    let opened = tokio::task::spawn_blocking(move || {
        open_guest(&socket, &workdir, size)
            .and_then(|c| Pty::guest(c).map_err(|e| format!("the guest API socket: {e}")))
    })
    .await;
    match opened {
        Ok(Ok(c)) => Some((c, size)),
        Ok(Err(e)) => {
            let msg = format!("the sandbox's terminal could not start: {e}");
            let _ = sock.send(notice(&msg)).await;
            close(sock, ERROR, &msg).await;
            None
        }
        Err(e) => {
            close(sock, ERROR, &format!("worker failed: {e}")).await;
            None
        }
    }
}

/// Open the PTY: tmux as the agent, in the workspace, ended (the tmux
/// client only: its server lives on) when this connection closes.
fn open_guest(
    socket: &Path,
    workdir: &str,
    size: Winsize,
) -> Result<proto::Client<UnixStream>, String> {
    let mut env = BTreeMap::new();
    env.insert("TERM".to_owned(), "xterm-256color".to_owned());
    env.insert("COLORTERM".to_owned(), "truecolor".to_owned());
    let req = ExecReq {
        argv: TMUX.iter().map(|s| (*s).to_owned()).collect(),
        env,
        cwd: Some(workdir.to_owned()),
        user: User::Agent,
        tty: Some(size),
        timeout_ms: None,
        hangup: true,
    };
    let mut c = proto::connect_timeout(socket, Duration::from_secs(5))
        .map_err(|e| format!("no guest API at {}: {e}", socket.display()))?;
    c.send(&proto::Request::Exec(req))
        .map_err(|e| e.to_string())?;
    match c.frame() {
        Ok((Kind::Reply, _)) => Ok(c),
        Ok((k, _)) => Err(format!("the guest answered {k:?} to the terminal's exec")),
        Err(e) => Err(e.to_string()),
    }
}
/// Bridge one viewer to its terminal until either side ends, or `end`
/// gives a reason (an expired or logged-out token): why it ended. The
/// terminal hangs up when this returns.
pub async fn bridge(
    sock: &mut WebSocket,
    mut pty: Pty,
    title: &str,
    end: impl std::future::Future<Output = String>,
    rec: Option<Arc<Recorder>>,
) -> String {
    let event = |kind: &'static str, d: &[u8]| {
        if let Some(r) = &rec {
            r.event(kind, d);
        }
    };
    let in_tx = pty.input.clone();
    let mut hello = vec![b'1'];
    hello.extend_from_slice(title.as_bytes());
    let _ = sock.send(Message::Binary(hello.into())).await;
    let _ = sock.send(Message::Binary(b"2{}".to_vec().into())).await;
    let mut paused = false;
    tokio::pin!(end);
    let why = loop {
        tokio::select! {
            why = &mut end => {
                let _ = tokio::time::timeout(SEND_STALL, sock.send(notice(&why))).await;
                close(sock, POLICY, &why).await;
                break why;
            }
            m = sock.recv() => {
                let data = match m {
                    None | Some(Ok(Message::Close(_))) => break "the viewer closed".to_owned(),
                    Some(Err(e)) => {
                        let too_big = e.to_string().contains("too long") || e.to_string().contains("too big");
                        if too_big {
                            close(sock, TOO_BIG, &format!("a message is over {MAX_MESSAGE} bytes")).await;
                        }
                        break format!("the viewer's socket failed: {e}");
                    }
                    Some(Ok(Message::Binary(b))) => b.to_vec(),
                    Some(Ok(Message::Text(t))) => t.as_str().as_bytes().to_vec(),
                    Some(Ok(_)) => continue,
                };
                let sent = match data.first() {
                    Some(b'0') => {
                        event("i", &data[1..]);
                        in_tx.send(In::Data(data[1..].to_vec())).await.is_ok()
                    }
                    Some(b'1') => match serde_json::from_slice::<Size>(&data[1..]) {
                        Ok(s) => match clamp_size(s.columns, s.rows) {
                            Some(w) => {
                                event("r", format!("{}x{}", w.cols, w.rows).as_bytes());
                                in_tx.send(In::Resize(w)).await.is_ok()
                            }
                            None => true,
                        },
                        Err(e) => {
                            let why = format!("a resize is not {{\"columns\",\"rows\"}}: {e}");
                            close(sock, POLICY, &why).await;
                            break why;
                        }
                    },
                    Some(b'2') => { paused = true; true }
                    Some(b'3') => { paused = false; true }
                    other => {
                        let why = format!(
                            "not ttyd's protocol: a message starting with {:?}",
                            other.map(|b| char::from(*b))
                        );
                        close(sock, POLICY, &why).await;
                        break why;
                    }
                };
                if !sent {
                    break "the guest stopped taking input".to_owned();
                }
            }
            o = pty.output.recv(), if !paused => match o {
                Some(Out::Data(d)) => {
                    event("o", &d);
                    match tokio::time::timeout(SEND_STALL, sock.send(output(&d))).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => break format!("the viewer's socket failed: {e}"),
                        Err(_) => {
                            break format!("the viewer took no output for {} s", SEND_STALL.as_secs())
                        }
                    }
                }
                Some(Out::End(msg, code)) => {
                    let _ = tokio::time::timeout(SEND_STALL, sock.send(notice(&msg))).await;
                    close(sock, code, &msg).await;
                    break msg;
                }
                None => break "the guest connection ended".to_owned(),
            },
        }
    };
    // Unblocks the reader; the guest then ends this tmux client (hangup).
    drop(pty);
    why
}

/// The guest's output to the viewer's queue, until the exec ends.
fn read_guest(mut client: proto::Client<UnixStream>, tx: &mpsc::Sender<Out>) {
    let end = loop {
        match client.frame() {
            Ok((Kind::Stdout | Kind::Stderr, d)) => {
                // Blocks while the viewer is behind: bounded memory.
                if tx.blocking_send(Out::Data(d)).is_err() {
                    return;
                }
            }
            Ok((Kind::Exit, p)) => {
                let status = proto::parse::<proto::ExitMsg>("exit", &p)
                    .map(|x| x.status)
                    .unwrap_or(-1);
                break if status == 0 {
                    Out::End(
                        "the terminal session ended: reconnect to start a new one".into(),
                        NORMAL,
                    )
                } else {
                    Out::End(
                        format!("the terminal ended with status {status}: reconnect to try again"),
                        ERROR,
                    )
                };
            }
            Ok((k, _)) => {
                break Out::End(format!("the guest sent an unexpected {k:?} frame"), ERROR);
            }
            Err(e) => {
                break Out::End(
                    format!("the sandbox went away ({e}): reconnect once the project runs again"),
                    ERROR,
                );
            }
        }
    };
    let _ = tx.blocking_send(end);
}

/// The viewer's input and resizes to the guest.
fn write_guest(mut w: UnixStream, mut rx: mpsc::Receiver<In>) {
    while let Some(m) = rx.blocking_recv() {
        let sent = match m {
            In::Data(d) => proto::write_frame(&mut w, Kind::Stdin, &d),
            In::Resize(s) => proto::write_json(&mut w, Kind::Control, &Control::Resize(s)),
        };
        if sent.is_err() {
            return;
        }
    }
}

/// One session's asciicast v2 file: a header naming the user, then one
/// `[seconds, "o"|"i"|"r", text]` line per event, written as it happens.
pub struct Recorder {
    start: Instant,
    inner: Mutex<Rec>,
}

struct Rec {
    file: LineWriter<File>,
    written: u64,
    /// The incomplete UTF-8 tail of each stream's last chunk.
    carry: BTreeMap<&'static str, Vec<u8>>,
    /// The output's last chunk ended with an ESC (held for [`defang`]).
    esc: bool,
    full: bool,
}

/// Output for a recording, with every control string (OSC, DCS, SOS,
/// PM, APC: `ESC ]`, `ESC P`, `ESC X`, `ESC ^`, `ESC _`, and their C1
/// forms) made visible text: `␛]52;c;…` rather than the sequence.
/// A recording is replayed in the user's own terminal (`asciinema play`),
/// where the agent's OSC 52 wrote the clipboard, OSC 8 made links of its
/// choosing, OSC 0 set the title, and DCS strings drove the terminal.
/// Kept, not dropped, so the agent cannot hide output from the record
/// behind an unterminated string. CSI (colours, cursor) is left as it is.
/// `esc`: an ESC ended the previous chunk (held back, decided here).
pub fn defang(text: &str, esc: &mut bool) -> String {
    let mut out = String::with_capacity(text.len() + 4);
    for c in text.chars() {
        if std::mem::take(esc) {
            match c {
                ']' | 'P' | 'X' | '^' | '_' => out.push('\u{241b}'),
                '\x1b' => {
                    out.push('\x1b');
                    *esc = true;
                    continue;
                }
                _ => out.push('\x1b'),
            }
            out.push(c);
            continue;
        }
        match c {
            '\x1b' => *esc = true,
            '\u{90}' => out.push_str("\u{241b}P"),
            '\u{98}' => out.push_str("\u{241b}X"),
            '\u{9d}' => out.push_str("\u{241b}]"),
            '\u{9e}' => out.push_str("\u{241b}^"),
            '\u{9f}' => out.push_str("\u{241b}_"),
            c => out.push(c),
        }
    }
    out
}

impl Recorder {
    /// `dir/<session>.cast`, created new (0600, in a 0700 directory);
    /// `meta` is the header's `sbx` member (who, which sandbox).
    pub fn create(
        dir: &Path,
        session: &str,
        meta: serde_json::Value,
        size: Winsize,
    ) -> std::io::Result<Self> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let path = dir.join(format!("{session}.cast"));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let header = serde_json::json!({
            "version": 2,
            "width": size.cols,
            "height": size.rows,
            "timestamp": now,
            "env": {"TERM": "xterm-256color"},
            "title": format!("sbx terminal session {session}"),
            "sbx": meta,
        });
        let mut file = LineWriter::new(file);
        let mut line = serde_json::to_vec(&header).map_err(std::io::Error::other)?;
        line.push(b'\n');
        file.write_all(&line)?;
        Ok(Self {
            start: Instant::now(),
            inner: Mutex::new(Rec {
                file,
                written: line.len() as u64,
                carry: BTreeMap::new(),
                esc: false,
                full: false,
            }),
        })
    }

    /// One event; a UTF-8 sequence split across chunks waits for its end.
    pub fn event(&self, kind: &'static str, data: &[u8]) {
        let t = self.start.elapsed().as_secs_f64();
        let mut r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if r.full {
            return;
        }
        let mut bytes = r.carry.remove(kind).unwrap_or_default();
        bytes.extend_from_slice(data);
        let keep = incomplete_tail(&bytes);
        let tail = bytes.split_off(bytes.len() - keep);
        if !tail.is_empty() {
            r.carry.insert(kind, tail);
        }
        if bytes.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&bytes);
        let text = if kind == "o" {
            let mut esc = r.esc;
            let t = defang(&text, &mut esc);
            r.esc = esc;
            std::borrow::Cow::Owned(t)
        } else {
            text
        };
        if text.is_empty() {
            return;
        }
        let mut line = serde_json::to_vec(&serde_json::json!([t, kind, text])).unwrap_or_default();
        line.push(b'\n');
        if r.written + line.len() as u64 > MAX_RECORDING {
            r.full = true;
            let note = serde_json::json!([
                t,
                "m",
                format!("recording stopped at {MAX_RECORDING} bytes")
            ]);
            let _ = writeln!(r.file, "{note}");
            return;
        }
        r.written += line.len() as u64;
        if r.file.write_all(&line).is_err() {
            r.full = true;
        }
    }

    /// The closing event: why the session ended.
    pub fn end(&self, why: &str) {
        let t = self.start.elapsed().as_secs_f64();
        let mut r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(
            r.file,
            "{}",
            serde_json::json!([t, "m", format!("session ended: {why}")])
        );
        let _ = r.file.flush();
    }
}

/// How many bytes at the end of `b` begin a UTF-8 sequence not yet
/// complete (0 when it ends cleanly or with bytes that can never be valid).
fn incomplete_tail(b: &[u8]) -> usize {
    match std::str::from_utf8(b) {
        Ok(_) => 0,
        Err(e) if e.error_len().is_none() => b.len() - e.valid_up_to(),
        Err(_) => {
            // Invalid earlier: only a trailing partial sequence is kept.
            let start = b.len().saturating_sub(3);
            (start..b.len())
                .find(|&i| {
                    b[i] >= 0xC0
                        && std::str::from_utf8(&b[i..]).is_err_and(|e| e.error_len().is_none())
                })
                .map_or(0, |i| b.len() - i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_clamped_and_zero_is_ignored() {
        assert_eq!(clamp_size(0, 0), None);
        assert_eq!(clamp_size(80, 0), None);
        assert_eq!(
            clamp_size(100_000, 24),
            Some(Winsize {
                cols: MAX_COLS,
                rows: 24
            })
        );
        assert_eq!(
            clamp_size(u64::MAX, u64::MAX),
            Some(Winsize {
                cols: MAX_COLS,
                rows: MAX_ROWS
            })
        );
    }

    #[test]
    fn a_split_utf8_sequence_waits_for_its_end() {
        let e = "é".as_bytes();
        assert_eq!(incomplete_tail(&[b'a', e[0]]), 1);
        assert_eq!(incomplete_tail(b"abc"), 0);
        assert_eq!(incomplete_tail(&[0xff, b'a']), 0);
    }

    #[test]
    fn control_strings_are_recorded_as_text() {
        let mut esc = false;
        assert_eq!(
            defang("a\x1b]52;c;eA==\x07b\x1b[1mc", &mut esc),
            "a\u{241b}]52;c;eA==\x07b\x1b[1mc"
        );
        assert_eq!(
            defang("\u{9d}8;;x\x1bPq\x1b", &mut esc),
            "\u{241b}]8;;x\u{241b}Pq"
        );
        assert!(esc, "an ESC at a chunk's end waits for the next");
        assert_eq!(defang("_z\x1b", &mut esc), "\u{241b}_z");
        assert_eq!(defang("[2J", &mut esc), "\x1b[2J");
        assert!(!esc);
    }

    #[test]
    fn the_tty_subprotocol_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            "bearer.abc, tty".parse().unwrap(),
        );
        assert!(offers_tty(&h));
        assert!(!offers_tty(&HeaderMap::new()));
    }
}
