//! The audit sink: the guest is the only writer of the sandbox's audit log.
//! Tools send one JSON record per datagram; the kernel attaches the
//! sender's pid/uid (SCM_CREDENTIALS, the datagram form of SO_PEERCRED), so
//! a record cannot claim another sender. Each record is parsed by the one
//! parser of the format, size-limited, re-stamped with the guest's clock,
//! and rate-limited per uid, so a flood is bounded and never silent: what
//! is refused or dropped is counted in a record of its own.

use std::collections::HashMap;
use std::io::{self, IoSliceMut, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::socket::{ControlMessageOwned, MsgFlags, UnixAddr, recvmsg, setsockopt, sockopt};
use sbx_core::audit::{Entry, MAX_RECORD, Outcome, Peer};

/// Tools whose records only root may send: the guest's own and the host's.
const ROOT_ONLY: &[&str] = &["sbx-guest", "sbx-run"];
/// Per uid: a burst of this many records, then `RATE` a second.
const BURST: f64 = 500.0;
const RATE: f64 = 200.0;

/// One received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
        let cap = buf.len();
        let mut cmsg = nix::cmsg_space!(nix::sys::socket::UnixCredentials);
        let mut iov = [IoSliceMut::new(buf)];
        let msg = match recvmsg::<UnixAddr>(
            std::os::fd::AsRawFd::as_raw_fd(&self.sock),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_TRUNC,
        ) {
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
}

/// Validate one message and stamp it: the sender's credentials and the
/// guest's clock replace whatever the sender claimed.
pub fn accept(bytes: &[u8], dg: &Datagram, now: SystemTime) -> Result<Entry, Reject> {
    if dg.truncated || bytes.len() > MAX_RECORD {
        return Err(Reject::TooLarge);
    }
    let peer = dg.peer.ok_or(Reject::NoCredentials)?;
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
    if peer.uid != 0 && ROOT_ONLY.contains(&e.tool.as_str()) {
        return Err(Reject::Forged(peer.uid, e.tool));
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
        let uid = dg.peer.map(|p| p.uid).unwrap_or(u32::MAX);
        let b = self.buckets.entry(uid).or_insert(Bucket {
            tokens: BURST,
            at: now,
            dropped: 0,
            rejected: 0,
            last: None,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * RATE).min(BURST);
        b.at = now;
        if b.tokens < 1.0 {
            b.dropped += 1;
            return Vec::new();
        }
        b.tokens -= 1.0;
        match accept(bytes, dg, wall) {
            Ok(e) => vec![e],
            Err(r) => {
                // One notice per rejection while within budget: the budget
                // bounds the notices too.
                b.rejected += 1;
                b.last = Some(r.clone());
                let pid = dg.peer.map(|p| p.pid).unwrap_or(0);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn dg(len: usize, uid: u32) -> Datagram {
        Datagram {
            len,
            truncated: false,
            peer: Some(Peer { pid: 42, uid }),
        }
    }

    const OK: &str = r#"{"timestamp":"1999-01-01T00:00:00Z","tool":"sbx-git-guard","agent":"claude","operation":"commit","target":"git commit -n","result":"blocked","policy":"block-no-verify"}"#;

    #[test]
    fn accepts_a_record_and_stamps_peer_and_time() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let e = accept(OK.as_bytes(), &dg(OK.len(), 1000), now).unwrap();
        assert_eq!(e.peer, Some(Peer { pid: 42, uid: 1000 }));
        assert_eq!(e.timestamp, "2027-01-15T08:00:00Z");
        assert_eq!(e.tool, "sbx-git-guard");
    }

    #[test]
    fn refuses_what_is_not_a_clean_record() {
        let forged_peer = OK.replace("}", r#","peer":{"pid":1,"uid":0}}"#);
        let as_guest = OK.replace("sbx-git-guard", "sbx-guest");
        let as_run = OK.replace("sbx-git-guard", "sbx-run");
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
        assert_eq!(lines[0].tool, "sbx-git-guard");
        assert_eq!(lines[1].policy, "audit-sink");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&log_path).unwrap().permissions().mode() & 0o777,
            0o644
        );
    }
}
