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
    /// Every source and where it is bound, staged or not: what `start`
    /// checks in the running sandbox (`identify`, `verify`).
    pub bound: Vec<Bound>,
}

/// A bind source under the workspace and its target in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    pub base: PathBuf,
    pub rel: String,
    pub target: String,
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
            bound: Vec::new(),
        }
    }

    /// The source docker is to bind for `rel` under `base` at `target`,
    /// recorded to be checked, and to be staged when it is a copy
    /// mounted by fd.
    pub fn source(
        &mut self,
        container: &str,
        base: &Path,
        rel: &str,
        target: &str,
        readonly: bool,
    ) -> PathBuf {
        self.bound.push(Bound {
            base: base.to_owned(),
            rel: rel.to_owned(),
            target: target.to_owned(),
        });
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

impl Sources {
    /// Record a mask (sbx's own empty file or directory, `src`) bound at
    /// `target`, to be checked like a source: the source is not the
    /// agent's, but the target is resolved by docker inside the container,
    /// where a secret's name swapped for a link (by the agent of another
    /// sandbox of this workspace, between `find_masked` and docker's
    /// mount) carries the mask onto the link's target (a read-only hook
    /// blanked) and leaves the name unmasked.
    pub fn mask(&mut self, src: &Path, target: &str) {
        if let (Some(base), Some(rel)) = (src.parent(), src.file_name()) {
            self.bound.push(Bound {
                base: base.to_owned(),
                rel: rel.to_string_lossy().into_owned(),
                target: target.to_owned(),
            });
        }
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

/// Each bound source opened `O_PATH | O_NOFOLLOW` beneath its base, held
/// open (so its inode cannot be reused) until the sandbox is checked.
#[derive(Debug)]
pub struct Held {
    opened: Vec<(Bound, std::os::fd::OwnedFd, FileId)>,
}

use sbx_core::guestapi::{FileId, Reply, Request};

/// Open every bound source through no link, before docker is asked to
/// bind them: what the sandbox must then show at each target.
pub fn identify(bound: &[Bound]) -> Result<Held, RunError> {
    let mut opened = Vec::with_capacity(bound.len());
    for b in bound {
        let root = Root::open(&b.base).map_err(|e| RunError::Io(b.base.clone(), e))?;
        let (fd, _) = root
            .open_mount_source(Path::new(&b.rel))
            .map_err(|e| refused(e, &b.rel))?;
        let st =
            nix::sys::stat::fstat(&fd).map_err(|e| RunError::Io(b.base.join(&b.rel), e.into()))?;
        let id = FileId {
            dev: st.st_dev,
            ino: st.st_ino,
        };
        opened.push((b.clone(), fd, id));
    }
    Ok(Held { opened })
}

fn guest_client(
    container: &str,
) -> Result<sbx_core::guestapi::Client<std::os::unix::net::UnixStream>, RunError> {
    let socket = sbx_core::guestapi::socket_in(&crate::spec::host_dir(container));
    let unchecked = |why: String| {
        RunError::NotReady(format!(
            "cannot check the sandbox's bind mounts through its guest ({why}); it was removed"
        ))
    };
    // The guest says "ready" from its main thread while its API thread may
    // still be binding the socket (a restart leaves the old file behind):
    // wait for it a while, as a loaded machine needs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match crate::guestexec::connect(&socket) {
            Ok(c) => return Ok(c),
            Err(crate::guestexec::GuestError::NoGuest(..))
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => return Err(unchecked(e.to_string())),
        }
    }
}

/// Tell the guest, which holds the agent's processes until now, that the
/// mounts are checked (`Request::Release`); answered once they run.
pub fn release_guest(container: &str) -> Result<(), RunError> {
    let fail = |why: String| {
        RunError::NotReady(format!(
            "the sandbox's guest did not start the agent ({why}); it was removed"
        ))
    };
    match guest_client(container)?
        .call(&Request::Release)
        .map_err(|e| fail(e.to_string()))?
    {
        Reply::Ok => Ok(()),
        _ => Err(fail("an answer of the wrong kind".into())),
    }
}

/// Ask the started sandbox's guest what is at each target (opened
/// through no link there either) and compare with what was opened on the
/// host: without root docker binds names, which the agent of another
/// sandbox of this workspace can swap for a link in between (issue 37).
/// Device and inode both: a bind mount shows its source's own numbers
/// (docs/security.md, "bind sources").
pub fn verify(container: &str, held: &Held) -> Result<(), RunError> {
    if held.opened.is_empty() {
        return Ok(());
    }
    let paths: Vec<String> = held
        .opened
        .iter()
        .map(|(b, _, _)| b.target.clone())
        .collect();
    let unchecked = |why: String| {
        RunError::NotReady(format!(
            "cannot check the sandbox's bind mounts through its guest ({why}); it was removed"
        ))
    };
    let reply = guest_client(container)?
        .call(&Request::Identify { paths })
        .map_err(|e| unchecked(e.to_string()))?;
    let Reply::Ids { ids } = reply else {
        return Err(unchecked("an answer of the wrong kind".into()));
    };
    if ids.len() != held.opened.len() {
        return Err(unchecked("an answer of the wrong length".into()));
    }
    for ((b, _, want), got) in held.opened.iter().zip(ids) {
        if got != Some(*want) {
            return Err(RunError::Swapped(
                sbx_core::sanitize::field(&b.base.join(&b.rel).to_string_lossy()).into_owned(),
            ));
        }
    }
    Ok(())
}
