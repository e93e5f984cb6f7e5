//! What may be reached: the built-in names, the config's, the package
//! registries the image's tools are configured to use, the backup store,
//! and runtime changes.

mod backup;
mod registries;

pub use backup::backup_endpoints;
pub use registries::registry_hosts;

use sbx_core::config::{Domain, Network};

/// The endpoints the image's AI CLIs use.
/// GitHub is allowed by its published ranges, not by name (see `github`).
pub const DEFAULT_NAMES: &[&str] = &[
    // Anthropic: API, OAuth login, telemetry
    "api.anthropic.com",
    "console.anthropic.com",
    "statsig.anthropic.com",
    "claude.ai",
    // OpenAI: API, auth, ChatGPT sign-in for Codex
    "api.openai.com",
    "auth.openai.com",
    "chatgpt.com",
    // OpenRouter
    "openrouter.ai",
    // No error-reporting or feature-flag services: Sentry and Statsig take
    // data for any customer's project (an agent posts to its own Sentry
    // org), so the image sets the CLIs' non-essential-traffic switches
    // instead (CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC).
];

/// Names the DNS filter answers when GitHub is allowed; their addresses
/// are reachable on 22 and 443 only inside the published meta ranges.
pub const GITHUB_NAMES: &[&str] = &[
    "github.com",
    "*.github.com",
    "githubusercontent.com",
    "*.githubusercontent.com",
    "ghcr.io",
];

/// The names one init works from, each tagged with where it came from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allowlist {
    pub entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub domain: Domain,
    pub source: Source,
    pub required: bool,
}

/// Where an allowlist entry came from, as the state file spells it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Default,
    #[default]
    Config,
    Registry,
    Github,
    Backup,
    /// `[agent].base-url`'s host (sbx-run agent's API endpoint).
    AgentApi,
    Runtime,
}

impl Allowlist {
    /// Built-in names, the config's, `registries` (hosts read by
    /// [`registry_hosts`]) and GitHub's names; `required` marks entries.
    pub fn build(net: &Network, registries: &[String]) -> Self {
        let mut list = Self::default();
        for n in DEFAULT_NAMES {
            list.push(
                n.parse().expect("built-in names are valid"),
                Source::Default,
            );
        }
        for d in net.allow_domains.iter() {
            list.push(d.clone(), Source::Config);
        }
        if net.registries {
            for h in registries {
                if let Ok(d) = h.parse() {
                    list.push(d, Source::Registry);
                }
            }
        }
        if net.github {
            for n in GITHUB_NAMES {
                list.push(n.parse().expect("built-in names are valid"), Source::Github);
            }
        }
        for d in net.required.iter() {
            list.push(d.clone(), Source::Config);
            for e in &mut list.entries {
                if e.domain == *d {
                    e.required = true;
                }
            }
        }
        list
    }

    pub fn push(&mut self, domain: Domain, source: Source) {
        if !self.entries.iter().any(|e| e.domain == domain) {
            self.entries.push(Entry {
                domain,
                source,
                required: false,
            });
        }
    }

    /// Exact names to resolve at init (wildcards are answered by the DNS
    /// filter when asked). GitHub names are reached through meta ranges.
    pub fn to_resolve(&self) -> impl Iterator<Item = &Entry> {
        self.entries
            .iter()
            .filter(|e| !e.domain.wildcard && e.source != Source::Github)
    }

    /// Whether the DNS filter may answer `name` (lowercase, no trailing dot).
    pub fn matches(&self, name: &str) -> bool {
        self.entries.iter().any(|e| domain_matches(&e.domain, name))
    }
}

/// `*.example.com` matches names strictly below example.com.
pub fn domain_matches(d: &Domain, name: &str) -> bool {
    let n = name.trim_end_matches('.').to_ascii_lowercase();
    let s = d.name.as_str();
    if d.wildcard {
        n.len() > s.len() + 1 && n.ends_with(s) && n.as_bytes()[n.len() - s.len() - 1] == b'.'
    } else {
        n == s
    }
}

/// The host of a URL such as `sparse+https://h:8080/x`: only a value that
/// parses as a URL with a scheme and a host names a host (a path such as
/// `PIP_FIND_LINKS=/opt/wheels`, or a bare word, names none). Only http(s)
/// transports count; addresses are not names and are skipped.
pub fn url_host(u: &str) -> Option<Domain> {
    let u = u.trim().trim_matches('"');
    // A special scheme's parser forgives missing slashes (`http:/opt` has
    // host `opt`): insist on the authority being written out.
    let (_, rest) = u.split_once("://")?;
    if rest.starts_with('/') {
        return None;
    }
    let parsed = url::Url::parse(u).ok()?;
    // `sparse+https`, `git+https`: the transport is the last part.
    let transport = parsed.scheme().rsplit('+').next()?;
    if !matches!(transport, "http" | "https") {
        return None;
    }
    match parsed.host()? {
        url::Host::Domain(h) => h.parse::<Domain>().ok(),
        url::Host::Ipv4(_) | url::Host::Ipv6(_) => None,
    }
}

/// The port a URL names, or its scheme's (http 80, https 443).
pub fn url_port(u: &str) -> Option<u16> {
    url::Url::parse(u.trim()).ok()?.port_or_known_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Domain {
        s.parse().unwrap()
    }

    #[test]
    fn wildcards_match_only_below() {
        assert!(domain_matches(&d("*.example.com"), "a.example.com"));
        assert!(domain_matches(&d("*.example.com"), "a.b.example.com."));
        assert!(!domain_matches(&d("*.example.com"), "example.com"));
        assert!(!domain_matches(&d("*.example.com"), "badexample.com"));
        assert!(domain_matches(&d("api.example.com"), "API.example.com"));
        assert!(!domain_matches(&d("api.example.com"), "x.api.example.com"));
    }

    #[test]
    fn required_names_are_marked() {
        let net = Network {
            required: sbx_core::config::Unique(vec![d("must.test")]),
            ..Default::default()
        };
        let list = Allowlist::build(&net, &[]);
        assert!(
            list.entries
                .iter()
                .any(|e| e.domain.name == "must.test" && e.required)
        );
        assert!(list.matches("api.anthropic.com"));
        assert!(!list.matches("o1.ingest.sentry.io"));
        assert!(!list.matches("statsig.com"));
        assert!(!list.matches("api.statsig.com"));
        assert!(list.matches("codeload.github.com"));
        assert!(!list.matches("evil.test"));
    }

    #[test]
    fn url_hosts() {
        let host = |u: &str| url_host(u).map(|d| d.to_string());
        assert_eq!(
            host("https://mirror.corp:8443/npm/").as_deref(),
            Some("mirror.corp")
        );
        assert_eq!(
            host("sparse+https://u:p@crates.corp/index/").as_deref(),
            Some("crates.corp")
        );
        // Not URLs: a bare word, a path, a scheme without an authority.
        assert_eq!(url_host("pypi.corp"), None);
        assert_eq!(url_host("/opt/wheels"), None);
        assert_eq!(url_host("opt/wheels"), None);
        assert_eq!(url_host("http:/opt/wheels"), None);
        assert_eq!(url_host("http:opt"), None);
        assert_eq!(url_host("http:///opt/wheels"), None);
        assert_eq!(url_host("file:///opt/wheels"), None);
        assert_eq!(url_host("file:///srv/repo"), None);
        assert_eq!(url_host("http://10.0.0.1/debian"), None);
        assert_eq!(url_host("sparse+https://[::1]/index/"), None);
        assert_eq!(url_host("ftp://mirror.corp/debian"), None);
        assert_eq!(
            host("git+https://Git.Corp/x.git").as_deref(),
            Some("git.corp")
        );
    }

    #[test]
    fn url_ports_default_by_scheme() {
        assert_eq!(url_port("https://s3.example.com"), Some(443));
        assert_eq!(url_port("http://s3.example.com/x"), Some(80));
        assert_eq!(url_port("https://user@minio.test:9000/b"), Some(9000));
        assert_eq!(url_port("http://[::1]:9000"), Some(9000));
        assert_eq!(url_port("https://[::1]/"), Some(443));
        assert_eq!(url_port("minio.test:9000"), None);
    }
}
