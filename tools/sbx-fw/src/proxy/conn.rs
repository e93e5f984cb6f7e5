//! One accepted connection: its name read and judged, then relayed or reset.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Arc;
use std::time::Duration;

use std::os::fd::{AsFd, AsRawFd};

use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use super::http::{self, Head, Request};
use super::policy::Refusal;
use super::relay::{reset, tunnel};
use super::rules::Ruled;
use super::shared::{Shared, lookup};
use super::{CONNECT_PORT, HELLO_TIMEOUT, Limits, sni};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The address the client dialled before the redirect.
fn original_dst(c: &TcpStream, v6: bool) -> Option<SocketAddr> {
    use nix::sys::socket::{getsockopt, sockopt};
    if v6 {
        let sa = getsockopt(c, sockopt::Ip6tOriginalDst).ok()?;
        Some(SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(sa.sin6_addr.s6_addr),
            u16::from_be(sa.sin6_port),
            0,
            0,
        )))
    } else {
        let sa = getsockopt(c, sockopt::OriginalDst).ok()?;
        Some(SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
            u16::from_be(sa.sin_port),
        )))
    }
}

enum Seen {
    Name(Option<String>),
    Bad,
}

/// Read until the ClientHello (443) or the request head (80) is whole,
/// within [`HELLO_TIMEOUT`]. `buf` keeps every byte, for the upstream;
/// bytes already in it (after a CONNECT head) count.
async fn read_name(c: &mut TcpStream, buf: &mut Vec<u8>, tls: bool) -> Seen {
    let mut hello = sni::Reader::default();
    let mut fed = 0;
    let work = async {
        loop {
            if fed == buf.len() && !read_more(c, buf).await {
                return Seen::Bad;
            }
            if tls {
                let v = hello.push(&buf[fed..]);
                fed = buf.len();
                match v {
                    sni::Hello::More => {}
                    sni::Hello::Name(n) => return Seen::Name(n),
                    sni::Hello::Bad(_) => return Seen::Bad,
                }
            } else {
                fed = buf.len();
                match http::parse(buf) {
                    Head::More => {}
                    Head::Done(r) => return Seen::Name(r.host),
                    Head::Bad(_) => return Seen::Bad,
                }
            }
        }
    };
    tokio::time::timeout(HELLO_TIMEOUT, work)
        .await
        .unwrap_or(Seen::Bad)
}

/// Read what has come into `buf`; false at the end or an error. A read
/// that took less than it had room for left the socket empty: its
/// readiness is cleared then (no system call), so the next read waits for
/// epoll instead of failing with EAGAIN first. Bytes that arrive after
/// the read raise a new epoll event, which sets the readiness again.
async fn read_more(c: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    buf.reserve(4096);
    let room = buf.capacity() - buf.len();
    match c.read_buf(buf).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            if n < room {
                let _ = c.try_io(Interest::READABLE, || {
                    Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
                });
            }
            true
        }
    }
}

/// The upstream connection, connected, with TCP_NODELAY (set before the
/// connect). A failed connect shows as a closed write side or an error in
/// the readiness epoll reports, so no SO_ERROR read is needed after it.
pub async fn dial(dst: SocketAddr) -> Option<TcpStream> {
    use nix::sys::socket::{
        AddressFamily, SockFlag, SockType, SockaddrStorage, connect, setsockopt, socket, sockopt,
    };
    let fam = if dst.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    let fd = socket(fam, SockType::Stream, flags, None).ok()?;
    let _ = setsockopt(&fd, sockopt::TcpNoDelay, &true);
    // On a connecting socket this defers the handshake's last ACK to the
    // first data (the hello, written as soon as it is here): one segment
    // fewer a connection, for us and the server.
    let _ = sbx_sys::setsockopt_bytes(
        fd.as_fd(),
        nix::libc::IPPROTO_TCP,
        nix::libc::TCP_DEFER_ACCEPT,
        &1i32.to_ne_bytes(),
    );
    match connect(fd.as_raw_fd(), &SockaddrStorage::from(dst)) {
        Ok(()) | Err(nix::errno::Errno::EINPROGRESS) => {}
        Err(_) => return None,
    }
    let u = TcpStream::from_std(std::net::TcpStream::from(fd)).ok()?;
    let r = tokio::time::timeout(
        CONNECT_TIMEOUT,
        u.ready(Interest::WRITABLE | Interest::ERROR),
    )
    .await
    .ok()?
    .ok()?;
    (r.is_writable() && !r.is_write_closed() && !r.is_error()).then_some(u)
}

/// A connection redirected by netfilter (`v6`: from the ::1 listener).
pub async fn transparent(mut c: TcpStream, s: Arc<Shared>, v6: bool, lim: Limits) {
    let Some(dst) = original_dst(&c, v6) else {
        return reset(c);
    };
    // Dialled directly, not redirected: there is nowhere to go.
    if dst.ip().is_loopback() || !matches!(dst.port(), 80 | 443) {
        return reset(c);
    }
    let mut buf = Vec::new();
    let name = match read_name(&mut c, &mut buf, dst.port() == 443).await {
        Seen::Name(n) => n,
        Seen::Bad => {
            s.audit(None, dst, Refusal::Malformed);
            return reset(c);
        }
    };
    if let Err(r) = s.judge(name.as_deref(), dst.ip()).await {
        s.audit(name.as_deref(), dst, r);
        return reset(c);
    }
    let body = async {
        let s = s.clone();
        if dst.port() == 80 {
            return super::plain::relay(c, s, dst, &buf, lim.keepalive).await;
        }
        if let Some(n) = &name {
            let p = s.policy();
            let ruled = p.rules_for(n);
            if ruled.is_some() || s.inject.as_ref().is_some_and(|i| i.binds(n)) {
                return ended(c, buf, n, dst, &s, lim, ruled).await;
            }
        }
        match dial(dst).await {
            Some(u) => tunnel(c, u, &buf, lim.tunnel).await,
            None => reset(c),
        }
    };
    until_grant_ends(&s, name.as_deref(), body).await;
}

/// How often a connection opened under a grant alone looks whether it
/// still stands (a revoke); its end time is slept to directly.
const GRANT_POLL: Duration = Duration::from_secs(2);

/// Run `body`, the relay of a connection for `name`; when a grant alone
/// lets `name` through, the relay is dropped (both sockets closed) once
/// that grant runs out or is revoked: a connection kept busy must not
/// outlive the `--for` the user gave (a44). The allowlist's connections
/// are kept, as after `deny`.
async fn until_grant_ends(
    s: &Shared,
    name: Option<&str>,
    body: impl std::future::Future<Output = ()>,
) {
    let Some(name) = name.filter(|n| s.policy().grant_only(n).is_some()) else {
        return body.await;
    };
    let ends = async {
        loop {
            let p = s.policy();
            if !p.allows_name(name) {
                return;
            }
            let left = p.grant_only(name).map_or(GRANT_POLL, |until| {
                Duration::from_secs(until.saturating_sub(crate::state::unix_now()))
            });
            tokio::time::sleep(left.clamp(Duration::from_millis(100), GRANT_POLL)).await;
        }
    };
    tokio::select! {
        () = body => {}
        () = ends => s.audit_grant_end(name),
    }
}

/// The CONNECT head, within [`HELLO_TIMEOUT`]; `buf` keeps what came.
async fn connect_head(c: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Head> {
    tokio::time::timeout(HELLO_TIMEOUT, async {
        loop {
            match http::parse(buf) {
                Head::More => {}
                other => return other,
            }
            if !read_more(c, buf).await {
                return Head::Bad("closed".into());
            }
        }
    })
    .await
    .ok()
}

const FORBIDDEN: &[u8] = b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\n";

/// The explicit proxy: `CONNECT name:443`, the same checks as a
/// redirected connection, and the tunnel's ClientHello must name `name`.
pub async fn connect_proxy(mut c: TcpStream, s: Arc<Shared>, lim: Limits) {
    let local = SocketAddr::from((Ipv4Addr::LOCALHOST, CONNECT_PORT));
    let mut buf = Vec::new();
    let req = match connect_head(&mut c, &mut buf).await {
        Some(Head::Done(r)) if r.method == "CONNECT" => r,
        Some(Head::Done(_)) => {
            let _ = c
                .write_all(b"HTTP/1.1 405 Method Not Allowed\r\nConnection: close\r\n\r\n")
                .await;
            return;
        }
        _ => {
            s.audit(None, local, Refusal::Malformed);
            return reset(c);
        }
    };
    let (name, dst) = match connect_target(&s, &req).await {
        Ok(v) => v,
        Err((name, r)) => {
            s.audit(name.as_deref(), local, r);
            let _ = c.try_write(FORBIDDEN);
            return;
        }
    };
    let body = async {
        let Some(u) = dial(dst).await else {
            let _ = c
                .write_all(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n")
                .await;
            return;
        };
        if c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
        let mut hello = buf.split_off(req.len);
        match read_name(&mut c, &mut hello, true).await {
            Seen::Name(Some(n)) if n == name => {
                let p = s.policy();
                let ruled = p.rules_for(&n);
                if ruled.is_some() || s.inject.as_ref().is_some_and(|i| i.binds(&n)) {
                    drop(u);
                    ended(c, hello, &n, dst, &s, lim, ruled).await;
                } else {
                    tunnel(c, u, &hello, lim.tunnel).await;
                }
            }
            Seen::Name(n) => {
                let r = if n.is_some() {
                    Refusal::Fronting
                } else {
                    Refusal::NoName
                };
                s.audit(n.as_deref().or(Some(&name)), dst, r);
                reset(c);
            }
            Seen::Bad => {
                s.audit(Some(&name), dst, Refusal::Malformed);
                reset(c);
            }
        }
    };
    until_grant_ends(&s, Some(&name), body).await;
}

/// The name of a CONNECT and the address to dial for it. A name resolved
/// at init is dialled at those addresses (the ones the firewall let in
/// for it); any other through the DNS filter (resolv.conf), which records
/// the addresses it hands out. The first one the policy accepts is used.
async fn connect_target(
    s: &Shared,
    req: &Request,
) -> Result<(String, SocketAddr), (Option<String>, Refusal)> {
    let Some((name, Some(443))) = http::host_name(&req.target) else {
        return Err((None, Refusal::NoName));
    };
    let p = s.policy();
    if !p.allows_name(&name) {
        return Err((Some(name), Refusal::NotAllowed));
    }
    // An address the name resolved to at init is one the verdict allows
    // by definition (the same policy, just read): no second judgement.
    if let Some(ip) = p.addresses(&name).first() {
        return Ok((name, SocketAddr::new(*ip, 443)));
    }
    for a in lookup(&name, 443).await {
        if s.judge(Some(&name), a.ip()).await.is_ok() {
            return Ok((name, SocketAddr::new(a.ip(), 443)));
        }
    }
    Err((Some(name), Refusal::Fronting))
}

/// A connection to a host a secret is bound to or with `[network.rules]`:
/// the proxy ends its TLS, judges each request by the rules and adds the
/// secret ([`super::inject`]); a refusal is audited naming what refused.
/// A host whose rules allow nothing (`off`) is refused here: there is no
/// request to look at.
async fn ended(
    c: TcpStream,
    first: Vec<u8>,
    name: &str,
    dst: SocketAddr,
    s: &Shared,
    lim: Limits,
    ruled: Option<Ruled<'_>>,
) {
    if let Some(r) = ruled
        && r.rules.is_empty()
    {
        let why = format!("{}: no request is allowed (off)", r.label());
        s.audit_rule(Some(name), dst, Refusal::Rule, Some(&why));
        return reset(c);
    }
    // Rules but no CA to end TLS with (init makes it with the rules):
    // nothing can be judged, so nothing goes.
    let Some(inj) = &s.inject else {
        let why = ruled.map(|r| format!("{}: no sandbox CA", r.label()));
        s.audit_rule(Some(name), dst, Refusal::Rule, why.as_deref());
        return reset(c);
    };
    if let Err((r, why)) = inj.serve(c, first, name, dst, lim.tunnel, ruled).await {
        let what = match (ruled, why) {
            (_, Some(why)) if r == Refusal::Renewal => why,
            (Some(rs), Some(why)) => format!("{}: {why}", rs.label()),
            (Some(rs), None) if !inj.binds(name) => rs.label(),
            _ => inj.rule(name),
        };
        s.audit_rule(Some(name), dst, r, Some(&what));
    }
}
