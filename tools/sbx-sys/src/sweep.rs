//! Sweeping a tree another uid wrote, with nothing of it followed: the
//! start of a sandbox made from a snapshot removes what the agent left
//! outside its home (sbx-guest's snapclean.rs decides what; this walks).
//!
//! Every directory is opened by fd, relative to its parent's
//! (`openat(O_DIRECTORY | O_NOFOLLOW)`), entries are told apart by their
//! d_type, only directories (and the files the caller asks about) are
//! stat'ed, and names are removed with `unlinkat` on their directory's fd:
//! a link is removed, never followed. One directory fd is open at a time:
//! the walk climbs back through `..`, checked against the device and inode
//! it came down from, so a tree of any depth runs out of neither fds nor
//! stack. Directories on another device (mount points) are never entered
//! or removed.
//!
//! The guest is root without CAP_DAC_OVERRIDE or CAP_FOWNER. It reads
//! every directory through CAP_DAC_READ_SEARCH and changes one as its
//! owner (setfsuid(2), this thread only), adding the owner's write and
//! search bits first where they are missing (put back on a directory that
//! stays).

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};
use nix::unistd::{Uid, UnlinkatFlags, unlinkat};

/// What the walk knows of an entry (lstat: a link is the link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub uid: u32,
    pub gid: u32,
    /// Permission and special bits (07777).
    pub mode: u32,
    pub dev: u64,
    pub ino: u64,
    pub dir: bool,
}

fn stat_of(st: &FileStat) -> Stat {
    Stat {
        uid: st.st_uid,
        gid: st.st_gid,
        mode: st.st_mode & 0o7777,
        dev: st.st_dev,
        ino: st.st_ino,
        dir: SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR,
    }
}

/// What becomes of one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Keep,
    /// Walk into it (a directory; for anything else the same as Keep).
    Enter,
    /// Remove it, a directory with everything in it.
    Remove,
}

/// The caller's rules: asked once per directory and once per entry.
pub trait Policy {
    /// What the rules keep of one directory while its entries are decided.
    type Dir;
    /// Entering `dir`: its state, and whether `decide` needs the stat of
    /// each non-directory in it.
    fn enter(&mut self, dir: &Path, st: &Stat) -> (Self::Dir, bool);
    /// What to do with `name` in `dir`; `st` is its stat, always given
    /// for a directory, for a non-directory when `enter` asked for it.
    fn decide(&mut self, dir: &Path, d: &Self::Dir, name: &OsStr, st: Option<&Stat>) -> Act;
}

/// What a sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Directories read.
    pub dirs: u64,
    /// Entries removed (each file, link and directory counts).
    pub removed: u64,
}

const DIR_OPEN: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// The thread's filesystem uid: the one it started with, or a directory's
/// owner while it changes that directory (only when it started as root).
struct FsUid {
    home: u32,
    cur: u32,
}

impl FsUid {
    fn new() -> Self {
        // setfsuid(-1) changes nothing and says the current one.
        let cur = nix::unistd::setfsuid(Uid::from_raw(u32::MAX)).as_raw();
        FsUid { home: cur, cur }
    }

    fn be(&mut self, uid: u32) -> io::Result<()> {
        let uid = if self.home == 0 { uid } else { self.home };
        if uid == self.cur {
            return Ok(());
        }
        nix::unistd::setfsuid(Uid::from_raw(uid));
        let now = nix::unistd::setfsuid(Uid::from_raw(u32::MAX)).as_raw();
        self.cur = now;
        if now != uid {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("cannot act as uid {uid} (setfsuid)"),
            ));
        }
        Ok(())
    }

    fn back(&mut self) -> io::Result<()> {
        self.be(self.home)
    }
}

impl Drop for FsUid {
    fn drop(&mut self) {
        let _ = self.back();
    }
}

/// One directory on the way down.
struct Frame<D> {
    /// Its name in its parent (empty for the root).
    name: OsString,
    st: Stat,
    /// Names and whether each is a directory (None: d_type unknown).
    entries: std::vec::IntoIter<(OsString, Option<bool>)>,
    removing: bool,
    stat_files: bool,
    /// Its mode before the owner's bits were added.
    mode_was: Option<u32>,
    rules: Option<D>,
}

fn err(path: &Path, what: &str, e: Errno) -> io::Error {
    io::Error::new(
        io::Error::from_raw_os_error(e as i32).kind(),
        format!("{}: {what}: {e}", path.display()),
    )
}

/// The names in the directory `d`, with their d_type.
fn entries(d: &mut Dir) -> nix::Result<Vec<(OsString, Option<bool>)>> {
    let mut out = Vec::new();
    for e in d.iter() {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n == b"." || n == b".." {
            continue;
        }
        let dir = e.file_type().map(|t| t == nix::dir::Type::Directory);
        out.push((OsStr::from_bytes(n).to_owned(), dir));
    }
    Ok(out)
}

/// Walk `root` (a directory, not a link), asking `policy` about each
/// entry. Stops at the first error, saying where; what was removed until
/// then stays removed.
pub fn sweep<P: Policy>(root: &Path, policy: &mut P) -> io::Result<Swept> {
    let mut fs = FsUid::new();
    let mut done = Swept::default();
    let mut cur = Dir::open(root, DIR_OPEN, Mode::empty()).map_err(|e| err(root, "open", e))?;
    let st = stat_of(&fstat(&cur).map_err(|e| err(root, "stat", e))?);
    let mut path = root.to_path_buf();
    let list = entries(&mut cur).map_err(|e| err(&path, "read", e))?;
    let (rules, stat_files) = policy.enter(&path, &st);
    let mut stack: Vec<Frame<P::Dir>> = vec![Frame {
        name: OsString::new(),
        st,
        entries: list.into_iter(),
        removing: false,
        stat_files,
        mode_was: None,
        rules: Some(rules),
    }];
    loop {
        let top = stack.last_mut().expect("the root's frame");
        let Some((name, is_dir)) = top.entries.next() else {
            // This directory is done: put its mode back, climb to its parent.
            let f = stack.pop().expect("a frame");
            done.dirs += 1;
            if let (Some(m), false) = (f.mode_was, f.removing) {
                fs.be(f.st.uid)?;
                nix::sys::stat::fchmod(&cur, Mode::from_bits_truncate(m))
                    .map_err(|e| err(&path, "chmod back", e))?;
            }
            let Some(parent) = stack.last_mut() else {
                return Ok(done);
            };
            fs.back()?;
            let up = Dir::openat(&cur, "..", DIR_OPEN, Mode::empty())
                .map_err(|e| err(&path, "open ..", e))?;
            let up_st = stat_of(&fstat(&up).map_err(|e| err(&path, "stat ..", e))?);
            path.pop();
            if (up_st.dev, up_st.ino) != (parent.st.dev, parent.st.ino) {
                return Err(io::Error::other(format!(
                    "{}: moved while it was swept",
                    path.display()
                )));
            }
            cur = up;
            if f.removing {
                writable(&mut fs, &cur, parent, &path)?;
                unlinkat(&cur, f.name.as_os_str(), UnlinkatFlags::RemoveDir)
                    .map_err(|e| err(&path.join(&f.name), "remove", e))?;
                done.removed += 1;
            }
            continue;
        };
        fs.back()?;
        let at = |fd: &Dir| {
            fstatat(fd, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                .map(|s| stat_of(&s))
                .map_err(|e| err(&path.join(&name), "stat", e))
        };
        let mut st = None;
        let is_dir = match is_dir {
            Some(d) => d,
            None => {
                let s = at(&cur)?;
                st = Some(s);
                s.dir
            }
        };
        if st.is_none() && (is_dir || (top.stat_files && !top.removing)) {
            st = Some(at(&cur)?);
        }
        if is_dir {
            let s = st.expect("a directory's stat");
            // A mount point: another filesystem, never walked nor removed.
            if s.dev != top.st.dev {
                continue;
            }
            let act = match &top.rules {
                Some(r) if !top.removing => policy.decide(&path, r, &name, Some(&s)),
                _ => Act::Remove,
            };
            if act == Act::Keep {
                continue;
            }
            let mut child = Dir::openat(&cur, name.as_os_str(), DIR_OPEN, Mode::empty())
                .map_err(|e| err(&path.join(&name), "open", e))?;
            let cst = stat_of(&fstat(&child).map_err(|e| err(&path.join(&name), "stat", e))?);
            if (cst.dev, cst.ino) != (s.dev, s.ino) {
                return Err(io::Error::other(format!(
                    "{}: changed while it was swept",
                    path.join(&name).display()
                )));
            }
            path.push(&name);
            let list = entries(&mut child).map_err(|e| err(&path, "read", e))?;
            let removing = act == Act::Remove;
            let (rules, stat_files) = match removing {
                true => (None, false),
                false => {
                    let (r, s) = policy.enter(&path, &cst);
                    (Some(r), s)
                }
            };
            stack.push(Frame {
                name,
                st: cst,
                entries: list.into_iter(),
                removing,
                stat_files,
                mode_was: None,
                rules,
            });
            cur = child;
            continue;
        }
        let act = match &top.rules {
            Some(r) if !top.removing => policy.decide(&path, r, &name, st.as_ref()),
            _ => Act::Remove,
        };
        if act == Act::Remove {
            writable(&mut fs, &cur, top, &path)?;
            unlinkat(&cur, name.as_os_str(), UnlinkatFlags::NoRemoveDir)
                .map_err(|e| err(&path.join(&name), "remove", e))?;
            done.removed += 1;
        }
    }
}

/// Act as the owner of `f`'s directory (open on `fd`), with its write and
/// search bits, to remove a name in it.
fn writable<D>(fs: &mut FsUid, fd: &Dir, f: &mut Frame<D>, path: &Path) -> io::Result<()> {
    fs.be(f.st.uid)?;
    if f.st.mode & 0o300 != 0o300 && f.mode_was.is_none() {
        nix::sys::stat::fchmod(fd, Mode::from_bits_truncate(f.st.mode | 0o300))
            .map_err(|e| err(path, "chmod", e))?;
        f.mode_was = Some(f.st.mode);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    /// Removes every entry named `x*`, walks the rest.
    struct ByName;
    impl Policy for ByName {
        type Dir = ();
        fn enter(&mut self, _: &Path, _: &Stat) -> ((), bool) {
            ((), false)
        }
        fn decide(&mut self, _: &Path, _: &(), name: &OsStr, _: Option<&Stat>) -> Act {
            if name.as_bytes().starts_with(b"x") {
                Act::Remove
            } else {
                Act::Enter
            }
        }
    }

    #[test]
    fn removes_what_the_policy_names_and_follows_no_link() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "k").unwrap();
        let r = t.path().join("root");
        std::fs::create_dir_all(r.join("a/xdir/sub")).unwrap();
        std::fs::write(r.join("a/xdir/sub/f"), "f").unwrap();
        std::fs::write(r.join("a/keep"), "k").unwrap();
        std::fs::write(r.join("a/x\nnewline"), "n").unwrap();
        // Links to a directory outside: removed or kept, never walked.
        symlink(&outside, r.join("a/xlink")).unwrap();
        symlink(&outside, r.join("a/link")).unwrap();
        nix::unistd::mkfifo(&r.join("a/xfifo"), Mode::from_bits_truncate(0o600)).unwrap();
        // A directory its owner cannot write: emptied, its mode put back.
        std::fs::create_dir(r.join("ro")).unwrap();
        std::fs::write(r.join("ro/xf"), "f").unwrap();
        std::fs::set_permissions(r.join("ro"), std::fs::Permissions::from_mode(0o555)).unwrap();
        let s = sweep(&r, &mut ByName).unwrap();
        let mut left: Vec<String> = walkdir(&r);
        left.sort();
        assert_eq!(left, ["a", "a/keep", "a/link", "ro"]);
        assert_eq!(std::fs::read_to_string(outside.join("keep")).unwrap(), "k");
        let m = std::fs::metadata(r.join("ro"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777;
        assert_eq!(m, 0o555);
        assert_eq!(s.removed, 7, "{s:?}");
    }

    /// Deeper than any fd limit or stack would allow a recursive walk.
    #[test]
    fn a_deep_tree_goes_whole() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path().join("root");
        std::fs::create_dir(&r).unwrap();
        let mut fd = nix::fcntl::open(&r, DIR_OPEN, Mode::empty()).unwrap();
        let depth = 3000;
        for i in 0..depth {
            let n = if i == 0 { "xtop" } else { "d" };
            nix::sys::stat::mkdirat(&fd, n, Mode::from_bits_truncate(0o700)).unwrap();
            fd = nix::fcntl::openat(&fd, n, DIR_OPEN, Mode::empty()).unwrap();
        }
        nix::fcntl::openat(
            &fd,
            "f",
            OFlag::O_CREAT | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        drop(fd);
        let s = sweep(&r, &mut ByName).unwrap();
        assert_eq!(s.removed, depth + 1);
        assert!(walkdir(&r).is_empty());
    }

    fn walkdir(r: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut todo = vec![r.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let p = e.path();
                out.push(p.strip_prefix(r).unwrap().to_string_lossy().into_owned());
                if e.file_type().unwrap().is_dir() {
                    todo.push(p);
                }
            }
        }
        out
    }
}
