//! `sbx-fw allow` and `deny`: the running allowlist changed in place,
//! keeping every open connection but those to what was denied.

use std::net::IpAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use sbx_core::audit::{self, Outcome, Record};
use sbx_core::config::Domain;
use sbx_core::error::IoContext;

use crate::allowlist::Source;
use crate::clock::Clock;
use crate::error::FwError;
use crate::netfilter::Netfilter;
use crate::plan::{SET_ALLOW4, SET_ALLOW6};
use crate::resolve::Resolver;
use crate::state::{self, State};
use crate::{TOOL, dns};

/// What a runtime change works on: the packet filter, the time it is
/// recorded at, the state directory.
pub struct Runtime<'a> {
    pub nf: &'a dyn Netfilter,
    pub clock: &'a dyn Clock,
    pub dir: &'a Path,
}

pub fn parse_domains(raw: &[String]) -> Result<Vec<Domain>, FwError> {
    raw.iter()
        .map(|d| d.parse::<Domain>().map_err(FwError::BadDomain))
        .collect()
}

pub fn load_state(dir: &Path) -> Result<State, FwError> {
    State::load(dir)?.ok_or_else(|| FwError::NoState(dir.to_owned()))
}

fn set_for(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() { SET_ALLOW4 } else { SET_ALLOW6 }
}

/// Resolve the exact names, add their addresses for good, and let the
/// filter answer the names (and wildcards). All or nothing: one
/// unresolvable name changes nothing.
pub fn allow(w: &Runtime<'_>, resolver: &dyn Resolver, domains: &[Domain]) -> Result<(), FwError> {
    let (nf, dir) = (w.nf, w.dir);
    // Resolved before the lock (it may take seconds), checked after.
    let st0 = load_state(dir)?;
    let exact: Vec<String> = domains
        .iter()
        .filter(|d| !d.wildcard)
        .map(|d| d.name.clone())
        .collect();
    let outcomes = resolver.resolve_all(&st0.upstreams, &exact, Duration::from_secs(3));
    let mut script = String::new();
    let mut names = Vec::new();
    for (name, res) in outcomes {
        let addrs = res.map_err(|f| FwError::Unresolvable {
            name: name.clone(),
            why: f.to_string(),
        })?;
        for ip in addrs.v4.iter().map(|a| IpAddr::V4(*a)) {
            script.push_str(&format!("add {} {ip} timeout 0\n", set_for(ip)));
        }
        for ip in addrs.v6.iter().map(|a| IpAddr::V6(*a)) {
            script.push_str(&format!("add {} {ip} timeout 0\n", set_for(ip)));
        }
        names.push(state::Name {
            name,
            source: Source::Runtime,
            v4: addrs.v4,
            v6: addrs.v6,
            error: None,
        });
    }
    let _held = state::lock(dir).with_path(dir.join("policy.lock"))?;
    let mut st = load_state(dir)?;
    nf.ipset_restore(&script)?;
    for n in names {
        st.names.retain(|x| x.name != n.name);
        st.names.push(n);
    }
    for d in domains {
        let s = d.to_string();
        if !st.allow.contains(d) {
            st.allow.push(d.clone());
        }
        audit::append(&Record::new(
            TOOL,
            "allow",
            &s,
            Outcome::Allowed,
            "runtime-allow",
        ));
    }
    st.refreshed_at = w.clock.stamp();
    st.store(dir).with_path(state::path(dir))?;
    Ok(())
}

/// Stop answering the entries, then take out the addresses they alone
/// hold (resolved at init or allow, or handed out by the filter) and cut
/// the connections to them.
pub fn deny(w: &Runtime<'_>, domains: &[Domain]) -> Result<(), FwError> {
    let (nf, dir) = (w.nf, w.dir);
    let held = state::lock(dir).with_path(dir.join("policy.lock"))?;
    let mut st = load_state(dir)?;
    let mut gone: Vec<IpAddr> = Vec::new();
    for d in domains {
        st.allow.retain(|x| x != d);
        if let Some(pos) = st
            .names
            .iter()
            .position(|n| n.name == d.name && !d.wildcard)
        {
            let n = st.names.remove(pos);
            let ips = n.v4.iter().map(|a| IpAddr::V4(*a));
            gone.extend(ips.chain(n.v6.iter().map(|a| IpAddr::V6(*a))));
        }
        audit::append(&Record::new(
            TOOL,
            "deny",
            &d.to_string(),
            Outcome::Blocked,
            "runtime-deny",
        ));
    }
    // Keep addresses another allowed name still resolves to.
    let mut script: String = gone
        .iter()
        .filter(|ip| !st.is_permanent(**ip))
        .map(|ip| format!("del {} {ip}\n", set_for(*ip)))
        .collect();
    // The filter stops answering for the denied entries first, then what
    // it handed out for them alone goes too.
    st.refreshed_at = w.clock.stamp();
    st.store(dir).with_path(state::path(dir))?;
    let removed = handed_out_for(&st, domains, dir);
    for ip in &removed {
        script.push_str(&format!("del {} {ip}\n", set_for(*ip)));
    }
    if !script.is_empty() {
        nf.ipset_restore(&script)?;
        forget_flows(nf, &removed)?;
    }
    drop(held);
    Ok(())
}

/// Addresses the filter handed out for the denied entries and for no
/// entry still allowed.
fn handed_out_for(st: &State, domains: &[Domain], dir: &Path) -> Vec<IpAddr> {
    let denied: Vec<String> = domains.iter().map(|d| d.to_string()).collect();
    dns::read_handed(dir)
        .into_iter()
        .filter(|(ip, entries)| {
            let held_by_denied = entries.iter().any(|e| denied.contains(e));
            let still_held = entries
                .iter()
                .any(|e| !denied.contains(e) && st.allow.iter().any(|d| d.to_string() == *e));
            held_by_denied && !still_held && !st.is_permanent(*ip)
        })
        .map(|(ip, _)| ip)
        .collect()
}

/// Connections already open to a removed address die too: their conntrack
/// entries go (conntrack(8) deletes by address; without it the whole
/// table is flushed, which also cuts other connections, but fails closed).
fn forget_flows(nf: &dyn Netfilter, removed: &[IpAddr]) -> Result<(), FwError> {
    for ip in removed {
        match Command::new("conntrack")
            .args(["-D", "-d", &ip.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
        {
            // 1: no entry to delete.
            Ok(s) if matches!(s.code(), Some(0 | 1)) => {}
            _ => {
                nf.flush_conntrack()?;
                return Ok(());
            }
        }
    }
    Ok(())
}
