//! The only crate allowed to make raw OS calls (and, where nix has no safe
//! wrapper, `unsafe`). Keeping them here keeps every other crate
//! `#![forbid(unsafe_code)]` and these few operations easy to audit.

pub mod privsep;

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub mod agent_seccomp;
pub mod beneath;
pub mod bpf;
pub mod fanotify;
pub mod idmap;
pub mod masks;
pub mod netlink;
pub mod seccomp;
pub mod sweep;

/// Find `program` the way execvp(3) would, but in the *child's* PATH: the
/// environment the program will see, not ours (env(1) behaves the same).
pub fn resolve_program(
    program: &OsStr,
    child_path: Option<&OsStr>,
    cwd: &Path,
) -> io::Result<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Ok(cwd.join(program));
    }
    // POSIX leaves an unset PATH implementation-defined; glibc uses this.
    let path = child_path.unwrap_or(OsStr::new("/bin:/usr/bin"));
    which::which_in(program, Some(path), cwd).map_err(|e| match e {
        which::Error::CannotFindBinaryPath => io::Error::from(io::ErrorKind::NotFound),
        other => io::Error::other(other.to_string()),
    })
}

pub(crate) fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "argument contains a NUL byte"))
}

/// An argv and a `KEY=VALUE` environment as the C strings execve takes.
/// A NUL inside any of them is an error rather than a silent truncation.
pub(crate) fn exec_strings(
    argv: &[OsString],
    env: &[(OsString, OsString)],
) -> io::Result<(Vec<CString>, Vec<CString>)> {
    let args = argv.iter().map(|a| cstring(a)).collect::<io::Result<_>>()?;
    let envp = env
        .iter()
        .map(|(k, v)| {
            let mut kv = k.clone();
            kv.push("=");
            kv.push(v);
            cstring(&kv)
        })
        .collect::<io::Result<_>>()?;
    Ok((args, envp))
}

/// Replace this process with `program`, with exactly `env` as its
/// environment. Returns only on failure.
pub fn exec(program: &Path, argv: &[OsString], env: &[(OsString, OsString)]) -> io::Error {
    let prog = match cstring(program.as_os_str()) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let (args, envp) = match exec_strings(argv, env) {
        Ok(s) => s,
        Err(e) => return e,
    };
    match nix::unistd::execve(&prog, &args, &envp) {
        Ok(never) => match never {},
        Err(errno) => io::Error::from(errno),
    }
}

/// setsockopt(2) with a raw value, for the options nix has no wrapper for
/// (IPV6_RTHDR, IPV6_FREEBIND: the firewall bed's attacks use them).
#[allow(unsafe_code)] // reason: no safe wrapper exists for these options
pub fn setsockopt_bytes(
    fd: std::os::fd::BorrowedFd<'_>,
    level: i32,
    name: i32,
    value: &[u8],
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let len = nix::libc::socklen_t::try_from(value.len())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the fd is borrowed for the call, and the pointer and length
    // describe `value`, which outlives the call; the kernel only reads it.
    let rc =
        unsafe { nix::libc::setsockopt(fd.as_raw_fd(), level, name, value.as_ptr().cast(), len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
pub mod caps;
pub mod spawn;
pub use caps::{Creds, drop_to, keep_only_caps, unblock_signals};
/// True when `p` is on a read-only mount (statvfs ST_RDONLY), whoever
/// asks: mode bits and uid 0 do not change the answer.
pub fn on_readonly_mount(p: &Path) -> bool {
    nix::sys::statvfs::statvfs(p)
        .is_ok_and(|s| s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}

/// [`on_readonly_mount`] for an open file (an `O_PATH` fd will do), so
/// the answer is about what was opened, not a name looked up again.
pub fn fd_on_readonly_mount(fd: impl std::os::fd::AsFd) -> bool {
    nix::sys::statvfs::fstatvfs(fd)
        .is_ok_and(|s| s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}

/// Bytes an unprivileged writer can still use on the file system of `p`
/// (statvfs f_bavail × f_frsize).
pub fn available_bytes(p: &Path) -> io::Result<u64> {
    let s = nix::sys::statvfs::statvfs(p).map_err(io::Error::from)?;
    Ok(s.blocks_available().saturating_mul(s.fragment_size()))
}

/// Whether the open file `fd` carries extended attributes (user.*, ACLs,
/// security labels): flistxattr's answer for the size of their names.
/// A file system without them answers no.
#[allow(unsafe_code)] // reason: nix has no wrapper for flistxattr
pub fn has_xattrs(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: a null buffer of size 0 asks only for the size, so the
    // kernel writes no memory; the borrow keeps the fd open for the call.
    let n = unsafe { libc::flistxattr(fd.as_raw_fd(), std::ptr::null_mut(), 0) };
    match n {
        0.. => Ok(n > 0),
        _ => match io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::ENOTSUP) => Ok(false),
            e => Err(e),
        },
    }
}

/// Start writing `fd`'s dirty pages to disk without waiting for them
/// (sync_file_range SYNC_FILE_RANGE_WRITE), so a later syncfs or fsync
/// waits for less. Only a hint: an error changes nothing that follows.
#[allow(unsafe_code)] // reason: nix has no wrapper for sync_file_range
pub fn start_writeback(fd: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on an fd the borrow keeps open; no memory
    // is passed.
    unsafe {
        libc::sync_file_range(fd.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_in_the_given_path_only() {
        let cwd = Path::new("/");
        assert!(resolve_program(OsStr::new("sh"), Some(OsStr::new("/bin:/usr/bin")), cwd).is_ok());
        let e =
            resolve_program(OsStr::new("sh"), Some(OsStr::new("/nonexistent")), cwd).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            resolve_program(OsStr::new("./x"), None, Path::new("/tmp")).unwrap(),
            PathBuf::from("/tmp/./x")
        );
    }
}

/// Make the child the leader of a new session whose controlling terminal is
/// its stdin (a pty slave), as login(1) and `docker exec -t` do, so job
/// control and ^C reach its foreground group.
#[allow(unsafe_code)] // reason: setsid + TIOCSCTTY must run between fork and exec
pub fn controlling_tty(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid and ioctl are async-signal-safe and use no memory of
    // the parent; std has already made fd 0 the pty slave at this point.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// TIOCSWINSZ on a pty master: the kernel sends SIGWINCH to the
/// terminal's foreground group.
#[allow(unsafe_code)] // reason: nix has no safe wrapper for TIOCSWINSZ
pub fn set_winsize(fd: std::os::fd::BorrowedFd<'_>, rows: u16, cols: u16) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: the fd is borrowed for the call; the kernel reads `ws`, which
    // lives on our stack for the whole call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// TIOCGWINSZ of a terminal (stdin/stdout of the host's CLI).
#[allow(unsafe_code)] // reason: nix has no safe wrapper for TIOCGWINSZ
pub fn winsize(fd: std::os::fd::BorrowedFd<'_>) -> Option<(u16, u16)> {
    use std::os::fd::AsRawFd;
    // SAFETY: zeroed winsize is a valid value of a plain C struct.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes into `ws`, which outlives the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_row > 0).then_some((ws.ws_row, ws.ws_col))
}

/// Put the host terminal in raw mode; the returned guard restores it.
pub fn raw_terminal(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<RawGuard> {
    use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
    let saved = tcgetattr(fd)?;
    let mut raw = saved.clone();
    cfmakeraw(&mut raw);
    tcsetattr(fd, SetArg::TCSANOW, &raw)?;
    use std::os::fd::AsRawFd;
    Ok(RawGuard {
        fd: fd.as_raw_fd(),
        saved,
    })
}

#[derive(Debug)]
pub struct RawGuard {
    fd: std::os::fd::RawFd,
    saved: nix::sys::termios::Termios,
}

impl Drop for RawGuard {
    #[allow(unsafe_code)] // reason: the guard holds a raw fd number of stdin
    fn drop(&mut self) {
        // SAFETY: the fd is the process's stdin/stdout, open for its life.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd) };
        let _ = nix::sys::termios::tcsetattr(fd, nix::sys::termios::SetArg::TCSANOW, &self.saved);
    }
}
