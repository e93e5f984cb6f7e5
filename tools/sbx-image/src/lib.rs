//! The base image's builder (`build-base`: mmdebstrap, the Debian
//! packages, the AI CLIs, the sbx tools) and what it needs of sbx-run: the
//! docker driver, the error type, the interrupt flag. A crate of its own so
//! that scripts/shell can build `sbx-prefetch` in a fraction of sbx-run's
//! compile and start the image's network-bound layers while the tools
//! still compile (issue 40). sbx-run re-exports all of it.
#![forbid(unsafe_code)]

mod api;
pub mod base;
pub mod docker;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use sbx_core::{Exit, SbxError};

/// The shared base image every per-repo image is built FROM.
pub const BASE_IMAGE: &str = "agent-sandbox-base";

/// State directory on the host (build logs, masks, sandboxes' sockets).
pub fn state_dir() -> PathBuf {
    std::env::var_os("XDG_STATE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("/var/tmp"))
        .join("sbx")
}

static INTERRUPTED: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Ctrl-C sets a flag instead of killing sbx-run: short docker calls run
/// in their own process group and finish, long ones (builds, shells) get
/// the signal too and stop; sbx-run then removes what was half made.
pub fn watch_interrupts() -> Arc<AtomicBool> {
    INTERRUPTED
        .get_or_init(|| {
            let flag = Arc::new(AtomicBool::new(false));
            // A second Ctrl-C while the first is being handled ends sbx-run.
            let _ = signal_hook::flag::register_conditional_shutdown(
                signal_hook::consts::SIGINT,
                130,
                Arc::clone(&flag),
            );
            let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&flag));
            flag
        })
        .clone()
}

/// Under CI=true a missing part is a failure, never a warning.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
}

pub fn interrupted() -> bool {
    INTERRUPTED.get().is_some_and(|f| f.load(Ordering::SeqCst))
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{}: no such directory (give the path of a git repository)", .0.display())]
    NoWorkspace(PathBuf),
    #[error("{}: not a directory (give the path of a git repository)", .0.display())]
    NotADirectory(PathBuf),
    #[error("{}: not a git repository (run `git init` there, or give the path of one)", .0.display())]
    NotARepo(PathBuf),
    #[error("docker not found on PATH: install Docker (scripts/prereqs does) or set SBX_DOCKER")]
    NoDockerClient,
    #[error(
        "cannot reach the Docker engine ({0}): start it (`systemctl start docker` or `dockerd &`), or run `sbx-run doctor`"
    )]
    EngineDown(String),
    #[error("`{command}` failed: {message}")]
    Docker { command: String, message: String },
    #[error(
        "container {0} exists but does not belong to {1}: remove or rename it first (sbx-run will not touch it)"
    )]
    ForeignContainer(String, String),
    #[error("{0}")]
    Build(String),
    #[error("interrupted")]
    Interrupted,
    #[error("{path}: {err}", path = .0.display(), err = .1)]
    Io(PathBuf, std::io::Error),
    #[error("the sandbox did not become ready: {0}")]
    NotReady(String),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Config(String),
    #[error(
        "{}: matches [filesystem].blocked but its name is not UTF-8, so it cannot be masked: rename it (nothing was started)",
        .0.display()
    )]
    Unmaskable(PathBuf),
    #[error("{0}")]
    Idmap(String),
    /// A running sandbox without the guest's host API (an image older than
    /// this sbx-run): only the guest starts agent processes under the
    /// sandbox's seccomp filter, so nothing falls back to `docker exec`.
    #[error(
        "{0}: this sandbox has no guest API socket (a base image older than this sbx-run?): run `sbx-run build-base`, then `sbx-run restart`"
    )]
    NoGuest(String),
    /// Workspace data sbx will not act on: a link where a file or directory
    /// must be, a path leading out, a file it cannot parse.
    #[error("{0}")]
    BadWorkspace(String),
    /// What the sandbox shows at a bind target is not what sbx opened as
    /// its source (hostpath::verify): swapped between check and mount.
    #[error(
        "{0}: the sandbox was given something else than this path (it was swapped, likely for a link, while docker mounted it); the sandbox was removed: find what changed it, then start again"
    )]
    Swapped(String),
    /// A masked path in git's objects (gitsecrets.rs).
    #[error("{0}")]
    SecretInGit(String),
    /// Refused by sbx's policy (audited where it is decided).
    #[error("{0}")]
    Denied(String),
    /// No running sandbox or no snapshot to act on.
    #[error("{0}")]
    NoSandbox(String),
    /// A `claude-login:` that could not be refreshed on the host.
    #[error("{0}")]
    LoginRefresh(String),
}

impl SbxError for RunError {
    fn exit(&self) -> Exit {
        match self {
            Self::NoWorkspace(_) | Self::NoSandbox(_) => Exit::NoInput,
            Self::NotADirectory(_) | Self::NotARepo(_) | Self::Usage(_) => Exit::Usage,
            Self::NoDockerClient
            | Self::EngineDown(_)
            | Self::Idmap(_)
            | Self::NoGuest(_)
            | Self::LoginRefresh(_) => Exit::Unavailable,
            Self::Docker { .. } | Self::Build(_) | Self::NotReady(_) => Exit::Software,
            Self::ForeignContainer(..)
            | Self::Swapped(_)
            | Self::SecretInGit(_)
            | Self::Denied(_) => Exit::Denied,
            Self::Interrupted => Exit::Software,
            Self::Config(_) => Exit::Config,
            Self::Unmaskable(_) | Self::BadWorkspace(_) => Exit::DataErr,
            Self::Io(_, e) => sbx_core::error::io_exit(e),
        }
    }
}
