//! The exact rules and sets for representative plans.

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

/// `allow-git = false` leaves no rule that accepts port 22.
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
    assert!(r.starts_with("*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT DROP [0:0]\n"));
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

/// The exact text of both families' tables, the nat chain and the set
/// script for plans that exercise every branch, as checked in: a change
/// to what goes on the wire is deliberate.
#[test]
fn rules_are_byte_for_byte_as_checked_in() {
    let base = Plan {
        upstreams: vec![
            "198.18.0.53".parse().unwrap(),
            "2001:2::53".parse().unwrap(),
        ],
        allow_localhost: true,
        inbound: (3000..3020).collect(),
        allow4: vec!["198.18.1.1".parse().unwrap()],
        allow6: vec!["2001:2::1:1".parse().unwrap()],
        github: vec![
            "198.18.3.0/24".parse().unwrap(),
            "2001:2::3:0/112".parse().unwrap(),
        ],
        local: vec![
            "10.77.0.0/24".parse().unwrap(),
            "fd77::/64".parse().unwrap(),
        ],
        no_git_ssh: false,
        proxy_uid: None,
    };
    let mut variants = vec![base.clone()];
    let mut p = base.clone();
    p.proxy_uid = Some(65533);
    variants.push(p);
    let mut p = base.clone();
    p.no_git_ssh = true;
    p.allow_localhost = false;
    variants.push(p);
    let mut p = base.clone();
    p.upstreams = vec!["127.0.0.11".parse().unwrap(), "::1".parse().unwrap()];
    p.allow_localhost = false;
    variants.push(p);
    let mut out = String::new();
    for v in &variants {
        for f in [Family::V4, Family::V6] {
            out.push_str(&v.rules(f));
            out.push_str(&format!("{:?}\n", v.nat(f)));
        }
        out.push_str(&v.ipset_script());
    }
    assert_eq!(out, include_str!("rules.golden"));
}
