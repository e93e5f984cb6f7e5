//! Whether a connection may go on: the name must be allowlisted, and the
//! address it goes to must be one that name resolved to (at init, or
//! through the DNS filter, `dns.handed`) or lie in GitHub's ranges. An
//! allowed address with another name in the hello is domain fronting.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use ipnet::IpNet;
use sbx_core::config::Domain;

use crate::allowlist::domain_matches;
use crate::state::State;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// TLS without a server name, HTTP without a Host.
    NoName,
    NotAllowed,
    /// The name is allowed, the address is not one of its.
    Fronting,
    /// Not a ClientHello, not an HTTP request, too big or too slow.
    Malformed,
    /// The upstream refused or did not answer.
    Upstream,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Self::NoName => "no server name",
            Self::NotAllowed => "not on the allowlist",
            Self::Fronting => "address is not one the name resolved to",
            Self::Malformed => "not a well-formed ClientHello or request",
            Self::Upstream => "upstream unreachable",
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct Policy {
    allow: Vec<Domain>,
    /// Entry text -> addresses it resolved to at init.
    resolved: HashMap<String, Vec<IpAddr>>,
    /// Address -> entries the DNS filter handed it out for.
    handed: HashMap<IpAddr, Vec<String>>,
    github_nets: Vec<IpNet>,
}

impl Policy {
    pub fn load(dir: &Path) -> Self {
        let st = State::load(dir).ok().flatten().unwrap_or_default();
        Self::from_parts(&st, crate::dns::read_handed(dir))
    }

    pub fn from_parts(st: &State, handed: HashMap<IpAddr, Vec<String>>) -> Self {
        let resolved = st
            .names
            .iter()
            .map(|n| {
                let v = n.v4.iter().map(|a| IpAddr::V4(*a));
                let v = v.chain(n.v6.iter().map(|a| IpAddr::V6(*a)));
                (n.name.clone(), v.collect())
            })
            .collect();
        Self {
            allow: st.allow.iter().filter_map(|d| d.parse().ok()).collect(),
            resolved,
            handed,
            github_nets: st.github_nets.clone(),
        }
    }

    /// Re-read the DNS filter's record (it writes before it answers, so a
    /// client that just resolved finds its address there).
    pub fn with_handed(&self, handed: HashMap<IpAddr, Vec<String>>) -> Self {
        Self {
            handed,
            ..self.clone()
        }
    }

    /// The addresses `name` resolved to at init (empty for a name only a
    /// wildcard covers): the CONNECT path dials these without a lookup.
    pub fn addresses(&self, name: &str) -> Vec<IpAddr> {
        self.resolved.get(name).cloned().unwrap_or_default()
    }

    pub fn allows_name(&self, name: &str) -> bool {
        self.allow.iter().any(|d| domain_matches(d, name))
    }

    /// The verdict for `name` (from SNI or Host) on a connection to `dst`.
    pub fn judge(&self, name: Option<&str>, dst: IpAddr) -> Result<(), Refusal> {
        let name = name.ok_or(Refusal::NoName)?;
        let entries: Vec<String> = self
            .allow
            .iter()
            .filter(|d| domain_matches(d, name))
            .map(|d| d.to_string())
            .collect();
        if entries.is_empty() {
            return Err(Refusal::NotAllowed);
        }
        let at_init = self.resolved.get(name).is_some_and(|v| v.contains(&dst));
        let handed = self
            .handed
            .get(&dst)
            .is_some_and(|es| es.iter().any(|e| entries.contains(e)));
        let github = self.github_nets.iter().any(|n| n.contains(&dst));
        if at_init || handed || github {
            Ok(())
        } else {
            Err(Refusal::Fronting)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        let mut st = State::new();
        st.allow = vec!["allowed.test".into(), "*.wild.test".into()];
        st.names.push(crate::state::Name {
            name: "allowed.test".into(),
            v4: vec!["198.18.1.1".parse().unwrap()],
            ..Default::default()
        });
        st.github_nets = vec!["198.18.3.0/24".parse().unwrap()];
        let mut h = HashMap::new();
        h.insert(
            "198.18.1.3".parse().unwrap(),
            vec!["*.wild.test".to_owned()],
        );
        Policy::from_parts(&st, h)
    }

    #[test]
    fn names_and_addresses_must_agree() {
        let p = policy();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(p.judge(Some("allowed.test"), ip("198.18.1.1")), Ok(()));
        assert_eq!(p.judge(Some("x.wild.test"), ip("198.18.1.3")), Ok(()));
        assert_eq!(p.judge(Some("allowed.test"), ip("198.18.3.9")), Ok(()));
        assert_eq!(p.judge(None, ip("198.18.1.1")), Err(Refusal::NoName));
        assert_eq!(
            p.judge(Some("blocked.test"), ip("198.18.1.1")),
            Err(Refusal::NotAllowed)
        );
        // Allowed names, each on the other's address: fronting.
        assert_eq!(
            p.judge(Some("x.wild.test"), ip("198.18.1.1")),
            Err(Refusal::Fronting)
        );
        assert_eq!(
            p.judge(Some("allowed.test"), ip("198.18.1.3")),
            Err(Refusal::Fronting)
        );
        assert_eq!(
            p.judge(Some("wild.test"), ip("198.18.1.3")),
            Err(Refusal::NotAllowed)
        );
    }
}
