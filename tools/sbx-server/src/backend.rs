//! The seam between the Project Service and what runs its sandboxes. The
//! service (sandbox.rs) owns projects, their workspaces, configs and
//! locks; a `Backend` owns the sandboxes: Docker today, through sbx-run's
//! library, so each has every guard `sbx-run start` gives; or Kubernetes
//! (kube.rs), which applies what `sbx-run show-run --format k8s` prints
//! (docs/kubernetes.md).
//!
//! Every call is blocking: callers run it on a blocking thread.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use sbx_core::cli::CommonArgs;

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
    fn create(&self, ws: &Path) -> Result<(), String>;
    /// Start the sandbox (made or made anew as its config asks); its name.
    fn start(&self, ws: &Path) -> Result<String, String>;
    /// Stop it; the guest's stop (services, the final backup) runs.
    fn stop(&self, ws: &Path) -> Result<(), String>;
    /// Remove it and what it owns (volumes, image).
    fn delete(&self, ws: &Path) -> Result<(), String>;
    /// Its name and whether it runs; None when there is none; Err when
    /// the engine did not answer.
    fn status(&self, ws: &Path) -> Result<Option<(String, bool)>, String>;
    /// Run `argv` as the agent through the guest, as `sbx-run exec` does.
    fn exec(&self, ws: &Path, argv: &[OsString], client: &str) -> Result<Exec, String>;
    /// Where a terminal (PTY) reaches the guest, and the agent's working
    /// directory there.
    fn terminal(&self, ws: &Path) -> Result<(PathBuf, String), String>;
    /// Keep the running sandbox as a snapshot (root's changes included).
    fn snapshot(&self, ws: &Path, tag: Option<&str>) -> Result<(), String>;
}

/// sbx-run's library reports on stdout/stderr only without -q.
fn quiet() -> CommonArgs {
    CommonArgs {
        quiet: true,
        ..Default::default()
    }
}

fn chain(e: sbx_core::error::BoxError) -> String {
    sbx_core::entry::chain(&*e)
}

/// Sandboxes as Docker containers, by sbx-run's library.
#[derive(Debug, Default)]
pub struct Docker;

impl Backend for Docker {
    fn create(&self, ws: &Path) -> Result<(), String> {
        if ws.join(sbx_core::config::DIR).exists() {
            return Ok(());
        }
        sbx_run::lifecycle::init(&quiet(), Some(ws.to_owned()), false, None)
            .map(drop)
            .map_err(chain)
    }

    fn start(&self, ws: &Path) -> Result<String, String> {
        let w = sbx_run::lifecycle::start(&quiet(), Some(ws.to_owned()), None).map_err(chain)?;
        Ok(w.names.container.clone())
    }

    fn stop(&self, ws: &Path) -> Result<(), String> {
        sbx_run::lifecycle::stop(&quiet(), Some(ws.to_owned()), None)
            .map(drop)
            .map_err(chain)
    }

    fn delete(&self, ws: &Path) -> Result<(), String> {
        // Deleting a project is the user's explicit choice to lose its
        // home: `rm --volumes --force`, not the CLI's backup check.
        sbx_run::lifecycle::rm(&quiet(), Some(ws.to_owned()), true, true, None)
            .map(drop)
            .map_err(chain)
    }

    fn status(&self, ws: &Path) -> Result<Option<(String, bool)>, String> {
        // sbx-run names a sandbox after its workspace's canonical path.
        let canonical = ws.canonicalize().unwrap_or_else(|_| ws.to_owned());
        let name = sbx_run::names::Names::new(&canonical, None).container;
        let found = sbx_run::docker::inspect("container", &name).map_err(|e| e.to_string())?;
        Ok(found.map(|c| {
            let running = c["State"]["Running"].as_bool() == Some(true);
            (name, running)
        }))
    }

    fn exec(&self, ws: &Path, argv: &[OsString], client: &str) -> Result<Exec, String> {
        let w =
            sbx_run::workspace::Workspace::open(&quiet(), Some(ws.to_owned())).map_err(chain)?;
        let req = sbx_run::guestexec::exec_request(&w, argv, client, false);
        let conn = sbx_run::guestexec::connect(&sbx_run::guestexec::socket_for(&w))
            .map_err(|e| e.to_string())?;
        let mut x = Exec::default();
        let done =
            sbx_run::guestexec::run_with(conn, req, None, &mut x.stdout, &mut x.stderr, false)
                .map_err(|e| e.to_string())?;
        x.status = done.status;
        Ok(x)
    }

    fn terminal(&self, ws: &Path) -> Result<(PathBuf, String), String> {
        let w =
            sbx_run::workspace::Workspace::open(&quiet(), Some(ws.to_owned())).map_err(chain)?;
        Ok((sbx_run::guestexec::socket_for(&w), w.workdir()))
    }

    fn snapshot(&self, ws: &Path, tag: Option<&str>) -> Result<(), String> {
        sbx_run::snapshot::snapshot(&quiet(), Some(ws.to_owned()), tag)
            .map(drop)
            .map_err(chain)
    }
}
