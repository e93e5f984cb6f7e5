//! Writes beneath a directory held open: every operation names one
//! component relative to a directory fd, never a path, and none follows a
//! symlink (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW, O_EXCL creates, rename over a
//! name rather than a write through it). A tree written through [`Dir`]
//! cannot reach outside the directory it started from, whatever links
//! the data's author planted under it before or during the write.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

fn io(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// What a name is, without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

fn kind_of(st: &FileStat) -> Kind {
    match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFDIR => Kind::Dir,
        SFlag::S_IFREG => Kind::File,
        SFlag::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    }
}

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

static SEQ: AtomicU64 = AtomicU64::new(0);

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

    /// The directory `name` in this one, not through a link.
    pub fn sub(&self, name: &OsStr) -> io::Result<Dir> {
        openat(
            &self.0,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map(Dir)
        .map_err(io)
    }

    /// What `name` is (None when missing), the link itself for a link.
    pub fn kind(&self, name: &OsStr) -> io::Result<Option<Kind>> {
        Ok(self.stat(name)?.map(|m| m.kind))
    }

    /// `name`'s metadata (None when missing), the link itself for a link.
    pub fn stat(&self, name: &OsStr) -> io::Result<Option<Meta>> {
        match fstatat(&self.0, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
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
        openat(
            &self.0,
            name,
            OFlag::O_RDONLY
                | OFlag::O_NOFOLLOW
                | OFlag::O_NONBLOCK
                | OFlag::O_NOCTTY
                | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map(File::from)
        .map_err(io)
    }

    /// The target of the link `name`.
    pub fn readlink(&self, name: &OsStr) -> io::Result<OsString> {
        nix::fcntl::readlinkat(&self.0, name).map_err(io)
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
        match self.kind(name)? {
            Some(Kind::Dir) => {}
            Some(_) => {
                self.unlink(name)?;
                mkdirat(&self.0, name, Mode::from_bits_truncate(mode)).map_err(io)?;
            }
            None => mkdirat(&self.0, name, Mode::from_bits_truncate(mode)).map_err(io)?,
        }
        self.sub(name)
    }

    /// A new file under a fresh temporary name (O_CREAT | O_EXCL |
    /// O_NOFOLLOW, mode 0600), for [`Dir::replace`] to put in place.
    pub fn temp_file(&self) -> io::Result<(File, OsString)> {
        loop {
            let tmp = OsString::from(format!(
                ".sbx-tmp-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            match openat(
                &self.0,
                tmp.as_os_str(),
                OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_WRONLY
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o600),
            ) {
                Ok(fd) => return Ok((File::from(fd), tmp)),
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(io(e)),
            }
        }
    }

    /// A new symlink under a fresh temporary name.
    pub fn temp_symlink(&self, target: &OsStr) -> io::Result<OsString> {
        loop {
            let tmp = OsString::from(format!(
                ".sbx-tmp-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            match nix::unistd::symlinkat(target, &self.0, tmp.as_os_str()) {
                Ok(()) => return Ok(tmp),
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(io(e)),
            }
        }
    }

    /// Put `tmp` in place of `name`: whatever `name` was (a file, a link)
    /// is replaced, never written through; a directory there is an error.
    pub fn replace(&self, tmp: &OsStr, name: &OsStr) -> io::Result<()> {
        let r = nix::fcntl::renameat(&self.0, tmp, &self.0, name).map_err(io);
        if r.is_err() {
            let _ = self.unlink(tmp);
        }
        r
    }

    /// Remove the non-directory `name` (a link is removed, not followed).
    pub fn unlink(&self, name: &OsStr) -> io::Result<()> {
        unlinkat(&self.0, name, UnlinkatFlags::NoRemoveDir).map_err(io)
    }

    /// chown `name` itself (a link is not followed).
    pub fn chown(&self, name: &OsStr, uid: u32, gid: u32) -> io::Result<()> {
        nix::unistd::fchownat(
            &self.0,
            name,
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
}
