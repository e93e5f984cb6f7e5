//! Credentials and capabilities: how sbx-guest becomes the agent user in a
//! child (every capability set emptied, no_new_privs), and how it trims its
//! own sets to what it still needs after the firewall is up.
//!
//! The order follows youki's `libcontainer/src/process/init` and setpriv(1):
//! bounding set and ambient set while CAP_SETPCAP is still effective, then
//! groups, gid, uid (which clears permitted and effective), then an explicit
//! capset for the inheritable set (setuid keeps it), then no_new_privs.

// The one place raw syscalls without a nix wrapper are made (capset, prctl
// capability ops, credential calls between fork and exec).
#![allow(unsafe_code)]

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Who a child runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// The highest capability number this kernel knows.
pub fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

pub(crate) const CAP_V3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// capset(2) on this thread with the three sets given as 64-bit masks.
/// Async-signal-safe: no allocation.
fn capset(effective: u64, permitted: u64, inheritable: u64) -> io::Result<()> {
    let mut hdr = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    let data = [
        CapData {
            effective: effective as u32,
            permitted: permitted as u32,
            inheritable: inheritable as u32,
        },
        CapData {
            effective: (effective >> 32) as u32,
            permitted: (permitted >> 32) as u32,
            inheritable: (inheritable >> 32) as u32,
        },
    ];
    // SAFETY: hdr and data are valid, properly sized v3 structures that
    // outlive the call; the kernel only reads data for capset.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// prctl with integer arguments. Async-signal-safe.
fn prctl(op: libc::c_int, a: libc::c_ulong, b: libc::c_ulong) -> io::Result<()> {
    // SAFETY: the operations used here take integer arguments only.
    let r = unsafe { libc::prctl(op, a, b, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Drop every capability but `keep` from the bounding set.
fn drop_bounding(last: u32, keep: u64) -> io::Result<()> {
    for c in 0..=last {
        if keep & (1u64 << c) != 0 {
            continue;
        }
        match prctl(libc::PR_CAPBSET_DROP, c as libc::c_ulong, 0) {
            Ok(()) => {}
            // A capability this kernel does not know.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Everything between fork and exec, in the child. Only raw syscalls: this
/// runs in a forked copy of a multi-threaded process.
fn become_user(
    c: &Creds,
    groups: &[libc::gid_t],
    last: u32,
    filters: &[libc::sock_fprog],
) -> io::Result<()> {
    drop_bounding(last, 0)?;
    prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
        0,
    )?;
    // SAFETY: groups is a valid slice for the duration of the call.
    if unsafe { libc::setgroups(groups.len(), groups.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain integer syscalls.
    if unsafe { libc::setresgid(c.gid, c.gid, c.gid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain integer syscall.
    if unsafe { libc::setresuid(c.uid, c.uid, c.uid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // setuid cleared permitted and effective; the inheritable set survives.
    capset(0, 0, 0)?;
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0)?;
    for f in filters {
        if crate::seccomp::install_raw(f) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Make `cmd` start as `creds` with every capability set empty (bounding,
/// ambient, inheritable, permitted, effective) and no_new_privs, so no
/// setuid binary or file capability can give any back. Refuses uid/gid 0.
pub fn drop_to(cmd: &mut Command, creds: &Creds) -> io::Result<()> {
    if creds.uid == 0 || creds.gid == 0 || creds.groups.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "refusing to start a sandbox process as uid or gid 0",
        ));
    }
    let c = creds.clone();
    let groups: Vec<libc::gid_t> = creds.groups.clone();
    let last = last_cap();
    // The agent's seccomp filters (sbx-guest registers them), last.
    let filters = SendFprogs(crate::seccomp::agent_fprogs());
    // SAFETY: the closure calls only async-signal-safe syscalls on data
    // allocated before the fork (become_user allocates nothing).
    unsafe {
        cmd.pre_exec(move || {
            let f = &filters;
            become_user(&c, &groups, last, &f.0)
        });
    }
    Ok(())
}

/// Programs in a static (see seccomp::agent_fprogs): the pointers stay
/// valid in whichever thread spawns.
struct SendFprogs(Vec<libc::sock_fprog>);
// SAFETY: the pointers are into a never-dropped static, read-only.
unsafe impl Send for SendFprogs {}
// SAFETY: as above.
unsafe impl Sync for SendFprogs {}

/// Start `cmd` with no signal blocked: an init blocks the signals it reads
/// from a signalfd, and a blocked mask is inherited across exec (std does
/// not reset it when the child is forked for a `pre_exec` hook).
pub fn unblock_signals(cmd: &mut Command) {
    // SAFETY: sigemptyset and pthread_sigmask are async-signal-safe and
    // touch only the stack-local set.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            let r = libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            if r != 0 {
                return Err(io::Error::from_raw_os_error(r));
            }
            Ok(())
        });
    }
}

/// Trim this process to the capabilities in `keep` (numbers as in
/// capability.h): bounding set first, then effective/permitted; the
/// inheritable and ambient sets are emptied.
pub fn keep_only_caps(keep: &[u32]) -> io::Result<()> {
    let mask = keep.iter().fold(0u64, |m, c| m | (1u64 << c));
    // Dropping from the bounding set needs CAP_SETPCAP, so before capset.
    drop_bounding(last_cap(), mask)?;
    prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
        0,
    )?;
    capset(mask, mask, 0)
}

/// Capability numbers (capability.h) for the ones sbx uses.
pub mod cap {
    pub const CHOWN: u32 = 0;
    pub const DAC_OVERRIDE: u32 = 1;
    pub const DAC_READ_SEARCH: u32 = 2;
    pub const KILL: u32 = 5;
    pub const SETGID: u32 = 6;
    pub const SETUID: u32 = 7;
    pub const SETPCAP: u32 = 8;
    pub const NET_ADMIN: u32 = 12;
    pub const NET_RAW: u32 = 13;
    pub const SYS_ADMIN: u32 = 21;
}

/// The five capability masks of a process, from /proc/<pid>/status:
/// (inheritable, permitted, effective, bounding, ambient).
pub fn cap_masks(pid: u32) -> io::Result<[u64; 5]> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let mut out = [0u64; 5];
    for (i, key) in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"]
        .iter()
        .enumerate()
    {
        let v = s
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .ok_or_else(|| io::Error::other(format!("{key} missing")))?;
        out[i] = u64::from_str_radix(v.trim(), 16).map_err(io::Error::other)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_root() {
        let mut c = Command::new("true");
        for creds in [
            Creds {
                uid: 0,
                gid: 1000,
                groups: vec![1000],
            },
            Creds {
                uid: 1000,
                gid: 0,
                groups: vec![],
            },
            Creds {
                uid: 1000,
                gid: 1000,
                groups: vec![0],
            },
        ] {
            assert_eq!(
                drop_to(&mut c, &creds).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
        }
    }

    #[test]
    fn child_has_no_capabilities_and_no_new_privs() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: needs root");
            return;
        }
        let mut c = Command::new("/bin/cat");
        c.arg("/proc/self/status");
        drop_to(
            &mut c,
            &Creds {
                uid: 65534,
                gid: 65534,
                groups: vec![65534],
            },
        )
        .unwrap();
        let out = c.output().unwrap();
        assert!(out.status.success());
        let s = String::from_utf8_lossy(&out.stdout);
        for key in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
            let v = s.lines().find_map(|l| l.strip_prefix(key)).unwrap().trim();
            assert_eq!(u64::from_str_radix(v, 16).unwrap(), 0, "{key} {v}");
        }
        assert!(
            s.lines()
                .any(|l| l.starts_with("NoNewPrivs:") && l.ends_with('1'))
        );
        assert!(
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.contains("65534"))
        );
        assert!(
            s.lines()
                .any(|l| l.starts_with("Groups:") && l.trim_end().ends_with("65534"))
        );
    }
}
