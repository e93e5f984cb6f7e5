//! The agent's seccomp filters: registered once by sbx-guest (which builds
//! them with seccompiler) and installed right after no_new_privs in every
//! child that becomes the agent, by [`crate::drop_to`] and
//! [`crate::spawn::spawn`] alike. Those children run between clone and
//! exec, so they only pass a program that already exists to one prctl.
//! Also the 32-bit entry points the filters refuse, for `sbx-fw verify`.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::OnceLock;

static AGENT: OnceLock<Vec<Vec<libc::sock_filter>>> = OnceLock::new();

/// Register the filters every later agent child gets, in order. Once per
/// process: a second call (or an empty or oversized program) is an error,
/// so nothing can swap the filters after children started with them.
pub fn set_agent_filters(progs: Vec<Vec<libc::sock_filter>>) -> io::Result<()> {
    if progs.is_empty() || progs.iter().any(|p| p.is_empty() || p.len() > 4096) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a seccomp program must hold 1 to 4096 instructions",
        ));
    }
    AGENT
        .set(progs)
        .map_err(|_| io::Error::new(io::ErrorKind::AlreadyExists, "agent filters already set"))
}

/// The registered programs as the kernel takes them (empty: none set).
/// They point into a static, so a CLONE_VM child may use them.
pub(crate) fn agent_fprogs() -> Vec<libc::sock_fprog> {
    AGENT
        .get()
        .map(|v| {
            v.iter()
                .map(|p| libc::sock_fprog {
                    len: p.len() as u16,
                    filter: p.as_ptr().cast_mut(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Install `f` on the calling thread: a raw syscall, no allocation, so a
/// child between clone and exec may call it. no_new_privs must be set.
pub(crate) fn install_raw(f: &libc::sock_fprog) -> libc::c_long {
    // SAFETY: `f` points at a live program (see agent_fprogs); the kernel
    // copies it before returning.
    unsafe {
        libc::syscall(
            libc::SYS_prctl,
            libc::PR_SET_SECCOMP as libc::c_long,
            libc::SECCOMP_MODE_FILTER as libc::c_long,
            f as *const libc::sock_fprog,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    }
}

/// Install the registered agent filters on this thread, for a process
/// that made itself the agent and is about to exec the agent's program
/// (the git broker's session: git and the hooks it runs). no_new_privs
/// must be set. None registered is an error: nothing runs unfiltered.
pub fn install_agent() -> io::Result<()> {
    let progs = agent_fprogs();
    if progs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no agent seccomp filters registered",
        ));
    }
    for f in &progs {
        if install_raw(f) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Set no_new_privs and install `progs` on this thread, for a process about
/// to exec the agent's program itself (the firewall test bed does).
pub fn install(progs: &[Vec<libc::sock_filter>]) -> io::Result<()> {
    nix::sys::prctl::set_no_new_privs()?;
    for p in progs {
        let f = libc::sock_fprog {
            len: p.len() as u16,
            filter: p.as_ptr().cast_mut(),
        };
        if install_raw(&f) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `socket(domain, ty, proto)`, the native way.
pub fn socket_native(domain: i32, ty: i32, proto: i32) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::socket(domain, ty, proto) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    fd_or_errno(r)
}

/// `socket(domain, ty, proto)` through the x32 ABI (x86_64's entry with
/// bit 30 set in the number); ENOSYS where the kernel has no x32.
#[cfg(target_arch = "x86_64")]
pub fn socket_x32(domain: i32, ty: i32, proto: i32) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::syscall(libc::SYS_socket | 0x4000_0000, domain, ty, proto) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    fd_or_errno(r as i32)
}

/// `socket(domain, ty, proto)` through the i386 entry point (`int 0x80`,
/// syscall 359), as a 32-bit program would make it; the fd is ours.
#[cfg(target_arch = "x86_64")]
pub fn socket_i386(domain: i32, ty: i32, proto: i32) -> io::Result<OwnedFd> {
    fd_or_errno(int80(359, domain as u32, ty as u32, proto as u32))
}

/// `socketcall(SYS_SOCKET, args)` through the i386 entry point, the one
/// multiplexer whose arguments a filter cannot read (they are in memory).
#[cfg(target_arch = "x86_64")]
pub fn socketcall_i386(domain: i32, ty: i32, proto: i32) -> io::Result<OwnedFd> {
    // The arguments must sit below 4 GiB: the 32-bit ABI passes a 32-bit
    // pointer.
    // SAFETY: a fresh anonymous mapping, unmapped below; nothing else uses it.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_32BIT,
            -1,
            0,
        )
    };
    if page == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let args = page.cast::<u32>();
    // SAFETY: the page holds 1024 u32s; we write three.
    unsafe {
        args.write(domain as u32);
        args.add(1).write(ty as u32);
        args.add(2).write(proto as u32);
    }
    let r = int80(102, 1, page as usize as u32, 0);
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(page, 4096) };
    fd_or_errno(r)
}

#[cfg(target_arch = "x86_64")]
fn int80(nr: u32, a: u32, b: u32, c: u32) -> i32 {
    let ret: u32;
    // SAFETY: an i386 system call with integer arguments; rbx is reserved
    // by LLVM, so it is swapped in and out. The kernel clobbers r8-r11 on
    // this path.
    unsafe {
        std::arch::asm!(
            "xchg {a:r}, rbx",
            "int 0x80",
            "xchg {a:r}, rbx",
            a = inout(reg) a as u64 => _,
            inlateout("eax") nr => ret,
            in("ecx") b,
            in("edx") c,
            out("r8") _, out("r9") _, out("r10") _, out("r11") _,
        );
    }
    ret as i32
}

fn fd_or_errno(r: i32) -> io::Result<OwnedFd> {
    if r < 0 {
        return Err(io::Error::from_raw_os_error(-r));
    }
    // SAFETY: the kernel just gave us this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn the_i386_entry_points_make_sockets_without_a_filter() {
        // Where the kernel has no 32-bit emulation both fail alike: ENOSYS.
        match socket_i386(libc::AF_UNIX, libc::SOCK_STREAM, 0) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => return,
            r => assert!(r.is_ok(), "{r:?}"),
        }
        socketcall_i386(libc::AF_UNIX, libc::SOCK_STREAM, 0).unwrap();
        let e = socket_i386(12345, libc::SOCK_STREAM, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EAFNOSUPPORT));
    }
}
