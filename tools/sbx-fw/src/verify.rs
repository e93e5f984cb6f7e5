//! `sbx-fw verify` and `probe`: connections tried from inside, each
//! reported as refused or open; verify's set proves the policy holds.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use sbx_core::audit::{self, Outcome, Record};
use sbx_core::cli::CommonArgs;
use sbx_core::error::IoContext;
use sbx_core::{Exit, output};

use crate::TOOL;
use crate::cli::{ProbeArgs, VerifyArgs};
use crate::error::FwError;
use crate::probe;
use crate::runtime::load_state;

pub fn probe_cmd(common: &CommonArgs, a: &ProbeArgs) -> Result<(), FwError> {
    let probes = a
        .probes
        .iter()
        .map(|p| p.parse::<probe::Probe>().map_err(FwError::BadProbe))
        .collect::<Result<Vec<_>, _>>()?;
    let results = probe::run_all(&probes, Duration::from_millis(a.timeout));
    let mut out = std::io::stdout().lock();
    for r in &results {
        if common.json {
            output::json_line(&mut out, "probe", r).with_path("stdout")?;
        } else {
            let v = serde_json::to_value(r.verdict).unwrap_or_default();
            writeln!(
                out,
                "{:<10} {:<40} {} ({:.1} ms)",
                v.as_str().unwrap_or(""),
                r.probe,
                r.detail,
                r.ms
            )
            .with_path("stdout")?;
        }
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct Check {
    check: &'static str,
    probe: String,
    expect: &'static str,
    verdict: probe::Verdict,
    detail: String,
    ms: f64,
    pass: bool,
}

/// The checks verify runs: each probe and whether it must come back open.
fn checks(a: &VerifyArgs, reach: &crate::state::Name) -> Vec<(&'static str, probe::Probe, bool)> {
    use probe::Probe::{Dns, Tcp};
    let ip = IpAddr::V4(reach.v4[0]);
    let tcp = |ip, port| Tcp(SocketAddr::new(ip, port));
    let other_dns = Dns(
        SocketAddr::new(a.other_resolver, 53),
        reach.name.clone(),
        hickory_proto::rr::RecordType::A,
    );
    vec![
        ("blocked IPv4 address", tcp(a.blocked_v4, 443), false),
        ("blocked IPv6 address", tcp(a.blocked_v6, 443), false),
        ("other port on an allowlisted address", tcp(ip, 80), false),
        ("DNS to another resolver", other_dns, false),
        ("SSH to a non-GitHub host", tcp(ip, 22), false),
        ("allowlisted name reachable", tcp(ip, 443), true),
    ]
}

pub fn verify(common: &CommonArgs, a: &VerifyArgs, dir: &Path) -> Result<Exit, FwError> {
    let t0 = Instant::now();
    let st = load_state(dir)?;
    if st.open {
        return Err(FwError::FirewallOff);
    }
    let reach = match &a.reach {
        Some(n) => st.names.iter().find(|x| x.name == *n && !x.v4.is_empty()),
        None => st
            .names
            .iter()
            .find(|x| !x.v4.is_empty() && x.error.is_none()),
    }
    .ok_or_else(|| FwError::NothingToReach(a.reach.clone()))?;
    let plan = checks(a, reach);
    let probes: Vec<probe::Probe> = plan.iter().map(|p| p.1.clone()).collect();
    let results = probe::run_all(&probes, Duration::from_millis(a.timeout));
    let mut failed = 0;
    let mut out = std::io::stdout().lock();
    let mut judged: Vec<Check> = plan
        .iter()
        .zip(results)
        .map(|((check, _, want_open), r)| judge(check, *want_open, r))
        .collect();
    // Root may make any socket; the agent (sbx-guest's seccomp filter) may
    // not, and that is what these check, so only from the agent's side.
    if !nix::unistd::geteuid().is_root() {
        judged.extend(family_checks());
    }
    judged.extend(gateway_checks());
    let total = judged.len();
    for c in judged {
        failed += usize::from(!c.pass);
        if common.json {
            output::json_line(&mut out, "check", &c).with_path("stdout")?;
        } else if !output::is_quiet() {
            writeln!(
                out,
                "{}  {:<38} {} ({}, {:.1} ms)",
                if c.pass { "ok  " } else { "FAIL" },
                c.check,
                c.probe,
                c.detail,
                c.ms
            )
            .with_path("stdout")?;
        }
    }
    if common.json {
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let summary = serde_json::json!({"checks": total, "failed": failed, "ms": ms});
        output::json_line(&mut out, "summary", &summary).with_path("stdout")?;
    }
    if failed > 0 {
        output::error(&format!(
            "verify: {failed} of {total} checks failed: the firewall leaks"
        ));
        return Ok(Exit::No);
    }
    Ok(Exit::Ok)
}

/// Sockets of families no rule sees, and raw ones, by each route a
/// process has to the kernel: the native call and the two i386 entry
/// points (`socket`, and `socketcall` whose arguments are in memory).
fn family_checks() -> Vec<Check> {
    use sbx_sys::seccomp::{socket_i386, socket_native, socket_x32, socketcall_i386};
    type Route = fn(i32, i32, i32) -> std::io::Result<std::os::fd::OwnedFd>;
    const ROUTES: [(&str, Route); 4] = [
        ("socket", socket_native),
        ("x32 socket", socket_x32),
        ("i386 socket", socket_i386),
        ("i386 socketcall", socketcall_i386),
    ];
    // (check, family, type, protocol)
    const SOCKETS: [(&str, &str, i32, i32, i32); 5] = [
        ("no vsock socket", "AF_VSOCK", 40, 1, 0),
        ("no packet socket", "AF_PACKET", 17, 3, 0x0300),
        ("no raw IP socket", "AF_INET/SOCK_RAW", 2, 3, 6),
        ("no other netlink", "AF_NETLINK/KOBJECT_UEVENT", 16, 3, 15),
        ("no other family", "AF_ALG", 38, 5, 0),
    ];
    let mut out = Vec::new();
    for (check, fam, d, t, p) in SOCKETS {
        for (route, call) in ROUTES {
            let t0 = Instant::now();
            let (verdict, detail) = match call(d, t, p) {
                Ok(_) => (probe::Verdict::Open, "socket made".to_owned()),
                Err(e) => (probe::Verdict::Refused, e.to_string()),
            };
            let r = probe::Result {
                probe: format!("{route}({fam})"),
                verdict,
                detail,
                ms: t0.elapsed().as_secs_f64() * 1e3,
            };
            out.push(judge(check, false, r));
        }
    }
    out
}

/// What a neighbour on the bridge could have changed: each gateway's
/// neighbour entry still permanent (a gratuitous ARP or an unsolicited
/// advertisement moves any other), and no route learned from a router
/// advertisement (RTF_ADDRCONF: an allowlisted range made on-link).
fn gateway_checks() -> Vec<Check> {
    const RTF_ADDRCONF: u32 = 0x0004_0000;
    let t0 = Instant::now();
    let mut out = Vec::new();
    let gws = crate::gateway::gateways();
    for (g, mac, permanent) in crate::gateway::neighbours(&gws) {
        let r = probe::Result {
            probe: format!("neighbour {} on {}", g.ip, g.dev),
            // Init pins every gateway or fails: an entry that is not
            // permanent is one a gratuitous ARP or advertisement can move.
            verdict: if permanent {
                probe::Verdict::Refused
            } else {
                probe::Verdict::Open
            },
            detail: match (mac, permanent) {
                (Some(m), true) => format!("{m}, permanent"),
                (Some(m), false) => format!("{m}, not permanent: a neighbour could take it"),
                (None, _) => "no entry: a neighbour could answer for it".to_owned(),
            },
            ms: t0.elapsed().as_secs_f64() * 1e3,
        };
        out.push(judge("gateway pinned", false, r));
    }
    let learned: Vec<String> = std::fs::read_to_string("/proc/net/ipv6_route")
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(8)
                .and_then(|f| u32::from_str_radix(f, 16).ok())
                .is_some_and(|f| f & RTF_ADDRCONF != 0)
        })
        .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join("/"))
        .collect();
    let r = probe::Result {
        probe: "routes from router advertisements".to_owned(),
        verdict: if learned.is_empty() {
            probe::Verdict::Refused
        } else {
            probe::Verdict::Open
        },
        detail: if learned.is_empty() {
            "none".to_owned()
        } else {
            learned.join(", ")
        },
        ms: t0.elapsed().as_secs_f64() * 1e3,
    };
    out.push(judge("no advertised route", false, r));
    out
}

/// One probe's result against what it must be, audited.
fn judge(check: &'static str, want_open: bool, r: probe::Result) -> Check {
    let pass = if want_open {
        r.verdict == probe::Verdict::Open
    } else {
        matches!(
            r.verdict,
            probe::Verdict::Refused | probe::Verdict::DnsRefused
        )
    };
    let target = format!("{check}: {}", r.probe);
    let rec = match (pass, want_open) {
        (true, false) => Record::new(
            TOOL,
            "verify",
            &target,
            Outcome::Blocked,
            "egress-default-deny",
        ),
        (true, true) => Record::new(TOOL, "verify", &target, Outcome::Allowed, "allowlist"),
        (false, _) => Record::new(TOOL, "verify", &target, Outcome::Allowed, "verify-failed")
            .reason(&r.detail),
    };
    audit::append(&rec);
    Check {
        check,
        probe: r.probe,
        expect: if want_open { "open" } else { "refused" },
        verdict: r.verdict,
        detail: r.detail,
        ms: r.ms,
        pass,
    }
}
