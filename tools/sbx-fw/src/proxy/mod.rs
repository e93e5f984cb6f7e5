//! `sbx-fw proxy`: in `[network] mode = "proxy"` the agent's TCP 80 and
//! 443 are redirected here (nat OUTPUT, by owner, never our own uid). Each
//! connection's name (TLS server name, HTTP Host) must be allowlisted and
//! its original destination an address that name resolved to; then the
//! bytes are spliced on unchanged. Anything else is audited and reset.
//! Also an explicit HTTP CONNECT proxy for tools that honour HTTPS_PROXY.
//! Runs as its own unprivileged uid; if it dies the redirected ports lead
//! nowhere, so everything stays blocked until it is back.

mod answers;
mod conn;
pub mod handed;
pub mod http;
pub mod inject;
mod plain;
pub mod policy;
mod relay;
mod requests;
pub mod rules;
mod shared;
pub mod sni;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::TcpListener;

use shared::Shared;

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
/// A plain HTTP connection with nothing moving either way for this long
/// (kept alive between requests, or a stalled answer) is closed: Squid's
/// default for idle kept-alive client connections.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(120);
/// A TLS tunnel with nothing moving either way for this long is closed
/// (Squid's default read timeout). Streams that matter (API streaming,
/// WebSockets, git's progress) send something well within it.
pub const TUNNEL_IDLE: Duration = Duration::from_secs(15 * 60);
/// Seconds for both idle limits instead (the tests: minutes are too long).
pub const IDLE_ENV: &str = "SBX_FW_PROXY_IDLE";
/// Seconds a handed-out address is trusted instead of [`handed::HOLD`].
pub const HOLD_ENV: &str = "SBX_FW_PROXY_HOLD";
const BACKLOG: i32 = 4096;

/// The time limits in force.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub keepalive: Duration,
    pub tunnel: Duration,
    pub hold: Duration,
}

impl Limits {
    /// The defaults, or the tests' shorter ones (only root, who starts the
    /// proxy, sets its environment).
    fn from_env() -> Self {
        let secs = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|s| *s > 0)
                .map(Duration::from_secs)
        };
        let idle = secs(IDLE_ENV);
        Self {
            keepalive: idle.unwrap_or(KEEPALIVE_IDLE),
            tunnel: idle.unwrap_or(TUNNEL_IDLE),
            hold: secs(HOLD_ENV).unwrap_or(handed::HOLD),
        }
    }
}

/// Serve in the foreground: drop to [`PROXY_UID`] when root, listen, call
/// `ready`, then follow the state directory for allowlist changes.
///
/// One thread a CPU (2 to 8), each with its own single-threaded runtime
/// and its own listeners on the same ports (SO_REUSEPORT): the kernel
/// spreads the connections, and a connection lives on the thread that
/// accepted it, without wakeups across threads.
pub fn serve(dir: &Path, ready: impl FnOnce()) -> std::io::Result<()> {
    // Read while still root: the secrets and the CA key are root's alone.
    // Unreadable ones stop the proxy (closed), never pass connections on
    // without what they were meant to carry.
    let inject = inject::Injector::load(&inject::dir(), &inject::bundle())?;
    // Bound while root, on the secrets' tmpfs (root's 0700): after the
    // drop the proxy still accepts on it, and only root can connect.
    let control = match &inject {
        Some(_) => Some(inject::control_listener(&inject::dir())?),
        None => None,
    };
    drop_privileges()?;
    raise_nofile();
    let n = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
    let mut sets = Vec::with_capacity(n);
    for _ in 0..n {
        sets.push(Listeners {
            v4: listen((Ipv4Addr::LOCALHOST, TRANSPARENT_PORT).into())?,
            // Without IPv6 there is nothing to redirect there.
            v6: listen((Ipv6Addr::LOCALHOST, TRANSPARENT_PORT).into()).ok(),
            connect: listen((Ipv4Addr::LOCALHOST, CONNECT_PORT).into())?,
        });
    }
    let lim = Limits::from_env();
    let shared = Arc::new(Shared::new(dir.to_owned(), lim.hold, inject));
    let _watcher = watch(dir, shared.clone());
    if let Some(l) = control {
        let s = shared.clone();
        std::thread::spawn(move || {
            if let Some(i) = &s.inject {
                inject::serve_control(&l, i);
            }
        });
    }
    {
        let s = shared.clone();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(500));
                s.audit_flush();
            }
        });
    }
    ready();
    let workers: Vec<_> = sets
        .into_iter()
        .map(|set| {
            let s = shared.clone();
            std::thread::spawn(move || run(set, s, lim))
        })
        .collect();
    for w in workers {
        w.join()
            .map_err(|_| std::io::Error::other("a proxy thread panicked"))??;
    }
    Ok(())
}

struct Listeners {
    v4: std::net::TcpListener,
    v6: Option<std::net::TcpListener>,
    connect: std::net::TcpListener,
}

/// One thread's runtime, serving its listeners until they fail.
fn run(set: Listeners, shared: Arc<Shared>, lim: Limits) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut tasks = vec![
            tokio::spawn(accept(
                TcpListener::from_std(set.v4)?,
                shared.clone(),
                Kind::Transparent(false),
                lim,
            )),
            tokio::spawn(accept(
                TcpListener::from_std(set.connect)?,
                shared.clone(),
                Kind::Connect,
                lim,
            )),
        ];
        if let Some(v6) = set.v6 {
            tasks.push(tokio::spawn(accept(
                TcpListener::from_std(v6)?,
                shared,
                Kind::Transparent(true),
                lim,
            )));
        }
        for t in tasks {
            let _ = t.await;
        }
        Ok(())
    })
}

/// A listener of the reuse-port group on `addr`, with a deep backlog (a
/// burst waits for accept instead of being refused); accepted sockets
/// inherit TCP_NODELAY, and accept waits until the client has sent
/// something (both protocols here start with the client), which saves a
/// wakeup a connection.
fn listen(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use nix::sys::socket::{
        AddressFamily, Backlog, SockFlag, SockType, SockaddrStorage, bind, listen, setsockopt,
        socket, sockopt,
    };
    let fam = if addr.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    let fd = socket(fam, SockType::Stream, flags, None)?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    setsockopt(&fd, sockopt::ReusePort, &true)?;
    setsockopt(&fd, sockopt::TcpNoDelay, &true)?;
    if addr.is_ipv6() {
        setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
    }
    // Seconds: a client silent that long is accepted anyway (and then has
    // HELLO_TIMEOUT like any other).
    let defer: i32 = 5;
    sbx_sys::setsockopt_bytes(
        fd.as_fd(),
        nix::libc::IPPROTO_TCP,
        nix::libc::TCP_DEFER_ACCEPT,
        &defer.to_ne_bytes(),
    )?;
    bind(fd.as_raw_fd(), &SockaddrStorage::from(addr))?;
    listen(&fd, Backlog::new(BACKLOG).unwrap_or(Backlog::MAXCONN))?;
    Ok(std::net::TcpListener::from(fd))
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

/// A change of state.json (init, allow, deny) or dns.handed (the DNS
/// filter) marks the policy for re-reading before the next verdict. Open
/// connections are never touched.
fn watch(dir: &Path, shared: Arc<Shared>) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    let mut w = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if res.as_ref().is_ok_and(|ev| !changes_policy(ev)) {
            return;
        }
        shared.changes.fetch_add(1, Ordering::AcqRel);
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

/// Not every event: reading state.json is an event too, and re-reading
/// on those would re-read on every connection. Lost events (a rescan)
/// count as a change.
fn changes_policy(ev: &notify::Event) -> bool {
    use notify::event::{AccessKind, AccessMode, EventKind};
    if let EventKind::Access(k) = ev.kind
        && k != AccessKind::Close(AccessMode::Write)
    {
        return false;
    }
    let ours = |p: &std::path::PathBuf| {
        p.file_name().is_some_and(|n| {
            n == crate::dns::HANDED_FILE || Some(n) == crate::state::path(Path::new("")).file_name()
        })
    };
    ev.need_rescan() || ev.paths.is_empty() || ev.paths.iter().any(ours)
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Redirected by netfilter; true on the ::1 listener.
    Transparent(bool),
    Connect,
}

async fn accept(l: TcpListener, shared: Arc<Shared>, kind: Kind, lim: Limits) {
    loop {
        match l.accept().await {
            Ok((c, _)) => {
                let s = shared.clone();
                tokio::spawn(async move {
                    match kind {
                        Kind::Transparent(v6) => conn::transparent(c, s, v6, lim).await,
                        Kind::Connect => conn::connect_proxy(c, s, lim).await,
                    }
                });
            }
            // Out of descriptors: wait, do not spin.
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}
