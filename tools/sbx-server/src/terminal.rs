//! The web terminal (issue 42): `GET /terminal/{project_id}` upgraded to a
//! WebSocket that speaks ttyd's protocol, bridged by sbx-terminal to a
//! PTY the guest API opens in the project's sandbox (`tmux new-session -A
//! -s main` as the agent). Here: the project's JWT and owner, checked
//! before the upgrade; the session's row, recording and audit records.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use sbx_core::audit::{Outcome, Record};
use sbx_terminal::{MAX_MESSAGE, MAX_VIEWERS, POLICY, Recorder, Viewer, offers_tty};
use serde::Deserialize;
use uuid::Uuid;

use crate::api::{AppState, Path};
use crate::error::ApiError;
use crate::repo::TerminalSession;

#[derive(Debug, Deserialize)]
pub struct TokenQuery {
    /// The access token (seed 001's form; never logged).
    token: Option<String>,
}

/// The access token: `?token=`, else a `bearer.<token>` entry of
/// `Sec-WebSocket-Protocol` (what a browser can set), else the
/// `Authorization` header.
fn token_of(q: Option<String>, headers: &HeaderMap) -> Option<String> {
    let proto = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().strip_prefix("bearer.").map(str::to_owned));
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_owned());
    q.filter(|t| !t.is_empty()).or(proto).or(auth)
}

/// What one session needs after the upgrade.
struct Ctx {
    state: Arc<AppState>,
    user: Uuid,
    project: Uuid,
    title: String,
    target: sbx_terminal::Target,
    /// The access token's expiry: the session ends there, so a token
    /// revoked by a logout (or leaked) does not keep a terminal open
    /// longer than it would the API.
    expires: SystemTime,
    /// The token's session: a logout ends the terminal at once.
    auth_session: Uuid,
    _viewer: Viewer,
}

#[utoipa::path(get, path = "/terminal/{project_id}", tag = "terminal",
    params(("project_id" = Uuid, Path, description = "project id"),
        ("token" = Option<String>, Query,
            description = "access token (or a `bearer.<token>` Sec-WebSocket-Protocol entry, or Authorization)")),
    security(("bearer" = [])),
    responses((status = 101, description = "a WebSocket speaking ttyd's protocol (subprotocol `tty`)"),
        (status = 400, body = crate::api::ErrorBody), (status = 401, body = crate::api::ErrorBody),
        (status = 404, body = crate::api::ErrorBody), (status = 409, body = crate::api::ErrorBody),
        (status = 503, body = crate::api::ErrorBody)))]
pub async fn terminal(
    State(s): State<Arc<AppState>>,
    Path(id): Path<Uuid>,
    query: Result<Query<TokenQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let (repo, keys, _, _) = s.terminal_parts();
    // Everything is checked before the upgrade: a refused client gets an
    // HTTP answer and never a socket.
    let q = query.ok().and_then(|Query(q)| q.token);
    let token = token_of(q, &headers).ok_or_else(|| {
        ApiError::unauthorized(
            "a token is required: ?token=, a bearer.<token> subprotocol or Authorization: Bearer",
        )
    })?;
    let claims = keys.claims(&token)?;
    let user = claims.sub;
    let p = repo.get(user, id).await?.ok_or_else(ApiError::not_found)?;
    if p.status != "running" {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_running",
            format!(
                "project {id} is {}: start it first (POST /projects/{id}/start)",
                p.status
            ),
        ));
    }
    let ws = ws.map_err(|r| {
        ApiError::new(
            r.status(),
            "not_websocket",
            format!("{}: open it as a WebSocket", r.body_text()),
        )
    })?;
    if !offers_tty(&headers) {
        return Err(ApiError::bad_request(
            "no_tty_protocol",
            "the WebSocket must offer the subprotocol `tty` (ttyd's protocol)",
        ));
    }
    let viewer = Viewer::take(&id.to_string()).ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "too_many_viewers",
            format!("project {id} has {MAX_VIEWERS} terminals open, the most allowed: close one"),
        )
    })?;
    let st = Arc::clone(&s);
    let target = tokio::task::spawn_blocking(move || {
        let (_, _, sandboxes, _) = st.terminal_parts();
        sandboxes.terminal_target(id)
    })
    .await
    .map_err(|e| ApiError::internal(format!("worker failed: {e}")))?
    .map_err(|e| {
        let mut e = ApiError::from(e);
        e.message = format!("project {id}'s terminal: {}", e.message);
        e
    })?;
    // Under the database's row lock: an idle stop that claimed the
    // project since the check above wins, and the client is told so.
    if !repo.touch_connection(user, id).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "stopping",
            format!("project {id} is stopping (idle): retry once it has stopped, then start it"),
        ));
    }
    let ctx = Ctx {
        state: Arc::clone(&s),
        user,
        project: id,
        title: format!("{} (sbx)", p.name),
        target,
        expires: UNIX_EPOCH + Duration::from_secs(claims.exp),
        auth_session: claims.sid,
        _viewer: viewer,
    };
    let mut r = ws
        .protocols(["tty"])
        .max_message_size(MAX_MESSAGE)
        .max_frame_size(MAX_MESSAGE)
        .on_upgrade(move |sock| session(sock, ctx));
    // The audit layer reads the user from Authorization alone.
    r.extensions_mut()
        .insert(crate::api::AuditWho(user.to_string()));
    Ok(r)
}

#[utoipa::path(get, path = "/projects/{id}/sessions", tag = "terminal", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "project id")),
    responses((status = 200, body = Vec<TerminalSession>), (status = 404, body = crate::api::ErrorBody)))]
pub async fn list_sessions(
    State(s): State<Arc<AppState>>,
    crate::auth::User(user): crate::auth::User,
    Path(id): Path<Uuid>,
) -> Result<axum::Json<Vec<TerminalSession>>, ApiError> {
    let (repo, ..) = s.terminal_parts();
    repo.sessions(user, id)
        .await?
        .map(axum::Json)
        .ok_or_else(ApiError::not_found)
}

async fn session(mut sock: WebSocket, ctx: Ctx) {
    let sid = Uuid::new_v4();
    let (repo, _, sandboxes, audit) = ctx.state.terminal_parts();
    let target = format!("/terminal/{}", ctx.project);
    let record = |op: &str, reason: &str| {
        let rec = Record::new("sbx-server", op, &target, Outcome::Allowed, "terminal")
            .agent(&ctx.user.to_string())
            .reason(reason);
        if let Err(e) = audit.append(&rec) {
            sbx_core::output::warn(&format!("audit log {}: {e}", audit.path().display()));
        }
    };
    let Some((pty, size)) = sbx_terminal::attach(&mut sock, ctx.target).await else {
        return;
    };
    let dir = sandboxes.sessions_dir(ctx.project);
    let rec = Recorder::create(
        &dir,
        &sid.to_string(),
        serde_json::json!({"user_id": ctx.user, "project_id": ctx.project, "session_id": sid}),
        size,
    )
    .map_err(|e| sbx_core::output::warn(&format!("terminal recording in {}: {e}", dir.display())))
    .ok()
    .map(Arc::new);
    match repo.session_started(ctx.user, ctx.project, sid).await {
        Ok(true) => {}
        // The project went away since the upgrade.
        Ok(false) => {
            sbx_terminal::close(&mut sock, POLICY, "no such project").await;
            return;
        }
        Err(e) => {
            sbx_terminal::close(&mut sock, sbx_terminal::ERROR, &e.message).await;
            return;
        }
    }
    record("terminal start", &format!("session {sid}"));
    let end = ended(ctx.state.terminal_parts().1, ctx.auth_session, ctx.expires);
    let why = sbx_terminal::bridge(&mut sock, pty, &ctx.title, end, rec.clone()).await;
    if let Some(r) = &rec {
        r.end(&why);
    }
    if let Err(e) = repo.session_ended(ctx.user, sid, &why).await {
        sbx_core::output::warn(&format!("terminal session {sid}: {}", e.message));
    }
    record("terminal end", &format!("session {sid}: {why}"));
}

/// When the token that opened a terminal stops being good: its expiry, or
/// a logout (or a replayed refresh token) ending its session.
async fn ended(keys: &crate::auth::Keys, session: Uuid, expires: SystemTime) -> String {
    let mut logouts = keys.watch_ended();
    // Marked changed: a logout since the upgrade is seen at once.
    logouts.mark_changed();
    let left = expires
        .duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO);
    let expiry = tokio::time::sleep(left);
    tokio::pin!(expiry);
    loop {
        tokio::select! {
            () = &mut expiry => break "the access token expired: reconnect with a fresh one".into(),
            Ok(()) = logouts.changed() => {
                if keys.ended(session) {
                    break "the session was logged out".into();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_come_from_the_query_the_subprotocol_or_the_header() {
        let mut h = HeaderMap::new();
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            "tty, bearer.abc".parse().unwrap(),
        );
        assert_eq!(token_of(None, &h).as_deref(), Some("abc"));
        assert_eq!(token_of(Some("q".into()), &h).as_deref(), Some("q"));
        assert_eq!(token_of(None, &HeaderMap::new()), None);
    }
}
