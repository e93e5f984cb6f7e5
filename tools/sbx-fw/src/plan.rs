//! The complete ruleset and set contents, as the text that
//! `iptables-restore`, `ip6tables-restore` and `ipset restore` read. Pure:
//! everything here is decided before anything is installed.

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

/// Never reachable, even when an allowlisted name resolves there
/// (rebinding): this host, private and shared ranges, link-local (cloud
/// metadata), multicast and reserved space.
pub const NEVER4: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
];
pub const NEVER6: &[&str] = &[
    "::/127",
    "::ffff:0:0/96",
    // NAT64: an IPv4 address (a private one too) inside an IPv6 one.
    "64:ff9b::/96",
    "64:ff9b:1::/48",
    "fc00::/7",
    "fe80::/10",
    "fec0::/10",
    "ff00::/8",
];

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
                SET_GH4 => self
                    .github
                    .iter()
                    .filter(|n| matches!(n, IpNet::V4(_)))
                    .map(|n| n.to_string())
                    .collect(),
                _ => self
                    .github
                    .iter()
                    .filter(|n| matches!(n, IpNet::V6(_)))
                    .map(|n| n.to_string())
                    .collect(),
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

    /// The whole filter table for one family, for `ip[6]tables-restore`.
    pub fn rules(&self, fam: Family) -> String {
        let v6 = fam == Family::V6;
        let (allow, gh) = if v6 {
            (SET_ALLOW6, SET_GH6)
        } else {
            (SET_ALLOW4, SET_GH4)
        };
        let reject_other = if v6 {
            "icmp6-port-unreachable"
        } else {
            "icmp-port-unreachable"
        };
        let never: Vec<IpNet> = (if v6 { NEVER6 } else { NEVER4 })
            .iter()
            .map(|n| n.parse().expect("built-in ranges are valid"))
            .chain(self.local.iter().copied())
            .filter(|n| matches!(n, IpNet::V6(_)) == v6)
            .collect();
        let ours = |ip: &IpAddr| ip.is_ipv6() == v6;
        let mut r = String::from(
            "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT DROP [0:0]\n\
             :SBX-IN - [0:0]\n:SBX-OUT - [0:0]\n-A INPUT -j SBX-IN\n-A OUTPUT -j SBX-OUT\n",
        );
        let mut rule = |x: &str| {
            r.push_str(x);
            r.push('\n');
        };

        // Inbound: loopback, replies, neighbour discovery, published ports.
        rule("-A SBX-IN -i lo -j ACCEPT");
        rule("-A SBX-IN -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT");
        if v6 {
            for t in [
                "router-advertisement",
                "neighbour-solicitation",
                "neighbour-advertisement",
            ] {
                rule(&format!(
                    "-A SBX-IN -p ipv6-icmp --icmpv6-type {t} -m hl --hl-eq 255 -j ACCEPT"
                ));
            }
        }
        for chunk in self.inbound.chunks(15) {
            let ports: Vec<String> = chunk.iter().map(|p| p.to_string()).collect();
            rule(&format!(
                "-A SBX-IN -p tcp -m multiport --dports {} -j ACCEPT",
                ports.join(",")
            ));
        }
        rule("-A SBX-IN -j DROP");

        // Outbound. Neighbour discovery first: duplicate address detection
        // sends from `::`, which the source check below would refuse. Only
        // raw sockets send hop limit 255, and the agent has none.
        if v6 {
            for t in [
                "router-solicitation",
                "neighbour-solicitation",
                "neighbour-advertisement",
            ] {
                rule(&format!(
                    "-A SBX-OUT -p ipv6-icmp --icmpv6-type {t} -m hl --hl-eq 255 -j ACCEPT"
                ));
            }
        }
        // Checks that hold whatever conntrack says, so they come before the
        // ESTABLISHED rule. A source address this host does not own
        // (IP_FREEBIND, IPV6_FREEBIND, IP_TRANSPARENT) would let the allowed
        // host's answers, and the data in them, go to someone else: dropped,
        // since a reject would itself go to that address. Only packets of a
        // socket: the resets REJECT sends back to a local caller carry the
        // remote address as their source.
        rule("-A SBX-OUT -m owner --socket-exists -m addrtype ! --src-type LOCAL -j DROP");
        if v6 {
            // A routing header (type 4 is settable without privileges) sends
            // a packet for an allowed first hop on to any final address.
            rule("-A SBX-OUT -m rt -j DROP");
        } else {
            // IPv4 options (IHL > 5): loose/strict source routes do what
            // IPv6 routing headers do; nothing the agent needs sets options.
            rule("-A SBX-OUT -m u32 --u32 0>>24&0xF=6:15 -j DROP");
        }
        // Root's flows (the DNS filter's upstream queries, root-only
        // loopback services) are marked; another uid's packet that conntrack
        // would file under one (a freed source port re-bound) is refused.
        rule(&format!(
            "-A SBX-OUT -p tcp -m connmark --mark {ROOT_MARK}/{ROOT_MARK} \
             -m owner --socket-exists ! --uid-owner 0 -j REJECT --reject-with tcp-reset"
        ));
        rule(&format!(
            "-A SBX-OUT -m connmark --mark {ROOT_MARK}/{ROOT_MARK} \
             -m owner --socket-exists ! --uid-owner 0 -j REJECT --reject-with {reject_other}"
        ));
        rule(&format!(
            "-A SBX-OUT -m conntrack --ctstate NEW -m owner --uid-owner 0 \
             -j CONNMARK --set-xmark {ROOT_MARK}/{ROOT_MARK}"
        ));
        rule("-A SBX-OUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT");
        if self.proxy_uid.is_some() {
            // The redirected connections, and the explicit proxy. Not by
            // `-o lo`: a redirected packet keeps the interface it was
            // first routed to.
            let lo = if v6 { "::1/128" } else { "127.0.0.1/32" };
            rule(&format!(
                "-A SBX-OUT -d {lo} -p tcp -m multiport --dports {},{} -j ACCEPT",
                crate::proxy::CONNECT_PORT,
                crate::proxy::TRANSPARENT_PORT
            ));
        }
        // A resolver on loopback (Docker's 127.0.0.11) answers any name:
        // only uid 0 (the DNS filter, Docker's resolver) may use it.
        for ip in self.upstreams.iter().filter(|i| ours(i) && i.is_loopback()) {
            let d = host(ip);
            rule(&format!(
                "-A SBX-OUT -d {d} -p tcp -m owner ! --uid-owner 0 -j REJECT --reject-with tcp-reset"
            ));
            rule(&format!(
                "-A SBX-OUT -d {d} -m owner ! --uid-owner 0 -j REJECT --reject-with {reject_other}"
            ));
        }
        if self.allow_localhost {
            rule("-A SBX-OUT -o lo -j ACCEPT");
        } else {
            if !v6 {
                rule(&format!(
                    "-A SBX-OUT -o lo -d {FILTER_ADDR}/32 -p udp --dport 53 -j ACCEPT"
                ));
                rule(&format!(
                    "-A SBX-OUT -o lo -d {FILTER_ADDR}/32 -p tcp --dport 53 -j ACCEPT"
                ));
            }
            rule("-A SBX-OUT -o lo -m owner --uid-owner 0 -j ACCEPT");
        }
        // Upstream DNS: uid 0 only. Docker's embedded resolver forwards from
        // inside this namespace to servers it does not name here, so with a
        // loopback upstream uid 0 may reach port 53 anywhere.
        let loopback_upstream = self.upstreams.iter().any(|i| i.is_loopback());
        let dns_dests: Vec<String> = if loopback_upstream {
            vec![String::new()]
        } else {
            self.upstreams
                .iter()
                .filter(|i| ours(i))
                .map(|i| format!(" -d {}", host(i)))
                .collect()
        };
        for d in &dns_dests {
            for p in ["udp", "tcp"] {
                rule(&format!(
                    "-A SBX-OUT{d} -p {p} --dport 53 -m owner --uid-owner 0 -j ACCEPT"
                ));
            }
        }
        for n in &never {
            rule(&format!(
                "-A SBX-OUT -d {n} -p tcp -j REJECT --reject-with tcp-reset"
            ));
            rule(&format!(
                "-A SBX-OUT -d {n} -j REJECT --reject-with {reject_other}"
            ));
        }
        match self.proxy_uid {
            // Only the proxy goes out to 80 and 443, after its checks.
            // Root (init's own fetches, backups) keeps its direct 443.
            Some(uid) => {
                rule(&format!(
                    "-A SBX-OUT -p tcp -m multiport --dports 80,443 -m set --match-set {allow} dst \
                     -m owner --uid-owner {uid} -j ACCEPT"
                ));
                rule(&format!(
                    "-A SBX-OUT -p tcp --dport 443 -m set --match-set {allow} dst \
                     -m owner --uid-owner 0 -j ACCEPT"
                ));
            }
            None => rule(&format!(
                "-A SBX-OUT -p tcp --dport 443 -m set --match-set {allow} dst -j ACCEPT"
            )),
        }
        let gh_ports = if self.no_git_ssh {
            "--dport 443"
        } else {
            "-m multiport --dports 22,443"
        };
        rule(&format!(
            "-A SBX-OUT -p tcp {gh_ports} -m set --match-set {gh} dst -j ACCEPT"
        ));
        rule("-A SBX-OUT -p tcp -j REJECT --reject-with tcp-reset");
        rule(&format!(
            "-A SBX-OUT -j REJECT --reject-with {reject_other}"
        ));
        r.push_str("COMMIT\n");
        r
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

fn host(ip: &IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}/32"),
        IpAddr::V6(a) => format!("{a}/128"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            upstreams: vec!["198.18.0.53".parse().unwrap()],
            allow_localhost: true,
            inbound: vec![3000],
            allow4: vec!["198.18.1.1".parse().unwrap()],
            allow6: vec!["2001:2::1:1".parse().unwrap()],
            github: vec![
                "198.18.3.0/24".parse().unwrap(),
                "2001:2::3:0/112".parse().unwrap(),
            ],
            local: vec!["10.77.0.0/24".parse().unwrap()],
            no_git_ssh: false,
            proxy_uid: None,
        }
    }

    /// Proxy mode: the agent's 80/443 go to the proxy, the proxy's own do
    /// not (no loop), and only the proxy's uid goes out to the allow set.
    /// The nat part is our chain alone: no builtin chain is declared (that
    /// would reset other tools' rules, Docker's DNS among them) and the
    /// filter ruleset carries no nat table.
    #[test]
    fn proxy_mode_redirects_all_but_the_proxy() {
        let mut p = plan();
        assert_eq!(p.nat(Family::V4), None);
        p.proxy_uid = Some(65533);
        for fam in [Family::V4, Family::V6] {
            let r = p.rules(fam);
            assert!(!r.contains("*nat"), "{r}");
            let nat = p.nat(fam).expect("nat chain");
            assert!(nat.starts_with("*nat\n:SBX-NAT - [0:0]\n"), "{nat}");
            assert!(nat.ends_with("COMMIT\n"), "{nat}");
            for l in nat.lines().skip(2).take_while(|l| *l != "COMMIT") {
                assert!(l.starts_with("-A SBX-NAT "), "{l}");
            }
            for builtin in ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"] {
                assert!(!nat.contains(builtin), "{nat}");
            }
            let ret = nat.find("--uid-owner 65533 -j RETURN").expect("exempt");
            let redir = nat.find("-j REDIRECT --to-ports 3129").expect("redirect");
            assert!(ret < redir, "{nat}");
            assert!(
                r.contains("--dports 80,443 -m set --match-set sbx-allow")
                    && r.contains("dst -m owner --uid-owner 65533 -j ACCEPT"),
                "{r}"
            );
            // Direct 443 to the set: root only.
            assert!(
                !r.lines()
                    .any(|l| l.contains("--dport 443 -m set --match-set sbx-allow")
                        && !l.contains("--uid-owner 0 -j ACCEPT")),
                "{r}"
            );
        }
        assert_eq!(nat_jump(), ["OUTPUT", "-j", "SBX-NAT"]);
    }

    /// Issue 13.8: `allow-git = false` leaves no rule that accepts port 22.
    #[test]
    fn allow_git_false_closes_ssh() {
        let mut p = plan();
        for fam in [Family::V4, Family::V6] {
            assert!(
                p.rules(fam)
                    .contains("--dports 22,443 -m set --match-set sbx-gh")
            );
        }
        p.no_git_ssh = true;
        for fam in [Family::V4, Family::V6] {
            let r = p.rules(fam);
            assert!(!r.contains("dport 22") && !r.contains("dports 22"), "{r}");
            assert!(
                r.contains("-p tcp --dport 443 -m set --match-set sbx-gh"),
                "{r}"
            );
        }
    }

    #[test]
    fn default_deny_with_rejects_last() {
        let r = plan().rules(Family::V4);
        assert!(
            r.starts_with("*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT DROP [0:0]\n")
        );
        let lines: Vec<&str> = r.lines().collect();
        let n = lines.len();
        assert_eq!(
            lines[n - 3],
            "-A SBX-OUT -p tcp -j REJECT --reject-with tcp-reset"
        );
        assert_eq!(
            lines[n - 2],
            "-A SBX-OUT -j REJECT --reject-with icmp-port-unreachable"
        );
        assert_eq!(lines[n - 1], "COMMIT");
        // Private ranges are refused before the allow sets are consulted.
        let never = r.find("-d 10.0.0.0/8 -p tcp").unwrap();
        let allow = r.find("--match-set sbx-allow4").unwrap();
        assert!(never < allow);
        assert!(r.contains(
            "-A SBX-OUT -d 198.18.0.53/32 -p udp --dport 53 -m owner --uid-owner 0 -j ACCEPT"
        ));
        assert!(r.contains("-A SBX-IN -p tcp -m multiport --dports 3000 -j ACCEPT"));
        assert!(!r.contains("ipv6-icmp"));
    }

    #[test]
    fn owner_and_source_checks_come_before_conntrack_state() {
        for fam in [Family::V4, Family::V6] {
            let r = plan().rules(fam);
            let state = r
                .find("-A SBX-OUT -m conntrack --ctstate ESTABLISHED,RELATED")
                .unwrap();
            for before in [
                "-m owner --socket-exists -m addrtype ! --src-type LOCAL -j DROP",
                "-m connmark --mark 0x1000000/0x1000000 -m owner --socket-exists ! --uid-owner 0 -j REJECT",
                "-m owner --uid-owner 0 -j CONNMARK --set-xmark 0x1000000/0x1000000",
            ] {
                assert!(r.find(before).unwrap() < state, "{fam:?}: {before}");
            }
            assert_eq!(r.contains("-A SBX-OUT -m rt -j DROP"), fam == Family::V6);
            let opts = r.find("-A SBX-OUT -m u32 --u32 0>>24&0xF=6:15 -j DROP");
            assert_eq!(opts.is_some(), fam == Family::V4);
            assert!(opts.is_none_or(|o| o < state));
            if fam == Family::V6 {
                assert!(r.contains("-d 64:ff9b::/96"), "{r}");
            }
        }
    }

    #[test]
    fn v6_has_its_own_rules() {
        let r = plan().rules(Family::V6);
        assert!(r.contains("--match-set sbx-allow6 dst"));
        assert!(r.contains("--reject-with icmp6-port-unreachable"));
        assert!(r.contains("-d fe80::/10"));
        assert!(!r.contains("10.0.0.0/8"));
        assert!(!r.contains("198.18.0.53"));
        assert!(r.contains("neighbour-solicitation"));
    }

    #[test]
    fn loopback_resolver_is_root_only() {
        let mut p = plan();
        p.upstreams = vec!["127.0.0.11".parse().unwrap()];
        let r = p.rules(Family::V4);
        let deny = r
            .find("-d 127.0.0.11/32 -m owner ! --uid-owner 0 -j REJECT")
            .unwrap();
        let lo = r.find("-o lo -j ACCEPT").unwrap();
        assert!(deny < lo);
        assert!(r.contains("-A SBX-OUT -p udp --dport 53 -m owner --uid-owner 0 -j ACCEPT"));
    }

    #[test]
    fn sets_are_swapped_in_whole() {
        let s = plan().ipset_script();
        assert!(s.contains("create sbx-allow4-new hash:ip family inet timeout 0 maxelem 65536\nflush sbx-allow4-new\nadd sbx-allow4-new 198.18.1.1\n"));
        assert!(s.contains("add sbx-gh6-new 2001:2::3:0/112\n"));
        assert!(s.contains("swap sbx-gh4-new sbx-gh4\ndestroy sbx-gh4-new\n"));
    }
}
