//! `sbx-run terminal`: the web terminal of sbx-server for one user and the
//! local sandbox of PATH. The same bridge and page (sbx-terminal), served
//! on loopback; the way in is a one-time token printed as a URL, which the
//! page trades for an HttpOnly cookie. Sessions are recorded (asciicast)
//! under the host's state directory and marked in the host's audit log,
//! so `sbx-run log` shows them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{WebSocket, WebSocketUpgrade};
use axum::extract::{Json, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
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
    rt.block_on(serve(listener, local))?;
    Ok(Exit::Ok.into())
}

async fn serve(listener: std::net::TcpListener, local: Arc<Local>) -> Result<(), RunError> {
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| RunError::Io("listen".into(), e))?;
    let router = axum::Router::new()
        .route("/session", post(session))
        .route("/terminal", get(terminal));
    let router = sbx_terminal::web::routes(router, &sbx_terminal::web::LOCAL);
    let router = sbx_terminal::web::routes(router, &sbx_terminal::web::COMMON).with_state(local);
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| RunError::Io("serve".into(), e))
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
    let Some((client, size)) = sbx_terminal::attach(&mut sock, &l.socket, &l.workdir).await else {
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
    let why = sbx_terminal::bridge(
        &mut sock,
        client,
        &title,
        std::future::pending(),
        rec.clone(),
    )
    .await;
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
        h.insert(header::ORIGIN, "http://127.0.0.1:3000".parse().unwrap());
        assert!(!origin_ok(&h));
    }
}
