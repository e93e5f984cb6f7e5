//! `sbx-fwbed bench tls TARGET SNI CA_DER PROXY N CONC BYTES`: the client of
//! bench/fw-proxy.sh. N TLS connections (CONC at a time) to TARGET, each
//! directly or through PROXY's CONNECT (`-`: none): a full TLS 1.3
//! handshake verified against the bed's CA, then `GET /bytes/BYTES` read to
//! the end. Prints one JSON line: handshake latency (connect to handshake
//! done) median and p90, connections a second, body throughput.
//!
//! `sbx-fwbed bench hello TARGET SNI PROXY N CONC PID`: the light client,
//! for connections a second where the proxy, not the client, is the cost:
//! each connection sends a ready-made ClientHello and reads the server's
//! first record (its ServerHello), then closes; no client-side crypto.
//! PID (`-`: none) is the proxy's: the CPU time all its threads used over
//! the run is reported, per connection.
//!
//! `sbx-fwbed bench relay LISTEN TARGET [KNOBS]`: the smallest relay that
//! terminates TCP, for the throughput rows: a connection accepted on
//! LISTEN, TARGET dialled, each direction spliced by a thread of its own
//! through a 1 MiB pipe with blocking splice(2), no checks, no timeouts.
//! What any TCP-terminating proxy must at least pay, beside ours. KNOBS,
//! comma-separated, for the throughput experiments: `pipe=BYTES` (the
//! pipe size), `more` (SPLICE_F_MORE on the way out), `buf=BYTES`
//! (SO_SNDBUF and SO_RCVBUF on both sockets), `copy=BYTES` (read and
//! write through a buffer of that size instead of splice).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

pub fn main(args: &[String]) -> i32 {
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    if arg(0) == "hello" && args.len() == 7 {
        return hello_main(args);
    }
    if arg(0) == "relay" && (3..=4).contains(&args.len()) {
        return relay_main(arg(1), arg(2), arg(3));
    }
    if arg(0) != "tls" || args.len() != 8 {
        eprintln!("usage: sbx-fwbed bench tls TARGET SNI CA_DER PROXY|- N CONC BYTES");
        return 64;
    }
    let (target, sni, ca, proxy) = (arg(1), arg(2), arg(3), arg(4));
    let num = |i: usize| arg(i).parse::<u64>().unwrap_or(0);
    let (n, conc, bytes) = (num(5) as usize, num(6).max(1) as usize, num(7));
    let mut roots = rustls::RootCertStore::empty();
    let der = std::fs::read(ca).unwrap_or_default();
    if roots.add(der.into()).is_err() {
        eprintln!("{ca}: not a DER certificate");
        return 66;
    }
    let config = Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("tls versions")
        .with_root_certificates(roots)
        .with_no_client_auth(),
    );
    let name = rustls::pki_types::ServerName::try_from(sni.to_owned()).expect("SNI");
    let proxy = (proxy != "-").then(|| proxy.to_owned());
    let next = Arc::new(AtomicUsize::new(0));
    let lat = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let got = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..conc {
            let (config, name, proxy) = (config.clone(), name.clone(), proxy.clone());
            let (next, lat, errors, got) = (next.clone(), lat.clone(), errors.clone(), got.clone());
            s.spawn(move || {
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    match one(&config, &name, target, sni, proxy.as_deref(), bytes) {
                        Ok((d, b)) => {
                            lat.lock().unwrap().push(d);
                            got.fetch_add(b, Ordering::Relaxed);
                        }
                        Err(e) => errors.lock().unwrap().push(e),
                    }
                }
            });
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut lat = lat.lock().unwrap().clone();
    lat.sort();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p).round() as usize)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let errors = errors.lock().unwrap();
    let got = got.load(Ordering::Relaxed);
    println!(
        "{}",
        json!({
            "ok": lat.len(), "errors": errors.len(), "first_error": errors.first(),
            "median_ms": pct(0.5), "p90_ms": pct(0.9), "secs": secs,
            "cps": lat.len() as f64 / secs, "bytes": got,
            "mib_s": got as f64 / secs / (1024.0 * 1024.0),
        })
    );
    if errors.is_empty() { 0 } else { 1 }
}

fn one(
    config: &Arc<rustls::ClientConfig>,
    name: &rustls::pki_types::ServerName<'static>,
    target: &str,
    sni: &str,
    proxy: Option<&str>,
    bytes: u64,
) -> Result<(Duration, usize), String> {
    let e = |what: &str, err: std::io::Error| format!("{what}: {err}");
    let t0 = Instant::now();
    let mut c = match proxy {
        None => TcpStream::connect(target).map_err(|x| e("connect", x))?,
        Some(p) => {
            let mut c = TcpStream::connect(p).map_err(|x| e("proxy", x))?;
            c.set_nodelay(true).map_err(|x| e("nodelay", x))?;
            tunnel(&mut c, target)?;
            c
        }
    };
    c.set_nodelay(true).map_err(|x| e("nodelay", x))?;
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|x| e("timeout", x))?;
    let mut tls = rustls::ClientConnection::new(config.clone(), name.clone())
        .map_err(|x| format!("tls: {x}"))?;
    while tls.is_handshaking() {
        tls.complete_io(&mut c).map_err(|x| e("handshake", x))?;
    }
    let shook = t0.elapsed();
    let mut s = rustls::Stream::new(&mut tls, &mut c);
    write!(
        s,
        "GET /bytes/{bytes} HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|x| e("request", x))?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0;
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => total += k,
            // The server's close_notify is read as the end; a bare close too.
            Err(x) if x.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(x) => return Err(e("read", x)),
        }
    }
    if (total as u64) < bytes {
        return Err(format!("short body: {total} of {bytes}"));
    }
    Ok((shook, total))
}

/// CPU time, in ns, that all threads of `pid` have used (schedstat).
fn cpu_ns(pid: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn hello_main(args: &[String]) -> i32 {
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let (target, sni, proxy, pid) = (arg(1), arg(2), arg(3), arg(6));
    let num = |i: usize| arg(i).parse::<usize>().unwrap_or(0);
    let (n, conc) = (num(4), num(5).max(1));
    let hello = sbx_fw::proxy::sni::client_hello(Some(sni));
    let proxy = (proxy != "-").then_some(proxy);
    let next = AtomicUsize::new(0);
    let lat = Mutex::new(Vec::with_capacity(n));
    let errors = Mutex::new(Vec::new());
    let cpu0 = cpu_ns(pid);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..conc {
            s.spawn(|| {
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    let t = Instant::now();
                    match hello_one(target, proxy, &hello) {
                        Ok(()) => lat.lock().unwrap().push(t.elapsed()),
                        Err(e) => errors.lock().unwrap().push(e),
                    }
                }
            });
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_ns(pid).saturating_sub(cpu0);
    let mut lat = lat.into_inner().unwrap();
    lat.sort();
    let median = lat
        .get(lat.len() / 2)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
    let errors = errors.into_inner().unwrap();
    let ok = lat.len().max(1) as f64;
    println!(
        "{}",
        json!({
            "ok": lat.len(), "errors": errors.len(), "first_error": errors.first(),
            "median_ms": median, "secs": secs, "cps": lat.len() as f64 / secs,
            "proxy_cpu_us_per_conn": cpu as f64 / 1000.0 / ok,
        })
    );
    if errors.is_empty() { 0 } else { 1 }
}

/// CONNECT `target` through the proxy `c` is connected to; Ok once the
/// proxy answered 200. Its head is read as clients do, in one read as a
/// rule (not byte by byte: that cost the client more than the proxy):
/// nothing can follow it, the far side speaks only after the hello.
fn tunnel(c: &mut TcpStream, target: &str) -> Result<(), String> {
    // One write, as clients send it: write! on the socket itself would
    // send each piece of the format as a segment of its own (NODELAY).
    let req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    c.write_all(req.as_bytes())
        .map_err(|x| format!("CONNECT: {x}"))?;
    let mut head = Vec::new();
    let mut b = [0u8; 1024];
    loop {
        match c.read(&mut b) {
            Ok(0) | Err(_) => return Err("proxy closed".into()),
            Ok(k) => head.extend_from_slice(&b[..k]),
        }
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            if i + 4 != head.len() {
                return Err("bytes after the proxy's answer".into());
            }
            break;
        }
        if head.len() > 64 * 1024 {
            return Err("proxy answer too long".into());
        }
    }
    if !head.starts_with(b"HTTP/1.1 200") && !head.starts_with(b"HTTP/1.0 200") {
        return Err(format!("proxy: {}", String::from_utf8_lossy(&head)));
    }
    Ok(())
}

/// One connection: the hello out, the server's first record back.
fn hello_one(target: &str, proxy: Option<&str>, hello: &[u8]) -> Result<(), String> {
    let e = |what: &str, err: std::io::Error| format!("{what}: {err}");
    let mut c = TcpStream::connect(proxy.unwrap_or(target)).map_err(|x| e("connect", x))?;
    c.set_nodelay(true).map_err(|x| e("nodelay", x))?;
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|x| e("timeout", x))?;
    if proxy.is_some() {
        // As clients do: the hello after the proxy's 200.
        tunnel(&mut c, target)?;
    }
    c.write_all(hello).map_err(|x| e("hello", x))?;
    let mut rec = [0u8; 5];
    c.read_exact(&mut rec).map_err(|x| e("server hello", x))?;
    if rec[0] != 0x16 {
        return Err(format!("not a handshake record: {rec:?}"));
    }
    let mut body = vec![0u8; usize::from(u16::from_be_bytes([rec[3], rec[4]]))];
    c.read_exact(&mut body).map_err(|x| e("server hello", x))?;
    Ok(())
}

#[derive(Clone, Copy)]
struct Knobs {
    pipe: usize,
    more: bool,
    buf: usize,
    copy: usize,
    sockmap: Option<sbx_sys::bpf::Verdict>,
    local: bool,
}

fn relay_main(listen: &str, target: &str, knobs: &str) -> i32 {
    let mut k = Knobs {
        pipe: 1 << 20,
        more: false,
        buf: 0,
        copy: 0,
        sockmap: None,
        local: false,
    };
    for kv in knobs.split(',').filter(|x| !x.is_empty()) {
        let (key, v) = kv.split_once('=').unwrap_or((kv, "0"));
        let v = v.parse::<usize>().unwrap_or(0);
        match key {
            "pipe" => k.pipe = v,
            "more" => k.more = true,
            "buf" => k.buf = v,
            "copy" => k.copy = v,
            "sockmap-local" => k.local = true,
            "sockmap" | "sockmap-stream" | "sockmap-ingress" => {
                use sbx_sys::bpf::Verdict;
                k.sockmap = Some(match key {
                    "sockmap" => Verdict::Egress,
                    "sockmap-stream" => Verdict::StreamEgress,
                    _ => Verdict::Ingress,
                })
            }
            _ => {
                eprintln!("relay: unknown knob {kv}");
                return 64;
            }
        }
    }
    let l = match std::net::TcpListener::bind(listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("relay: {listen}: {e}");
            return 69;
        }
    };
    let target = target.to_owned();
    if k.local {
        return sockmap_local_relay(&l, &target);
    }
    if let Some(v) = k.sockmap {
        return sockmap_relay(&l, &target, v);
    }
    for c in l.incoming().flatten() {
        let Ok(u) = TcpStream::connect(&target) else {
            continue;
        };
        let _ = (c.set_nodelay(true), u.set_nodelay(true));
        if k.buf > 0 {
            use nix::sys::socket::{setsockopt, sockopt};
            for s in [&c, &u] {
                let _ = setsockopt(s, sockopt::SndBuf, &k.buf);
                let _ = setsockopt(s, sockopt::RcvBuf, &k.buf);
            }
        }
        let (Ok(c2), Ok(u2)) = (c.try_clone(), u.try_clone()) else {
            continue;
        };
        std::thread::spawn(move || splice_all(&c, &u, k));
        std::thread::spawn(move || splice_all(&u2, &c2, k));
    }
    0
}

/// `from` to `to` through a pipe (or a buffer) until `from` ends, then a
/// half close.
fn splice_all(from: &TcpStream, to: &TcpStream, k: Knobs) {
    use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
    if k.copy > 0 {
        let mut buf = vec![0u8; k.copy];
        let (mut from, mut to) = (from, to);
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
        return;
    }
    let Ok((r, w)) = nix::unistd::pipe2(OFlag::O_CLOEXEC) else {
        return;
    };
    let want = i32::try_from(k.pipe).unwrap_or(i32::MAX);
    let size = fcntl(&w, FcntlArg::F_SETPIPE_SZ(want)).unwrap_or(65536) as usize;
    let flags = SpliceFFlags::SPLICE_F_MOVE;
    let out = if k.more {
        flags | SpliceFFlags::SPLICE_F_MORE
    } else {
        flags
    };
    loop {
        let n = match splice(from, None, &w, None, size, flags) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut left = n;
        while left > 0 {
            match splice(&r, None, to, None, left, out) {
                Ok(0) | Err(_) => return,
                Ok(k) => left -= k,
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// The in-kernel relay: the first bytes the client sends are read and
/// forwarded here (as a checking proxy would), then the pair goes into a
/// sockhash whose verdict program redirects every later byte to the
/// peer. A thread a connection only waits for the ends to close.
fn sockmap_relay(l: &std::net::TcpListener, target: &str, v: sbx_sys::bpf::Verdict) -> i32 {
    let relay = match sbx_sys::bpf::SockRelay::create(4096, v) {
        Ok(r) => Arc::new(r),
        Err(e) => {
            eprintln!("relay: sockmap: {e}");
            return 69;
        }
    };
    for c in l.incoming().flatten() {
        let relay = relay.clone();
        let target = target.to_owned();
        std::thread::spawn(move || {
            let mut c = c;
            let mut first = vec![0u8; 16384];
            let n = match c.read(&mut first) {
                Ok(n) if n > 0 => n,
                _ => return,
            };
            let Ok(mut u) = TcpStream::connect(&target) else {
                return;
            };
            let _ = (c.set_nodelay(true), u.set_nodelay(true));
            if let Err(e) = relay.insert_pair(&c, &u) {
                eprintln!("relay: sockmap insert: {e}");
                return;
            }
            if u.write_all(&first[..n]).is_err() {
                return;
            }
            wait_closed(&c, &u, [n as u64, 0]);
            relay.remove_pair(&c, &u);
        });
    }
    0
}

/// Poll both ends for a hang-up; on one side's EOF, once the kernel has
/// moved all it received to the other, a half close of the other's
/// write side; done when both ended. `moved[i]`: bytes this relay read
/// from end i and wrote to the other itself.
fn wait_closed(c: &TcpStream, u: &TcpStream, moved: [u64; 2]) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    // POLLRDHUP: nix does not name it.
    let ev = PollFlags::from_bits_retain(0x2000);
    let ends = [(c, u), (u, c)];
    let mut open = [true, true];
    while open.iter().any(|&o| o) {
        let idx: Vec<usize> = (0..2).filter(|&i| open[i]).collect();
        let mut fds: Vec<PollFd> = idx
            .iter()
            .map(|&i| PollFd::new(ends[i].0.as_fd(), ev))
            .collect();
        if poll(&mut fds, PollTimeout::NONE).is_err() {
            return;
        }
        for (j, f) in fds.iter().enumerate() {
            // None: bits nix does not know (POLLRDHUP, the one asked for).
            if f.revents().is_none_or(|r| !r.is_empty()) {
                let i = idx[j];
                open[i] = false;
                let (from, to) = ends[i];
                let t0 = Instant::now();
                while !sbx_sys::bpf::drained(from, to, moved[i], moved[i]).unwrap_or(true)
                    && t0.elapsed() < Duration::from_secs(30)
                {
                    std::thread::sleep(Duration::from_micros(200));
                }
                let _ = to.shutdown(std::net::Shutdown::Write);
            }
        }
    }
}

/// The cgroup v2 directory (SBX_BENCH_CGROUP) whose sockets the
/// sockmap-local relay takes over: the bench runs that row's client in it.
/// A path outside /sys, which `ip netns exec` mounts afresh.
fn local_cgroup() -> String {
    std::env::var("SBX_BENCH_CGROUP").unwrap_or_default()
}

/// sockmap-local: as sockmap, but the agent's own socket is in the map
/// (sbx_sys::bpf::LocalRelay), so after the first bytes neither the
/// loopback hop nor this process's accepted socket carries anything.
/// Ends when the agent closes (its FIN still takes the loopback).
fn sockmap_local_relay(l: &std::net::TcpListener, target: &str) -> i32 {
    let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
    let cg = local_cgroup();
    let relay = match std::fs::File::open(&cg)
        .and_then(|cg| sbx_sys::bpf::LocalRelay::create(&cg, port, 4096))
    {
        Ok(r) => Arc::new(r),
        Err(e) => {
            eprintln!("relay: sockmap-local: {cg:?} (SBX_BENCH_CGROUP): {e}");
            return 69;
        }
    };
    for c in l.incoming().flatten() {
        let relay = relay.clone();
        let target = target.to_owned();
        std::thread::spawn(move || {
            use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
            use std::os::fd::AsFd;
            let mut c = c;
            let mut first = vec![0u8; 16384];
            let n = match c.read(&mut first) {
                Ok(n) if n > 0 => n,
                _ => return,
            };
            let Ok(mut u) = TcpStream::connect(&target) else {
                return;
            };
            let _ = (c.set_nodelay(true), u.set_nodelay(true));
            if let Err(e) = relay.insert(&c, &u) {
                eprintln!("relay: sockmap-local insert: {e}");
                return;
            }
            if u.write_all(&first[..n]).is_ok() {
                let mut fd = [PollFd::new(c.as_fd(), PollFlags::from_bits_retain(0x2000))];
                let _ = poll(&mut fd, PollTimeout::NONE);
                let _ = u.shutdown(std::net::Shutdown::Write);
            }
            relay.remove(&c, &u);
        });
    }
    0
}
