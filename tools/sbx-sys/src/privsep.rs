//! Privilege separation for the git broker: passing fds over a unix socket,
//! the peer's kernel-attested credentials, forking a single-threaded
//! process, dropping to another user, and exec'ing a binary the caller can
//! run but cannot name (execveat on an O_PATH fd).
// The one place raw syscalls nix does not wrap safely live; each block says why it is sound.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::errno::Errno;
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg, sockopt};
pub use nix::unistd::Pid;
use nix::unistd::{Gid, Uid};

/// Send `data` with `fds` attached (SCM_RIGHTS) in one sendmsg; returns
/// the bytes sent (the fds travel with the first of them).
pub fn send_with_fds(
    sock: BorrowedFd<'_>,
    data: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<usize> {
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage] = if raw.is_empty() { &[] } else { &cmsg };
    let iov = [IoSlice::new(data)];
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Err(Errno::EINTR) => continue,
            r => return r.map_err(io::Error::from),
        }
    }
}

/// Receive into `buf`, taking ownership of up to `max_fds` passed fds
/// (close-on-exec). More fds than that, or a truncated control message,
/// is an error, and every fd that did arrive is closed.
pub fn recv_with_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    max_fds: usize,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = nix::cmsg_space!([RawFd; 8]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = loop {
        match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(Errno::EINTR) => continue,
            r => break r.map_err(io::Error::from)?,
        }
    };
    let mut fds = Vec::new();
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            for fd in raw {
                // SAFETY: the kernel just installed this fd in our table for
                // this message; nothing else owns it.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    if msg.flags.contains(MsgFlags::MSG_CTRUNC) || fds.len() > max_fds {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("too many file descriptors passed (at most {max_fds})"),
        ));
    }
    Ok((msg.bytes, fds))
}

/// Who is at the other end of a connected unix socket, as the kernel
/// recorded it at connect time: never what the peer says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

pub fn peer_cred(sock: BorrowedFd<'_>) -> io::Result<PeerCred> {
    let c = nix::sys::socket::getsockopt(&sock, sockopt::PeerCredentials)?;
    Ok(PeerCred {
        pid: c.pid(),
        uid: c.uid(),
        gid: c.gid(),
        groups: peer_groups(sock)?,
    })
}

/// SO_PEERGROUPS (Linux 4.13): the peer's supplementary groups.
fn peer_groups(sock: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: the buffer is `len` bytes of writable, aligned gid_t
        // storage; the kernel writes at most `len` bytes and updates it.
        let r = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<libc::gid_t>();
        if r == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ERANGE) && n > groups.len() && n <= 65536 {
            groups.resize(n, 0);
            continue;
        }
        return Err(e);
    }
}

/// The result of [`fork`].
#[derive(Debug)]
pub enum Forked {
    Child,
    Parent(Pid),
}

/// fork(2), refused unless this process has exactly one thread: after a
/// fork only async-signal-safe code is sound in a multi-threaded process,
/// and the broker's children run ordinary Rust (the policy) before exec.
pub fn fork() -> io::Result<Forked> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Field 20 (num_threads), counted after the parenthesised comm.
    let threads = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(17))
        .and_then(|t| t.parse::<u32>().ok());
    if threads != Some(1) {
        return Err(io::Error::other(format!(
            "refusing to fork a process with {} threads",
            threads.map_or("an unknown number of".into(), |t| t.to_string())
        )));
    }
    // SAFETY: single-threaded (checked just above), so the child gets a
    // consistent copy of every lock and allocator state.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child)),
    }
}

/// Become `uid`/`gid` with exactly `groups`, for good: setgroups, setgid,
/// setuid (real, effective and saved), then no_new_privs and not
/// dumpable. From uid 0 the setuid clears every capability.
pub fn drop_to(uid: u32, gid: u32, groups: &[u32]) -> io::Result<()> {
    let groups: Vec<Gid> = groups.iter().map(|g| Gid::from_raw(*g)).collect();
    nix::unistd::setgroups(&groups)?;
    let g = Gid::from_raw(gid);
    nix::unistd::setresgid(g, g, g)?;
    let u = Uid::from_raw(uid);
    nix::unistd::setresuid(u, u, u)?;
    nix::sys::prctl::set_no_new_privs()?;
    // The kernel already cleared it when the uid changed (fs.suid_dumpable
    // 0 or 2); say so explicitly for a host that set it to 1.
    nix::sys::prctl::set_dumpable(false)?;
    if nix::unistd::geteuid() != u || (uid != 0 && nix::unistd::setuid(Uid::from_raw(0)).is_ok()) {
        return Err(io::Error::other("the uid did not drop for good"));
    }
    Ok(())
}

/// PR_GET_DUMPABLE for this process.
pub fn dumpable() -> io::Result<bool> {
    Ok(nix::sys::prctl::get_dumpable()?)
}

/// Set this process's umask (the agent's, handed over with the request).
pub fn set_umask(mask: u32) {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(mask & 0o777));
}

/// This process's umask by setting it and setting it back: two syscalls
/// instead of generating /proc/self/status (the guard's client, once per
/// git call). Only where no other thread can create a file in between.
pub fn umask_single_threaded() -> u32 {
    use nix::sys::stat::{Mode, umask};
    let old = umask(Mode::from_bits_truncate(0o077));
    umask(old);
    old.bits() as u32
}

/// This process's umask, read without changing it (/proc, Linux 4.7).
pub fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

pub fn fchdir(dir: BorrowedFd<'_>) -> io::Result<()> {
    Ok(nix::unistd::fchdir(dir)?)
}

/// Make `fds` this process's stdin, stdout and stderr.
pub fn set_stdio(
    stdin: BorrowedFd<'_>,
    stdout: BorrowedFd<'_>,
    stderr: BorrowedFd<'_>,
) -> io::Result<()> {
    nix::unistd::dup2_stdin(stdin)?;
    nix::unistd::dup2_stdout(stdout)?;
    nix::unistd::dup2_stderr(stderr)?;
    Ok(())
}

/// Open `path` O_PATH (no read or exec access is checked at open time;
/// the fd can still be exec'd with [`execveat_fd`]).
pub fn open_path(path: &Path) -> io::Result<OwnedFd> {
    use nix::fcntl::{OFlag, open};
    Ok(open(
        path,
        OFlag::O_PATH | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?)
}

/// Open directory `path` O_PATH and NOT close-on-exec: exec'd programs and
/// their children inherit it, so `/proc/self/fd/N/...` names this directory
/// in them whatever is renamed meanwhile.
pub fn open_dir_inherited(path: &Path) -> io::Result<OwnedFd> {
    use nix::fcntl::{OFlag, open};
    Ok(open(
        path,
        OFlag::O_PATH | OFlag::O_DIRECTORY,
        nix::sys::stat::Mode::empty(),
    )?)
}

/// The current directory as an O_PATH fd, to hand to another process.
pub fn open_cwd() -> io::Result<OwnedFd> {
    use nix::fcntl::{OFlag, open};
    Ok(open(
        ".",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?)
}

/// True when `fd` is open in this process.
pub fn is_open(fd: RawFd) -> bool {
    nix::fcntl::fcntl(
        // SAFETY: borrowed only for this call; F_GETFD on a closed number
        // fails with EBADF and touches nothing.
        unsafe { BorrowedFd::borrow_raw(fd) },
        nix::fcntl::FcntlArg::F_GETFD,
    )
    .is_ok()
}

/// execveat(fd, "", argv, env, AT_EMPTY_PATH): run the file `fd` refers to
/// without a path, so the caller needs execute permission on the file but
/// neither search permission on its directory nor read permission on it.
/// Returns only on failure.
pub fn execveat_fd(
    fd: BorrowedFd<'_>,
    argv: &[OsString],
    env: &[(OsString, OsString)],
) -> io::Error {
    let (args, envp) = match crate::exec_strings(argv, env) {
        Ok(s) => s,
        Err(e) => return e,
    };
    match nix::unistd::execveat(fd, c"", &args, &envp, nix::fcntl::AtFlags::AT_EMPTY_PATH) {
        Ok(never) => match never {},
        Err(e) => io::Error::from(e),
    }
}

/// Signals back to their default action and none blocked, so the exec'd
/// program starts as a freshly spawned one would (Rust ignores SIGPIPE).
pub fn reset_signals() -> io::Result<()> {
    use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, sigprocmask};
    // Every one, not only SIGPIPE: a broker started in the background by
    // a shell inherits SIGINT and SIGQUIT ignored, and so would git.
    for s in Signal::iterator().filter(|s| !matches!(s, Signal::SIGKILL | Signal::SIGSTOP)) {
        // SAFETY: installing SIG_DFL runs no code of ours in a handler.
        unsafe { nix::sys::signal::signal(s, SigHandler::SigDfl) }?;
    }
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    Ok(())
}

/// [`reset_signals`], but SIGPIPE stays ignored: for a broker that writes
/// to sockets whose peer may be gone, once at start, so that the children
/// it forks need only [`reset_forked_signals`] (two calls, not sixty-four).
pub fn reset_signals_but_pipe() -> io::Result<()> {
    use nix::sys::signal::{SigHandler, Signal};
    reset_signals()?;
    // SAFETY: SIG_IGN runs no code of ours in a handler.
    unsafe { nix::sys::signal::signal(Signal::SIGPIPE, SigHandler::SigIgn) }?;
    Ok(())
}

/// In a child of a process that ran [`reset_signals_but_pipe`] and then
/// [`auto_reap_children`]: the two signals those left changed back to
/// their default action, and none blocked ([`reset_signals`]'s result).
pub fn reset_forked_signals() -> io::Result<()> {
    use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, sigprocmask};
    for s in [Signal::SIGPIPE, Signal::SIGCHLD] {
        // SAFETY: installing SIG_DFL runs no code of ours in a handler.
        unsafe { nix::sys::signal::signal(s, SigHandler::SigDfl) }?;
    }
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    Ok(())
}

/// SIGKILL this process when its parent dies (a broker's spare session,
/// idle in accept(), must not outlive the broker); false when the parent
/// `parent` is already gone. Cleared by a change of credentials.
pub fn die_with_parent(parent: u32) -> io::Result<bool> {
    nix::sys::prctl::set_pdeathsig(Some(nix::sys::signal::Signal::SIGKILL))?;
    Ok(std::os::unix::process::parent_id() == parent)
}

/// SIGCHLD ignored: children of this process are reaped by the kernel
/// (the broker's accept loop never waits for its sessions).
pub fn auto_reap_children() -> io::Result<()> {
    use nix::sys::signal::{SigHandler, Signal};
    // SAFETY: SIG_IGN runs no code of ours in a handler.
    unsafe { nix::sys::signal::signal(Signal::SIGCHLD, SigHandler::SigIgn) }?;
    Ok(())
}

/// accept4(2) with SOCK_CLOEXEC on `listener`, the new connection owned.
pub fn accept_owned(listener: &impl AsRawFd) -> io::Result<OwnedFd> {
    let fd = nix::sys::socket::accept4(
        listener.as_raw_fd(),
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )?;
    // SAFETY: accept4 returned a fresh fd, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// pidfd_open(2) (Linux 5.3): an fd that polls readable when `pid` exits.
pub fn pidfd_open(pid: Pid) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments; on success it returns
    // a new fd that we own.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: r is a fresh fd returned by the kernel, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Exited(i32),
    Signaled(i32),
}

/// waitpid for `pid`, restarting on EINTR; stops and continues are skipped.
pub fn wait(pid: Pid) -> io::Result<Status> {
    use nix::sys::wait::{WaitStatus, waitpid};
    loop {
        match waitpid(pid, None) {
            Ok(WaitStatus::Exited(_, c)) => return Ok(Status::Exited(c)),
            Ok(WaitStatus::Signaled(_, s, _)) => return Ok(Status::Signaled(s as i32)),
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// kill(-pgid, sig): the child's whole process group (git and its hooks,
/// its pager), as a terminal would signal a foreground job.
pub fn kill_group(pgid: Pid, sig: i32) -> io::Result<()> {
    let s = nix::sys::signal::Signal::try_from(sig)?;
    Ok(nix::sys::signal::killpg(pgid, s)?)
}

/// Put the child `pid` in its own process group (the parent's half of the
/// usual race-free pair; the child does the same).
pub fn set_process_group(pid: Pid) -> io::Result<()> {
    Ok(nix::unistd::setpgid(pid, pid)?)
}

/// Make this process the leader of a new process group.
pub fn new_process_group() -> io::Result<()> {
    Ok(nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0))?)
}

/// Block `sigs` and return a signalfd that reads them instead, so a
/// single-threaded client can poll its socket and its signals together.
pub fn signalfd_for(sigs: &[i32]) -> io::Result<nix::sys::signalfd::SignalFd> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    for s in sigs {
        set.add(Signal::try_from(*s)?);
    }
    set.thread_block()?;
    Ok(nix::sys::signalfd::SignalFd::with_flags(
        &set,
        nix::sys::signalfd::SfdFlags::SFD_CLOEXEC,
    )?)
}

/// poll(2) on `fds` for input, forever; returns which are ready (readable,
/// hung up or in error), restarting on EINTR.
pub fn poll_readable(fds: &[BorrowedFd<'_>]) -> io::Result<Vec<bool>> {
    poll_readable_for(fds, None)
}

/// [`poll_readable`], giving up after `timeout` (None: never): then none
/// is ready. EINTR restarts the full timeout.
pub fn poll_readable_for(
    fds: &[BorrowedFd<'_>],
    timeout: Option<std::time::Duration>,
) -> io::Result<Vec<bool>> {
    use nix::poll::{PollFd, PollFlags};
    let mut p: Vec<PollFd> = fds
        .iter()
        .map(|f| PollFd::new(f.as_fd(), PollFlags::POLLIN))
        .collect();
    poll_all(&mut p, timeout)?;
    Ok(p.iter()
        .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
        .collect())
}

/// Wait until the peer of `sock` has closed it (hang-up), at most
/// `timeout`; whether it has. Data arriving meanwhile does not wake the
/// caller (poll(2) asked for no event: the kernel skips such a waiter on
/// a data wake-up), so a process that sends data and then execs, its end
/// close-on-exec, wakes this one once, at the exec, not before.
pub fn wait_hangup(sock: BorrowedFd<'_>, timeout: std::time::Duration) -> io::Result<bool> {
    use nix::poll::{PollFd, PollFlags};
    let mut p = [PollFd::new(sock, PollFlags::empty())];
    poll_all(&mut p, Some(timeout))?;
    Ok(p[0].revents().is_some_and(|r| !r.is_empty()))
}

fn poll_all(
    p: &mut [nix::poll::PollFd<'_>],
    timeout: Option<std::time::Duration>,
) -> io::Result<()> {
    use nix::poll::{PollTimeout, poll};
    // Whole milliseconds, rounded up: rounded down, a wait of less than
    // one would return at once, and a caller waiting for a deadline spin.
    let t = match timeout {
        None => PollTimeout::NONE,
        Some(d) => {
            let ms = d.as_micros().div_ceil(1000);
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
        }
    };
    loop {
        match poll(p, t) {
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(_) => return Ok(()),
        }
    }
}

/// Put this process (and all it will start) in a Landlock domain of its
/// own that restricts nothing it does: execution and reparenting (a rename
/// or link across directories, which every ruleset denies unless a rule
/// grants it) are the accesses handled, both allowed beneath `/`. What a
/// domain brings is the kernel's ptrace scoping: no process outside it,
/// nor in a sibling domain, may trace or open the /proc/PID/mem of a
/// process inside. Needs no_new_privs (set by `drop_to`). Ok(false): the
/// kernel has no Landlock, or only ABI 1 (which cannot grant reparenting).
pub fn own_landlock_domain() -> io::Result<bool> {
    #[repr(C)]
    struct RulesetAttr {
        handled_access_fs: u64,
    }
    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }
    const ACCESS_FS_EXECUTE: u64 = 1;
    const ACCESS_FS_REFER: u64 = 1 << 13;
    const RULE_PATH_BENEATH: libc::c_int = 1;
    const CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: the version query takes no attribute (NULL, size 0).
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if abi < 2 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            _ if abi >= 0 => Ok(false),
            Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) => Ok(false),
            _ => Err(e),
        };
    }
    let access = ACCESS_FS_EXECUTE | ACCESS_FS_REFER;
    let attr = RulesetAttr {
        handled_access_fs: access,
    };
    // SAFETY: attr is a valid landlock_ruleset_attr (its first field, the
    // only one this ABI-1 call reads) and its size is passed with it.
    let rs = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if rs < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd, owned by nothing else.
    let rs = unsafe { OwnedFd::from_raw_fd(rs as i32) };
    let root = nix::fcntl::open(
        "/",
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let rule = PathBeneath {
        allowed_access: access,
        parent_fd: root.as_raw_fd(),
    };
    // SAFETY: rule is a packed landlock_path_beneath_attr whose fd is open
    // for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            rs.as_raw_fd(),
            RULE_PATH_BENEATH,
            &rule as *const PathBeneath,
            0u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a plain syscall on an fd we own.
    let r = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, rs.as_raw_fd(), 0u32) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}
