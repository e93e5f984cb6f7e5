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
    /// Mark the mount whose root is `root` (refused if `root` is not one:
    /// marking the mount beneath would stop every open in the container).
    pub fn on_mount(root: &Path) -> io::Result<Self> {
        let dir = std::fs::File::open(root)?;
        if !is_mount_root(&OwnedFd::from(dir.try_clone()?))? {
            return Err(io::Error::other(format!(
                "{}: not a mount point",
                root.display()
            )));
        }
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
            return Err(io::Error::last_os_error());
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

/// The path of an event's file without the " (deleted)" the kernel adds
/// to a name that was unlinked or replaced since it was opened.
pub fn undeleted(p: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let b = p.as_os_str().as_bytes();
    let b = b.strip_suffix(b" (deleted)").unwrap_or(b);
    PathBuf::from(std::ffi::OsStr::from_bytes(b))
}
