//! What the last init installed, for `status`, `verify`, `allow`/`deny`
//! and the DNS filter: one JSON file, replaced atomically.

use std::fs;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use sbx_core::config::Domain;

use crate::allowlist::Source;
use crate::error::FwError;
use crate::github::RangeSource;
use crate::netfilter::Backend;

pub const DEFAULT_DIR: &str = "/run/sbx-fw";
const VERSION: u32 = 1;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct State {
    pub version: u32,
    pub installed_at: String,
    pub refreshed_at: String,
    /// `true` when allow-external turned the firewall off.
    pub open: bool,
    /// The iptables backend the rules went into.
    #[serde(default)]
    pub backend: Backend,
    /// The resolvers the filter forwards to.
    pub upstreams: Vec<IpAddr>,
    /// resolv.conf as it was before init pointed it at the filter.
    pub resolv_conf_original: Option<String>,
    /// Names the DNS filter answers (exact and `*.` wildcards).
    pub allow: Vec<Domain>,
    /// Those of `allow` that are GitHub's: answered only with addresses
    /// inside `github_nets`.
    #[serde(default)]
    pub github_only: Vec<Domain>,
    /// GitHub's meta ranges as installed.
    #[serde(default)]
    pub github_nets: Vec<ipnet::IpNet>,
    /// What each name resolved to at init or on `allow`.
    pub names: Vec<Name>,
    /// `[network] dns-types`: query types forwarded besides the built-in ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_types: Vec<u16>,
    /// `[network] mode = "proxy"`: the nat redirect to `sbx-fw proxy` is installed.
    #[serde(default)]
    pub proxy: bool,
    /// `[network.rules]` expanded (presets, the workspace's remotes, the
    /// built-in `off` hosts): host (or `*.` wildcard) -> the rules the
    /// proxy lets requests through by. A host here gets its TLS ended.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub rules: std::collections::BTreeMap<Domain, Vec<sbx_core::netrules::Rule>>,
    pub github: GithubState,
    pub warnings: Vec<String>,
    /// Names opened while the sandbox runs (`sbx-fw grant`), each until
    /// its time: answered and let through as if allowlisted until then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<Grant>,
}

/// One `sbx-fw grant`: an entry allowed until a time (Unix seconds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub entry: Domain,
    pub until: u64,
    /// Who asked (`sbx-run allow`, `on-block`), for `--list` and the log.
    pub by: String,
}

impl Grant {
    pub fn live(&self, now: u64) -> bool {
        now < self.until
    }
}

/// Now in Unix seconds: grants are compared against the wall clock, the
/// one clock the host that gave them and the guest share.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Name {
    pub name: String,
    pub source: Source,
    pub v4: Vec<Ipv4Addr>,
    pub v6: Vec<Ipv6Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GithubState {
    pub enabled: bool,
    pub source: RangeSource,
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

/// The policy's generation, a counter each [`State::store`] moves on: the
/// DNS filter compares it (a short read) before it trusts its copy.
pub fn generation(dir: &Path) -> Option<String> {
    fs::read_to_string(dir.join(GENERATION)).ok()
}

const GENERATION: &str = "policy.gen";

/// The policy lock. init, allow and deny hold it across their state write
/// and set cleanup; the DNS filter across its last look at the policy and
/// its add to the allow set. So an answer that was on its way when a name
/// was denied finds the new policy and adds nothing, and deny's cleanup
/// never runs between a filter's check and its add.
#[derive(Debug)]
pub struct PolicyLock(#[allow(dead_code)] nix::fcntl::Flock<fs::File>);

pub fn lock(dir: &Path) -> std::io::Result<PolicyLock> {
    fs::create_dir_all(dir)?;
    let f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(dir.join("policy.lock"))?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map(PolicyLock)
        .map_err(|(_, e)| e.into())
}

impl State {
    pub fn new() -> Self {
        Self {
            version: VERSION,
            backend: crate::netfilter::backend(),
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
        fs::rename(tmp, path(dir))?;
        let next = generation(dir)
            .and_then(|g| g.trim().parse::<u64>().ok())
            .map_or(1, |g| g.wrapping_add(1));
        let tmp = dir.join(format!(".{GENERATION}.tmp"));
        fs::write(&tmp, next.to_string())?;
        fs::rename(tmp, dir.join(GENERATION))
    }

    pub fn is_permanent(&self, ip: IpAddr) -> bool {
        self.names.iter().any(|n| match ip {
            IpAddr::V4(a) => n.v4.contains(&a),
            IpAddr::V6(a) => n.v6.contains(&a),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state file as the previous, untyped version wrote it reads back
    /// into the typed fields, and writes out the same text again.
    #[test]
    fn the_previous_format_reads_and_round_trips() {
        let old = r#"{"version":1,"installed_at":"2026-11-23T10:00:00Z","refreshed_at":"2026-11-23T10:00:00Z",
            "open":false,"backend":"legacy","upstreams":["198.18.0.53"],"resolv_conf_original":null,
            "allow":["*.github.com","allowed.test"],"github_only":["*.github.com"],
            "github_nets":["198.18.3.0/24"],
            "names":[{"name":"allowed.test","source":"agentapi","v4":["198.18.1.1"],"v6":[]},
                     {"name":"x.test","source":"runtime","v4":[],"v6":[],"error":"no such name (NXDOMAIN)"}],
            "proxy":false,"github":{"enabled":true,"source":"cache","ranges":1,"fetched_at":null},"warnings":[]}"#;
        let d = tempfile::tempdir().unwrap();
        fs::write(path(d.path()), old).unwrap();
        let st = State::load(d.path()).unwrap().unwrap();
        assert_eq!(st.backend, Backend::Legacy);
        assert_eq!(st.names[0].source, Source::AgentApi);
        assert_eq!(st.github.source, RangeSource::Cache);
        assert_eq!(st.github_only, ["*.github.com".parse::<Domain>().unwrap()]);
        st.store(d.path()).unwrap();
        let again: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(path(d.path())).unwrap()).unwrap();
        let before: serde_json::Value = serde_json::from_str(old).unwrap();
        assert_eq!(again, before);
    }

    /// A value the types do not know, or another format version, is refused
    /// by name (exit 65), never half read.
    #[test]
    fn an_unknown_value_or_version_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let mut st = State::new();
        st.store(d.path()).unwrap();
        let text = fs::read_to_string(path(d.path())).unwrap();
        for (from, to) in [
            ("\"version\": 1", "\"version\": 2"),
            ("\"enabled\": false", "\"enabled\": 3"),
        ] {
            fs::write(path(d.path()), text.replace(from, to)).unwrap();
            let e = State::load(d.path()).unwrap_err();
            assert_eq!(sbx_core::error::SbxError::exit(&e).code(), 65, "{e}");
            assert!(e.to_string().contains("state.json"), "{e}");
        }
        st.github.source = RangeSource::Fetched;
        st.store(d.path()).unwrap();
        let t = fs::read_to_string(path(d.path()))
            .unwrap()
            .replace("\"fetched\"", "\"bogus\"");
        fs::write(path(d.path()), t).unwrap();
        assert!(State::load(d.path()).is_err());
    }
}
