//! Writes beneath a directory fd that never follow a link: what restore
//! uses for every path it creates, replaces or changes, so a home (or a
//! store) holding symlinks cannot make it write outside its target.
//!
//! MERGE: `dir` is a component-by-component `openat(O_NOFOLLOW)` walk,
//! the same contract as sbx-sys's shared `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)` helper being written in parallel; switch `dir`
//! to that helper when both land.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{Mode, SFlag, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Open `p` itself as a directory (refusing a symlink there).
pub fn open_root(p: &Path) -> io::Result<OwnedFd> {
    Ok(nix::fcntl::open(p, DIR_FLAGS, Mode::empty())?)
}

/// The directory `rel` (slash-separated, already checked safe) beneath
/// `root`; with `create`, missing components are made 0700. A symlink or
/// a non-directory on the way is an error (ELOOP / ENOTDIR), never followed.
pub fn dir(root: BorrowedFd<'_>, rel: &[u8], create: bool) -> io::Result<OwnedFd> {
    let mut cur: Option<OwnedFd> = None;
    for c in rel.split(|b| *b == b'/').filter(|c| !c.is_empty()) {
        let name = Path::new(std::ffi::OsStr::from_bytes(c));
        if c == b".." || c == b"." {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "`..` or `.`"));
        }
        let at = cur.as_ref().map_or(root, |f| f.as_fd());
        let next = match openat(at, name, DIR_FLAGS, Mode::empty()) {
            Err(Errno::ENOENT) if create => {
                match mkdirat(at, name, Mode::from_bits_truncate(0o700)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                openat(at, name, DIR_FLAGS, Mode::empty())?
            }
            r => r?,
        };
        cur = Some(next);
    }
    match cur {
        Some(f) => Ok(f),
        None => Ok(root.try_clone_to_owned()?),
    }
}

/// Split a relative path into (parent, name).
pub fn split(rel: &[u8]) -> (&[u8], &Path) {
    let (parent, name) = match rel.iter().rposition(|b| *b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&b""[..], rel),
    };
    (parent, Path::new(std::ffi::OsStr::from_bytes(name)))
}

/// What `name` in `dir` is, without following it: None when absent.
pub fn kind(dir: BorrowedFd<'_>, name: &Path) -> io::Result<Option<(SFlag, u64)>> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some((
            SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()),
            st.st_size as u64,
        ))),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A short temporary name: fits NAME_MAX whatever the final name's
/// length, and is never predictable from it.
pub fn tmp_name() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let seed = format!(
        "{}:{}:{:?}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
    );
    format!(".sbx-{}", &blake3::hash(seed.as_bytes()).to_hex()[..16])
}

/// Create a new file 0600 in `dir` under a fresh temporary name (O_EXCL,
/// O_NOFOLLOW: nothing already there is opened).
pub fn create_tmp(dir: BorrowedFd<'_>) -> io::Result<(OwnedFd, String)> {
    loop {
        let t = tmp_name();
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW;
        match openat(
            dir,
            t.as_str(),
            flags | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        ) {
            Ok(f) => return Ok((f, t)),
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Open an existing regular file for reading, never through a link.
pub fn open_file(dir: BorrowedFd<'_>, name: &Path) -> io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    Ok(openat(dir, name, flags, Mode::empty())?)
}

/// Move `tmp` over `name` in `dir`; a directory in the way is removed first.
pub fn replace(dir: BorrowedFd<'_>, tmp: &str, name: &Path) -> io::Result<()> {
    if let Some((SFlag::S_IFDIR, _)) = kind(dir, name)? {
        remove(dir, name)?;
    }
    Ok(renameat(dir, tmp, dir, name)?)
}

pub fn unlink(dir: BorrowedFd<'_>, name: &str) {
    let _ = unlinkat(dir, name, UnlinkatFlags::NoRemoveDir);
}

/// Remove `name` from `dir`, a whole tree if it is a directory, never
/// following a link.
pub fn remove(dir: BorrowedFd<'_>, name: &Path) -> io::Result<()> {
    match kind(dir, name)? {
        None => Ok(()),
        Some((SFlag::S_IFDIR, _)) => {
            let fd = openat(dir, name, DIR_FLAGS, Mode::empty())?;
            let mut d = nix::dir::Dir::from_fd(fd)?;
            let names: Vec<Vec<u8>> = d
                .iter()
                .flatten()
                .map(|e| e.file_name().to_bytes().to_vec())
                .filter(|n| n != b"." && n != b"..")
                .collect();
            for n in names {
                remove(d.as_fd(), Path::new(std::ffi::OsStr::from_bytes(&n)))?;
            }
            Ok(unlinkat(dir, name, UnlinkatFlags::RemoveDir)?)
        }
        Some(_) => Ok(unlinkat(dir, name, UnlinkatFlags::NoRemoveDir)?),
    }
}

/// Make `name` in `dir` a directory: kept when it is one, replaced when
/// anything else (a symlink is removed, not followed).
pub fn ensure_dir(dir: BorrowedFd<'_>, name: &Path) -> io::Result<()> {
    match kind(dir, name)? {
        Some((SFlag::S_IFDIR, _)) => return Ok(()),
        Some(_) => remove(dir, name)?,
        None => {}
    }
    match mkdirat(dir, name, Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(Errno::EEXIST) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_refuses_links_and_dotdot() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        std::os::unix::fs::symlink("/tmp", d.path().join("a/l")).unwrap();
        let root = open_root(d.path()).unwrap();
        assert!(dir(root.as_fd(), b"a/b", false).is_ok());
        // ENOTDIR or ELOOP: either way the link is not followed.
        let e = dir(root.as_fd(), b"a/l", false).unwrap_err();
        assert!(
            [Errno::ENOTDIR as i32, Errno::ELOOP as i32].contains(&e.raw_os_error().unwrap()),
            "{e}"
        );
        assert!(dir(root.as_fd(), b"a/l/x", true).is_err());
        assert!(dir(root.as_fd(), b"a/../..", false).is_err());
        assert!(tmp_name().len() < 32);
    }
}
