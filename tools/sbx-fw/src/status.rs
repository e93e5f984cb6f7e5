//! `sbx-fw status`: rules, set sizes, the DNS filter and the last refresh,
//! read from the kernel and the state file.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use sbx_core::cli::CommonArgs;
use sbx_core::error::IoContext;
use sbx_core::output;

use crate::daemons::filter_pid;
use crate::dns;
use crate::error::FwError;
use crate::netfilter::{self, Netfilter};
use crate::plan::{self, Family};
use crate::state::{self, State};

fn set_sizes() -> BTreeMap<String, Option<usize>> {
    let mut out = BTreeMap::new();
    for s in plan::SETS {
        let n = Command::new("ipset")
            .args(["list", "-t", s])
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout).lines().find_map(|l| {
                    l.strip_prefix("Number of entries:")
                        .and_then(|n| n.trim().parse().ok())
                })
            });
        out.insert(s.to_owned(), n);
    }
    out
}

fn rule_count(fam: Family) -> Option<usize> {
    let o = Command::new(netfilter::backend().tables(fam))
        .args(["--wait", "-S", "SBX-OUT"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    o.status.success().then(|| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with("-A"))
            .count()
    })
}

/// What status reads from the kernel, the state file and the filter.
struct Seen {
    st: Option<State>,
    sets: BTreeMap<String, Option<usize>>,
    rules4: Option<usize>,
    rules6: Option<usize>,
    filter: Option<u32>,
    /// The filter's refusal counters, when the file is the running filter's.
    refused: Option<serde_json::Value>,
}

fn look(nf: &dyn Netfilter, dir: &Path) -> Result<Seen, FwError> {
    let filter = filter_pid(dir);
    let refused = std::fs::read_to_string(dir.join(dns::STATS_FILE))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .filter(|v| filter.is_some_and(|p| v["pid"] == p))
        .map(|v| v["refused"].clone());
    Ok(Seen {
        st: State::load(dir)?,
        sets: set_sizes(),
        rules4: rule_count(Family::V4),
        rules6: nf.has_ipv6().then(|| rule_count(Family::V6)).flatten(),
        filter,
        refused,
    })
}

pub fn status(nf: &dyn Netfilter, common: &CommonArgs, dir: &Path) -> Result<(), FwError> {
    let seen = look(nf, dir)?;
    let mut out = std::io::stdout().lock();
    if common.json {
        let data = serde_json::json!({
            "installed": seen.rules4.is_some(),
            "open": seen.st.as_ref().is_some_and(|s| s.open),
            "rules": {"ipv4": seen.rules4, "ipv6": seen.rules6, "backend": netfilter::backend().name()},
            "sets": seen.sets,
            "dns_filter": {"running": seen.filter.is_some(), "pid": seen.filter, "listen": format!("{}:53", plan::FILTER_ADDR), "refused": seen.refused},
            "state": seen.st,
        });
        output::json_line(&mut out, "status", &data).with_path("stdout")?;
        return Ok(());
    }
    let lines = match &seen.st {
        None => vec![format!(
            "not initialized (no {}); rules: {}",
            state::path(dir).display(),
            seen.rules4.map_or("none".into(), |n| n.to_string())
        )],
        Some(st) if st.open => vec![format!(
            "OPEN: allow-external = true, no filtering (since {})",
            st.installed_at
        )],
        Some(st) => text(&seen, st),
    };
    for l in lines {
        writeln!(out, "{l}").with_path("stdout")?;
    }
    Ok(())
}

/// The text report of an installed firewall, one line per item.
fn text(seen: &Seen, st: &State) -> Vec<String> {
    let show = |n: Option<usize>| n.map_or("missing".to_owned(), |n| n.to_string());
    let mut l = vec![
        format!("installed     {}", st.installed_at),
        format!("refreshed     {}", st.refreshed_at),
        format!(
            "rules         {} IPv4, {} IPv6 in SBX-OUT ({} iptables)",
            show(seen.rules4),
            show(seen.rules6),
            netfilter::backend().name()
        ),
    ];
    for (s, n) in &seen.sets {
        l.push(format!("set {s:<10}    {} entries", show(*n)));
    }
    let ok = st.names.iter().filter(|n| n.error.is_none()).count();
    l.push(format!(
        "names         {} allowed, {ok} resolved at init or allow",
        st.allow.len()
    ));
    let gh = &st.github;
    l.push(format!(
        "github        {}",
        if gh.enabled {
            let at = gh.fetched_at.as_deref().map(|t| format!(", fetched {t}"));
            format!(
                "{} ranges ({}{})",
                gh.ranges,
                gh.source.name(),
                at.unwrap_or_default()
            )
        } else {
            "off".into()
        }
    ));
    let ups: Vec<String> = st.upstreams.iter().map(|u| u.to_string()).collect();
    l.push(format!(
        "dns filter    {} on {}:53, upstream {}",
        seen.filter
            .map_or("NOT RUNNING".to_owned(), |p| format!("pid {p}")),
        plan::FILTER_ADDR,
        ups.join(", ")
    ));
    if let Some(r) = seen.refused.as_ref().and_then(|r| r.as_object()) {
        let nonzero: Vec<String> = r
            .iter()
            .filter(|(_, n)| n.as_u64().is_some_and(|n| n > 0))
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let refused = if nonzero.is_empty() {
            "none".to_owned()
        } else {
            nonzero.join(", ")
        };
        l.push(format!("dns refused   {refused}"));
    }
    l.extend(st.warnings.iter().map(|w| format!("warning       {w}")));
    l
}
