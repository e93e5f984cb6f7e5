//! The complete ruleset and set contents, as the text that
//! `iptables-restore`, `ip6tables-restore` and `ipset restore` read. Pure:
//! everything here is decided before anything is installed.

mod rules;
#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

pub const SET_ALLOW4: &str = "sbx-allow4";
pub const SET_ALLOW6: &str = "sbx-allow6";
pub const SET_GH4: &str = "sbx-gh4";
pub const SET_GH6: &str = "sbx-gh6";
pub const SETS: [&str; 4] = [SET_ALLOW4, SET_ALLOW6, SET_GH4, SET_GH6];
const MAXELEM: u32 = 65536;
/// Our own chain in the nat table (proxy mode). The nat table is shared:
/// Docker's embedded DNS (127.0.0.11) lives there, so we never restore the
/// table whole, only this chain, and jump to it from nat OUTPUT.
pub const NAT_CHAIN: &str = "SBX-NAT";
/// The connmark bit on connections uid 0 opened.
pub const ROOT_MARK: &str = "0x1000000";

/// Where the DNS filter listens; the agent's resolv.conf points here.
pub const FILTER_ADDR: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 53);

/// Never reachable, even when an allowlisted name resolves there: one
/// list, shared with the NetworkPolicy `sbx-run show-run --format k8s` prints.
pub use sbx_core::netblock::{NEVER4, NEVER6};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The resolvers the DNS filter (and only uid 0) may query.
    pub upstreams: Vec<IpAddr>,
    pub allow_localhost: bool,
    /// Inbound TCP ports (the sandbox's published container ports).
    pub inbound: Vec<u16>,
    pub allow4: Vec<Ipv4Addr>,
    pub allow6: Vec<Ipv6Addr>,
    pub github: Vec<IpNet>,
    /// `[network].allow-git = false`: GitHub's ranges get 443 only, no
    /// SSH (22), so git cannot push or fetch over SSH anywhere.
    pub no_git_ssh: bool,
    /// The sandbox's own subnets and gateways.
    pub local: Vec<IpNet>,
    /// `[network] mode = "proxy"`: the proxy's uid; see [`Plan::nat`].
    pub proxy_uid: Option<u32>,
}

fn set_type(name: &str) -> &'static str {
    match name {
        SET_ALLOW4 => "hash:ip family inet timeout 0",
        SET_ALLOW6 => "hash:ip family inet6 timeout 0",
        SET_GH4 => "hash:net family inet",
        _ => "hash:net family inet6",
    }
}

impl Plan {
    /// GitHub's ranges of one family, as set entries.
    fn github_ranges(&self, v6: bool) -> Vec<String> {
        self.github
            .iter()
            .filter(|n| matches!(n, IpNet::V6(_)) == v6)
            .map(|n| n.to_string())
            .collect()
    }

    /// One `ipset -exist restore` script: fill fresh sets, make sure the
    /// live ones exist, swap, drop the old contents. Entries added later
    /// by the DNS filter carry a timeout; these are permanent.
    pub fn ipset_script(&self) -> String {
        let mut s = String::new();
        for name in SETS {
            let new = format!("{name}-new");
            let _ = writeln!(s, "create {new} {} maxelem {MAXELEM}", set_type(name));
            let _ = writeln!(s, "flush {new}");
            let entries: Vec<String> = match name {
                SET_ALLOW4 => self.allow4.iter().map(|a| a.to_string()).collect(),
                SET_ALLOW6 => self.allow6.iter().map(|a| a.to_string()).collect(),
                SET_GH4 => self.github_ranges(false),
                _ => self.github_ranges(true),
            };
            for e in entries {
                let _ = writeln!(s, "add {new} {e}");
            }
            let _ = writeln!(s, "create {name} {} maxelem {MAXELEM}", set_type(name));
            let _ = writeln!(s, "swap {new} {name}");
            let _ = writeln!(s, "destroy {new}");
        }
        s
    }

    /// Proxy mode: every uid's TCP 80 and 443 but the proxy's own and
    /// root's goes to the proxy (loopback destinations excepted). Root's
    /// flows are connmarked, and the proxy's replies on one would be
    /// refused as riding on them; root is the sandbox's own tooling, not
    /// the agent. Only our chain, for `iptables-restore --noflush`: there
    /// the chain's declaration line empties it (or creates it) and nothing
    /// else in the table is touched. The jump to it is [`nat_jump`]'s.
    /// None outside proxy mode.
    pub fn nat(&self, fam: Family) -> Option<String> {
        let uid = self.proxy_uid?;
        let lo = if fam == Family::V6 {
            "::1/128"
        } else {
            "127.0.0.0/8"
        };
        let c = NAT_CHAIN;
        Some(format!(
            "*nat\n:{c} - [0:0]\n\
             -A {c} -p tcp -m owner --uid-owner {uid} -j RETURN\n\
             -A {c} -p tcp -m owner --uid-owner 0 -j RETURN\n\
             -A {c} -d {lo} -j RETURN\n\
             -A {c} -p tcp -m multiport --dports 80,443 -j REDIRECT --to-ports {}\nCOMMIT\n",
            crate::proxy::TRANSPARENT_PORT
        ))
    }
}

/// The rule in nat OUTPUT that sends packets through [`NAT_CHAIN`], as
/// `iptables -t nat -C|-I|-D` arguments after the command letter.
pub fn nat_jump() -> [&'static str; 3] {
    ["OUTPUT", "-j", NAT_CHAIN]
}

/// Everything blocked, loopback included: the state after a failed first
/// init, the same rules sbx-guest installs before init runs.
pub fn block_all(fam: Family) -> String {
    sbx_core::netblock::block_all(fam == Family::V6)
}

/// `allow-external = true`: no filtering at all.
pub fn open_all() -> String {
    "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n".to_owned()
}
