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

use super::handed::Hold;

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
    /// On a connection a secret is injected into ([secrets]): a request
    /// for another host, a CONNECT, a head we could not follow, two of
    /// the bound header.
    Injection,
    /// The client did not accept the proxy's certificate for a host with
    /// a secret (it pins certificates, or lacks the sandbox's trust store).
    Pinned,
    /// The real host's certificate did not verify against the proxy's
    /// own roots.
    UpstreamCert,
    /// `[network.rules]`: no rule of the host lets the request through
    /// (the record names the host's rules and the request).
    Rule,
    /// On a connection a secret is injected into: an answer compressed
    /// or otherwise coded, which the proxy cannot check for the secret.
    Encoded,
    /// A bound secret could not be renewed on the host (an OAuth login's
    /// refresh failed): its requests are answered 503, not sent on.
    Renewal,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Self::NoName => "no server name",
            Self::NotAllowed => "not on the allowlist",
            Self::Fronting => "address is not one the name resolved to",
            Self::Malformed => "not a well-formed ClientHello or request",
            Self::Upstream => "upstream unreachable",
            Self::Injection => {
                "a request the proxy will not add the secret to (another Host, a CONNECT, an ambiguous head)"
            }
            Self::Pinned => {
                "the client refused the sandbox CA's certificate (does it pin certificates?): remove the host's [secrets] entry to pass it through"
            }
            Self::UpstreamCert => "the host's certificate does not verify",
            Self::Rule => "refused by the host's rules",
            Self::Encoded => {
                "the host answered compressed or coded (Content-Encoding, Transfer-Encoding): the proxy cannot check it for the secret"
            }
            Self::Renewal => {
                "the secret could not be renewed on the host: the request was answered 503"
            }
        }
    }
}

/// Whether an address was handed out for an entry the predicate accepts.
pub type HandedFn<'a> = dyn Fn(IpAddr, &dyn Fn(&str) -> bool) -> Hold + 'a;

/// What [`Policy::judge`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Refuse(Refusal),
    /// The DNS filter handed the address out for the name, longer ago than
    /// any hold it gives: allowed only if the name still resolves to it.
    Stale,
}

#[derive(Debug, Default, Clone)]
pub struct Policy {
    /// Each entry with its text (the DNS filter records entries as text).
    allow: Vec<(Domain, String)>,
    /// `sbx-fw grant`s: the same, each until its Unix second.
    grants: Vec<(Domain, String, u64)>,
    /// Entry text -> addresses it resolved to at init.
    resolved: HashMap<String, Vec<IpAddr>>,
    github_nets: Vec<IpNet>,
    /// `[network.rules]`, most specific key first.
    rules: Vec<(Domain, Vec<sbx_core::netrules::Rule>)>,
}

impl Policy {
    pub fn load(dir: &Path) -> Self {
        Self::from_state(&State::load(dir).ok().flatten().unwrap_or_default())
    }

    pub fn from_state(st: &State) -> Self {
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
            allow: st
                .allow
                .iter()
                .map(|d| (d.clone(), d.to_string()))
                .collect(),
            grants: st
                .grants
                .iter()
                .map(|g| (g.entry.clone(), g.entry.to_string(), g.until))
                .collect(),
            resolved,
            github_nets: st.github_nets.clone(),
            rules: {
                let mut r: Vec<_> = st
                    .rules
                    .iter()
                    .map(|(d, r)| (d.clone(), r.clone()))
                    .collect();
                // An exact name before wildcards, a longer wildcard first.
                r.sort_by_key(|(d, _)| (d.wildcard, std::cmp::Reverse(d.name.len())));
                r
            },
        }
    }

    /// The rules `name`'s requests are judged by, if it has any: its own
    /// entry, or the closest wildcard's.
    pub fn rules_for(&self, name: &str) -> Option<super::rules::Ruled<'_>> {
        self.rules
            .iter()
            .find(|(d, _)| domain_matches(d, name))
            .map(|(key, rules)| super::rules::Ruled { key, rules })
    }

    /// The addresses `name` resolved to at init (empty for a name only a
    /// wildcard covers): the CONNECT path dials these without a lookup.
    pub fn addresses(&self, name: &str) -> &[IpAddr] {
        self.resolved.get(name).map_or(&[], Vec::as_slice)
    }

    pub fn allows_name(&self, name: &str) -> bool {
        self.allow.iter().any(|(d, _)| domain_matches(d, name))
            || self
                .granted(crate::state::unix_now())
                .any(|(d, _)| domain_matches(d, name))
    }

    /// Until when grants alone let `name` through: None when the
    /// allowlist does, or nothing does.
    pub fn grant_only(&self, name: &str) -> Option<u64> {
        if self.allow.iter().any(|(d, _)| domain_matches(d, name)) {
            return None;
        }
        let now = crate::state::unix_now();
        self.grants
            .iter()
            .filter(|g| now < g.2 && domain_matches(&g.0, name))
            .map(|g| g.2)
            .max()
    }

    /// The grants still in force at `now`: checked per connection, so an
    /// expired one refuses without a policy reload.
    fn granted(&self, now: u64) -> impl Iterator<Item = (&Domain, &String)> {
        self.grants
            .iter()
            .filter(move |g| now < g.2)
            .map(|(d, s, _)| (d, s))
    }

    /// Every entry in force: the allowlist's and the live grants'.
    fn in_force(&self) -> impl Iterator<Item = (&Domain, &String)> {
        let now = crate::state::unix_now();
        self.allow
            .iter()
            .map(|(d, s)| (d, s))
            .chain(self.granted(now))
    }

    /// The verdict for `name` (from SNI or Host) on a connection to `dst`;
    /// `handed` answers from the DNS filter's record, asked only when the
    /// addresses from init and GitHub's ranges do not settle it.
    pub fn judge(&self, name: Option<&str>, dst: IpAddr, handed: &HandedFn<'_>) -> Verdict {
        let Some(name) = name else {
            return Verdict::Refuse(Refusal::NoName);
        };
        if !self.allows_name(name) {
            return Verdict::Refuse(Refusal::NotAllowed);
        }
        // The common case first: no allocation, no lock.
        if self.resolved.get(name).is_some_and(|v| v.contains(&dst))
            || self.github_nets.iter().any(|n| n.contains(&dst))
        {
            return Verdict::Allow;
        }
        let entry = |e: &str| {
            self.in_force()
                .any(|(d, s)| s == e && domain_matches(d, name))
        };
        match handed(dst, &entry) {
            Hold::Live => Verdict::Allow,
            Hold::Expired => Verdict::Stale,
            Hold::None => Verdict::Refuse(Refusal::Fronting),
        }
    }

    /// The allowlist entries covering `name`, as the DNS filter writes them.
    pub fn entries(&self, name: &str) -> Vec<String> {
        self.in_force()
            .filter(|(d, _)| domain_matches(d, name))
            .map(|(_, s)| s.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::handed::Handed;
    use std::time::{Duration, Instant};

    fn at<'a>(h: &'a Handed, now: Instant) -> impl Fn(IpAddr, &dyn Fn(&str) -> bool) -> Hold + 'a {
        move |d, e| h.hold(d, e, now)
    }

    fn policy() -> (Policy, Handed) {
        let mut st = State::new();
        st.allow = vec![
            "allowed.test".parse().unwrap(),
            "*.wild.test".parse().unwrap(),
        ];
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
        let mut handed = Handed::default();
        handed.merge(h, Instant::now());
        (Policy::from_state(&st), handed)
    }

    #[test]
    fn names_and_addresses_must_agree() {
        let (p, h) = policy();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let judge = |n: Option<&str>, a: &str| p.judge(n, ip(a), &at(&h, Instant::now()));
        use Refusal::*;
        let allow = Verdict::Allow;
        let cases = [
            (Some("allowed.test"), "198.18.1.1", allow),
            (Some("x.wild.test"), "198.18.1.3", allow),
            (Some("allowed.test"), "198.18.3.9", allow),
            (None, "198.18.1.1", Verdict::Refuse(NoName)),
            (
                Some("blocked.test"),
                "198.18.1.1",
                Verdict::Refuse(NotAllowed),
            ),
            // Allowed names, each on the other's address: fronting.
            (Some("x.wild.test"), "198.18.1.1", Verdict::Refuse(Fronting)),
            (
                Some("allowed.test"),
                "198.18.1.3",
                Verdict::Refuse(Fronting),
            ),
            (Some("wild.test"), "198.18.1.3", Verdict::Refuse(NotAllowed)),
        ];
        for (name, addr, want) in cases {
            assert_eq!(judge(name, addr), want, "{name:?} on {addr}");
        }
    }

    /// A grant lets its name through until its time, checked on each
    /// verdict (no reload when it ends); then the name is refused again.
    #[test]
    fn grants_end_on_time() {
        let (_, h) = policy();
        let mut st = State::new();
        st.allow = vec!["allowed.test".parse().unwrap()];
        let now = crate::state::unix_now();
        let grant = |e: &str, until| crate::state::Grant {
            entry: e.parse().unwrap(),
            until,
            by: "test".into(),
        };
        st.grants = vec![grant("*.wild.test", now + 60), grant("gone.test", now - 1)];
        let p = Policy::from_state(&st);
        let ip: IpAddr = "198.18.1.3".parse().unwrap();
        assert!(p.allows_name("x.wild.test"));
        assert!(!p.allows_name("gone.test"));
        assert_eq!(
            p.judge(Some("x.wild.test"), ip, &at(&h, Instant::now())),
            Verdict::Allow
        );
        st.grants = vec![grant("*.wild.test", now - 1)];
        let p = Policy::from_state(&st);
        assert_eq!(
            p.judge(Some("x.wild.test"), ip, &at(&h, Instant::now())),
            Verdict::Refuse(Refusal::NotAllowed)
        );
    }

    /// A handed-out address is trusted for the filter's longest hold after
    /// the proxy last saw it handed out; then it has to be looked up again.
    #[test]
    fn handed_addresses_go_stale() {
        let (p, mut h) = policy();
        let ip: IpAddr = "198.18.1.3".parse().unwrap();
        let now = Instant::now();
        let later = now + super::super::handed::HOLD + Duration::from_secs(1);
        let name = Some("x.wild.test");
        assert_eq!(p.judge(name, ip, &at(&h, now)), Verdict::Allow);
        assert_eq!(p.judge(name, ip, &at(&h, later)), Verdict::Stale);
        // Still in the file: a re-read does not make it fresh.
        let mut file = HashMap::new();
        file.insert(ip, vec!["*.wild.test".to_owned()]);
        h.merge(file.clone(), later);
        assert_eq!(p.judge(name, ip, &at(&h, later)), Verdict::Stale);
        h.stamp(ip, &p.entries("x.wild.test"), later);
        assert_eq!(p.judge(name, ip, &at(&h, later)), Verdict::Allow);
        // Gone from the file (the filter compacted it away): gone here.
        h.merge(HashMap::new(), later);
        assert_eq!(
            p.judge(name, ip, &at(&h, later)),
            Verdict::Refuse(Refusal::Fronting)
        );
    }
}
