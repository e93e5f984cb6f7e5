//! The server's errors: at start (one line and an exit code from STYLE.md)
//! and per request (a status and a JSON `{error: {code, message}}`).

use std::path::PathBuf;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sbx_core::Exit;
use sbx_core::error::SbxError;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0}")]
    Secret(String),
    #[error("{0}")]
    Config(String),
    #[error("{0}: {1}")]
    Io(PathBuf, #[source] std::io::Error),
    #[error("postgres: {0}")]
    Postgres(String),
    #[error("migrations: {0}")]
    Migrate(String),
    #[error("listen on {0}: {1}")]
    Listen(std::net::SocketAddr, #[source] std::io::Error),
}

impl SbxError for ServerError {
    fn exit(&self) -> Exit {
        match self {
            Self::Secret(_) | Self::Config(_) => Exit::Config,
            Self::Io(_, e) => sbx_core::error::io_exit(e),
            Self::Postgres(_) | Self::Migrate(_) => Exit::Unavailable,
            Self::Listen(..) => Exit::OsErr,
        }
    }
}

/// One failed request: its status, a stable code clients can match, and a
/// message for people. Also what the audit record's reason says.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub retry_after: Option<u64>,
}

/// Handed from a response to the audit layer: why a request failed.
#[derive(Debug, Clone)]
pub struct AuditReason(pub String);

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// Also for another user's project: a 403 would confirm it exists.
    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", "no such project")
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// 503 with Retry-After: the server is overloaded, not broken.
    pub fn busy(what: &str) -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            format!("{what}: the server is busy, try again in a moment"),
        );
        e.retry_after = Some(1);
        e
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": {"code": self.code, "message": self.message}});
        let mut r = (self.status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r.extensions_mut()
            .insert(AuditReason(format!("{}: {}", self.code, self.message)));
        r
    }
}

/// A database failure: 503 when the connection is the problem (the pool
/// reconnects), else 500. The details go to the log, not the client.
impl From<tokio_postgres::Error> for ApiError {
    fn from(e: tokio_postgres::Error) -> Self {
        sbx_core::output::warn(&format!("postgres: {e}"));
        if e.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED) {
            // statement_timeout: the database is slow or a row is locked.
            return Self::busy("the database took too long");
        }
        if e.is_closed() || e.code().is_none() {
            Self::unavailable("the database is unavailable; try again")
        } else {
            Self::internal("database error")
        }
    }
}

impl From<deadpool_postgres::PoolError> for ApiError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        if let deadpool_postgres::PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) = e {
            return Self::busy("every database connection is in use");
        }
        sbx_core::output::warn(&format!("postgres pool: {e}"));
        Self::unavailable("the database is unavailable; try again")
    }
}

/// A backend's failure by its kind: the sandbox's absence 404, another
/// writer 409, an engine or API server that is down or refuses the
/// server 503, what the backend cannot do 501, a project it cannot run
/// 422; any other failure of the sandbox 503 as before.
impl From<crate::backend::BackendError> for ApiError {
    fn from(e: crate::backend::BackendError) -> Self {
        use crate::backend::ErrorKind::*;
        let (status, code) = match e.kind {
            NotFound => (StatusCode::NOT_FOUND, "sandbox_not_found"),
            Conflict => (StatusCode::CONFLICT, "sandbox_conflict"),
            NotRunning => (StatusCode::CONFLICT, "not_running"),
            Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "backend_unavailable"),
            Unsupported => (StatusCode::NOT_IMPLEMENTED, "unsupported"),
            Config => (StatusCode::UNPROCESSABLE_ENTITY, "sandbox_config"),
            Other => (StatusCode::SERVICE_UNAVAILABLE, "sandbox_failed"),
        };
        Self::new(status, code, e.message)
    }
}
