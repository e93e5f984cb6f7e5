//! The HTTP API: routes, extractors whose rejections are JSON errors, the
//! audit layer, the OpenAPI document (generated from the handlers' own
//! annotations, so it cannot miss a route) and `serve`.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{
    ConnectInfo, DefaultBodyLimit, FromRequest, FromRequestParts, MatchedPath, Request, State,
};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use sbx_core::audit::{AuditLog, Outcome, Record};
use serde::{Deserialize, Serialize};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::auth::{self, HasKeys, Keys, Limiter, User};
use crate::backend::{BackendError, ErrorKind};
use crate::error::{ApiError, AuditReason};
use crate::pg::LocalCluster;
use crate::repo::{CreateError, Project, Refresh, Repo};
use crate::sandbox::{BackupError, Sandboxes};
use crate::{ServeArgs, ServerError};

/// Largest request body: every request is a few small JSON fields.
pub const BODY_LIMIT: usize = 16 * 1024;
/// How long a client may take to send its body: over it, 408. Unbounded,
/// one client trickling bodies held a connection (a file descriptor) each
/// for good, until the server could accept no more.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest project name, in characters.
pub const MAX_NAME: usize = 64;

mod embedded {
    refinery::embed_migrations!("migrations");
}

pub struct AppState {
    repo: Repo,
    keys: Keys,
    sandboxes: Sandboxes,
    audit: AuditLog,
    account: Limiter,
    address: Limiter,
    /// Every registration, per client address: the per-user quotas mean
    /// nothing if one client may make users without end.
    registrations: Limiter,
    max_projects: u32,
    max_running: u32,
    repo_root: Option<PathBuf>,
    /// The config of a project whose request gives none (checked).
    default_config: Option<String>,
    caps: crate::config::Caps,
    /// Verified against when the email is unknown, so a login takes as
    /// long whether or not the account exists.
    dummy_hash: String,
    /// Hashes running at once: each takes argon2's 19 MiB, and the login
    /// limits bound failures over time, not concurrency.
    hashing: tokio::sync::Semaphore,
}

type S = Arc<AppState>;

impl AppState {
    /// What the web terminal (crate::terminal) uses.
    pub(crate) fn terminal_parts(&self) -> (&Repo, &Keys, &Sandboxes, &AuditLog) {
        (&self.repo, &self.keys, &self.sandboxes, &self.audit)
    }
}

impl HasKeys for S {
    fn keys(&self) -> &Keys {
        &self.keys
    }
}

/// `axum::Json` whose rejections are our JSON errors: 400 malformed,
/// 422 wrong shape or unknown field, 413 over [`BODY_LIMIT`], 415 not JSON.
#[derive(Debug, FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct Json<T>(pub T);

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        let code = match &r {
            JsonRejection::JsonSyntaxError(_) => "malformed_json",
            JsonRejection::JsonDataError(_) => "invalid_body",
            JsonRejection::MissingJsonContentType(_) => "not_json",
            _ if r.status() == StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
            _ => "bad_body",
        };
        let message = if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            format!("the body is over {BODY_LIMIT} bytes")
        } else {
            r.body_text()
        };
        ApiError::new(r.status(), code, message)
    }
}

/// A path parameter; a project id that is not a UUID is a 400.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::bad_request("bad_id", r.body_text())
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Credentials {
    pub email: String,
    pub password: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Registered {
    pub user_id: Uuid,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Tokens {
    /// HS256 JWT, valid 15 minutes.
    pub access_token: String,
    /// Valid 30 days, once: each refresh returns a new one.
    pub refresh_token: String,
    pub token_type: &'static str,
    pub expires_in: u64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefreshBody {
    pub refresh_token: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewProject {
    pub name: String,
    /// A local repository below the server's `--repo-root` to clone.
    pub repo: Option<String>,
    /// The project's `.agent-sandbox/config.toml`: its TOML text, or a
    /// JSON object of the same keys. Only `[sandbox]` resources and
    /// protected paths, `[filesystem]`, `[network]` (not allow-external)
    /// and `[git]`; the rest is the server's. Default: the server's.
    #[schema(value_type = Option<Object>)]
    pub config: Option<serde_json::Value>,
    /// Run sshd in the sandbox with a key pair of the project's own: the
    /// private key is in this response only (`ssh.private_key`), never
    /// stored; `POST /projects/{id}/ssh-key` makes a new one.
    #[serde(default)]
    pub ssh: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    pub status: &'static str,
}

/// Who a request acted as, when the handler knows better than the token
/// (a login), for the audit layer.
#[derive(Debug, Clone)]
pub(crate) struct AuditWho(pub(crate) String);

#[utoipa::path(get, path = "/healthz", tag = "meta",
    responses((status = 200, body = Health), (status = 503, body = ErrorBody)))]
async fn healthz(State(s): State<S>) -> Result<axum::Json<Health>, ApiError> {
    s.repo.ping().await?;
    Ok(axum::Json(Health { status: "ok" }))
}

#[utoipa::path(post, path = "/auth/register", tag = "auth", request_body = Credentials,
    responses((status = 201, body = Registered), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody)))]
async fn register(
    State(s): State<S>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    Json(c): Json<Credentials>,
) -> Result<Response, ApiError> {
    let ip = addr.ip().to_string();
    s.address.check(&ip, "address")?;
    s.registrations.check(&ip, "address")?;
    let email = auth::normalise_email(&c.email)?;
    auth::check_password(&c.password)?;
    // Counted before the hash: an attempt costs the server its argon2.
    s.registrations.fail(&ip);
    let hash = hashing(&s, move || auth::hash_password(&c.password)).await??;
    let id = Uuid::new_v4();
    if !s.repo.create_user(id, &email, &hash).await? {
        // Counted like a failed login: probing for addresses is limited.
        s.address.fail(&ip);
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "email_taken",
            "that email cannot be registered",
        ));
    }
    let mut r = (StatusCode::CREATED, axum::Json(Registered { user_id: id })).into_response();
    r.extensions_mut().insert(AuditWho(id.to_string()));
    Ok(r)
}

#[utoipa::path(post, path = "/auth/login", tag = "auth", request_body = Credentials,
    responses((status = 200, body = Tokens), (status = 401, body = ErrorBody),
        (status = 429, body = ErrorBody)))]
async fn login(
    State(s): State<S>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    Json(c): Json<Credentials>,
) -> Result<Response, ApiError> {
    let ip = addr.ip().to_string();
    let email = auth::normalise_email(&c.email)?;
    s.address.check(&ip, "address")?;
    s.account.check(&email, "account")?;
    let user = s.repo.user_by_email(&email).await?;
    let (id, hash) = match user {
        Some((id, h)) => (Some(id), h),
        None => (None, s.dummy_hash.clone()),
    };
    let pw = c.password;
    let ok = pw.len() <= auth::MAX_PASSWORD
        && hashing(&s, move || auth::verify_password(&pw, &hash)).await?;
    let Some(id) = id.filter(|_| ok) else {
        s.account.fail(&email);
        s.address.fail(&ip);
        // The same answer for an unknown email and a wrong password.
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_credentials",
            "the email or the password is wrong",
        ));
    };
    s.account.clear(&email);
    let refresh = auth::new_refresh_token()?;
    let sid = s
        .repo
        .insert_refresh(
            id,
            &auth::token_hash(&refresh),
            auth::REFRESH_TTL.as_secs_f64(),
        )
        .await?;
    let mut r = axum::Json(tokens(&s, id, sid, refresh)?).into_response();
    r.extensions_mut().insert(AuditWho(id.to_string()));
    Ok(r)
}

fn tokens(s: &AppState, user: Uuid, sid: Uuid, refresh: String) -> Result<Tokens, ApiError> {
    Ok(Tokens {
        access_token: s.keys.issue(user, sid)?,
        refresh_token: refresh,
        token_type: "Bearer",
        expires_in: auth::ACCESS_TTL.as_secs(),
    })
}

#[utoipa::path(post, path = "/auth/refresh", tag = "auth", request_body = RefreshBody,
    responses((status = 200, body = Tokens), (status = 401, body = ErrorBody)))]
async fn refresh(State(s): State<S>, Json(b): Json<RefreshBody>) -> Result<Response, ApiError> {
    let new = auth::new_refresh_token()?;
    match s
        .repo
        .rotate_refresh(
            &auth::token_hash(&b.refresh_token),
            &auth::token_hash(&new),
            auth::REFRESH_TTL.as_secs_f64(),
        )
        .await?
    {
        Refresh::Rotated(user, sid) => {
            let mut r = axum::Json(tokens(&s, user, sid, new)?).into_response();
            r.extensions_mut().insert(AuditWho(user.to_string()));
            Ok(r)
        }
        Refresh::Reused(sid) => {
            // The thief's access tokens and the holder's alike.
            s.keys.end_sessions([sid]);
            Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "refresh_reused",
                "this refresh token was used before: its session is revoked, log in again",
            ))
        }
        Refresh::Invalid => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_refresh",
            "the refresh token is unknown or expired: log in again",
        )),
    }
}

#[utoipa::path(post, path = "/auth/logout", tag = "auth", request_body = RefreshBody,
    security(("bearer" = [])),
    responses((status = 204), (status = 401, body = ErrorBody)))]
async fn logout(
    State(s): State<S>,
    session: auth::Session,
    Json(b): Json<RefreshBody>,
) -> Result<StatusCode, ApiError> {
    let ended = s
        .repo
        .revoke_family(
            session.user,
            session.sid,
            &auth::token_hash(&b.refresh_token),
        )
        .await?;
    // The token's own session even if the database had it revoked before.
    s.keys.end_sessions(ended.into_iter().chain([session.sid]));
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/projects", tag = "projects", security(("bearer" = [])),
    responses((status = 200, body = Vec<Project>), (status = 401, body = ErrorBody)))]
async fn list_projects(
    State(s): State<S>,
    User(user): User,
) -> Result<axum::Json<Vec<Project>>, ApiError> {
    Ok(axum::Json(s.repo.list(user).await?))
}

/// A project name: 1 to [`MAX_NAME`] characters, no control or invisible characters
/// (it is printed in logs and terminals), no leading or trailing blanks.
fn check_name(name: &str) -> Result<(), ApiError> {
    let n = name.chars().count();
    if n == 0
        || n > MAX_NAME
        || name
            .chars()
            .any(|c| c.is_control() || auth::is_invisible(c))
        || name.trim() != name
    {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_name",
            format!(
                "name: 1 to {MAX_NAME} characters, no control or invisible characters, no leading or trailing blanks"
            ),
        ));
    }
    Ok(())
}

/// `repo` as a canonical path below `--repo-root`: anything else could
/// clone another user's workspace or any repository the server can read.
fn check_repo(root: Option<&FsPath>, repo: &str) -> Result<PathBuf, ApiError> {
    let bad = |m: String| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_repo", m);
    let Some(root) = root else {
        return Err(bad(
            "repo: this server clones no repositories (start it with --repo-root)".into(),
        ));
    };
    let p = FsPath::new(repo);
    let canon = p
        .is_absolute()
        .then(|| p.canonicalize().ok())
        .flatten()
        .filter(|c| c.starts_with(root) && c != root);
    canon.ok_or_else(|| {
        bad(format!(
            "repo: an existing absolute path below {} is required",
            root.display()
        ))
    })
}

/// A request's project config, checked by sbx-core's parser and held to
/// a project's keys and the server's caps: its TOML text.
fn project_config(v: &serde_json::Value, caps: &crate::config::Caps) -> Result<String, ApiError> {
    use crate::config::Refused;
    let refused = |r| match r {
        Refused::Invalid(m) => ApiError::bad_request("invalid_config", m),
        Refused::ServerOwned(keys) => ApiError::bad_request(
            "server_owned_keys",
            format!(
                "{}: {} set by the server, not by a project: remove {}",
                crate::config::NAME,
                keys.join(", "),
                if keys.len() == 1 { "it" } else { "them" }
            ),
        ),
        Refused::OverCap(m) => ApiError::new(
            StatusCode::CONFLICT,
            "resource_limit",
            format!("{}: {m}: ask for less", crate::config::NAME),
        ),
    };
    let text = crate::config::text_of(v).map_err(refused)?;
    crate::config::check(&text, caps).map_err(refused)?;
    Ok(text)
}

#[utoipa::path(post, path = "/projects", tag = "projects", request_body = NewProject,
    security(("bearer" = [])),
    responses((status = 201, body = Project), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
async fn create_project(
    State(s): State<S>,
    User(user): User,
    Json(p): Json<NewProject>,
) -> Result<Response, ApiError> {
    check_name(&p.name)?;
    let config = match &p.config {
        Some(c) => Some(project_config(c, &s.caps)?),
        None => s.default_config.clone(),
    };
    let repo = match &p.repo {
        Some(r) => Some(check_repo(s.repo_root.as_deref(), r)?),
        None => None,
    };
    if p.ssh && !s.sandboxes.ssh() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "ssh_unsupported",
            "ssh: this server's backend publishes no sshd (Kubernetes): make the project without \"ssh\"",
        ));
    }
    let id = Uuid::new_v4();
    let lock = s.sandboxes.lock(id);
    let _held = lock.lock().await;
    let created = s
        .repo
        .create(
            user,
            id,
            &p.name,
            p.repo.as_deref(),
            config.as_deref(),
            s.max_projects,
        )
        .await;
    match created {
        Ok(_) => {}
        Err(CreateError::Limit(n)) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "project_limit",
                format!("you have {n} projects, the most this server allows: delete one first"),
            ));
        }
        Err(CreateError::Duplicate) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "name_taken",
                "you have a project of that name",
            ));
        }
        Err(CreateError::Db(e)) => return Err(e),
    }
    let state = Arc::clone(&s);
    let ssh = p.ssh;
    let made = blocking(move || {
        state.sandboxes.create(id, repo.as_deref())?;
        ssh.then(|| state.sandboxes.new_ssh_key(id)).transpose()
    })
    .await?;
    let mut private = None;
    if let Ok(Some(k)) = &made {
        s.repo
            .set_ssh_keys(user, id, &k.public, &k.host_key, &k.fingerprint)
            .await?;
        private = Some(k.private.clone());
    }
    let (status, reason) = match &made {
        Ok(_) => ("stopped", None),
        Err(r) => ("error", Some(r.as_str())),
    };
    let mut p = s
        .repo
        .set_status(user, id, status, reason, None)
        .await?
        .ok_or_else(ApiError::not_found)?;
    if let Some(x) = p.ssh.as_mut() {
        x.private_key = private;
    }
    Ok((StatusCode::CREATED, axum::Json(p)).into_response())
}

#[utoipa::path(get, path = "/projects/{id}", tag = "projects", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "project id")),
    responses((status = 200, body = Project), (status = 404, body = ErrorBody)))]
async fn get_project(
    State(s): State<S>,
    User(user): User,
    Path(id): Path<Uuid>,
) -> Result<axum::Json<Project>, ApiError> {
    s.repo
        .get(user, id)
        .await?
        .map(axum::Json)
        .ok_or_else(ApiError::not_found)
}

#[utoipa::path(post, path = "/projects/{id}/start", tag = "projects", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "project id")),
    responses((status = 200, body = Project), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn start_project(
    State(s): State<S>,
    User(user): User,
    Path(id): Path<Uuid>,
) -> Result<axum::Json<Project>, ApiError> {
    let _held = owned(&s, user, id).await?;
    // Under the project's lock only: two starts of different projects
    // may both pass; the limit is a quota, not a security boundary.
    running_limit(&s, user, id).await?;
    start_held(&s, user, id).await
}

/// Start `user`'s project `id`, its lock held: with its sshd when it has
/// SSH, whose published address is then recorded.
async fn start_held(s: &S, user: Uuid, id: Uuid) -> Result<axum::Json<Project>, ApiError> {
    let config = s.repo.config(user, id).await?;
    let ssh = ssh_key_of(s, user, id).await?;
    let with_ssh = ssh.is_some();
    s.repo.set_status(user, id, "creating", None, None).await?;
    let state = Arc::clone(s);
    let started = blocking(move || {
        let name = state
            .sandboxes
            .start(id, config.as_deref(), ssh.as_deref())?;
        let at = if with_ssh {
            state.sandboxes.ssh_endpoint(id)?
        } else {
            None
        };
        Ok((name, at))
    })
    .await?;
    let started = match started {
        Ok((name, at)) => {
            if let Some((host, port)) = at {
                s.repo.set_ssh_endpoint(user, id, &host, port).await?;
            }
            Ok(Some(name))
        }
        Err(e) => Err(e),
    };
    settle(s, user, id, "running", started).await
}

/// The public key of `user`'s project `id`, None when it has no SSH.
async fn ssh_key_of(s: &AppState, user: Uuid, id: Uuid) -> Result<Option<String>, ApiError> {
    Ok(s.repo
        .get(user, id)
        .await?
        .ok_or_else(ApiError::not_found)?
        .ssh
        .map(|x| x.public_key))
}

#[utoipa::path(post, path = "/projects/{id}/ssh-key", tag = "projects", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "project id")),
    responses((status = 200, description = "the project, `ssh.private_key` the new key", body = Project),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
async fn rotate_ssh_key(
    State(s): State<S>,
    User(user): User,
    Path(id): Path<Uuid>,
) -> Result<axum::Json<Project>, ApiError> {
    let _held = owned(&s, user, id).await?;
    let p = s
        .repo
        .get(user, id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    if p.ssh.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_ssh",
            "this project was made without SSH: make a project with \"ssh\": true to reach it over SSH",
        ));
    }
    let running = p.status == "running";
    if !["running", "stopped"].contains(&p.status.as_str()) {
        require(&p, "stopped", "wait for it to settle, or stop it")?;
    }
    // A running sshd read the old key at its start: stopped first, so
    // nothing lets the old key in once the new one is handed out.
    if running {
        s.repo.set_status(user, id, "stopping", None, None).await?;
        let state = Arc::clone(&s);
        if let Err(reason) = blocking(move || state.sandboxes.stop(id)).await? {
            return Err(failed(&s, user, id, reason).await);
        }
        s.repo.set_status(user, id, "stopped", None, None).await?;
    }
    let state = Arc::clone(&s);
    let k = match blocking(move || state.sandboxes.new_ssh_key(id)).await? {
        Ok(k) => k,
        Err(reason) => return Err(failed(&s, user, id, reason.into()).await),
    };
    s.repo
        .set_ssh_keys(user, id, &k.public, &k.host_key, &k.fingerprint)
        .await?;
    let mut p = if running {
        match start_held(&s, user, id).await {
            Ok(p) => p.0,
            // The new key is the one stored and the old one is gone: a
            // failed restart must not lose it too. The project as the
            // start left it (`error`, its reason) carries the key.
            Err(_) => s
                .repo
                .get(user, id)
                .await?
                .ok_or_else(ApiError::not_found)?,
        }
    } else {
        s.repo
            .get(user, id)
            .await?
            .ok_or_else(ApiError::not_found)?
    };
    if let Some(x) = p.ssh.as_mut() {
        x.private_key = Some(k.private);
    }
    Ok(axum::Json(p))
}

/// 409 when `user` has as many sandboxes running (or starting) besides
/// `id` as the server allows.
async fn running_limit(s: &AppState, user: Uuid, id: Uuid) -> Result<(), ApiError> {
    if s.repo.running(user, id).await? >= i64::from(s.max_running) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "running_limit",
            format!(
                "you have {} sandboxes running, the most this server allows: stop one first",
                s.max_running
            ),
        ));
    }
    Ok(())
}

/// The lock of project `id`, held, once the project is known to be
/// `user`'s: another user's is a 404 before anything is touched.
async fn owned(
    s: &AppState,
    user: Uuid,
    id: Uuid,
) -> Result<tokio::sync::OwnedMutexGuard<()>, ApiError> {
    // The owner first: another user's id (or a made-up one) must neither
    // wait on the lock, whose wait tells that the project exists and is
    // busy, nor leave a lock in the map for good.
    s.repo
        .get(user, id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    let held = s.sandboxes.lock(id).lock_owned().await;
    // Again under the lock: a delete may have gone first.
    s.repo
        .get(user, id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    Ok(held)
}

/// The project after a transition: in `status` (with its container, if
/// one is named), or in `error` with the reason.
async fn settle(
    s: &AppState,
    user: Uuid,
    id: Uuid,
    status: &str,
    done: Result<Option<String>, BackendError>,
) -> Result<axum::Json<Project>, ApiError> {
    match done {
        Ok(container) => s
            .repo
            .set_status(user, id, status, None, container.as_deref())
            .await?
            .map(axum::Json)
            .ok_or_else(ApiError::not_found),
        Err(reason) => Err(failed(s, user, id, reason).await),
    }
}

/// Record a failed transition on the project and answer with why, in
/// the status of its kind (error.rs).
async fn failed(s: &AppState, user: Uuid, id: Uuid, reason: BackendError) -> ApiError {
    if let Err(e) = s
        .repo
        .set_status(user, id, "error", Some(&reason.message), None)
        .await
    {
        return e;
    }
    reason.into()
}

#[utoipa::path(post, path = "/projects/{id}/stop", tag = "projects", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "project id")),
    responses((status = 200, body = Project), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 501, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
async fn stop_project(
    State(s): State<S>,
    User(user): User,
    Path(id): Path<Uuid>,
) -> Result<axum::Json<Project>, ApiError> {
    let _held = owned(&s, user, id).await?;
    s.repo.set_status(user, id, "stopping", None, None).await?;
    let state = Arc::clone(&s);
    let stopped = blocking(move || state.sandboxes.stop(id)).await?;
    settle(&s, user, id, "stopped", stopped.map(|()| None)).await
}

#[utoipa::path(delete, path = "/projects/{id}", tag = "projects", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "project id")),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 501, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn delete_project(
    State(s): State<S>,
    User(user): User,
    Path(id): Path<Uuid>,
) -> Result<StatusCode, ApiError> {
    let _held = owned(&s, user, id).await?;
    s.repo.set_status(user, id, "deleting", None, None).await?;
    let state = Arc::clone(&s);
    // The sandbox and workspace go first: a row is never left pointing
    // at nothing, and a failure leaves the project in `error` to retry.
    if let Err(reason) = blocking(move || state.sandboxes.remove(id)).await? {
        return Err(failed(&s, user, id, reason).await);
    }
    s.repo.delete(user, id).await?;
    s.sandboxes.forget(id);
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreBody {
    /// The snapshot to restore (its id, as `backup-status` and a snapshot
    /// name it); the newest when absent.
    pub snapshot: Option<String>,
}

/// A project in `want`, else 409 saying what to do.
fn require(p: &Project, want: &str, todo: &str) -> Result<(), ApiError> {
    if p.status == want {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "wrong_status",
        format!("the project is {}, not {want}: {todo}", p.status),
    ))
}

/// 409 when the server has no backup store.
fn require_backups(s: &AppState) -> Result<(), ApiError> {
    if s.sandboxes.backups() {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "no_backup_store",
        "this server has no backup store: start it with --backup-url to snapshot and restore homes",
    ))
}

fn backup_error(e: BackupError) -> ApiError {
    match e {
        BackupError::NoSnapshot(m) => ApiError::new(StatusCode::NOT_FOUND, "no_snapshot", m),
        BackupError::Failed(e) if e.kind == ErrorKind::Other => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "backup_failed", e.message)
        }
        BackupError::Failed(e) => e.into(),
    }
}

/// The owned project, held, for a backup route: 404 for another user's
/// before anything else is said about it.
/// A snapshot or restore runs for minutes and ties up the sandbox: a
/// second one on a busy project is refused (409), not queued, so a storm
/// of them cannot pile up waiting work (and connections) on one project.
async fn backup_target(
    s: &AppState,
    user: Uuid,
    id: Uuid,
) -> Result<(tokio::sync::OwnedMutexGuard<()>, Project), ApiError> {
    s.repo
        .get(user, id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    let held = s.sandboxes.lock(id).try_lock_owned().map_err(|_| {
        ApiError::new(
            StatusCode::CONFLICT,
            "busy",
            format!("project {id} is busy with another operation: try again when it ends"),
        )
    })?;
    require_backups(s)?;
    let p = s
        .repo
        .get(user, id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    Ok((held, p))
}

#[utoipa::path(post, path = "/projects/{id}/snapshot", tag = "backups", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "project id")),
    responses((status = 200, description = "sbx-backup sync's report", body = Object),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
async fn snapshot_project(
    State(s): State<S>,
    User(user): User,
    Path(id): Path<Uuid>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let (_held, p) = backup_target(&s, user, id).await?;
    require(&p, "running", "start it first")?;
    s.repo
        .set_status(user, id, "snapshotting", None, None)
        .await?;
    let state = Arc::clone(&s);
    let done = blocking(move || state.sandboxes.backup(id, &["sync"])).await?;
    // A failed pass leaves the sandbox as it was: running.
    s.repo.set_status(user, id, "running", None, None).await?;
    done.map(axum::Json).map_err(backup_error)
}

#[utoipa::path(get, path = "/projects/{id}/backup-status", tag = "backups",
    security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "project id")),
    responses((status = 200, description = "sbx-backup status's report", body = Object),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
async fn backup_status(
    State(s): State<S>,
    User(user): User,
    Path(id): Path<Uuid>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let (_held, p) = backup_target(&s, user, id).await?;
    require(&p, "running", "start it to read its backup status")?;
    let state = Arc::clone(&s);
    blocking(move || state.sandboxes.backup(id, &["status"]))
        .await?
        .map(axum::Json)
        .map_err(backup_error)
}

/// A snapshot id as sbx-backup names them: digits only, so it can never
/// be read as an option of the command it is passed to.
fn check_snapshot(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > 20 || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_snapshot",
            "snapshot: a snapshot id, 1 to 20 digits",
        ));
    }
    Ok(())
}

#[utoipa::path(post, path = "/projects/{id}/restore", tag = "backups", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "project id")),
    request_body(content = Option<RestoreBody>, description = "optional: the newest snapshot without it"),
    responses((status = 200, body = Project), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
async fn restore_project(
    State(s): State<S>,
    User(user): User,
    Path(id): Path<Uuid>,
    body: axum::body::Bytes,
) -> Result<axum::Json<Project>, ApiError> {
    let snapshot = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let b: RestoreBody = serde_json::from_slice(&body).map_err(|e| {
            let code = if e.is_syntax() || e.is_eof() {
                (StatusCode::BAD_REQUEST, "malformed_json")
            } else {
                (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body")
            };
            ApiError::new(code.0, code.1, e.to_string())
        })?;
        b.snapshot
    };
    if let Some(sn) = &snapshot {
        check_snapshot(sn)?;
    }
    let (_held, p) = backup_target(&s, user, id).await?;
    require(&p, "stopped", "stop it first")?;
    // The restore runs the sandbox for its length.
    running_limit(&s, user, id).await?;
    let config = s.repo.config(user, id).await?;
    let ssh = p.ssh.map(|x| x.public_key);
    s.repo.set_status(user, id, "restoring", None, None).await?;
    let state = Arc::clone(&s);
    let done = blocking(move || {
        state
            .sandboxes
            .restore(id, config.as_deref(), ssh.as_deref(), snapshot.as_deref())
    })
    .await?;
    match done {
        Ok(_) => settle(&s, user, id, "stopped", Ok(None)).await,
        // Nothing was restored: the home is as it was.
        Err(e @ BackupError::NoSnapshot(_)) => {
            s.repo.set_status(user, id, "stopped", None, None).await?;
            Err(backup_error(e))
        }
        Err(BackupError::Failed(m)) => Err(failed(&s, user, id, m).await),
    }
}

/// A password hash or verification, off the async workers, at most
/// [`AppState::hashing`] at once: unbounded, a burst of logins (wrong
/// ones all pass the limit's check before the first failure counts)
/// takes 19 MiB each, up to tokio's 512 blocking threads: ~10 GB.
async fn hashing<T: Send + 'static>(
    s: &AppState,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    let _permit = s
        .hashing
        .acquire()
        .await
        .map_err(|e| ApiError::internal(format!("hashing: {e}")))?;
    blocking(f).await
}

/// Run blocking work (hashing, docker, git) off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("worker failed: {e}")))
}

struct Security;

impl Modify for Security {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        let c = api.components.get_or_insert_with(Default::default);
        c.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "sbx-server", description = "The sbx Project Service"),
    modifiers(&Security),
    components(schemas(ErrorBody, ErrorDetail))
)]
struct ApiDoc;

/// The router and the OpenAPI document, from the same list of handlers.
pub fn router(state: S) -> axum::Router {
    let (router, doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(healthz))
        .routes(routes!(register))
        .routes(routes!(login))
        .routes(routes!(refresh))
        .routes(routes!(logout))
        .routes(routes!(list_projects, create_project))
        .routes(routes!(get_project, delete_project))
        .routes(routes!(start_project))
        .routes(routes!(stop_project))
        .routes(routes!(rotate_ssh_key))
        .routes(routes!(snapshot_project))
        .routes(routes!(restore_project))
        .routes(routes!(backup_status))
        .routes(routes!(crate::terminal::terminal))
        .routes(routes!(crate::terminal::list_sessions))
        .split_for_parts();
    let doc = Arc::new(doc);
    let router = router.route_layer(axum::middleware::from_fn_with_state(
        Arc::clone(&state),
        audit_layer,
    ));
    crate::web::routes(router)
        .route(
            "/openapi.json",
            axum::routing::get(move || {
                let d = Arc::clone(&doc);
                async move { axum::Json(d.as_ref().clone()) }
            }),
        )
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no_route", "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this route does not take that method",
            )
        })
        .layer(axum::middleware::from_fn(read_body))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// The whole body, read within [`BODY_TIMEOUT`] before any handler runs
/// (one declared over [`BODY_LIMIT`] is left to the extractor's 413).
async fn read_body(req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|n| n > BODY_LIMIT) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, BODY_LIMIT)).await {
        Ok(Ok(b)) => {
            next.run(Request::from_parts(parts, axum::body::Body::from(b)))
                .await
        }
        Ok(Err(_)) => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the body is over {BODY_LIMIT} bytes"),
        )
        .into_response(),
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!("the body took over {} s to arrive", BODY_TIMEOUT.as_secs()),
        )
        .into_response(),
    }
}

/// One audit record per API action, in sbx's JSONL format: who (the
/// token's user, else the account a login reached, else "anonymous"),
/// the route, the path, allowed or blocked, and the error as reason.
async fn audit_layer(
    State(s): State<S>,
    matched: Option<MatchedPath>,
    req: Request,
    next: Next,
) -> Response {
    let op = format!(
        "{} {}",
        req.method(),
        matched.as_ref().map_or("?", MatchedPath::as_str)
    );
    let (parts, body) = req.into_parts();
    let who = auth::bearer(&parts)
        .and_then(|t| s.keys.verify(t).ok())
        .map_or_else(|| "anonymous".to_owned(), |u| u.to_string());
    let target: String = parts.uri.path().chars().take(200).collect();
    let resp = next.run(Request::from_parts(parts, body)).await;
    if op == "GET /healthz" {
        return resp;
    }
    let who = resp
        .extensions()
        .get::<AuditWho>()
        .map_or(who, |w| w.0.clone());
    let ok = resp.status().is_success() || resp.status() == StatusCode::SWITCHING_PROTOCOLS;
    let reason = resp.extensions().get::<AuditReason>().map(|r| r.0.clone());
    let mut rec = Record::new(
        "sbx-server",
        &op,
        &target,
        if ok {
            Outcome::Allowed
        } else {
            Outcome::Blocked
        },
        "api",
    )
    .agent(&who);
    if let Some(r) = &reason {
        rec = rec.reason(r);
    }
    if let Err(e) = s.audit.append(&rec) {
        sbx_core::output::warn(&format!("audit log {}: {e}", s.audit.path().display()));
    }
    resp
}

fn default_state_dir() -> PathBuf {
    sbx_core::audit::default_path()
        .parent()
        .map_or_else(|| PathBuf::from("."), FsPath::to_path_buf)
        .join("server")
}

/// A directory the server owns: made if missing, 0711 so the agent's
/// uid (workspaces) and the cluster's user can pass through, not list.
fn own_dir(p: &FsPath) -> Result<(), ServerError> {
    std::fs::create_dir_all(p).map_err(|e| ServerError::Io(p.to_owned(), e))?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o711))
        .map_err(|e| ServerError::Io(p.to_owned(), e))
}

/// How long a request waits for one of the pool's connections before it
/// is answered 503: a burst over the pool is told at once to come back,
/// instead of queueing behind it (the old 10 s held the client's
/// connection and its slot all that time).
pub const POOL_WAIT: Duration = Duration::from_secs(2);
/// Longest statement (a lock wait included): a stuck query gives its
/// connection back, instead of holding one of the pool's for good.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);

pub fn pool(url: &str, size: usize) -> Result<Pool, ServerError> {
    let mut cfg: tokio_postgres::Config = url
        .parse()
        .map_err(|e| ServerError::Postgres(format!("DATABASE_URL: {e}")))?;
    // Appended: DATABASE_URL's own options stay.
    let opts = format!(
        "{} -c statement_timeout={}",
        cfg.get_options().unwrap_or(""),
        STATEMENT_TIMEOUT.as_millis()
    );
    cfg.options(opts.trim_start());
    let mgr = Manager::from_config(
        cfg,
        tokio_postgres::NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(mgr)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(POOL_WAIT))
        .create_timeout(Some(Duration::from_secs(5)))
        .build()
        .map_err(|e| ServerError::Postgres(e.to_string()))
}

/// Apply the versioned migrations (refinery's table records which ran).
async fn migrate(pool: &Pool) -> Result<(), ServerError> {
    let mut c = pool
        .get()
        .await
        .map_err(|e| ServerError::Postgres(format!("connect: {e}")))?;
    let client: &mut tokio_postgres::Client = &mut c;
    embedded::migrations::runner()
        .run_async(client)
        .await
        .map_err(|e| ServerError::Migrate(e.to_string()))?;
    Ok(())
}

pub async fn serve(
    args: ServeArgs,
    secret: Vec<u8>,
    database_url: Option<String>,
) -> Result<(), ServerError> {
    // Checked before anything is made: a bad file is one line, exit 78.
    let caps = crate::config::Caps {
        cpus: args.max_cpus_per_sandbox,
        memory: args.max_memory_per_sandbox.clone(),
    };
    let default_config = match &args.project_config {
        Some(f) => {
            let text = std::fs::read_to_string(f).map_err(|e| ServerError::Io(f.clone(), e))?;
            let v = serde_json::Value::String(text.clone());
            project_config(&v, &caps).map_err(|e| {
                ServerError::Config(format!("--project-config {}: {}", f.display(), e.message))
            })?;
            Some(text)
        }
        None => None,
    };
    let backend = backend(&args).await?;
    let state_dir = args.state_dir.clone().unwrap_or_else(default_state_dir);
    own_dir(&state_dir)?;
    let projects = state_dir.join("projects");
    own_dir(&projects)?;
    let repo_root = match &args.repo_root {
        Some(r) => Some(
            r.canonicalize()
                .map_err(|e| ServerError::Io(r.to_owned(), e))?,
        ),
        None => None,
    };
    let (cluster, url) = match database_url {
        Some(u) => (None, u),
        None => {
            let dir = state_dir.join("pg");
            let c = tokio::task::spawn_blocking(move || LocalCluster::start(&dir))
                .await
                .map_err(|e| ServerError::Postgres(e.to_string()))??;
            let url = c.url("postgres");
            (Some(c), url)
        }
    };
    let pool = pool(&url, args.db_connections as usize)?;
    migrate(&pool).await?;
    let repo = Repo::new(pool);
    let sandboxes = Sandboxes::new(
        projects,
        args.backup_url.clone(),
        args.backup_pass.clone(),
        caps.clone(),
    )
    .with_backend(backend);
    reconcile(&repo, &sandboxes).await;
    let audit_path = std::env::var_os("SBX_AUDIT_LOG")
        .map_or_else(|| state_dir.join("audit.jsonl"), PathBuf::from);
    let audit = AuditLog::open(&audit_path).map_err(|e| ServerError::Io(audit_path, e))?;
    let keys = Keys::new(&secret);
    // Sessions revoked while an access token of theirs may still be live.
    match repo.ended_sessions(auth::ACCESS_TTL).await {
        Ok(ended) => keys.end_sessions(ended),
        // Fail closed: a server that cannot tell which sessions ended
        // does not start.
        Err(e) => {
            return Err(ServerError::Postgres(format!(
                "loading ended sessions: {}",
                e.message
            )));
        }
    }
    let dummy_hash = auth::hash_password(&auth::new_refresh_token().unwrap_or_default())
        .map_err(|e| ServerError::Postgres(e.message))?;
    let state = Arc::new(AppState {
        repo,
        keys,
        sandboxes,
        audit,
        account: Limiter::new(args.login_limit_account, auth::LIMIT_WINDOW),
        address: Limiter::new(args.login_limit_address, auth::LIMIT_WINDOW),
        registrations: Limiter::new(args.register_limit_address, auth::LIMIT_WINDOW),
        max_projects: args.max_projects,
        max_running: args.max_running,
        repo_root,
        default_config,
        caps,
        dummy_hash,
        hashing: tokio::sync::Semaphore::new(
            std::thread::available_parallelism().map_or(2, std::num::NonZero::get),
        ),
    });
    tokio::spawn(expire_recordings(
        Arc::clone(&state),
        args.session_retention.0,
    ));
    tokio::spawn(stop_idle(Arc::clone(&state), args.idle_stop.0));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| ServerError::Listen(args.listen, e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServerError::Listen(args.listen, e))?;
    // The one line a supervisor (or a test) waits for.
    eprintln!("sbx-server: listening on http://{addr}");
    let limits = sbx_terminal::conn::Limits {
        max: args.max_connections as usize,
        per_address: args
            .max_connections_per_address
            .map_or((args.max_connections as usize / 4).max(1), |n| n as usize),
        // A flood gets no bytes.
        refusal: None,
        admit: None,
    };
    sbx_terminal::conn::serve(listener, router(state), limits, shutdown()).await;
    drop(cluster);
    Ok(())
}

/// Terminal recordings that ended over `age` ago (`--session-retention`):
/// their rows and asciicast files deleted, at start and then hourly.
async fn expire_recordings(s: S, age: std::time::Duration) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(3600));
    loop {
        tick.tick().await;
        let gone = match s.repo.expire_sessions(age).await {
            Ok(g) => g,
            Err(e) => {
                eprintln!(
                    "sbx-server: warning: expiring terminal recordings: {}",
                    e.message
                );
                continue;
            }
        };
        for (project, session) in gone {
            let f = s
                .sandboxes
                .sessions_dir(project)
                .join(format!("{session}.cast"));
            match std::fs::remove_file(&f) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    eprintln!("sbx-server: warning: removing {}: {e}", f.display());
                }
                _ => {}
            }
        }
    }
}

/// Seed 001's inactivity loop: a running project nobody connected to
/// for `after` is stopped the way `POST /stop` stops it (the guest's
/// backup daemon makes its final sync), then `stopped` with reason
/// `idle`. A connection that comes first wins (`claim_idle`); one that
/// comes after is refused with "stopping, retry".
async fn stop_idle(s: S, after: std::time::Duration) {
    let every = (after / 4).clamp(
        std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(60),
    );
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let idle = match s.repo.idle(after).await {
            Ok(i) => i,
            Err(e) => {
                sbx_core::output::warn(&format!("idle check: {}", e.message));
                continue;
            }
        };
        for (user, id) in idle {
            // The project's lock, as every transition takes it.
            let Ok(_held) = owned(&s, user, id).await else {
                continue;
            };
            if !matches!(s.repo.claim_idle(user, id, after).await, Ok(true)) {
                continue;
            }
            // Seed 001: its system state is kept as a snapshot before it
            // stops. A snapshot that fails (a full disk, a backend without
            // them) is audited and the stop goes on: the final backup
            // still keeps the home.
            let state = Arc::clone(&s);
            let snap = blocking(move || state.sandboxes.snapshot(id, Some("idle")))
                .await
                .unwrap_or_else(|e| Err(e.message.into()));
            let what = match &snap {
                Ok(sid) => format!("snapshot {sid}"),
                Err(e) => e.message.clone(),
            };
            idle_record(&s, "idle-snapshot", id, snap.is_ok(), &what);
            let state = Arc::clone(&s);
            let stopped = blocking(move || state.sandboxes.stop(id))
                .await
                .unwrap_or_else(|e| Err(e.message.into()));
            let why = format!("no connection for {} s", after.as_secs());
            idle_record(&s, "idle-stop", id, stopped.is_ok(), &why);
            let _ = match stopped {
                Ok(()) => s
                    .repo
                    .set_status(user, id, "stopped", Some("idle"), None)
                    .await
                    .map(drop),
                Err(reason) => Err(failed(&s, user, id, reason).await),
            };
        }
    }
}

/// One step of the idle loop on project `id`, in the audit log.
fn idle_record(s: &AppState, operation: &str, id: Uuid, ok: bool, reason: &str) {
    let target = id.to_string();
    let outcome = if ok {
        Outcome::Allowed
    } else {
        Outcome::Blocked
    };
    let rec = Record::new("sbx-server", operation, &target, outcome, "idle-stop").reason(reason);
    if let Err(e) = s.audit.append(&rec) {
        sbx_core::output::warn(&format!("audit log {}: {e}", s.audit.path().display()));
    }
}

/// Projects a server left mid-transition (`creating`, `stopping`,
/// `deleting`, `snapshotting`), checked against Docker: a running container makes the project `running`, a stopped one
/// `stopped`; no container, or no engine to ask, `error` with the reason;
/// one left `restoring`, `error` (its home may be half restored).
/// Blindly marked `error`, a sandbox that had come up would run on
/// while its project said it had failed.
/// The backend `--backend` names; a kubeconfig sbx-server cannot use is
/// one line, exit 78, before anything is made.
async fn backend(args: &ServeArgs) -> Result<Box<dyn crate::backend::Backend>, ServerError> {
    match (args.backend, &args.kubeconfig) {
        (crate::BackendKind::Docker, _) => Ok(Box::new(crate::backend::Docker)),
        (crate::BackendKind::Kubernetes, None) => Err(ServerError::Config(
            "--backend kubernetes needs --kubeconfig PATH".into(),
        )),
        (crate::BackendKind::Kubernetes, Some(path)) => {
            let path = path.clone();
            let image = args.kube_image.clone();
            // reqwest's blocking client is made off the async threads.
            tokio::task::spawn_blocking(move || {
                let target = crate::kube::load_kubeconfig(&path)?;
                let api = crate::kube::Api::new(target)?;
                Ok::<_, crate::kube::KubeError>(
                    Box::new(crate::kube::Kube { api, image }) as Box<dyn crate::backend::Backend>
                )
            })
            .await
            .map_err(|e| ServerError::Config(e.to_string()))?
            .map_err(|e| ServerError::Config(format!("--kubeconfig: {e}")))
        }
    }
}

async fn reconcile(repo: &Repo, sandboxes: &Sandboxes) {
    let stuck = match repo.stuck().await {
        Ok(s) => s,
        Err(e) => {
            sbx_core::output::warn(&format!("reconciling projects: {}", e.message));
            return;
        }
    };
    for (user, id, was) in stuck {
        let why = match was.as_str() {
            "stopping" => "the server stopped during a stop",
            "deleting" => "the server stopped during a delete",
            "snapshotting" => "the server stopped during a snapshot",
            "restoring" => "the server stopped during a restore",
            _ => "the server stopped during a start or creation",
        };
        let (status, reason, container) = match sandboxes.container(id) {
            // Its home may be half restored, whatever Docker says: the
            // user stops it (if it runs) and restores again.
            Ok(c) if was == "restoring" => (
                "error",
                Some(format!("{why}: stop it, then restore again")),
                c.map(|c| c.0),
            ),
            Ok(Some((name, true))) => ("running", None, Some(name)),
            Ok(Some((name, false))) => ("stopped", None, Some(name)),
            Ok(None) => (
                "error",
                Some(format!(
                    "{why} and its sandbox does not exist: start or delete it again"
                )),
                None,
            ),
            Err(e) => (
                "error",
                Some(format!(
                    "{why} and Docker did not answer at the next start ({e}): start or delete it again"
                )),
                None,
            ),
        };
        let set = repo
            .set_status(user, id, status, reason.as_deref(), container.as_deref())
            .await;
        let what = reason.as_deref().unwrap_or(status);
        match set {
            Ok(_) => sbx_core::output::warn(&format!("project {id} was `{was}`: {what}")),
            Err(e) => sbx_core::output::warn(&format!("reconciling project {id}: {}", e.message)),
        }
    }
}

async fn shutdown() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    let term = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
