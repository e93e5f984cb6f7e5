//! Asking the upstream resolvers, behind a trait so the filter's
//! fail-closed paths can be tested with a fake upstream.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::Instant;

use hickory_proto::op::Message;

use super::UPSTREAM_TIMEOUT;
use super::wire::{be16, random_id, same_question};

/// Where the filter's questions go. The real one asks over the network;
/// tests give canned replies, garbage or silence.
pub trait Upstream: Send + Sync {
    /// One exchange over UDP with the resolver at `ip`: the reply's bytes.
    fn udp(&self, q: &Message, ip: IpAddr) -> std::io::Result<Vec<u8>>;
    /// The same over TCP, for an answer truncated over UDP.
    fn tcp(&self, q: &Message, ip: IpAddr) -> std::io::Result<Vec<u8>>;
}

/// The upstream resolvers on the network, port 53.
#[derive(Debug, Clone, Copy, Default)]
pub struct Network;

impl Upstream for Network {
    fn udp(&self, q: &Message, ip: IpAddr) -> std::io::Result<Vec<u8>> {
        exchange_udp(q, ip)
    }

    fn tcp(&self, q: &Message, ip: IpAddr) -> std::io::Result<Vec<u8>> {
        exchange_tcp(q, ip)
    }
}

/// One fresh UDP socket per upstream query: the kernel picks a random
/// ephemeral port, so an off-path forger must guess port and id (and the
/// 0x20 case pattern), not read a fixed port from /proc/net/udp. Root's
/// flows are connmarked (plan.rs), so the closed sockets' conntrack
/// entries open nothing for the agent. One socket per worker at a time.
fn exchange_udp(q: &Message, ip: IpAddr) -> std::io::Result<Vec<u8>> {
    let bind: SocketAddr = if ip.is_ipv6() {
        SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), 0)
    } else {
        SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), 0)
    };
    let sock = UdpSocket::bind(bind)?;
    sock.connect(SocketAddr::new(ip, 53))?;
    let mut q = q.clone();
    let id = random_id();
    q.metadata.id = id;
    let body = q.to_vec().map_err(std::io::Error::other)?;
    sock.send(&body)?;
    let deadline = Instant::now() + UPSTREAM_TIMEOUT;
    let mut buf = vec![0u8; 65535];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        sock.set_read_timeout(Some(left))?;
        let n = sock.recv(&mut buf)?;
        // Another id is a stray or a forgery: keep waiting for ours.
        if be16(&buf[..n], 0) == Some(id) && same_question(&body, &buf[..n]) {
            return Ok(buf[..n].to_vec());
        }
    }
}

/// A truncated UDP answer is asked again over TCP (a short-lived socket;
/// rare, and root's flows are marked in any case).
fn exchange_tcp(q: &Message, upstream: IpAddr) -> std::io::Result<Vec<u8>> {
    let to = SocketAddr::new(upstream, 53);
    let mut s = TcpStream::connect_timeout(&to, UPSTREAM_TIMEOUT)?;
    s.set_read_timeout(Some(UPSTREAM_TIMEOUT))?;
    s.set_write_timeout(Some(UPSTREAM_TIMEOUT))?;
    let body = q.to_vec().map_err(std::io::Error::other)?;
    let len = u16::try_from(body.len()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let mut framed = len.to_be_bytes().to_vec();
    framed.extend_from_slice(&body);
    s.write_all(&framed)?;
    read_framed(&mut s)
}

fn read_framed(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 2];
    s.read_exact(&mut len)?;
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut buf)?;
    Ok(buf)
}
