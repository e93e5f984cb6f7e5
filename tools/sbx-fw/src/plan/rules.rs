//! The filter table for one family, in the order packets meet it: inbound,
//! then outbound checks that hold whatever conntrack says, replies, DNS,
//! never-reachable ranges, the allow sets, and a reject for the rest.

use std::net::IpAddr;

use ipnet::IpNet;

use super::{
    FILTER_ADDR, Family, NEVER4, NEVER6, Plan, ROOT_MARK, SET_ALLOW4, SET_ALLOW6, SET_GH4, SET_GH6,
};
use crate::proxy::{CONNECT_PORT, TRANSPARENT_PORT};

/// One family's table as it is written.
struct Table<'a> {
    plan: &'a Plan,
    v6: bool,
    text: String,
}

impl Table<'_> {
    fn rule(&mut self, r: &str) {
        self.text.push_str(r);
        self.text.push('\n');
    }

    /// ICMP's "port unreachable" of this family.
    fn reject_other(&self) -> &'static str {
        if self.v6 {
            "icmp6-port-unreachable"
        } else {
            "icmp-port-unreachable"
        }
    }

    /// Loopback, replies, neighbour discovery, published ports.
    fn inbound(&mut self) {
        self.rule("-A SBX-IN -i lo -j ACCEPT");
        // No neighbour re-routes the sandbox: router advertisements (an
        // allowlisted range made on-link, a new default router) and
        // redirects, which conntrack would count as RELATED to the flow
        // they redirect, are dropped before anything accepts them.
        if self.v6 {
            for t in ["router-advertisement", "redirect"] {
                self.rule(&format!("-A SBX-IN -p ipv6-icmp --icmpv6-type {t} -j DROP"));
            }
        } else {
            self.rule("-A SBX-IN -p icmp --icmp-type redirect -j DROP");
        }
        self.rule("-A SBX-IN -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT");
        if self.v6 {
            for t in ["neighbour-solicitation", "neighbour-advertisement"] {
                self.rule(&format!(
                    "-A SBX-IN -p ipv6-icmp --icmpv6-type {t} -m hl --hl-eq 255 -j ACCEPT"
                ));
            }
        }
        for chunk in self.plan.inbound.chunks(15) {
            let ports: Vec<String> = chunk.iter().map(|p| p.to_string()).collect();
            self.rule(&format!(
                "-A SBX-IN -p tcp -m multiport --dports {} -j ACCEPT",
                ports.join(",")
            ));
        }
        self.rule("-A SBX-IN -j DROP");
    }

    /// Checks that hold whatever conntrack says, so they come before the
    /// ESTABLISHED rule.
    fn outbound_guards(&mut self) {
        // Neighbour discovery first: duplicate address detection sends
        // from `::`, which the source check below would refuse. Only raw
        // sockets send hop limit 255, and the agent has none.
        if self.v6 {
            for t in [
                "router-solicitation",
                "neighbour-solicitation",
                "neighbour-advertisement",
            ] {
                self.rule(&format!(
                    "-A SBX-OUT -p ipv6-icmp --icmpv6-type {t} -m hl --hl-eq 255 -j ACCEPT"
                ));
            }
        }
        // A source address this host does not own (IP_FREEBIND,
        // IPV6_FREEBIND, IP_TRANSPARENT) would let the allowed host's
        // answers, and the data in them, go to someone else: dropped, since
        // a reject would itself go to that address. Only packets of a
        // socket: the resets REJECT sends back to a local caller carry the
        // remote address as their source.
        self.rule("-A SBX-OUT -m owner --socket-exists -m addrtype ! --src-type LOCAL -j DROP");
        if self.v6 {
            // A routing header (type 4 is settable without privileges)
            // sends a packet for an allowed first hop on to any final address.
            self.rule("-A SBX-OUT -m rt -j DROP");
        } else {
            // IPv4 options (IHL > 5): loose/strict source routes do what
            // IPv6 routing headers do; nothing the agent needs sets options.
            self.rule("-A SBX-OUT -m u32 --u32 0>>24&0xF=6:15 -j DROP");
        }
        self.root_marks();
    }

    /// Root's flows (the DNS filter's upstream queries, root-only loopback
    /// services) are marked; another uid's packet that conntrack would
    /// file under one (a freed source port re-bound) is refused.
    fn root_marks(&mut self) {
        let other = self.reject_other();
        self.rule(&format!(
            "-A SBX-OUT -p tcp -m connmark --mark {ROOT_MARK}/{ROOT_MARK} \
             -m owner --socket-exists ! --uid-owner 0 -j REJECT --reject-with tcp-reset"
        ));
        self.rule(&format!(
            "-A SBX-OUT -m connmark --mark {ROOT_MARK}/{ROOT_MARK} \
             -m owner --socket-exists ! --uid-owner 0 -j REJECT --reject-with {other}"
        ));
        self.rule(&format!(
            "-A SBX-OUT -m conntrack --ctstate NEW -m owner --uid-owner 0 \
             -j CONNMARK --set-xmark {ROOT_MARK}/{ROOT_MARK}"
        ));
    }

    /// Loopback: the proxy's ports in proxy mode, resolvers on loopback
    /// for root only, then either all of loopback or the filter's port 53
    /// and root's own.
    fn loopback(&mut self) {
        if self.plan.proxy_uid.is_some() {
            // The redirected connections, and the explicit proxy. Not by
            // `-o lo`: a redirected packet keeps the interface it was
            // first routed to.
            let lo = if self.v6 { "::1/128" } else { "127.0.0.1/32" };
            self.rule(&format!(
                "-A SBX-OUT -d {lo} -p tcp -m multiport --dports {CONNECT_PORT},{TRANSPARENT_PORT} -j ACCEPT"
            ));
        }
        // A resolver on loopback (Docker's 127.0.0.11) answers any name:
        // only uid 0 (the DNS filter, Docker's resolver) may use it.
        let (other, plan, v6) = (self.reject_other(), self.plan, self.v6);
        for ip in plan
            .upstreams
            .iter()
            .filter(|i| i.is_ipv6() == v6 && i.is_loopback())
        {
            let d = host(ip);
            self.rule(&format!(
                "-A SBX-OUT -d {d} -p tcp -m owner ! --uid-owner 0 -j REJECT --reject-with tcp-reset"
            ));
            self.rule(&format!(
                "-A SBX-OUT -d {d} -m owner ! --uid-owner 0 -j REJECT --reject-with {other}"
            ));
        }
        if plan.allow_localhost {
            self.rule("-A SBX-OUT -o lo -j ACCEPT");
            return;
        }
        if !self.v6 {
            for p in ["udp", "tcp"] {
                self.rule(&format!(
                    "-A SBX-OUT -o lo -d {FILTER_ADDR}/32 -p {p} --dport 53 -j ACCEPT"
                ));
            }
        }
        self.rule("-A SBX-OUT -o lo -m owner --uid-owner 0 -j ACCEPT");
    }

    /// Upstream DNS: uid 0 only. Docker's embedded resolver forwards from
    /// inside this namespace to servers it does not name here, so with a
    /// loopback upstream uid 0 may reach port 53 anywhere.
    fn upstream_dns(&mut self) {
        let plan = self.plan;
        let dests: Vec<String> = if plan.upstreams.iter().any(|i| i.is_loopback()) {
            vec![String::new()]
        } else {
            plan.upstreams
                .iter()
                .filter(|i| i.is_ipv6() == self.v6)
                .map(|i| format!(" -d {}", host(i)))
                .collect()
        };
        for d in &dests {
            for p in ["udp", "tcp"] {
                self.rule(&format!(
                    "-A SBX-OUT{d} -p {p} --dport 53 -m owner --uid-owner 0 -j ACCEPT"
                ));
            }
        }
    }

    /// Never reachable, even when an allowlisted name resolves there.
    fn never(&mut self) {
        let v6 = self.v6;
        let never: Vec<IpNet> = (if v6 { NEVER6 } else { NEVER4 })
            .iter()
            .filter_map(|n| n.parse().ok())
            .chain(self.plan.local.iter().copied())
            .filter(|n| matches!(n, IpNet::V6(_)) == v6)
            .collect();
        let other = self.reject_other();
        for n in &never {
            self.rule(&format!(
                "-A SBX-OUT -d {n} -p tcp -j REJECT --reject-with tcp-reset"
            ));
            self.rule(&format!(
                "-A SBX-OUT -d {n} -j REJECT --reject-with {other}"
            ));
        }
    }

    /// The allow set on 443 (only the proxy, and root, in proxy mode),
    /// GitHub's ranges on 22 and 443, then a reject for everything else.
    fn allowed_and_the_rest(&mut self) {
        let (allow, gh) = if self.v6 {
            (SET_ALLOW6, SET_GH6)
        } else {
            (SET_ALLOW4, SET_GH4)
        };
        match self.plan.proxy_uid {
            // Only the proxy goes out to 80 and 443, after its checks.
            // Root (init's own fetches, backups) keeps its direct 443.
            Some(uid) => {
                self.rule(&format!(
                    "-A SBX-OUT -p tcp -m multiport --dports 80,443 -m set --match-set {allow} dst \
                     -m owner --uid-owner {uid} -j ACCEPT"
                ));
                self.rule(&format!(
                    "-A SBX-OUT -p tcp --dport 443 -m set --match-set {allow} dst \
                     -m owner --uid-owner 0 -j ACCEPT"
                ));
            }
            None => self.rule(&format!(
                "-A SBX-OUT -p tcp --dport 443 -m set --match-set {allow} dst -j ACCEPT"
            )),
        }
        let gh_ports = if self.plan.no_git_ssh {
            "--dport 443"
        } else {
            "-m multiport --dports 22,443"
        };
        self.rule(&format!(
            "-A SBX-OUT -p tcp {gh_ports} -m set --match-set {gh} dst -j ACCEPT"
        ));
        self.rule("-A SBX-OUT -p tcp -j REJECT --reject-with tcp-reset");
        let other = self.reject_other();
        self.rule(&format!("-A SBX-OUT -j REJECT --reject-with {other}"));
    }
}

impl Plan {
    /// The whole filter table for one family, for `ip[6]tables-restore`.
    pub fn rules(&self, fam: Family) -> String {
        let mut t = Table {
            plan: self,
            v6: fam == Family::V6,
            text: String::from(
                "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT DROP [0:0]\n\
                 :SBX-IN - [0:0]\n:SBX-OUT - [0:0]\n-A INPUT -j SBX-IN\n-A OUTPUT -j SBX-OUT\n",
            ),
        };
        t.inbound();
        t.outbound_guards();
        t.rule("-A SBX-OUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT");
        t.loopback();
        t.upstream_dns();
        t.never();
        t.allowed_and_the_rest();
        t.text.push_str("COMMIT\n");
        t.text
    }
}

fn host(ip: &IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}/32"),
        IpAddr::V6(a) => format!("{a}/128"),
    }
}
