//! The audit sink: the guest is the only writer of the sandbox's audit log.
//! Tools send one JSON record per datagram; the kernel attaches the
//! sender's pid/uid (SCM_CREDENTIALS, the datagram form of SO_PEERCRED), so
//! a record cannot claim another sender. Each record is parsed by the one
//! parser of the format, size-limited, re-stamped with the guest's clock,
//! and rate-limited per uid, so a flood is bounded and never silent: what
//! is refused or dropped is counted in a record of its own.

use std::collections::HashMap;
use std::io::{self, IoSliceMut, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::socket::{ControlMessageOwned, MsgFlags, UnixAddr, recvmsg, setsockopt, sockopt};
use sbx_core::audit::{ACK, CHALLENGE, Entry, MAX_RECORD, Outcome, Peer};

/// Tool names a datagram may carry only from these uids: the guest's and
/// the host's (root), the firewall's (root, its proxy's uid). The names the
/// verifying sink backs ([`VERIFIED_TOOLS`]) come only through it, or root.
const RESERVED: &[(&str, &[u32])] = &[
    ("sbx-guest", &[0]),
    ("sbx-run", &[0]),
    ("sbx-fw", &[0, 65533]),
];
/// Which root-owned binary backs which tool name on the verifying sink.
pub const VERIFIED_TOOLS: &[(&str, &str)] = &[
    ("/usr/local/bin/sbx-tool-guard", "tools"),
    ("/usr/local/bin/sbx-git-guard", "sbx-git-guard"),
    ("/usr/local/bin/sbx-guest", "sbx-host-tools"),
];
/// Per uid: a burst of this many records, then `RATE` a second.
const BURST: f64 = 500.0;
const RATE: f64 = 200.0;

/// One received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    pub len: usize,
    pub truncated: bool,
    pub peer: Option<Peer>,
}

/// Where records come from: a unix datagram socket now, vsock later.
pub trait Transport {
    /// Wait up to the transport's timeout; `Ok(None)` on timeout.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<Datagram>>;
}

/// A unix datagram socket with SO_PASSCRED.
#[derive(Debug)]
pub struct UnixTransport {
    sock: UnixDatagram,
}

impl UnixTransport {
    pub fn new(sock: UnixDatagram, timeout: Duration) -> io::Result<Self> {
        setsockopt(&sock.as_fd(), sockopt::PassCred, &true).map_err(io::Error::from)?;
        sock.set_read_timeout(Some(timeout))?;
        Ok(Self { sock })
    }

    /// Bind at `path` (replacing a stale socket), mode 0666 in a 0755
    /// directory: the one guest socket the agent may use.
    pub fn bind(path: &Path, timeout: Duration) -> io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)?;
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))?;
        }
        let _ = std::fs::remove_file(path);
        let sock = UnixDatagram::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
        Self::new(sock, timeout)
    }
}

impl Transport for UnixTransport {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<Datagram>> {
        recv_creds(std::os::fd::AsRawFd::as_raw_fd(&self.sock), buf)
    }
}

/// One message and the kernel's credentials of its sender.
fn recv_creds(fd: std::os::fd::RawFd, buf: &mut [u8]) -> io::Result<Option<Datagram>> {
    recv_creds_flags(fd, buf, MsgFlags::empty())
}

fn recv_creds_flags(
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
    flags: MsgFlags,
) -> io::Result<Option<Datagram>> {
    let cap = buf.len();
    let mut cmsg = nix::cmsg_space!(nix::sys::socket::UnixCredentials);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = match recvmsg::<UnixAddr>(fd, &mut iov, Some(&mut cmsg), MsgFlags::MSG_TRUNC | flags)
    {
        Ok(m) => m,
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut peer = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmCredentials(cr) = c {
                peer = Some(Peer {
                    pid: cr.pid(),
                    uid: cr.uid(),
                    source: None,
                });
            }
        }
    }
    Ok(Some(Datagram {
        len: msg.bytes.min(cap),
        truncated: msg.flags.contains(MsgFlags::MSG_TRUNC) || msg.bytes > cap,
        peer,
    }))
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    #[error("larger than {MAX_RECORD} bytes")]
    TooLarge,
    #[error("no sender credentials")]
    NoCredentials,
    #[error("not an audit record: {0}")]
    Malformed(String),
    #[error("field {0} longer than {1} bytes")]
    FieldTooLong(&'static str, usize),
    #[error("uid {0} may not send records as {1}")]
    Forged(u32, String),
    #[error("tool name {0:?} is not [A-Za-z0-9._-]")]
    BadName(String),
    #[error("sender is not verified: {0}")]
    Unverified(String),
}

/// Validate one message and stamp it: the sender's credentials and the
/// guest's clock replace whatever the sender claimed.
pub fn accept(bytes: &[u8], dg: &Datagram, now: SystemTime) -> Result<Entry, Reject> {
    let e = accept_inner(bytes, dg, now)?;
    let uid = dg.peer.as_ref().map_or(u32::MAX, |p| p.uid);
    let reserved = RESERVED
        .iter()
        .find(|(t, _)| *t == e.tool)
        .map(|(_, uids)| *uids)
        .or_else(|| {
            VERIFIED_TOOLS
                .iter()
                .any(|(_, t)| *t == e.tool)
                .then_some(&[0][..])
        });
    if uid != 0 && reserved.is_some_and(|uids| !uids.contains(&uid)) {
        return Err(Reject::Forged(uid, e.tool));
    }
    let mut e = e;
    // Backed by the sender's uid: root's, or a service uid the name is
    // reserved for. Anything else stays without a source: unverified.
    if uid == 0 || reserved.is_some() {
        if let Some(p) = e.peer.as_mut() {
            p.source = Some(e.tool.clone());
        }
    }
    Ok(e)
}

/// Everything but who may claim which name.
fn accept_inner(bytes: &[u8], dg: &Datagram, now: SystemTime) -> Result<Entry, Reject> {
    if dg.truncated || bytes.len() > MAX_RECORD {
        return Err(Reject::TooLarge);
    }
    let peer = dg.peer.clone().ok_or(Reject::NoCredentials)?;
    let text = std::str::from_utf8(bytes).map_err(|e| Reject::Malformed(e.to_string()))?;
    let mut e = Entry::parse(text.trim_end()).map_err(|e| Reject::Malformed(e.to_string()))?;
    for (name, v, max) in [
        ("tool", &e.tool, 64),
        ("agent", &e.agent, 64),
        ("operation", &e.operation, 128),
        ("policy", &e.policy, 128),
        ("target", &e.target, 4096),
    ] {
        if v.len() > max {
            return Err(Reject::FieldTooLong(name, max));
        }
    }
    if e.reason.as_ref().is_some_and(|r| r.len() > 4096) {
        return Err(Reject::FieldTooLong("reason", 4096));
    }
    if e.peer.is_some() || e.origin.is_some() {
        return Err(Reject::Forged(
            peer.uid,
            "peer/origin (set by the guest)".into(),
        ));
    }
    // Lookalikes (a zero-width character in "sbx-guest") are not names.
    if e.tool.is_empty()
        || !e
            .tool
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err(Reject::BadName(e.tool));
    }
    e.timestamp = humantime::format_rfc3339_seconds(now).to_string();
    e.peer = Some(peer);
    Ok(e)
}

/// A record of the guest's own.
pub fn own(
    operation: &str,
    target: &str,
    result: Outcome,
    policy: &str,
    reason: Option<String>,
    agent: &str,
) -> Entry {
    Entry {
        timestamp: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        tool: crate::TOOL.into(),
        agent: agent.into(),
        operation: operation.into(),
        target: target.into(),
        result,
        policy: policy.into(),
        reason,
        peer: Some(Peer {
            pid: std::process::id() as i32,
            uid: nix::unistd::geteuid().as_raw(),
            source: None,
        }),
        origin: None,
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
    dropped: u64,
    rejected: u64,
    last: Option<Reject>,
}

impl Bucket {
    fn new(now: Instant) -> Self {
        Self {
            tokens: BURST,
            at: now,
            dropped: 0,
            rejected: 0,
            last: None,
        }
    }

    /// One token, or count a drop.
    fn take(&mut self, now: Instant) -> bool {
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * RATE).min(BURST);
        self.at = now;
        if self.tokens < 1.0 {
            self.dropped += 1;
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}

/// Validation plus the per-uid budget; what to append for each message.
#[derive(Debug, Default)]
pub struct Sink {
    buckets: HashMap<u32, Bucket>,
}

impl Sink {
    /// Entries to append for one message (none when over budget: counted).
    pub fn handle(
        &mut self,
        bytes: &[u8],
        dg: &Datagram,
        now: Instant,
        wall: SystemTime,
    ) -> Vec<Entry> {
        let uid = dg.peer.as_ref().map(|p| p.uid).unwrap_or(u32::MAX);
        let b = self.buckets.entry(uid).or_insert_with(|| Bucket::new(now));
        if !b.take(now) {
            return Vec::new();
        }
        match accept(bytes, dg, wall) {
            Ok(e) => vec![e],
            Err(r) => {
                // One notice per rejection while within budget: the budget
                // bounds the notices too.
                b.rejected += 1;
                b.last = Some(r.clone());
                let pid = dg.peer.as_ref().map(|p| p.pid).unwrap_or(0);
                vec![own(
                    "audit",
                    &format!("record from pid {pid} uid {uid}"),
                    Outcome::Blocked,
                    "audit-sink",
                    Some(r.to_string()),
                    "sbx-guest",
                )]
            }
        }
    }

    /// Summaries of what was dropped since the last call (call ~1/s).
    pub fn flush(&mut self) -> Vec<Entry> {
        let mut out = Vec::new();
        for (uid, b) in self.buckets.iter_mut() {
            if b.dropped > 0 {
                out.push(own(
                    "audit",
                    &format!("records from uid {uid}"),
                    Outcome::Blocked,
                    "audit-rate-limit",
                    Some(format!("{} records dropped: more than {RATE}/s", b.dropped)),
                    "sbx-guest",
                ));
                b.dropped = 0;
            }
        }
        out
    }
}

/// The log file: created root-owned, appended with one write per record.
#[derive(Debug)]
pub struct LogFile {
    file: std::fs::File,
}

impl LogFile {
    pub fn open(path: &Path) -> io::Result<Self> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o644)
            .open(path)?;
        // An existing file keeps no wider mode than this.
        file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        Ok(Self { file })
    }

    pub fn append(&self, e: &Entry) -> io::Result<()> {
        let line = e.to_line();
        let n = (&self.file).write(&line)?;
        if n != line.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "short write to the audit log",
            ));
        }
        Ok(())
    }
}

/// Serve until `stop` is set: receive, validate, append; summaries each second.
pub fn serve(t: &mut dyn Transport, log: &LogFile, stop: &std::sync::atomic::AtomicBool) {
    let mut sink = Sink::default();
    let mut buf = vec![0u8; MAX_RECORD + 1];
    let mut last_flush = Instant::now();
    let mut warned = false;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let got = match t.recv(&mut buf) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("sbx-guest: audit sink: {e}");
                std::thread::sleep(Duration::from_millis(100));
                None
            }
        };
        let now = Instant::now();
        let mut entries = match got {
            Some(dg) => sink.handle(&buf[..dg.len], &dg, now, SystemTime::now()),
            None => Vec::new(),
        };
        if now.duration_since(last_flush) >= Duration::from_secs(1) {
            entries.extend(sink.flush());
            last_flush = now;
        }
        for e in entries {
            if let Err(err) = log.append(&e) {
                // The log is gone or full: the record still reaches docker logs.
                if !warned {
                    eprintln!("sbx-guest: audit log: {err}");
                    warned = true;
                }
                eprintln!(
                    "{}",
                    sbx_core::audit::undelivered_line(&err.to_string(), &e.to_line())
                );
            }
        }
    }
}

/// The binaries the verifying sink knows, by (dev, ino) when it started:
/// root-owned files in the image, which the agent cannot replace.
#[derive(Debug, Clone, Default)]
pub struct Known(Vec<(u64, u64, String)>);

impl Known {
    /// Paths that do not exist are left out (an image without the tool).
    pub fn new<'a>(list: impl IntoIterator<Item = (&'a Path, &'a str)>) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self(
            list.into_iter()
                .filter_map(|(p, t)| {
                    let m = std::fs::metadata(p).ok()?;
                    Some((m.dev(), m.ino(), t.to_owned()))
                })
                .collect(),
        )
    }

    /// The tool name the executable of `pid` backs. A pidfd is taken first
    /// and must still be running once /proc was read, so the /proc entry
    /// read was that process and not a later one with the reused pid.
    pub fn verify(&self, pid: i32) -> Result<String, Reject> {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::unix::fs::MetadataExt;
        let un = |why: String| Reject::Unverified(format!("pid {pid}: {why}"));
        let pidfd = sbx_sys::privsep::pidfd_open(nix::unistd::Pid::from_raw(pid))
            .map_err(|e| un(e.to_string()))?;
        let m = std::fs::metadata(format!("/proc/{pid}/exe")).map_err(|e| un(e.to_string()))?;
        let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, PollTimeout::ZERO).map_err(|e| un(e.to_string()))? != 0 {
            return Err(un("ended while being checked".into()));
        }
        self.0
            .iter()
            .find(|(d, i, _)| *d == m.dev() && *i == m.ino())
            .map(|(_, _, t)| t.clone())
            .ok_or_else(|| un("runs none of the tools the sink verifies".into()))
    }
}

/// The verifying sink's listening socket at `path`, mode 0666 like the
/// datagram one.
pub fn bind_verified(path: &Path) -> io::Result<OwnedFd> {
    use nix::sys::socket::{Backlog, bind, listen};
    use std::os::unix::fs::PermissionsExt;
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let _ = std::fs::remove_file(path);
    let fd = sbx_core::audit::seqpacket()?;
    bind(fd.as_raw_fd(), &UnixAddr::new(path)?)?;
    listen(&fd, Backlog::new(128).map_err(io::Error::from)?)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(fd)
}

/// One connection to the verifying sink, first half: who is at the other
/// end. The record must come after [`CHALLENGE`] and from that process
/// ([`verified_record`]). Exec race: a process that sends and then execs a
/// known binary sent its record before the challenge (refused as queued
/// early); a child that kept the socket sends with its own pid (refused).
fn challenge(fd: &OwnedFd, known: &Known) -> Result<(i32, String), Reject> {
    use nix::sys::socket::{MsgFlags, getsockopt, recv, send};
    let cred = getsockopt(fd, sockopt::PeerCredentials).map_err(|_| Reject::NoCredentials)?;
    let pid = cred.pid();
    let tool = known.verify(pid)?;
    let mut b = [0u8; 1];
    if recv(
        fd.as_raw_fd(),
        &mut b,
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_PEEK,
    )
    .is_ok_and(|n| n > 0)
    {
        return Err(Reject::Unverified(format!(
            "pid {pid}: a record queued before the sender was checked"
        )));
    }
    setsockopt(fd, sockopt::PassCred, &true).map_err(|_| Reject::NoCredentials)?;
    send(
        fd.as_raw_fd(),
        &[CHALLENGE],
        MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
    )
    .map_err(|e| Reject::Unverified(format!("pid {pid}: {e}")))?;
    Ok((pid, tool))
}

/// Second half: the record, once the connection is readable (never waits).
fn verified_record(fd: &OwnedFd, pid: i32, tool: &str, wall: SystemTime) -> Result<Entry, Reject> {
    let uid =
        nix::sys::socket::getsockopt(fd, sockopt::PeerCredentials).map_or(u32::MAX, |c| c.uid());
    let mut buf = vec![0u8; MAX_RECORD + 1];
    let dg = recv_creds_flags(fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT)
        .map_err(|e| Reject::Unverified(format!("pid {pid}: {e}")))?
        .ok_or_else(|| Reject::Unverified(format!("pid {pid}: no record in time")))?;
    let from = dg.peer.as_ref().map(|p| p.pid);
    if from != Some(pid) {
        return Err(Reject::Unverified(format!(
            "record from pid {from:?} on pid {pid}'s connection"
        )));
    }
    let mut e = accept_inner(&buf[..dg.len], &dg, wall)?;
    if e.tool != tool {
        return Err(Reject::Forged(uid, e.tool));
    }
    if let Some(p) = e.peer.as_mut() {
        p.source = Some(tool.to_owned());
    }
    Ok(e)
}

/// Connections the verifying sink waits on at once for their record. A
/// connection from a verified binary that never sends (the agent connects,
/// clears close-on-exec and execs the checker, which then waits on a stdin
/// the agent never closes) costs one slot for `timeout`, not the whole sink:
/// when they were served one at a time, a queue of them kept every real
/// checker waiting past its 10 s, and refusals reached only stderr (a38f).
/// When full, the oldest is given up: a real checker sends at once.
const MAX_PENDING: usize = 4096;
/// Connections accepted per turn of the loop, so reading the waiting ones
/// is never starved by a flood of connects.
const ACCEPT_BATCH: usize = 64;

/// A verified connection waiting for its record.
struct Pending {
    fd: OwnedFd,
    pid: i32,
    uid: u32,
    tool: String,
    deadline: Instant,
}

/// Serve the verifying sink until `stop`: every connection waited on at
/// once, each for its record for at most `timeout`. A verified refusal is
/// never dropped for budget; verified allowances have a budget per tool,
/// apart from any uid's.
pub fn serve_verified(
    listener: &OwnedFd,
    known: &Known,
    log: &LogFile,
    timeout: Duration,
    stop: &std::sync::atomic::AtomicBool,
) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use nix::sys::socket::{getsockopt, send};
    let mut buckets: HashMap<String, Bucket> = HashMap::new();
    let mut last_flush = Instant::now();
    let mut pending: std::collections::VecDeque<Pending> = std::collections::VecDeque::new();
    let rejected = |buckets: &mut HashMap<String, Bucket>, uid: u32, r: Reject, now| {
        let b = buckets
            .entry(format!("uid {uid}"))
            .or_insert_with(|| Bucket::new(now));
        b.take(now).then(|| {
            own(
                "audit",
                &format!("verified record from uid {uid}"),
                Outcome::Blocked,
                "audit-sink",
                Some(r.to_string()),
                "sbx-guest",
            )
        })
    };
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let wait = pending
            .iter()
            .map(|p| p.deadline.saturating_duration_since(Instant::now()))
            .min()
            .unwrap_or(Duration::from_millis(500))
            .min(Duration::from_millis(500));
        let (listener_ready, ready): (bool, Vec<bool>) = {
            let mut fds = Vec::with_capacity(pending.len() + 1);
            fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
            fds.extend(
                pending
                    .iter()
                    .map(|p| PollFd::new(p.fd.as_fd(), PollFlags::POLLIN)),
            );
            let ms = u16::try_from(wait.as_millis().max(1)).unwrap_or(500);
            if poll(&mut fds, PollTimeout::from(ms)).unwrap_or(0) <= 0 {
                (false, vec![false; pending.len()])
            } else {
                let on = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
                (on(&fds[0]), fds[1..].iter().map(on).collect())
            }
        };
        let now = Instant::now();
        let mut entries = Vec::new();
        let mut acks = Vec::new();
        // Records that came, and connections past their time.
        let mut keep = std::collections::VecDeque::with_capacity(pending.len());
        for (p, r) in pending.drain(..).zip(ready) {
            if !r && now < p.deadline {
                keep.push_back(p);
                continue;
            }
            match verified_record(&p.fd, p.pid, &p.tool, SystemTime::now()) {
                Ok(e) => {
                    let b = buckets
                        .entry(p.tool.clone())
                        .or_insert_with(|| Bucket::new(now));
                    if e.result == Outcome::Blocked || b.take(now) {
                        entries.push(e);
                        acks.push(p.fd);
                    }
                }
                Err(e) => entries.extend(rejected(&mut buckets, p.uid, e, now)),
            }
        }
        pending = keep;
        if listener_ready {
            for _ in 0..ACCEPT_BATCH {
                let Ok(fd) = sbx_sys::privsep::accept_owned(listener) else {
                    break;
                };
                let _ = sbx_core::audit::set_timeouts(&fd, timeout);
                let uid = getsockopt(&fd, sockopt::PeerCredentials).map_or(u32::MAX, |c| c.uid());
                match challenge(&fd, known) {
                    Ok((pid, tool)) => {
                        if pending.len() >= MAX_PENDING {
                            if let Some(old) = pending.pop_front() {
                                let why = Reject::Unverified(format!(
                                    "pid {}: no record while {MAX_PENDING} others waited",
                                    old.pid
                                ));
                                entries.extend(rejected(&mut buckets, old.uid, why, now));
                            }
                        }
                        pending.push_back(Pending {
                            fd,
                            pid,
                            uid,
                            tool,
                            deadline: now + timeout,
                        });
                    }
                    Err(r) => entries.extend(rejected(&mut buckets, uid, r, now)),
                }
                // More only while more are queued: the listener blocks.
                let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
                if poll(&mut fds, PollTimeout::ZERO).unwrap_or(0) <= 0 {
                    break;
                }
            }
        }
        if now.duration_since(last_flush) >= Duration::from_secs(1) {
            for (key, b) in buckets.iter_mut() {
                if b.dropped > 0 {
                    entries.push(own(
                        "audit",
                        &format!("verified records from {key}"),
                        Outcome::Blocked,
                        "audit-rate-limit",
                        Some(format!("{} records dropped: more than {RATE}/s", b.dropped)),
                        "sbx-guest",
                    ));
                    b.dropped = 0;
                }
            }
            last_flush = now;
        }
        let mut written = true;
        for e in entries {
            if let Err(err) = log.append(&e) {
                written = false;
                eprintln!(
                    "{}",
                    sbx_core::audit::undelivered_line(&err.to_string(), &e.to_line())
                );
            }
        }
        // The ack says "in the log": without it the sender refuses the call.
        if written {
            for fd in acks {
                let _ = send(
                    fd.as_raw_fd(),
                    &[ACK],
                    MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dg(len: usize, uid: u32) -> Datagram {
        Datagram {
            len,
            truncated: false,
            peer: Some(Peer {
                pid: 42,
                uid,
                source: None,
            }),
        }
    }

    const OK: &str = r#"{"timestamp":"1999-01-01T00:00:00Z","tool":"linter","agent":"claude","operation":"commit","target":"git commit -n","result":"blocked","policy":"block-no-verify"}"#;

    #[test]
    fn accepts_a_record_and_stamps_peer_and_time() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let e = accept(OK.as_bytes(), &dg(OK.len(), 1000), now).unwrap();
        assert_eq!(
            e.peer,
            Some(Peer {
                pid: 42,
                uid: 1000,
                source: None
            })
        );
        assert_eq!(e.timestamp, "2027-01-15T08:00:00Z");
        assert_eq!(e.tool, "linter");
    }

    #[test]
    fn refuses_what_is_not_a_clean_record() {
        let forged_peer = OK.replace("}", r#","peer":{"pid":1,"uid":0}}"#);
        let as_guest = OK.replace("linter", "sbx-guest");
        let as_run = OK.replace("linter", "sbx-run");
        let as_guard = OK.replace("linter", "sbx-git-guard");
        let as_checker = OK.replace("linter", "tools");
        let as_fw = OK.replace("linter", "sbx-fw");
        let lookalike = OK.replace("linter", "sbx\u{200b}-guest");
        let long_target = OK.replace("git commit -n", &"x".repeat(5000));
        let cases: Vec<(&str, Datagram, &str)> = vec![
            ("{", dg(1, 1000), "not an audit record"),
            (r#"{"tool":"x"}"#, dg(12, 1000), "not an audit record"),
            (&forged_peer, dg(forged_peer.len(), 1000), "may not send"),
            (
                &as_guest,
                dg(as_guest.len(), 1000),
                "may not send records as sbx-guest",
            ),
            (
                &as_run,
                dg(as_run.len(), 1000),
                "may not send records as sbx-run",
            ),
            (&long_target, dg(long_target.len(), 1000), "field target"),
            (
                &as_guard,
                dg(as_guard.len(), 1000),
                "may not send records as sbx-git-guard",
            ),
            (
                &as_checker,
                dg(as_checker.len(), 1000),
                "may not send records as tools",
            ),
            (
                &as_fw,
                dg(as_fw.len(), 1000),
                "may not send records as sbx-fw",
            ),
            (
                &lookalike,
                dg(lookalike.len(), 1000),
                "is not [A-Za-z0-9._-]",
            ),
            (
                OK,
                Datagram {
                    truncated: true,
                    ..dg(OK.len(), 1000)
                },
                "larger than",
            ),
            (
                OK,
                Datagram {
                    peer: None,
                    ..dg(OK.len(), 1000)
                },
                "no sender credentials",
            ),
        ];
        for (text, d, want) in cases {
            let r = accept(text.as_bytes(), &d, SystemTime::now()).unwrap_err();
            assert!(r.to_string().contains(want), "{text}: {r}");
        }
        // Root may send as the guest (the guest's own helpers).
        assert!(
            accept(
                as_guest.as_bytes(),
                &dg(as_guest.len(), 0),
                SystemTime::now()
            )
            .is_ok()
        );
    }

    #[test]
    fn names_are_backed_by_the_senders_uid() {
        let as_fw = OK.replace("linter", "sbx-fw");
        let e = accept(as_fw.as_bytes(), &dg(as_fw.len(), 65533), SystemTime::now()).unwrap();
        assert_eq!(e.peer.unwrap().source.as_deref(), Some("sbx-fw"));
        let e = accept(OK.as_bytes(), &dg(OK.len(), 1000), SystemTime::now()).unwrap();
        assert_eq!(e.peer.unwrap().source, None);
    }

    /// The verifying sink over a real socket: this test binary is the
    /// "known" binary; a sender that runs anything else is refused.
    #[test]
    fn the_verifying_sink_stamps_the_binary_and_acks() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("v.sock");
        let log_path = dir.path().join("audit.jsonl");
        let me = std::env::current_exe().unwrap();
        let l = bind_verified(&sock).unwrap();
        let log = LogFile::open(&log_path).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let known = Known::new([(me.as_path(), "linter")]);
        let other = Known::new([(Path::new("/bin/sh"), "linter")]);
        let line = format!("{OK}\n");
        let forged = OK.replace("linter", "tools");
        std::thread::scope(|s| {
            s.spawn(|| serve_verified(&l, &known, &log, Duration::from_secs(1), &stop));
            let sent =
                sbx_core::audit::send_verified(&sock, line.as_bytes(), Duration::from_secs(5));
            // A name the binary does not back: no ack.
            let forgery =
                sbx_core::audit::send_verified(&sock, forged.as_bytes(), Duration::from_secs(5));
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            sent.unwrap();
            assert!(forgery.is_err(), "a forged name was acknowledged");
        });
        let text = std::fs::read_to_string(&log_path).unwrap();
        let lines: Vec<Entry> = text.lines().map(|l| Entry::parse(l).unwrap()).collect();
        assert_eq!(lines[0].tool, "linter", "{text}");
        let p = lines[0].peer.clone().unwrap();
        assert_eq!(p.source.as_deref(), Some("linter"));
        assert_eq!(p.pid as u32, std::process::id());
        assert_eq!(lines[1].policy, "audit-sink", "{text}");
        assert!(other.verify(std::process::id() as i32).is_err());
    }

    /// a38f: connections from a verified binary that never send (the
    /// agent's exec trick) do not hold up a real sender: served one at a
    /// time, eight of them kept it waiting 8 s, past its timeout.
    #[test]
    fn a_stalled_verified_connection_holds_up_no_other() {
        use nix::sys::socket::{UnixAddr, connect};
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("v.sock");
        let log_path = dir.path().join("audit.jsonl");
        let me = std::env::current_exe().unwrap();
        let l = bind_verified(&sock).unwrap();
        let log = LogFile::open(&log_path).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let known = Known::new([(me.as_path(), "linter")]);
        let line = format!("{OK}\n");
        std::thread::scope(|s| {
            s.spawn(|| serve_verified(&l, &known, &log, Duration::from_secs(1), &stop));
            let stalled: Vec<OwnedFd> = (0..8)
                .map(|_| {
                    let fd = sbx_core::audit::seqpacket().unwrap();
                    connect(fd.as_raw_fd(), &UnixAddr::new(&sock).unwrap()).unwrap();
                    fd
                })
                .collect();
            let t0 = Instant::now();
            let sent =
                sbx_core::audit::send_verified(&sock, line.as_bytes(), Duration::from_secs(3));
            let took = t0.elapsed();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            drop(stalled);
            sent.unwrap();
            assert!(took < Duration::from_secs(1), "waited {took:?}");
        });
        let text = std::fs::read_to_string(&log_path).unwrap();
        assert!(
            text.lines()
                .any(|l| l.contains("\"linter\"") && l.contains("block-no-verify")),
            "{text}"
        );
    }

    #[test]
    fn a_flood_is_bounded_and_counted() {
        let mut s = Sink::default();
        let t0 = Instant::now();
        let mut kept = 0;
        for _ in 0..10_000 {
            kept += s
                .handle(OK.as_bytes(), &dg(OK.len(), 1000), t0, SystemTime::now())
                .len();
        }
        assert_eq!(kept, BURST as usize);
        let f = s.flush();
        assert_eq!(f.len(), 1);
        assert!(
            f[0].reason
                .as_deref()
                .unwrap()
                .starts_with("9500 records dropped")
        );
        // Another uid keeps its own budget; refills with time.
        assert_eq!(
            s.handle(OK.as_bytes(), &dg(OK.len(), 0), t0, SystemTime::now())
                .len(),
            1
        );
        let later = t0 + Duration::from_secs(1);
        assert_eq!(
            s.handle(OK.as_bytes(), &dg(OK.len(), 1000), later, SystemTime::now())
                .len(),
            1
        );
        assert!(s.flush().is_empty());
    }

    #[test]
    fn transport_over_a_socketpair_carries_credentials() {
        let (a, b) = UnixDatagram::pair().unwrap();
        let mut t = UnixTransport::new(b, Duration::from_millis(200)).unwrap();
        a.send(OK.as_bytes()).unwrap();
        let mut buf = vec![0u8; MAX_RECORD + 1];
        let d = t.recv(&mut buf).unwrap().unwrap();
        assert_eq!(&buf[..d.len], OK.as_bytes());
        let p = d.peer.unwrap();
        assert_eq!(p.pid as u32, std::process::id());
        assert_eq!(p.uid, nix::unistd::geteuid().as_raw());
        a.send(&vec![b'x'; MAX_RECORD + 100]).unwrap();
        assert!(t.recv(&mut buf).unwrap().unwrap().truncated);
        assert_eq!(t.recv(&mut buf).unwrap(), None);
    }

    #[test]
    fn serve_appends_through_the_real_socket() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s/audit.sock");
        let log_path = dir.path().join("audit.jsonl");
        let mut t = UnixTransport::bind(&sock, Duration::from_millis(50)).unwrap();
        let log = LogFile::open(&log_path).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| serve(&mut t, &log, &stop));
            sbx_core::audit::send(&sock, format!("{OK}\n").as_bytes()).unwrap();
            sbx_core::audit::send(&sock, b"garbage").unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::fs::read_to_string(&log_path).unwrap().lines().count() < 2
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let text = std::fs::read_to_string(&log_path).unwrap();
        let lines: Vec<Entry> = text.lines().map(|l| Entry::parse(l).unwrap()).collect();
        assert_eq!(lines[0].tool, "linter");
        assert_eq!(lines[1].policy, "audit-sink");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&log_path).unwrap().permissions().mode() & 0o777,
            0o644
        );
    }
}
