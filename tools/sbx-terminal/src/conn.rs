//! The accept loop of both web servers (sbx-server and `sbx-run
//! terminal`). axum::serve sets no header-read timeout (hyper needs a
//! timer for one) and takes every connection, so a client that opened
//! connections and sent half a request line, or nothing, held a file
//! descriptor each for good until the server could accept no one. Here
//! a request head has [`HEADER_TIMEOUT`] to arrive (idle keep-alive
//! connections included), and at most `max` connections are open at once,
//! at most `per_address` of them from one peer address (an IPv6 peer's
//! /64: one host is given a whole /64): one over is closed as soon as it
//! is accepted, so one address reconnecting without end cannot hold every
//! slot. The address is the TCP peer's: behind a reverse proxy every
//! client shares the proxy's. A write that makes no
//! progress for [`WRITE_STALL`] fails the connection: a client that
//! pipelined requests and never read the answers held its connection
//! (and its slot) for good once the socket's buffers were full, the head
//! timeout being for reads only.
//!
//! `sbx-run terminal` also asks, per connection, who may connect at all
//! ([`Limits::admit`]: the peer's uid on this machine), and answers one
//! over a cap with a line saying so rather than a bare close.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

/// How long a client may take to send a request's head (the request
/// line and headers), and how long a kept-alive connection may idle.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a write may wait for the client to take any bytes (the
/// answer to a request, a WebSocket's output) before the connection is
/// closed.
pub const WRITE_STALL: Duration = Duration::from_secs(30);

/// A stream whose writes fail with `TimedOut` after [`WRITE_STALL`]
/// without progress. Reads are the head timeout's (and, after an
/// upgrade, the WebSocket's own).
struct Stall<T> {
    io: T,
    since: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> Stall<T> {
    fn new(io: T) -> Self {
        Self { io, since: None }
    }

    /// `r`, a write's poll: progress disarms the timer, pending arms it.
    fn judge<R>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        if r.is_ready() {
            self.since = None;
            return r;
        }
        let t = self
            .since
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(WRITE_STALL)));
        match t.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client took no bytes for {} s", WRITE_STALL.as_secs()),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Stall<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Stall<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.judge(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.judge(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.judge(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_shutdown(cx);
        self.judge(cx, r)
    }
}

/// What one peer is counted as: its IPv4 address (an IPv4-mapped IPv6
/// one included), or its IPv6 /64.
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

/// Connections open per peer, each at most `max`.
struct PerPeer {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's count against its peer, given back on drop.
struct PeerSlot {
    peers: Arc<PerPeer>,
    key: IpAddr,
}

impl PerPeer {
    fn take(self: &Arc<Self>, ip: IpAddr) -> Option<PeerSlot> {
        let key = peer_key(ip);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(key).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            peers: Arc::clone(self),
            key,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            // The map holds only peers with a connection open.
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// Who may connect: given (our address, the peer's), Ok or why not.
pub type Admit = Arc<dyn Fn(SocketAddr, SocketAddr) -> Result<(), String> + Send + Sync>;

/// What the accept loop allows.
#[derive(Clone)]
pub struct Limits {
    /// Connections open at once.
    pub max: usize,
    /// Connections open at once from one peer address (an IPv6 /64).
    pub per_address: usize,
    /// Past a cap, answer 503 with this line before closing; None closes
    /// at once (a flood gets no bytes).
    pub refusal: Option<String>,
    /// Asked before a connection is served; its Err is answered 403.
    pub admit: Option<Admit>,
}

impl std::fmt::Debug for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limits")
            .field("max", &self.max)
            .field("per_address", &self.per_address)
            .field("refusal", &self.refusal)
            .field("admit", &self.admit.is_some())
            .finish()
    }
}

/// An HTTP answer of `status` with the line `msg`, closing.
fn answer(status: &str, msg: &str) -> String {
    let body = format!("{msg}\n");
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Answer `status` with `msg` on a connection over a cap, and close it,
/// from the accept loop: without waiting (a full send buffer loses the
/// answer, not the loop), after taking what the client already sent
/// (unread bytes turn the close into a reset).
fn refuse_now(stream: TcpStream, status: &str, msg: &str) {
    use std::io::{Read, Write};
    // Out of tokio (whose readiness a new socket does not have yet):
    // plain non-blocking calls.
    let Ok(mut stream) = stream.into_std() else {
        return;
    };
    let mut sink = [0u8; 4096];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
    let _ = stream.write(answer(status, msg).as_bytes());
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// The same from a connection's own task (it holds its slot): the
/// request is read and dropped until the client closes, for at most
/// [`HEADER_TIMEOUT`], so the answer is not lost to a reset.
async fn refuse(mut stream: TcpStream, status: &str, msg: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let text = answer(status, msg);
    let _ = tokio::time::timeout(HEADER_TIMEOUT, async {
        stream.write_all(text.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut left = 64 * 1024;
        while left > 0 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => left -= n.min(left),
            }
        }
        Ok::<_, io::Error>(())
    })
    .await;
}

/// Serve `router` on `listener` until `shutdown`, then let the open
/// connections finish their requests.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let max = limits.max;
    let open = Arc::new(Semaphore::new(max));
    let peers = Arc::new(PerPeer {
        max: limits.per_address,
        open: Mutex::new(HashMap::new()),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, addr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                // Out of descriptors, or a connection reset before it was
                // accepted: wait, do not spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // The peer's slot first: a peer at its cap takes none of the others'.
        let taken = peers
            .take(addr.ip())
            .and_then(|slot| Some((slot, Arc::clone(&open).try_acquire_owned().ok()?)));
        let Some((slot, permit)) = taken else {
            if let Some(msg) = &limits.refusal {
                refuse_now(stream, "503 Service Unavailable", msg);
            }
            continue;
        };
        let admit = limits.admit.clone();
        let router = router.clone();
        let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(addr));
            let mut r = router.clone();
            async move {
                let resp: Result<axum::response::Response, Infallible> =
                    tower_service::Service::call(&mut r, req.map(axum::body::Body::new)).await;
                resp
            }
        });
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let _permit = (permit, slot);
            if let Some(admit) = admit {
                let ours = stream.local_addr();
                let why = match ours {
                    Ok(ours) => admit(ours, addr),
                    Err(e) => Err(format!("the connection's address: {e}")),
                };
                if let Err(why) = why {
                    refuse(stream, "403 Forbidden", &why).await;
                    return;
                }
            }
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            let conn = b
                .serve_connection(TokioIo::new(Stall::new(stream)), svc)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = stop.wait_for(|s| *s) => {}
            }
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        });
    }
    let _ = stop_tx.send(true);
    // Every permit back: every connection has ended.
    let _ = open
        .acquire_many(u32::try_from(max).unwrap_or(u32::MAX))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_counted_by_address_and_ipv6_by_64() {
        let p = Arc::new(PerPeer {
            max: 2,
            open: Mutex::new(HashMap::new()),
        });
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let a = [p.take(ip("10.0.0.1")), p.take(ip("::ffff:10.0.0.1"))];
        assert!(a.iter().all(Option::is_some));
        assert!(p.take(ip("10.0.0.1")).is_none(), "over the cap");
        assert!(p.take(ip("10.0.0.2")).is_some(), "another address");
        let b = [p.take(ip("2001:db8::1")), p.take(ip("2001:db8::2"))];
        assert!(b.iter().all(Option::is_some));
        assert!(p.take(ip("2001:db8::ffff")).is_none(), "the same /64");
        assert!(p.take(ip("2001:db8:0:1::1")).is_some(), "another /64");
        drop(a);
        assert!(p.take(ip("10.0.0.1")).is_some(), "slots come back");
        assert_eq!(p.open.lock().unwrap().get(&ip("10.0.0.1")), None);
    }
}
