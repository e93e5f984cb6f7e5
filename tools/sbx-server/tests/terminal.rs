//! The web terminal against a real Postgres and a real Docker sandbox,
//! from a plain WebSocket client speaking ttyd's framing: output, resize,
//! a second viewer and a reconnect on the same tmux session, the
//! recording and its listing, refusals before the upgrade, bad frames,
//! and the sandbox dying mid-session.
//! Run with SBX_BASE_TAG and SBX_BIN_DIR set (scripts/test does).

mod common;

use std::process::Command;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Long: a loaded 2-core machine, tmux starting in a fresh sandbox.
const WAIT: Duration = Duration::from_secs(60);

/// How much the server's RSS may grow while one viewer that never reads
/// watches a 50 MB flood: its queue (32 chunks) and socket buffers, with
/// room for the allocator; an unbounded queue would hold the flood.
const FLOOD_CAP: u64 = 32 << 20;

/// One viewer: everything its `0` frames carried, its `1`/`2` frames,
/// and how the server closed it.
struct Term {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    out: String,
    control: Vec<Vec<u8>>,
    closed: Option<Option<CloseFrame>>,
}

/// `GET /terminal/{id}` with `token` as ttyd's client opens it (with the
/// `tty` subprotocol), or the HTTP status it was refused with.
async fn open(base: &str, id: &str, token: &str) -> Result<Term, u16> {
    let url = format!(
        "{}/terminal/{id}?token={token}",
        base.replacen("http://", "ws://", 1)
    );
    let mut req = url.into_client_request().unwrap();
    req.headers_mut()
        .insert("sec-websocket-protocol", "tty".parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, resp)) => {
            assert_eq!(
                resp.headers()
                    .get("sec-websocket-protocol")
                    .map(|v| v.to_str().unwrap()),
                Some("tty")
            );
            Ok(Term {
                ws,
                out: String::new(),
                control: Vec::new(),
                closed: None,
            })
        }
        Err(WsError::Http(r)) => Err(r.status().as_u16()),
        Err(e) => panic!("connecting: {e}"),
    }
}

impl Term {
    async fn send(&mut self, bytes: &[u8]) {
        self.ws
            .send(Message::Binary(bytes.to_vec().into()))
            .await
            .unwrap();
    }

    /// ttyd's first message.
    async fn hello(&mut self, columns: u32, rows: u32) {
        let h = json!({"AuthToken": "", "columns": columns, "rows": rows});
        self.send(h.to_string().as_bytes()).await;
    }

    async fn input(&mut self, text: &str) {
        self.send(format!("0{text}").as_bytes()).await;
    }

    async fn resize(&mut self, columns: u32, rows: u32) {
        let r = json!({"columns": columns, "rows": rows});
        self.send(format!("1{r}").as_bytes()).await;
    }

    /// Read until the output holds `needle`; false at the close or after
    /// [`WAIT`].
    async fn until(&mut self, needle: &str) -> bool {
        self.within(needle, WAIT).await
    }

    /// `stty size` in the pane says `size` (tmux applies a resize after a
    /// short delay: asked again until it does).
    async fn size_is(&mut self, size: &str) -> bool {
        for i in 0..20 {
            let tag = uuid::Uuid::new_v4().simple().to_string();
            self.input(&format!("stty size; echo {i}-{tag}\r")).await;
            if self
                .within(&format!("{size}\r\n{i}-{tag}"), WAIT / 20)
                .await
            {
                return true;
            }
        }
        false
    }

    async fn within(&mut self, needle: &str, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        while !self.out.contains(needle) {
            if self.closed.is_some() {
                return false;
            }
            let m = match tokio::time::timeout_at(deadline, self.ws.next()).await {
                Err(_) => return false,
                Ok(m) => m,
            };
            match m {
                Some(Ok(Message::Binary(b))) => match b.first() {
                    Some(b'0') => self.out.push_str(&String::from_utf8_lossy(&b[1..])),
                    Some(_) => self.control.push(b.to_vec()),
                    None => panic!("an empty message"),
                },
                Some(Ok(Message::Close(f))) => self.closed = Some(f),
                Some(Ok(Message::Text(t))) => panic!("ttyd's server sends binary, got text {t}"),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => self.closed = Some(None),
            }
        }
        true
    }

    /// Read to the close; its code (0 when the connection just ended).
    async fn close_code(&mut self) -> u16 {
        let _ = self.until("\u{0}never\u{0}").await;
        match &self.closed {
            None => panic!("not closed in {WAIT:?}"),
            Some(f) => f.as_ref().map_or(0, |f| f.code.into()),
        }
    }
}

fn psql(db: &str, sql: &str) -> String {
    let out = Command::new(common::cluster().pg.bin().join("psql"))
        .args(["-At", "-d", db, "-c", sql])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", sbx_e2e::text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// An access token for the user `token` names, signed as the server
/// signs, expiring in `secs`.
fn expiring(token: &str, secs: u64) -> String {
    use base64::Engine;
    let payload = token.split('.').nth(1).unwrap();
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"sub": claims["sub"], "sid": claims["sid"], "iat": now, "exp": now + secs}),
        &jsonwebtoken::EncodingKey::from_secret(common::SECRET.as_bytes()),
    )
    .unwrap()
}

#[test]
fn the_terminal_speaks_ttyd_and_keeps_one_tmux_session() {
    if !(sbx_e2e::prerequisite(sbx_e2e::is_root(), "root (workspaces go to uid 1000)")
        && sbx_e2e::base_image())
    {
        return;
    }
    let s = common::start_with_docker(&[]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (alice_email, alice_pw) = s.user();
    let (alice, _) = s.tokens(&alice_email, &alice_pw);
    let (bob, _) = s.session();
    let mut cleanup = common::Cleanup(Vec::new());
    let mut project = |name: &str| {
        let r = s.call(
            "POST",
            "/projects",
            Some(&alice),
            Some(json!({"name": name})),
        );
        assert_eq!(r.status, 201, "{r:?}");
        let id = r.body["id"].as_str().unwrap().to_owned();
        cleanup.0.push(common::workspace(&s, &id));
        id
    };
    let id = project("term");
    let idle = project("idle");
    let r = s.call("POST", &format!("/projects/{id}/start"), Some(&alice), None);
    assert_eq!(r.status, 200, "{r:?}\n{}", s.stderr.lock().unwrap());
    let container = r.body["container"].as_str().unwrap().to_owned();
    let base = s.base.clone();
    let nonce = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();

    rt.block_on(async {
        // Refused before the upgrade: another user's project, a bad token,
        // a stopped project.
        assert_eq!(open(&base, &id, &bob).await.err(), Some(404), "bob");
        assert_eq!(open(&base, &id, "not.a.jwt").await.err(), Some(401));
        let forged = format!("{}x", &alice[..alice.len() - 1]);
        assert_eq!(open(&base, &id, &forged).await.err(), Some(401));
        assert_eq!(open(&base, &idle, &alice).await.err(), Some(409));

        // Output: a shell in tmux runs what is typed.
        let mut t1 = open(&base, &id, &alice).await.expect("alice's terminal");
        t1.hello(80, 24).await;
        t1.input(&format!("echo sbx-$RANDOM-$((6*7))-{nonce}\r"))
            .await;
        assert!(
            t1.until(&format!("-42-{nonce}")).await,
            "no echo: {}",
            t1.out
        );
        assert!(
            t1.control.iter().any(|c| c.starts_with(b"1"))
                && t1.control.iter().any(|c| c == b"2{}"),
            "no title and preferences: {:?}",
            t1.control
        );

        // Resize: the pane follows (tmux keeps a row for its status line);
        // 0x0 is ignored, 100000 columns clamped.
        t1.resize(100, 30).await;
        t1.resize(0, 0).await;
        assert!(t1.size_is("29 100").await, "{}", t1.out);
        t1.resize(100_000, 30).await;
        assert!(t1.size_is("29 1000").await, "{}", t1.out);
        t1.resize(100, 30).await;

        // A second viewer sees the same session.
        let mut t2 = open(&base, &id, &alice).await.expect("a second viewer");
        t2.hello(100, 30).await;
        t1.input(&format!(
            "export MARK=m{nonce}; echo two-$((2+3))-{nonce}\r"
        ))
        .await;
        assert!(t2.until(&format!("two-5-{nonce}")).await, "{}", t2.out);

        // Both gone, a reconnect finds the same shell.
        t1.ws.close(None).await.unwrap();
        t2.ws.close(None).await.unwrap();
        drop((t1, t2));
        let mut t3 = open(&base, &id, &alice).await.expect("a reconnect");
        t3.hello(100, 30).await;
        t3.input("echo again-$MARK\r").await;
        assert!(t3.until(&format!("again-m{nonce}")).await, "{}", t3.out);

        // Bad frames: not the protocol, over the size cap. Each closes
        // that viewer only.
        let mut bad = open(&base, &id, &alice).await.unwrap();
        bad.hello(80, 24).await;
        bad.send(b"xyz").await;
        assert_eq!(bad.close_code().await, 1008, "{:?}", bad.closed);
        let mut big = open(&base, &id, &alice).await.unwrap();
        big.hello(80, 24).await;
        let _ = big
            .ws
            .send(Message::Binary(vec![b'0'; 200 * 1024].into()))
            .await;
        assert!(
            matches!(big.close_code().await, 1009 | 0),
            "{:?}",
            big.closed
        );
        let mut hello_less = open(&base, &id, &alice).await.unwrap();
        hello_less.send(b"0echo no hello\r").await;
        assert_eq!(hello_less.close_code().await, 1008);
        t3.input(&format!("echo alive-{nonce}\r")).await;
        assert!(t3.until(&format!("alive-{nonce}")).await, "{}", t3.out);
        t3.ws.close(None).await.unwrap();
    });

    // Route (issue 41, a41): a logout left the session's access token
    // working up to 15 minutes, so an attached terminal went on. A second
    // session of Alice's attaches; at its logout its terminal closes and
    // cannot reopen, while her first session's goes on.
    let (second, refresh) = s.tokens(&alice_email, &alice_pw);
    let mut tc = rt
        .block_on(open(&base, &id, &second))
        .expect("the second session's terminal");
    rt.block_on(async {
        tc.hello(80, 24).await;
        tc.input(&format!("echo second-$((5*5))-{nonce}\r")).await;
        assert!(tc.until(&format!("second-25-{nonce}")).await, "{}", tc.out);
    });
    let r = s.call(
        "POST",
        "/auth/logout",
        Some(&second),
        Some(json!({"refresh_token": refresh})),
    );
    assert_eq!(r.status, 204, "{r:?}");
    rt.block_on(async {
        assert_eq!(tc.close_code().await, 1008, "{:?}", tc.closed);
        assert_eq!(open(&base, &id, &second).await.err(), Some(401));
        let mut t = open(&base, &id, &alice).await.expect("the first session");
        t.hello(80, 24).await;
        t.ws.close(None).await.unwrap();
    });

    // Recorded: one row per session, an asciicast v2 file each naming
    // the user, with the input and output; audit records; the connection
    // time. Another user's listing is a 404.
    let r = s.call("GET", &format!("/projects/{id}/sessions"), Some(&bob), None);
    assert_eq!(r.status, 404, "{r:?}");
    let sessions = (0..30)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(500));
            s.call(
                "GET",
                &format!("/projects/{id}/sessions"),
                Some(&alice),
                None,
            )
        })
        .find(|r| {
            r.body
                .as_array()
                .is_some_and(|a| a.len() >= 5 && a.iter().all(|x| x["ended_at"].is_string()))
        })
        .expect("five ended sessions");
    let first = &sessions.body[0];
    let cast = s
        .state
        .join("projects")
        .join(&id)
        .join("sessions")
        .join(format!("{}.cast", first["id"].as_str().unwrap()));
    let text = std::fs::read_to_string(&cast).unwrap();
    let mut lines = text.lines();
    let header: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["version"], 2);
    assert_eq!(header["sbx"]["user_id"], first["user_id"]);
    let events: Vec<serde_json::Value> = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
    let has = |kind: &str, needle: &str| {
        events
            .iter()
            .any(|e| e[1] == kind && e[2].as_str().is_some_and(|t| t.contains(needle)))
    };
    assert!(has("i", "echo sbx-$RANDOM"), "no input event: {text}");
    assert!(has("o", &format!("-42-{nonce}")), "no output event: {text}");
    let audit = std::fs::read_to_string(s.audit_log()).unwrap();
    for op in ["terminal start", "terminal end"] {
        assert!(audit.contains(op), "no {op} record: {audit}");
    }
    assert_eq!(
        psql(
            &s.db,
            &format!("SELECT last_connection_at IS NOT NULL FROM projects WHERE id = '{id}'")
        ),
        "t"
    );

    // A viewer that never reads while the session prints 50 MB (67 MB of
    // base64): the server's RSS, sampled throughout, stays within
    // FLOOD_CAP of where it was (docs/server.md states the cap).
    let rss = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
        let kb = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap();
        kb * 1024
    };
    let done = common::workspace(&s, &id).join(format!("flood-{nonce}"));
    let (before, peak) = rt.block_on(async {
        let mut slow = open(&base, &id, &alice).await.unwrap();
        slow.hello(80, 24).await;
        let before = rss();
        slow.input(&format!(
            "head -c 50M /dev/urandom | base64; touch flood-{nonce}\r"
        ))
        .await;
        let mut peak = before;
        let deadline = tokio::time::Instant::now() + 3 * WAIT;
        while !done.exists() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the flood did not end"
            );
            peak = peak.max(rss());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        peak = peak.max(rss());
        drop(slow);
        (before, peak)
    });
    eprintln!(
        "50 MB to a viewer that never reads: RSS {} MiB before, peak {} MiB",
        before >> 20,
        peak >> 20
    );
    assert!(
        peak.saturating_sub(before) <= FLOOD_CAP,
        "the server grew by {} MiB (cap {} MiB)",
        (peak - before) >> 20,
        FLOOD_CAP >> 20
    );

    // Route (issue 42, a41): the token was checked at the upgrade only,
    // so a terminal stayed open for good after its token expired, or
    // after a logout (which ends the refresh family, not the 15-minute
    // access token): a leaked token kept its terminal. The session now
    // ends at the token's expiry; the client reconnects with a fresh one.
    rt.block_on(async {
        let mut t = open(&base, &id, &expiring(&alice, 8)).await.unwrap();
        t.hello(80, 24).await;
        assert!(
            t.until("access token expired").await,
            "still open past the token's expiry: {}",
            t.out
        );
        assert_eq!(t.close_code().await, 1008, "{:?}", t.closed);
    });

    // The sandbox dies mid-session: the viewer is told, then closed.
    rt.block_on(async {
        let mut t = open(&base, &id, &alice).await.unwrap();
        t.hello(80, 24).await;
        t.input(&format!("echo up-{nonce}\r")).await;
        assert!(t.until(&format!("up-{nonce}")).await, "{}", t.out);
        let out = Command::new("docker")
            .args(["kill", &container])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", sbx_e2e::text(&out));
        assert!(t.until("[sbx: ").await, "no message: {}", t.out);
        assert_eq!(t.close_code().await, 1011, "{:?}", t.closed);
    });
    let r = s.call("GET", "/healthz", None, None);
    assert_eq!(r.status, 200, "the server did not survive: {r:?}");

    // Retention: the default (90 days) kept every recording so far; a
    // server started with `--session-retention 1s` deletes the rows and
    // asciicast files of sessions that ended over a second ago.
    let casts = s.state.join("projects").join(&id).join("sessions");
    let files = || std::fs::read_dir(&casts).unwrap().count();
    assert!(files() >= 6, "recordings: {}", files());
    // The age is wall time: let the newest recording pass it.
    std::thread::sleep(Duration::from_millis(1500));
    let s = common::restart(s, &["--session-retention", "1s"], true);
    // The sweep runs beside the first requests: asked until it is done.
    let mut listed = usize::MAX;
    for _ in 0..60 {
        let r = s.call(
            "GET",
            &format!("/projects/{id}/sessions"),
            Some(&alice),
            None,
        );
        assert_eq!(r.status, 200, "{r:?}");
        listed = r.body.as_array().unwrap().len();
        if listed == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(listed, 0, "sessions past retention are still listed");
    assert_eq!(files(), 0, "recordings past retention are still on disk");
}
