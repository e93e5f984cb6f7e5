//! An in-kernel TCP relay: a BPF sockhash and an SK_SKB verdict program
//! that hands every byte a socket in the map receives to its peer's
//! egress (bpf_sk_redirect_hash), so a spliced pair's bytes never reach
//! user space. Creating the map and loading the program need root
//! (CAP_BPF + CAP_NET_ADMIN); inserting sockets needs only the map fd.
//!
//! The map is keyed by the receiving socket's 4-tuple as the verdict
//! program sees it in `__sk_buff` (local_ip4, remote_ip4, local_port,
//! remote_port, 16 bytes); the value is the peer socket. A pair is two
//! entries: key(a) -> b and key(b) -> a. A receiving socket whose key is
//! missing gets SK_PASS: its bytes stay queued for its owner to read.

#![allow(unsafe_code)] // the bpf(2) syscall has no safe wrapper

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_MAP_TYPE_SOCKHASH: u32 = 18;
const BPF_PROG_TYPE_SK_SKB: u32 = 14;
const BPF_SK_SKB_STREAM_PARSER: u32 = 4;
const BPF_SK_SKB_STREAM_VERDICT: u32 = 5;
const BPF_SK_SKB_VERDICT: u32 = 38;
const BPF_FUNC_SK_REDIRECT_HASH: i32 = 72;
const BPF_F_INGRESS: i32 = 1;
const BPF_NOEXIST: u64 = 1;
const KEY_SIZE: u32 = 16;

/// How the verdict program runs and where it sends the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// BPF_SK_SKB_VERDICT (no stream parser), to the peer's egress.
    Egress,
    /// BPF_SK_SKB_STREAM_VERDICT behind a stream parser that takes every
    /// skb whole, to the peer's egress (the older strparser path).
    StreamEgress,
    /// BPF_SK_SKB_VERDICT, into the peer's receive queue (BPF_F_INGRESS):
    /// the peer's owner reads them; no relay, for the measurement only.
    Ingress,
}

/// A sockhash with the relay program attached. Dropping it closes the
/// map (and so the program's attachment once no socket holds it).
#[derive(Debug)]
pub struct SockRelay {
    map: OwnedFd,
    _progs: Vec<OwnedFd>,
}

#[repr(C, align(8))]
struct Attr([u8; 144]);

impl Attr {
    fn new() -> Self {
        Attr([0; 144])
    }
    fn u32(&mut self, off: usize, v: u32) -> &mut Self {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, off: usize, v: u64) -> &mut Self {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

fn bpf(cmd: libc::c_long, attr: &mut Attr) -> io::Result<libc::c_long> {
    // SAFETY: attr is a zero-padded bpf_attr of the full 144 bytes the
    // kernel knows; every pointer in it points at live data the caller
    // keeps for the duration of the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.0.as_mut_ptr(), 144usize) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

fn fd_of(r: libc::c_long) -> OwnedFd {
    // SAFETY: the kernel just returned this fd to us; we own it.
    unsafe { OwnedFd::from_raw_fd(r as RawFd) }
}

/// One eBPF instruction.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    (code as u64)
        | ((dst as u64 & 0xf) << 8)
        | ((src as u64 & 0xf) << 12)
        | ((off as u16 as u64) << 16)
        | ((imm as u32 as u64) << 32)
}

// Opcodes used below.
const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const STX_W: u8 = 0x63;
const MOV64_X: u8 = 0xbf;
const MOV64_K: u8 = 0xb7;
const ADD64_K: u8 = 0x07;
const LD_DW: u8 = 0x18; // BPF_LD | BPF_IMM | BPF_DW
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
const JNE_K: u8 = 0x55;
const JEQ_K: u8 = 0x15;
const PSEUDO_MAP_FD: u8 = 1;

fn verdict_prog(map_fd: RawFd, flags: i32) -> Vec<u64> {
    // __sk_buff offsets: local_ip4 96, remote_ip4 92, local_port 136,
    // remote_port 132; the key is built at fp-16 in that order.
    vec![
        insn(MOV64_X, 6, 1, 0, 0),
        insn(LDX_W, 2, 6, 96, 0),
        insn(STX_W, 10, 2, -16, 0),
        insn(LDX_W, 2, 6, 92, 0),
        insn(STX_W, 10, 2, -12, 0),
        insn(LDX_W, 2, 6, 136, 0),
        insn(STX_W, 10, 2, -8, 0),
        insn(LDX_W, 2, 6, 132, 0),
        insn(STX_W, 10, 2, -4, 0),
        insn(MOV64_X, 1, 6, 0, 0),
        insn(LD_DW, 2, PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_X, 3, 10, 0, 0),
        insn(ADD64_K, 3, 0, 0, -16),
        insn(MOV64_K, 4, 0, 0, flags),
        insn(CALL, 0, 0, 0, BPF_FUNC_SK_REDIRECT_HASH),
        // No peer in the map (SK_DROP, 0): pass the bytes to the owner.
        insn(JNE_K, 0, 0, 1, 0),
        insn(MOV64_K, 0, 0, 0, 1),
        insn(EXIT, 0, 0, 0, 0),
    ]
}

/// The stream parser for StreamEgress: every skb is a whole message.
fn parser_prog() -> Vec<u64> {
    vec![insn(LDX_W, 0, 1, 0, 0), insn(EXIT, 0, 0, 0, 0)]
}

fn load(prog: &[u64], attach: u32) -> io::Result<OwnedFd> {
    load_typed(BPF_PROG_TYPE_SK_SKB, prog, attach)
}

fn load_typed(kind: u32, prog: &[u64], attach: u32) -> io::Result<OwnedFd> {
    let license = c"GPL";
    let mut log = vec![0u8; 65536];
    let mut a = Attr::new();
    a.u32(0, kind)
        .u32(4, prog.len() as u32)
        .u64(8, prog.as_ptr() as u64)
        .u64(16, license.as_ptr() as u64)
        .u32(24, 1)
        .u32(28, log.len() as u32)
        .u64(32, log.as_mut_ptr() as u64)
        .u32(68, attach);
    match bpf(BPF_PROG_LOAD, &mut a) {
        Ok(fd) => Ok(fd_of(fd)),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(0);
            let text = String::from_utf8_lossy(&log[..end]);
            let last = text.lines().rev().find(|l| !l.is_empty()).unwrap_or("");
            Err(io::Error::new(
                e.kind(),
                format!("BPF_PROG_LOAD: {e}: {last}"),
            ))
        }
    }
}

fn attach(map: &OwnedFd, prog: &OwnedFd, kind: u32) -> io::Result<()> {
    let mut a = Attr::new();
    a.u32(0, map.as_raw_fd() as u32)
        .u32(4, prog.as_raw_fd() as u32)
        .u32(8, kind);
    bpf(BPF_PROG_ATTACH, &mut a)
        .map(drop)
        .map_err(|e| io::Error::new(e.kind(), format!("BPF_PROG_ATTACH: {e}")))
}

impl SockRelay {
    /// Create the map (room for `pairs` pairs) and load and attach the
    /// program. Needs CAP_BPF and CAP_NET_ADMIN (root).
    pub fn create(pairs: u32, verdict: Verdict) -> io::Result<SockRelay> {
        let mut a = Attr::new();
        a.u32(0, BPF_MAP_TYPE_SOCKHASH)
            .u32(4, KEY_SIZE)
            .u32(8, 4)
            .u32(12, pairs.saturating_mul(2).max(2));
        let map = fd_of(
            bpf(BPF_MAP_CREATE, &mut a)
                .map_err(|e| io::Error::new(e.kind(), format!("BPF_MAP_CREATE: {e}")))?,
        );
        let flags = if verdict == Verdict::Ingress {
            BPF_F_INGRESS
        } else {
            0
        };
        let mut progs = Vec::new();
        let code = verdict_prog(map.as_raw_fd(), flags);
        if verdict == Verdict::StreamEgress {
            let p = load(&parser_prog(), BPF_SK_SKB_STREAM_PARSER)?;
            attach(&map, &p, BPF_SK_SKB_STREAM_PARSER)?;
            progs.push(p);
            let v = load(&code, BPF_SK_SKB_STREAM_VERDICT)?;
            attach(&map, &v, BPF_SK_SKB_STREAM_VERDICT)?;
            progs.push(v);
        } else {
            let v = load(&code, BPF_SK_SKB_VERDICT)?;
            attach(&map, &v, BPF_SK_SKB_VERDICT)?;
            progs.push(v);
        }
        Ok(SockRelay { map, _progs: progs })
    }

    /// A relay over a map fd someone else created (and attached).
    pub fn from_map(map: OwnedFd) -> SockRelay {
        SockRelay {
            map,
            _progs: Vec::new(),
        }
    }

    pub fn map_fd(&self) -> &OwnedFd {
        &self.map
    }

    /// Splice `a` and `b` in the kernel: from now on what either receives
    /// goes out of the other. Both must be established IPv4 TCP sockets.
    /// Bytes already queued before the call stay queued until the next
    /// arrival (the kernel runs the verdict on arrival only).
    pub fn insert_pair(&self, a: &TcpStream, b: &TcpStream) -> io::Result<()> {
        let (ka, kb) = (key(a)?, key(b)?);
        self.update(&ka, b)?;
        if let Err(e) = self.update(&kb, a) {
            let _ = self.delete(&ka);
            return Err(e);
        }
        Ok(())
    }

    /// Take the pair out of the map (also done by the kernel when a
    /// socket closes).
    pub fn remove_pair(&self, a: &TcpStream, b: &TcpStream) {
        for s in [a, b] {
            if let Ok(k) = key(s) {
                let _ = self.delete(&k);
            }
        }
    }

    fn update(&self, k: &[u8; 16], s: &TcpStream) -> io::Result<()> {
        let v: u32 = s.as_raw_fd() as u32;
        let mut a = Attr::new();
        a.u32(0, self.map.as_raw_fd() as u32)
            .u64(8, k.as_ptr() as u64)
            .u64(16, &v as *const u32 as u64)
            .u64(24, BPF_NOEXIST);
        bpf(BPF_MAP_UPDATE_ELEM, &mut a)
            .map(drop)
            .map_err(|e| io::Error::new(e.kind(), format!("sockhash update: {e}")))
    }

    fn delete(&self, k: &[u8; 16]) -> io::Result<()> {
        let mut a = Attr::new();
        a.u32(0, self.map.as_raw_fd() as u32)
            .u64(8, k.as_ptr() as u64);
        bpf(BPF_MAP_DELETE_ELEM, &mut a).map(drop)
    }
}

/// The key the verdict program builds for bytes `s` receives.
fn key(s: &TcpStream) -> io::Result<[u8; 16]> {
    let (SocketAddr::V4(l), SocketAddr::V4(r)) = (s.local_addr()?, s.peer_addr()?) else {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "sockhash relay: IPv4 only",
        ));
    };
    Ok(key_of(l, r))
}

fn key_of(l: std::net::SocketAddrV4, r: std::net::SocketAddrV4) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[0..4].copy_from_slice(&l.ip().octets());
    k[4..8].copy_from_slice(&r.ip().octets());
    // local_port is the host-order port; remote_port the network-order
    // 16 bits in the upper half of the word (on little-endian hosts).
    k[8..12].copy_from_slice(&u32::from(l.port()).to_ne_bytes());
    k[12..16].copy_from_slice(&remote_port_word(r.port()).to_ne_bytes());
    k
}

#[cfg(target_endian = "little")]
fn remote_port_word(port: u16) -> u32 {
    u32::from(port.to_be()) << 16
}

#[cfg(target_endian = "big")]
fn remote_port_word(port: u16) -> u32 {
    u32::from(port)
}

/// Whether every byte `from` has received went into `to`'s send queue,
/// given that their owner read `read` bytes from `from` and wrote
/// `wrote` bytes to `to` itself. The kernel
/// moves redirected bytes to `to` from a work queue: `from`'s EOF can
/// arrive before they are all in, and a half close of `to` then would
/// send its FIN ahead of them. For after `from`'s FIN, which its count
/// includes (one sequence number). Read `to`'s side first: its count
/// only grows, so a race makes this answer "not yet", never a false "yes".
pub fn drained(from: &TcpStream, to: &TcpStream, read: u64, wrote: u64) -> io::Result<bool> {
    let acked = tcp_info_u64(to, 120)?;
    let mut outq: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int to the pointer given.
    if unsafe { libc::ioctl(to.as_raw_fd(), libc::TIOCOUTQ, &mut outq) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let received = tcp_info_u64(from, 128)?.saturating_sub(1);
    Ok(acked + outq.max(0) as u64 + read >= received + wrote)
}

/// A u64 field of `struct tcp_info` at `off` (tcpi_bytes_acked 120,
/// tcpi_bytes_received 128; both since Linux 4.1).
fn tcp_info_u64(s: &TcpStream, off: usize) -> io::Result<u64> {
    let mut buf = [0u8; 232];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: buf is writable for len bytes; the kernel writes at most
    // len and updates it.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if (len as usize) < off + 8 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "tcp_info too short",
        ));
    }
    let mut v = [0u8; 8];
    v.copy_from_slice(&buf[off..off + 8]);
    Ok(u64::from_ne_bytes(v))
}

const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_PROG_TYPE_SOCK_OPS: u32 = 13;
const BPF_PROG_TYPE_SK_MSG: u32 = 16;
const BPF_CGROUP_SOCK_OPS: u32 = 3;
const BPF_SK_MSG_VERDICT: u32 = 7;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_FUNC_MAP_LOOKUP_ELEM: i32 = 1;
const BPF_FUNC_SOCK_HASH_UPDATE: i32 = 70;
const BPF_FUNC_MSG_REDIRECT_HASH: i32 = 71;

/// The experiment's other shape: the agent's own socket in the map, so
/// neither the loopback hop nor the relay's accepted socket carries the
/// bulk. A sock_ops program on a cgroup v2 puts every socket of that
/// cgroup that connects to the relay's port into the sockhash (keyed by
/// its 4-tuple); the relay adds its upstream socket and two plain hash
/// entries (peer keys, a direction each). The agent's sends (sk_msg)
/// go to the upstream's egress; what upstream receives (sk_skb) goes
/// straight into the agent socket's receive queue (BPF_F_INGRESS).
#[derive(Debug)]
pub struct LocalRelay {
    socks: OwnedFd,
    to_up: OwnedFd,
    to_agent: OwnedFd,
    _progs: Vec<OwnedFd>,
}

fn map_create(kind: u32, key: u32, value: u32, n: u32) -> io::Result<OwnedFd> {
    let mut a = Attr::new();
    a.u32(0, kind).u32(4, key).u32(8, value).u32(12, n);
    bpf(BPF_MAP_CREATE, &mut a)
        .map(fd_of)
        .map_err(|e| io::Error::new(e.kind(), format!("BPF_MAP_CREATE: {e}")))
}

/// The key at fp-16 from ctx (r6) fields at these offsets: local_ip4,
/// remote_ip4, local_port, remote_port.
fn key_insns(off: [i16; 4]) -> Vec<u64> {
    let mut v = Vec::new();
    for (i, o) in off.iter().enumerate() {
        v.push(insn(LDX_W, 2, 6, *o, 0));
        v.push(insn(STX_W, 10, 2, -16 + 4 * i as i16, 0));
    }
    v
}

fn ld_map(reg: u8, fd: &OwnedFd) -> [u64; 2] {
    [
        insn(LD_DW, reg, PSEUDO_MAP_FD, 0, fd.as_raw_fd()),
        insn(0, 0, 0, 0, 0),
    ]
}

/// Look the ctx's key up in `peers`; if found, call `helper(ctx, socks,
/// peer_key, flags)`; SK_PASS when not found or the redirect failed.
fn redirect_prog(
    off: [i16; 4],
    peers: &OwnedFd,
    socks: &OwnedFd,
    helper: i32,
    flags: i32,
) -> Vec<u64> {
    let mut v = vec![insn(MOV64_X, 6, 1, 0, 0)];
    v.extend(key_insns(off));
    v.extend(ld_map(1, peers));
    v.push(insn(MOV64_X, 2, 10, 0, 0));
    v.push(insn(ADD64_K, 2, 0, 0, -16));
    v.push(insn(CALL, 0, 0, 0, BPF_FUNC_MAP_LOOKUP_ELEM));
    v.push(insn(JEQ_K, 0, 0, 7, 0)); // not found: to the SK_PASS below
    v.push(insn(MOV64_X, 3, 0, 0, 0));
    v.push(insn(MOV64_X, 1, 6, 0, 0));
    v.extend(ld_map(2, socks));
    v.push(insn(MOV64_K, 4, 0, 0, flags));
    v.push(insn(CALL, 0, 0, 0, helper));
    v.push(insn(JNE_K, 0, 0, 1, 0));
    v.push(insn(MOV64_K, 0, 0, 0, 1));
    v.push(insn(EXIT, 0, 0, 0, 0));
    v
}

impl LocalRelay {
    /// Needs root. `cgroup`: an open cgroup v2 directory whose sockets
    /// connecting to `port` are the agents'.
    pub fn create(cgroup: &std::fs::File, port: u16, pairs: u32) -> io::Result<LocalRelay> {
        let n = pairs.saturating_mul(2).max(2);
        let socks = map_create(BPF_MAP_TYPE_SOCKHASH, KEY_SIZE, 4, n)?;
        let to_up = map_create(BPF_MAP_TYPE_HASH, KEY_SIZE, KEY_SIZE, n)?;
        let to_agent = map_create(BPF_MAP_TYPE_HASH, KEY_SIZE, KEY_SIZE, n)?;
        let mut progs = Vec::new();
        // sk_msg_md: local_ip4 24, remote_ip4 20, local_port 64, remote_port 60.
        let m = redirect_prog(
            [24, 20, 64, 60],
            &to_up,
            &socks,
            BPF_FUNC_MSG_REDIRECT_HASH,
            0,
        );
        let m = load_typed(BPF_PROG_TYPE_SK_MSG, &m, BPF_SK_MSG_VERDICT)?;
        attach(&socks, &m, BPF_SK_MSG_VERDICT)?;
        progs.push(m);
        // __sk_buff: local_ip4 96, remote_ip4 92, local_port 136, remote_port 132.
        let k = redirect_prog(
            [96, 92, 136, 132],
            &to_agent,
            &socks,
            BPF_FUNC_SK_REDIRECT_HASH,
            BPF_F_INGRESS,
        );
        let k = load(&k, BPF_SK_SKB_VERDICT)?;
        attach(&socks, &k, BPF_SK_SKB_VERDICT)?;
        progs.push(k);
        // sock_ops: op 0, local_ip4 28, remote_ip4 24, local_port 68,
        // remote_port 64. On an active open's ESTABLISHED (4) to `port`,
        // the socket goes into the sockhash.
        let mut o = vec![
            insn(MOV64_X, 6, 1, 0, 0),
            insn(LDX_W, 2, 6, 0, 0),
            insn(JNE_K, 2, 0, 17, 4),
            insn(LDX_W, 2, 6, 64, 0),
            insn(JNE_K, 2, 0, 15, remote_port_word(port) as i32),
        ];
        o.extend(key_insns([28, 24, 68, 64]));
        o.push(insn(MOV64_X, 1, 6, 0, 0));
        o.extend(ld_map(2, &socks));
        o.push(insn(MOV64_X, 3, 10, 0, 0));
        o.push(insn(ADD64_K, 3, 0, 0, -16));
        o.push(insn(MOV64_K, 4, 0, 0, 0));
        o.push(insn(CALL, 0, 0, 0, BPF_FUNC_SOCK_HASH_UPDATE));
        o.push(insn(MOV64_K, 0, 0, 0, 1));
        o.push(insn(EXIT, 0, 0, 0, 0));
        let o = load_typed(BPF_PROG_TYPE_SOCK_OPS, &o, BPF_CGROUP_SOCK_OPS)?;
        let mut a = Attr::new();
        a.u32(0, o.as_raw_fd() as u32)
            .u32(4, cgroup.as_raw_fd() as u32)
            .u32(8, BPF_CGROUP_SOCK_OPS);
        let link = bpf(BPF_LINK_CREATE, &mut a)
            .map(fd_of)
            .map_err(|e| io::Error::new(e.kind(), format!("BPF_LINK_CREATE: {e}")))?;
        progs.push(o);
        progs.push(link);
        Ok(LocalRelay {
            socks,
            to_up,
            to_agent,
            _progs: progs,
        })
    }

    /// Hand the pair over: `accepted` is the relay's end of the agent's
    /// connection (the agent's socket is its peer), `up` the upstream.
    pub fn insert(&self, accepted: &TcpStream, up: &TcpStream) -> io::Result<()> {
        let (SocketAddr::V4(l), SocketAddr::V4(r)) =
            (accepted.local_addr()?, accepted.peer_addr()?)
        else {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "IPv4 only"));
        };
        let agent = key_of(r, l);
        let ku = key(up)?;
        let v: u32 = up.as_raw_fd() as u32;
        elem_update(&self.socks, &ku, &v.to_ne_bytes())?;
        elem_update(&self.to_agent, &ku, &agent)?;
        elem_update(&self.to_up, &agent, &ku)
    }

    pub fn remove(&self, accepted: &TcpStream, up: &TcpStream) {
        if let (Ok(SocketAddr::V4(l)), Ok(SocketAddr::V4(r)), Ok(ku)) =
            (accepted.local_addr(), accepted.peer_addr(), key(up))
        {
            let agent = key_of(r, l);
            for (m, k) in [
                (&self.to_up, &agent),
                (&self.to_agent, &ku),
                (&self.socks, &ku),
            ] {
                let mut a = Attr::new();
                a.u32(0, m.as_raw_fd() as u32).u64(8, k.as_ptr() as u64);
                let _ = bpf(BPF_MAP_DELETE_ELEM, &mut a);
            }
        }
    }
}

fn elem_update(map: &OwnedFd, k: &[u8; 16], v: &[u8]) -> io::Result<()> {
    let mut a = Attr::new();
    a.u32(0, map.as_raw_fd() as u32)
        .u64(8, k.as_ptr() as u64)
        .u64(16, v.as_ptr() as u64)
        .u64(24, 0);
    bpf(BPF_MAP_UPDATE_ELEM, &mut a)
        .map(drop)
        .map_err(|e| io::Error::new(e.kind(), format!("map update: {e}")))
}
