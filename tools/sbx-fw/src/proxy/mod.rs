//! `sbx-fw proxy`: in `[network] mode = "proxy"` the agent's TCP 80 and
//! 443 are redirected here (nat OUTPUT, by owner, never our own uid). Each
//! connection's name (TLS server name, HTTP Host) must be allowlisted and
//! its original destination an address that name resolved to; then the
//! bytes are spliced on unchanged. Anything else is audited and reset.
//! Also an explicit HTTP CONNECT proxy for tools that honour HTTPS_PROXY.
//! Runs as its own unprivileged uid; if it dies the redirected ports lead
//! nowhere, so everything stays blocked until it is back.

pub mod http;
pub mod policy;
pub mod sni;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use sbx_core::audit::{self, Outcome, Record};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use policy::{Policy, Refusal};

/// Where the redirected connections arrive (127.0.0.1 and ::1).
pub const TRANSPARENT_PORT: u16 = 3129;
/// The explicit proxy (HTTP CONNECT), 127.0.0.1 only.
pub const CONNECT_PORT: u16 = 3128;
/// The proxy's own uid and gid: unprivileged, owning nothing, exempt from
/// the redirect (its upstream connections would loop otherwise).
pub const PROXY_UID: u32 = 65533;
/// The whole ClientHello or request head must arrive within this: a
/// slow client holds one task and one socket, never the others.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Splice buffers: large, for throughput close to a direct connection.
const BUF: usize = 256 * 1024;
/// Refusal records a second; the rest are counted into the next one.
const AUDIT_RATE: u64 = 20;

struct Shared {
    dir: PathBuf,
    /// The policy and the change count it was loaded at.
    policy: RwLock<(u64, Arc<Policy>)>,
    /// Changes seen in the state directory.
    changes: AtomicU64,
    audit: Mutex<(Instant, u64)>,
    suppressed: AtomicU64,
}

impl Shared {
    /// The current policy, re-read after a change. Loads may race: one
    /// started earlier never replaces one that saw a later change (a
    /// `deny` must not be undone by a slow reader).
    fn policy(&self) -> Arc<Policy> {
        let seen = self.changes.load(Ordering::Acquire);
        {
            let cur = self.policy.read().unwrap_or_else(|e| e.into_inner());
            if cur.0 >= seen {
                return cur.1.clone();
            }
        }
        let p = Arc::new(Policy::load(&self.dir));
        let mut cur = self.policy.write().unwrap_or_else(|e| e.into_inner());
        if cur.0 < seen {
            *cur = (seen, p);
        }
        cur.1.clone()
    }

    /// The verdict; a fronting verdict is checked once more against the
    /// DNS filter's latest record (it may have just handed the address out).
    fn judge(&self, name: Option<&str>, dst: IpAddr) -> Result<(), Refusal> {
        let p = self.policy();
        match p.judge(name, dst) {
            Err(Refusal::Fronting) => {
                let fresh = Arc::new(p.with_handed(crate::dns::read_handed(&self.dir)));
                let v = fresh.judge(name, dst);
                // Kept only if no newer policy was loaded meanwhile.
                let mut cur = self.policy.write().unwrap_or_else(|e| e.into_inner());
                if Arc::ptr_eq(&cur.1, &p) {
                    cur.1 = fresh;
                }
                v
            }
            v => v,
        }
    }

    fn audit(&self, name: Option<&str>, dst: SocketAddr, r: Refusal) {
        {
            let mut a = self.audit.lock().unwrap_or_else(|e| e.into_inner());
            if a.0.elapsed() >= Duration::from_secs(1) {
                *a = (Instant::now(), 0);
            }
            a.1 += 1;
            if a.1 > AUDIT_RATE {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let more = self.suppressed.swap(0, Ordering::Relaxed);
        let reason = if more > 0 {
            format!(
                "{} (address {dst}; {more} more refusals not recorded)",
                r.reason()
            )
        } else {
            format!("{} (address {dst})", r.reason())
        };
        let target = name.map_or_else(|| dst.to_string(), str::to_owned);
        audit::append(
            &Record::new("sbx-fw", "connect", &target, Outcome::Blocked, "proxy").reason(&reason),
        );
    }
}

/// Serve in the foreground: drop to [`PROXY_UID`] when root, listen, call
/// `ready`, then follow the state directory for allowlist changes.
pub fn serve(dir: &Path, ready: impl FnOnce()) -> std::io::Result<()> {
    drop_privileges()?;
    raise_nofile();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let shared = Arc::new(Shared {
        dir: dir.to_owned(),
        policy: RwLock::new((0, Arc::new(Policy::load(dir)))),
        changes: AtomicU64::new(0),
        audit: Mutex::new((Instant::now(), 0)),
        suppressed: AtomicU64::new(0),
    });
    let _watcher = watch(dir, shared.clone());
    rt.block_on(async move {
        let v4 = TcpListener::bind((Ipv4Addr::LOCALHOST, TRANSPARENT_PORT)).await?;
        // Without IPv6 there is nothing to redirect there.
        let v6 = TcpListener::bind((Ipv6Addr::LOCALHOST, TRANSPARENT_PORT))
            .await
            .ok();
        let cp = TcpListener::bind((Ipv4Addr::LOCALHOST, CONNECT_PORT)).await?;
        ready();
        let mut tasks = vec![
            tokio::spawn(accept(v4, shared.clone(), false)),
            tokio::spawn(accept(cp, shared.clone(), true)),
        ];
        if let Some(v6) = v6 {
            tasks.push(tokio::spawn(accept(v6, shared.clone(), false)));
        }
        for t in tasks {
            let _ = t.await;
        }
        Ok(())
    })
}

fn drop_privileges() -> std::io::Result<()> {
    use nix::unistd::{Gid, Uid, getuid, setgid, setgroups, setuid};
    if getuid().is_root() {
        let err =
            |e: nix::Error| std::io::Error::other(format!("dropping to uid {PROXY_UID}: {e}"));
        setgroups(&[]).map_err(err)?;
        setgid(Gid::from_raw(PROXY_UID)).map_err(err)?;
        setuid(Uid::from_raw(PROXY_UID)).map_err(err)?;
    }
    if getuid().is_root() {
        return Err(std::io::Error::other(
            "still root after dropping privileges",
        ));
    }
    Ok(())
}

/// Two descriptors a connection: the soft limit of 1024 would cap us at 500.
fn raise_nofile() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

/// Any change in the state directory (init, allow, deny write state.json;
/// the DNS filter appends to dns.handed) marks the policy for re-reading
/// before the next verdict. Open connections are never touched.
fn watch(dir: &Path, shared: Arc<Shared>) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    let s = shared.clone();
    let mut w = notify::recommended_watcher(move |_res: notify::Result<notify::Event>| {
        s.changes.fetch_add(1, Ordering::AcqRel);
    })
    .ok()?;
    match w.watch(dir, notify::RecursiveMode::NonRecursive) {
        Ok(()) => Some(w),
        Err(e) => {
            eprintln!("sbx-fw proxy: cannot watch {}: {e}", dir.display());
            None
        }
    }
}

async fn accept(l: TcpListener, shared: Arc<Shared>, explicit: bool) {
    loop {
        match l.accept().await {
            Ok((c, _)) => {
                let s = shared.clone();
                tokio::spawn(async move {
                    if explicit {
                        connect_proxy(c, s).await;
                    } else {
                        transparent(c, s).await;
                    }
                });
            }
            // Out of descriptors: wait, do not spin.
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The address the client dialled before the redirect.
fn original_dst(c: &TcpStream) -> Option<SocketAddr> {
    use nix::sys::socket::{getsockopt, sockopt};
    if c.local_addr().ok()?.is_ipv4() {
        let sa = getsockopt(c, sockopt::OriginalDst).ok()?;
        Some(SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
            u16::from_be(sa.sin_port),
        )))
    } else {
        let sa = getsockopt(c, sockopt::Ip6tOriginalDst).ok()?;
        Some(SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(sa.sin6_addr.s6_addr),
            u16::from_be(sa.sin6_port),
            0,
            0,
        )))
    }
}

/// A clean refusal: RST now, not a hang and not a half-open socket.
fn reset(c: TcpStream) {
    let _ = c.set_zero_linger();
    drop(c);
}

enum Seen {
    Name(Option<String>),
    Bad,
}

/// Read until the ClientHello (443) or the request head (80) is whole,
/// within [`HELLO_TIMEOUT`]. `buf` keeps every byte, for the upstream.
async fn read_name(c: &mut TcpStream, buf: &mut Vec<u8>, tls: bool) -> Seen {
    let mut hello = sni::Reader::default();
    let mut fed = 0;
    let work = async {
        let mut chunk = vec![0u8; 4096];
        loop {
            // Bytes may be there already (after a CONNECT head).
            if fed == buf.len() {
                let n = c.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    return Seen::Bad;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let seen = if tls {
                let v = hello.push(&buf[fed..]);
                fed = buf.len();
                match v {
                    sni::Hello::More => continue,
                    sni::Hello::Name(n) => Seen::Name(n),
                    sni::Hello::Bad(_) => Seen::Bad,
                }
            } else {
                fed = buf.len();
                match http::parse(buf) {
                    http::Head::More => continue,
                    http::Head::Done(r) => Seen::Name(r.host),
                    http::Head::Bad(_) => Seen::Bad,
                }
            };
            return seen;
        }
    };
    tokio::time::timeout(HELLO_TIMEOUT, work)
        .await
        .unwrap_or(Seen::Bad)
}

async fn dial(dst: SocketAddr) -> Option<TcpStream> {
    let u = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(dst))
        .await
        .ok()?
        .ok()?;
    let _ = u.set_nodelay(true);
    Some(u)
}

async fn splice(c: TcpStream, mut u: TcpStream, first: &[u8]) {
    let _ = c.set_nodelay(true);
    if u.write_all(first).await.is_err() {
        reset(c);
        return;
    }
    if tokio::try_join!(pump(&c, &u), pump(&u, &c)).is_err() {
        // Whatever was not spliced cannot be, in user space either.
        reset(c);
    }
}

/// `from` to `to` until `from` ends, through a pipe with splice(2): the
/// bytes stay in the kernel. Its end is passed on as a half close.
async fn pump(from: &TcpStream, to: &TcpStream) -> std::io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
    use tokio::io::Interest;
    let (pr, pw) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    // A bigger pipe moves more a call; the default (64 KiB) still works.
    let _ = fcntl(&pw, FcntlArg::F_SETPIPE_SZ(BUF as i32));
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    loop {
        // The pipe is empty here, so EAGAIN means the socket has nothing.
        let n = loop {
            from.readable().await?;
            match from.try_io(Interest::READABLE, || {
                splice(from, None, &pw, None, BUF, flags).map_err(std::io::Error::from)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            let _ = nix::sys::socket::shutdown(
                std::os::fd::AsRawFd::as_raw_fd(to),
                nix::sys::socket::Shutdown::Write,
            );
            return Ok(());
        }
        let mut left = n;
        while left > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || {
                splice(&pr, None, to, None, left, flags).map_err(std::io::Error::from)
            }) {
                Ok(k) => left -= k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

async fn transparent(mut c: TcpStream, s: Arc<Shared>) {
    let Some(dst) = original_dst(&c) else {
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
    if let Err(r) = s.judge(name.as_deref(), dst.ip()) {
        s.audit(name.as_deref(), dst, r);
        return reset(c);
    }
    if dst.port() == 80 {
        return http_relay(c, s, dst, &buf).await;
    }
    match dial(dst).await {
        Some(u) => splice(c, u, &buf).await,
        None => reset(c),
    }
}

/// Every request head in `data` judged, as the first one was: a later
/// request on a kept-alive connection may name another host.
fn follow(
    s: &Shared,
    dst: SocketAddr,
    reqs: &mut http::Requests,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ()> {
    let mut heads = Vec::new();
    let fed = reqs.feed(data, out, &mut heads);
    for r in &heads {
        let v = if r.method == "CONNECT" {
            Err(Refusal::Malformed)
        } else {
            s.judge(r.host.as_deref(), dst.ip())
        };
        if let Err(e) = v {
            s.audit(r.host.as_deref(), dst, e);
            return Err(());
        }
    }
    fed.map_err(|_| s.audit(None, dst, Refusal::Malformed))
}

/// Plain HTTP: the client's bytes go through user space, each request
/// head judged before it is sent; the answers are spliced.
async fn http_relay(c: TcpStream, s: Arc<Shared>, dst: SocketAddr, first: &[u8]) {
    let mut reqs = http::Requests::default();
    let mut out = Vec::new();
    if follow(&s, dst, &mut reqs, first, &mut out).is_err() {
        return reset(c);
    }
    let Some(u) = dial(dst).await else {
        return reset(c);
    };
    let _ = c.set_nodelay(true);
    let up = async {
        let mut chunk = vec![0u8; 16 * 1024];
        loop {
            let mut off = 0;
            while off < out.len() {
                u.writable().await?;
                match u.try_write(&out[off..]) {
                    Ok(k) => off += k,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            out.clear();
            c.readable().await?;
            let n = match c.try_read(&mut chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                let _ = nix::sys::socket::shutdown(
                    std::os::fd::AsRawFd::as_raw_fd(&u),
                    nix::sys::socket::Shutdown::Write,
                );
                return Ok(());
            }
            if follow(&s, dst, &mut reqs, &chunk[..n], &mut out).is_err() {
                return Err(std::io::Error::other("refused"));
            }
        }
    };
    if tokio::try_join!(up, pump(&u, &c)).is_err() {
        let _ = u.set_zero_linger();
        reset(c);
    }
}

async fn connect_proxy(mut c: TcpStream, s: Arc<Shared>) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 4096];
    let head = tokio::time::timeout(HELLO_TIMEOUT, async {
        loop {
            match http::parse(&buf) {
                http::Head::More => {}
                other => return other,
            }
            let n = c.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return http::Head::Bad("closed".into());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    let local = SocketAddr::from((Ipv4Addr::LOCALHOST, CONNECT_PORT));
    let req = match head {
        Ok(http::Head::Done(r)) if r.method == "CONNECT" => r,
        Ok(http::Head::Done(_)) => {
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
    let forbid = |c: &mut TcpStream| {
        let _ = c.try_write(b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\n");
    };
    let Some((name, Some(443))) = http::host_name(&req.target) else {
        s.audit(None, local, Refusal::NoName);
        forbid(&mut c);
        return;
    };
    if !s.policy().allows_name(&name) {
        s.audit(Some(&name), local, Refusal::NotAllowed);
        forbid(&mut c);
        return;
    }
    // A name resolved at init is dialled at those addresses (the ones the
    // firewall let in for it); any other through the DNS filter
    // (resolv.conf), which records the addresses it hands out. The first
    // one the policy accepts is used.
    let mut addrs: Vec<SocketAddr> = s
        .policy()
        .addresses(&name)
        .into_iter()
        .map(|ip| SocketAddr::new(ip, 443))
        .collect();
    if addrs.is_empty() {
        let n2 = name.clone();
        addrs = tokio::task::spawn_blocking(move || {
            use std::net::ToSocketAddrs;
            (n2.as_str(), 443)
                .to_socket_addrs()
                .map(|i| i.collect())
                .unwrap_or_default()
        })
        .await
        .unwrap_or_default();
    }
    let Some(dst) = addrs
        .iter()
        .copied()
        .find(|a| s.judge(Some(&name), a.ip()).is_ok())
    else {
        s.audit(Some(&name), local, Refusal::Fronting);
        forbid(&mut c);
        return;
    };
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
    // The tunnel's ClientHello must name what was asked for.
    let mut hello = buf.split_off(req.len);
    match read_name(&mut c, &mut hello, true).await {
        Seen::Name(Some(n)) if n == name => splice(c, u, &hello).await,
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
}
