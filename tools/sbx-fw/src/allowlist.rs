//! What may be reached: the built-in names, the config's, the package
//! registries the image's tools are configured to use, the backup store,
//! and runtime changes.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use sbx_core::config::{Domain, Network, StoreKind, StoreUrl};

/// Seed 000 "Allowed Services": the endpoints the image's AI CLIs use.
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
    // Error reporting and feature flags the CLIs call
    "sentry.io",
    "*.sentry.io",
    "statsig.com",
    "api.statsig.com",
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Default,
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

/// Registry hosts the image's npm, pip, cargo and apt are configured to
/// use, read from their own files and environment at run time. Nothing is
/// assumed: a tool with no configured registry contributes nothing here
/// (the base image writes npm's effective registry into its global npmrc).
pub fn registry_hosts(root: &Path, env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let mut hosts = BTreeSet::new();
    let home = env("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"));
    let rel = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    let mut urls: Vec<String> = Vec::new();

    // npm: builtin, global and user npmrc; `registry=` and `@scope:registry=`.
    for f in [
        PathBuf::from("/usr/share/nodejs/npm/npmrc"),
        PathBuf::from("/usr/etc/npmrc"),
        PathBuf::from("/etc/npmrc"),
        home.join(".npmrc"),
    ] {
        if let Ok(text) = fs::read_to_string(rel(&f)) {
            for line in text.lines() {
                if let Some((k, v)) = line.split_once('=') {
                    let k = k.trim();
                    if k == "registry" || k.ends_with(":registry") {
                        urls.push(v.trim().to_owned());
                    }
                }
            }
        }
    }
    for var in ["NPM_CONFIG_REGISTRY", "npm_config_registry"] {
        urls.extend(env(var));
    }

    // pip: pip.conf files and PIP_* variables; index-url, extra-index-url, find-links.
    for f in [
        PathBuf::from("/etc/pip.conf"),
        PathBuf::from("/etc/xdg/pip/pip.conf"),
        home.join(".pip/pip.conf"),
        home.join(".config/pip/pip.conf"),
    ] {
        if let Ok(text) = fs::read_to_string(rel(&f)) {
            let mut continuing = false;
            for line in text.lines() {
                let t = line.trim();
                if let Some((k, v)) = t.split_once('=') {
                    let k = k.trim();
                    continuing = matches!(
                        k,
                        "index-url" | "extra-index-url" | "find-links" | "trusted-host"
                    );
                    if continuing {
                        urls.extend(v.split_whitespace().map(str::to_owned));
                    }
                } else if continuing && line.starts_with(char::is_whitespace) && !t.is_empty() {
                    urls.extend(t.split_whitespace().map(str::to_owned));
                } else {
                    continuing = false;
                }
            }
        }
    }
    for var in [
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "PIP_FIND_LINKS",
        "PIP_TRUSTED_HOST",
    ] {
        if let Some(v) = env(var) {
            urls.extend(v.split_whitespace().map(str::to_owned));
        }
    }

    // cargo: `registry`, `index` and `dl`-bearing values in config.toml.
    let cargo_home = env("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cargo"));
    for f in [cargo_home.join("config.toml"), cargo_home.join("config")] {
        if let Ok(text) = fs::read_to_string(rel(&f))
            && let Ok(v) = text.parse::<toml::Table>()
        {
            collect_cargo(&toml::Value::Table(v), &mut urls);
        }
    }

    // apt: one-line and deb822 sources, disabled stanzas left out.
    for src in sbx_core::apt::read_sources(root) {
        urls.extend(src.uris);
    }

    for u in urls {
        if let Some(d) = url_host(&u) {
            hosts.insert(d.name);
        }
    }
    hosts.into_iter().collect()
}

/// The endpoints sbx-backup reaches for `[backup].url`, derived from the
/// same variables object_store's `from_env` reads, so a backup from inside
/// the sandbox gets through and nothing else does:
/// s3: `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL` / `AWS_ENDPOINT`, else
/// the regional endpoint (path style and the bucket's virtual host), plus
/// STS when a web identity token is used; gs: the storage API and Google's
/// token endpoints; file:// and memory:// reach nothing.
pub fn backup_endpoints(url: &StoreUrl, env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    match url.kind {
        StoreKind::S3 => {
            let region = var("AWS_REGION")
                .or_else(|| var("AWS_DEFAULT_REGION"))
                .unwrap_or_else(|| "us-east-1".to_owned());
            let mut out = match var("AWS_ENDPOINT_URL_S3")
                .or_else(|| var("AWS_ENDPOINT_URL"))
                .or_else(|| var("AWS_ENDPOINT"))
            {
                Some(e) => vec![e],
                None => {
                    let bucket = &url.bucket;
                    vec![
                        format!("https://s3.{region}.amazonaws.com"),
                        format!("https://{bucket}.s3.{region}.amazonaws.com"),
                    ]
                }
            };
            if var("AWS_WEB_IDENTITY_TOKEN_FILE").is_some() {
                out.push(
                    var("AWS_ENDPOINT_URL_STS")
                        .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com")),
                );
            }
            out
        }
        StoreKind::Gs => [
            "https://storage.googleapis.com",
            "https://oauth2.googleapis.com",
            "https://accounts.google.com",
        ]
        .map(str::to_owned)
        .to_vec(),
        StoreKind::File | StoreKind::Memory => Vec::new(),
    }
}

/// The port a URL names, or its scheme's (http 80, https 443).
pub fn url_port(u: &str) -> Option<u16> {
    url::Url::parse(u.trim()).ok()?.port_or_known_default()
}

fn collect_cargo(v: &toml::Value, out: &mut Vec<String>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                match (k.as_str(), v) {
                    ("registry" | "index", toml::Value::String(s)) => out.push(s.clone()),
                    _ => collect_cargo(v, out),
                }
            }
        }
        toml::Value::Array(a) => a.iter().for_each(|v| collect_cargo(v, out)),
        _ => {}
    }
}

/// The host of a URL such as `sparse+https://h:8080/x`, or a bare host
/// (pip's trusted-host). Addresses are not names and are skipped.
pub fn url_host(u: &str) -> Option<Domain> {
    let u = u.trim().trim_matches('"');
    let parsed = match u.split_once("://") {
        Some((scheme, rest)) => {
            // `sparse+https`, `git+https`: the transport is the last part.
            let scheme = scheme.rsplit('+').next().unwrap_or(scheme);
            if !matches!(scheme, "http" | "https") {
                return None;
            }
            url::Url::parse(&format!("{scheme}://{rest}")).ok()?
        }
        None => url::Url::parse(&format!("http://{u}")).ok()?,
    };
    match parsed.host()? {
        url::Host::Domain(h) => h.parse::<Domain>().ok(),
        url::Host::Ipv4(_) | url::Host::Ipv6(_) => None,
    }
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
        assert_eq!(host("pypi.corp").as_deref(), Some("pypi.corp"));
        assert_eq!(url_host("file:///srv/repo"), None);
        assert_eq!(url_host("http://10.0.0.1/debian"), None);
    }

    #[test]
    fn registries_are_read_from_each_tool_config() {
        let root = tempfile::tempdir().unwrap();
        let w = |p: &str, t: &str| {
            let p = root.path().join(p);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, t).unwrap();
        };
        w(
            "etc/npmrc",
            "registry=https://npm.corp.test/\n@acme:registry=https://acme.npm.test/\n",
        );
        w(
            "etc/pip.conf",
            "[global]\nindex-url = https://pypi.corp.test/simple\nextra-index-url =\n  https://extra.pip.test/simple\n",
        );
        w(
            "home/a/.cargo/config.toml",
            "[source.crates-io]\nreplace-with = \"corp\"\n[source.corp]\nregistry = \"sparse+https://cargo.corp.test/\"\n",
        );
        w(
            "etc/apt/sources.list",
            "deb [signed-by=/x.gpg] http://deb.corp.test/debian bookworm main\n# deb http://ignored.test/ x\n",
        );
        w(
            "etc/apt/sources.list.d/d.sources",
            "Types: deb\nURIs: https://sec.corp.test/debian-security\nSuites: x\n\n\
             Types: deb\nURIs: https://off.corp.test/debian\nSuites: x\nEnabled: no\n",
        );
        let env = |k: &str| match k {
            "HOME" => Some("/home/a".to_owned()),
            "PIP_INDEX_URL" => Some("https://env.pip.test/simple".to_owned()),
            _ => None,
        };
        let hosts = registry_hosts(root.path(), &env);
        assert_eq!(
            hosts,
            [
                "acme.npm.test",
                "cargo.corp.test",
                "deb.corp.test",
                "env.pip.test",
                "extra.pip.test",
                "npm.corp.test",
                "pypi.corp.test",
                "sec.corp.test"
            ]
        );
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
        assert!(list.matches("o1.ingest.sentry.io"));
        assert!(list.matches("codeload.github.com"));
        assert!(!list.matches("evil.test"));
    }

    #[test]
    fn backup_endpoints_follow_object_stores_variables() {
        let url = |u: &str| u.parse::<StoreUrl>().unwrap();
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let none = env(&[]);
        assert_eq!(
            backup_endpoints(&url("s3://bkt/home"), &none),
            [
                "https://s3.us-east-1.amazonaws.com",
                "https://bkt.s3.us-east-1.amazonaws.com"
            ]
        );
        let regional = env(&[("AWS_DEFAULT_REGION", "eu-west-1")]);
        assert_eq!(
            backup_endpoints(&url("s3://bkt"), &regional)[0],
            "https://s3.eu-west-1.amazonaws.com"
        );
        // AWS_REGION wins over the default region; an S3-specific endpoint
        // over the generic one; web identity adds STS.
        let custom = env(&[
            ("AWS_REGION", "eu-north-1"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_ENDPOINT_URL", "https://generic.example.com"),
            ("AWS_ENDPOINT_URL_S3", "https://minio.example.com"),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"),
        ]);
        assert_eq!(
            backup_endpoints(&url("s3://bkt/x"), &custom),
            [
                "https://minio.example.com",
                "https://sts.eu-north-1.amazonaws.com"
            ]
        );
        let empty = env(&[("AWS_ENDPOINT", "  ")]);
        assert_eq!(backup_endpoints(&url("s3://b"), &empty).len(), 2);
        assert!(
            backup_endpoints(&url("gs://bkt/p"), &none)
                .contains(&"https://storage.googleapis.com".to_owned())
        );
        assert!(backup_endpoints(&url("file:///var/tmp/b"), &custom).is_empty());
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
