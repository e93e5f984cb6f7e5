//! The block-everything ruleset. sbx-guest installs it before sbx-fw runs;
//! sbx-fw installs it when a first init fails. One generator, so the two
//! cannot disagree on what "blocked" means. And the ranges that stay
//! blocked whatever is allowed, for sbx-fw and a cluster's NetworkPolicy.

/// Never reachable, even when an allowlisted name resolves there
/// (rebinding), by sbx-fw and by the cluster's NetworkPolicy: this host, private and shared ranges, link-local (cloud
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

/// Everything blocked, loopback included, as `iptables-restore` input
/// (`ip6tables-restore` with `v6`). Docker's resolver on loopback would
/// otherwise still answer anything. Rejected rather than dropped, so
/// programs fail at once instead of hanging. The resets and unreachables
/// themselves go out over loopback; DNS for uid 0 (never the agent) lets
/// sbx-fw resolve its allowlist and recover.
pub fn block_all(v6: bool) -> String {
    let (other, icmp) = if v6 {
        ("icmp6-port-unreachable", "ipv6-icmp")
    } else {
        ("icmp-port-unreachable", "icmp")
    };
    format!(
        "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT DROP [0:0]\n\
         -A INPUT -i lo -p tcp --tcp-flags RST RST -j ACCEPT\n-A INPUT -i lo -p {icmp} -j ACCEPT\n\
         -A OUTPUT -o lo -p tcp --tcp-flags RST RST -j ACCEPT\n-A OUTPUT -o lo -p {icmp} -j ACCEPT\n\
         -A INPUT -m conntrack --ctstate ESTABLISHED -p udp --sport 53 -j ACCEPT\n\
         -A INPUT -m conntrack --ctstate ESTABLISHED -p tcp --sport 53 -j ACCEPT\n\
         -A OUTPUT -p udp --dport 53 -m owner --uid-owner 0 -j ACCEPT\n\
         -A OUTPUT -p tcp --dport 53 -m owner --uid-owner 0 -j ACCEPT\n\
         -A OUTPUT -p tcp -j REJECT --reject-with tcp-reset\n-A OUTPUT -j REJECT --reject-with {other}\nCOMMIT\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_both_directions_and_lets_only_root_resolve() {
        for v6 in [false, true] {
            let r = block_all(v6);
            for chain in ["INPUT", "FORWARD", "OUTPUT"] {
                assert!(r.contains(&format!(":{chain} DROP [0:0]")), "{r}");
            }
            assert!(!r.contains("ACCEPT [0:0]"));
            // The only ACCEPTs out: loopback refusals and root's DNS.
            for l in r
                .lines()
                .filter(|l| l.starts_with("-A OUTPUT") && l.ends_with("ACCEPT"))
            {
                assert!(
                    l.contains("-o lo") || l.contains("--uid-owner 0 -j ACCEPT"),
                    "{l}"
                );
            }
            assert!(r.ends_with("COMMIT\n"));
            assert_eq!(r.contains("ipv6-icmp"), v6);
        }
    }
}
