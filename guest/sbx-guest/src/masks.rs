//! Secret files that appear after the start: sbx-run masks what exists
//! when it starts the container; this watches the workspace and bind-mounts
//! an empty read-only file (or directory) over each new path that the
//! config's `[filesystem]` patterns block, within a second. Mounting needs
//! CAP_SYS_ADMIN, which the guest keeps for this and the agent never has.
//!
//! The host's atomic replace (`sed -i`, an editor's rename into place)
//! detaches a mask: the path is masked again whenever it is no longer
//! mounted over, and until then a fanotify permission event on the
//! workspace mount refuses every open of a secret path, so no window is
//! left between the rename and the new mount.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use sbx_core::glob::PathSet;

/// Whether `rel` (workspace-relative) is to be masked: blocked and not
/// allowed, as sbx-run's start-time scan decides; `.git` is never looked in.
pub fn wanted(rel: &Path, is_dir: bool, blocked: &PathSet, allowed: &PathSet) -> bool {
    if rel
        .components()
        .next()
        .is_some_and(|c| c.as_os_str() == ".git")
    {
        return false;
    }
    // Inside a masked directory there is nothing left to see.
    allowed.first_match(rel, is_dir).is_none() && blocked.first_match(rel, is_dir).is_some()
}

/// Whether the open of `path` (as the guest sees it) must be refused: a
/// secret path, or one inside a secret directory, that is not mounted over
/// (a masked one resolves to the mask's mount, which is not watched).
pub fn refused(root: &Path, path: &Path, blocked: &PathSet, allowed: &PathSet) -> bool {
    let path = sbx_sys::fanotify::undeleted(path);
    let Ok(rel) = path.strip_prefix(root) else {
        return false;
    };
    !rel.starts_with(".git") && blocked.masking(rel, allowed).is_some()
}

/// How a mask is applied (a bind mount in the real guest): over `target`,
/// the object the watcher opened, never over a name looked up again.
pub trait Mounter {
    fn mask(&mut self, path: &Path, target: &OwnedFd, is_dir: bool) -> std::io::Result<()>;
}

/// Decides and applies masks for event paths: a path is masked whenever
/// it is not mounted over, however often the host replaces it.
pub struct Masker {
    pub root: PathBuf,
    pub blocked: PathSet,
    pub allowed: PathSet,
    pub mounter: Box<dyn Mounter + Send>,
    /// The agent's uid and gid: an index under `.git` it writes with a
    /// name git would write outside the checkout is refused as the
    /// agent's (gitindex.rs); None: indexes are not looked at.
    pub agent: Option<(u32, u32)>,
}

impl Masker {
    /// Handle one path that was created or renamed into place.
    pub fn seen(&mut self, path: &Path) -> Option<std::io::Result<PathBuf>> {
        let rel = path.strip_prefix(&self.root).ok()?;
        // Opened once, beneath the workspace and through no link, and
        // masked by that fd: `hook.key -> .git/hooks/pre-commit` must not
        // blank the hook (issue 37). A link is left alone, as at start:
        // what it names is masked under its own name if it is a secret.
        let root = sbx_sys::beneath::Root::open(&self.root).ok()?;
        let (fd, kind) = root.open_mount_source(rel).ok()?;
        let is_dir = kind == sbx_sys::beneath::Kind::Dir;
        if !wanted(rel, is_dir, &self.blocked, &self.allowed) || self.mounted_over(&root, rel) {
            return None;
        }
        let r = self.mounter.mask(path, &fd, is_dir);
        Some(r.map(|()| rel.to_owned()))
    }
}

impl Masker {
    /// Whether `rel` or a directory above it inside the workspace is a
    /// mount's root now (its mask still there), asked of the kernel rather
    /// than remembered: the host's rename over it detaches the mask.
    fn mounted_over(&self, root: &sbx_sys::beneath::Root, rel: &Path) -> bool {
        // A pinned parent (sbx-run binds it onto itself) is a mount root
        // too: only the path and secret directories above it count.
        rel.ancestors()
            .take_while(|a| !a.as_os_str().is_empty())
            .filter(|a| *a == rel || wanted(a, true, &self.blocked, &self.allowed))
            .any(|a| {
                root.open_path(a)
                    .and_then(|fd| sbx_sys::fanotify::is_mount_root(&fd))
                    .unwrap_or(false)
            })
    }
}

/// Bind mounts of the guest's empty file and directory.
pub struct BindMounter {
    pub empty_file: PathBuf,
    pub empty_dir: PathBuf,
}

impl Mounter for BindMounter {
    fn mask(&mut self, _path: &Path, target: &OwnedFd, is_dir: bool) -> std::io::Result<()> {
        let src = if is_dir {
            &self.empty_dir
        } else {
            &self.empty_file
        };
        // Read-only, so nothing can be written through the mask.
        sbx_sys::idmap::bind_readonly_at(src, target)
    }
}

/// Watch `root` recursively and mask new matches until the process ends.
/// Errors are returned once at start; later ones are printed. With
/// `scan`, what is already there is masked too, once the watch is set.
/// Without the open guard masks are still made: Ok(Some(why)).
pub fn watch(mut masker: Masker, scan: bool) -> Result<Option<String>, String> {
    use notify::{EventKind, RecursiveMode, Watcher};
    let (tx, rx) = std::sync::mpsc::channel();
    let mut w = notify::recommended_watcher(tx).map_err(|e| e.to_string())?;
    w.watch(&masker.root, RecursiveMode::Recursive)
        .map_err(|e| format!("{}: {e}", masker.root.display()))?;
    let unguarded = guard(&masker).err();
    if let Some((uid, gid)) = masker.agent {
        let index = masker.root.join(".git/index");
        let links = crate::gitindex::links_in_git(&masker.root);
        let found = std::iter::once(crate::gitindex::check(&masker.root, &index, uid, gid)).chain(
            links
                .iter()
                .map(|l| crate::gitindex::check_link(&masker.root, l, uid, gid)),
        );
        for what in found.flatten() {
            eprintln!("sbx-guest: {what}");
        }
    }
    let mut gitlinks = crate::gitindex::Gitlinks::default();
    if let Some((uid, gid)) = masker.agent {
        gitlinks = recheck_git(&masker.root, uid, gid);
        // The user's own CLI configuration below the top, read-only (a38z).
        for e in crate::cliconf::hold_existing(&masker.root) {
            eprintln!("sbx-guest: cannot hold {e} read-only");
        }
    }
    if scan {
        for p in existing(&masker) {
            if let Some(Err(e)) = masker.seen(&p) {
                eprintln!("sbx-guest: cannot mask {}: {e}", p.display());
            }
        }
    }
    let rewalk = masker
        .agent
        .map(|(uid, gid)| crate::cliconf::rewalker(masker.root.clone(), uid, gid))
        .unwrap_or_else(|| std::sync::mpsc::channel::<PathBuf>().0);
    std::thread::spawn(move || {
        let _keep = w;
        // A directory made above a gitlink is watched only once its event
        // is handled: a `.git` written into it before then makes no event,
        // so the gitlinks are checked again a little later.
        let mut again: Option<std::time::Instant> = None;
        loop {
            let ev = match again {
                Some(at) => {
                    rx.recv_timeout(at.saturating_duration_since(std::time::Instant::now()))
                }
                None => rx
                    .recv()
                    .map_err(|_| std::sync::mpsc::RecvTimeoutError::Disconnected),
            };
            let ev = match ev {
                Ok(Ok(ev)) => ev,
                Ok(Err(_)) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    again = None;
                    if let Some((uid, gid)) = masker.agent {
                        gitlinks = recheck_git(&masker.root, uid, gid);
                    }
                    continue;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            };
            // An index written in place or renamed into place (a37y).
            let written = matches!(
                ev.kind,
                EventKind::Create(_)
                    | EventKind::Modify(_)
                    | EventKind::Access(notify::event::AccessKind::Close(
                        notify::event::AccessMode::Write
                    ))
            );
            if let Some((uid, gid)) = masker.agent
                && written
            {
                for p in &ev.paths {
                    let index = crate::gitindex::is_index(&masker.root, p);
                    if index && let Some(what) = crate::gitindex::check(&masker.root, p, uid, gid) {
                        eprintln!("sbx-guest: {what}");
                    }
                    // A submodule's `.git` the host's status would go into.
                    if index || gitlinks.touched_by(&masker.root, p) {
                        gitlinks = recheck_git(&masker.root, uid, gid);
                        again = Some(std::time::Instant::now() + CHECK_AGAIN);
                    }
                    // A rebase left half done, which the host's git resumes.
                    if crate::gitstate::touches(&masker.root, p) {
                        if let Some(what) = crate::gitstate::check(&masker.root, p, uid, gid) {
                            eprintln!("sbx-guest: {what}");
                        }
                        again = Some(std::time::Instant::now() + CHECK_AGAIN);
                    }
                    if let Some(what) = crate::gitindex::check_link(&masker.root, p, uid, gid) {
                        eprintln!("sbx-guest: {what}");
                    }
                }
            }
            // An AI CLI's configuration the agent made below the top, seen
            // by any event in it (a write, a copy's attribute change). A
            // new directory is walked now and twice more: the recursive
            // watch on it comes after its first entries (a38z).
            if let Some((uid, gid)) = masker.agent {
                for p in &ev.paths {
                    if let Some(what) = crate::cliconf::refuse(&masker.root, p, uid, gid) {
                        eprintln!("sbx-guest: {what}");
                    }
                    let new_dir = matches!(
                        ev.kind,
                        EventKind::Create(_)
                            | EventKind::Modify(notify::event::ModifyKind::Name(_))
                    ) && std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
                    if new_dir {
                        let _ = rewalk.send(p.clone());
                    }
                }
            }
            if !matches!(
                ev.kind,
                EventKind::Create(_) | EventKind::Modify(notify::event::ModifyKind::Name(_))
            ) {
                continue;
            }
            for p in &ev.paths {
                match masker.seen(p) {
                    Some(Ok(rel)) => {
                        eprintln!("sbx-guest: masked {} (a new secret file)", rel.display())
                    }
                    Some(Err(e)) => eprintln!("sbx-guest: cannot mask {}: {e}", p.display()),
                    None => {}
                }
            }
        }
    });
    Ok(unguarded)
}

/// How long after a change near a gitlink or in a rebase's state it is
/// checked again.
const CHECK_AGAIN: std::time::Duration = std::time::Duration::from_millis(300);

/// [`crate::gitindex::check_gitlinks`] and [`crate::gitstate::check`] of
/// every state directory, saying what was done; the gitlinks now.
fn recheck_git(root: &Path, uid: u32, gid: u32) -> crate::gitindex::Gitlinks {
    let (found, what) = crate::gitindex::check_gitlinks(root, uid, gid);
    let states = crate::gitstate::dirs(root)
        .into_iter()
        .filter_map(|d| crate::gitstate::check(root, &d, uid, gid));
    for what in what.into_iter().chain(states) {
        eprintln!("sbx-guest: {what}");
    }
    found
}

/// Refuse every open of a secret path on the workspace mount that no
/// mask covers (the window between the host's rename and the new mask).
fn guard(m: &Masker) -> Result<(), String> {
    let g = sbx_sys::fanotify::OpenGuard::on_workspace(&m.root)
        .map_err(|e| format!("no open guard on {}: {e}", m.root.display()))?;
    let (root, blocked, allowed) = (m.root.clone(), m.blocked.clone(), m.allowed.clone());
    std::thread::spawn(move || {
        let e = g.serve(|p| !refused(&root, p, &blocked, &allowed));
        eprintln!("sbx-guest: the open guard stopped: {e}");
        // Its fd stays open: pending and later opens wait rather than
        // pass unchecked; the line above says why.
        std::mem::forget(g);
    });
    Ok(())
}

/// The secret paths already under the workspace, as sbx-run's start-time
/// scan finds them (no link followed, `.git` not looked in). A container
/// started again keeps the masks of its creation: a `.env` written while
/// it was stopped was the agent's to read.
fn existing(m: &Masker) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(m.root.join(&rel)) else {
            continue;
        };
        for e in rd.flatten() {
            let path = rel.join(e.file_name());
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_symlink() {
                continue;
            }
            if wanted(&path, ft.is_dir(), &m.blocked, &m.allowed) {
                out.push(m.root.join(&path));
            } else if ft.is_dir() && path != Path::new(".git") {
                stack.push(path);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    type Log = std::sync::Arc<std::sync::Mutex<Vec<(PathBuf, bool)>>>;
    struct Rec(Log);
    impl Mounter for Rec {
        fn mask(&mut self, p: &Path, _: &OwnedFd, d: bool) -> std::io::Result<()> {
            self.0.lock().unwrap().push((p.to_owned(), d));
            Ok(())
        }
    }

    #[test]
    fn masks_new_blocked_paths_each_time_and_leaves_the_rest() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for f in [
            ".env",
            ".env.example",
            "src/app.rs",
            ".git/x.key",
            "sub/.env.local",
        ] {
            std::fs::create_dir_all(r.join(f).parent().unwrap()).unwrap();
            std::fs::write(r.join(f), "x").unwrap();
        }
        std::fs::create_dir_all(r.join("home/.ssh")).unwrap();
        // Links to what must not be blanked, by secret-looking names.
        std::os::unix::fs::symlink(".git/x.key", r.join("hook.key")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", r.join("host.pem")).unwrap();
        std::os::unix::fs::symlink("home", r.join("via")).unwrap();
        let cfg = sbx_core::config::Config::default();
        let log = Log::default();
        let mut m = Masker {
            root: r.to_owned(),
            blocked: PathSet::new(&cfg.blocked_files()).unwrap(),
            allowed: PathSet::new(&cfg.allowed_files()).unwrap(),
            mounter: Box::new(Rec(log.clone())),
            agent: None,
        };
        for f in [
            ".env",
            ".env.example",
            "src/app.rs",
            ".git/x.key",
            "sub/.env.local",
            "home/.ssh",
            ".env",
            "/elsewhere/.env",
            "hook.key",
            "host.pem",
            "via/.ssh",
        ] {
            m.seen(&r.join(f.trim_start_matches('/')));
        }
        m.seen(Path::new("/elsewhere/.env"));
        let got: Vec<_> = log
            .lock()
            .unwrap()
            .iter()
            .map(|(p, d)| (p.strip_prefix(r).unwrap().to_owned(), *d))
            .collect();
        assert_eq!(
            got,
            [
                (PathBuf::from(".env"), false),
                (PathBuf::from("sub/.env.local"), false),
                (PathBuf::from("home/.ssh"), true),
                // Not mounted over (nothing is, here): masked again.
                (PathBuf::from(".env"), false),
            ]
        );
    }

    #[test]
    fn opens_of_secret_paths_are_refused_and_the_rest_pass() {
        let cfg = sbx_core::config::Config::default();
        let b = PathSet::new(&cfg.blocked_files()).unwrap();
        let a = PathSet::new(&cfg.allowed_files()).unwrap();
        let r = Path::new("/workspace/w");
        let no = |p: &str| refused(r, Path::new(p), &b, &a);
        assert!(no("/workspace/w/.env"));
        assert!(no("/workspace/w/.env (deleted)"));
        assert!(no("/workspace/w/sub/.ssh/id_rsa"));
        assert!(no("/workspace/w/a/server.key"));
        assert!(!no("/workspace/w/.env.example"));
        assert!(!no("/workspace/w/src/main.rs"));
        assert!(!no("/workspace/w/.git/x.key"));
        assert!(!no("/elsewhere/.env"));
    }
}
