//! Step one of init: every name the firewall will allow, from the config,
//! the image's tool configuration, the backup store, the agent's endpoint
//! and what was added at run time.

use std::path::Path;

use sbx_core::config::{Config, Domain};
use sbx_core::output;

use crate::allowlist::{self, Allowlist, Source};
use crate::state::State;

/// A variable of the environment init runs in.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The allowlist for this init: built-in and configured names, the
/// registries, GitHub's meta host, the backup store's endpoints, the
/// agent's API host, and the names and wildcards allowed at run time.
pub fn allowlist(cfg: &Config, meta_url: &str, prev: Option<&State>, env: Env<'_>) -> Allowlist {
    let net = &cfg.network;
    let registries = if net.registries {
        allowlist::registry_hosts(Path::new("/"), env)
    } else {
        Vec::new()
    };
    let mut list = Allowlist::build(net, &registries);
    // The meta host must be answerable when init re-runs behind the filter.
    if net.github
        && let Some(d) = allowlist::url_host(meta_url)
    {
        list.push(d, Source::Github);
    }
    backup_store(&mut list, cfg, env);
    agent_api(&mut list, cfg);
    if let Some(p) = prev {
        runtime_names(&mut list, p);
    }
    list
}

/// The backup store, reached from inside by sbx-backup (first boot, sync).
fn backup_store(list: &mut Allowlist, cfg: &Config, env: Env<'_>) {
    let Some(u) = &cfg.backup.url else { return };
    for e in allowlist::backup_endpoints(u, env) {
        match allowlist::url_host(&e) {
            Some(d) if allowlist::url_port(&e) == Some(443) => list.push(d, Source::Backup),
            _ => output::warn(&format!(
                "[backup].url {}: endpoint {e} is not https on port 443 to a name, \
                 which the firewall never allows; backups from inside will fail \
                 (use an https endpoint on 443, or back up from the host)",
                u.text
            )),
        }
    }
}

/// The agent's API endpoint; a loopback one never leaves the sandbox.
fn agent_api(list: &mut Allowlist, cfg: &Config) {
    let Some(u) = cfg.agent.base_url.as_ref().filter(|u| !u.is_loopback()) else {
        return;
    };
    match u.host.parse::<Domain>() {
        Ok(d) => list.push(d, Source::AgentApi),
        Err(_) => output::warn(&format!(
            "[agent].base-url {}: host {} is not a name the firewall can allow; the agent cannot reach it",
            u.text, u.host
        )),
    }
}

/// Names and wildcards `sbx-fw allow` added; GitHub's wildcards come back
/// only with github = true.
fn runtime_names(list: &mut Allowlist, p: &State) {
    for n in p.names.iter().filter(|n| n.source == Source::Runtime) {
        if let Ok(d) = n.name.parse() {
            list.push(d, Source::Runtime);
        }
    }
    for d in p
        .allow
        .iter()
        .filter(|d| d.wildcard && !p.github_only.contains(d))
        .cloned()
    {
        list.push(d, Source::Runtime);
    }
}
