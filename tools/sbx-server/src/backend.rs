//! The seam between the Project Service and what runs its sandboxes. The
//! service (sandbox.rs) owns projects, their workspaces, configs and
//! locks; a `Backend` owns the sandboxes: Docker today, through sbx-run's
//! library, so each has every guard `sbx-run start` gives; or Kubernetes
//! (kube.rs), which applies what `sbx-run show-run --format k8s` prints
//! (docs/kubernetes.md).
//!
//! Every call is blocking: callers run it on a blocking thread.

use std::ffi::OsString;
use std::path::Path;

use sbx_core::Exit;
use sbx_core::cli::CommonArgs;

/// What kind of failure a backend met: the API answers each with its
/// own status (error.rs), so a client can tell "try later" from "this
/// backend cannot" from "fix the project".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The sandbox (or what it needs) is not there.
    NotFound,
    /// Another writer changed it first.
    Conflict,
    /// The sandbox is there but not running (a pod not scheduled or
    /// started yet, or gone with a suspend).
    NotRunning,
    /// The engine or API server did not answer, or refused the server.
    Unavailable,
    /// This backend does not do that (yet).
    Unsupported,
    /// The project's config or repository cannot run on this backend.
    Config,
    /// The sandbox failed otherwise.
    Other,
}

/// A backend's failure: its kind and one line for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendError {
    pub kind: ErrorKind,
    pub message: String,
}

impl BackendError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// sbx-run's error, kind by its exit code (STYLE.md's table).
    pub fn from_sbx(e: &dyn sbx_core::error::SbxError) -> Self {
        let kind = match e.exit() {
            Exit::NoInput => ErrorKind::NotFound,
            Exit::Unavailable | Exit::TempFail => ErrorKind::Unavailable,
            Exit::Config | Exit::Usage | Exit::DataErr => ErrorKind::Config,
            _ => ErrorKind::Other,
        };
        Self::new(kind, sbx_core::entry::chain(e))
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BackendError {}

/// The service's own failures (git, files) are the sandbox's "other".
impl From<String> for BackendError {
    fn from(message: String) -> Self {
        Self::new(ErrorKind::Other, message)
    }
}

pub type Result<T, E = BackendError> = std::result::Result<T, E>;

/// A command's outcome in the sandbox, through the guest.
#[derive(Debug, Clone, Default)]
pub struct Exec {
    pub status: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// What the Project Service asks of the engine, per workspace (the
/// project's checkout, which names its sandbox).
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Make the sandbox's files in a new workspace (`.agent-sandbox`),
    /// when it has none.
    fn create(&self, ws: &Path) -> Result<()>;
    /// Start the sandbox (made or made anew as its config asks); its name.
    fn start(&self, ws: &Path) -> Result<String>;
    /// Stop it; the guest's stop (services, the final backup) runs.
    fn stop(&self, ws: &Path) -> Result<()>;
    /// Remove it and what it owns (volumes, image).
    fn delete(&self, ws: &Path) -> Result<()>;
    /// Its name and whether it runs; None when there is none; Err when
    /// the engine did not answer.
    fn status(&self, ws: &Path) -> Result<Option<(String, bool)>>;
    /// Run `argv` as the agent through the guest, as `sbx-run exec` does.
    fn exec(&self, ws: &Path, argv: &[OsString], client: &str) -> Result<Exec>;
    /// The sandbox's terminal (tmux as the agent, through the guest): the
    /// guest API's socket to open after the viewer's hello (Docker), or
    /// a terminal connected already (Kubernetes: the API server's exec,
    /// so that its refusal is the HTTP answer). Called on a blocking
    /// thread of the server's runtime.
    fn terminal(&self, ws: &Path) -> Result<sbx_terminal::Target>;
    /// Keep the sandbox as a snapshot: on Docker its system state (root's
    /// changes included) and a home backup; on Kubernetes its claims
    /// (docs/kubernetes.md). The snapshot's id.
    fn snapshot(&self, ws: &Path, tag: Option<&str>) -> Result<String>;
    /// Make the sandbox anew from snapshot `id` (None: the newest) and
    /// start it; its name.
    fn start_from_snapshot(&self, ws: &Path, id: Option<&str>) -> Result<String>;
    /// Whether it publishes a sandbox's sshd (projects made with SSH).
    fn ssh(&self) -> bool {
        false
    }
    /// Whether its snapshots are images that `[lifecycle] keep-snapshots`
    /// prunes (Docker); a cluster's are not, and its manifests refuse
    /// the key.
    fn prunes_snapshots(&self) -> bool {
        false
    }
    /// Where the running sandbox's sshd is published: (host, port); None
    /// where the backend publishes none.
    fn ssh_endpoint(&self, _ws: &Path) -> Result<Option<(String, u16)>> {
        Ok(None)
    }
}

/// sbx-run's library reports on stdout/stderr only without -q.
fn quiet() -> CommonArgs {
    CommonArgs {
        quiet: true,
        ..Default::default()
    }
}

fn chain(e: sbx_core::error::BoxError) -> BackendError {
    BackendError::from_sbx(&*e)
}

/// No guest API to reach: the sandbox is not running.
fn unavailable(e: impl std::fmt::Display) -> BackendError {
    BackendError::new(ErrorKind::Unavailable, e.to_string())
}

/// Sandboxes as Docker containers, by sbx-run's library.
#[derive(Debug, Default)]
pub struct Docker;

impl Backend for Docker {
    fn create(&self, ws: &Path) -> Result<()> {
        if ws.join(sbx_core::config::DIR).exists() {
            return Ok(());
        }
        sbx_run::lifecycle::init(&quiet(), Some(ws.to_owned()), false, None)
            .map(drop)
            .map_err(chain)
    }

    fn start(&self, ws: &Path) -> Result<String> {
        let w = sbx_run::lifecycle::start(&quiet(), Some(ws.to_owned()), None).map_err(chain)?;
        Ok(w.names.container.clone())
    }

    fn stop(&self, ws: &Path) -> Result<()> {
        sbx_run::lifecycle::stop(&quiet(), Some(ws.to_owned()), None)
            .map(drop)
            .map_err(chain)
    }

    fn delete(&self, ws: &Path) -> Result<()> {
        // Deleting a project is the user's explicit choice to lose its
        // home: `rm --volumes --force`, not the CLI's backup check.
        sbx_run::lifecycle::rm(&quiet(), Some(ws.to_owned()), true, true, None)
            .map(drop)
            .map_err(chain)
    }

    fn status(&self, ws: &Path) -> Result<Option<(String, bool)>> {
        // sbx-run names a sandbox after its workspace's canonical path.
        let canonical = ws.canonicalize().unwrap_or_else(|_| ws.to_owned());
        let name = sbx_run::names::Names::new(&canonical, None).container;
        let found =
            sbx_run::docker::inspect("container", &name).map_err(|e| BackendError::from_sbx(&e))?;
        Ok(found.map(|c| {
            let running = c["State"]["Running"].as_bool() == Some(true);
            (name, running)
        }))
    }

    fn exec(&self, ws: &Path, argv: &[OsString], client: &str) -> Result<Exec> {
        let w =
            sbx_run::workspace::Workspace::open(&quiet(), Some(ws.to_owned())).map_err(chain)?;
        let req = sbx_run::guestexec::exec_request(&w, argv, client, false);
        let conn = sbx_run::guestexec::connect(&sbx_run::guestexec::socket_for(&w))
            .map_err(unavailable)?;
        let mut x = Exec::default();
        let done =
            sbx_run::guestexec::run_with(conn, req, None, &mut x.stdout, &mut x.stderr, false)
                .map_err(|e| BackendError::from(e.to_string()))?;
        x.status = done.status;
        Ok(x)
    }

    fn terminal(&self, ws: &Path) -> Result<sbx_terminal::Target> {
        let w =
            sbx_run::workspace::Workspace::open(&quiet(), Some(ws.to_owned())).map_err(chain)?;
        let socket = sbx_run::guestexec::socket_for(&w);
        if !socket.exists() {
            return Err(unavailable(
                "the sandbox has no guest API: stop and start it again",
            ));
        }
        Ok(sbx_terminal::Target::Guest {
            socket,
            workdir: w.workdir(),
        })
    }

    fn snapshot(&self, ws: &Path, tag: Option<&str>) -> Result<String> {
        sbx_run::snapshot::snapshot(&quiet(), Some(ws.to_owned()), tag).map_err(chain)?;
        let w =
            sbx_run::workspace::Workspace::open(&quiet(), Some(ws.to_owned())).map_err(chain)?;
        sbx_run::snapshot::record(&w, None)
            .map(|r| r.id)
            .map_err(|e| BackendError::from_sbx(&e))
    }

    fn start_from_snapshot(&self, ws: &Path, id: Option<&str>) -> Result<String> {
        let w = sbx_run::lifecycle::start_from_snapshot(&quiet(), Some(ws.to_owned()), id)
            .map_err(chain)?;
        Ok(w.names.container.clone())
    }

    fn ssh(&self) -> bool {
        true
    }

    fn prunes_snapshots(&self) -> bool {
        true
    }

    fn ssh_endpoint(&self, ws: &Path) -> Result<Option<(String, u16)>> {
        sbx_run::ssh::endpoint_of(&quiet(), ws.to_owned())
            .map(Some)
            .map_err(chain)
    }
}
