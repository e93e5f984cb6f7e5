//! The workspace a sandbox is for: a git repository, its canonical path
//! (the source of every name), and its validated config, all settled before
//! any docker command runs.

use std::path::{Path, PathBuf};

use sbx_core::cli::CommonArgs;
use sbx_core::config::{self, Loaded};

use crate::RunError;
use crate::names::Names;

/// The agent's uid and gid inside every sandbox (the image's `agent`).
pub const AGENT_ID: u32 = 1000;

#[derive(Debug, Clone)]
pub struct Workspace {
    pub path: PathBuf,
    pub names: Names,
    pub loaded: Loaded,
    /// The workspace directory's owner on the host (uid, gid).
    pub owner: (u32, u32),
    /// Branch mode: the branch whose shelf worktree is the workdir.
    pub branch: Option<String>,
}

impl Workspace {
    /// Resolve and check the path, then load its config (exit 78 on error).
    pub fn open(
        common: &CommonArgs,
        path: Option<PathBuf>,
    ) -> Result<Self, sbx_core::error::BoxError> {
        let path = resolve(path)?;
        let env_config = std::env::var_os("SBX_CONFIG")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let loaded = config::discover(common.config.as_deref(), env_config.as_deref(), &path)?;
        let ws = Self::with_config(path, loaded);
        // Clone mode: the sandbox is the one of the branch the host is on
        // (a detached HEAD leaves none: start refuses, branch::precheck).
        if ws.clone_mode() {
            let head = host_branch(&ws.path);
            return Ok(ws.with_branch(head.as_deref()));
        }
        Ok(ws)
    }

    /// `[sandbox] workspace = "clone"`: the host checkout is read-only in
    /// the sandbox, which works on its own clone on the shelf.
    pub fn clone_mode(&self) -> bool {
        self.loaded.config.clone_mode()
    }

    pub fn with_config(path: PathBuf, loaded: Loaded) -> Self {
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(&path)
            .map(|m| (m.uid(), m.gid()))
            .unwrap_or((AGENT_ID, AGENT_ID));
        Self {
            names: Names::new(&path, None),
            path,
            loaded,
            owner,
            branch: None,
        }
    }

    /// The same workspace in branch mode (its own container, network,
    /// home and labels; the workdir is the branch's shelf worktree).
    /// `None` keeps what `open` chose (clone mode's current branch).
    pub fn with_branch(mut self, branch: Option<&str>) -> Self {
        if branch.is_none() {
            return self;
        }
        self.names = Names::new(&self.path, branch);
        self.branch = branch.map(str::to_owned);
        self
    }

    /// The container's working directory: the workspace in bind mode, the
    /// branch's worktree on the repo shelf in branch mode.
    pub fn workdir(&self) -> String {
        match &self.branch {
            Some(b) => crate::branch::worktree_dir(b),
            None => self.target(),
        }
    }

    /// True when the agent sees the workspace through an idmapped mount:
    /// the owner is not the agent's uid and gid.
    pub fn idmapped(&self) -> bool {
        self.owner != (AGENT_ID, AGENT_ID)
    }

    /// What docker binds at /workspace/<repo>: the repository itself, or
    /// the idmapped view of it that `prepare_mount` makes.
    pub fn mount_source(&self) -> PathBuf {
        if self.idmapped() {
            idmap_dir(&self.names.container)
        } else {
            self.path.clone()
        }
    }

    /// What docker binds at `/scratch` (SCRATCH_TARGET): the workspace's
    /// chat scratch root, or its idmapped view (as for the workspace).
    pub fn scratch_source(&self) -> PathBuf {
        if self.idmapped() {
            scratch_view_dir(&self.names.container)
        } else {
            scratch_root(&self.names.hash)
        }
    }

    /// Where the workspace is mounted inside the sandbox.
    pub fn target(&self) -> String {
        format!("/workspace/{}", self.dir_name())
    }

    /// The directory name as it is (spaces and unicode kept).
    pub fn dir_name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "workspace".into())
    }

    pub fn config_dir(&self) -> PathBuf {
        self.path.join(config::DIR)
    }
}

/// The branch the host checkout is on, from `.git/HEAD` read as data
/// (opened beneath the workspace, no link followed, a few bytes): no git
/// runs, so nothing the repository configures does. `None` on a detached
/// HEAD or anything unexpected.
pub fn host_branch(path: &Path) -> Option<String> {
    use std::io::Read;
    let root = sbx_sys::beneath::Root::open(path).ok()?;
    let mut text = String::new();
    root.open_read(Path::new(".git/HEAD"))
        .ok()?
        .take(4096)
        .read_to_string(&mut text)
        .ok()?;
    let name = text.strip_prefix("ref: refs/heads/")?.strip_suffix('\n')?;
    (!name.is_empty() && !name.contains(['\n', '\0'])).then(|| name.to_owned())
}

/// Canonical path of a git work tree (a `.git` directory or file).
pub fn resolve(path: Option<PathBuf>) -> Result<PathBuf, RunError> {
    let given = match path {
        Some(p) => p,
        None => std::env::current_dir().map_err(|e| RunError::Io(".".into(), e))?,
    };
    let meta = std::fs::metadata(&given).map_err(|_| RunError::NoWorkspace(given.clone()))?;
    if !meta.is_dir() {
        return Err(RunError::NotADirectory(given));
    }
    let canonical = given
        .canonicalize()
        .map_err(|e| RunError::Io(given.clone(), e))?;
    // From a subdirectory, the sandbox is for the whole repository, as git sees it.
    let found = canonical
        .ancestors()
        .find(|d| is_repo(d))
        .map(Path::to_path_buf)
        .ok_or(RunError::NotARepo(canonical))?;
    // A repository inside a sandboxed workspace (one with `.agent-sandbox`)
    // may be its agent's: an empty `src/.git` it made turned `sbx-run agent`
    // run from `src/` into a sandbox for `src`, whose config and
    // `.agent-sandbox/hooks/before` (run on the host) the agent wrote.
    if let Some(outer) = found
        .ancestors()
        .skip(1)
        .find(|d| is_repo(d) && d.join(sbx_core::config::DIR).is_dir())
    {
        return Err(RunError::BadWorkspace(format!(
            "{}: a repository inside the sandboxed workspace {}, whose agent could have made it one (and written its .agent-sandbox); run sbx-run for the workspace (-C {1}), or move the repository out of it",
            sbx_core::sanitize::field(&found.to_string_lossy()),
            sbx_core::sanitize::field(&outer.to_string_lossy()),
        )));
    }
    Ok(found)
}

/// Make `dir` and its missing parents 0700: the one way sbx-run makes
/// the host directories only root (or the user) may enter.
pub fn private_dir(dir: &Path) -> Result<(), RunError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| RunError::Io(dir.to_owned(), e))
}

fn is_repo(p: &Path) -> bool {
    p.join(".git").exists()
}

/// Per-sandbox host directory: `$SBX_RUN_DIR` (tests), else /run/sbx.
pub fn run_dir(container: &str) -> PathBuf {
    std::env::var_os("SBX_RUN_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/sbx"))
        .join(container)
}

/// Where the idmapped view of a workspace is mounted on the host.
pub fn idmap_dir(container: &str) -> PathBuf {
    run_dir(container).join("workspace")
}

/// Where every sandbox sees its workspace's chat scratch directories
/// (`sbx-run agent --chat ID --scratch`: SCRATCH_TARGET/ID).
pub const SCRATCH_TARGET: &str = "/scratch";

/// The host directory of a workspace's chat scratch directories, one per
/// chat, beside the chat store: `$XDG_STATE_HOME/sbx/scratch/<hash>/`.
pub fn scratch_root(hash: &str) -> PathBuf {
    crate::spec::state_dir().join("scratch").join(hash)
}

/// Where the idmapped view of the scratch root is mounted on the host.
pub fn scratch_view_dir(container: &str) -> PathBuf {
    run_dir(container).join("scratch")
}

/// Make the scratch root, owned like the workspace (so what the agent
/// writes there lands owned by the workspace's owner, as in the workspace),
/// under a 0700 parent no other host user can enter.
pub fn ensure_scratch_root(ws: &Workspace) -> Result<PathBuf, RunError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = scratch_root(&ws.names.hash);
    let parent = dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let io = |p: &Path, e| RunError::Io(p.to_owned(), e);
    private_dir(&dir)?;
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| io(&parent, e))?;
    // Never follows a link: the agent writes inside this directory, not
    // its parent, but a link is refused rather than trusted.
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| io(&dir, e))?;
    if !meta.is_dir() {
        return Err(RunError::Io(
            dir.clone(),
            std::io::Error::other("not a directory: remove it"),
        ));
    }
    let (u, g) = ws.owner;
    if (meta.uid(), meta.gid()) != (u, g) {
        std::os::unix::fs::lchown(&dir, Some(u), Some(g)).map_err(|e| io(&dir, e))?;
    }
    Ok(dir)
}

/// Make (or make anew, when ownership changed) the idmapped view of the
/// workspace: on-disk owner <-> agent (uid 1000), every other id as is.
/// Called before every `docker run`/`docker start` of the sandbox, so
/// docker never binds an empty directory where the view should be.
pub fn prepare_mount(ws: &Workspace) -> Result<(), RunError> {
    if !ws.idmapped() {
        return ensure_scratch_root(ws).map(|_| ());
    }
    let dir = idmap_dir(&ws.names.container);
    release_mount(&ws.names.container);
    private_dir(&dir)?;
    // Through the view the owner's files are uid 1000's: a host user of
    // that uid must not reach it, so only root may enter its parent.
    let parent = run_dir(&ws.names.container);
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| RunError::Io(parent.clone(), e))?;
    }
    let (u, g) = ws.owner;
    let (um, gm) = (
        sbx_sys::idmap::swap(AGENT_ID, u),
        sbx_sys::idmap::swap(AGENT_ID, g),
    );
    sbx_sys::idmap::bind(&ws.path, &dir, &um, &gm).map_err(|e| idmap_error(ws, &e))?;
    // Only now: a workspace refused above leaves nothing in the state directory.
    let scratch = ensure_scratch_root(ws).inspect_err(|_| release_mount(&ws.names.container))?;
    let view = scratch_view_dir(&ws.names.container);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&view)
            .map_err(|e| RunError::Io(view.clone(), e))?;
    }
    let r = sbx_sys::idmap::bind(&scratch, &view, &um, &gm);
    if let Err(e) = r {
        release_mount(&ws.names.container);
        return Err(RunError::Idmap(format!(
            "{}: cannot make the idmapped view of the chat scratch directories ({e}): keep $XDG_STATE_HOME on a filesystem with idmapped mounts (ext4, xfs, btrfs), or `chown -R {AGENT_ID}:{AGENT_ID} {}`",
            scratch.display(),
            ws.path.display()
        )));
    }
    Ok(())
}

fn idmap_error(ws: &Workspace, e: &std::io::Error) -> RunError {
    let (u, g) = ws.owner;
    let p = ws.path.display();
    let fix = format!("`chown -R {AGENT_ID}:{AGENT_ID} {p}`");
    let msg = match e.kind() {
        std::io::ErrorKind::PermissionDenied => format!(
            "{p} is owned by {u}:{g}; the agent (uid {AGENT_ID}) can write it only through an idmapped mount, which needs root: run sbx-run as root, or {fix}"
        ),
        _ => {
            let fs = sbx_sys::idmap::mount_of(&ws.path)
                .map(|m| m.fstype)
                .unwrap_or_else(|| "its filesystem".into());
            format!(
                "{p} is owned by {u}:{g}; the agent (uid {AGENT_ID}) can write it only through an idmapped mount, and {fs} on this kernel cannot make one ({e}): move the repository to ext4, xfs, btrfs or tmpfs (Linux >= 6.3), or {fix}"
            )
        }
    };
    RunError::Idmap(msg)
}

/// Detach every mount stacked at `dir`.
pub fn detach_all(dir: &Path) {
    for _ in 0..16 {
        match sbx_sys::idmap::mount_of(dir) {
            Some(m) if m.point == dir => {
                if sbx_sys::idmap::detach(dir).is_err() {
                    break;
                }
            }
            _ => break,
        }
    }
}

/// Undo `prepare_mount` (every copy stacked there), keeping nothing.
pub fn release_mount(container: &str) {
    crate::hostpath::release(container);
    for dir in [idmap_dir(container), scratch_view_dir(container)] {
        detach_all(&dir);
        let _ = std::fs::remove_dir(&dir);
    }
    let _ = std::fs::remove_dir(run_dir(container));
}

/// Hand what `fd` refers to to `owner` (sbx-run runs as root): by the fd
/// itself (AT_EMPTY_PATH), so a link swapped in at its name is not followed.
/// Best effort: the caller's next step reports what did not take.
pub fn give_fd(fd: &impl std::os::fd::AsFd, owner: (u32, u32)) {
    let _ = nix::unistd::fchownat(
        fd,
        "",
        Some(owner.0.into()),
        Some(owner.1.into()),
        nix::fcntl::AtFlags::AT_EMPTY_PATH,
    );
}
