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
