//! GitHub's published address ranges (the meta API), fetched over HTTPS
//! with rustls, cached on disk, and used from the cache when a fetch fails.

use std::fs;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::netfilter::{Netfilter, System};
use crate::plan::{SET_ALLOW4, SET_ALLOW6};
use crate::resolve;

pub const DEFAULT_META_URL: &str = "https://api.github.com/meta";
/// The meta keys whose ranges serve git over SSH and HTTPS, the web and the API.
const KEYS: &[&str] = &["git", "web", "api"];
const BODY_LIMIT: u64 = 16 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ranges {
    pub nets: Vec<IpNet>,
    pub source: RangeSource,
    /// When the ranges were fetched, RFC 3339.
    pub fetched_at: Option<String>,
    /// Why the fetch failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Why GitHub's ranges could not be had from the meta API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("\"{0}\" is not a list")]
    NotAList(&'static str),
    #[error("\"{0}\" holds a non-string")]
    NotAString(&'static str),
    #[error("\"{key}\" holds \"{value}\", which is not a CIDR range")]
    NotCidr { key: &'static str, value: String },
    #[error("none of {} present: not a GitHub meta document", KEYS.join(", "))]
    NoRanges,
    #[error("{}: {why} (set SSL_CERT_FILE to a PEM bundle)", path.display())]
    Certificates { path: PathBuf, why: String },
    #[error("{0}")]
    Fetch(String),
}

/// Where the meta document comes from: HTTPS in the real one, canned
/// bodies, garbage or failures in tests.
pub trait MetaFetch: Send + Sync {
    /// The body of one GET of `url`, within `timeout`.
    fn fetch(&self, url: &str, timeout: Duration) -> Result<String, MetaError>;
}

/// Where the installed ranges came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RangeSource {
    Fetched,
    /// The last good copy, the fetch having failed.
    Cache,
    /// None at all: GitHub stays blocked.
    #[default]
    None,
}

impl RangeSource {
    pub fn name(self) -> &'static str {
        match self {
            RangeSource::Fetched => "fetched",
            RangeSource::Cache => "cache",
            RangeSource::None => "none",
        }
    }
}

impl Ranges {
    /// No ranges: GitHub stays blocked.
    pub fn none(why: &str) -> Self {
        Self {
            nets: Vec::new(),
            source: RangeSource::None,
            fetched_at: None,
            error: Some(why.to_owned()),
        }
    }
}

/// Parse a meta document: the union of the wanted keys, aggregated.
pub fn parse_meta(body: &str) -> Result<Vec<IpNet>, MetaError> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| MetaError::NotJson(e.to_string()))?;
    let mut nets = Vec::new();
    for k in KEYS {
        let Some(list) = v.get(k) else { continue };
        let list = list.as_array().ok_or(MetaError::NotAList(k))?;
        for item in list {
            let s = item.as_str().ok_or(MetaError::NotAString(k))?;
            let net: IpNet = s
                .parse()
                .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| MetaError::NotCidr {
                    key: k,
                    value: s.to_owned(),
                })?;
            nets.push(net.trunc());
        }
    }
    if nets.is_empty() {
        return Err(MetaError::NoRanges);
    }
    Ok(IpNet::aggregate(&nets))
}

/// The meta API over HTTPS with rustls, trusting `ca_file`; a token
/// (`GH_TOKEN`) raises the rate limit. The host is looked up at
/// `upstreams` themselves, never through resolv.conf: a re-init must not
/// depend on the DNS filter it is replacing.
pub struct Https {
    pub ca_file: PathBuf,
    pub token: Option<String>,
    pub upstreams: Vec<IpAddr>,
    /// Let the addresses found through the rules in place (not in a dry run).
    pub open: bool,
}

/// How long the rules in place let init reach the meta host: the new
/// rules replace the set well before.
const META_HOLD: u32 = 60;

/// reqwest's name lookup, done by [`crate::resolve`] against the upstreams.
#[derive(Debug)]
struct AtUpstreams {
    upstreams: Vec<IpAddr>,
    timeout: Duration,
    open: bool,
}

impl AtUpstreams {
    /// The addresses of `host`; no port (the connector sets the URL's).
    fn lookup(&self, host: &str) -> Result<Vec<SocketAddr>, String> {
        let ips: Vec<IpAddr> = match host.trim_matches(['[', ']']).parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => {
                let names = [host.to_owned()];
                let found = resolve::resolve_all(&self.upstreams, &names, self.timeout);
                let Some((_, Ok(a))) = found.into_iter().next() else {
                    return Err(format!("{host}: not found at the upstream resolvers"));
                };
                let v4 = a.v4.into_iter().map(IpAddr::V4);
                v4.chain(a.v6.into_iter().map(IpAddr::V6)).collect()
            }
        };
        if ips.is_empty() {
            return Err(format!("{host}: no address"));
        }
        if self.open {
            open_in_place(&ips);
        }
        Ok(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)).collect())
    }
}

impl Resolve for AtUpstreams {
    fn resolve(&self, name: Name) -> Resolving {
        let at = Self {
            upstreams: self.upstreams.clone(),
            timeout: self.timeout,
            open: self.open,
        };
        let host = name.as_str().to_owned();
        // resolve_all runs its own runtime: off reqwest's, on a blocking thread.
        Box::pin(async move {
            let found = tokio::task::spawn_blocking(move || at.lookup(&host)).await?;
            let addrs: Addrs = Box::new(found?.into_iter());
            Ok(addrs)
        })
    }
}

impl Https {
    /// rustls with the workspace's one provider, trusting only `ca_file`.
    fn tls(&self) -> Result<rustls::ClientConfig, MetaError> {
        let bad = |why: String| MetaError::Certificates {
            path: self.ca_file.clone(),
            why,
        };
        let pem = fs::read(&self.ca_file).map_err(|e| bad(e.to_string()))?;
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&pem).flatten() {
            // A certificate rustls cannot use is skipped, as a browser would.
            let _ = roots.add(c);
        }
        if roots.is_empty() {
            return Err(bad("no certificates".into()));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Ok(rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| MetaError::Fetch(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth())
    }
}

/// The old rules (a re-init) let root reach the meta host only once the
/// filter has handed out its address: add it as the filter would. Before
/// the first init there are no sets and nothing to open.
fn open_in_place(ips: &[IpAddr]) {
    let script: String = ips
        .iter()
        .map(|ip| {
            let set = if ip.is_ipv4() { SET_ALLOW4 } else { SET_ALLOW6 };
            format!("add {set} {ip} timeout {META_HOLD}\n")
        })
        .collect();
    if let Err(e) = System.ipset_restore(&script) {
        sbx_core::output::debug(&format!("meta host not opened in the old sets: {e}"));
    }
}

impl MetaFetch for Https {
    /// One GET with a total deadline.
    fn fetch(&self, url: &str, timeout: Duration) -> Result<String, MetaError> {
        let at = AtUpstreams {
            upstreams: self.upstreams.clone(),
            timeout,
            open: self.open,
        };
        let fetch = |e: reqwest::Error| MetaError::Fetch(chain(&e));
        let client = reqwest::blocking::Client::builder()
            .tls_backend_preconfigured(self.tls()?)
            .no_proxy()
            .timeout(timeout)
            .user_agent("sbx-fw")
            .dns_resolver(Arc::new(at))
            .build()
            .map_err(fetch)?;
        let mut req = client
            .get(url)
            .header("Accept", "application/vnd.github+json");
        if let Some(t) = self.token.as_deref().filter(|t| !t.is_empty()) {
            req = req.bearer_auth(t);
        }
        let resp = req
            .send()
            .and_then(|r| r.error_for_status())
            .map_err(fetch)?;
        let mut body = String::new();
        resp.take(BODY_LIMIT + 1)
            .read_to_string(&mut body)
            .map_err(|e| MetaError::Fetch(chain(&e)))?;
        if body.len() as u64 > BODY_LIMIT {
            return Err(MetaError::Fetch(format!(
                "the body is over {} MiB",
                BODY_LIMIT >> 20
            )));
        }
        Ok(body)
    }
}

/// An error and its causes on one line: reqwest's own says only
/// "error sending request".
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(c) = next {
        out.push_str(": ");
        out.push_str(&c.to_string());
        next = c.source();
    }
    out
}

pub fn cache_path(dir: &Path) -> PathBuf {
    dir.join("github-meta.json")
}

pub fn load_cache(dir: &Path) -> Option<Ranges> {
    let text = fs::read_to_string(cache_path(dir)).ok()?;
    let mut r: Ranges = serde_json::from_str(&text).ok()?;
    r.source = RangeSource::Cache;
    (!r.nets.is_empty()).then_some(r)
}

pub fn store_cache(dir: &Path, r: &Ranges) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    let tmp = dir.join(".github-meta.json.tmp");
    let mut f = fs::File::create(&tmp)?;
    f.write_all(
        serde_json::to_string(r)
            .map_err(std::io::Error::other)?
            .as_bytes(),
    )?;
    f.sync_all()?;
    fs::rename(tmp, cache_path(dir))
}

/// Fetch, else the cache, else nothing (GitHub stays blocked). A body
/// that is not a meta document counts as a failed fetch.
pub fn ranges(
    meta: &dyn MetaFetch,
    clock: &dyn Clock,
    url: &str,
    cache_dir: &Path,
    timeout: Duration,
) -> Ranges {
    match meta.fetch(url, timeout).and_then(|b| parse_meta(&b)) {
        Ok(nets) => {
            let r = Ranges {
                nets,
                source: RangeSource::Fetched,
                fetched_at: Some(clock.stamp()),
                error: None,
            };
            if let Err(e) = store_cache(cache_dir, &r) {
                sbx_core::output::warn(&format!(
                    "cannot cache GitHub ranges in {}: {e}",
                    cache_dir.display()
                ));
            }
            r
        }
        Err(e) => match load_cache(cache_dir) {
            Some(mut r) => {
                r.error = Some(e.to_string());
                r
            }
            None => Ranges::none(&e.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_is_merged_and_aggregated() {
        let body = r#"{"verifiable_password_authentication":false,
            "web":["192.0.2.0/25","192.0.2.128/25","2001:db8::/33"],
            "api":["192.0.2.0/24","198.51.100.7"],
            "git":["2001:db8:8000::/33"],
            "hooks":["203.0.113.0/24"]}"#;
        let nets = parse_meta(body).unwrap();
        let s: Vec<String> = nets.iter().map(|n| n.to_string()).collect();
        assert_eq!(s, ["192.0.2.0/24", "198.51.100.7/32", "2001:db8::/32"]);
    }

    #[test]
    fn bad_meta_is_refused_by_name() {
        let err = |b: &str| parse_meta(b).unwrap_err().to_string();
        assert!(err("<html>").contains("not JSON"));
        assert!(err(r#"{"web":["nope"]}"#).contains("\"nope\""));
        assert!(err(r#"{"message":"rate limited"}"#).contains("not a GitHub meta"));
    }

    #[test]
    fn cache_round_trip() {
        let d = tempfile::tempdir().unwrap();
        assert!(load_cache(d.path()).is_none());
        let r = Ranges {
            nets: vec!["192.0.2.0/24".parse().unwrap()],
            source: RangeSource::Fetched,
            fetched_at: Some("2026-01-01T00:00:00Z".into()),
            error: None,
        };
        store_cache(d.path(), &r).unwrap();
        let back = load_cache(d.path()).unwrap();
        assert_eq!(back.nets, r.nets);
        assert_eq!(back.source, RangeSource::Cache);
    }
}
