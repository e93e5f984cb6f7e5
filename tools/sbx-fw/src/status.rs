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

pub fn status(nf: &dyn Netfilter, common: &CommonArgs, dir: &Path) -> Result<(), FwError> {
    let st = State::load(dir)?;
    let sets = set_sizes();
    let rules4 = rule_count(Family::V4);
    let rules6 = if nf.has_ipv6() {
        rule_count(Family::V6)
    } else {
        None
    };
    let filter = filter_pid(dir);
    // The filter's refusal counters, when the file is the running filter's.
    let refused = std::fs::read_to_string(dir.join(dns::STATS_FILE))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .filter(|v| filter.is_some_and(|p| v["pid"] == p))
        .map(|v| v["refused"].clone());
    let mut out = std::io::stdout().lock();
    if common.json {
        let data = serde_json::json!({
            "installed": rules4.is_some(),
            "open": st.as_ref().is_some_and(|s| s.open),
            "rules": {"ipv4": rules4, "ipv6": rules6, "backend": netfilter::backend().name()},
            "sets": sets,
            "dns_filter": {"running": filter.is_some(), "pid": filter, "listen": format!("{}:53", plan::FILTER_ADDR), "refused": refused},
            "state": st,
        });
        output::json_line(&mut out, "status", &data).with_path("stdout")?;
        return Ok(());
    }
    let Some(st) = st else {
        writeln!(
            out,
            "not initialized (no {}); rules: {}",
            state::path(dir).display(),
            rules4.map_or("none".into(), |n| n.to_string())
        )
        .with_path("stdout")?;
        return Ok(());
    };
    if st.open {
        writeln!(
            out,
            "OPEN: allow-external = true, no filtering (since {})",
            st.installed_at
        )
        .with_path("stdout")?;
        return Ok(());
    }
    let show = |n: Option<usize>| n.map_or("missing".to_owned(), |n| n.to_string());
    writeln!(out, "installed     {}", st.installed_at).with_path("stdout")?;
    writeln!(out, "refreshed     {}", st.refreshed_at).with_path("stdout")?;
    writeln!(
        out,
        "rules         {} IPv4, {} IPv6 in SBX-OUT ({} iptables)",
        show(rules4),
        show(rules6),
        netfilter::backend().name()
    )
    .with_path("stdout")?;
    for (s, n) in &sets {
        writeln!(out, "set {s:<10}    {} entries", show(*n)).with_path("stdout")?;
    }
    let ok = st.names.iter().filter(|n| n.error.is_none()).count();
    writeln!(
        out,
        "names         {} allowed, {ok} resolved at init or allow",
        st.allow.len()
    )
    .with_path("stdout")?;
    writeln!(
        out,
        "github        {}",
        if st.github.enabled {
            format!(
                "{} ranges ({}{})",
                st.github.ranges,
                st.github.source,
                st.github
                    .fetched_at
                    .as_deref()
                    .map(|t| format!(", fetched {t}"))
                    .unwrap_or_default()
            )
        } else {
            "off".into()
        }
    )
    .with_path("stdout")?;
    let ups: Vec<String> = st.upstreams.iter().map(|u| u.to_string()).collect();
    writeln!(
        out,
        "dns filter    {} on {}:53, upstream {}",
        filter.map_or("NOT RUNNING".to_owned(), |p| format!("pid {p}")),
        plan::FILTER_ADDR,
        ups.join(", ")
    )
    .with_path("stdout")?;
    if let Some(r) = refused.as_ref().and_then(|r| r.as_object()) {
        let nonzero: Vec<String> = r
            .iter()
            .filter(|(_, n)| n.as_u64().is_some_and(|n| n > 0))
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(
            out,
            "dns refused   {}",
            if nonzero.is_empty() {
                "none".to_owned()
            } else {
                nonzero.join(", ")
            }
        )
        .with_path("stdout")?;
    }
    for w in &st.warnings {
        writeln!(out, "warning       {w}").with_path("stdout")?;
    }
    Ok(())
}
