//! fanotify permission events on one mount: every open of a file on it
//! waits for our answer. The guest uses it to refuse a secret path whose
//! mask the host just took off (an atomic replace detaches the mount)
//! before the watcher has put it back.

#![allow(unsafe_code)] // fanotify_init/mark, its event records, statx: no safe wrapper in use

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A fanotify group with FAN_OPEN_PERM on one mount.
pub struct OpenGuard {
    fd: OwnedFd,
}

/// Whether `fd` is the root of a mount (a mask mounted over a path is).
pub fn is_mount_root(fd: &OwnedFd) -> io::Result<bool> {
    // SAFETY: zeroed statx is a valid buffer for the kernel to fill.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open; "" with AT_EMPTY_PATH names it; st is ours.
    let r = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            0,
            &mut st,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let bit = libc::STATX_ATTR_MOUNT_ROOT as u64;
    if st.stx_attributes_mask & bit == 0 {
        return Err(io::Error::other("the kernel does not report mount roots"));
    }
    Ok(st.stx_attributes & bit != 0)
}

impl OpenGuard {
    /// Mark every mount that shows the workspace at `root`: the one that
    /// holds it (its bind mount, or the volume it is inside) and those
    /// under it that show part of the same directory (sbx-run binds the
    /// parents of masked paths onto themselves); not the masks, which show
    /// other files. Refused when the holder is the container's `/`: every
    /// open in the container would wait on us.
    pub fn on_workspace(root: &Path) -> io::Result<Self> {
        let info = std::fs::read_to_string("/proc/self/mountinfo")?;
        let mounts = mountinfo(&info);
        let fail = |why: &str| io::Error::other(format!("{}: {why}", root.display()));
        let holder = mounts
            .iter()
            .filter(|m| root.starts_with(&m.point))
            .max_by_key(|m| m.point.as_os_str().len())
            .ok_or_else(|| fail("no mount holds it"))?;
        if holder.point == Path::new("/") {
            return Err(fail("on the container's root file system"));
        }
        let inside = holder
            .root
            .join(root.strip_prefix(&holder.point).unwrap_or(root));
        let mut points = vec![root.to_owned()];
        points.extend(
            mounts
                .iter()
                .filter(|m| m.point.starts_with(root) && m.point != root)
                .filter(|m| m.dev == holder.dev && m.root.starts_with(&inside))
                .map(|m| m.point.clone()),
        );
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe {
            libc::fanotify_init(
                libc::FAN_CLASS_CONTENT | libc::FAN_CLOEXEC | libc::FAN_UNLIMITED_QUEUE,
                // O_NONBLOCK: the event's fd on a FIFO must not hang us.
                (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC | libc::O_NONBLOCK) as u32,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        points.dedup();
        for p in points {
            let dir = std::fs::File::open(&p)?;
            // SAFETY: both fds are open; a NULL path names the dir fd's mount.
            let r = unsafe {
                libc::fanotify_mark(
                    fd.as_raw_fd(),
                    libc::FAN_MARK_ADD | libc::FAN_MARK_MOUNT,
                    libc::FAN_OPEN_PERM,
                    dir.as_raw_fd(),
                    std::ptr::null(),
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(e.kind(), format!("{}: {e}", p.display())));
            }
        }
        Ok(Self { fd })
    }

    /// Answer opens for ever: `allow(path)` decides each (the path as this
    /// process sees it; an unlinked file's ends in " (deleted)"). Returns
    /// only on an error reading the group.
    pub fn serve(&self, mut allow: impl FnMut(&Path) -> bool) -> io::Error {
        const META: usize = std::mem::size_of::<libc::fanotify_event_metadata>();
        let mut buf = vec![0u8; 64 * META];
        loop {
            // SAFETY: buf is ours and as long as we say.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return e;
            }
            let n = n as usize;
            let mut off = 0;
            while off + META <= n {
                // SAFETY: META bytes are inside what the kernel wrote;
                // read_unaligned copes with the Vec's alignment.
                let m: libc::fanotify_event_metadata =
                    unsafe { std::ptr::read_unaligned(buf[off..].as_ptr().cast()) };
                if m.vers != libc::FANOTIFY_METADATA_VERSION || (m.event_len as usize) < META {
                    return io::Error::other("fanotify: unexpected metadata version");
                }
                off += m.event_len as usize;
                if m.fd < 0 {
                    continue; // a queue overflow: no open waits on it
                }
                // SAFETY: the kernel gave us this fd for the event.
                let ev = unsafe { OwnedFd::from_raw_fd(m.fd) };
                let ok = std::fs::read_link(format!("/proc/self/fd/{}", m.fd))
                    .map(|p| allow(&p))
                    // A path we cannot name is not one we can clear.
                    .unwrap_or(false);
                let resp = libc::fanotify_response {
                    fd: ev.as_raw_fd(),
                    response: if ok { libc::FAN_ALLOW } else { libc::FAN_DENY },
                };
                // SAFETY: resp is a complete struct of the size we pass.
                let w = unsafe {
                    libc::write(
                        self.fd.as_raw_fd(),
                        (&resp as *const libc::fanotify_response).cast(),
                        std::mem::size_of::<libc::fanotify_response>(),
                    )
                };
                if w < 0 {
                    return io::Error::last_os_error();
                }
            }
        }
    }
}

/// One line of /proc/self/mountinfo: the device, the directory of that
/// file system it shows, and where.
struct Mount {
    dev: String,
    root: PathBuf,
    point: PathBuf,
}

fn mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Some(Mount {
                dev: f.get(2)?.to_string(),
                root: unescape(f.get(3)?),
                point: unescape(f.get(4)?),
            })
        })
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|o| o.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(o)) => {
                out.push(o.iter().fold(0u8, |a, c| a.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// The path of an event's file without the " (deleted)" the kernel adds
/// to a name that was unlinked or replaced since it was opened.
pub fn undeleted(p: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let b = p.as_os_str().as_bytes();
    let b = b.strip_suffix(b" (deleted)").unwrap_or(b);
    PathBuf::from(std::ffi::OsStr::from_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_read_with_their_escapes() {
        let m = mountinfo(
            "36 35 98:0 /mnt1 /mnt/a\\040b rw - ext3 /dev/root rw\n\
             40 36 8:1 / / rw - overlay overlay rw\n",
        );
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].dev, "98:0");
        assert_eq!(m[0].root, Path::new("/mnt1"));
        assert_eq!(m[0].point, Path::new("/mnt/a b"));
        assert_eq!(m[1].point, Path::new("/"));
    }
}
