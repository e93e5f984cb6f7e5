//! The audit log: one JSON object per line, appended with a single
//! `write(2)` on an `O_APPEND` descriptor so records from concurrent
//! processes never interleave. Kept apart from diagnostics on stderr.
//!
//! Inside a sandbox no tool opens the log: sbx-guest is its only writer,
//! and tools hand it one record per datagram on [`SANDBOX_SOCKET`]. When
//! that sink is down the record goes to stderr, marked, never nowhere.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// Inside a sandbox this marker exists and the log path is fixed, so the
/// agent cannot point `SBX_AUDIT_LOG` at /dev/null.
pub const SANDBOX_MARKER: &str = "/.agent-sandbox";
/// The sandbox's log, written only by sbx-guest (records reach it through
/// [`SANDBOX_SOCKET`]); readable by the host through its bind mount.
pub const SANDBOX_LOG: &str = "/run/sbx/host/audit.jsonl";
/// The guest's record sink: a datagram socket the agent may send to.
pub const SANDBOX_SOCKET: &str = "/run/sbx-audit/audit.sock";
/// The guest's sink for records whose sender it verifies (`SOCK_SEQPACKET`):
/// the checker's and the git guard's. See [`send_verified`].
pub const VERIFIED_SOCKET: &str = "/run/sbx-audit/verified.sock";
/// The sink's byte once it has verified the sender: only then may the
/// record follow (anything queued before it was sent before the check).
pub const CHALLENGE: u8 = b'?';
/// The sink's byte once the record is in the log.
pub const ACK: u8 = b'+';
/// Largest record the sink accepts, newline excluded.
pub const MAX_RECORD: usize = 8192;
/// What a tool prints on stderr before a record the sink did not take.
pub const UNDELIVERED: &str = "sbx-audit: record not delivered";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Allowed,
    Blocked,
    /// Let through by an explicit exception (e.g. `pass`), worth knowing.
    Passed,
}

/// One decision. Field order is the documented order of the audit format.
#[derive(Debug, Clone, Serialize)]
pub struct Record<'a> {
    pub timestamp: String,
    pub tool: &'a str,
    pub agent: String,
    pub operation: &'a str,
    pub target: &'a str,
    pub result: Outcome,
    pub policy: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
}

impl<'a> Record<'a> {
    pub fn new(
        tool: &'a str,
        operation: &'a str,
        target: &'a str,
        result: Outcome,
        policy: &'a str,
    ) -> Self {
        Self {
            timestamp: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            tool,
            agent: agent().to_owned(),
            operation,
            target,
            result,
            policy,
            reason: None,
        }
    }

    pub fn reason(mut self, reason: &'a str) -> Self {
        self.reason = Some(reason);
        self
    }

    /// The agent a broker acted for: its caller's `SBX_AGENT`, not the
    /// broker's own environment.
    pub fn agent(mut self, agent: &str) -> Self {
        agent.clone_into(&mut self.agent);
        self
    }

    /// The record as one line, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).expect("audit records always serialize");
        v.push(b'\n');
        v
    }
}

/// Who sent a record to the guest's sink, as the kernel reports it
/// (SCM_CREDENTIALS): the sender cannot choose these.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
    /// The tool whose root-owned binary the sender was running, checked by
    /// the guest through a pidfd; absent: the sender is not verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// A record as read back: the one parser of the format, used by the
/// guest's sink to validate what tools send and by `sbx-run log`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub timestamp: String,
    pub tool: String,
    pub agent: String,
    pub operation: String,
    pub target: String,
    pub result: Outcome,
    pub policy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Stamped by the guest; never accepted from a sender.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<Peer>,
    /// "sandbox" for records that came through a guest, set by `sbx-run log`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

impl Entry {
    pub fn parse(line: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(line)
    }

    /// The record as one line, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).expect("audit entries always serialize");
        v.push(b'\n');
        v
    }
}

/// The agent's name from `SBX_AGENT` (set by sbx-run), read once: a
/// lookup per record would scan a large environment again each time.
fn agent() -> &'static str {
    static AGENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    AGENT.get_or_init(|| std::env::var("SBX_AGENT").unwrap_or_else(|_| "unknown".into()))
}

/// Where records go: fixed inside a sandbox; else `$SBX_AUDIT_LOG`, else
/// `$XDG_STATE_HOME/sbx/audit.jsonl` (or `~/.local/state/sbx/audit.jsonl`).
pub fn default_path() -> PathBuf {
    if Path::new(SANDBOX_MARKER).exists() {
        return PathBuf::from(SANDBOX_LOG);
    }
    if let Some(p) = std::env::var_os("SBX_AUDIT_LOG").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    state.join("sbx/audit.jsonl")
}

/// Send one record line to the sink at `socket`: one datagram, bounded
/// wait, so a flooded or dead sink cannot hang the tool.
pub fn send(socket: &Path, line: &[u8]) -> io::Result<()> {
    let s = std::os::unix::net::UnixDatagram::unbound()?;
    s.set_write_timeout(Some(std::time::Duration::from_secs(1)))?;
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    let n = s.send_to(body, socket)?;
    if n != body.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short datagram"));
    }
    Ok(())
}

/// A unix `SOCK_SEQPACKET` socket, close-on-exec: the verifying sink's kind.
pub fn seqpacket() -> io::Result<std::os::fd::OwnedFd> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};
    Ok(socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?)
}

/// Bound every receive and send on `fd` by `timeout`.
pub fn set_timeouts(fd: &std::os::fd::OwnedFd, timeout: std::time::Duration) -> io::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt};
    let tv = nix::sys::time::TimeVal::new(timeout.as_secs() as _, timeout.subsec_micros() as _);
    setsockopt(fd, sockopt::ReceiveTimeout, &tv)?;
    setsockopt(fd, sockopt::SendTimeout, &tv)?;
    Ok(())
}

/// Hand one record to the verifying sink at `path` and wait until it is
/// in the log: connect, wait for [`CHALLENGE`] (the sink has checked which
/// binary this process runs), send, wait for [`ACK`]. Any error means the
/// record is not in the log.
pub fn send_verified(path: &Path, line: &[u8], timeout: std::time::Duration) -> io::Result<()> {
    use nix::sys::socket::{MsgFlags, UnixAddr, connect, recv, send};
    use std::os::fd::AsRawFd;
    let fd = seqpacket()?;
    set_timeouts(&fd, timeout)?;
    connect(fd.as_raw_fd(), &UnixAddr::new(path)?)?;
    let byte = |want: u8, what: &str| -> io::Result<()> {
        let mut b = [0u8; 1];
        match recv(fd.as_raw_fd(), &mut b, MsgFlags::empty()) {
            Ok(1) if b[0] == want => Ok(()),
            Ok(_) => Err(io::Error::other(format!("the sink refused the {what}"))),
            Err(nix::errno::Errno::EAGAIN) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no {what} from the sink"),
            )),
            Err(e) => Err(e.into()),
        }
    };
    byte(CHALLENGE, "sender")?;
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    if send(fd.as_raw_fd(), body, MsgFlags::MSG_NOSIGNAL)? != body.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short record"));
    }
    byte(ACK, "record")
}

/// How long a verified record may wait for the sink: past this the call it
/// records is refused (the hook's own timeout is 30 s).
pub const VERIFIED_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Append a record that must not be lost: inside a sandbox through the
/// verifying sink, which answers once it is written. False: not in the
/// log, already printed on stderr with the record; the caller refuses what
/// it was about to allow.
#[must_use]
pub fn append_verified(record: &Record<'_>) -> bool {
    let line = record.to_line();
    let sock = if Path::new(SANDBOX_MARKER).exists() {
        PathBuf::from(VERIFIED_SOCKET)
    } else if let Some(p) = std::env::var_os("SBX_AUDIT_VERIFIED_SOCKET").filter(|p| !p.is_empty())
    {
        PathBuf::from(p)
    } else {
        return LOG.append_file(record).is_ok();
    };
    send_verified(&sock, &line, VERIFIED_TIMEOUT)
        .map_err(|e| {
            eprintln!(
                "{}",
                undelivered_line(&format!("{}: {e}", sock.display()), &line)
            );
        })
        .is_ok()
}

/// Where this process's records go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sink {
    /// The guest's socket (inside a sandbox, or `$SBX_AUDIT_SOCKET` outside).
    Socket(PathBuf),
    File(PathBuf),
}

pub fn default_sink() -> Sink {
    if Path::new(SANDBOX_MARKER).exists() {
        return Sink::Socket(PathBuf::from(SANDBOX_SOCKET));
    }
    if let Some(p) = std::env::var_os("SBX_AUDIT_SOCKET").filter(|p| !p.is_empty()) {
        return Sink::Socket(PathBuf::from(p));
    }
    Sink::File(default_path())
}

/// The stderr line for a record the sink did not take.
pub fn undelivered_line(why: &str, line: &[u8]) -> String {
    format!(
        "{UNDELIVERED} ({why}): {}",
        String::from_utf8_lossy(line).trim_end()
    )
}

/// An open audit log.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    file: File,
}

impl AuditLog {
    pub fn open(path: &Path) -> io::Result<Self> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)?;
            }
        }
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
        Ok(Self {
            path: path.to_owned(),
            file,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one record with exactly one `write` call.
    pub fn append(&self, record: &Record<'_>) -> io::Result<()> {
        let line = record.to_line();
        let n = (&self.file).write(&line)?;
        if n != line.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write to the audit log ({n} of {} bytes)", line.len()),
            ));
        }
        Ok(())
    }
}

/// A process-wide log opened on first use; a failure to open or write is a
/// warning, reported once, and never blocks the decision being logged.
#[derive(Debug, Default)]
pub struct Lazy {
    inner: Mutex<Option<Result<AuditLog, ()>>>,
}

impl Lazy {
    pub const fn new() -> Self {
        Self {
            inner: Mutex::new(None),
        }
    }

    pub fn append(&self, record: &Record<'_>) {
        if let Sink::Socket(sock) = default_sink() {
            let line = record.to_line();
            if let Err(e) = send(&sock, &line) {
                eprintln!(
                    "{}",
                    undelivered_line(&format!("{}: {e}", sock.display()), &line)
                );
            }
            return;
        }
        let _ = self.append_file(record);
    }

    /// To the file (outside a sandbox); Err when it could not be written
    /// (warned once per failure).
    fn append_file(&self, record: &Record<'_>) -> Result<(), ()> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let slot = g.get_or_insert_with(|| {
            let path = default_path();
            AuditLog::open(&path).map_err(|e| {
                crate::output::warn(&format!(
                    "audit log {}: {e}; decisions are not being logged",
                    path.display()
                ));
            })
        });
        let Ok(log) = slot else { return Err(()) };
        log.append(record).map_err(|e| {
            crate::output::warn(&format!("audit log {}: {e}", log.path().display()));
        })
    }
}

pub static LOG: Lazy = Lazy::new();

/// Append to the process-wide log.
pub fn append(record: &Record<'_>) {
    LOG.append(record);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_shape_matches_the_design() {
        let mut r = Record::new(
            "sbx-git-guard",
            "commit",
            "git commit --no-verify",
            Outcome::Blocked,
            "block-no-verify",
        )
        .reason("--no-verify skips the pre-commit hook");
        r.timestamp = "2026-01-28T10:30:05Z".into();
        r.agent = "claude".into();
        let line = String::from_utf8(r.to_line()).unwrap();
        assert_eq!(
            line,
            "{\"timestamp\":\"2026-01-28T10:30:05Z\",\"tool\":\"sbx-git-guard\",\"agent\":\"claude\",\"operation\":\"commit\",\"target\":\"git commit --no-verify\",\"result\":\"blocked\",\"policy\":\"block-no-verify\",\"reason\":\"--no-verify skips the pre-commit hook\"}\n"
        );
    }

    #[test]
    fn entry_parses_what_record_writes_and_nothing_else() {
        let r = Record::new("sbx-fw", "allow", "a.example", Outcome::Allowed, "p").reason("r");
        let line = String::from_utf8(r.to_line()).unwrap();
        let e = Entry::parse(line.trim_end()).unwrap();
        assert_eq!(e.tool, "sbx-fw");
        assert_eq!(e.reason.as_deref(), Some("r"));
        assert_eq!(String::from_utf8(e.to_line()).unwrap(), line);
        for bad in [
            r#"{"timestamp":"t","tool":"x","agent":"a","operation":"o","target":"t","result":"maybe","policy":"p"}"#,
            r#"{"timestamp":"t","tool":"x","agent":"a","operation":"o","target":"t","result":"allowed","policy":"p","extra":1}"#,
            r#"{"tool":"x"}"#,
            "[]",
        ] {
            assert!(Entry::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn send_reaches_a_datagram_socket_and_fails_loudly_without_one() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("s");
        let rx = std::os::unix::net::UnixDatagram::bind(&p).unwrap();
        send(&p, b"{\"a\":1}\n").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"{\"a\":1}");
        drop(rx);
        assert!(send(&p, b"x\n").is_err());
        assert!(undelivered_line("down", b"{}\n").starts_with(UNDELIVERED));
    }

    #[test]
    fn appends_and_creates_parent() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("a/b/audit.jsonl");
        let log = AuditLog::open(&p).unwrap();
        log.append(&Record::new("t", "op", "x", Outcome::Allowed, "p"))
            .unwrap();
        log.append(&Record::new("t", "op", "y", Outcome::Blocked, "p"))
            .unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 2);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
