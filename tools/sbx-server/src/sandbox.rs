//! Each project's workspace and sandbox. The workspace is a git repository
//! the server owns under its state dir (made empty, or cloned from a local
//! repository below `--repo-root`), handed to the agent's uid as a
//! developer's checkout is theirs; the sandbox is started, stopped and
//! removed by sbx-run's library, so it has every guard `sbx-run start`
//! gives. Transitions of one project are serialised by a per-project lock.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use sbx_core::cli::CommonArgs;
use uuid::Uuid;

/// The agent's uid and gid in every sandbox.
const AGENT: &str = "1000:1000";

#[derive(Debug)]
pub struct Sandboxes {
    root: PathBuf,
    locks: Mutex<HashMap<Uuid, Arc<tokio::sync::Mutex<()>>>>,
}

/// sbx-run's library reports on stdout/stderr only without -q.
fn quiet() -> CommonArgs {
    CommonArgs {
        quiet: true,
        ..Default::default()
    }
}

fn git(dir: &Path, args: &[&str]) -> Result<(), String> {
    let mut c = Command::new("git");
    c.args([
        "-c",
        "user.name=sbx-server",
        "-c",
        "user.email=sbx-server@localhost",
    ])
    .args(args)
    .current_dir(dir);
    run(&mut c, &format!("git {}", args.first().unwrap_or(&"")))
}

/// Run `c`; its stderr is the error.
fn run(c: &mut Command, what: &str) -> Result<(), String> {
    let out = c
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Sandboxes {
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// The lock that serialises transitions of project `id`.
    pub fn lock(&self, id: Uuid) -> Arc<tokio::sync::Mutex<()>> {
        let mut l = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(l.entry(id).or_default())
    }

    pub fn forget(&self, id: Uuid) {
        self.locks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    fn project_dir(&self, id: Uuid) -> PathBuf {
        self.root.join(id.to_string())
    }

    /// The workspace of project `id`; its directory name is what sbx-run
    /// names the sandbox after.
    pub fn workspace(&self, id: Uuid) -> PathBuf {
        self.project_dir(id)
            .join(format!("project-{}", id.simple()))
    }

    /// Make the workspace: a clone of `repo`, or a fresh repository with
    /// one empty commit, given to the agent's uid. Blocking.
    pub fn create(&self, id: Uuid, repo: Option<&Path>) -> Result<(), String> {
        let dir = self.project_dir(id);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let ws = self.workspace(id);
        let made = match repo {
            Some(src) => {
                let (s, w) = (src.to_string_lossy(), ws.to_string_lossy());
                // No hard links: the project's objects must not be the
                // source repository's inodes, which the agent would share.
                git(&dir, &["clone", "--quiet", "--no-hardlinks", "--", &s, &w])
            }
            None => std::fs::create_dir(&ws)
                .map_err(|e| format!("{}: {e}", ws.display()))
                .and_then(|()| git(&ws, &["init", "--quiet", "-b", "main"]))
                .and_then(|()| {
                    git(
                        &ws,
                        &["commit", "--quiet", "--allow-empty", "-m", "New project"],
                    )
                }),
        };
        let given =
            made.and_then(|()| run(Command::new("chown").args(["-R", AGENT]).arg(&ws), "chown"));
        if given.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        given
    }

    /// Start the sandbox (its `.agent-sandbox` made on the first start);
    /// the container's name. Blocking.
    pub fn start(&self, id: Uuid) -> Result<String, String> {
        let ws = self.workspace(id);
        let c = quiet();
        if !ws.join(sbx_core::config::DIR).exists() {
            sbx_run::lifecycle::init(&c, Some(ws.clone()), false, None)
                .map_err(|e| sbx_core::entry::chain(&*e))?;
        }
        let w = sbx_run::lifecycle::start(&c, Some(ws), None)
            .map_err(|e| sbx_core::entry::chain(&*e))?;
        Ok(w.names.container.clone())
    }

    /// Project `id`'s sandbox as Docker sees it: its container's name and
    /// whether it runs, None when there is no container, Err when the
    /// engine did not answer. Blocking.
    pub fn container(&self, id: Uuid) -> Result<Option<(String, bool)>, String> {
        let ws = self.workspace(id);
        // sbx-run names a sandbox after its workspace's canonical path.
        let name = sbx_run::names::Names::new(&ws.canonicalize().unwrap_or(ws), None).container;
        let found = sbx_run::docker::inspect("container", &name).map_err(|e| e.to_string())?;
        Ok(found.map(|c| {
            let running = c["State"]["Running"].as_bool() == Some(true);
            (name, running)
        }))
    }

    /// Stop the sandbox: the guest's backup daemon makes its final sync
    /// when backups are configured. Blocking.
    pub fn stop(&self, id: Uuid) -> Result<(), String> {
        sbx_run::lifecycle::stop(&quiet(), Some(self.workspace(id)), None)
            .map(drop)
            .map_err(|e| sbx_core::entry::chain(&*e))
    }

    /// Stop and remove the sandbox, its volumes and image, then the
    /// workspace. Blocking.
    pub fn remove(&self, id: Uuid) -> Result<(), String> {
        let ws = self.workspace(id);
        if ws.exists() {
            self.stop(id)?;
            sbx_run::lifecycle::rm(&quiet(), Some(ws), true, None)
                .map_err(|e| sbx_core::entry::chain(&*e))?;
        }
        let dir = self.project_dir(id);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("{}: {e}", dir.display()))
            }
            _ => Ok(()),
        }
    }
}

impl Sandboxes {
    /// Where project `id`'s terminal sessions are recorded: beside the
    /// workspace, in the server's part of the project's directory, where
    /// the agent (which owns only the workspace) cannot write.
    pub fn sessions_dir(&self, id: Uuid) -> PathBuf {
        self.project_dir(id).join("sessions")
    }

    /// The guest API socket of project `id`'s sandbox and the agent's
    /// working directory in it. Blocking.
    pub fn terminal_target(&self, id: Uuid) -> Result<(PathBuf, String), String> {
        let ws = sbx_run::workspace::Workspace::open(&quiet(), Some(self.workspace(id)))
            .map_err(|e| sbx_core::entry::chain(&*e))?;
        Ok((sbx_run::guestexec::socket_for(&ws), ws.workdir()))
    }
}
