//! Netlink requests the firewall needs that no tool offers cheaply: a
//! conntrack flush is one datagram here against a process for conntrack(8).

use std::io;
use std::os::fd::AsRawFd;

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto, socket,
};

/// Flush the conntrack table of this network namespace, both families:
/// an IPCTNL_MSG_CT_DELETE with no tuple and family AF_UNSPEC. An empty
/// table (ENOENT) is success.
pub fn flush_conntrack() -> io::Result<()> {
    const NFNL_SUBSYS_CTNETLINK: u16 = 1;
    const IPCTNL_MSG_CT_DELETE: u16 = 2;
    const NLM_F_REQUEST: u16 = 1;
    const NLM_F_ACK: u16 = 4;
    const NLMSG_ERROR: u16 = 2;
    let ctx = |what: &str, e: nix::Error| {
        io::Error::new(io::Error::from(e).kind(), format!("{what}: {e}"))
    };
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkNetFilter,
    )
    .map_err(|e| ctx("socket", e))?;
    let mut msg = Vec::with_capacity(20);
    msg.extend_from_slice(&20u32.to_ne_bytes()); // nlmsg_len
    msg.extend_from_slice(&((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE).to_ne_bytes());
    msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes()); // seq
    msg.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel's
    msg.extend_from_slice(&[0, 0, 0, 0]); // nfgenmsg: AF_UNSPEC, v0, res_id 0
    sendto(
        fd.as_raw_fd(),
        &msg,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .map_err(|e| ctx("send", e))?;
    let mut buf = [0u8; 256];
    let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()).map_err(|e| ctx("recv", e))?;
    if n >= 20 && u16::from_ne_bytes([buf[4], buf[5]]) == NLMSG_ERROR {
        let code = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
        if code != 0 && code != -(nix::Error::ENOENT as i32) {
            return Err(io::Error::from_raw_os_error(-code));
        }
    }
    Ok(())
}

/// The uid owning the TCP socket at `peer` connected to `ours` in this
/// network namespace (a client on this machine), or None when there is
/// none here (a client on another machine, or one that already closed).
/// One exact SOCK_DIAG_BY_FAMILY lookup (inet_diag_req_v2), not a scan
/// of /proc/net/tcp.
pub fn tcp_peer_uid(
    ours: std::net::SocketAddr,
    peer: std::net::SocketAddr,
) -> io::Result<Option<u32>> {
    use std::net::IpAddr;
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLM_F_REQUEST: u16 = 1;
    const NLMSG_ERROR: u16 = 2;
    const IPPROTO_TCP: u8 = 6;
    let ctx = |what: &str, e: nix::Error| {
        io::Error::new(io::Error::from(e).kind(), format!("sock_diag {what}: {e}"))
    };
    // Both ends in one family: an IPv4 client of a dual-stack listener
    // is seen as IPv4-mapped on ours and plain IPv4 on its own.
    let (src, dst) = (peer.ip().to_canonical(), ours.ip().to_canonical());
    let family = match (src, dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => libc::AF_INET as u8,
        (IpAddr::V6(_), IpAddr::V6(_)) => libc::AF_INET6 as u8,
        _ => return Ok(None),
    };
    let addr = |ip: IpAddr| -> [u8; 16] {
        let mut b = [0u8; 16];
        match ip {
            IpAddr::V4(v4) => b[..4].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => b = v6.octets(),
        }
        b
    };
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )
    .map_err(|e| ctx("socket", e))?;
    let mut msg = Vec::with_capacity(72);
    msg.extend_from_slice(&72u32.to_ne_bytes()); // nlmsg_len
    msg.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    msg.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes()); // seq
    msg.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel's
    // inet_diag_req_v2: family, protocol, ext, pad, states (all).
    msg.extend_from_slice(&[family, IPPROTO_TCP, 0, 0]);
    msg.extend_from_slice(&u32::MAX.to_ne_bytes());
    // inet_diag_sockid: the peer's socket, seen from its side.
    msg.extend_from_slice(&peer.port().to_be_bytes());
    msg.extend_from_slice(&ours.port().to_be_bytes());
    msg.extend_from_slice(&addr(src));
    msg.extend_from_slice(&addr(dst));
    msg.extend_from_slice(&0u32.to_ne_bytes()); // interface: any
    msg.extend_from_slice(&[0xff; 8]); // INET_DIAG_NOCOOKIE
    sendto(
        fd.as_raw_fd(),
        &msg,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .map_err(|e| ctx("send", e))?;
    let mut buf = [0u8; 512];
    let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()).map_err(|e| ctx("recv", e))?;
    let typ = (n >= 16).then(|| u16::from_ne_bytes([buf[4], buf[5]]));
    match typ {
        // nlmsghdr (16), then inet_diag_msg: 4 bytes, the sockid (48),
        // expires, rqueue, wqueue (12), uid.
        Some(SOCK_DIAG_BY_FAMILY) if n >= 84 => Ok(Some(u32::from_ne_bytes([
            buf[80], buf[81], buf[82], buf[83],
        ]))),
        Some(NLMSG_ERROR) if n >= 20 => {
            let code = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
            if code == -(nix::Error::ENOENT as i32) {
                Ok(None)
            } else {
                Err(io::Error::from_raw_os_error(-code))
            }
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("sock_diag: an answer of {n} bytes, type {typ:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_clients_uid_is_found_and_a_closed_one_is_not() {
        for host in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(l) = std::net::TcpListener::bind(host) else {
                continue; // no IPv6 here
            };
            let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (s, peer) = l.accept().unwrap();
            let ours = s.local_addr().unwrap();
            assert_eq!(peer, c.local_addr().unwrap());
            let uid = nix::unistd::geteuid().as_raw();
            assert_eq!(tcp_peer_uid(ours, peer).unwrap(), Some(uid), "{host}");
            // Not a socket that exists: another port of the peer.
            let mut gone = peer;
            gone.set_port(if peer.port() == 1 { 2 } else { 1 });
            assert_eq!(tcp_peer_uid(ours, gone).unwrap(), None, "{host}");
        }
    }
}
