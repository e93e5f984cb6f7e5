//! The gateway pinned: its neighbour entries made permanent and router
//! advertisements and redirects switched off where the sysctls are
//! writable, so no root neighbour on the bridge takes over the sandbox's
//! traffic by answering ARP or neighbour solicitations for the gateway
//! (the rules drop advertisements and redirects in any case, but ARP is
//! no IP: no iptables rule sees it).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A default route's next hop and the device it is reached on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gateway {
    pub ip: IpAddr,
    pub dev: String,
}

/// The default gateways of both families, from the kernel's tables.
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
    out
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

/// Turn router advertisements and redirects off where writable, learn
/// each gateway's address (one datagram to its discard port makes the
/// kernel ask) and make its entry permanent. Returns what could not be
/// done, for warnings.
pub fn pin() -> Vec<String> {
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
    if found.iter().any(|(_, mac, _)| mac.is_none()) {
        for (g, _, _) in found.iter().filter(|(_, mac, _)| mac.is_none()) {
            poke(g);
        }
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(300) {
            std::thread::sleep(Duration::from_millis(5));
            found = neighbours(&gws);
            if found.iter().all(|(_, mac, _)| mac.is_some()) {
                break;
            }
        }
    }
    let mut batch = String::new();
    let mut missed = Vec::new();
    for (g, mac, permanent) in &found {
        match mac {
            Some(_) if *permanent => {}
            Some(m) => batch.push_str(&format!(
                "neigh replace {} lladdr {m} dev {} nud permanent\n",
                g.ip, g.dev
            )),
            None => missed.push(format!(
                "gateway {} on {}: no link-layer address learned, not pinned",
                g.ip, g.dev
            )),
        }
    }
    if !batch.is_empty() {
        let ok = Command::new("ip")
            .args(["-batch", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().expect("piped").write_all(batch.as_bytes())?;
                c.wait()
            })
            .is_ok_and(|s| s.success());
        if !ok {
            missed.push("cannot make the gateways' neighbour entries permanent".into());
        }
    }
    missed
}

/// One datagram to the gateway's discard port: the kernel resolves its
/// link-layer address to send it.
fn poke(g: &Gateway) {
    let to = match g.ip {
        IpAddr::V4(a) => SocketAddr::new(IpAddr::V4(a), 9),
        IpAddr::V6(a) => {
            let scope = std::fs::read_to_string(format!("/sys/class/net/{}/ifindex", g.dev))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            SocketAddr::V6(SocketAddrV6::new(a, 9, 0, scope))
        }
    };
    let bind = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    if let Ok(s) = UdpSocket::bind(bind) {
        let _ = s.send_to(&[0], to);
    }
}
