//! The broker's wire format. Length-prefixed frames (u32 LE), a magic and
//! a version in the request, raw bytes (argv and environment are not
//! always UTF-8), hard size limits checked before anything is allocated.
//!
//! client -> broker: one request frame with exactly four fds attached
//!   (stdin, stdout, stderr, an O_PATH fd of the cwd; a hook request a
//!   fifth, its hooks directory); later, zero or more
//!   `K`+i32 frames (relay this signal).
//! broker -> client: one `E`+i32 (exit code), `S`+i32 (killed by signal)
//!   or `X`+text (the broker could not run the request) frame, then EOF.
//!
//! Nothing in a request says who the caller is: the broker takes that
//! from SO_PEERCRED.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::UnixStream;

use sbx_sys::privsep::{self, PeerCred};

pub const MAGIC: &[u8; 4] = b"SBXG";
pub const VERSION: u8 = 1;
/// A request larger than this is refused unread (Linux's ARG_MAX for argv
/// plus environment is 2 MiB with the default 8 MiB stack).
pub const MAX_REQUEST: usize = 4 << 20;
/// Every frame but the request is a tag and at most a short message.
pub const MAX_SMALL: usize = 4096;
const MAX_ITEMS: u32 = 1 << 20;
/// stdin, stdout, stderr, cwd.
pub const FDS: usize = 4;
/// A hook request's: those and the hooks directory (O_PATH).
pub const HOOK_FDS: usize = 5;

/// What a connection carries: a stream socket today, a vsock or the
/// guest's channel later. The peer's credentials come from the transport.
pub trait Transport {
    fn send(&self, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<usize>;
    fn recv(&self, buf: &mut [u8], max_fds: usize) -> io::Result<(usize, Vec<OwnedFd>)>;
    fn peer(&self) -> io::Result<PeerCred>;
    fn poll_fd(&self) -> BorrowedFd<'_>;
    fn set_read_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()>;
}

impl Transport for UnixStream {
    fn send(&self, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<usize> {
        privsep::send_with_fds(self.as_fd(), data, fds)
    }
    fn recv(&self, buf: &mut [u8], max_fds: usize) -> io::Result<(usize, Vec<OwnedFd>)> {
        privsep::recv_with_fds(self.as_fd(), buf, max_fds)
    }
    fn peer(&self) -> io::Result<PeerCred> {
        privsep::peer_cred(self.as_fd())
    }
    fn poll_fd(&self) -> BorrowedFd<'_> {
        self.as_fd()
    }
    fn set_read_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, t)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("connection: {0}")]
    Io(#[from] io::Error),
    #[error("the connection closed mid-frame")]
    Truncated,
    #[error("frame of {0} bytes is over the limit of {1}")]
    TooLarge(usize, usize),
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    #[error("expected {FDS} file descriptors with the request ({HOOK_FDS} for a hook), got {0}")]
    Fds(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `git ARGS`: decided by the guard's policy.
    Git = 0,
    /// git-receive-pack and friends (argv[0] names which).
    PassThrough = 1,
    /// A repository hook, asked for by a guard hook step (a process git
    /// started): `args` are the hook's file name in the directory passed
    /// as the fifth fd, then its arguments. Run as the step's uid and
    /// group in a Landlock domain of its own, beside git's, not below it.
    Hook = 2,
    /// Stash and notes commit ids a guard hook step saw made (`args`, one
    /// id each, 40 or 64 hex digits), appended as root to the sandbox-wide
    /// record the steps of every repository read. Only from git's own
    /// processes; nothing runs.
    Record = 3,
    /// Commit ids a guard reference-transaction step approved (pre-commit
    /// ran on the call's private index, the message is the one commit-msg
    /// passed), appended as root to the ledger. Only from git's own
    /// processes in a call with a live private index; nothing runs.
    Ledger = 4,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub kind: Kind,
    pub umask: u32,
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Exited(i32),
    Signaled(i32),
    Error(String),
}

fn put(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(4096);
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(MAGIC);
        b.push(VERSION);
        b.push(self.kind as u8);
        b.extend_from_slice(&self.umask.to_le_bytes());
        b.extend_from_slice(&(self.args.len() as u32).to_le_bytes());
        for a in &self.args {
            put(&mut b, a.as_bytes());
        }
        b.extend_from_slice(&(self.env.len() as u32).to_le_bytes());
        for (k, v) in &self.env {
            put(&mut b, k.as_bytes());
            put(&mut b, v.as_bytes());
        }
        let len = (b.len() - 4) as u32;
        b[..4].copy_from_slice(&len.to_le_bytes());
        b
    }

    pub fn decode(body: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader(body);
        if r.take(4)? != MAGIC {
            return Err(ProtoError::Malformed("not an sbx-git-guard request"));
        }
        if r.u8()? != VERSION {
            return Err(ProtoError::Malformed("unsupported protocol version"));
        }
        let kind = match r.u8()? {
            0 => Kind::Git,
            1 => Kind::PassThrough,
            2 => Kind::Hook,
            3 => Kind::Record,
            4 => Kind::Ledger,
            _ => return Err(ProtoError::Malformed("unknown request kind")),
        };
        let umask = r.u32()?;
        let n = r.count()?;
        let mut args = Vec::new();
        for _ in 0..n {
            args.push(r.string()?);
        }
        let n = r.count()?;
        let mut env = Vec::new();
        for _ in 0..n {
            let k = r.string()?;
            let v = r.string()?;
            if k.is_empty() || k.as_bytes().contains(&b'=') {
                return Err(ProtoError::Malformed(
                    "an environment name is empty or has '='",
                ));
            }
            env.push((k, v));
        }
        if !r.0.is_empty() {
            return Err(ProtoError::Malformed("trailing bytes"));
        }
        if umask > 0o777 {
            return Err(ProtoError::Malformed("umask out of range"));
        }
        Ok(Request {
            kind,
            umask,
            args,
            env,
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if self.0.len() < n {
            return Err(ProtoError::Malformed(
                "a field runs past the end of the frame",
            ));
        }
        let (h, t) = self.0.split_at(n);
        self.0 = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, ProtoError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn count(&mut self) -> Result<u32, ProtoError> {
        let n = self.u32()?;
        // Each item takes at least its 4-byte length: a count the rest of
        // the frame cannot hold is a lie, refused before any allocation.
        if n > MAX_ITEMS || n as usize > self.0.len() / 4 {
            return Err(ProtoError::Malformed("item count larger than the frame"));
        }
        Ok(n)
    }
    fn string(&mut self) -> Result<OsString, ProtoError> {
        let n = self.u32()? as usize;
        let b = self.take(n)?;
        if b.contains(&0) {
            return Err(ProtoError::Malformed("a string contains a NUL byte"));
        }
        Ok(OsString::from_vec(b.to_vec()))
    }
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        let (tag, body): (u8, Vec<u8>) = match self {
            Reply::Exited(c) => (b'E', c.to_le_bytes().to_vec()),
            Reply::Signaled(s) => (b'S', s.to_le_bytes().to_vec()),
            Reply::Error(m) => {
                let mut m = m.as_bytes().to_vec();
                m.truncate(MAX_SMALL - 1);
                (b'X', m)
            }
        };
        small_frame(tag, &body)
    }

    fn decode(body: &[u8]) -> Result<Self, ProtoError> {
        let (tag, rest) = body
            .split_first()
            .ok_or(ProtoError::Malformed("empty reply"))?;
        match tag {
            b'E' => Ok(Reply::Exited(i32_of(rest)?)),
            b'S' => Ok(Reply::Signaled(i32_of(rest)?)),
            b'X' => Ok(Reply::Error(String::from_utf8_lossy(rest).into_owned())),
            _ => Err(ProtoError::Malformed("unknown reply")),
        }
    }
}

fn small_frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut b = ((body.len() + 1) as u32).to_le_bytes().to_vec();
    b.push(tag);
    b.extend_from_slice(body);
    b
}

fn i32_of(b: &[u8]) -> Result<i32, ProtoError> {
    let a: [u8; 4] = b
        .try_into()
        .map_err(|_| ProtoError::Malformed("bad integer field"))?;
    Ok(i32::from_le_bytes(a))
}

pub fn signal_frame(sig: i32) -> Vec<u8> {
    small_frame(b'K', &sig.to_le_bytes())
}

/// Fill `buf` completely, collecting passed fds (at most `max_fds` in
/// all). `Ok(false)` on a clean EOF before the first byte.
fn recv_exact<T: Transport + ?Sized>(
    t: &T,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
    max_fds: usize,
) -> Result<bool, ProtoError> {
    let mut got = 0;
    while got < buf.len() {
        let (n, more) = t.recv(&mut buf[got..], max_fds - fds.len())?;
        fds.extend(more);
        if n == 0 {
            return if got == 0 {
                Ok(false)
            } else {
                Err(ProtoError::Truncated)
            };
        }
        got += n;
    }
    Ok(true)
}

/// One frame's body, or None on EOF at a frame boundary.
fn read_frame<T: Transport + ?Sized>(
    t: &T,
    limit: usize,
    fds: &mut Vec<OwnedFd>,
    max_fds: usize,
) -> Result<Option<Vec<u8>>, ProtoError> {
    let mut len = [0u8; 4];
    if !recv_exact(t, &mut len, fds, max_fds)? {
        return Ok(None);
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > limit {
        return Err(ProtoError::TooLarge(len, limit));
    }
    let mut body = vec![0u8; len];
    if !recv_exact(t, &mut body, fds, max_fds)? && len > 0 {
        return Err(ProtoError::Truncated);
    }
    Ok(Some(body))
}

fn send_all<T: Transport + ?Sized>(
    t: &T,
    mut data: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    let mut fds = fds;
    while !data.is_empty() {
        let n = t.send(data, fds)?;
        fds = &[];
        data = &data[n..];
    }
    Ok(())
}

pub fn send_request<T: Transport + ?Sized>(
    t: &T,
    req: &Request,
    fds: [BorrowedFd<'_>; FDS],
) -> io::Result<()> {
    send_all(t, &req.encode(), &fds)
}

/// A hook request: the four fds, then the hooks directory.
pub fn send_hook_request<T: Transport + ?Sized>(
    t: &T,
    req: &Request,
    fds: [BorrowedFd<'_>; HOOK_FDS],
) -> io::Result<()> {
    send_all(t, &req.encode(), &fds)
}

/// The request and its fds (in order: stdin, stdout, stderr, cwd, and for
/// a hook its directory).
pub fn read_request<T: Transport + ?Sized>(t: &T) -> Result<(Request, Vec<OwnedFd>), ProtoError> {
    let mut fds = Vec::new();
    let body = read_frame(t, MAX_REQUEST, &mut fds, HOOK_FDS)?.ok_or(ProtoError::Truncated)?;
    if fds.len() != FDS && fds.len() != HOOK_FDS {
        return Err(ProtoError::Fds(fds.len()));
    }
    let req = Request::decode(&body)?;
    let want = if req.kind == Kind::Hook {
        HOOK_FDS
    } else {
        FDS
    };
    if fds.len() != want {
        return Err(ProtoError::Fds(fds.len()));
    }
    Ok((req, fds))
}

pub fn send_reply<T: Transport + ?Sized>(t: &T, r: &Reply) -> io::Result<()> {
    send_all(t, &r.encode(), &[])
}

/// The broker's answer, or None when it hung up without one.
pub fn read_reply<T: Transport + ?Sized>(t: &T) -> Result<Option<Reply>, ProtoError> {
    match read_frame(t, MAX_SMALL, &mut Vec::new(), 0)? {
        None => Ok(None),
        Some(b) => Reply::decode(&b).map(Some),
    }
}

pub fn send_signal<T: Transport + ?Sized>(t: &T, sig: i32) -> io::Result<()> {
    send_all(t, &signal_frame(sig), &[])
}

/// A relayed signal number, or None on EOF (the client is gone).
pub fn read_signal<T: Transport + ?Sized>(t: &T) -> Result<Option<i32>, ProtoError> {
    match read_frame(t, MAX_SMALL, &mut Vec::new(), 0)? {
        None => Ok(None),
        Some(b) => match b.split_first() {
            Some((b'K', rest)) => i32_of(rest).map(Some),
            _ => Err(ProtoError::Malformed("expected a signal frame")),
        },
    }
}
