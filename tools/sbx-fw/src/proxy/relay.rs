//! Moving the bytes of an accepted connection: splice(2) through a pipe
//! per direction (the bytes stay in the kernel), with an idle limit.

use std::cell::{Cell, RefCell};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;

/// A pipe grows to this once a transfer half fills its default 64 KiB: fewer,
/// larger splices for bulk transfers, while the many small connections
/// keep small pipes (the kernel caps a user's pipe memory).
const BIG_PIPE: usize = 1024 * 1024;
const SMALL_PIPE: usize = 64 * 1024;
/// Empty default-size pipes kept for the next connections, a thread's.
const POOL: usize = 64;

thread_local! {
    static PIPES: RefCell<Vec<(OwnedFd, OwnedFd)>> = const { RefCell::new(Vec::new()) };
}

/// A pipe a direction, back to the thread's pool when dropped empty and
/// small: whichever way the connection ends (a reset, the other half's
/// error, the idle limit), the next connection skips pipe2 and two closes.
struct Pipe {
    fds: Option<(OwnedFd, OwnedFd)>,
    size: Cell<usize>,
    /// Bytes spliced in and not yet out.
    held: Cell<usize>,
}

impl Pipe {
    fn get() -> std::io::Result<Self> {
        let fds = match PIPES.with_borrow_mut(Vec::pop) {
            Some(fds) => fds,
            None => nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?,
        };
        Ok(Self {
            fds: Some(fds),
            size: Cell::new(SMALL_PIPE),
            held: Cell::new(0),
        })
    }

    fn fds(&self) -> std::io::Result<&(OwnedFd, OwnedFd)> {
        self.fds
            .as_ref()
            .ok_or_else(|| std::io::Error::other("pipe already returned"))
    }

    fn grow(&self) {
        let want = i32::try_from(BIG_PIPE).unwrap_or(i32::MAX);
        if let Some((_, w)) = &self.fds
            && let Ok(n) = fcntl(w, FcntlArg::F_SETPIPE_SZ(want))
        {
            self.size.set(usize::try_from(n).unwrap_or(SMALL_PIPE));
        }
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        if self.held.get() == 0
            && self.size.get() == SMALL_PIPE
            && let Some(fds) = self.fds.take()
        {
            PIPES.with_borrow_mut(|pool| {
                if pool.len() < POOL {
                    pool.push(fds);
                }
            });
        }
    }
}

/// When a connection last moved a byte, for the idle limit.
pub struct Activity {
    base: Instant,
    last_ms: AtomicU64,
    /// A [`pump`] has ended (and half closed its far side): the one that
    /// ends last leaves the FIN to the close that follows, one system
    /// call fewer.
    ended: AtomicBool,
}

impl Activity {
    pub fn new() -> Self {
        Self {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
            ended: AtomicBool::new(false),
        }
    }

    /// The far end's FIN is not passed on: the caller still writes to
    /// the client after the server's last byte.
    pub fn keep_open(&self) {
        self.ended.store(true, Ordering::Release);
    }

    pub fn touch(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Returns once nothing has moved for `limit`.
    pub async fn idle(&self, limit: Duration) {
        loop {
            let last = self.base + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let end = last + limit;
            if Instant::now() >= end {
                return;
            }
            tokio::time::sleep_until(end.into()).await;
        }
    }
}

/// A clean refusal: RST now, not a hang and not a half-open socket.
pub fn reset(c: TcpStream) {
    let _ = c.set_zero_linger();
    drop(c);
}

/// `first` to the upstream, then both directions spliced until both end
/// or nothing moves for `idle`; a failure or the idle limit resets both.
/// (The client's socket has TCP_NODELAY from the listener.)
pub async fn tunnel(c: TcpStream, u: TcpStream, first: &[u8], idle: Duration) {
    let mut u = u;
    if u.write_all(first).await.is_err() {
        return reset(c);
    }
    let act = Activity::new();
    let ok = tokio::select! {
        r = async { tokio::try_join!(pump(&c, &u, &act), pump(&u, &c, &act)) } => r.is_ok(),
        () = act.idle(idle) => false,
    };
    if !ok {
        // Whatever was not spliced cannot be, in user space either.
        let _ = u.set_zero_linger();
        reset(c);
    }
}

/// `from` to `to` until `from` ends, through a pipe with splice(2). Its
/// end is passed on as a half close.
///
/// Only with both pumps in one task (the tunnel, which closes both sockets
/// once both end) may the last one skip the half close; the plain relay's
/// upstream half is no pump, so there this one always half closes.
pub async fn pump(from: &TcpStream, to: &TcpStream, act: &Activity) -> std::io::Result<()> {
    // The first piece (a ServerHello flight, a client's Finished) is
    // copied: for a few hundred bytes recv and send cost less than a
    // splice pair, and a connection that ends after it takes no pipe.
    let first = copy_first(from, to).await?;
    act.touch();
    if first == 0 {
        end(to, act);
        return Ok(());
    }
    let pipe = Pipe::get()?;
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    loop {
        // The pipe is empty here, so EAGAIN means the socket has nothing.
        let want = pipe.size.get();
        let (r, w) = pipe.fds()?;
        let n = from
            .async_io(Interest::READABLE, || {
                splice(from, None, w, None, want, flags).map_err(std::io::Error::from)
            })
            .await?;
        if n == 0 {
            end(to, act);
            return Ok(());
        }
        pipe.held.set(n);
        act.touch();
        while pipe.held.get() > 0 {
            // No SPLICE_F_MORE: it corks, and the last piece of an answer
            // would wait for the cork timer.
            let left = pipe.held.get();
            let k = to
                .async_io(Interest::WRITABLE, || {
                    splice(r, None, to, None, left, flags).map_err(std::io::Error::from)
                })
                .await?;
            pipe.held.set(left - k);
            act.touch();
        }
        // Half a pipe in one go (the slots hold pieces of pages): a bulk
        // transfer, worth a bigger pipe.
        if n >= want / 2 && pipe.size.get() < BIG_PIPE {
            pipe.grow();
        }
    }
}

/// `from` ended: half close `to`, unless the other pump ended first.
fn end(to: &TcpStream, act: &Activity) {
    if !act.ended.swap(true, Ordering::AcqRel) {
        let _ = nix::sys::socket::shutdown(to.as_raw_fd(), nix::sys::socket::Shutdown::Write);
    }
}

/// The size of the copied first piece; a fuller read goes on by splice.
const FIRST: usize = 16 * 1024;

thread_local! {
    static FIRST_BUF: RefCell<Vec<u8>> = RefCell::new(vec![0; FIRST]);
}

/// Copy one read's worth from `from` to `to` through the thread's
/// buffer: the bytes read (0: `from` ended). What `to` does not take at
/// once (rare: its buffer is empty this early) is written from a copy.
async fn copy_first(from: &TcpStream, to: &TcpStream) -> std::io::Result<usize> {
    use std::io::ErrorKind::WouldBlock;
    // Readiness first: a fresh upstream has none, so this waits without
    // a read that could only fail with EAGAIN.
    let (n, rest) = loop {
        from.readable().await?;
        let r = FIRST_BUF.with_borrow_mut(|b| -> std::io::Result<(usize, Vec<u8>)> {
            let n = from.try_read(b)?;
            let mut w = 0;
            while w < n {
                match to.try_write(&b[w..n]) {
                    Ok(k) => w += k,
                    Err(e) if e.kind() == WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            Ok((n, b[w..n].to_vec()))
        });
        match r {
            Err(e) if e.kind() == WouldBlock => {}
            Err(e) => return Err(e),
            Ok(v) => break v,
        }
    };
    let mut off = 0;
    while off < rest.len() {
        to.writable().await?;
        match to.try_write(&rest[off..]) {
            Ok(k) => off += k,
            Err(e) if e.kind() == WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
