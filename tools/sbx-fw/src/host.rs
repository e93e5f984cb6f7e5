//! What this host has: CAP_NET_ADMIN, IPv6, and its own subnets and
//! gateways (never reachable from the sandbox).

use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// Whether this kernel has IPv6 at all; without it there is nothing to filter.
pub fn has_ipv6() -> bool {
    std::path::Path::new("/proc/sys/net/ipv6").exists()
}

/// Whether this process holds CAP_NET_ADMIN (bit 12 of CapEff).
pub fn has_net_admin() -> bool {
    cap_eff().is_some_and(|c| c & (1 << 12) != 0)
}

fn cap_eff() -> Option<u64> {
    let s = fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.split_whitespace().nth(1)?, 16).ok()
}

/// This namespace's on-link subnets and default gateways, from the
/// kernel's routing tables: the bridge, the host and the neighbours.
pub fn local_nets() -> Vec<IpNet> {
    let mut out = Vec::new();
    if let Ok(t) = fs::read_to_string("/proc/net/route") {
        out.extend(parse_route4(&t));
    }
    if let Ok(t) = fs::read_to_string("/proc/net/ipv6_route") {
        out.extend(parse_route6(&t));
    }
    out.sort();
    out.dedup();
    out
}

fn parse_route4(t: &str) -> Vec<IpNet> {
    let mut out = Vec::new();
    for l in t.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 8 || f[0] == "lo" {
            continue;
        }
        let hex = |s: &str| {
            u32::from_str_radix(s, 16)
                .ok()
                .map(|v| Ipv4Addr::from(u32::from_be(v)))
        };
        let (Some(dst), Some(gw), Some(mask)) = (hex(f[1]), hex(f[2]), hex(f[7])) else {
            continue;
        };
        if !gw.is_unspecified() {
            out.push(IpNet::from(IpAddr::V4(gw)));
        }
        if !dst.is_unspecified()
            && let Ok(n) = ipnet::Ipv4Net::with_netmask(dst, mask)
        {
            out.push(IpNet::V4(n.trunc()));
        }
    }
    out
}

fn parse_route6(t: &str) -> Vec<IpNet> {
    let mut out = Vec::new();
    for l in t.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 10 || f[9] == "lo" {
            continue;
        }
        let addr = |s: &str| u128::from_str_radix(s, 16).ok().map(Ipv6Addr::from);
        let (Some(dst), Ok(plen), Some(gw)) =
            (addr(f[0]), u8::from_str_radix(f[1], 16), addr(f[4]))
        else {
            continue;
        };
        if !gw.is_unspecified() {
            out.push(IpNet::from(IpAddr::V6(gw)));
        }
        // Skip the default route, multicast and link-local (already never-reachable).
        if plen > 0
            && plen < 128
            && (dst.segments()[0] & 0xff00) != 0xff00
            && (dst.segments()[0] & 0xffc0) != 0xfe80
            && let Ok(n) = ipnet::Ipv6Net::new(dst, plen)
        {
            out.push(IpNet::V6(n.trunc()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_give_subnets_and_gateways() {
        let r4 = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                  eth0\t00000000\t01004D0A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
                  eth0\t00004D0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        let s: Vec<String> = parse_route4(r4).iter().map(|n| n.to_string()).collect();
        assert_eq!(s, ["10.77.0.1/32", "10.77.0.0/24"]);
        let r6 = "fd770000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n\
                  00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd770000000000000000000000000001 00000400 00000001 00000000 00000003     eth0\n\
                  fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n";
        let s: Vec<String> = parse_route6(r6).iter().map(|n| n.to_string()).collect();
        assert_eq!(s, ["fd77::/64", "fd77::1/128"]);
    }
}
