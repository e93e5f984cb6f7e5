//! `sbx-run terminal`: the web terminal of sbx-server for one user and the
//! local sandbox of PATH. The same bridge and page (sbx-terminal), served
//! on loopback; the way in is a one-time token printed as a URL, which the
//! page trades for an HttpOnly cookie. Sessions are recorded (asciicast)
//! under the host's state directory and marked in the host's audit log,
//! so `sbx-run log` shows them.
//!
//! A loopback port is every local user's to connect to, and a browser
//! sends a 127.0.0.1 cookie to every port of that address (another
//! user's server, the agent's forwarded dev server). So before a request
//! is read, the connecting process must be this user's (its uid, by
//! sock_diag); the Host must name this listener (a page of a name that
//! resolves to 127.0.0.1 — DNS rebinding — is refused, cookie or not);
//! and at most [`MAX_CONNECTIONS`] are open, one more told so.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{WebSocket, WebSocketUpgrade};
use axum::extract::{Json, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use sbx_core::Exit;
use sbx_core::audit::{self, Outcome, Record};
use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;
use sbx_core::output;
use sbx_terminal::{MAX_MESSAGE, MAX_VIEWERS, Recorder, Viewer};
use serde::Deserialize;

use crate::{PathArg, RunError};

/// HTTP connections open at once (a browser holds about six, a viewer
/// one while it upgrades); one more is answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 32;

#[derive(Debug, clap::Args)]
pub struct TerminalOpts {
    #[command(flatten)]
    pub path: PathArg,
    /// Address to serve the page on (plain HTTP). Loopback unless --public.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7681")]
    pub listen: SocketAddr,
    /// Allow a --listen address that is not loopback. The page and the
    /// terminal then cross that network unencrypted: put TLS in front.
    #[arg(long)]
    pub public: bool,
}

/// What every request needs.
struct Local {
    /// The one-time token, None once it was used.
    token: Mutex<Option<String>>,
    /// The session cookie the token buys.
    cookie: String,
    cookie_name: String,
    socket: PathBuf,
    workdir: String,
    container: String,
    /// Where the recordings go: the host's, out of the sandbox's reach.
    sessions: PathBuf,
    /// The Host values this listener answers; None with --public (any
    /// name the network gives it).
    hosts: Option<Vec<String>>,
}

/// `len` random bytes from the kernel, as hex.
fn random_hex(len: usize) -> Result<String, RunError> {
    use std::io::Read;
    let mut b = vec![0u8; len];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| RunError::Io("/dev/urandom".into(), e))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Equal, in a time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Refuse a --listen address off loopback unless --public says so.
pub fn check_listen(listen: SocketAddr, public: bool) -> Result<(), RunError> {
    if listen.ip().is_loopback() {
        return Ok(());
    }
    if !public {
        return Err(RunError::Usage(format!(
            "--listen {listen} is not a loopback address: anyone who reaches it could use \
             the terminal's link; add --public to serve it there anyway (plain HTTP)"
        )));
    }
    output::warn(&format!(
        "serving the terminal on {listen} in plain HTTP: its link and every keystroke cross \
         that network unencrypted"
    ));
    Ok(())
}

pub fn run(common: &CommonArgs, opts: TerminalOpts) -> Result<ExitCode, BoxError> {
    check_listen(opts.listen, opts.public)?;
    let path = opts.path.get();
    let ws = crate::workspace::Workspace::open(common, path.clone())?;
    let ws = if crate::lifecycle::guestexec_up(&ws) {
        ws
    } else {
        crate::lifecycle::start_in(common, path, None, None)?
    };
    let listener = std::net::TcpListener::bind(opts.listen)
        .map_err(|e| RunError::Io(format!("listen on {}", opts.listen).into(), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| RunError::Io("listen".into(), e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| RunError::Io("listen".into(), e))?;
    let token = random_hex(32)?;
    let local = Arc::new(Local {
        token: Mutex::new(Some(token.clone())),
        cookie: random_hex(32)?,
        // Cookies ignore the port: one name per port keeps two terminals
        // of two sandboxes from replacing each other's.
        cookie_name: format!("sbx_terminal_{}", addr.port()),
        socket: crate::guestexec::socket_for(&ws),
        workdir: ws.workdir(),
        container: ws.names.container.clone(),
        sessions: crate::spec::state_dir()
            .join("terminal")
            .join(&ws.names.container),
        hosts: (!opts.public).then(|| vec![addr.to_string(), format!("localhost:{}", addr.port())]),
    });
    // The fragment never leaves the browser: no request line, so no log
    // on the way, carries the token.
    let url = format!("http://{addr}/#token={token}");
    if common.json {
        println!(
            "{}",
            serde_json::json!({"type": "terminal", "data": {"url": url}})
        );
    } else {
        println!("{url}");
    }
    if !common.quiet {
        output::info(&format!(
            "the terminal of {} is served on {addr}: open the link above (it works once); Ctrl-C stops",
            ws.names.container
        ));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| RunError::Io("tokio runtime".into(), e))?;
    rt.block_on(serve(listener, local, opts.public))?;
    Ok(Exit::Ok.into())
}

async fn serve(
    listener: std::net::TcpListener,
    local: Arc<Local>,
    public: bool,
) -> Result<(), RunError> {
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| RunError::Io("listen".into(), e))?;
    let router = axum::Router::new()
        .route("/session", post(session))
        .route("/terminal", get(terminal));
    let router = sbx_terminal::web::routes(router, &sbx_terminal::web::LOCAL);
    let router = sbx_terminal::web::routes(router, &sbx_terminal::web::COMMON)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&local),
            host_ok,
        ))
        .with_state(local);
    let limits = sbx_terminal::conn::Limits {
        max: MAX_CONNECTIONS,
        // Every local client is 127.0.0.1.
        per_address: MAX_CONNECTIONS,
        refusal: Some(format!(
            "sbx-run terminal: {MAX_CONNECTIONS} connections are open, the most it takes: \
             close some of its tabs, or wait"
        )),
        admit: Some(Arc::new(move |ours, peer| admit(ours, peer, public))),
    };
    sbx_terminal::conn::serve(listener, router, limits, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await;
    Ok(())
}

/// The uids whose processes may connect: this one, root (which could
/// read the cookie out of this process anyway) and, under sudo, the
/// user who ran it.
fn allowed_uids() -> Vec<u32> {
    let me = nix::unistd::geteuid().as_raw();
    let mut v = vec![me, 0];
    if me == 0
        && let Some(u) = std::env::var("SUDO_UID").ok().and_then(|u| u.parse().ok())
    {
        v.push(u);
    }
    v
}

/// May the process at `peer` connect? A process of this machine must
/// be one of [`allowed_uids`]; one that is not found here is another
/// machine's, which only --public lets in (the cookie still guards it).
fn admit(ours: SocketAddr, peer: SocketAddr, public: bool) -> Result<(), String> {
    let me = nix::unistd::geteuid().as_raw();
    match sbx_sys::netlink::tcp_peer_uid(ours, peer) {
        Ok(Some(uid)) if allowed_uids().contains(&uid) => Ok(()),
        Ok(Some(uid)) => Err(format!(
            "sbx-run terminal: a connection of uid {uid} refused: this terminal is uid {me}'s \
             and serves its processes alone"
        )),
        Ok(None) if public && !peer.ip().to_canonical().is_loopback() => Ok(()),
        Ok(None) => Err(format!(
            "sbx-run terminal: the process connecting from {peer} was not found: refused"
        )),
        Err(e) => Err(format!(
            "sbx-run terminal: who connects from {peer} could not be checked ({e}): refused"
        )),
    }
}

/// The Host must name this listener: a page of another name that
/// resolves to 127.0.0.1 (DNS rebinding) is its own origin, so the
/// Origin check alone would pass it, and its script can set a cookie of
/// that name for itself.
async fn host_ok(State(l): State<Arc<Local>>, req: Request, next: Next) -> Response {
    if let Some(hosts) = &l.hosts {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok());
        if !host.is_some_and(|h| hosts.iter().any(|a| a.eq_ignore_ascii_case(h))) {
            return refuse(
                StatusCode::MISDIRECTED_REQUEST,
                &format!(
                    "this terminal answers http://{} alone, not a request for host {:?}",
                    hosts[0],
                    host.unwrap_or("")
                ),
            );
        }
    }
    next.run(req).await
}

fn refuse(status: StatusCode, msg: &str) -> Response {
    (status, format!("{msg}\n")).into_response()
}

#[derive(Debug, Deserialize)]
struct TokenBody {
    token: String,
}

/// `POST /session {"token"}`: the one-time token for the session cookie.
async fn session(State(l): State<Arc<Local>>, body: Option<Json<TokenBody>>) -> Response {
    let given = body.map(|Json(b)| b.token).unwrap_or_default();
    let taken = {
        let mut t = l.token.lock().unwrap_or_else(|e| e.into_inner());
        match t.as_deref() {
            Some(want) if same(want, &given) => t.take().is_some(),
            _ => false,
        }
    };
    if !taken {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "this link is wrong or was used already: run `sbx-run terminal` again for a new one",
        );
    }
    let cookie = format!(
        "{}={}; HttpOnly; SameSite=Strict; Path=/",
        l.cookie_name, l.cookie
    );
    let mut r = StatusCode::NO_CONTENT.into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// Does the request carry the session cookie?
fn has_cookie(l: &Local, headers: &HeaderMap) -> bool {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .any(|(k, v)| k == l.cookie_name && same(v, &l.cookie))
}

/// A browser's Origin, when it sent one, must be this page's. The cookie
/// alone is not enough: a page of another port on the same host (a dev
/// server the agent wrote and the user opened) counts as the same site,
/// so the browser sends it the cookie with a WebSocket it opens here.
fn origin_ok(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    match (origin.to_str().ok(), host) {
        (Some(o), Some(h)) => o == format!("http://{h}") || o == format!("https://{h}"),
        _ => false,
    }
}

/// `GET /terminal`: checked (cookie, origin, subprotocol, viewers) before
/// the upgrade, then bridged to a new tmux client of the session `main`.
async fn terminal(
    State(l): State<Arc<Local>>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    if !has_cookie(&l, &headers) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "no session: open the link `sbx-run terminal` printed",
        );
    }
    if !origin_ok(&headers) {
        return refuse(
            StatusCode::FORBIDDEN,
            "the WebSocket was opened by another site's page",
        );
    }
    let ws = match ws {
        Ok(ws) => ws,
        Err(r) => {
            return refuse(
                r.status(),
                &format!("{}: open it as a WebSocket", r.body_text()),
            );
        }
    };
    if !sbx_terminal::offers_tty(&headers) {
        return refuse(
            StatusCode::BAD_REQUEST,
            "the WebSocket must offer the subprotocol `tty` (ttyd's protocol)",
        );
    }
    let Some(viewer) = Viewer::take(&l.container) else {
        return refuse(
            StatusCode::CONFLICT,
            &format!("{MAX_VIEWERS} terminals are open, the most allowed: close one"),
        );
    };
    ws.protocols(["tty"])
        .max_message_size(MAX_MESSAGE)
        .max_frame_size(MAX_MESSAGE)
        .on_upgrade(move |sock| viewer_session(sock, l, viewer))
}

async fn viewer_session(mut sock: WebSocket, l: Arc<Local>, _viewer: Viewer) {
    let target = sbx_terminal::Target::Guest {
        socket: l.socket.clone(),
        workdir: l.workdir.clone(),
    };
    let Some((pty, size)) = sbx_terminal::attach(&mut sock, target).await else {
        return;
    };
    let sid = random_hex(16).unwrap_or_else(|_| "session".into());
    let user = nix::unistd::getuid().as_raw();
    let meta = serde_json::json!({"host_uid": user, "container": l.container, "session_id": sid});
    let rec = Recorder::create(&l.sessions, &sid, meta, size)
        .map_err(|e| {
            output::warn(&format!(
                "terminal recording in {}: {e}",
                l.sessions.display()
            ))
        })
        .ok()
        .map(Arc::new);
    let cast = l.sessions.join(format!("{sid}.cast"));
    let record = |op: &str, reason: &str| {
        audit::append(
            &Record::new("sbx-run", op, &l.container, Outcome::Allowed, "terminal")
                .agent(&format!("uid {user}"))
                .reason(reason),
        );
    };
    record(
        "terminal start",
        &format!("session {sid}, recorded in {}", cast.display()),
    );
    let title = format!("{} (sbx)", l.container);
    let why =
        sbx_terminal::bridge(&mut sock, pty, &title, std::future::pending(), rec.clone()).await;
    if let Some(r) = &rec {
        r.end(&why);
    }
    record("terminal end", &format!("session {sid}: {why}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_listens_without_public() {
        for (a, public, ok) in [
            ("127.0.0.1:7681", false, true),
            ("[::1]:7681", false, true),
            ("0.0.0.0:7681", false, false),
            ("192.0.2.1:7681", false, false),
            ("0.0.0.0:7681", true, true),
        ] {
            assert_eq!(check_listen(a.parse().unwrap(), public).is_ok(), ok, "{a}");
        }
    }

    #[test]
    fn a_foreign_origin_is_refused() {
        let mut h = HeaderMap::new();
        assert!(origin_ok(&h), "no Origin: not a browser");
        h.insert(header::HOST, "127.0.0.1:7681".parse().unwrap());
        h.insert(header::ORIGIN, "http://127.0.0.1:7681".parse().unwrap());
        assert!(origin_ok(&h));
        for o in [
            "http://127.0.0.1:3000",
            "null",
            "http://127.0.0.1:7681.evil.example",
            "http://127.0.0.1:76810",
        ] {
            h.insert(header::ORIGIN, o.parse().unwrap());
            assert!(!origin_ok(&h), "{o}");
        }
    }
}
