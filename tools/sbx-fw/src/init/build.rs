//! Step three of init: the lookups' results become the complete plan (the
//! sets and rules to install) and the state that records it. Pure.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use sbx_core::config::{self, Config};

use crate::allowlist::Allowlist;
use crate::github::{RangeSource, Ranges};
use crate::plan::Plan;
use crate::resolve::Outcome;
use crate::state::{self, State};

/// What init will install, what it records, and what makes it give up.
#[derive(Debug, Default)]
pub struct Built {
    pub plan: Plan,
    pub state: State,
    /// Required names that failed: init aborts.
    pub fatal: Vec<String>,
    /// The policy lock, from the commit until the state is recorded.
    pub held: Option<crate::state::PolicyLock>,
}

/// The plan before any name: resolvers, ports, local nets, proxy mode.
pub fn base_plan(cfg: &Config, upstreams: &[IpAddr], local: Vec<IpNet>) -> Plan {
    let net = &cfg.network;
    Plan {
        upstreams: upstreams.to_vec(),
        allow_localhost: net.allow_localhost,
        no_git_ssh: !net.allow_git,
        inbound: inbound_ports(cfg),
        local,
        proxy_uid: (net.mode == config::NetMode::Proxy).then_some(crate::proxy::PROXY_UID),
        ..Plan::default()
    }
}

/// Container-side TCP ports of `[sandbox].ports` (UDP is never let in),
/// and sshd's with `[ssh] enabled`.
fn inbound_ports(cfg: &Config) -> Vec<u16> {
    cfg.sandbox
        .ports
        .iter()
        .filter(|p| !p.udp)
        .map(|p| p.container)
        .chain(cfg.ssh.enabled.then_some(config::SSH_PORT))
        .collect()
}

/// Each name's addresses into the allow sets (the first name to claim an
/// address owns it; a second is a warning), each failure a warning or,
/// for a required name, fatal.
pub fn build(plan: Plan, list: &Allowlist, outcomes: &[Outcome], github: Option<&Ranges>) -> Built {
    let mut b = Built {
        plan,
        state: State::new(),
        fatal: Vec::new(),
        held: None,
    };
    let mut owner: BTreeMap<IpAddr, String> = BTreeMap::new();
    for (name, res) in outcomes {
        let Some(entry) = list
            .entries
            .iter()
            .find(|e| e.domain.name == *name && !e.domain.wildcard)
        else {
            continue;
        };
        match res {
            Ok(addrs) => {
                b.allow_addresses(name, addrs, &mut owner);
                b.state.names.push(state::Name {
                    name: name.clone(),
                    source: entry.source,
                    v4: addrs.v4.clone(),
                    v6: addrs.v6.clone(),
                    error: None,
                });
            }
            Err(f) => {
                if entry.required {
                    b.fatal.push(format!("{name}: {f}"));
                } else {
                    b.state.warnings.push(format!("{name}: {f}; left out"));
                }
                b.state.names.push(state::Name {
                    name: name.clone(),
                    source: entry.source,
                    error: Some(f.to_string()),
                    ..Default::default()
                });
            }
        }
    }
    if let Some(gh) = github {
        b.github(gh);
    }
    b
}

impl Built {
    fn allow_addresses(
        &mut self,
        name: &str,
        addrs: &crate::resolve::Addresses,
        owner: &mut BTreeMap<IpAddr, String>,
    ) {
        let all = addrs
            .v4
            .iter()
            .map(|a| IpAddr::V4(*a))
            .chain(addrs.v6.iter().map(|a| IpAddr::V6(*a)));
        for ip in all {
            if let Some(first) = owner.get(&ip) {
                self.state
                    .warnings
                    .push(format!("{ip} is shared by {first} and {name}"));
                continue;
            }
            owner.insert(ip, name.to_owned());
            match ip {
                IpAddr::V4(v) => self.plan.allow4.push(v),
                IpAddr::V6(v) => self.plan.allow6.push(v),
            }
        }
    }

    /// GitHub's ranges, and a warning when they are stale or missing.
    fn github(&mut self, gh: &Ranges) {
        match (gh.source, &gh.error) {
            (RangeSource::None, Some(e)) => self.state.warnings.push(format!(
                "GitHub stays blocked: cannot fetch its ranges ({e}) and none are cached"
            )),
            (RangeSource::Cache, Some(e)) => self.state.warnings.push(format!(
                "GitHub ranges from the cache of {}: fetch failed ({e})",
                gh.fetched_at.as_deref().unwrap_or("an earlier run")
            )),
            _ => {}
        }
        self.plan.github = gh.nets.clone();
        self.state.github = state::GithubState {
            enabled: true,
            source: gh.source,
            ranges: gh.nets.len(),
            fetched_at: gh.fetched_at.clone(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(toml: &str) -> Vec<u16> {
        let cfg = config::parse_toml(toml, std::path::Path::new("c.toml")).unwrap();
        inbound_ports(&cfg)
    }

    #[test]
    fn sshd_is_let_in_only_with_ssh_enabled() {
        assert_eq!(ports("[sandbox]\nports = [\"3000\"]\n"), [3000]);
        assert_eq!(
            ports("[sandbox]\nports = [\"3000\"]\n[ssh]\nenabled = true\n"),
            [3000, config::SSH_PORT]
        );
        assert_eq!(ports("[ssh]\nenabled = false\n"), Vec::<u16>::new());
    }
}
