//! Start a child the way posix_spawn does (clone with CLONE_VM|CLONE_VFORK:
//! no copy of the parent's page tables, no copy-on-write faults in its
//! threads afterwards), but with what posix_spawn cannot do: become the
//! agent (bounding and ambient sets, groups, gid, uid, capset, no_new_privs)
//! between clone and exec. std's `Command` forks whenever a `pre_exec` hook
//! or a uid is set, which in sbx-guest cost about a third of an API exec.
//!
//! The child shares the parent's memory until it execs, so it runs only raw
//! syscalls on data built before the clone: no allocation, no locks, no
//! glibc credential wrappers (those broadcast to every thread glibc knows,
//! and in a CLONE_VM child those are the parent's threads).

#![allow(unsafe_code)]

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::path::Path;
use std::sync::OnceLock;

use crate::caps::Creds;

/// What a child gets besides its program.
#[derive(Debug)]
pub struct Spawn<'a> {
    /// The resolved program (run as given: no PATH search).
    pub program: &'a Path,
    /// argv, argv[0] included.
    pub argv: &'a [OsString],
    /// The whole environment.
    pub env: &'a [(OsString, OsString)],
    pub cwd: &'a Path,
    /// The child's fds 0, 1 and 2.
    pub stdio: [BorrowedFd<'a>; 3],
    /// A new process group led by the child (pipes).
    pub pgroup: bool,
    /// A new session with fd 0 as its controlling terminal (a pty).
    pub session_tty: bool,
    /// Become this user with every capability dropped; None keeps root's.
    pub creds: Option<&'a Creds>,
}

/// A started child: its pid, and a pidfd (readable once it has ended)
/// when the kernel gives one.
#[derive(Debug)]
pub struct Child {
    pub pid: i32,
    pub pidfd: Option<std::os::fd::OwnedFd>,
}

/// Where the child reports a failure before exec: which step, and errno.
#[repr(C)]
struct Failure {
    step: i32,
    errno: i32,
}

struct Plan {
    prog: CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
    stdio: [RawFd; 3],
    pgroup: bool,
    session_tty: bool,
    creds: Option<(u32, u32)>,
    groups: Vec<libc::gid_t>,
    /// Capabilities still in our bounding set (a superset is fine: a drop
    /// of an absent one succeeds).
    bounding: u64,
    last_cap: u32,
    /// The agent's seccomp filters, installed after no_new_privs.
    filters: Vec<libc::sock_fprog>,
    fail: Failure,
}

/// Our bounding set and the kernel's last capability, read once: the
/// bounding set only ever shrinks, so an early reading is a superset.
fn bounding() -> (u64, u32) {
    static B: OnceLock<(u64, u32)> = OnceLock::new();
    *B.get_or_init(|| {
        let last = crate::caps::last_cap();
        let all = if last >= 63 {
            u64::MAX
        } else {
            (1u64 << (last + 1)) - 1
        };
        let bnd = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("CapBnd:"))
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            })
            .unwrap_or(all);
        (bnd & all, last)
    })
}

/// Start the child; returns it once it has exec'd. A failure before
/// the exec (the program missing, a bad cwd, a refused credential) is the
/// error, and that child is already reaped. Its exit later sends SIGCHLD
/// like any child's; the caller reaps it.
pub fn spawn(s: &Spawn<'_>) -> io::Result<Child> {
    if let Some(c) = s.creds {
        if c.uid == 0 || c.gid == 0 || c.groups.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "refusing to start a sandbox process as uid or gid 0",
            ));
        }
    }
    let prog = crate::cstring(s.program.as_os_str())?;
    let (argv_c, env_c) = crate::exec_strings(s.argv, s.env)?;
    let ptrs = |v: &[CString]| {
        let mut p: Vec<*const libc::c_char> = v.iter().map(|c| c.as_ptr()).collect();
        p.push(std::ptr::null());
        p
    };
    // A source fd below 3 could be overwritten by an earlier dup2: move it.
    let mut moved = Vec::new();
    let mut stdio = [0; 3];
    for (i, fd) in s.stdio.iter().enumerate() {
        let raw = fd.as_raw_fd();
        stdio[i] = if raw < 3 && raw != i as RawFd {
            let d = fd.try_clone_to_owned()?;
            let r = d.as_raw_fd();
            moved.push(d);
            r
        } else {
            raw
        };
    }
    let (bnd, last) = bounding();
    let mut plan = Plan {
        prog,
        argv: ptrs(&argv_c),
        envp: ptrs(&env_c),
        cwd: crate::cstring(s.cwd.as_os_str())?,
        stdio,
        pgroup: s.pgroup,
        session_tty: s.session_tty,
        creds: s.creds.map(|c| (c.uid, c.gid)),
        groups: s.creds.map(|c| c.groups.clone()).unwrap_or_default(),
        bounding: bnd,
        last_cap: last,
        filters: if s.creds.is_some() {
            crate::seccomp::agent_fprogs()
        } else {
            Vec::new()
        },
        fail: Failure { step: 0, errno: 0 },
    };
    let mut stack = vec![0u8; 64 * 1024];
    // SAFETY: the top of our own buffer, aligned down to 16 as the ABI wants.
    let top = unsafe { stack.as_mut_ptr().add(stack.len()) };
    let top = ((top as usize) & !15) as *mut libc::c_void;
    // No signal handler may run in the child on the shared memory: block
    // everything around the clone (the child unblocks right before exec).
    // SAFETY: sigset_t is plain data, valid when zeroed.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: the calls only read and write these two sets.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
    let mut pidfd: libc::c_int = -1;
    // SAFETY: CLONE_VFORK suspends this thread until the child execs or
    // exits, so `plan` and `stack` outlive every use by the child; the
    // child function only makes raw syscalls on `plan`. With CLONE_PIDFD
    // the kernel writes the new descriptor (close-on-exec) into `pidfd`.
    let mut pid = unsafe {
        libc::clone(
            child,
            top,
            flags | libc::CLONE_PIDFD,
            &mut plan as *mut Plan as *mut libc::c_void,
            &mut pidfd as *mut libc::c_int,
        )
    };
    let mut clone_err = io::Error::last_os_error();
    if pid < 0 && clone_err.raw_os_error() == Some(libc::EINVAL) {
        // A kernel before 5.2: no pidfd.
        pidfd = -1;
        // SAFETY: as above.
        pid = unsafe {
            libc::clone(
                child,
                top,
                flags,
                &mut plan as *mut Plan as *mut libc::c_void,
            )
        };
        clone_err = io::Error::last_os_error();
    }
    // SAFETY: restores the mask saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    drop(moved);
    drop(stack);
    if pid < 0 {
        return Err(clone_err);
    }
    // SAFETY: the kernel made this descriptor for us; nothing else owns it.
    let pidfd = (pidfd >= 0)
        .then(|| unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(pidfd) });
    // SAFETY: the child has exec'd or exited; it no longer touches `plan`.
    let fail = unsafe { std::ptr::read_volatile(&plan.fail) };
    if fail.step != 0 {
        let _ = crate::privsep::wait(nix::unistd::Pid::from_raw(pid));
        let e = io::Error::from_raw_os_error(fail.errno);
        drop(pidfd);
        return Err(match fail.step {
            STEP_EXEC => e,
            STEP_CHDIR => io::Error::new(e.kind(), format!("cannot enter the directory: {e}")),
            _ => io::Error::new(e.kind(), format!("cannot drop privileges: {e}")),
        });
    }
    Ok(Child { pid, pidfd })
}

const STEP_FDS: i32 = 1;
const STEP_CHDIR: i32 = 2;
const STEP_SESSION: i32 = 3;
const STEP_CREDS: i32 = 4;
const STEP_EXEC: i32 = 5;

fn errno() -> i32 {
    // SAFETY: reads this thread's errno (the child shares the parent
    // thread's TLS; that thread is suspended until the child execs).
    unsafe { *libc::__errno_location() }
}

extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `Plan`, alive while the parent waits.
    let p = unsafe { &mut *(arg as *mut Plan) };
    let step = match run_child(p) {
        Ok(()) => STEP_EXEC,
        Err(step) => step,
    };
    let e = errno();
    // SAFETY: volatile writes into the shared plan, read after the clone.
    unsafe {
        std::ptr::write_volatile(&mut p.fail.errno, if e == 0 { libc::EIO } else { e });
        std::ptr::write_volatile(&mut p.fail.step, step);
        libc::syscall(libc::SYS_exit_group, 127);
    }
    127
}

/// Everything between clone and exec; returns only on failure.
fn run_child(p: &Plan) -> Result<(), i32> {
    let ok = |r: libc::c_long, step: i32| if r < 0 { Err(step) } else { Ok(()) };
    // SAFETY: raw syscalls with integer arguments or pointers into `p`,
    // which the parent keeps alive and unchanged.
    unsafe {
        for (i, &fd) in p.stdio.iter().enumerate() {
            let target = i as libc::c_long;
            if fd as libc::c_long == target {
                ok(
                    libc::syscall(libc::SYS_fcntl, fd as libc::c_long, libc::F_SETFD, 0),
                    STEP_FDS,
                )?;
            } else {
                ok(
                    libc::syscall(libc::SYS_dup3, fd as libc::c_long, target, 0),
                    STEP_FDS,
                )?;
            }
        }
        ok(libc::syscall(libc::SYS_chdir, p.cwd.as_ptr()), STEP_CHDIR)?;
        if p.session_tty {
            ok(libc::syscall(libc::SYS_setsid), STEP_SESSION)?;
            ok(
                libc::syscall(libc::SYS_ioctl, 0 as libc::c_long, libc::TIOCSCTTY, 0),
                STEP_SESSION,
            )?;
        } else if p.pgroup {
            ok(libc::syscall(libc::SYS_setpgid, 0, 0), STEP_SESSION)?;
        }
        // Rust ignores SIGPIPE, and an ignored signal stays ignored across exec.
        // The kernel's struct (handler, flags, restorer, mask), all zero: SIG_DFL.
        let dfl = [0u64; 4];
        ok(
            libc::syscall(
                libc::SYS_rt_sigaction,
                libc::SIGPIPE as libc::c_long,
                dfl.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8 as libc::c_long,
            ),
            STEP_SESSION,
        )?;
        if let Some((uid, gid)) = p.creds {
            for c in 0..=p.last_cap {
                if p.bounding & (1u64 << c) == 0 {
                    continue;
                }
                let r = libc::syscall(
                    libc::SYS_prctl,
                    libc::PR_CAPBSET_DROP as libc::c_long,
                    c as libc::c_long,
                    0,
                    0,
                    0,
                );
                if r < 0 && errno() != libc::EINVAL {
                    return Err(STEP_CREDS);
                }
            }
            ok(
                libc::syscall(
                    libc::SYS_prctl,
                    libc::PR_CAP_AMBIENT as libc::c_long,
                    libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_long,
                    0,
                    0,
                    0,
                ),
                STEP_CREDS,
            )?;
            ok(
                libc::syscall(
                    libc::SYS_setgroups,
                    p.groups.len() as libc::c_long,
                    p.groups.as_ptr(),
                ),
                STEP_CREDS,
            )?;
            ok(
                libc::syscall(libc::SYS_setresgid, gid as libc::c_long, gid, gid),
                STEP_CREDS,
            )?;
            ok(
                libc::syscall(libc::SYS_setresuid, uid as libc::c_long, uid, uid),
                STEP_CREDS,
            )?;
            // setuid cleared permitted and effective; the inheritable set survives.
            let hdr = [crate::caps::CAP_V3, 0u32];
            let data = [0u32; 6];
            ok(
                libc::syscall(libc::SYS_capset, hdr.as_ptr(), data.as_ptr()),
                STEP_CREDS,
            )?;
            ok(
                libc::syscall(
                    libc::SYS_prctl,
                    libc::PR_SET_NO_NEW_PRIVS as libc::c_long,
                    1 as libc::c_long,
                    0,
                    0,
                    0,
                ),
                STEP_CREDS,
            )?;
            for f in &p.filters {
                ok(crate::seccomp::install_raw(f), STEP_CREDS)?;
            }
        }
        let empty = 0u64;
        ok(
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK as libc::c_long,
                &empty as *const u64,
                std::ptr::null_mut::<u64>(),
                8 as libc::c_long,
            ),
            STEP_SESSION,
        )?;
        libc::syscall(
            libc::SYS_execve,
            p.prog.as_ptr(),
            p.argv.as_ptr(),
            p.envp.as_ptr(),
        );
    }
    Err(STEP_EXEC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;

    fn run(
        prog: &str,
        args: &[&str],
        creds: Option<&Creds>,
    ) -> io::Result<(String, crate::privsep::Status)> {
        let (r, w) = nix::unistd::pipe()?;
        let r = std::fs::File::from(r);
        let null = std::fs::File::open("/dev/null")?;
        let argv: Vec<OsString> = std::iter::once(prog)
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        let env = vec![(OsString::from("A"), OsString::from("b c"))];
        let child = spawn(&Spawn {
            program: Path::new(prog),
            argv: &argv,
            env: &env,
            cwd: Path::new("/"),
            stdio: [null.as_fd(), w.as_fd(), w.as_fd()],
            pgroup: true,
            session_tty: false,
            creds,
        })?;
        assert!(child.pidfd.is_some(), "this kernel gives pidfds");
        let pid = child.pid;
        drop(w);
        let mut out = String::new();
        let mut r = r;
        r.read_to_string(&mut out)?;
        let st = crate::privsep::wait(nix::unistd::Pid::from_raw(pid))?;
        Ok((out, st))
    }

    #[test]
    fn runs_with_exactly_the_given_environment_stdio_and_cwd() {
        let (out, st) = run(
            "/bin/sh",
            &["-c", "echo \"$A|$(pwd)|${HOME-unset}\"; exit 3"],
            None,
        )
        .unwrap();
        assert_eq!(out, "b c|/|unset\n");
        // No signal blocked (the parent blocks all around the clone) and
        // SIGPIPE, which Rust ignores, back to the default; grep reads its
        // own status (a shell blocks signals while it waits).
        let (sigs, _) = run(
            "/bin/grep",
            &["-E", "^Sig(Blk|Ign)", "/proc/self/status"],
            None,
        )
        .unwrap();
        // Ours, less SIGPIPE (what this process inherited stays as std
        // leaves it).
        let ours = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap();
        assert_ne!(ours & (1 << 12), 0, "the test harness ignores SIGPIPE");
        assert_eq!(
            sigs,
            format!(
                "SigBlk:\t0000000000000000\nSigIgn:\t{:016x}\n",
                ours & !(1 << 12)
            )
        );
        assert_eq!(st, crate::privsep::Status::Exited(3));
    }

    #[test]
    fn a_missing_program_is_an_error_not_a_child() {
        let e = run("/nonexistent/prog", &[], None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let e = run("/etc/passwd", &[], None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    }

    #[test]
    fn a_child_of_a_root_parent_drops_to_the_user_with_no_capabilities() {
        if !nix::unistd::geteuid().is_root() {
            return; // needs root to change uid; CI runs the suite as root
        }
        let c = Creds {
            uid: 4242,
            gid: 4243,
            groups: vec![4244],
        };
        let (out, st) = run(
            "/bin/sh",
            &[
                "-c",
                "id -u; id -g; id -G; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs)' /proc/self/status",
            ],
            Some(&c),
        )
        .unwrap();
        assert_eq!(st, crate::privsep::Status::Exited(0));
        let want = "4242\n4243\n4243 4244\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n";
        assert_eq!(out, want);
        assert!(
            run(
                "/bin/true",
                &[],
                Some(&Creds {
                    uid: 0,
                    gid: 1,
                    groups: vec![]
                })
            )
            .is_err()
        );
    }
}
