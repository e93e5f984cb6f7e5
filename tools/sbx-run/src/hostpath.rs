//! Host-side paths inside the workspace, which the agent writes: every
//! protected path, pin and mount source is resolved through
//! `sbx_sys::beneath` (no link followed, nothing outside the workspace),
//! and, as root, docker binds a copy mounted by fd under the sandbox's
//! root-only run directory, not the agent's name for it (issue 37: a
//! `.husky -> /proc` link had docker bind the host's /proc).

use std::path::{Path, PathBuf};

use sbx_sys::beneath::{Kind, Root};

use crate::RunError;

/// What a protected path is on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// There, a directory or a regular file.
    Present(Kind),
    /// Missing from this component on (workspace-relative): mask that.
    Missing(String),
    /// A component is a file, not a directory: nothing under it exists.
    UnderFile(String),
}

fn refused(e: std::io::Error, what: &str) -> RunError {
    RunError::BadWorkspace(format!(
        "{e} ({what} is mounted read-only into the sandbox; nothing was started)"
    ))
}

/// Resolve `rel` under `root` without following any link; a link anywhere
/// on it is refused (exit 65), naming it and what to do.
pub fn protected(root: &Root, rel: &str) -> Result<State, RunError> {
    let mut prefix = PathBuf::new();
    let comps: Vec<_> = Path::new(rel).components().collect();
    for (i, c) in comps.iter().enumerate() {
        prefix.push(c);
        let kind = match root.open_mount_source(&prefix) {
            Ok((_, k)) => k,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(State::Missing(prefix.to_string_lossy().into_owned()));
            }
            Err(e) => return Err(refused(e, rel)),
        };
        if i + 1 == comps.len() {
            return Ok(State::Present(kind));
        }
        if kind != Kind::Dir {
            return Ok(State::UnderFile(prefix.to_string_lossy().into_owned()));
        }
    }
    Ok(State::Present(Kind::Dir))
}

/// A bind source docker is given as a copy mounted by fd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staged {
    /// The tree it is under (the workspace or its idmapped view).
    pub base: PathBuf,
    pub rel: String,
    /// Where the copy is mounted: what docker binds.
    pub dest: PathBuf,
    pub readonly: bool,
}

/// The bind sources of one spec: what is to be staged, and whether they
/// are staged at all.
#[derive(Debug)]
pub struct Sources {
    by_fd: bool,
    pub staged: Vec<Staged>,
}

impl Sources {
    /// Sources are mounted by fd only as root (open_tree); without it
    /// they are checked through the same helper and bound by name, and
    /// so are they for `show-run` (`show_names`): what it prints must run
    /// when pasted, and the staged copies exist only while `start` holds
    /// them.
    pub fn new(show_names: bool) -> Self {
        Sources {
            by_fd: nix::unistd::geteuid().is_root() && !show_names,
            staged: Vec::new(),
        }
    }

    /// The source docker is to bind for `rel` under `base`, recorded to
    /// be staged when it is a copy mounted by fd.
    pub fn source(&mut self, container: &str, base: &Path, rel: &str, readonly: bool) -> PathBuf {
        if !self.by_fd {
            return base.join(rel);
        }
        let key = format!("{}\0{rel}\0{readonly}", base.display());
        let dest = staging_dir(container).join(crate::names::digest(key.as_bytes()));
        if !self.staged.iter().any(|s| s.dest == dest) {
            self.staged.push(Staged {
                base: base.to_owned(),
                rel: rel.to_owned(),
                dest: dest.clone(),
                readonly,
            });
        }
        dest
    }
}

/// The staging directory of a sandbox's sources (root's, 0700).
pub fn staging_dir(container: &str) -> PathBuf {
    crate::workspace::run_dir(container).join("src")
}

/// Mount each staged source: opened beneath its base through no link,
/// then its copy mounted by that fd at `dest`. Fails closed.
pub fn stage(container: &str, staged: &[Staged]) -> Result<(), RunError> {
    release(container);
    if staged.is_empty() {
        return Ok(());
    }
    let dir = staging_dir(container);
    let io = |p: &Path, e| RunError::Io(p.to_owned(), e);
    crate::workspace::private_dir(&dir)?;
    for s in staged {
        let root = Root::open(&s.base).map_err(|e| io(&s.base, e))?;
        let (fd, kind) = root
            .open_mount_source(Path::new(&s.rel))
            .map_err(|e| refused(e, &s.rel))?;
        if kind == Kind::Dir {
            crate::workspace::private_dir(&s.dest)?;
        } else {
            std::fs::File::create(&s.dest).map_err(|e| io(&s.dest, e))?;
        }
        sbx_sys::beneath::clone_to(&fd, &s.dest, s.readonly).map_err(|e| io(&s.dest, e))?;
    }
    Ok(())
}

/// Undo `stage`: detach every copy and remove the mount points.
pub fn release(container: &str) {
    let dir = staging_dir(container);
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        crate::workspace::detach_all(&p);
        let _ = std::fs::remove_dir(&p).or_else(|_| std::fs::remove_file(&p));
    }
    let _ = std::fs::remove_dir(&dir);
}
