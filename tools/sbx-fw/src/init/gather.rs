//! Step one of init: every name the firewall will allow, from the config,
//! the image's tool configuration, the backup store, the agent's endpoint
//! and what was added at run time.

use std::path::Path;

use sbx_core::config::{Config, Domain, agent};
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
    agent_api(&mut list, cfg, env);
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

/// The agents' API endpoints: `[agent].base-url` and those the host's
/// environment named at `sbx-run start`; a loopback one never leaves the
/// sandbox.
fn agent_api(list: &mut Allowlist, cfg: &Config, env: Env<'_>) {
    let from_host = env(agent::SANDBOX_API_VAR).unwrap_or_default();
    let urls = cfg
        .agent
        .base_url
        .iter()
        .map(|u| ("[agent].base-url", u.clone()))
        .chain(
            from_host
                .split_whitespace()
                .filter_map(|u| u.parse::<agent::BaseUrl>().ok())
                .map(|u| (agent::SANDBOX_API_VAR, u)),
        );
    for (key, u) in urls.filter(|(_, u)| !u.is_loopback()) {
        match u.host.parse::<Domain>() {
            Ok(d) => list.push(d, Source::AgentApi),
            Err(_) => output::warn(&format!(
                "{key} {}: host {} is not a name the firewall can allow; the agent cannot reach it",
                u.text, u.host
            )),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn agent_api_names(base_url: Option<&str>, host: Option<&str>) -> Vec<String> {
        let mut cfg = Config::default();
        cfg.agent.base_url = base_url.map(|u| u.parse().unwrap());
        let env = |k: &str| (k == agent::SANDBOX_API_VAR).then(|| host.unwrap_or("").to_owned());
        let mut list = Allowlist::default();
        agent_api(&mut list, &cfg, &env);
        list.entries
            .iter()
            .filter(|e| e.source == Source::AgentApi)
            .map(|e| e.domain.to_string())
            .collect()
    }

    #[test]
    fn the_agents_endpoints_from_config_and_host_are_allowed_but_loopback() {
        assert_eq!(
            agent_api_names(Some("https://gw.corp.test/anthropic"), None),
            ["gw.corp.test"]
        );
        assert_eq!(
            agent_api_names(
                Some("http://127.0.0.1:8080"),
                Some(
                    "https://API.Gateway.test/v1 http://localhost:9 http://[::1]:7 https://codex.corp.test"
                )
            ),
            ["api.gateway.test", "codex.corp.test"]
        );
        assert!(agent_api_names(None, Some("not a url")).is_empty());
    }

    #[test]
    fn the_sandbox_variable_holds_the_hosts_parsable_endpoints() {
        let host = |vars: &'static [(&'static str, &'static str)]| {
            agent::sandbox_api_value(move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            })
        };
        assert_eq!(host(&[]), None);
        assert_eq!(
            host(&[
                ("ANTHROPIC_BASE_URL", "https://a.test"),
                ("OPENAI_BASE_URL", "ftp://nope"),
            ])
            .as_deref(),
            Some("https://a.test")
        );
        assert_eq!(
            host(&[
                ("ANTHROPIC_BASE_URL", "https://a.test"),
                ("OPENAI_BASE_URL", "https://o.test/v1"),
            ])
            .as_deref(),
            Some("https://a.test https://o.test/v1")
        );
    }
}
