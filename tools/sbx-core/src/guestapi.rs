//! The host-to-guest API: frame format, message types and the
//! client, in one place that the guest's server and sbx-run's client both
//! use, so the two sides cannot disagree on the wire format.
//!
//! A frame is a 4-byte big-endian length, then one kind byte, then the
//! payload (length counts kind + payload). Control messages are JSON;
//! stdout/stderr/stdin and file data are raw bytes. The first frame each
//! way is a `Hello` carrying the protocol version; a mismatch is refused
//! with an `Error` frame naming both versions. Nothing here knows about
//! Docker: any `Read + Write` stream is a transport (a unix socket now,
//! vsock in a microVM later, a socketpair in tests).
//!
//! A connection carries one request, unless the client's hello asks for
//! `reuse` and the guest's hello grants it: then, after each request's last
//! frame (a reply, an error, a file's Eof, an exec's Exit followed by the
//! client's `Control::Done`), the next request may follow on the same
//! connection, without a new hello. Both fields default to false, so a
//! side that does not know them keeps one request per connection.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Bumped on any incompatible change of frames or messages.
pub const VERSION: u32 = 1;
/// The largest frame either side accepts (kind byte + payload).
pub const MAX_FRAME: usize = 1 << 20;
/// Data frames are sent in chunks of at most this size.
pub const CHUNK: usize = 256 * 1024;
/// The socket's name in the sandbox's host directory.
pub const SOCKET_NAME: &str = "guest.sock";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Hello = 1,
    Request = 2,
    Reply = 3,
    Stdin = 4,
    Stdout = 5,
    Stderr = 6,
    /// End of a stream: stdin closed (client), file data complete (both).
    Eof = 7,
    Exit = 8,
    Error = 9,
    /// Resize or signal a running exec (client to guest).
    Control = 10,
    Data = 11,
}

impl Kind {
    pub fn from_u8(b: u8) -> Option<Self> {
        use Kind::*;
        Some(match b {
            1 => Hello,
            2 => Request,
            3 => Reply,
            4 => Stdin,
            5 => Stdout,
            6 => Stderr,
            7 => Eof,
            8 => Exit,
            9 => Error,
            10 => Control,
            11 => Data,
            _ => return None,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("guest API: {0}")]
    Io(#[from] io::Error),
    #[error("guest API: frame of {0} bytes is over the limit of {MAX_FRAME}")]
    TooBig(usize),
    #[error("guest API: empty frame")]
    Empty,
    #[error("guest API: unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("guest API: connection closed mid-frame")]
    Truncated,
    #[error("guest API: bad {what} message: {err}")]
    Json { what: &'static str, err: String },
    #[error("guest API: expected a {expected:?} frame, got {got:?}")]
    Unexpected { expected: Kind, got: Kind },
    #[error(
        "guest API: protocol version mismatch: this side speaks {ours}, the other {theirs} (update sbx-run and the base image together)"
    )]
    Version { ours: u32, theirs: u32 },
    /// The other side's error frame.
    #[error("{}", .0.message)]
    Remote(ErrorMsg),
}

impl ProtoError {
    /// True when the stream ended cleanly between frames.
    pub fn is_closed(&self) -> bool {
        matches!(self, ProtoError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof)
    }
}

pub type Frame = (Kind, Vec<u8>);

/// Copy `input` to the guest as stdin frames on a thread of its own, then
/// the end of input. `w` is the request's stream, shared with the caller's
/// other frames (signals, resizes); a stream the command already closed
/// ends the copy.
pub fn forward_stdin<W: Write + Send + 'static>(
    mut input: impl Read + Send + 'static,
    w: std::sync::Arc<std::sync::Mutex<W>>,
) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match input.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let mut s = w.lock().unwrap_or_else(|e| e.into_inner());
                    if write_frame(&mut *s, Kind::Stdin, &buf[..n]).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let mut s = w.lock().unwrap_or_else(|e| e.into_inner());
        let _ = write_frame(&mut *s, Kind::Eof, &[]);
    });
}

/// Write one frame (a single write of header and payload for small frames).
pub fn write_frame(w: &mut impl Write, kind: Kind, payload: &[u8]) -> Result<(), ProtoError> {
    let len = payload.len() + 1;
    if len > MAX_FRAME {
        return Err(ProtoError::TooBig(len));
    }
    let mut head = [0u8; 5];
    head[..4].copy_from_slice(&(len as u32).to_be_bytes());
    head[4] = kind as u8;
    if payload.len() <= 4096 {
        let mut buf = Vec::with_capacity(5 + payload.len());
        buf.extend_from_slice(&head);
        buf.extend_from_slice(payload);
        w.write_all(&buf)?;
    } else {
        w.write_all(&head)?;
        w.write_all(payload)?;
    }
    Ok(())
}

pub fn write_json<T: Serialize>(w: &mut impl Write, kind: Kind, msg: &T) -> Result<(), ProtoError> {
    let v = serde_json::to_vec(msg).map_err(|e| ProtoError::Json {
        what: "outgoing",
        err: e.to_string(),
    })?;
    write_frame(w, kind, &v)
}

/// Read one frame. A clean end before the header is `Io(UnexpectedEof)`;
/// an end inside a frame is `Truncated`. The length is checked before
/// anything is allocated.
pub fn read_frame(r: &mut impl Read) -> Result<Frame, ProtoError> {
    let mut head = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(0) => return Err(ProtoError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = u32::from_be_bytes(head) as usize;
    if len == 0 {
        return Err(ProtoError::Empty);
    }
    if len > MAX_FRAME {
        return Err(ProtoError::TooBig(len));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => ProtoError::Truncated,
        _ => ProtoError::Io(e),
    })?;
    let kind = Kind::from_u8(buf[0]).ok_or(ProtoError::UnknownKind(buf[0]))?;
    buf.remove(0);
    Ok((kind, buf))
}

pub fn parse<T: for<'de> Deserialize<'de>>(
    what: &'static str,
    payload: &[u8],
) -> Result<T, ProtoError> {
    serde_json::from_slice(payload).map_err(|e| ProtoError::Json {
        what,
        err: e.to_string(),
    })
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub proto: String,
    pub version: u32,
    /// Client: more than one request on this connection, please. Guest:
    /// granted. Absent means false (and is left out when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reuse: bool,
}

impl Hello {
    pub fn ours() -> Self {
        Self {
            proto: "sbx-guest".into(),
            version: VERSION,
            reuse: false,
        }
    }

    pub fn reusable() -> Self {
        Self {
            reuse: true,
            ..Self::ours()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Winsize {
    pub rows: u16,
    pub cols: u16,
}

/// Who a request runs as inside the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum User {
    /// The agent's uid, no capabilities (the default).
    #[default]
    Agent,
    /// The guest's root, with the few capabilities it keeps.
    Root,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ExecReq {
    pub argv: Vec<String>,
    /// Set over the agent's environment (the container's, filtered).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub user: User,
    /// Run on a new pseudo-terminal of this size.
    #[serde(default)]
    pub tty: Option<Winsize>,
    /// Kill the process group after this many milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// End with the client: when its connection closes before the exec
    /// ended, SIGTERM to the process group, and the whole process tree
    /// SIGKILLed a few seconds later. Such an exec cannot be re-attached.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hangup: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum Request {
    Exec(ExecReq),
    /// Take over the streams of a running (or ended, unreported) exec.
    Attach {
        id: u64,
    },
    /// Send a signal to an exec's process group.
    Signal {
        id: u64,
        signal: i32,
    },
    Read {
        path: String,
        #[serde(default)]
        user: User,
    },
    /// Data frames and an Eof follow; the file is replaced atomically.
    Write {
        path: String,
        #[serde(default)]
        mode: Option<u32>,
        #[serde(default)]
        user: User,
    },
    Stat {
        path: String,
    },
    List {
        path: String,
        #[serde(default)]
        depth: u32,
    },
    Mkdir {
        path: String,
        #[serde(default)]
        mode: Option<u32>,
        #[serde(default)]
        user: User,
    },
    Remove {
        path: String,
        #[serde(default)]
        recursive: bool,
        #[serde(default)]
        user: User,
    },
    Rename {
        from: String,
        to: String,
        #[serde(default)]
        user: User,
    },
    Health,
    /// A whole tree (or one file) as `tree::Entry` frames, read by the
    /// guest itself beneath the roots, never following a link below the
    /// named path: what `sbx-run cp :PATH` takes out.
    Pack {
        path: String,
        #[serde(default)]
        user: User,
    },
    /// The reverse: `tree::Entry` frames (and file bytes) follow, which
    /// the guest creates inside the directory `path` as `user`, on the
    /// same rules; its answer comes after the sender's Eof.
    Unpack {
        path: String,
        #[serde(default)]
        user: User,
    },
    /// (st_dev, st_ino) of what is mounted at each absolute path, opened
    /// by the guest's root from `/` through no link (not even the last
    /// component): how the host checks what docker bound at each target.
    Identify {
        paths: Vec<String>,
    },
    /// The host has checked the sandbox's mounts: the guest, which holds
    /// the agent's processes (and refuses execs) until then when started
    /// with `HOLD_ENV`, starts them. Answered once they run.
    Release,
}

/// Where sbx-run binds a snapshot's own layers, one directory each
/// (`sbx-guest init --snapshot-layers N`), for the guest's start-time
/// cleanup, which detaches them before anything else runs.
pub const SNAPSHOT_LAYERS: &str = "/run/sbx-layers";

/// Set (to 1) on a sandbox by `sbx-run start`: its guest starts nothing of
/// the agent's until the host's `Release`.
pub const HOLD_ENV: &str = "SBX_GUEST_HOLD";

/// What the guest prints when it holds the agent for the host's check.
pub const HELD_LINE: &str = "sbx-guest: held";

/// The most paths one `Identify` takes.
pub const IDENTIFY_MAX: usize = 4096;

/// An object's identity: its device and inode numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ctl", rename_all = "lowercase", deny_unknown_fields)]
pub enum Control {
    Resize(Winsize),
    Signal {
        signal: i32,
    },
    /// After the Exit frame, on a reused connection: this exec's streams are
    /// over; the next frame is a request.
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatInfo {
    pub path: String,
    /// "file", "dir", "symlink" or "other".
    pub kind: String,
    pub size: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "lowercase")]
pub enum Reply {
    /// An exec started (or was attached): its id for attach and signal.
    Started {
        id: u64,
        pid: i32,
    },
    Stat(StatInfo),
    List {
        entries: Vec<StatInfo>,
    },
    /// The guest's status.json as it is.
    Health {
        status: serde_json::Value,
    },
    Ok,
    /// One item of a packed tree.
    Entry(crate::tree::Entry),
    /// An unpack's summary: what the guest refused, one line each.
    Unpacked {
        refused: Vec<String>,
    },
    /// An `Identify`'s answer, one per path in order: None when it is
    /// missing, reached only through a link, or not a mount point.
    Ids {
        ids: Vec<Option<FileId>>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitMsg {
    /// The shell's number: the code, 128+N for a signal, 124 after a
    /// timeout (as timeout(1)).
    pub status: i32,
    #[serde(default)]
    pub code: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
    #[serde(default)]
    pub timed_out: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorMsg {
    /// "version", "bad-request", "not-found", "denied", "escape", "spawn", "io", "busy".
    pub kind: String,
    pub message: String,
    /// For a spawn failure: 127 not found, 126 cannot run.
    #[serde(default)]
    pub status: Option<i32>,
}

impl ErrorMsg {
    pub fn new(kind: &str, message: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            message: message.into(),
            status: None,
        }
    }
}

/// What the API runs over: one bidirectional byte stream that can be
/// split between a reader and a writer thread. A unix socket today, a
/// vsock stream in a microVM, a socketpair in tests.
pub trait Transport: Read + Write + Send + Sized + 'static {
    fn try_clone(&self) -> io::Result<Self>;
    /// End both directions, waking a thread blocked reading.
    fn shutdown(&self);
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    /// A descriptor to poll for input, when the transport has one: the
    /// server then holds small frames back while more input is already
    /// waiting, and sends them with the next (one write, one wake-up).
    fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
}

impl Transport for std::os::unix::net::UnixStream {
    fn try_clone(&self) -> io::Result<Self> {
        std::os::unix::net::UnixStream::try_clone(self)
    }
    fn shutdown(&self) {
        let _ = std::os::unix::net::UnixStream::shutdown(self, std::net::Shutdown::Both);
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, t)
    }
    fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        Some(std::os::fd::AsFd::as_fd(self))
    }
}

/// Where a sandbox's socket is on the host, given its host directory.
pub fn socket_in(host_dir: &Path) -> std::path::PathBuf {
    host_dir.join(SOCKET_NAME)
}

/// One connection to the guest, after the version handshake.
#[derive(Debug)]
pub struct Client<S: Read + Write> {
    pub stream: S,
    /// The guest granted more than one request on this connection.
    pub reuse: bool,
}

impl<S: Read + Write> Client<S> {
    /// Send our hello, check theirs.
    pub fn handshake(stream: S) -> Result<Self, ProtoError> {
        Self::handshake_with(stream, &Hello::ours())
    }

    /// The same, asking to keep the connection for more requests; see
    /// `reuse` for whether the guest agreed.
    pub fn handshake_reusable(stream: S) -> Result<Self, ProtoError> {
        Self::handshake_with(stream, &Hello::reusable())
    }

    fn handshake_with(mut stream: S, hello: &Hello) -> Result<Self, ProtoError> {
        write_json(&mut stream, Kind::Hello, hello)?;
        Self::their_hello(stream)
    }

    /// Our hello and `req` in one write, then their hello: one round trip
    /// less than `handshake` + `send` (the guest reads the request after
    /// answering the hello; a version it refuses is still an error frame).
    pub fn open(mut stream: S, req: &Request) -> Result<Self, ProtoError> {
        let mut buf = Vec::with_capacity(256);
        write_json(&mut buf, Kind::Hello, &Hello::ours())?;
        write_json(&mut buf, Kind::Request, req)?;
        stream.write_all(&buf)?;
        Self::their_hello(stream)
    }

    /// After an exec's Exit on a reused connection: end its streams and
    /// send the next request, in one write.
    pub fn done_then(&mut self, next: Option<&Request>) -> Result<(), ProtoError> {
        let mut buf = Vec::with_capacity(256);
        write_json(&mut buf, Kind::Control, &Control::Done)?;
        if let Some(r) = next {
            write_json(&mut buf, Kind::Request, r)?;
        }
        self.stream.write_all(&buf)?;
        Ok(())
    }

    fn their_hello(mut stream: S) -> Result<Self, ProtoError> {
        let (k, p) = read_frame(&mut stream)?;
        match k {
            Kind::Hello => {
                let h: Hello = parse("hello", &p)?;
                if h.version != VERSION {
                    return Err(ProtoError::Version {
                        ours: VERSION,
                        theirs: h.version,
                    });
                }
                Ok(Self {
                    stream,
                    reuse: h.reuse,
                })
            }
            Kind::Error => Err(ProtoError::Remote(parse("error", &p)?)),
            got => Err(ProtoError::Unexpected {
                expected: Kind::Hello,
                got,
            }),
        }
    }

    pub fn send(&mut self, req: &Request) -> Result<(), ProtoError> {
        write_json(&mut self.stream, Kind::Request, req)
    }

    /// The next frame; an Error frame becomes `Remote`.
    pub fn frame(&mut self) -> Result<Frame, ProtoError> {
        let f = read_frame(&mut self.stream)?;
        if f.0 == Kind::Error {
            return Err(ProtoError::Remote(parse("error", &f.1)?));
        }
        Ok(f)
    }

    pub fn reply(&mut self) -> Result<Reply, ProtoError> {
        match self.frame()? {
            (Kind::Reply, p) => parse("reply", &p),
            (got, _) => Err(ProtoError::Unexpected {
                expected: Kind::Reply,
                got,
            }),
        }
    }

    /// A request answered by one reply (stat, list, mkdir, health …).
    pub fn call(&mut self, req: &Request) -> Result<Reply, ProtoError> {
        self.send(req)?;
        self.reply()
    }

    /// Read a whole file into `out`; returns its size.
    pub fn read_to(
        &mut self,
        path: &str,
        user: User,
        out: &mut impl Write,
    ) -> Result<u64, ProtoError> {
        self.send(&Request::Read {
            path: path.into(),
            user,
        })?;
        self.recv_file(out)
    }

    /// The answer to a read request already sent: the file's bytes.
    pub fn recv_file(&mut self, out: &mut impl Write) -> Result<u64, ProtoError> {
        self.reply()?;
        let mut n = 0u64;
        loop {
            match self.frame()? {
                (Kind::Data, d) => {
                    n += d.len() as u64;
                    out.write_all(&d)?;
                }
                (Kind::Eof, _) => return Ok(n),
                (got, _) => {
                    return Err(ProtoError::Unexpected {
                        expected: Kind::Data,
                        got,
                    });
                }
            }
        }
    }

    /// Replace a file with everything `input` yields.
    pub fn write_from(
        &mut self,
        path: &str,
        mode: Option<u32>,
        user: User,
        input: &mut impl Read,
    ) -> Result<u64, ProtoError> {
        self.send(&Request::Write {
            path: path.into(),
            mode,
            user,
        })?;
        let mut buf = vec![0u8; CHUNK];
        let mut n = 0u64;
        loop {
            let got = match input.read(&mut buf) {
                Ok(0) => break,
                Ok(g) => g,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            n += got as u64;
            write_frame(&mut self.stream, Kind::Data, &buf[..got])?;
        }
        write_frame(&mut self.stream, Kind::Eof, &[])?;
        self.reply()?;
        Ok(n)
    }
}

/// Connect to a unix socket whatever the length of its path: one longer
/// than sun_path (108 bytes; a branch sandbox's state directory, with its
/// branch in the container's name, passes it under a long home) is
/// reached through its directory's descriptor, /proc/self/fd/N/NAME.
pub fn unix_connect(socket: &Path) -> std::io::Result<std::os::unix::net::UnixStream> {
    use std::os::unix::ffi::OsStrExt;
    if socket.as_os_str().as_bytes().len() < 100 {
        return std::os::unix::net::UnixStream::connect(socket);
    }
    let (Some(dir), Some(name)) = (socket.parent(), socket.file_name()) else {
        return std::os::unix::net::UnixStream::connect(socket);
    };
    let d = std::fs::File::open(dir)?;
    let via = Path::new("/proc/self/fd")
        .join(std::os::fd::AsRawFd::as_raw_fd(&d).to_string())
        .join(name);
    std::os::unix::net::UnixStream::connect(via)
}

/// Connect to a guest's unix socket and shake hands.
pub fn connect(socket: &Path) -> Result<Client<std::os::unix::net::UnixStream>, ProtoError> {
    let s = unix_connect(socket)?;
    Client::handshake(s)
}

/// Connect asking for a connection that carries many requests (see
/// `Client::reuse` for the answer).
pub fn connect_reusable(
    socket: &Path,
) -> Result<Client<std::os::unix::net::UnixStream>, ProtoError> {
    Client::handshake_reusable(unix_connect(socket)?)
}

/// Connect and send `req` with the hello (see `Client::open`).
pub fn connect_send(
    socket: &Path,
    req: &Request,
) -> Result<Client<std::os::unix::net::UnixStream>, ProtoError> {
    Client::open(unix_connect(socket)?, req)
}

/// Connect, with a deadline for the handshake (a wedged guest must not
/// hang the host's command).
pub fn connect_timeout(
    socket: &Path,
    t: Duration,
) -> Result<Client<std::os::unix::net::UnixStream>, ProtoError> {
    let s = unix_connect(socket)?;
    s.set_read_timeout(Some(t))?;
    let c = Client::handshake(s)?;
    c.stream.set_read_timeout(None)?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket whose path is longer than sun_path is still reached.
    #[test]
    fn a_long_socket_path_connects() {
        use std::os::fd::AsRawFd;
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("d".repeat(60)).join("e".repeat(60));
        std::fs::create_dir_all(&dir).unwrap();
        let d = std::fs::File::open(&dir).unwrap();
        let short = format!("/proc/self/fd/{}/guest.sock", d.as_raw_fd());
        let l = std::os::unix::net::UnixListener::bind(short).unwrap();
        let long = dir.join("guest.sock");
        assert!(long.as_os_str().len() > 108);
        unix_connect(&long).unwrap();
        l.accept().unwrap();
    }

    #[test]
    fn frames_round_trip_and_limits_hold() {
        let mut buf = Vec::new();
        write_frame(&mut buf, Kind::Stdout, b"\0\xffbin").unwrap();
        write_json(&mut buf, Kind::Request, &Request::Health).unwrap();
        let mut r = &buf[..];
        assert_eq!(
            read_frame(&mut r).unwrap(),
            (Kind::Stdout, b"\0\xffbin".to_vec())
        );
        let (k, p) = read_frame(&mut r).unwrap();
        assert_eq!(k, Kind::Request);
        assert_eq!(parse::<Request>("r", &p).unwrap(), Request::Health);
        assert!(read_frame(&mut r).unwrap_err().is_closed());
        // Oversized, empty, unknown, truncated.
        let big = ((MAX_FRAME + 1) as u32).to_be_bytes();
        assert!(matches!(
            read_frame(&mut &big[..]),
            Err(ProtoError::TooBig(_))
        ));
        assert!(matches!(
            read_frame(&mut &[0u8, 0, 0, 0][..]),
            Err(ProtoError::Empty)
        ));
        assert!(matches!(
            read_frame(&mut &[0u8, 0, 0, 1, 99][..]),
            Err(ProtoError::UnknownKind(99))
        ));
        assert!(matches!(
            read_frame(&mut &[0u8, 0, 0, 9, 5, 1][..]),
            Err(ProtoError::Truncated)
        ));
        assert!(matches!(
            read_frame(&mut &[0u8, 0][..]),
            Err(ProtoError::Truncated)
        ));
        assert!(matches!(
            write_frame(&mut Vec::new(), Kind::Data, &vec![0; MAX_FRAME]),
            Err(ProtoError::TooBig(_))
        ));
    }

    #[test]
    fn reuse_is_absent_unless_asked_so_old_and_new_hellos_agree() {
        // What a guest or client before `reuse` sends and reads.
        let old = br#"{"proto":"sbx-guest","version":1}"#;
        assert_eq!(parse::<Hello>("h", old).unwrap(), Hello::ours());
        assert_eq!(serde_json::to_vec(&Hello::ours()).unwrap(), old.to_vec());
        let new = serde_json::to_vec(&Hello::reusable()).unwrap();
        assert!(parse::<Hello>("h", &new).unwrap().reuse);
        assert_eq!(
            parse::<Control>("c", br#"{"ctl":"done"}"#).unwrap(),
            Control::Done
        );
    }

    #[test]
    fn tree_entries_ride_in_replies() {
        use crate::tree::Entry;
        for e in [
            Entry::File {
                name: b"a\n".to_vec(),
                mode: 0o4755,
                size: 3,
                mtime: 1,
            },
            Entry::Up,
        ] {
            let v = serde_json::to_vec(&Reply::Entry(e.clone())).unwrap();
            assert_eq!(parse::<Reply>("r", &v).unwrap(), Reply::Entry(e));
        }
    }

    #[test]
    fn requests_reject_unknown_fields() {
        assert!(parse::<Request>("r", br#"{"op":"exec","argv":["true"]}"#).is_ok());
        assert!(parse::<Request>("r", br#"{"op":"exec","argv":["true"],"x":1}"#).is_err());
        assert!(parse::<Request>("r", br#"{"op":"launch"}"#).is_err());
    }
}
