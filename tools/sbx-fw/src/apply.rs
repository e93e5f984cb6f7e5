//! Installing a plan: one `ipset restore`, one `iptables-restore` and one
//! `ip6tables-restore` (each a single kernel transaction), then a conntrack
//! flush over netlink so connections opened before the rules die.

use std::fs;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::{Command, Stdio};

use ipnet::IpNet;

use crate::error::NetfilterError;
use crate::plan::Family;

/// Feed `input` to a restore command; its stderr becomes the error.
pub fn restore(program: &str, args: &[&str], input: &str) -> Result<(), NetfilterError> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| NetfilterError::Spawn {
            program: program.to_owned(),
            source,
        })?;
    let io = |source| NetfilterError::Io {
        program: program.to_owned(),
        source,
    };
    let wrote = match child.stdin.take() {
        Some(mut stdin) => stdin.write_all(input.as_bytes()),
        None => Ok(()),
    };
    let out = child.wait_with_output().map_err(io)?;
    if !out.status.success() {
        return Err(NetfilterError::Refused {
            command: format!("{program} {}", args.join(" ")),
            detail: first_line(&out.stderr),
        });
    }
    wrote.map_err(io)
}

/// The first non-empty line of a tool's stderr, or "failed".
fn first_line(stderr: &[u8]) -> String {
    let err = String::from_utf8_lossy(stderr);
    err.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("failed")
        .trim()
        .to_owned()
}

pub fn ipset_restore(script: &str) -> Result<(), NetfilterError> {
    restore("ipset", &["-exist", "restore"], script)
}

/// Both families at once: two independent kernel transactions, so there is
/// no reason to wait for one before starting the other.
pub fn tables_restore_both(v4: &str, v6: Option<&str>) -> Result<(), NetfilterError> {
    std::thread::scope(|s| {
        let six = v6.map(|r| s.spawn(move || tables_restore(Family::V6, r)));
        let four = tables_restore(Family::V4, v4);
        let six = six.map_or(Ok(()), |h| {
            h.join()
                .unwrap_or(Err(NetfilterError::Panicked("ip6tables-restore")))
        });
        four.and(six)
    })
}

pub fn tables_restore(fam: Family, rules: &str) -> Result<(), NetfilterError> {
    restore(backend().restore(fam), &["--wait"], rules)
}

/// Which iptables implementation holds our tables. Both hook into the same
/// netfilter, so packets must pass whichever tables exist; what differs is
/// speed: a legacy table commit takes ~1 ms, an nft-backed one ~15 ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `iptables-legacy*`: x_tables, when the kernel has it.
    Legacy,
    /// Whatever `iptables*` is on this system (nft-backed on Debian).
    System,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Legacy => "legacy",
            Backend::System => "system",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "legacy" => Some(Backend::Legacy),
            "system" | "nft" => Some(Backend::System),
            _ => None,
        }
    }

    /// `iptables` (or `ip6tables`) of this backend, for listing.
    pub fn tables(self, fam: Family) -> &'static str {
        match (fam, self) {
            (Family::V4, Backend::Legacy) => "iptables-legacy",
            (Family::V6, Backend::Legacy) => "ip6tables-legacy",
            (Family::V4, Backend::System) => "iptables",
            (Family::V6, Backend::System) => "ip6tables",
        }
    }

    /// Its `iptables-restore` (or `ip6tables-restore`).
    pub fn restore(self, fam: Family) -> &'static str {
        match (fam, self) {
            (Family::V4, Backend::Legacy) => "iptables-legacy-restore",
            (Family::V6, Backend::Legacy) => "ip6tables-legacy-restore",
            (Family::V4, Backend::System) => "iptables-restore",
            (Family::V6, Backend::System) => "ip6tables-restore",
        }
    }
}

static BACKEND: std::sync::OnceLock<Backend> = std::sync::OnceLock::new();

/// The backend for this namespace: `$SBX_FW_BACKEND`, else the one the last
/// init recorded (a namespace never gets our chains in both), else legacy
/// when the kernel and the tools have it, else the system's.
pub fn backend() -> Backend {
    *BACKEND.get_or_init(|| {
        if let Some(b) = std::env::var("SBX_FW_BACKEND")
            .ok()
            .and_then(|v| Backend::parse(&v))
        {
            return b;
        }
        let dir = crate::state::dir_from_env();
        if let Ok(Some(st)) = crate::state::State::load(&dir) {
            if let Some(b) = Backend::parse(&st.backend) {
                return b;
            }
        }
        let kernel = Path::new("/proc/net/ip_tables_names").exists()
            && (!has_ipv6() || Path::new("/proc/net/ip6_tables_names").exists());
        if kernel && on_path("iptables-legacy-restore") && on_path("ip6tables-legacy-restore") {
            Backend::Legacy
        } else {
            Backend::System
        }
    })
}

fn on_path(prog: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            fs::metadata(d.join(prog)).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
    })
}

/// Whether our chain is in the kernel for this family: "previous state".
pub fn installed(fam: Family) -> bool {
    Command::new(backend().tables(fam))
        .args(["--wait", "-n", "-L", "SBX-OUT"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Proxy mode's redirect: our nat chain with `--noflush`, so the rest of
/// the nat table (Docker's DNS DNAT for 127.0.0.11, anything else) stays,
/// then the jump from nat OUTPUT, inserted only when it is not there yet.
/// Chain before jump: a packet never jumps into a half-filled chain.
pub fn nat_install(fam: Family, chain: &str) -> Result<(), NetfilterError> {
    restore(backend().restore(fam), &["--wait", "--noflush"], chain)?;
    if nat(fam, "-C", &crate::plan::nat_jump()).is_err() {
        nat(fam, "-I", &crate::plan::nat_jump())?;
    }
    Ok(())
}

/// Leaving proxy mode: our jump and our chain go, nothing else in the nat
/// table. A no-op when the chain is not there.
pub fn nat_remove(fam: Family) -> Result<(), NetfilterError> {
    let chain = crate::plan::NAT_CHAIN;
    if nat(fam, "-n", &["-L", chain]).is_err() {
        return Ok(());
    }
    // Every copy of the jump (a second tool might have added one too).
    while nat(fam, "-C", &crate::plan::nat_jump()).is_ok() {
        nat(fam, "-D", &crate::plan::nat_jump())?;
    }
    for op in ["-F", "-X"] {
        nat(fam, op, &[chain])?;
    }
    Ok(())
}

/// `iptables --wait -t nat OP ARGS`.
fn nat(fam: Family, op: &str, args: &[&str]) -> Result<(), NetfilterError> {
    let program = backend().tables(fam);
    let out = Command::new(program)
        .args(["--wait", "-t", "nat", op])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| NetfilterError::Spawn {
            program: program.to_owned(),
            source,
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(NetfilterError::Refused {
        command: format!("{program} -t nat {op} {}", args.join(" ")),
        detail: first_line(&out.stderr),
    })
}

/// Whether this kernel has IPv6 at all; without it there is nothing to filter.
pub fn has_ipv6() -> bool {
    std::path::Path::new("/proc/sys/net/ipv6").exists()
}

/// Close everything in both families, as best we can. Used after a failure.
pub fn block_everything() -> Result<(), NetfilterError> {
    use crate::plan::block_all;
    let v4 = tables_restore(Family::V4, &block_all(Family::V4));
    let v6 = if has_ipv6() {
        tables_restore(Family::V6, &block_all(Family::V6))
    } else {
        Ok(())
    };
    v4.and(v6)
}

/// Flush the conntrack table of this namespace, both families.
pub fn flush_conntrack() -> Result<(), NetfilterError> {
    sbx_sys::netlink::flush_conntrack().map_err(NetfilterError::Conntrack)
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
