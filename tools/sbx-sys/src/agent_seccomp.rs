//! The seccomp filters every agent process starts under, built with
//! seccompiler: registered by sbx-guest for the children it starts as the
//! agent (see [`crate::seccomp`]), and installed by the git broker in the
//! sessions it runs as the agent (git and the hooks it runs).
//! The firewall sees only IPv4 and IPv6: a socket of another family (vsock,
//! whose port space is the kernel's and in a VM reaches the host; packet;
//! AF_ALG; a netlink protocol beyond route and diag) is a way out no rule
//! covers. Docker's profile refuses some of them, but not through the
//! 32-bit entry points (`socketcall` carries its arguments in memory, where
//! no filter reads them), so every i386 and x32 call is refused too.
//! Refusals are errors (EAFNOSUPPORT, EPERM), not kills: programs probing
//! for a family fall back as they would on a kernel without it.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

/// socket(2) families the agent keeps.
const FAMILIES: [i32; 4] = [
    libc::AF_UNIX,
    libc::AF_INET,
    libc::AF_INET6,
    libc::AF_NETLINK,
];
/// Netlink protocols the agent keeps: routes and addresses (ip, glibc's
/// getaddrinfo), socket diagnostics (ss).
const NETLINK: [i32; 2] = [libc::NETLINK_ROUTE, libc::NETLINK_SOCK_DIAG];

/// seccompiler's prologue: load the arch, skip the kill when it is ours.
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_JMP_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

fn cond(arg: u8, op: Op, v: i32) -> SeccompCondition {
    SeccompCondition::new(arg, Len::Dword, op, v as u32 as u64).expect("valid condition")
}

fn errno(e: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | e as u32
}

/// The socket filter and the io_uring one, as the kernel takes them.
pub fn agent_filters() -> Result<Vec<Vec<libc::sock_filter>>, seccompiler::BackendError> {
    // Every condition of a rule must hold for it to match; a match refuses.
    let other_family = SeccompRule::new(FAMILIES.iter().map(|&f| cond(0, Op::Ne, f)).collect())?;
    let other_netlink = SeccompRule::new(
        std::iter::once(cond(0, Op::Eq, libc::AF_NETLINK))
            .chain(NETLINK.iter().map(|&p| cond(2, Op::Ne, p)))
            .collect(),
    )?;
    let rules = vec![other_family, other_netlink];
    let sockets = SeccompFilter::new(
        BTreeMap::from([
            (libc::SYS_socket, rules.clone()),
            (libc::SYS_socketpair, rules),
        ]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EAFNOSUPPORT as u32),
        TargetArch::x86_64,
    )?;
    // io_uring's IORING_OP_SOCKET makes a socket no socket(2) filter sees.
    let uring = SeccompFilter::new(
        BTreeMap::from([
            (libc::SYS_io_uring_setup, vec![]),
            (libc::SYS_io_uring_enter, vec![]),
            (libc::SYS_io_uring_register, vec![]),
        ]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TargetArch::x86_64,
    )?;
    [sockets, uring]
        .into_iter()
        .map(|f| Ok(native_only(BpfProgram::try_from(f)?)))
        .collect()
}

/// seccompiler kills a process on a foreign arch; we refuse instead, and
/// refuse x32 calls (x86_64's arch, numbers with bit 30 set, which no rule
/// above names and so would be allowed).
fn native_only(prog: BpfProgram) -> Vec<libc::sock_filter> {
    let insn = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let prologue = [
        insn(BPF_LD_W_ABS, 0, 0, 4),
        insn(BPF_JMP_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        insn(BPF_RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
    ];
    let same = |a: &libc::sock_filter, b: &seccompiler::sock_filter| {
        (a.code, a.jt, a.jf, a.k) == (b.code, b.jt, b.jf, b.k)
    };
    assert!(
        prog.len() > 3 && prologue.iter().zip(&prog).all(|(a, b)| same(a, b)),
        "seccompiler's arch prologue changed: review native_only"
    );
    let mut out = vec![
        insn(BPF_LD_W_ABS, 0, 0, 4),
        insn(BPF_JMP_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        insn(BPF_RET_K, 0, 0, errno(libc::EPERM)),
        insn(BPF_LD_W_ABS, 0, 0, 0),
        insn(BPF_JMP_JGE_K, 0, 1, X32_SYSCALL_BIT),
        insn(BPF_RET_K, 0, 0, errno(libc::EPERM)),
    ];
    out.extend(prog[3..].iter().map(|i| insn(i.code, i.jt, i.jf, i.k)));
    out
}

/// Build the filters and register them for every agent child of this
/// process; an error here stops the caller (no agent without them).
pub fn register() -> Result<(), String> {
    let f = agent_filters().map_err(|e| format!("seccomp filter: {e}"))?;
    crate::seccomp::set_agent_filters(f).map_err(|e| format!("seccomp filter: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_arches_and_x32_are_refused_before_any_rule() {
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        for p in agent_filters().unwrap() {
            let k: Vec<(u16, u32)> = p.iter().take(6).map(|i| (i.code, i.k)).collect();
            assert_eq!(
                k,
                [
                    (BPF_LD_W_ABS, 4),
                    (BPF_JMP_JEQ_K, AUDIT_ARCH_X86_64),
                    (BPF_RET_K, eperm),
                    (BPF_LD_W_ABS, 0),
                    (BPF_JMP_JGE_K, X32_SYSCALL_BIT),
                    (BPF_RET_K, eperm),
                ]
            );
            // No kill anywhere: a refusal is an error the program sees.
            assert!(
                p.iter()
                    .all(|i| i.code != BPF_RET_K || i.k != libc::SECCOMP_RET_KILL_PROCESS)
            );
        }
    }
}
