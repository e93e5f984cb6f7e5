//! Network probes: try a connection and say whether the firewall refused
//! it. A refusal is proven only by what a local REJECT produces at once
//! (a TCP reset, an ICMP unreachable, EPERM); silence proves nothing.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use nix::sys::socket::{AddressFamily, SockFlag, SockProtocol, SockType, socket};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    Tcp(SocketAddr),
    Udp(SocketAddr),
    /// A DNS query for NAME of TYPE to a server.
    Dns(SocketAddr, String, RecordType),
    /// Opening a raw IP socket.
    Raw,
    /// Opening a packet (AF_PACKET) socket.
    Packet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Refused locally: reset, unreachable, permission denied.
    Refused,
    /// A DNS server answered, refusing the name.
    DnsRefused,
    /// The connection opened, the datagram was answered, the socket was made.
    Open,
    /// No answer in time: neither proven open nor proven refused.
    Timeout,
    /// Some other error (in `detail`).
    Error,
}

#[derive(Debug, Clone, Serialize)]
pub struct Result {
    pub probe: String,
    pub verdict: Verdict,
    pub detail: String,
    pub ms: f64,
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Probe::Tcp(a) => write!(f, "tcp:{a}"),
            Probe::Udp(a) => write!(f, "udp:{a}"),
            Probe::Dns(a, n, t) => write!(f, "dns:{a}/{n}/{t}"),
            Probe::Raw => f.write_str("raw"),
            Probe::Packet => f.write_str("packet"),
        }
    }
}

impl std::str::FromStr for Probe {
    type Err = String;
    /// `tcp:ADDR:PORT`, `udp:ADDR:PORT`, `dns:ADDR[:PORT]/NAME[/TYPE]`,
    /// `raw`, `packet`; IPv6 addresses in brackets.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let bad = |why: &str| format!("invalid probe \"{s}\": {why}");
        let sock =
            |a: &str, default_port: Option<u16>| -> std::result::Result<SocketAddr, String> {
                a.parse::<SocketAddr>().or_else(|_| match default_port {
                    Some(p) => a
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .parse::<IpAddr>()
                        .map(|ip| SocketAddr::new(ip, p))
                        .map_err(|_| bad("expected ADDR or ADDR:PORT")),
                    None => Err(bad("expected ADDR:PORT ([v6]:PORT for IPv6)")),
                })
            };
        match s.split_once(':') {
            Some(("tcp", a)) => Ok(Probe::Tcp(sock(a, None)?)),
            Some(("udp", a)) => Ok(Probe::Udp(sock(a, None)?)),
            Some(("dns", rest)) => {
                let mut parts = rest.split('/');
                let server = sock(parts.next().unwrap_or(""), Some(53))?;
                let name = parts
                    .next()
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| bad("expected dns:SERVER/NAME"))?;
                let t = match parts.next() {
                    Some(t) => t
                        .to_ascii_uppercase()
                        .parse()
                        .map_err(|_| bad("unknown record type"))?,
                    None => RecordType::A,
                };
                Ok(Probe::Dns(server, name.to_owned(), t))
            }
            None if s == "raw" => Ok(Probe::Raw),
            None if s == "packet" => Ok(Probe::Packet),
            _ => Err(bad("expected tcp:, udp:, dns:, raw or packet")),
        }
    }
}

fn classify(e: &std::io::Error) -> (Verdict, String) {
    let v = match e.kind() {
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionReset | ErrorKind::PermissionDenied => {
            Verdict::Refused
        }
        ErrorKind::NetworkUnreachable => Verdict::Refused,
        ErrorKind::TimedOut | ErrorKind::WouldBlock => Verdict::Timeout,
        _ => Verdict::Error,
    };
    let mut d = e.to_string();
    if e.kind() == ErrorKind::NetworkUnreachable {
        d.push_str(" (no route)");
    }
    (v, d)
}

pub fn run(p: &Probe, timeout: Duration) -> Result {
    let t0 = Instant::now();
    let (verdict, detail) = match p {
        Probe::Tcp(a) => match TcpStream::connect_timeout(a, timeout) {
            Ok(s) if redirected(*a) => proxied(s, *a, timeout),
            Ok(_) => (Verdict::Open, "connected".into()),
            Err(e) => classify(&e),
        },
        Probe::Udp(a) => udp(*a, b"sbx-fw probe", timeout),
        Probe::Dns(a, name, t) => dns(*a, name, *t, timeout),
        Probe::Raw => sock_probe(AddressFamily::Inet, SockType::Raw, SockProtocol::Icmp),
        Probe::Packet => sock_probe(AddressFamily::Packet, SockType::Raw, SockProtocol::EthAll),
    };
    Result {
        probe: p.to_string(),
        verdict,
        detail,
        ms: t0.elapsed().as_secs_f64() * 1e3,
    }
}

/// Whether this connection went to sbx-fw's proxy rather than to `a`:
/// proxy mode redirects every uid's TCP 80 and 443 but root's and the
/// proxy's own.
fn redirected(a: SocketAddr) -> bool {
    let uid = nix::unistd::geteuid();
    matches!(a.port(), 80 | 443)
        && !a.ip().is_loopback()
        && !uid.is_root()
        && uid.as_raw() != crate::proxy::PROXY_UID
        && crate::state::State::load(&crate::state::dir_from_env())
            .ok()
            .flatten()
            .is_some_and(|st| st.proxy)
}

/// A connect to the proxy succeeds whatever the address; what the caller
/// really gets is the proxy's verdict on a connection naming no host: a
/// nameless ClientHello (443) or a Host-less request (80), then a reset
/// (refused) or an answer (open).
fn proxied(mut s: TcpStream, a: SocketAddr, timeout: Duration) -> (Verdict, String) {
    use std::io::{Read, Write};
    let first = if a.port() == 443 {
        crate::proxy::sni::client_hello(None)
    } else {
        b"GET / HTTP/1.1\r\n\r\n".to_vec()
    };
    if let Err(e) = s
        .set_read_timeout(Some(timeout))
        .and_then(|()| s.write_all(&first))
    {
        return classify(&e);
    }
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => (
            Verdict::Refused,
            "closed by sbx-fw's proxy (no allowed name)".into(),
        ),
        Ok(_) => (Verdict::Open, "answered through sbx-fw's proxy".into()),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => (
            Verdict::Refused,
            "reset by sbx-fw's proxy (no allowed name)".into(),
        ),
        Err(e) => classify(&e),
    }
}

fn udp(to: SocketAddr, payload: &[u8], timeout: Duration) -> (Verdict, String) {
    match udp_exchange(to, payload, timeout) {
        Ok(a) => (Verdict::Open, format!("{}-byte answer", a.len())),
        Err(e) => classify(&e),
    }
}

/// A UDP socket of `to`'s family, connected to it, reads timing out.
pub fn connected_udp(to: SocketAddr, timeout: Duration) -> std::io::Result<UdpSocket> {
    let bind: SocketAddr = if to.is_ipv6() {
        "[::]:0".parse().unwrap()
    } else {
        "0.0.0.0:0".parse().unwrap()
    };
    let s = UdpSocket::bind(bind)?;
    s.connect(to)?;
    s.set_read_timeout(Some(timeout))?;
    Ok(s)
}

fn udp_exchange(to: SocketAddr, payload: &[u8], timeout: Duration) -> std::io::Result<Vec<u8>> {
    let s = connected_udp(to, timeout)?;
    s.send(payload)?;
    let mut buf = vec![0u8; 4096];
    let n = s.recv(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

fn dns(to: SocketAddr, name: &str, t: RecordType, timeout: Duration) -> (Verdict, String) {
    let Ok(n) = Name::from_ascii(format!("{}.", name.trim_end_matches('.'))) else {
        return (Verdict::Error, format!("bad name {name}"));
    };
    let mut m = Message::query();
    m.metadata.id = 0x5b5b;
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(n, t));
    let Ok(q) = m.to_vec() else {
        return (Verdict::Error, "cannot encode".into());
    };
    match udp_exchange(to, &q, timeout) {
        Ok(a) => match Message::from_vec(&a) {
            Ok(r) if r.metadata.response_code == hickory_proto::op::ResponseCode::Refused => {
                (Verdict::DnsRefused, "REFUSED".into())
            }
            Ok(r) => (
                Verdict::Open,
                format!(
                    "{} with {} answers",
                    r.metadata.response_code,
                    r.answers.len()
                ),
            ),
            Err(e) => (Verdict::Open, format!("undecodable answer: {e}")),
        },
        Err(e) => classify(&e),
    }
}

fn sock_probe(fam: AddressFamily, ty: SockType, proto: SockProtocol) -> (Verdict, String) {
    match socket(fam, ty, SockFlag::SOCK_CLOEXEC, proto) {
        Ok(_) => (Verdict::Open, "socket created".into()),
        Err(e) if matches!(e, nix::Error::EPERM | nix::Error::EACCES) => {
            (Verdict::Refused, e.desc().into())
        }
        Err(e) => (Verdict::Error, e.desc().into()),
    }
}

/// Run probes in parallel; results in the order given.
pub fn run_all(probes: &[Probe], timeout: Duration) -> Vec<Result> {
    std::thread::scope(|s| {
        let handles: Vec<_> = probes
            .iter()
            .map(|p| s.spawn(move || run(p, timeout)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("probe thread"))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!(
            "tcp:192.0.2.1:443".parse::<Probe>().unwrap(),
            Probe::Tcp("192.0.2.1:443".parse().unwrap())
        );
        assert_eq!(
            "udp:[2001:db8::1]:53".parse::<Probe>().unwrap(),
            Probe::Udp("[2001:db8::1]:53".parse().unwrap())
        );
        assert_eq!(
            "dns:192.0.2.53/x.test/txt".parse::<Probe>().unwrap(),
            Probe::Dns(
                "192.0.2.53:53".parse().unwrap(),
                "x.test".into(),
                RecordType::TXT
            )
        );
        assert_eq!("raw".parse::<Probe>().unwrap(), Probe::Raw);
        assert!("tcp:192.0.2.1".parse::<Probe>().is_err());
        assert!("icmp:1".parse::<Probe>().is_err());
    }

    #[test]
    fn a_closed_local_port_is_refused_and_an_open_one_open() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = Probe::Tcp(l.local_addr().unwrap());
        let port = l.local_addr().unwrap().port();
        drop(l);
        let l2 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open2 = Probe::Tcp(l2.local_addr().unwrap());
        let r = run_all(&[open, open2], Duration::from_millis(200));
        assert_eq!(r[0].verdict, Verdict::Refused, "port {port} was closed");
        assert_eq!(r[1].verdict, Verdict::Open);
    }
}
