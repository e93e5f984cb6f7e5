//! The one way sbx opens, creates, writes or mounts a path inside a tree
//! someone else can write (the workspace, a volume, a backup being
//! restored): openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS, so no component is a link and nothing resolves
//! outside the root, whatever was swapped in between. runc resolves its
//! container paths the same way since CVE-2021-30465
//! (<https://github.com/opencontainers/runc/security/advisories/GHSA-c3xm-pvg7-gh7r>).
//! Mount sources are opened O_PATH and mounted by fd (`clone_to`).
//!
//! Two handles, one resolver: [`Root`] takes relative paths, [`Dir`] takes
//! single names (refusing `/`, `.`, `..` and NUL) plus [`Dir::walk`] for a
//! relative path of plain names; both open through `beneath_at`. Temporary
//! files have one scheme ([`tmp_name`], [`Dir::temp_file`]) and are put in
//! place by one rename ([`Dir::replace`]).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{FileStat, Mode, SFlag, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

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

/// openat2 of `rel` beneath `dir`: the one resolver every open here uses.
fn beneath_at(dir: BorrowedFd<'_>, rel: &Path, flags: OFlag, mode: u32) -> nix::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .mode(Mode::from_bits_truncate(mode))
        .resolve(resolve());
    // EAGAIN: a rename raced a ".." walk; the kernel asks for a retry.
    let mut tries = 0;
    loop {
        match nix::fcntl::openat2(dir, rel, how) {
            Err(Errno::EAGAIN) if tries < 16 => tries += 1,
            r => return r,
        }
    }
}

fn kind_of(st: &FileStat) -> Kind {
    match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFDIR => Kind::Dir,
        SFlag::S_IFREG => Kind::File,
        SFlag::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    }
}

/// Kind of an open fd (fstat; an O_PATH fd on a link stats the link).
pub fn kind(fd: impl AsFd) -> io::Result<Kind> {
    Ok(kind_of(&nix::sys::stat::fstat(fd.as_fd())?))
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
        beneath_at(self.fd.as_fd(), rel, flags, mode).map_err(|e| self.error(rel, e))
    }

    /// The directory `rel` as a [`Dir`], for per-name work inside it.
    pub fn dir(&self, rel: &Path) -> io::Result<Dir> {
        self.open_with(rel, DIR_FLAGS, 0).map(Dir)
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
        let dir = self.dir(parent)?;
        let (mut f, tmp) = dir.temp_file()?;
        let r = (|| {
            f.write_all(data)?;
            // The temp is made 0600; give it `mode` as a create would.
            nix::sys::stat::fchmod(&f, Mode::from_bits_truncate(mode & !umask()))?;
            f.sync_all()?;
            dir.replace(&tmp, name)
        })();
        if r.is_err() {
            let _ = dir.unlink(&tmp);
        }
        r.map_err(|e| with_path(&self.path.join(rel), e))
    }
}

/// The process's umask, read without changing it (Linux 4.7+ reports it
/// in /proc/self/status); 022 if it cannot be read.
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("Umask:"))?;
            u32::from_str_radix(l["Umask:".len()..].trim(), 8).ok()
        })
        .unwrap_or(0o022)
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

fn io(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Refuse anything but one plain name: per-name ops never walk.
fn name_ok(name: &OsStr) -> io::Result<&Path> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?}: not a single plain file name"),
        ));
    }
    Ok(Path::new(name))
}

/// A short temporary name (`.sbx-` and 16 random hex digits): fits
/// NAME_MAX whatever the final name's length and is not predictable.
pub fn tmp_name() -> String {
    use std::hash::BuildHasher;
    static N: AtomicU64 = AtomicU64::new(0);
    // RandomState's keys come from the OS's random source (once per
    // thread); no pid, which costs a syscall per name.
    let seed = (
        N.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now(),
    );
    let h = std::collections::hash_map::RandomState::new().hash_one(seed);
    format!(".sbx-{h:016x}")
}

// No O_NOFOLLOW: RESOLVE_NO_SYMLINKS refuses a final link too, as ELOOP
// (O_NOFOLLOW | O_DIRECTORY would say ENOTDIR, a worse message).
const DIR_FLAGS: OFlag = OFlag::O_RDONLY.union(OFlag::O_DIRECTORY);

/// What `Dir::stat` reports of a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    /// st_mode's permission and special bits (07777).
    pub mode: u32,
    pub size: u64,
    pub mtime: i64,
}

fn meta_of(st: &FileStat) -> Meta {
    Meta {
        kind: kind_of(st),
        mode: st.st_mode & 0o7777,
        size: st.st_size as u64,
        mtime: st.st_mtime,
    }
}

/// An open directory that reads and writes go beneath.
#[derive(Debug)]
pub struct Dir(OwnedFd);

impl From<OwnedFd> for Dir {
    /// The caller vouches that `fd` is a directory it opened safely.
    fn from(fd: OwnedFd) -> Self {
        Dir(fd)
    }
}

/// The metadata of an open file.
pub fn fmeta(f: &impl AsFd) -> io::Result<Meta> {
    nix::sys::stat::fstat(f.as_fd())
        .map(|st| meta_of(&st))
        .map_err(io)
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl Dir {
    /// Open `path` as a directory. Its last component must not be a
    /// symlink; the ones before it are the caller's own path.
    pub fn open(path: &Path) -> io::Result<Dir> {
        nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map(Dir)
        .map_err(io)
    }

    /// A second handle on the same directory (for another thread).
    pub fn try_clone(&self) -> io::Result<Dir> {
        self.0.try_clone().map(Dir)
    }

    /// The directory `name` in this one, not through a link.
    pub fn sub(&self, name: &OsStr) -> io::Result<Dir> {
        beneath_at(self.0.as_fd(), name_ok(name)?, DIR_FLAGS, 0)
            .map(Dir)
            .map_err(io)
    }

    /// The directory `rel` (plain names joined by `/`; `.`, `..` and an
    /// absolute path are refused) beneath this one. With `create`, missing
    /// components are made with that mode.
    pub fn walk(&self, rel: &Path, create: Option<u32>) -> io::Result<Dir> {
        let mut names = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => names.push(name_ok(n)?),
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{}: `..`, `.` or absolute", rel.display()),
                    ));
                }
            }
        }
        let Some(mode) = create else {
            let rel = if names.is_empty() {
                Path::new(".")
            } else {
                rel
            };
            return beneath_at(self.0.as_fd(), rel, DIR_FLAGS, 0)
                .map(Dir)
                .map_err(io);
        };
        let mut cur = beneath_at(self.0.as_fd(), Path::new("."), DIR_FLAGS, 0)
            .map(Dir)
            .map_err(io)?;
        for n in names {
            let n = n.as_os_str();
            cur = match cur.sub(n) {
                Err(e) if e.raw_os_error() == Some(Errno::ENOENT as i32) => {
                    match mkdirat(&cur.0, n, Mode::from_bits_truncate(mode)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(io(e)),
                    }
                    cur.sub(n)?
                }
                r => r?,
            };
        }
        Ok(cur)
    }

    /// What `name` is (None when missing), the link itself for a link.
    pub fn kind(&self, name: &OsStr) -> io::Result<Option<Kind>> {
        Ok(self.stat(name)?.map(|m| m.kind))
    }

    /// `name`'s metadata (None when missing), the link itself for a link.
    pub fn stat(&self, name: &OsStr) -> io::Result<Option<Meta>> {
        match fstatat(&self.0, name_ok(name)?, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(meta_of(&st))),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(io(e)),
        }
    }

    /// The names in this directory (without `.` and `..`).
    pub fn names(&self) -> io::Result<Vec<OsString>> {
        use std::os::unix::ffi::OsStrExt;
        let fd = self.0.try_clone()?;
        let mut d = nix::dir::Dir::from_fd(fd).map_err(io)?;
        let mut out = Vec::new();
        for e in d.iter() {
            let e = e.map_err(io)?;
            let n = e.file_name().to_bytes();
            if n != b"." && n != b".." {
                out.push(OsStr::from_bytes(n).to_owned());
            }
        }
        // The clone shares the offset: rewind for the next reader.
        nix::unistd::lseek(&self.0, 0, nix::unistd::Whence::SeekSet).map_err(io)?;
        Ok(out)
    }

    /// Open `name` for reading: not through a link, and without blocking
    /// on a FIFO or taking a terminal (the caller checks it is a file).
    pub fn open_file(&self, name: &OsStr) -> io::Result<File> {
        beneath_at(
            self.0.as_fd(),
            name_ok(name)?,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY,
            0,
        )
        .map(File::from)
        .map_err(io)
    }

    /// The target of the link `name`.
    pub fn readlink(&self, name: &OsStr) -> io::Result<OsString> {
        nix::fcntl::readlinkat(&self.0, name_ok(name)?).map_err(io)
    }

    /// This directory's owner.
    pub fn owner(&self) -> io::Result<(u32, u32)> {
        let st = nix::sys::stat::fstat(&self.0).map_err(io)?;
        Ok((st.st_uid, st.st_gid))
    }

    /// The directory `name`, made with `mode` when missing; an existing
    /// non-directory there (a file, a link) is removed first, so nothing
    /// is entered through a link.
    pub fn make_dir(&self, name: &OsStr, mode: u32) -> io::Result<Dir> {
        self.ensure_dir(name, mode)?;
        self.sub(name)
    }

    /// Make `name` a directory (`mode` when made): kept when it is one,
    /// anything else there (a file, a link) removed first, not followed.
    pub fn ensure_dir(&self, name: &OsStr, mode: u32) -> io::Result<()> {
        match self.kind(name)? {
            Some(Kind::Dir) => return Ok(()),
            Some(_) => self.unlink(name)?,
            None => {}
        }
        match mkdirat(&self.0, name, Mode::from_bits_truncate(mode)) {
            Ok(()) | Err(Errno::EEXIST) => Ok(()),
            Err(e) => Err(io(e)),
        }
    }

    /// Remove `name`, a whole tree if it is a directory, never following
    /// a link; a missing name is not an error.
    pub fn remove_all(&self, name: &OsStr) -> io::Result<()> {
        match self.kind(name)? {
            None => Ok(()),
            Some(Kind::Dir) => {
                let d = self.sub(name)?;
                for n in d.names()? {
                    d.remove_all(&n)?;
                }
                unlinkat(&self.0, name, UnlinkatFlags::RemoveDir).map_err(io)
            }
            Some(_) => self.unlink(name),
        }
    }

    /// A new file under a fresh [`tmp_name`] (O_CREAT | O_EXCL |
    /// O_NOFOLLOW, mode 0600), for [`Dir::replace`] to put in place.
    pub fn temp_file(&self) -> io::Result<(File, OsString)> {
        loop {
            let tmp = tmp_name();
            match beneath_at(
                self.0.as_fd(),
                Path::new(&tmp),
                OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW,
                0o600,
            ) {
                Ok(fd) => return Ok((File::from(fd), tmp.into())),
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(io(e)),
            }
        }
    }

    /// Create `name` as a new file (O_CREAT | O_EXCL | O_NOFOLLOW, `mode`):
    /// it exists from the first instant under its own name, so a crash
    /// leaves no temporary beside it.
    pub fn create_new(&self, name: &OsStr, mode: u32) -> io::Result<File> {
        beneath_at(
            self.0.as_fd(),
            name_ok(name)?,
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW,
            mode,
        )
        .map(File::from)
        .map_err(io)
    }

    /// A new symlink under a fresh [`tmp_name`].
    pub fn temp_symlink(&self, target: &OsStr) -> io::Result<OsString> {
        loop {
            let tmp = tmp_name();
            match nix::unistd::symlinkat(target, &self.0, tmp.as_str()) {
                Ok(()) => return Ok(tmp.into()),
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(io(e)),
            }
        }
    }

    /// Put `tmp` in place of `name`: whatever `name` was (a file, a link)
    /// is replaced, never written through; a directory there is an error.
    pub fn replace(&self, tmp: &OsStr, name: &OsStr) -> io::Result<()> {
        let r = nix::fcntl::renameat(&self.0, name_ok(tmp)?, &self.0, name_ok(name)?).map_err(io);
        if r.is_err() {
            let _ = self.unlink(tmp);
        }
        r
    }

    /// Remove the non-directory `name` (a link is removed, not followed).
    pub fn unlink(&self, name: &OsStr) -> io::Result<()> {
        unlinkat(&self.0, name_ok(name)?, UnlinkatFlags::NoRemoveDir).map_err(io)
    }

    /// chown `name` itself (a link is not followed).
    pub fn chown(&self, name: &OsStr, uid: u32, gid: u32) -> io::Result<()> {
        nix::unistd::fchownat(
            &self.0,
            name_ok(name)?,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(io)
    }

    /// Set this directory's own permission bits.
    pub fn chmod(&self, mode: u32) -> io::Result<()> {
        nix::sys::stat::fchmod(&self.0, Mode::from_bits_truncate(mode)).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
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
        use std::os::unix::fs::PermissionsExt;
        let m = std::fs::symlink_metadata(ws.join("x/target")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o644 & !umask());
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

    #[test]
    fn nothing_goes_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("outside");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("f"), "keep").unwrap();
        let dest = t.path().join("dest");
        std::fs::create_dir(&dest).unwrap();
        std::os::unix::fs::symlink(&out, dest.join("d")).unwrap();
        std::os::unix::fs::symlink(out.join("f"), dest.join("f")).unwrap();
        std::os::unix::fs::symlink(&out, dest.join("top")).unwrap();
        assert!(
            Dir::open(&dest.join("top")).is_err(),
            "a linked top is refused"
        );
        let d = Dir::open(&dest).unwrap();
        assert!(d.sub(OsStr::new("d")).is_err());
        // A file over a link replaces the link.
        let (mut f, tmp) = d.temp_file().unwrap();
        f.write_all(b"new").unwrap();
        d.replace(&tmp, OsStr::new("f")).unwrap();
        // A directory over a link replaces the link.
        let sub = d.make_dir(OsStr::new("d"), 0o755).unwrap();
        let (_, tmp) = sub.temp_file().unwrap();
        sub.replace(&tmp, OsStr::new("x")).unwrap();
        assert_eq!(std::fs::read_to_string(out.join("f")).unwrap(), "keep");
        assert!(!out.join("x").exists());
        assert_eq!(std::fs::read_to_string(dest.join("f")).unwrap(), "new");
        assert_eq!(d.kind(OsStr::new("d")).unwrap(), Some(Kind::Dir));
    }

    /// From sbx-backup's walk: a link or `..` on the way is refused, with
    /// or without creating; temporary names stay short.
    #[test]
    fn walk_refuses_links_and_dotdot() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        symlink("/tmp", d.path().join("a/l")).unwrap();
        let root = Dir::open(d.path()).unwrap();
        assert!(root.walk(Path::new("a/b"), None).is_ok());
        assert!(root.walk(Path::new(""), None).is_ok());
        let e = root.walk(Path::new("a/l"), None).unwrap_err();
        assert!(
            [Errno::ENOTDIR as i32, Errno::ELOOP as i32].contains(&e.raw_os_error().unwrap()),
            "{e}"
        );
        assert!(root.walk(Path::new("a/l/x"), Some(0o700)).is_err());

        assert!(root.walk(Path::new("a/../.."), None).is_err());
        assert!(root.walk(Path::new("a/b/.."), Some(0o700)).is_err());
        let made = root.walk(Path::new("n/m"), Some(0o700)).unwrap();
        assert_eq!(fmeta(&made).unwrap().kind, Kind::Dir);
        assert!(tmp_name().len() < 32);
        assert_ne!(tmp_name(), tmp_name());
    }

    /// Per-name ops take one plain name, nothing that walks.
    #[test]
    fn names_with_a_walk_in_them_are_refused() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("d")).unwrap();
        std::fs::write(t.path().join("d/f"), "x").unwrap();
        let d = Dir::open(t.path()).unwrap();
        for bad in ["", ".", "..", "d/f", "/etc", "a\0b"] {
            let n = OsStr::new(bad);
            let e = d.open_file(n).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}: {e}");
            assert!(d.sub(n).is_err() && d.stat(n).is_err() && d.unlink(n).is_err());
        }
        assert!(d.sub(OsStr::new("d")).is_ok());
    }
}
