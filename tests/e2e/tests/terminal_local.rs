//! `sbx-run terminal` against a real sandbox, from a plain WebSocket
//! client speaking ttyd's framing: a non-loopback --listen refused, the
//! one-time token (wrong, absent, second use) and a foreign Origin refused
//! before the upgrade, output and resize through tmux, the recording and
//! its records in `sbx-run log`. One sandbox for every check.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use sbx_e2e::{sbx, text};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message, WebSocket};

/// Long: a loaded 2-core machine, tmux starting in a fresh sandbox.
const WAIT: Duration = Duration::from_secs(60);

/// `sbx-run terminal`, stopped (SIGINT, as Ctrl-C) when dropped.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let _ = self.0.wait();
    }
}

/// One HTTP request on loopback: (status, head, body).
fn http(addr: &str, req: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

fn post_token(addr: &str, token: &str) -> (u16, String, String) {
    let body = format!("{{\"token\":\"{token}\"}}");
    http(
        addr,
        &format!(
            "POST /session HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// Open `/terminal` with these extra headers; the HTTP status it was
/// refused with otherwise.
fn open(addr: &str, headers: &[(&str, &str)]) -> Result<WebSocket<TcpStream>, u16> {
    let mut req = format!("ws://{addr}/terminal")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("sec-websocket-protocol", "tty".parse().unwrap());
    for (k, v) in headers {
        let name = tungstenite::http::HeaderName::from_bytes(k.as_bytes()).unwrap();
        req.headers_mut().insert(name, v.parse().unwrap());
    }
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    match tungstenite::client::client(req, stream) {
        Ok((ws, _)) => Ok(ws),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r))) => {
            Err(r.status().as_u16())
        }
        Err(e) => panic!("handshake: {e}"),
    }
}

/// Read output frames until `want` is in what `0` frames carried.
fn until(ws: &mut WebSocket<TcpStream>, out: &mut String, want: &str) -> bool {
    let end = Instant::now() + WAIT;
    while Instant::now() < end {
        match ws.read() {
            Ok(Message::Binary(b)) if b.first() == Some(&b'0') => {
                out.push_str(&String::from_utf8_lossy(&b[1..]));
                if out.contains(want) {
                    return true;
                }
            }
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("the terminal ended: {e}; output: {out}"),
        }
    }
    false
}

fn send(ws: &mut WebSocket<TcpStream>, kind: u8, body: &[u8]) {
    let mut m = vec![kind];
    m.extend_from_slice(body);
    ws.send(Message::Binary(m.into())).unwrap();
}

/// `curl ARGS` as uid 65534 (another local user): what it printed.
fn curl_as_nobody(args: &[&str]) -> String {
    let o = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "curl"])
        .args(["-s", "-i", "--max-time", "20"])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Routes past the cookie and the Origin check (a42), tried as an
/// attacker would with the session cookie already in hand (a browser
/// sends a 127.0.0.1 cookie to every port of 127.0.0.1: another user's
/// server, the agent's forwarded dev server, collect it).
fn attack_round(addr: &str, cookie: &str) {
    let port = addr.rsplit(':').next().unwrap();
    // Another local user: a loopback port is every uid's to connect to,
    // and the cookie was enough. Now its uid is refused before a byte
    // of the request is read, cookie or not.
    let got = curl_as_nobody(&[&format!("http://{addr}/")]);
    assert!(got.starts_with("HTTP/1.1 403"), "{got}");
    assert!(got.contains("uid 65534"), "{got}");
    let got = curl_as_nobody(&[
        "-H",
        "Connection: Upgrade",
        "-H",
        "Upgrade: websocket",
        "-H",
        "Sec-WebSocket-Version: 13",
        "-H",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "-H",
        "Sec-WebSocket-Protocol: tty",
        "-H",
        &format!("Cookie: {cookie}"),
        &format!("http://{addr}/terminal"),
    ]);
    assert!(
        got.starts_with("HTTP/1.1 403"),
        "another uid upgraded: {got}"
    );

    // DNS rebinding: a page of rebind.example (resolving to 127.0.0.1)
    // is its own origin, so Origin == Host, and its script can set a
    // cookie of this name for itself. The Host must be this listener's.
    let rebound = format!("rebind.example:{port}");
    let origin = format!("http://{rebound}");
    let via = [
        ("host", rebound.as_str()),
        ("origin", origin.as_str()),
        ("cookie", cookie),
    ];
    assert_eq!(open(addr, &via).err(), Some(421), "a rebound name upgraded");
    let (status, _, body) = http(
        addr,
        &format!("GET / HTTP/1.1\r\nHost: {rebound}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 421, "{body}");
    // The listener's own names still serve.
    for host in [addr.to_owned(), format!("localhost:{port}")] {
        let (status, _, body) = http(
            addr,
            &format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(status, 200, "{host}: {body}");
    }

    // A flood: connections that send nothing held every descriptor the
    // process had. Past the cap one more is told so and closed; the
    // held ones are closed by the head timeout, or here by the client.
    let held: Vec<TcpStream> = (0..32).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let mut over = TcpStream::connect(addr).unwrap();
    over.set_read_timeout(Some(WAIT)).unwrap();
    let mut got = String::new();
    let _ = over.read_to_string(&mut got);
    assert!(got.starts_with("HTTP/1.1 503"), "over the cap: {got:?}");
    assert!(got.contains("32 connections are open"), "{got}");
    drop(held);
    // The slots come back.
    let end = Instant::now() + WAIT;
    loop {
        let (status, _, _) = http(
            addr,
            &format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
        );
        if status == 200 {
            break;
        }
        assert!(Instant::now() < end, "no slot came back: {status}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_non_loopback_listen_is_refused() {
    let o = sbx()
        .args(["terminal", "--listen", "0.0.0.0:0", "/nonexistent"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(text(&o).contains("--public"), "{}", text(&o));
}

#[test]
fn the_local_terminal_speaks_ttyd_behind_a_one_time_token() {
    let Some(repo) = sbx_e2e::started(|| sbx_e2e::plain_repo("termlocal")) else {
        return;
    };
    // Its own host log: `sbx-run log` reads this file alone, not every
    // sandbox's log on a machine that has run the whole suite.
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("audit.jsonl");
    let mut child = sbx()
        .env("SBX_AUDIT_LOG", &log)
        .args(["terminal", "--listen", "127.0.0.1:0"])
        .arg(&repo.path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let stderr = child.stderr.take().unwrap();
    let served = Served(child);
    let mut url = String::new();
    stdout.read_line(&mut url).unwrap();
    let rest = url.trim().strip_prefix("http://").expect("a URL");
    let (addr, token) = rest
        .split_once("/#token=")
        .expect("a token in the fragment");
    let (addr, token) = (addr.to_owned(), token.to_owned());
    assert_eq!(token.len(), 64, "{url}");

    // Refused before any upgrade: no session, a wrong token.
    assert_eq!(open(&addr, &[]).err(), Some(401), "no cookie");
    let forged = format!(
        "sbx_terminal_{}={}",
        addr.rsplit(':').next().unwrap(),
        "0".repeat(64)
    );
    assert_eq!(
        open(&addr, &[("cookie", &forged)]).err(),
        Some(401),
        "forged cookie"
    );
    assert_eq!(post_token(&addr, &"f".repeat(64)).0, 401, "wrong token");
    assert_eq!(post_token(&addr, "").0, 401, "empty token");
    // The token buys the cookie once.
    let (status, head, _) = post_token(&addr, &token);
    assert_eq!(status, 204, "{head}");
    let cookie = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("set-cookie: ")
                .or_else(|| l.strip_prefix("Set-Cookie: "))
        })
        .expect("a cookie")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert!(head.to_lowercase().contains("httponly"), "{head}");
    assert_eq!(post_token(&addr, &token).0, 401, "the token's second use");
    // A page of another port of this host would send the cookie too.
    let evil = [
        ("cookie", cookie.as_str()),
        ("origin", "http://127.0.0.1:3000"),
    ];
    assert_eq!(open(&addr, &evil).err(), Some(403), "foreign origin");
    attack_round(&addr, &cookie);
    // The page itself is served, with its policy.
    let (status, head, body) = http(
        &addr,
        &format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 200);
    assert!(body.contains("/terminal.js"), "{body}");
    assert!(
        head.to_lowercase().contains("content-security-policy"),
        "{head}"
    );

    // ttyd's framing: hello, output, resize.
    let own = format!("http://{addr}");
    let mut ws = open(&addr, &[("cookie", &cookie), ("origin", &own)]).expect("the terminal");
    ws.send(Message::Binary(
        br#"{"AuthToken":"","columns":100,"rows":30}"#.to_vec().into(),
    ))
    .unwrap();
    let mut out = String::new();
    send(&mut ws, b'0', b"stty size; echo sbx-$((6*7))-ok\r");
    assert!(until(&mut ws, &mut out, "sbx-42-ok"), "{out}");
    // tmux keeps a row for its status line.
    assert!(out.contains("29 100"), "{out}");
    // The agent writes the clipboard (OSC 52) of whoever replays the
    // recording, through tmux's passthrough and its own clipboard relay.
    send(
        &mut ws,
        b'0',
        b"tmux set -g set-clipboard on; tmux set -g allow-passthrough on; \
          printf '\\033Ptmux;\\033\\033]52;c;c2J4LWNsaXA=\\007\\033\\\\'; \
          printf '\\033]52;c;c2J4LWNsaXA=\\007'; echo sbx-osc-$((6*7))\r",
    );
    assert!(until(&mut ws, &mut out, "sbx-osc-42"), "{out}");
    send(&mut ws, b'1', br#"{"columns":120,"rows":40}"#);
    send(&mut ws, b'0', b"stty size\r");
    assert!(until(&mut ws, &mut out, "39 120"), "{out}");
    let _ = ws.close(None);
    let _ = ws.flush();

    // The session's end reaches the audit log; `sbx-run log` shows both.
    let end = Instant::now() + WAIT;
    let records = loop {
        let o = sbx()
            .args(["--json", "log", "--file"])
            .arg(&log)
            .output()
            .unwrap();
        let mine: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|v| v["data"].clone())
            .filter(|v| {
                v["target"]
                    .as_str()
                    .is_some_and(|t| t.contains("termlocal"))
                    && v["policy"] == "terminal"
            })
            .collect();
        if mine.iter().any(|v| v["operation"] == "terminal end") || Instant::now() > end {
            break mine;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let start = records
        .iter()
        .rev()
        .find(|v| v["operation"] == "terminal start")
        .unwrap_or_else(|| panic!("no terminal start: {records:?}"));
    assert!(
        records.iter().any(|v| v["operation"] == "terminal end"),
        "{records:?}"
    );
    // The recording: asciicast v2 with the echo.
    let reason = start["reason"].as_str().unwrap();
    let cast = reason
        .split("recorded in ")
        .nth(1)
        .expect("the recording's path");
    let cast_text = std::fs::read_to_string(cast).unwrap();
    let header: serde_json::Value =
        serde_json::from_str(cast_text.lines().next().unwrap()).unwrap();
    assert_eq!(header["version"], 2);
    assert!(cast_text.contains("sbx-42-ok"), "{cast_text}");
    // Replayed in the user's terminal, the agent's control strings are
    // text: the OSC 52 is there, defanged, and no ESC ] is.
    let outputs: Vec<String> = cast_text
        .lines()
        .skip(1)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e[1] == "o")
        .filter_map(|e| e[2].as_str().map(str::to_owned))
        .collect();
    assert!(
        outputs.iter().any(|o| o.contains("\u{241b}]52;c;")),
        "the OSC 52 never reached the recording: {outputs:?}"
    );
    assert!(
        !outputs
            .iter()
            .any(|o| o.contains("\x1b]") || o.contains('\u{9d}')),
        "a control string in the recording: {outputs:?}"
    );
    drop(served);
    // The token appears in no log: not the audit log, not stderr.
    let mut err = String::new();
    BufReader::new(stderr).read_to_string(&mut err).unwrap();
    assert!(!err.contains(&token), "{err}");
    assert!(!std::fs::read_to_string(&log).unwrap().contains(&token));
}
