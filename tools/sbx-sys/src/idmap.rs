//! Idmapped mounts (mount_setattr(2), Linux 5.12): a workspace owned by any
//! host uid appears to the sandbox's agent as its own, and what the agent
//! creates lands on disk owned by the workspace's owner, with no privilege
//! inside the sandbox. nix has no wrapper for the new mount API, so the
//! three syscalls and the short-lived user namespace that carries the
//! mapping are made here, the one crate allowed `unsafe`.
#![allow(unsafe_code)] // fork, open_tree, mount_setattr, move_mount, umount2, mount

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One line of a uid_map/gid_map: ids `inside..inside+count` of the mount's
/// view are ids `outside..` on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    pub inside: u32,
    pub outside: u32,
    pub count: u32,
}

/// A map that swaps `a` and `b` and leaves every other id as it is, so only
/// the owner and the agent trade places; root stays root, others stay
/// themselves. (u32::MAX is "no id" and cannot be mapped.)
pub fn swap(a: u32, b: u32) -> Vec<IdRange> {
    let ident = |start: u64, end: u64| {
        (end > start).then(|| IdRange {
            inside: start as u32,
            outside: start as u32,
            count: (end - start) as u32,
        })
    };
    let end = u64::from(u32::MAX);
    if a == b {
        return ident(0, end).into_iter().collect();
    }
    let (lo, hi) = (a.min(b), a.max(b));
    let mut v: Vec<IdRange> = ident(0, lo.into()).into_iter().collect();
    v.push(IdRange {
        inside: lo,
        outside: hi,
        count: 1,
    });
    v.extend(ident(u64::from(lo) + 1, hi.into()));
    v.push(IdRange {
        inside: hi,
        outside: lo,
        count: 1,
    });
    v.extend(ident(u64::from(hi) + 1, end));
    v
}

fn map_text(m: &[IdRange]) -> String {
    m.iter()
        .map(|r| format!("{} {} {}\n", r.inside, r.outside, r.count))
        .collect()
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// A user namespace holding `uids` and `gids`, as an fd. A forked child
/// unshares it and waits; we write its maps, keep the namespace by fd and
/// let the child go.
fn userns(uids: &[IdRange], gids: &[IdRange]) -> io::Result<OwnedFd> {
    use nix::sys::wait::waitpid;
    use nix::unistd::{ForkResult, fork, pipe, read, write};
    let (ready_r, ready_w) = pipe()?;
    let (done_r, done_w) = pipe()?;
    // SAFETY: the child makes only async-signal-safe calls (close, unshare,
    // write, read, _exit), so forking a multi-threaded process is sound.
    match unsafe { fork() }? {
        ForkResult::Child => {
            drop(ready_r);
            drop(done_w);
            let ok = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER).is_ok();
            let _ = write(&ready_w, &[u8::from(ok)]);
            let mut b = [0u8; 1];
            let _ = read(&done_r, &mut b);
            // SAFETY: _exit ends the child without running the parent's
            // atexit handlers or destructors.
            unsafe { libc::_exit(0) }
        }
        ForkResult::Parent { child } => {
            drop(ready_w);
            drop(done_r);
            let result = (|| {
                let mut b = [0u8; 1];
                if read(&ready_r, &mut b)? != 1 || b[0] != 1 {
                    return Err(io::Error::from(io::ErrorKind::PermissionDenied));
                }
                let proc = PathBuf::from(format!("/proc/{child}"));
                std::fs::write(proc.join("uid_map"), map_text(uids))?;
                std::fs::write(proc.join("gid_map"), map_text(gids))?;
                Ok(OwnedFd::from(std::fs::File::open(proc.join("ns/user"))?))
            })();
            drop(done_w);
            let _ = waitpid(child, None);
            result
        }
    }
}

/// Mount `source` at `target` (an existing directory) through `uids` and
/// `gids`. Errors: EPERM without root, EINVAL when the kernel or the
/// source's filesystem has no idmapped mounts.
pub fn bind(source: &Path, target: &Path, uids: &[IdRange], gids: &[IdRange]) -> io::Result<()> {
    map_and_move(clone_tree(source)?, target, uids, gids)
}

/// [`bind`] of what `source` is open on (an O_PATH fd from
/// `beneath::Root::open_mount_source`): nothing is looked up by name, so a
/// link swapped in after the open is never followed.
pub fn bind_fd(
    source: &OwnedFd,
    target: &Path,
    uids: &[IdRange],
    gids: &[IdRange],
) -> io::Result<()> {
    // "" with AT_EMPTY_PATH names `source` itself.
    let tree = open_tree(source.as_raw_fd(), c"", libc::AT_EMPTY_PATH as libc::c_uint)?;
    map_and_move(tree, target, uids, gids)
}

fn map_and_move(
    tree: OwnedFd,
    target: &Path,
    uids: &[IdRange],
    gids: &[IdRange],
) -> io::Result<()> {
    let ns = userns(uids, gids)?;
    set_attr(
        &tree,
        libc::mount_attr {
            attr_set: libc::MOUNT_ATTR_IDMAP,
            attr_clr: 0,
            propagation: 0,
            userns_fd: ns.as_raw_fd() as u64,
        },
    )?;
    move_to(&tree, target)
}

/// Move the detached mount `tree` onto `target`, a path.
pub(crate) fn move_to(tree: &OwnedFd, target: &Path) -> io::Result<()> {
    let dst = cpath(target)?;
    let empty = c"";
    // SAFETY: both paths are NUL-terminated and outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            dst.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A detached copy of the mount tree at `source` (open_tree OPEN_TREE_CLONE).
fn clone_tree(source: &Path) -> io::Result<OwnedFd> {
    let src = cpath(source)?;
    open_tree(libc::AT_FDCWD, &src, 0)
}

/// open_tree(2) OPEN_TREE_CLONE of `path` from `dirfd`, with `flags` more.
pub(crate) fn open_tree(
    dirfd: libc::c_int,
    path: &std::ffi::CStr,
    flags: libc::c_uint,
) -> io::Result<OwnedFd> {
    let flags = (libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC) as libc::c_uint | flags;
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, dirfd, path.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: open_tree returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Make the detached tree `tree` read-only.
pub(crate) fn readonly(tree: &OwnedFd) -> io::Result<()> {
    set_attr(
        tree,
        libc::mount_attr {
            attr_set: libc::MOUNT_ATTR_RDONLY,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        },
    )
}

/// Apply `attr` to the detached tree `tree` itself.
fn set_attr(tree: &OwnedFd, attr: libc::mount_attr) -> io::Result<()> {
    let empty = c"";
    // SAFETY: `attr` lives across the call and its size is passed with it;
    // AT_EMPTY_PATH with "" applies to the detached tree `tree` itself.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Detach the mount at `target` (lazily: containers that bound it keep
/// their copy until they go).
pub fn detach(target: &Path) -> io::Result<()> {
    let dst = cpath(target)?;
    // SAFETY: `dst` is a NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(dst.as_ptr(), libc::MNT_DETACH) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Mount a fresh tmpfs on `target` (nosuid, nodev), with `opts` as its
/// data (`mode=…,uid=…,gid=…,size=…`).
pub fn mount_tmpfs(target: &Path, opts: &str) -> io::Result<()> {
    let dst = cpath(target)?;
    let data = CString::new(opts)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "options contain a NUL byte"))?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let r = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            dst.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One line of /proc/self/mountinfo: where, what filesystem type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    pub point: PathBuf,
    pub fstype: String,
}

/// mountinfo escapes space, tab, newline and backslash as \ooo.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Every mount of this process's namespace, in mount order.
pub fn mounts() -> io::Result<Vec<MountInfo>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(text.lines().filter_map(parse_mountinfo).collect())
}

fn parse_mountinfo(line: &str) -> Option<MountInfo> {
    use std::os::unix::ffi::OsStringExt;
    let mut f = line.split(' ');
    let point = f.nth(4)?;
    let fstype = f.skip_while(|x| *x != "-").nth(1)?;
    Some(MountInfo {
        point: PathBuf::from(std::ffi::OsString::from_vec(unescape(point))),
        fstype: fstype.to_owned(),
    })
}

/// The mount that holds `path` (the longest mount point above it).
pub fn mount_of(path: &Path) -> Option<MountInfo> {
    mounts()
        .ok()?
        .into_iter()
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.as_os_str().len())
}

/// Mount a read-only copy of `source` (a file or a directory) on the
/// object `target` is open on (from `beneath::Root::open_path`), not on a path that
/// could change in between.
pub fn bind_readonly_at(source: &Path, target: &OwnedFd) -> io::Result<()> {
    let tree = clone_tree(source)?;
    move_readonly_onto(&tree, target)
}

/// Bind the object `target` (an O_PATH fd) read-only onto itself: what is
/// there stays readable, nothing can write it, and as a mount point it can
/// be neither renamed nor removed. The fd is the source too, so no name is
/// looked up again.
pub fn bind_onto_itself_readonly(target: &OwnedFd) -> io::Result<()> {
    let tree = open_tree(target.as_raw_fd(), c"", libc::AT_EMPTY_PATH as libc::c_uint)?;
    move_readonly_onto(&tree, target)
}

/// Make the detached mount `tree` read-only and attach it on the object
/// `target` is open on.
fn move_readonly_onto(tree: &OwnedFd, target: &OwnedFd) -> io::Result<()> {
    readonly(tree)?;
    let empty = c"";
    // SAFETY: both fds are open; "" with the EMPTY_PATH flags names them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            target.as_raw_fd(),
            empty.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_maps_cover_every_id_once() {
        for (a, b) in [
            (1000, 0),
            (1000, 1234),
            (1000, 1000),
            (0, 1),
            (1000, u32::MAX - 1),
        ] {
            let m = swap(a, b);
            let total: u64 = m.iter().map(|r| u64::from(r.count)).sum();
            assert_eq!(total, u64::from(u32::MAX), "{a} {b}: {m:?}");
            let find = |id: u32| {
                m.iter()
                    .find(|r| id >= r.inside && id - r.inside < r.count)
                    .map(|r| r.outside + (id - r.inside))
            };
            assert_eq!(find(a), Some(b));
            assert_eq!(find(b), Some(a));
            assert_eq!(
                find(7),
                Some(if a == 7 {
                    b
                } else if b == 7 {
                    a
                } else {
                    7
                })
            );
        }
        assert_eq!(
            swap(1000, 0)[0],
            IdRange {
                inside: 0,
                outside: 1000,
                count: 1
            }
        );
    }

    #[test]
    fn mountinfo_lines_parse_with_escapes() {
        let l =
            "36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - ext4 /dev/root rw,errors=continue";
        let m = parse_mountinfo(l).unwrap();
        assert_eq!(m.point, PathBuf::from("/mnt/a b"));
        assert_eq!(m.fstype, "ext4");
        assert!(mount_of(Path::new("/proc/self")).is_some_and(|m| m.fstype == "proc"));
    }

    /// The real syscalls, as root: a file owned by 1234 on disk reads as
    /// 1000 through the mount, and one made as 1000 there is 1234 on disk.
    #[test]
    fn an_idmapped_bind_swaps_owner_and_agent() {
        use std::os::unix::fs::MetadataExt;
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: needs root");
            return;
        }
        let t = tempfile::tempdir_in("/var/tmp").unwrap();
        let (src, dst) = (t.path().join("src"), t.path().join("dst"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(&dst).unwrap();
        std::fs::write(src.join("f"), "x").unwrap();
        std::os::unix::fs::chown(src.join("f"), Some(1234), Some(1234)).unwrap();
        bind(&src, &dst, &swap(1000, 1234), &swap(1000, 1234)).unwrap();
        let seen = std::fs::metadata(dst.join("f")).unwrap();
        assert_eq!((seen.uid(), seen.gid()), (1000, 1000));
        // Root's own files stay root's.
        std::fs::write(dst.join("g"), "y").unwrap();
        assert_eq!(std::fs::metadata(src.join("g")).unwrap().uid(), 0);
        std::os::unix::fs::chown(dst.join("g"), Some(1000), Some(1000)).unwrap();
        let on_disk = std::fs::metadata(src.join("g")).unwrap();
        assert_eq!((on_disk.uid(), on_disk.gid()), (1234, 1234));
        assert!(mount_of(&dst).is_some_and(|m| m.point == dst));
        detach(&dst).unwrap();
        assert!(mount_of(&dst).is_some_and(|m| m.point != dst));
    }
}
