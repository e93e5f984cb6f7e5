//! Everything unsafe in sbx-git-client, and nothing else: the process entry
//! (`_start`, no C runtime), Linux x86_64 system calls as safe functions
//! over slices, the memory functions the compiler expects from a libc, and
//! reading argv and the environment off the initial stack.
#![allow(unsafe_code)]

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
compile_error!("sbx-git-client is written for Linux on x86_64");

use core::arch::{asm, global_asm};

/// An errno value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

pub const ENOENT: Errno = Errno(2);
pub const EINTR: Errno = Errno(4);
pub const EINVAL: Errno = Errno(22);

pub type Res<T> = Result<T, Errno>;

mod nr {
    pub const READ: usize = 0;
    pub const PREAD64: usize = 17;
    pub const WRITE: usize = 1;
    pub const CLOSE: usize = 3;
    pub const POLL: usize = 7;
    pub const LSEEK: usize = 8;
    pub const MMAP: usize = 9;
    pub const RT_SIGACTION: usize = 13;
    pub const RT_SIGPROCMASK: usize = 14;
    pub const SOCKET: usize = 41;
    pub const CONNECT: usize = 42;
    pub const SENDMSG: usize = 46;
    pub const EXECVE: usize = 59;
    pub const DUP2: usize = 33;
    pub const FCNTL: usize = 72;
    pub const READLINK: usize = 89;
    pub const UMASK: usize = 95;
    pub const GETEUID: usize = 107;
    pub const GETEGID: usize = 108;
    pub const OPENAT: usize = 257;
    pub const NEWFSTATAT: usize = 262;
    pub const SIGNALFD4: usize = 289;
    pub const EXIT_GROUP: usize = 231;
    pub const MEMFD_CREATE: usize = 319;
    pub const GETDENTS64: usize = 217;
}

#[inline(always)]
fn syscall6(n: usize, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the x86_64 Linux syscall convention; rcx and r11 are
    // clobbered by the instruction. Each caller below passes arguments of
    // the kernel's types pointing at memory it owns for the call's duration.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
            in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

fn check(r: isize) -> Res<usize> {
    if (-4095..0).contains(&r) {
        Err(Errno(-r as i32))
    } else {
        Ok(r as usize)
    }
}

/// Retry on EINTR (the relayed signals are blocked, others may interrupt).
fn call(n: usize, a: [usize; 6]) -> Res<usize> {
    loop {
        match check(syscall6(n, a)) {
            Err(EINTR) => continue,
            r => return r,
        }
    }
}

/// A path for the kernel: the bytes must end in NUL.
fn cpath(p: &[u8]) -> Res<usize> {
    if p.last() == Some(&0) {
        Ok(p.as_ptr() as usize)
    } else {
        Err(EINVAL)
    }
}

pub type Fd = i32;
pub const AT_FDCWD: i32 = -100;
pub const O_RDONLY: usize = 0;
pub const O_RDWR: usize = 2;
pub const O_CLOEXEC: usize = 0o2_000_000;
pub const O_DIRECTORY: usize = 0o200_000;
pub const O_PATH: usize = 0o10_000_000;
pub const O_NONBLOCK: usize = 0o4_000;

pub fn read(fd: Fd, buf: &mut [u8]) -> Res<usize> {
    call(
        nr::READ,
        [fd as usize, buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0],
    )
}

pub fn pread(fd: Fd, buf: &mut [u8], offset: u64) -> Res<usize> {
    call(
        nr::PREAD64,
        [
            fd as usize,
            buf.as_mut_ptr() as usize,
            buf.len(),
            offset as usize,
            0,
            0,
        ],
    )
}

pub fn write(fd: Fd, buf: &[u8]) -> Res<usize> {
    call(
        nr::WRITE,
        [fd as usize, buf.as_ptr() as usize, buf.len(), 0, 0, 0],
    )
}

pub fn close(fd: Fd) {
    let _ = check(syscall6(nr::CLOSE, [fd as usize, 0, 0, 0, 0, 0]));
}

pub fn openat(path: &[u8], flags: usize) -> Res<Fd> {
    let p = cpath(path)?;
    call(nr::OPENAT, [AT_FDCWD as usize, p, flags, 0, 0, 0]).map(|fd| fd as Fd)
}

/// F_GETFD: is `fd` open?
pub fn is_open(fd: Fd) -> bool {
    call(nr::FCNTL, [fd as usize, 1, 0, 0, 0, 0]).is_ok()
}

const S_IFMT: u32 = 0o170_000;
pub const S_IFDIR: u32 = 0o040_000;
pub const S_IFREG: u32 = 0o100_000;

/// The mode of `path`: type and permission bits (stat, or lstat with
/// `nofollow`).
pub fn file_mode(path: &[u8], nofollow: bool) -> Res<u32> {
    let p = cpath(path)?;
    // struct stat is 144 bytes on x86_64; st_mode is the u32 at offset 24.
    let mut st = [0u64; 18];
    let flags = if nofollow { 0x100 } else { 0 };
    call(
        nr::NEWFSTATAT,
        [AT_FDCWD as usize, p, st.as_mut_ptr() as usize, flags, 0, 0],
    )?;
    Ok(st[3] as u32)
}

/// Does directory `path` (NUL-terminated) hold any entry but `.` and `..`?
pub fn has_entries(path: &[u8]) -> Res<bool> {
    let fd = openat(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)?;
    let mut buf = [0u64; 512];
    let found = (|| loop {
        let n = call(
            nr::GETDENTS64,
            [
                fd as usize,
                buf.as_mut_ptr() as usize,
                8 * buf.len(),
                0,
                0,
                0,
            ],
        )?;
        if n == 0 {
            return Ok(false);
        }
        // SAFETY: u64s viewed as the bytes the kernel wrote into them.
        let bytes = unsafe { core::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
        // linux_dirent64: ino u64, off i64, reclen u16, type u8, name.
        let mut at = 0;
        while at + 19 < n {
            let reclen = usize::from(u16::from_le_bytes([bytes[at + 16], bytes[at + 17]]));
            if reclen == 0 {
                return Err(EINVAL);
            }
            let name = &bytes[at + 19..(at + reclen).min(n)];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if name != b"." && name != b".." {
                return Ok(true);
            }
            at += reclen;
        }
    })();
    close(fd);
    found
}

/// The file type bits of `path`.
pub fn file_type(path: &[u8], nofollow: bool) -> Res<u32> {
    Ok(file_mode(path, nofollow)? & S_IFMT)
}

/// An executable regular file, as the guard's hook step tests one
/// (`metadata`, symlinks followed).
pub fn executable(path: &[u8]) -> bool {
    file_mode(path, false).is_ok_and(|m| m & S_IFMT == S_IFREG && m & 0o111 != 0)
}

pub fn geteuid() -> u32 {
    syscall6(nr::GETEUID, [0; 6]) as u32
}

pub fn getegid() -> u32 {
    syscall6(nr::GETEGID, [0; 6]) as u32
}

pub fn umask(mask: u32) -> u32 {
    syscall6(nr::UMASK, [mask as usize, 0, 0, 0, 0, 0]) as u32
}

/// Block `mask` (a kernel sigset: bit n-1 for signal n); returns the old mask.
pub fn block(mask: u64) -> Res<u64> {
    let mut old = 0u64;
    call(
        nr::RT_SIGPROCMASK,
        [
            0,
            &mask as *const u64 as usize,
            &mut old as *mut u64 as usize,
            8,
            0,
            0,
        ],
    )?;
    Ok(old)
}

pub fn set_mask(mask: u64) {
    let _ = call(
        nr::RT_SIGPROCMASK,
        [2, &mask as *const u64 as usize, 0, 8, 0, 0],
    );
}

pub fn signalfd(mask: u64) -> Res<Fd> {
    call(
        nr::SIGNALFD4,
        [usize::MAX, &mask as *const u64 as usize, 8, O_CLOEXEC, 0, 0],
    )
    .map(|fd| fd as Fd)
}

/// SIGPIPE ignored (as Rust's runtime has it in the guard), so a closed
/// stderr is an error to ignore, not a death.
pub fn ignore_sigpipe() {
    // struct kernel_sigaction: handler, flags, restorer, mask.
    let act: [usize; 4] = [1, 0, 0, 0];
    let _ = call(nr::RT_SIGACTION, [13, act.as_ptr() as usize, 0, 8, 0, 0]);
}

/// A connected AF_UNIX stream socket (close-on-exec).
pub fn connect_unix(path: &[u8]) -> Res<Fd> {
    // struct sockaddr_un: family, then 108 bytes of path.
    let mut addr = [0u8; 110];
    if path.len() >= 108 || path.contains(&0) {
        return Err(EINVAL);
    }
    addr[0] = 1; // AF_UNIX
    addr[2..2 + path.len()].copy_from_slice(path);
    let fd = call(nr::SOCKET, [1, 1 | O_CLOEXEC, 0, 0, 0, 0])? as Fd;
    let len = 2 + path.len() + 1;
    match call(
        nr::CONNECT,
        [fd as usize, addr.as_ptr() as usize, len, 0, 0, 0],
    ) {
        Ok(_) => Ok(fd),
        Err(e) => {
            close(fd);
            Err(e)
        }
    }
}

/// sendmsg with MSG_NOSIGNAL, and `fds` as SCM_RIGHTS when not empty.
pub fn send(fd: Fd, data: &[u8], fds: &[Fd]) -> Res<usize> {
    const MAX_FDS: usize = 6;
    if fds.len() > MAX_FDS {
        return Err(EINVAL);
    }
    // struct cmsghdr: len (usize), level, type (i32), then the fds.
    let mut cmsg = [0u64; 2 + MAX_FDS / 2];
    let clen = 16 + 4 * fds.len();
    cmsg[0] = clen as u64;
    cmsg[1] = 1 | (1 << 32); // SOL_SOCKET, SCM_RIGHTS
    for (i, f) in fds.iter().enumerate() {
        let w = &mut cmsg[2 + i / 2];
        *w |= u64::from(*f as u32) << (32 * (i % 2));
    }
    let iov: [usize; 2] = [data.as_ptr() as usize, data.len()];
    // struct msghdr: name, namelen, iov, iovlen, control, controllen, flags.
    let (ctl, ctl_len) = if fds.is_empty() {
        (0, 0)
    } else {
        (cmsg.as_ptr() as usize, (clen + 7) & !7)
    };
    let msg: [usize; 7] = [0, 0, iov.as_ptr() as usize, 1, ctl, ctl_len, 0];
    call(
        nr::SENDMSG,
        [fd as usize, msg.as_ptr() as usize, 0x4000, 0, 0, 0],
    )
}

/// poll(2) for input on each fd, forever; which are ready.
pub fn poll_in<const N: usize>(fds: [Fd; N]) -> Res<[bool; N]> {
    // struct pollfd: fd (i32), events (i16), revents (i16).
    let mut p = [0u64; N];
    for (s, f) in p.iter_mut().zip(fds) {
        *s = u64::from(f as u32) | (1 << 32); // POLLIN
    }
    call(nr::POLL, [p.as_mut_ptr() as usize, N, usize::MAX, 0, 0, 0])?;
    let mut out = [false; N];
    for (o, s) in out.iter_mut().zip(p) {
        *o = (s >> 48) != 0;
    }
    Ok(out)
}

/// A zeroed, writable anonymous mapping of `len` bytes, never unmapped
/// (the process is short-lived).
pub fn alloc(len: usize) -> Res<&'static mut [u8]> {
    let p = call(
        nr::MMAP,
        [0, len.max(1), 3, 0x22, usize::MAX, 0], // RW, PRIVATE|ANONYMOUS
    )?;
    // SAFETY: a fresh private mapping of at least `len` bytes that nothing
    // else refers to and that is never unmapped.
    Ok(unsafe { core::slice::from_raw_parts_mut(p as *mut u8, len) })
}

/// A memory file (close-on-exec), as the guard's step makes for a hook's
/// input.
pub fn memfd(name: &[u8]) -> Res<Fd> {
    let p = cpath(name)?;
    call(nr::MEMFD_CREATE, [p, 1, 0, 0, 0, 0]).map(|fd| fd as Fd) // MFD_CLOEXEC
}

/// Back to offset 0.
pub fn rewind(fd: Fd) -> Res<()> {
    call(nr::LSEEK, [fd as usize, 0, 0, 0, 0, 0]).map(|_| ())
}

/// `old` as `new` too (without close-on-exec).
pub fn dup2(old: Fd, new: Fd) -> Res<()> {
    call(nr::DUP2, [old as usize, new as usize, 0, 0, 0, 0]).map(|_| ())
}

pub fn readlink(path: &[u8], buf: &mut [u8]) -> Res<usize> {
    let p = cpath(path)?;
    call(
        nr::READLINK,
        [p, buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0],
    )
}

pub fn exit(code: i32) -> ! {
    loop {
        syscall6(nr::EXIT_GROUP, [code as usize, 0, 0, 0, 0, 0]);
    }
}

/// argv and the environment as the kernel laid them out.
pub struct Proc {
    argc: usize,
    argv: *const *const u8,
    envp: *const *const u8,
}

/// NUL-terminated strings from a NULL-terminated pointer array.
pub struct CStrs {
    p: *const *const u8,
}

impl Iterator for CStrs {
    type Item = &'static [u8];
    fn next(&mut self) -> Option<&'static [u8]> {
        // SAFETY: `p` walks argv or envp as the kernel wrote them on the
        // initial stack, which lives as long as the process and which
        // nothing writes; the array ends with NULL and each string in NUL.
        unsafe {
            let s = *self.p;
            if s.is_null() {
                return None;
            }
            self.p = self.p.add(1);
            let mut n = 0;
            while *s.add(n) != 0 {
                n += 1;
            }
            Some(core::slice::from_raw_parts(s, n))
        }
    }
}

impl Proc {
    pub fn args(&self) -> CStrs {
        CStrs { p: self.argv }
    }
    pub fn argc(&self) -> usize {
        self.argc
    }
    pub fn env(&self) -> CStrs {
        CStrs { p: self.envp }
    }
    /// execve(path, this process's argv, its environment); returns only
    /// on failure.
    pub fn exec(&self, path: &[u8]) -> Errno {
        match cpath(path) {
            Ok(p) => match check(syscall6(
                nr::EXECVE,
                [p, self.argv as usize, self.envp as usize, 0, 0, 0],
            )) {
                Ok(_) => EINVAL,
                Err(e) => e,
            },
            Err(e) => e,
        }
    }
}

// The kernel starts the process here with argc, argv[], NULL, envp[],
// NULL on the stack; the ABI wants the stack 16-byte aligned at a call.
global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {entry}",
    "ud2",
    entry = sym entry,
);

extern "C" fn entry(sp: *const usize) -> ! {
    // SAFETY: `sp` is the initial stack pointer, where the kernel put argc
    // and then the argv and envp arrays.
    let p = unsafe {
        let argc = *sp;
        let argv = sp.add(1) as *const *const u8;
        Proc {
            argc,
            argv,
            envp: argv.add(argc + 1),
        }
    };
    exit(crate::main(&p))
}

// The memory functions the compiler calls (no libc provides them here).
// rep movsb/stosb: small, and fast enough on every x86_64 since Ivy Bridge.

/// # Safety
/// The C memcpy contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller's contract: both regions valid for n bytes.
    unsafe {
        asm!("rep movsb", inout("rcx") n => _, inout("rdi") dst => _,
             inout("rsi") src => _, options(nostack, preserves_flags));
    }
    dst
}

/// # Safety
/// The C memmove contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dst as usize) <= (src as usize) || (dst as usize) >= (src as usize) + n {
        // SAFETY: no overlap that a forward copy would clobber.
        return unsafe { memcpy(dst, src, n) };
    }
    // SAFETY: overlapping with dst above src: copy backwards, from the
    // last byte (direction flag set for the copy, cleared after).
    unsafe {
        asm!("std", "rep movsb", "cld", inout("rcx") n => _,
             inout("rdi") dst.add(n - 1) => _, inout("rsi") src.add(n - 1) => _,
             options(nostack));
    }
    dst
}

/// # Safety
/// The C memset contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: the caller's contract: dst valid for n bytes.
    unsafe {
        asm!("rep stosb", inout("rcx") n => _, inout("rdi") dst => _,
             in("al") c as u8, options(nostack, preserves_flags));
    }
    dst
}

/// # Safety
/// The C memcmp contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i < n {
        // SAFETY: the caller's contract: both valid for n bytes.
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

/// # Safety
/// The C strlen contract (LLVM turns the loop in `CStrs` into a call).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn strlen(s: *const u8) -> usize {
    let left: usize;
    // SAFETY: the caller's contract: `s` is NUL-terminated. repne scasb
    // counts rcx down from -1 once per byte scanned, the NUL included.
    unsafe {
        asm!("repne scasb", inout("rcx") usize::MAX => left, inout("rdi") s => _,
             in("al") 0u8, options(nostack, readonly));
    }
    !left - 1
}

/// # Safety
/// The C bcmp contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: the same contract.
    unsafe { memcmp(a, b, n) }
}

/// core's precompiled code names a personality routine in its unwind
/// tables; built with panic=abort nothing ever unwinds, so it is never called.
#[unsafe(no_mangle)]
pub extern "C" fn rust_eh_personality() {}

/// The dependencies (inflate, SHA-1) are compiled to unwind, as the
/// workspace is: their landing pads name this. Nothing unwinds (the
/// panic handler exits), so it is never called.
#[unsafe(no_mangle)]
pub extern "C" fn _Unwind_Resume() -> ! {
    exit(125)
}
