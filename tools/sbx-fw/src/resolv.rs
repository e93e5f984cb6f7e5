//! resolv.conf: where init finds the upstream resolvers, and how it points
//! the sandbox at the DNS filter while keeping the original to restore.

use std::net::IpAddr;

use sbx_core::error::IoContext;

use crate::error::FwError;
use crate::plan;
use crate::state::State;

pub const RESOLV_CONF: &str = "/etc/resolv.conf";
const RESOLV_MARK: &str = "# sbx-fw: DNS filter";
/// Prefix of the original's lines, kept as comments in the rewritten file.
const RESOLV_ORIGINAL: &str = "# sbx-fw original: ";

/// The resolvers init resolves with and the filter forwards to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Upstreams {
    pub servers: Vec<IpAddr>,
    /// resolv.conf before the filter took it over, to restore on reset.
    pub original: Option<String>,
    /// resolv.conf already points at the filter.
    pub ours: bool,
    /// resolv.conf as read now.
    pub current: String,
}

impl Upstreams {
    /// From resolv.conf, unless it already points at our filter: then
    /// from the last state, or from the original kept in the file.
    pub fn read(prev: Option<&State>) -> Self {
        Self::from_text(
            std::fs::read_to_string(RESOLV_CONF).unwrap_or_default(),
            prev,
        )
    }

    fn from_text(current: String, prev: Option<&State>) -> Self {
        let ours = is_ours(&current);
        let (servers, original) = match (prev, ours) {
            (Some(p), true) => (p.upstreams.clone(), p.resolv_conf_original.clone()),
            // Ours, but no state: a new container in a kept network namespace
            // (sbx-run's holder shares its resolv.conf). The file keeps the original.
            (None, true) => {
                let o = original_resolv_conf(&current);
                (nameservers(&o), Some(o))
            }
            _ => (nameservers(&current), Some(current.clone())),
        };
        Self {
            servers,
            original,
            ours,
            current,
        }
    }
}

pub fn is_ours(text: &str) -> bool {
    text.starts_with(RESOLV_MARK)
}

/// Nameserver addresses from resolv.conf text (`nameserver IP` lines).
pub fn nameservers(resolv_conf: &str) -> Vec<IpAddr> {
    resolv_conf
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("nameserver")).then(|| w.next()).flatten()
        })
        .filter_map(|a| a.split('%').next()?.parse().ok())
        .collect()
}

/// Point resolv.conf at the filter, in place: it is a bind mount in Docker
/// and under `ip netns exec`, so it cannot be renamed over.
pub fn point_at_filter(old: &str) -> Result<(), FwError> {
    let mut text = format!(
        "{RESOLV_MARK}; the original is kept below and in the state file\nnameserver {}\n",
        plan::FILTER_ADDR
    );
    for l in old.lines() {
        text.push_str(RESOLV_ORIGINAL);
        text.push_str(l);
        text.push('\n');
    }
    for l in old
        .lines()
        .filter(|l| l.starts_with("options") || l.starts_with("search"))
    {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(RESOLV_CONF, text).with_path(RESOLV_CONF)?;
    Ok(())
}

/// The resolv.conf that [`point_at_filter`] replaced, from its comments.
fn original_resolv_conf(ours: &str) -> String {
    ours.lines()
        .filter_map(|l| l.strip_prefix(RESOLV_ORIGINAL))
        .fold(String::new(), |mut o, l| {
            o.push_str(l);
            o.push('\n');
            o
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nameserver_lines() {
        let t = "# c\nnameserver 127.0.0.11\nnameserver fe80::1%eth0\noptions ndots:0\nnameserver bogus\n";
        assert_eq!(
            nameservers(t),
            vec![
                "127.0.0.11".parse::<IpAddr>().unwrap(),
                "fe80::1".parse().unwrap()
            ]
        );
    }

    /// A kept namespace without state: the original comes back from the
    /// comments of the file the filter's init wrote.
    #[test]
    fn the_original_survives_in_our_file() {
        let ours = format!(
            "{RESOLV_MARK}; x\nnameserver 127.0.0.53\n{RESOLV_ORIGINAL}nameserver 198.18.0.53\n"
        );
        let u = Upstreams::from_text(ours, None);
        assert!(u.ours);
        assert_eq!(u.servers, ["198.18.0.53".parse::<IpAddr>().unwrap()]);
        assert_eq!(u.original.as_deref(), Some("nameserver 198.18.0.53\n"));
    }
}
