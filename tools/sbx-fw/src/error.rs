//! Every way an sbx-fw command fails, each with its exit status from the
//! project's table and a message that names the input and what to do.

use std::net::SocketAddr;
use std::path::PathBuf;

use sbx_core::Exit;
use sbx_core::error::{BoxError, PathError, SbxError};

/// A netfilter or conntrack operation that did not happen.
#[derive(Debug, thiserror::Error)]
pub enum NetfilterError {
    #[error("cannot run {program}: {source} (install iptables and ipset)")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// The program ran and refused; `detail` is its first stderr line.
    #[error("{command}: {detail}")]
    Refused { command: String, detail: String },
    #[error("{program}: {source}")]
    Io {
        program: String,
        source: std::io::Error,
    },
    #[error("conntrack flush: {0}")]
    Conntrack(std::io::Error),
    #[error("{0}: thread panicked")]
    Panicked(&'static str),
}

#[derive(Debug, thiserror::Error)]
pub enum FwError {
    #[error("{op}: needs CAP_NET_ADMIN (run as root in the container's init, not as the agent)")]
    NoNetAdmin { op: &'static str },
    #[error(
        "{op}: only the sandbox's root may open names (the host user runs `sbx-run allow`); refused and recorded"
    )]
    NotRoot { op: &'static str },
    #[error("{0}")]
    BadGrant(String),
    #[error(
        "secret: only the sandbox's root may renew a secret (the host's sbx-run does it); refused and recorded"
    )]
    SecretNotRoot,
    #[error("{0}")]
    Secret(String),
    #[error("{path} names no nameserver: nothing to resolve the allowlist with")]
    NoNameserver { path: &'static str },
    #[error("required name failed: {}", .0.join("; "))]
    RequiredFailed(Vec<String>),
    /// An init that stopped before or during the commit; `how` says what
    /// the firewall is left as (never open).
    #[error("{0}")]
    GatewayUnpinned(String),
    #[error("{cause}; {how}")]
    Aborted { cause: Box<FwError>, how: String },
    #[error(transparent)]
    Netfilter(#[from] NetfilterError),
    #[error("no firewall state in {}: run `sbx-fw init` first", .0.display())]
    NoState(PathBuf),
    #[error("{}: {why} (remove it and run `sbx-fw init` again)", path.display())]
    BadState { path: PathBuf, why: String },
    #[error("{0}")]
    BadDomain(String),
    #[error("{0}")]
    BadProbe(String),
    #[error("{name}: {why}; nothing was changed")]
    Unresolvable { name: String, why: String },
    #[error("reset removes the firewall and leaves the sandbox open; say `sbx-fw reset --yes`")]
    ResetNeedsYes,
    #[error("the firewall is off (allow-external = true)")]
    FirewallOff,
    #[error("no allowlisted name with an IPv4 address to test{}", .0.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())]
    NothingToReach(Option<String>),
    #[error("cannot start {what}: {source}")]
    Spawn {
        what: &'static str,
        source: std::io::Error,
    },
    /// A daemon that started but never said "ready"; the text says what
    /// stays blocked because of it.
    #[error("{0}")]
    NotReady(String),
    #[error("sbx-fw {what} on {listen}: {source}")]
    Serve {
        what: &'static str,
        listen: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Path(#[from] PathError),
    /// A failure of sbx-core (configuration), kept with its own status.
    #[error("{0}")]
    Core(BoxError),
}

impl FwError {
    pub fn dns_serve(listen: SocketAddr, source: std::io::Error) -> Self {
        FwError::Serve {
            what: "dns",
            listen: listen.to_string(),
            source,
        }
    }
}

impl SbxError for FwError {
    fn exit(&self) -> Exit {
        match self {
            FwError::NoNetAdmin { .. } | FwError::NotRoot { .. } | FwError::SecretNotRoot => {
                Exit::Denied
            }
            FwError::Secret(_) => Exit::DataErr,
            FwError::NoNameserver { .. }
            | FwError::RequiredFailed(_)
            | FwError::Aborted { .. }
            | FwError::GatewayUnpinned(_)
            | FwError::Netfilter(_)
            | FwError::NoState(_)
            | FwError::Unresolvable { .. }
            | FwError::NothingToReach(_) => Exit::Unavailable,
            FwError::BadState { .. } => Exit::DataErr,
            FwError::BadDomain(_)
            | FwError::BadProbe(_)
            | FwError::BadGrant(_)
            | FwError::ResetNeedsYes => Exit::Usage,
            FwError::FirewallOff => Exit::No,
            FwError::Spawn { .. } | FwError::NotReady(_) | FwError::Serve { .. } => Exit::OsErr,
            FwError::Path(e) => e.exit(),
            FwError::Core(e) => e.exit(),
        }
    }
}

impl From<sbx_core::config::ConfigError> for FwError {
    fn from(e: sbx_core::config::ConfigError) -> Self {
        FwError::Core(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The status each failure exits with is the project's table's.
    #[test]
    fn statuses_follow_the_table() {
        let io = || std::io::Error::other("x");
        let table: Vec<(FwError, u8)> = vec![
            (FwError::NoNetAdmin { op: "init" }, 77),
            (FwError::NotRoot { op: "grant" }, 77),
            (FwError::BadGrant("x".into()), 64),
            (FwError::NoNameserver { path: "r" }, 69),
            (FwError::RequiredFailed(vec!["a".into()]), 69),
            (FwError::NoState("/d".into()), 69),
            (
                FwError::BadState {
                    path: "/s".into(),
                    why: "w".into(),
                },
                65,
            ),
            (FwError::BadDomain("d".into()), 64),
            (FwError::ResetNeedsYes, 64),
            (FwError::FirewallOff, 1),
            (
                FwError::Spawn {
                    what: "the proxy",
                    source: io(),
                },
                71,
            ),
            (NetfilterError::Conntrack(io()).into(), 69),
        ];
        for (e, code) in table {
            assert_eq!(e.exit().code(), code, "{e}");
        }
    }
}
