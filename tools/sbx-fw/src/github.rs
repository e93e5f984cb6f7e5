//! GitHub's published address ranges (the meta API), fetched over HTTPS
//! with rustls, cached on disk, and used from the cache when a fetch fails.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

pub const DEFAULT_META_URL: &str = "https://api.github.com/meta";
/// The meta keys whose ranges serve git over SSH and HTTPS, the web and the API.
const KEYS: &[&str] = &["git", "web", "api"];
const BODY_LIMIT: u64 = 16 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ranges {
    pub nets: Vec<IpNet>,
    /// "fetched", "cache" or "none".
    pub source: String,
    /// When the ranges were fetched, RFC 3339.
    pub fetched_at: Option<String>,
    /// Why the fetch failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Parse a meta document: the union of the wanted keys, aggregated.
pub fn parse_meta(body: &str) -> Result<Vec<IpNet>, String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let mut nets = Vec::new();
    for k in KEYS {
        let Some(list) = v.get(k) else { continue };
        let list = list
            .as_array()
            .ok_or_else(|| format!("\"{k}\" is not a list"))?;
        for item in list {
            let s = item
                .as_str()
                .ok_or_else(|| format!("\"{k}\" holds a non-string"))?;
            let net: IpNet = s
                .parse()
                .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| format!("\"{k}\" holds \"{s}\", which is not a CIDR range"))?;
            nets.push(net.trunc());
        }
    }
    if nets.is_empty() {
        return Err(format!(
            "none of {} present: not a GitHub meta document",
            KEYS.join(", ")
        ));
    }
    Ok(IpNet::aggregate(&nets))
}

fn root_certs(ca_file: &Path) -> Result<Vec<ureq::tls::Certificate<'static>>, String> {
    let pem = fs::read(ca_file).map_err(|e| format!("{}: {e}", ca_file.display()))?;
    let certs: Vec<_> = ureq::tls::parse_pem(&pem)
        .filter_map(|i| match i {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return Err(format!("{}: no certificates", ca_file.display()));
    }
    Ok(certs)
}

/// One GET with a total deadline; `GH_TOKEN` raises the rate limit.
pub fn fetch(
    url: &str,
    ca_file: &Path,
    token: Option<&str>,
    timeout: Duration,
) -> Result<Vec<IpNet>, String> {
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::Specific(Arc::new(root_certs(
            ca_file,
        )?)))
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(tls)
        .proxy(None)
        .timeout_global(Some(timeout))
        .user_agent("sbx-fw")
        .build()
        .into();
    let mut req = agent
        .get(url)
        .header("Accept", "application/vnd.github+json");
    if let Some(t) = token.filter(|t| !t.is_empty()) {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut resp = req.call().map_err(|e| e.to_string())?;
    let body = resp
        .body_mut()
        .with_config()
        .limit(BODY_LIMIT)
        .read_to_string()
        .map_err(|e| e.to_string())?;
    parse_meta(&body)
}

pub fn cache_path(dir: &Path) -> PathBuf {
    dir.join("github-meta.json")
}

pub fn load_cache(dir: &Path) -> Option<Ranges> {
    let text = fs::read_to_string(cache_path(dir)).ok()?;
    let mut r: Ranges = serde_json::from_str(&text).ok()?;
    r.source = "cache".into();
    (!r.nets.is_empty()).then_some(r)
}

pub fn store_cache(dir: &Path, r: &Ranges) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    let tmp = dir.join(".github-meta.json.tmp");
    let mut f = fs::File::create(&tmp)?;
    f.write_all(serde_json::to_string(r).expect("serializable").as_bytes())?;
    f.sync_all()?;
    fs::rename(tmp, cache_path(dir))
}

/// Fetch, else the cache, else nothing (GitHub stays blocked).
pub fn ranges(
    url: &str,
    ca_file: &Path,
    token: Option<&str>,
    cache_dir: &Path,
    timeout: Duration,
) -> Ranges {
    match fetch(url, ca_file, token, timeout) {
        Ok(nets) => {
            let r = Ranges {
                nets,
                source: "fetched".into(),
                fetched_at: Some(
                    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
                ),
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
                r.error = Some(e);
                r
            }
            None => Ranges {
                nets: Vec::new(),
                source: "none".into(),
                fetched_at: None,
                error: Some(e),
            },
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
        assert!(parse_meta("<html>").unwrap_err().contains("not JSON"));
        assert!(
            parse_meta(r#"{"web":["nope"]}"#)
                .unwrap_err()
                .contains("\"nope\"")
        );
        assert!(
            parse_meta(r#"{"message":"rate limited"}"#)
                .unwrap_err()
                .contains("not a GitHub meta")
        );
    }

    #[test]
    fn cache_round_trip() {
        let d = tempfile::tempdir().unwrap();
        assert!(load_cache(d.path()).is_none());
        let r = Ranges {
            nets: vec!["192.0.2.0/24".parse().unwrap()],
            source: "fetched".into(),
            fetched_at: Some("2026-01-01T00:00:00Z".into()),
            error: None,
        };
        store_cache(d.path(), &r).unwrap();
        let back = load_cache(d.path()).unwrap();
        assert_eq!(back.nets, r.nets);
        assert_eq!(back.source, "cache");
    }
}
