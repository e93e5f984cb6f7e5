//! The gateway pinned: its neighbour entries made permanent and router
//! advertisements and redirects switched off where the sysctls are
//! writable, so no root neighbour on the bridge takes over the sandbox's
//! traffic by answering ARP or neighbour solicitations for the gateway
//! (the rules drop advertisements and redirects in any case, but ARP is
//! no IP: no iptables rule sees it).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A default route's next hop and the device it is reached on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gateway {
    pub ip: IpAddr,
    pub dev: String,
}

/// The default gateways of both families, from the kernel's tables, on
/// devices that resolve link-layer addresses.
pub fn gateways() -> Vec<Gateway> {
    let mut out = Vec::new();
    for l in std::fs::read_to_string("/proc/net/route")
        .unwrap_or_default()
        .lines()
        .skip(1)
    {
        let f: Vec<&str> = l.split_whitespace().collect();
        let hex = |s: &str| u32::from_str_radix(s, 16).ok().map(u32::from_be);
        if let (Some(dev), Some(Some(0)), Some(Some(gw))) = (
            f.first(),
            f.get(1).map(|s| hex(s)),
            f.get(2).map(|s| hex(s)),
        ) && gw != 0
        {
            out.push(Gateway {
                ip: IpAddr::V4(Ipv4Addr::from(gw)),
                dev: (*dev).to_owned(),
            });
        }
    }
    for l in std::fs::read_to_string("/proc/net/ipv6_route")
        .unwrap_or_default()
        .lines()
    {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 10 || f[1] != "00" {
            continue;
        }
        let addr = |s: &str| u128::from_str_radix(s, 16).ok().map(Ipv6Addr::from);
        if let (Some(dst), Some(gw)) = (addr(f[0]), addr(f[4]))
            && dst.is_unspecified()
            && !gw.is_unspecified()
        {
            out.push(Gateway {
                ip: IpAddr::V6(gw),
                dev: f[9].to_owned(),
            });
        }
    }
    out.dedup();
    // A device without ARP (a tunnel, point-to-point) has no neighbour
    // table for anyone to poison.
    out.retain(|g| !noarp(&g.dev));
    out
}

/// Whether `dev` resolves no link-layer addresses (IFF_NOARP).
fn noarp(dev: &str) -> bool {
    const IFF_NOARP: u32 = 0x80;
    std::fs::read_to_string(format!("/sys/class/net/{dev}/flags"))
        .ok()
        .and_then(|s| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok())
        .is_some_and(|f| f & IFF_NOARP != 0)
}

/// Each gateway's link-layer address and whether its entry is permanent.
pub fn neighbours(gws: &[Gateway]) -> Vec<(Gateway, Option<String>, bool)> {
    let table = Command::new("ip")
        .args(["-j", "neigh", "show"])
        .stderr(Stdio::null())
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice::<Vec<serde_json::Value>>(&o.stdout).ok())
        .unwrap_or_default();
    gws.iter()
        .map(|g| {
            let e = table.iter().find(|e| {
                e["dst"].as_str().and_then(|d| d.parse::<IpAddr>().ok()) == Some(g.ip)
                    && e["dev"] == g.dev.as_str()
            });
            let mac = e.and_then(|e| e["lladdr"].as_str()).map(str::to_owned);
            let permanent = e.is_some_and(|e| {
                e["state"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|x| x == "PERMANENT"))
            });
            (g.clone(), mac, permanent)
        })
        .collect()
}

/// How long init waits for the gateways to answer: a veth answers in
/// well under a millisecond; this leaves room for the kernel's first
/// retransmissions (one a second) on a loaded machine. 2.5 s was once too
/// short with four namespace suites at once on 2 cores; only a gateway
/// that never answers (init fails closed either way) waits this long.
const LEARN_WAIT: Duration = Duration::from_millis(6000);

/// Turn router advertisements and redirects off where writable, learn
/// each gateway's link-layer address and make its entry permanent. The
/// kernel is asked to resolve it directly (a netlink `use` probe), not by
/// a datagram, which the block sbx-guest installs before init would drop:
/// ARP is no IP, and the installed rules let neighbour solicitations out.
/// Err is one line naming the gateway that could not be pinned.
pub fn pin() -> Result<(), String> {
    let gws = gateways();
    let mut devs: Vec<&str> = vec!["all", "default"];
    devs.extend(gws.iter().map(|g| g.dev.as_str()));
    for d in devs {
        for p in [
            format!("/proc/sys/net/ipv6/conf/{d}/accept_ra"),
            format!("/proc/sys/net/ipv6/conf/{d}/accept_redirects"),
            format!("/proc/sys/net/ipv4/conf/{d}/accept_redirects"),
        ] {
            // Read-only in a container (/proc/sys is mounted so): the
            // rules drop both anyway.
            let _ = std::fs::write(p, "0");
        }
    }
    let mut found = neighbours(&gws);
    let unknown = |f: &[(Gateway, Option<String>, bool)]| {
        f.iter()
            .filter(|(_, mac, _)| mac.is_none())
            .map(|(g, _, _)| format!("neigh replace {} dev {} use\n", g.ip, g.dev))
            .collect::<String>()
    };
    let mut probes = unknown(&found);
    if !probes.is_empty() {
        // Best effort: whatever it does, the poll below decides. The probe
        // is repeated each second: the kernel gives up on an address after
        // its three solicitations (about 3 s), so one lost answer on a
        // loaded machine would otherwise fail init for good.
        let t0 = Instant::now();
        let mut probed = None::<Instant>;
        while t0.elapsed() < LEARN_WAIT {
            if probed.is_none_or(|p| p.elapsed() >= Duration::from_secs(1)) {
                let _ = ip_batch(&probes);
                probed = Some(Instant::now());
            }
            std::thread::sleep(Duration::from_millis(2));
            found = neighbours(&gws);
            probes = unknown(&found);
            if probes.is_empty() {
                break;
            }
        }
    }
    let mut batch = String::new();
    for (g, mac, permanent) in &found {
        match mac {
            Some(_) if *permanent => {}
            Some(m) => batch.push_str(&format!(
                "neigh replace {} lladdr {m} dev {} nud permanent\n",
                g.ip, g.dev
            )),
            None => {
                return Err(format!(
                    "gateway {} on {} did not answer within {} s: its link-layer address \
                     cannot be pinned and a neighbour could take it over; check `ip neigh` \
                     and the network, then run `sbx-fw init` again",
                    g.ip,
                    g.dev,
                    LEARN_WAIT.as_secs_f32()
                ));
            }
        }
    }
    if !batch.is_empty() && !ip_batch(&batch) {
        return Err("cannot make the gateways' neighbour entries permanent (`ip -batch`)".into());
    }
    Ok(())
}

/// `ip -force -batch -` with `cmds` on its stdin (every line tried);
/// whether all succeeded.
fn ip_batch(cmds: &str) -> bool {
    Command::new("ip")
        .args(["-force", "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().expect("piped").write_all(cmds.as_bytes())?;
            c.wait()
        })
        .is_ok_and(|s| s.success())
}
