//! What the last init installed, for `status`, `verify`, `allow`/`deny`
//! and the DNS filter: one JSON file, replaced atomically.

use std::fs;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::FwError;

pub const DEFAULT_DIR: &str = "/run/sbx-fw";
const VERSION: u32 = 1;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct State {
    pub version: u32,
    pub installed_at: String,
    pub refreshed_at: String,
    /// `true` when allow-external turned the firewall off.
    pub open: bool,
    /// The iptables backend the rules went into ("legacy" or "system").
    #[serde(default)]
    pub backend: String,
    /// The resolvers the filter forwards to.
    pub upstreams: Vec<IpAddr>,
    /// resolv.conf as it was before init pointed it at the filter.
    pub resolv_conf_original: Option<String>,
    /// Names the DNS filter answers (exact and `*.` wildcards).
    pub allow: Vec<String>,
    /// Those of `allow` that are GitHub's: answered only with addresses
    /// inside `github_nets`.
    #[serde(default)]
    pub github_only: Vec<String>,
    /// GitHub's meta ranges as installed.
    #[serde(default)]
    pub github_nets: Vec<ipnet::IpNet>,
    /// What each name resolved to at init or on `allow`.
    pub names: Vec<Name>,
    /// `[network] mode = "proxy"`: the nat redirect to `sbx-fw proxy` is installed.
    #[serde(default)]
    pub proxy: bool,
    pub github: GithubState,
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Name {
    pub name: String,
    pub source: String,
    pub v4: Vec<Ipv4Addr>,
    pub v6: Vec<Ipv6Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GithubState {
    pub enabled: bool,
    pub source: String,
    pub ranges: usize,
    pub fetched_at: Option<String>,
}

pub fn dir_from_env() -> PathBuf {
    std::env::var_os("SBX_FW_STATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
}

pub fn path(dir: &Path) -> PathBuf {
    dir.join("state.json")
}

impl State {
    pub fn new() -> Self {
        Self {
            version: VERSION,
            backend: crate::netfilter::backend().name().into(),
            ..Self::default()
        }
    }

    /// The state, None when there is none yet.
    pub fn load(dir: &Path) -> Result<Option<Self>, FwError> {
        let p = path(dir);
        let bad = |why: String| FwError::BadState {
            path: p.clone(),
            why,
        };
        match fs::read_to_string(&p) {
            Ok(t) => {
                let s: State = serde_json::from_str(&t).map_err(|e| bad(e.to_string()))?;
                if s.version != VERSION {
                    return Err(bad(format!(
                        "format version {} is not {VERSION}",
                        s.version
                    )));
                }
                Ok(Some(s))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(bad(e.to_string())),
        }
    }

    /// Write to a temporary file and rename over the old one, so readers
    /// (the DNS filter) never see half a file.
    pub fn store(&self, dir: &Path) -> std::io::Result<()> {
        fs::create_dir_all(dir)?;
        let tmp = dir.join(".state.json.tmp");
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)?;
        f.write_all(
            serde_json::to_string_pretty(self)
                .expect("serializable")
                .as_bytes(),
        )?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        fs::rename(tmp, path(dir))
    }

    pub fn is_permanent(&self, ip: IpAddr) -> bool {
        self.names.iter().any(|n| match ip {
            IpAddr::V4(a) => n.v4.contains(&a),
            IpAddr::V6(a) => n.v6.contains(&a),
        })
    }
}
