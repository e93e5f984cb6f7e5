//! sbx-server: the multi-tenant Project Service of seed 001. A REST API
//! (axum) with JWT auth over a real Postgres, where each project is an sbx
//! sandbox driven through sbx-run's library, never a shell-out, so its
//! guards are the ones `sbx-run start` gives.
#![forbid(unsafe_code)]

pub mod api;
pub mod auth;
pub mod backend;
pub mod config;
pub mod error;
pub mod kube;
pub mod pg;
pub mod repo;
pub mod sandbox;
pub mod terminal;
pub mod web;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};
use sbx_core::Exit;
use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;

pub use error::ServerError;

/// Smallest `JWT_SECRET` accepted: HS256's key should be as long as its hash.
pub const MIN_SECRET: usize = 32;

#[derive(Debug, Parser)]
#[command(
    name = "sbx-server",
    version,
    about = "The multi-tenant Project Service: REST API, JWT auth, Postgres, one sbx sandbox per project",
    long_about = "The multi-tenant Project Service: REST API, JWT auth, Postgres, one sbx sandbox per project.\n\n\
        Users register and log in (argon2id passwords, 15-minute HS256 access tokens, 30-day \
        rotating refresh tokens stored hashed); each project is a workspace the server owns under \
        its state directory and an sbx sandbox started through sbx-run's library. Every query is \
        scoped to the token's user: another user's project is a 404.\n\n\
        Environment: JWT_SECRET (required, at least 32 bytes), DATABASE_URL (optional: without \
        it the server runs its own Postgres cluster in its state directory, unix socket only), \
        SBX_AUDIT_LOG (default: audit.jsonl in the state directory)."
)]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Serve the API until SIGINT or SIGTERM.
    Serve(ServeArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on (plain HTTP: keep it on loopback, behind a TLS proxy).
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: SocketAddr,
    /// Where the server keeps its database cluster, project workspaces and
    /// audit log [default: $XDG_STATE_HOME/sbx/server].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Projects one user may have.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub max_projects: u32,
    /// Sandboxes one user may have running (or starting) at once.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub max_running: u32,
    /// Failed logins per account in 15 minutes before it is refused (429).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub login_limit_account: u32,
    /// Failed logins and registrations per client address in 15 minutes
    /// before it is refused (429).
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub login_limit_address: u32,
    /// Registrations (taken or not) per client address in 15 minutes
    /// before it is refused (429): each account brings its own project
    /// and sandbox quotas.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub register_limit_address: u32,
    /// Local repositories a project's `repo` may name: absolute paths below
    /// this directory. Without it, `repo` is refused.
    #[arg(long, value_name = "DIR")]
    pub repo_root: Option<PathBuf>,
    /// Connections open at once; one over is closed when accepted. A
    /// request's head has 10 s to arrive, an idle connection 10 s to send
    /// its next.
    #[arg(long, value_name = "N", default_value_t = 512,
        value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Connections one client address (an IPv6 client's /64) may have
    /// open at once [default: a quarter of --max-connections]. The
    /// address is the TCP peer's: behind a reverse proxy, every client
    /// is the proxy; there, set it to --max-connections and limit
    /// clients at the proxy.
    #[arg(long, value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_address: Option<u32>,
    /// Connections to Postgres the server holds at most. A request that
    /// waits 2 s for one is answered 503 (busy: retry); a statement is
    /// cancelled after 10 s, so a stuck one gives its connection back.
    #[arg(long, value_name = "N", default_value_t = 16,
        value_parser = clap::value_parser!(u32).range(1..))]
    pub db_connections: u32,
    /// The backup store of every project's home (s3://, gs://, file://;
    /// a file:// path is inside each sandbox): each project backs up to
    /// `URL/projects/<id>`. Without it, snapshot, restore and
    /// backup-status answer 409.
    #[arg(long, value_name = "URL")]
    pub backup_url: Option<sbx_core::config::StoreUrl>,
    /// A variable of the server's environment every sandbox gets, for the
    /// backup store's credentials (e.g. AWS_ACCESS_KEY_ID); repeatable.
    #[arg(long, value_name = "NAME")]
    pub backup_pass: Vec<String>,
    /// The `.agent-sandbox/config.toml` of a project whose request gives
    /// none (default: sbx's template); checked like a request's.
    #[arg(long, value_name = "FILE")]
    pub project_config: Option<PathBuf>,
    /// CPUs one sandbox may have: a config asking for more is refused
    /// (409); one asking for nothing gets at most this.
    #[arg(long, value_name = "N", default_value_t = 2.0)]
    pub max_cpus_per_sandbox: f64,
    /// Memory one sandbox may have (docker's notation: 512m, 4g): a
    /// config asking for more is refused (409); one asking for nothing
    /// gets at most this.
    #[arg(long, value_name = "SIZE", default_value = "4g", value_parser = sbx_core::config::Size::parse)]
    pub max_memory_per_sandbox: sbx_core::config::Size,
    /// How long a terminal session's recording (its asciicast file and
    /// its row) is kept after the session ends (e.g. 30d, 12h); older
    /// ones are deleted at start and hourly.
    #[arg(long, value_name = "DURATION", default_value = "90d")]
    pub session_retention: sbx_core::config::Interval,
    /// Stop a running project nobody has connected to for this long (no
    /// terminal open): final backup, then stop, status `stopped` with
    /// reason `idle` (seed 001's inactivity check; e.g. 30m, 2h).
    #[arg(long, value_name = "DURATION", default_value = "30m")]
    pub idle_stop: sbx_core::config::Interval,
    /// What runs the sandboxes: `docker` on this machine, or `kubernetes`:
    /// agent-sandbox `Sandbox` objects applied through the API server
    /// of --kubeconfig (docs/kubernetes.md).
    #[arg(long, value_enum, default_value_t = BackendKind::Docker)]
    pub backend: BackendKind,
    /// The kubeconfig of `--backend kubernetes` (its current context: an
    /// https server, its CA and a ServiceAccount token).
    #[arg(long, value_name = "PATH", required_if_eq("backend", "kubernetes"))]
    pub kubeconfig: Option<PathBuf>,
    /// The image a cluster pulls for sandboxes (the base image pushed to
    /// its registry) [default: sbx's local image name].
    #[arg(long, value_name = "IMAGE")]
    pub kube_image: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    Docker,
    Kubernetes,
}

pub fn command() -> clap::Command {
    Cli::command()
}

pub fn run(cli: Cli) -> Result<ExitCode, BoxError> {
    match cli.cmd {
        Cmd::Serve(args) => {
            let secret = jwt_secret(std::env::var_os("JWT_SECRET"))?;
            let database_url = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty());
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| ServerError::Io("tokio runtime".into(), e))?;
            rt.block_on(api::serve(args, secret, database_url))?;
            Ok(Exit::Ok.into())
        }
    }
}

/// The signing key, refused (exit 78) when missing or shorter than
/// [`MIN_SECRET`] bytes: a short HMAC key can be brute-forced offline from
/// any token.
fn jwt_secret(v: Option<std::ffi::OsString>) -> Result<Vec<u8>, ServerError> {
    use std::os::unix::ffi::OsStringExt;
    match v.map(OsStringExt::into_vec) {
        Some(s) if s.len() >= MIN_SECRET => Ok(s),
        Some(s) => Err(ServerError::Secret(format!(
            "JWT_SECRET is {} bytes: it must be at least {MIN_SECRET} (e.g. `head -c 48 /dev/urandom | base64`)",
            s.len()
        ))),
        None => Err(ServerError::Secret(format!(
            "JWT_SECRET is not set: set it to a secret of at least {MIN_SECRET} bytes (e.g. `head -c 48 /dev/urandom | base64`)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_length_is_checked() {
        for (v, ok) in [
            (None, false),
            (Some(""), false),
            (Some("x".repeat(31).leak() as &str), false),
            (Some("x".repeat(32).leak() as &str), true),
        ] {
            assert_eq!(jwt_secret(v.map(Into::into)).is_ok(), ok, "{v:?}");
        }
    }
}
