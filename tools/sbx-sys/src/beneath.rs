//! The one way sbx opens, creates, writes or mounts a path inside a tree
//! someone else can write (the workspace, a volume, a backup being
//! restored): openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS, so no component is a link and nothing resolves
//! outside the root, whatever was swapped in between. runc resolves its
//! container paths the same way since CVE-2021-30465
//! (<https://github.com/opencontainers/runc/security/advisories/GHSA-c3xm-pvg7-gh7r>).
//! Mount sources are opened O_PATH and mounted by fd (`clone_to`).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{Mode, SFlag};

/// A directory opened once; every path below is resolved from this fd.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

/// What a path under a [`Root`] turned out to be (lstat of the fd).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

fn resolve() -> ResolveFlag {
    ResolveFlag::RESOLVE_BENEATH
        | ResolveFlag::RESOLVE_NO_SYMLINKS
        | ResolveFlag::RESOLVE_NO_MAGICLINKS
}

/// Kind of an open fd (fstat; an O_PATH fd on a link stats the link).
pub fn kind(fd: impl AsFd) -> io::Result<Kind> {
    let st = nix::sys::stat::fstat(fd.as_fd())?;
    Ok(
        match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFDIR => Kind::Dir,
            SFlag::S_IFREG => Kind::File,
            SFlag::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        },
    )
}

impl Root {
    /// Open `path` itself as the root. The root is trusted: it is the
    /// caller's own choice (the workspace's canonical path), so it may be
    /// reached through links; nothing below it is.
    pub fn open(path: &Path) -> io::Result<Self> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| with_path(path, e.into()))?;
        Ok(Self {
            fd,
            path: path.to_owned(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// openat2 of `rel` with `flags` and `mode`; the error names the path
    /// and, for a link or an escape, says so.
    pub fn open_with(&self, rel: &Path, flags: OFlag, mode: u32) -> io::Result<OwnedFd> {
        // "" or "." is the root itself; RESOLVE_BENEATH allows it.
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let how = OpenHow::new()
            .flags(flags | OFlag::O_CLOEXEC)
            .mode(Mode::from_bits_truncate(mode))
            .resolve(resolve());
        // EAGAIN: a rename raced a ".." walk; the kernel asks for a retry.
        let mut tries = 0;
        loop {
            match nix::fcntl::openat2(self.fd.as_fd(), rel, how) {
                Err(Errno::EAGAIN) if tries < 16 => tries += 1,
                r => return r.map_err(|e| self.error(rel, e)),
            }
        }
    }

    fn error(&self, rel: &Path, e: Errno) -> io::Error {
        let full = self.path.join(rel);
        match e {
            Errno::ELOOP => io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: a component is a symbolic link, which sbx does not follow in {}: replace it with the real file or directory",
                    full.display(),
                    self.path.display()
                ),
            ),
            Errno::EXDEV => io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: leads outside {}: give a path inside it",
                    full.display(),
                    self.path.display()
                ),
            ),
            e => with_path(&full, e.into()),
        }
    }

    /// `rel` as an O_PATH fd on the object itself (a final link is not
    /// followed but returned, for the caller to refuse): a mount source.
    pub fn open_path(&self, rel: &Path) -> io::Result<OwnedFd> {
        self.open_with(rel, OFlag::O_PATH | OFlag::O_NOFOLLOW, 0)
    }

    /// [`Root::open_path`], refusing anything but a directory or a regular
    /// file, with the same message as a link in the middle.
    pub fn open_mount_source(&self, rel: &Path) -> io::Result<(OwnedFd, Kind)> {
        let fd = self.open_path(rel)?;
        match kind(&fd)? {
            k @ (Kind::Dir | Kind::File) => Ok((fd, k)),
            Kind::Symlink => Err(self.error(rel, Errno::ELOOP)),
            Kind::Other => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: not a regular file or directory: remove it",
                    self.path.join(rel).display()
                ),
            )),
        }
    }

    /// A regular file to read (O_NONBLOCK: a FIFO does not hang us).
    pub fn open_read(&self, rel: &Path) -> io::Result<std::fs::File> {
        let fd = self.open_with(
            rel,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK,
            0,
        )?;
        if kind(&fd)? != Kind::File {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not a regular file", self.path.join(rel).display()),
            ));
        }
        Ok(std::fs::File::from(fd))
    }

    /// A new file `rel` (O_CREAT | O_EXCL: never an existing one, never
    /// through a link), open for writing.
    pub fn create_file(&self, rel: &Path, mode: u32) -> io::Result<std::fs::File> {
        self.open_with(
            rel,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW,
            mode,
        )
        .map(std::fs::File::from)
    }

    /// `rel` and every missing directory above it, each made with mkdirat
    /// in its parent as opened beneath the root; returns the last one
    /// opened O_PATH. An existing component must be a real directory.
    pub fn create_dir_all(&self, rel: &Path, mode: u32) -> io::Result<OwnedFd> {
        let mut done = PathBuf::new();
        let mut dir = self.open_with(Path::new("."), OFlag::O_PATH | OFlag::O_DIRECTORY, 0)?;
        for c in rel.components() {
            let Component::Normal(name) = c else {
                if c == Component::CurDir {
                    continue;
                }
                return Err(self.error(rel, Errno::EXDEV));
            };
            done.push(name);
            match nix::sys::stat::mkdirat(&dir, name, Mode::from_bits_truncate(mode)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(self.error(&done, e)),
            }
            dir = self.open_with(&done, OFlag::O_PATH | OFlag::O_DIRECTORY, 0)?;
        }
        Ok(dir)
    }

    /// Replace `rel` with `data` at once: a new temporary file beside it,
    /// renamed over it, so a link or a hard link at `rel` is replaced, not
    /// written through. The parent must exist.
    pub fn write_atomic(&self, rel: &Path, data: &[u8], mode: u32) -> io::Result<()> {
        use std::io::Write;
        let (parent, name) = match (rel.parent(), rel.file_name()) {
            (Some(p), Some(n)) => (p, n),
            _ => return Err(self.error(rel, Errno::EINVAL)),
        };
        let dir = self.open_with(parent, OFlag::O_PATH | OFlag::O_DIRECTORY, 0)?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".sbx-{}", std::process::id()));
        let tmp = parent.join(&tmp_name);
        let _ = nix::unistd::unlinkat(
            &dir,
            tmp_name.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
        let mut f = self.create_file(&tmp, mode)?;
        let r = (|| {
            f.write_all(data)?;
            f.sync_all()?;
            nix::fcntl::renameat(&dir, tmp_name.as_os_str(), &dir, name).map_err(io::Error::from)
        })();
        if r.is_err() {
            let _ = nix::unistd::unlinkat(
                &dir,
                tmp_name.as_os_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
        r.map_err(|e| with_path(&self.path.join(rel), e))
    }
}

fn with_path(p: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", p.display()))
}

/// Mount a detached copy of what `source` is open on (an fd from
/// [`Root::open_path`]) at `target`, a directory or file of the same kind
/// the caller owns, read-only when asked. The source is never named again,
/// so nothing swapped in after it was opened is followed.
pub fn clone_to(source: &OwnedFd, target: &Path, readonly: bool) -> io::Result<()> {
    // "" with AT_EMPTY_PATH names `source` itself.
    let flags = libc::AT_EMPTY_PATH as libc::c_uint | libc::AT_RECURSIVE as libc::c_uint;
    let tree = crate::idmap::open_tree(source.as_raw_fd(), c"", flags)?;
    if readonly {
        crate::idmap::readonly(&tree)?;
    }
    crate::idmap::move_to(&tree, target).map_err(|e| with_path(target, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, Root) {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("ws/a/b")).unwrap();
        std::fs::write(t.path().join("ws/a/b/f"), "in").unwrap();
        std::fs::write(t.path().join("outside"), "out").unwrap();
        let r = Root::open(&t.path().join("ws")).unwrap();
        (t, r)
    }

    fn refused(r: io::Result<impl std::fmt::Debug>, what: &str) -> String {
        let e = r.expect_err(what);
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{what}: {e}");
        e.to_string()
    }

    #[test]
    fn plain_paths_open() {
        let (_t, r) = tree();
        assert_eq!(
            kind(r.open_path(Path::new("a/b")).unwrap()).unwrap(),
            Kind::Dir
        );
        let mut s = String::new();
        std::io::Read::read_to_string(&mut r.open_read(Path::new("a/b/f")).unwrap(), &mut s)
            .unwrap();
        assert_eq!(s, "in");
        assert_eq!(
            kind(r.open_path(Path::new("")).unwrap()).unwrap(),
            Kind::Dir
        );
    }

    /// A link anywhere (middle, last, relative or absolute), `..` out of
    /// the root, an absolute path and a /proc magic link are all refused,
    /// each with the path in the message.
    #[test]
    fn links_and_escapes_are_refused() {
        let (t, r) = tree();
        let ws = t.path().join("ws");
        symlink("a", ws.join("mid")).unwrap();
        symlink(t.path().join("outside"), ws.join("abs")).unwrap();
        symlink("../outside", ws.join("rel")).unwrap();
        symlink("/proc/self/root", ws.join("magic")).unwrap();
        let m = refused(r.open_path(Path::new("mid/b/f")), "link in the middle");
        assert!(m.contains("mid/b/f") && m.contains("symbolic link"), "{m}");
        refused(r.open_read(Path::new("abs")), "absolute link");
        refused(r.open_read(Path::new("rel")), "relative link out");
        refused(r.open_path(Path::new("magic/etc")), "magic link");
        let m = refused(r.open_path(Path::new("a/../../outside")), "..");
        assert!(m.contains("leads outside"), "{m}");
        refused(r.open_path(&t.path().join("outside")), "absolute path");
        // The last component as a link: returned as itself, then refused.
        assert_eq!(
            kind(r.open_path(Path::new("abs")).unwrap()).unwrap(),
            Kind::Symlink
        );
        refused(
            r.open_mount_source(Path::new("abs")),
            "link as a mount source",
        );
        // `..` that stays inside is fine.
        assert!(r.open_path(Path::new("a/b/../b/f")).is_ok());
        // A /proc fd link as the root's child, through the real /proc.
        let proc = Root::open(Path::new("/proc")).unwrap();
        refused(
            proc.open_path(Path::new("self/root/etc")),
            "proc magic link",
        );
    }

    #[test]
    fn creation_never_goes_through_a_link() {
        let (t, r) = tree();
        let ws = t.path().join("ws");
        symlink(t.path(), ws.join("up")).unwrap();
        refused(
            r.create_dir_all(Path::new("up/made"), 0o755),
            "dir under a link",
        );
        assert!(!t.path().join("made").exists());
        refused(
            r.create_file(Path::new("up/new"), 0o644),
            "file under a link",
        );
        assert!(!t.path().join("new").exists());
        r.create_dir_all(Path::new("x/y/z"), 0o755).unwrap();
        assert!(ws.join("x/y/z").is_dir());
        // A file named by a link is replaced, and its target kept.
        symlink(t.path().join("outside"), ws.join("x/target")).unwrap();
        r.write_atomic(Path::new("x/target"), b"new", 0o644)
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(t.path().join("outside")).unwrap(),
            "out"
        );
        assert_eq!(std::fs::read_to_string(ws.join("x/target")).unwrap(), "new");
        refused(
            r.write_atomic(Path::new("up/w"), b"x", 0o644),
            "write under a link",
        );
        assert!(!t.path().join("w").exists());
    }

    /// As root: a mount by fd copies what was opened, even after the name
    /// is swapped for a link.
    #[test]
    fn mounts_what_was_opened() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: needs root");
            return;
        }
        let t = tempfile::tempdir_in("/var/tmp").unwrap();
        std::fs::create_dir_all(t.path().join("ws/d")).unwrap();
        std::fs::write(t.path().join("ws/d/f"), "mine").unwrap();
        std::fs::create_dir_all(t.path().join("other")).unwrap();
        std::fs::create_dir_all(t.path().join("dst")).unwrap();
        let r = Root::open(&t.path().join("ws")).unwrap();
        let (fd, k) = r.open_mount_source(Path::new("d")).unwrap();
        assert_eq!(k, Kind::Dir);
        std::fs::rename(t.path().join("ws/d"), t.path().join("ws/d2")).unwrap();
        symlink(t.path().join("other"), t.path().join("ws/d")).unwrap();
        clone_to(&fd, &t.path().join("dst"), true).unwrap();
        assert_eq!(
            std::fs::read_to_string(t.path().join("dst/f")).unwrap(),
            "mine"
        );
        assert!(std::fs::write(t.path().join("dst/g"), "x").is_err());
        crate::idmap::detach(&t.path().join("dst")).unwrap();
    }
}
