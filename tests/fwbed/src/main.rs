//! sbx-fwbed: a sealed network for testing sbx-fw, nothing leaves the machine.
//!
//!   <p>-sbx   the sandbox: 10.77.0.2/24, fd77::2/64, default route via the gateway;
//!             resolv.conf (via /etc/netns) names 198.18.0.53
//!   <p>-gw    gateway, host and "internet": bridge 10.77.0.1/24, fd77::1/64, and on
//!             its loopback 198.18.0.0/15 and 2001:2::/48 addresses (benchmark ranges)
//!   <p>-nb    a neighbour container: 10.77.0.3/24, fd77::3/64
//!
//! In the gateway: DNS with fixed records on 198.18.0.53 (the configured
//! resolver) and 198.18.0.54 (an outside resolver); TLS on every address's
//! 443 serving a GitHub-meta stand-in for meta.github.test (test CA in
//! DIR/ca.pem), except light.test's 198.18.1.4:443, a light origin for the
//! benchmark (a ready-made ServerHello, no crypto, see [`light_origin`]);
//! plain listeners on 22, 80, 8080 and UDP 443. The neighbour
//! listens on 443 and 8080. Usage: `sbx-fwbed PREFIX DIR`; prints the bed as
//! one JSON line when ready, tears everything down when stdin closes.

mod attack;
mod bench;

use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, TXT};
use hickory_proto::rr::{RData, Record, RecordType};

const V4: &[(&str, &str)] = &[
    ("allowed.test", "198.18.1.1"),
    ("dup.test", "198.18.1.1"),
    ("other.test", "198.18.1.2"),
    ("x.wild.test", "198.18.1.3"),
    ("light.test", LIGHT),
    ("blocked.test", "198.18.2.1"),
    ("meta.github.test", "198.18.3.1"),
    ("rebind.test", "10.77.0.1"),
    ("rebind.test", "169.254.169.254"),
    // GitHub's names: inside its meta ranges (198.18.3.0/24), outside, and both.
    ("github.com", "198.18.3.1"),
    ("raw.githubusercontent.com", "198.18.2.1"),
    ("mixed.github.com", "198.18.3.2"),
    ("mixed.github.com", "198.18.2.1"),
];
const V6: &[(&str, &str)] = &[
    ("allowed.test", "2001:2::1:1"),
    ("blocked.test", "2001:2::2:1"),
];
/// The light origin's address (light.test).
const LIGHT: &str = "198.18.1.4";
/// Queries for these names are never answered: a failed lookup.
const SILENT: &[&str] = &["slow.test"];

fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run ip");
    if !out.status.success() {
        panic!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn ns(name: &str, args: &[&str]) {
    let mut v = vec!["ip", "netns", "exec", name];
    v.extend_from_slice(args);
    sh(&v);
}

fn enter(netns: &str) {
    let f = std::fs::File::open(format!("/run/netns/{netns}")).expect("netns");
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
}

struct Names {
    sbx: String,
    gw: String,
    nb: String,
}

fn setup(p: &str) -> Names {
    let n = Names {
        sbx: format!("{p}-sbx"),
        gw: format!("{p}-gw"),
        nb: format!("{p}-nb"),
    };
    teardown(&n);
    for x in [&n.sbx, &n.gw, &n.nb] {
        sh(&["ip", "netns", "add", x]);
        ns(x, &["ip", "link", "set", "lo", "up"]);
    }
    // No multicast snooping: the bridge would then forward the sandbox's
    // neighbour solicitations by what it has learnt from MLD reports, a
    // timing the tests do not control.
    ns(
        &n.gw,
        &[
            "ip",
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "mcast_snooping",
            "0",
        ],
    );
    ns(&n.gw, &["ip", "addr", "add", "10.77.0.1/24", "dev", "br0"]);
    ns(
        &n.gw,
        &[
            "ip",
            "-6",
            "addr",
            "add",
            "fd77::1/64",
            "dev",
            "br0",
            "nodad",
        ],
    );
    ns(&n.gw, &["ip", "link", "set", "br0", "up"]);
    for a in [
        "198.18.0.53",
        "198.18.0.54",
        "198.18.1.1",
        "198.18.1.2",
        "198.18.1.3",
        LIGHT,
        "198.18.2.1",
        "198.18.3.1",
    ] {
        ns(
            &n.gw,
            &["ip", "addr", "add", &format!("{a}/32"), "dev", "lo"],
        );
    }
    for i in 1..=16 {
        ns(
            &n.gw,
            &[
                "ip",
                "addr",
                "add",
                &format!("198.18.5.{i}/32"),
                "dev",
                "lo",
            ],
        );
        ns(
            &n.gw,
            &[
                "ip",
                "addr",
                "add",
                &format!("198.18.6.{i}/32"),
                "dev",
                "lo",
            ],
        );
    }
    for a in ["2001:2::1:1", "2001:2::2:1", "2001:2::3:1"] {
        ns(
            &n.gw,
            &[
                "ip",
                "-6",
                "addr",
                "add",
                &format!("{a}/128"),
                "dev",
                "lo",
                "nodad",
            ],
        );
    }
    for (x, addr4, addr6, veth) in [
        (&n.sbx, "10.77.0.2/24", "fd77::2/64", "vsbx"),
        (&n.nb, "10.77.0.3/24", "fd77::3/64", "vnb"),
    ] {
        ns(
            &n.gw,
            &[
                "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", x,
            ],
        );
        ns(&n.gw, &["ip", "link", "set", veth, "master", "br0", "up"]);
        ns(x, &["ip", "addr", "add", addr4, "dev", "eth0"]);
        ns(
            x,
            &["ip", "-6", "addr", "add", addr6, "dev", "eth0", "nodad"],
        );
        ns(x, &["ip", "link", "set", "eth0", "up"]);
        ns(x, &["ip", "route", "add", "default", "via", "10.77.0.1"]);
        ns(
            x,
            &["ip", "-6", "route", "add", "default", "via", "fd77::1"],
        );
    }
    let etc = PathBuf::from(format!("/etc/netns/{}", n.sbx));
    std::fs::create_dir_all(&etc).expect("/etc/netns");
    std::fs::write(
        etc.join("resolv.conf"),
        "nameserver 198.18.0.53\noptions ndots:0\n",
    )
    .expect("resolv.conf");
    n
}

fn teardown(n: &Names) {
    for x in [&n.sbx, &n.gw, &n.nb] {
        // The DNS filter and anything else started inside go first.
        if let Ok(o) = Command::new("ip").args(["netns", "pids", x]).output() {
            for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                if let Ok(pid) = pid.parse::<i32>() {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        let _ = Command::new("ip").args(["netns", "del", x]).output();
    }
    let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", n.sbx));
}

/// The fixed zone: built-in names get 198.18.5.N and 2001:2::5:N; rotate.test
/// answers a new address on each query with TTL 1, like a CDN.
struct Zone {
    v4: HashMap<String, Vec<IpAddr>>,
    rotate: AtomicU32,
}

impl Zone {
    fn new() -> Self {
        let mut v4: HashMap<String, Vec<IpAddr>> = HashMap::new();
        let defaults = sbx_fw::allowlist::DEFAULT_NAMES
            .iter()
            .filter(|n| !n.starts_with('*'));
        for (i, name) in defaults.enumerate() {
            let e = v4.entry((*name).to_owned()).or_default();
            e.push(format!("198.18.5.{}", i + 1).parse().unwrap());
            e.push(format!("2001:2::5:{}", i + 1).parse().unwrap());
        }
        for (n, a) in V4.iter().chain(V6) {
            v4.entry((*n).to_owned())
                .or_default()
                .push(a.parse().unwrap());
        }
        Self {
            v4,
            rotate: AtomicU32::new(0),
        }
    }

    fn answer(&self, q: &[u8]) -> Option<Vec<u8>> {
        let m = Message::from_vec(q).ok()?;
        let query = m.queries.first()?.clone();
        let name = query
            .name
            .to_ascii()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if SILENT.contains(&name.as_str()) {
            return None;
        }
        let mut r = Message::new(m.metadata.id, MessageType::Response, m.metadata.op_code);
        r.metadata.recursion_desired = m.metadata.recursion_desired;
        r.metadata.recursion_available = true;
        r.add_query(query.clone());
        let qt = query.query_type;
        let rec = |d: RData, ttl: u32| Record::from_rdata(query.name.clone(), ttl, d);
        if name.ends_with(".tunnel.test") {
            if qt == RecordType::TXT {
                r.add_answer(rec(RData::TXT(TXT::new(vec!["exfiltrated".into()])), 60));
            }
        } else if name == "rotate.test" {
            if qt == RecordType::A {
                let n = self.rotate.fetch_add(1, Ordering::Relaxed) % 16 + 1;
                r.add_answer(rec(
                    RData::A(A(format!("198.18.6.{n}").parse().unwrap())),
                    1,
                ));
            }
        } else if let Some(addrs) = self.v4.get(&name) {
            for a in addrs {
                match (a, qt) {
                    (IpAddr::V4(v), RecordType::A) => r.add_answer(rec(RData::A(A(*v)), 300)),
                    (IpAddr::V6(v), RecordType::AAAA) => {
                        r.add_answer(rec(RData::AAAA(AAAA(*v)), 300))
                    }
                    _ => &mut r,
                };
            }
        } else {
            r.metadata.response_code = ResponseCode::NXDomain;
        }
        r.to_vec().ok()
    }
}

/// Every query that arrives is logged to DIR/queries.log as "ADDR NAME",
/// so a test can count what got to the resolver and from where.
fn dns_server(gw: String, addr: &'static str, zone: Arc<Zone>, log: PathBuf) {
    std::thread::spawn(move || {
        if !gw.is_empty() {
            enter(&gw);
        }
        let s = UdpSocket::bind(addr).expect("bind dns");
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("query log");
        let mut buf = [0u8; 4096];
        loop {
            let Ok((n, from)) = s.recv_from(&mut buf) else {
                continue;
            };
            let m = Message::from_vec(&buf[..n]).ok();
            let name = m
                .as_ref()
                .and_then(|m| m.queries.first().map(|q| q.name.to_ascii()))
                .unwrap_or_else(|| "?".into());
            // What else a query carries besides its name: type, the raw
            // header flags (id and counts aside) and EDNS's.
            let rest = m
                .as_ref()
                .and_then(|m| {
                    let q = m.queries.first()?;
                    let e = m.edns.as_ref();
                    Some(format!(
                        "type={} flags={:02x}{:02x} edns={}/{}/{:04x}",
                        u16::from(q.query_type()),
                        buf[2],
                        buf[3],
                        e.map_or(0, |e| e.max_payload()),
                        e.is_some_and(|e| e.flags().dnssec_ok),
                        e.map_or(0, |e| e.flags().z),
                    ))
                })
                .unwrap_or_default();
            let _ = writeln!(log, "{addr} {from} {name} {rest}");
            if let Some(a) = zone.answer(&buf[..n]) {
                let _ = s.send_to(&a, from);
            }
        }
    });
}

fn tcp_sink(netns: String, addr: SocketAddr) {
    std::thread::spawn(move || {
        enter(&netns);
        let l = TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut c = c;
                let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
                let mut buf = [0u8; 1024];
                // Echo, so a test can tell a live connection from a dead one.
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 || c.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
}

fn udp_echo(netns: String, addr: SocketAddr) {
    std::thread::spawn(move || {
        enter(&netns);
        let s = UdpSocket::bind(addr).expect("bind udp");
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    });
}

fn meta_json() -> String {
    let mut web = vec!["198.18.3.0/24".to_owned(), "2001:2::3:0/112".to_owned()];
    // 48 more ranges, none adjacent, as GitHub publishes dozens.
    web.extend((0..48).map(|i| format!("203.0.113.{}/32", 2 * i + 1)));
    serde_json::json!({"verifiable_password_authentication": false, "web": web, "api": ["198.18.3.0/24"], "git": ["198.18.3.0/24", "2001:2::3:0/112"]}).to_string()
}

fn tls_server(gw: String, dir: &Path) {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sbx-fwbed test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("ca");
    let leaf_key = rcgen::KeyPair::generate().expect("key");
    let leaf = rcgen::CertificateParams::new(vec![
        "meta.github.test".to_owned(),
        "allowed.test".to_owned(),
    ])
    .expect("params")
    .signed_by(&leaf_key, &ca)
    .expect("leaf");
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("ca.pem");
    std::fs::write(dir.join("ca.der"), ca.der()).expect("ca.der");
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("tls versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).expect("key der"),
        )
        .expect("server config"),
    );
    let body = meta_json();
    for addr in ["0.0.0.0:443", "[::]:443"] {
        let (gw, config, body) = (gw.clone(), config.clone(), body.clone());
        std::thread::spawn(move || {
            enter(&gw);
            let l = socket_v6only(addr);
            for c in l.incoming().flatten() {
                let (config, body) = (config.clone(), body.clone());
                std::thread::spawn(move || {
                    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(conn, c);
                    let mut req = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&buf[..n]),
                        }
                    }
                    // GET /bytes/N (the benchmark): N bytes of body.
                    let head = String::from_utf8_lossy(&req);
                    if let Some(n) = head
                        .strip_prefix("GET /bytes/")
                        .and_then(|r| r.split(' ').next())
                        .and_then(|n| n.parse::<u64>().ok())
                    {
                        let _ = write!(
                            tls,
                            "HTTP/1.1 200 OK\r\ncontent-length: {n}\r\nconnection: close\r\n\r\n"
                        );
                        let chunk = vec![0u8; 256 * 1024];
                        let mut left = n;
                        while left > 0 {
                            let k = left.min(chunk.len() as u64) as usize;
                            if tls.write_all(&chunk[..k]).is_err() {
                                return;
                            }
                            left -= k as u64;
                        }
                        let _ = tls.flush();
                        tls.conn.send_close_notify();
                        let _ = tls.flush();
                        return;
                    }
                    let _ = write!(
                        tls,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = tls.flush();
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                });
            }
        });
    }
}

/// std binds [::] dual-stack; a separate v4 listener needs v6only on the v6 one.
fn socket_v6only(addr: &str) -> TcpListener {
    socket_with(addr, false)
}

/// A listener on `addr`; all of them share the port (SO_REUSEPORT), so
/// the light origin's one address can be taken from the TLS server's
/// wildcard (the more specific listener gets the connections); `defer`:
/// accept returns once the client has sent something.
fn socket_with(addr: &str, defer: bool) -> TcpListener {
    use nix::sys::socket::{
        AddressFamily, Backlog, SockFlag, SockType, SockaddrStorage, bind, listen, setsockopt,
        socket, sockopt,
    };
    let a: SocketAddr = addr.parse().unwrap();
    let fam = if a.is_ipv6() {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    let fd = socket(fam, SockType::Stream, SockFlag::SOCK_CLOEXEC, None).expect("socket");
    setsockopt(&fd, sockopt::ReuseAddr, &true).expect("reuseaddr");
    setsockopt(&fd, sockopt::ReusePort, &true).expect("reuseport");
    if defer {
        sbx_sys::setsockopt_bytes(
            std::os::fd::AsFd::as_fd(&fd),
            nix::libc::IPPROTO_TCP,
            nix::libc::TCP_DEFER_ACCEPT,
            &5i32.to_ne_bytes(),
        )
        .expect("defer accept");
    }
    if a.is_ipv6() {
        setsockopt(&fd, sockopt::Ipv6V6Only, &true).expect("v6only");
    }
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrStorage::from(a),
    )
    .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    listen(&fd, Backlog::new(if defer { 4096 } else { 128 }).unwrap()).expect("listen");
    TcpListener::from(fd)
}

/// A TLS 1.3 ServerHello record as a server sends it first (x25519 key
/// share, TLS_AES_128_GCM_SHA256), fixed bytes.
fn server_hello() -> Vec<u8> {
    let mut b = vec![0x03, 0x03];
    b.extend((0..32u8).map(|i| i ^ 0xa5)); // random
    b.push(32);
    b.extend([0x11u8; 32]); // the client's legacy session id, echoed
    b.extend_from_slice(&[0x13, 0x01, 0]); // cipher suite, null compression
    let mut ext = vec![0x00, 0x2b, 0, 2, 0x03, 0x04]; // TLS 1.3
    ext.extend_from_slice(&[0x00, 0x33, 0, 36, 0, 0x1d, 0, 32]); // key share
    ext.extend((0..32u8).map(|i| i.wrapping_mul(3)));
    b.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    b.extend(ext);
    let mut hs = vec![0x02, 0, (b.len() >> 8) as u8, b.len() as u8];
    hs.extend(b);
    let mut rec = vec![0x16, 0x03, 0x03];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend(hs);
    rec
}

/// The benchmark's light origin on 198.18.1.4:443: each connection's
/// ClientHello record is read whole, a ready-made ServerHello written,
/// and the connection closed; no crypto, no thread a connection (four
/// threads accept from one listener that hands over connections only
/// once their hello is there). With it, what a path costs beyond the
/// far side's own few system calls is the proxy's, where the TLS server
/// (a thread and a full handshake a connection) would set the rate.
fn light_origin(gw: String) {
    std::thread::spawn(move || {
        enter(&gw);
        let l = Arc::new(socket_with(&format!("{LIGHT}:443"), true));
        let hello: Arc<[u8]> = server_hello().into();
        let serve = move |l: Arc<TcpListener>, hello: Arc<[u8]>| {
            for c in l.incoming().flatten() {
                let mut c = c;
                let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                // Usually one read: the whole record is there on accept.
                let mut buf = [0u8; 16 * 1024];
                let mut have = 0;
                let whole = loop {
                    match c.read(&mut buf[have..]) {
                        Ok(0) | Err(_) => break false,
                        Ok(k) => have += k,
                    }
                    if buf[0] != 0x16 {
                        break false;
                    }
                    if have >= 5 && have >= 5 + usize::from(u16::from_be_bytes([buf[3], buf[4]])) {
                        break true;
                    }
                    if have == buf.len() {
                        break false;
                    }
                };
                if whole {
                    let _ = c.write_all(&hello);
                }
            }
        };
        for _ in 0..3 {
            let (l, hello) = (l.clone(), hello.clone());
            std::thread::spawn(move || serve(l, hello));
        }
        serve(l, hello);
    });
}

fn as_agent(cmd: &[String]) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    sbx_guest::seccomp::register().expect("seccomp filters");
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..]);
    let creds = sbx_sys::Creds {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    sbx_sys::drop_to(&mut c, &creds).expect("drop_to");
    let st = c.status().expect("spawn");
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "bench") {
        std::process::exit(bench::main(&args[2..]));
    }
    // `sbx-fwbed agent -- CMD...`: CMD as the agent, started the way
    // sbx-guest starts every agent process (its seccomp filters, uid 1000,
    // no capabilities, no_new_privs).
    if args.get(1).is_some_and(|a| a == "agent") && args.get(2).is_some_and(|a| a == "--") {
        std::process::exit(as_agent(&args[3..]));
    }
    if args.get(1).is_some_and(|a| a == "attack") {
        std::process::exit(attack::main(&args[2..]));
    }
    // `sbx-fwbed resolver DIR [ADDR]`: the zone on 127.0.0.11:53 (or ADDR:
    // Docker's own listens on a random port behind a DNAT) in this
    // namespace, standing in for Docker's embedded resolver, until killed.
    if args.get(1).is_some_and(|a| a == "resolver") && (3..=4).contains(&args.len()) {
        let log = PathBuf::from(&args[2]).join("queries.log");
        let addr: &'static str = match args.get(3) {
            Some(a) => Box::leak(a.clone().into_boxed_str()),
            None => "127.0.0.11:53",
        };
        dns_server(String::new(), addr, Arc::new(Zone::new()), log);
        std::thread::sleep(Duration::from_millis(100));
        println!("ready");
        let _ = std::io::stdout().flush();
        loop {
            std::thread::park();
        }
    }
    if args.len() != 3 {
        eprintln!("usage: sbx-fwbed PREFIX DIR");
        std::process::exit(64);
    }
    let (prefix, dir) = (&args[1], PathBuf::from(&args[2]));
    std::fs::create_dir_all(&dir).expect("dir");
    let n = setup(prefix);
    let zone = Arc::new(Zone::new());
    dns_server(
        n.gw.clone(),
        "198.18.0.53:53",
        zone.clone(),
        dir.join("queries.log"),
    );
    dns_server(
        n.gw.clone(),
        "198.18.0.54:53",
        zone,
        dir.join("queries.log"),
    );
    tls_server(n.gw.clone(), &dir);
    light_origin(n.gw.clone());
    for port in [22, 80, 8080] {
        tcp_sink_dual(&n.gw, port);
    }
    // Per address: a wildcard UDP socket would answer from another source.
    for a in ["198.18.1.1", "198.18.2.1", "198.18.3.1"] {
        udp_echo(n.gw.clone(), format!("{a}:443").parse().unwrap());
    }
    for port in [443, 8080] {
        tcp_sink(n.nb.clone(), format!("10.77.0.3:{port}").parse().unwrap());
        tcp_sink(n.nb.clone(), format!("[fd77::3]:{port}").parse().unwrap());
    }
    std::thread::sleep(Duration::from_millis(100));
    let bed = serde_json::json!({
        "sandbox": n.sbx, "gateway": n.gw, "neighbour": n.nb,
        "dir": dir, "ca": dir.join("ca.pem"),
        "meta_url": "https://meta.github.test/meta",
    });
    println!("{bed}");
    let _ = std::io::stdout().flush();
    // Until the test (or bench) closes our stdin.
    let mut line = String::new();
    while std::io::stdin()
        .lock()
        .read_line(&mut line)
        .is_ok_and(|n| n > 0)
    {
        line.clear();
    }
    teardown(&n);
}

fn tcp_sink_dual(netns: &str, port: u16) {
    tcp_sink(netns.to_owned(), format!("0.0.0.0:{port}").parse().unwrap());
    let ns6 = netns.to_owned();
    std::thread::spawn(move || {
        enter(&ns6);
        let l = socket_v6only(&format!("[::]:{port}"));
        for c in l.incoming().flatten() {
            drop(c);
        }
    });
}
