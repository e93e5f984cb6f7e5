//! The proxy's view of `dns.handed`, the DNS filter's record of which
//! allowlist entries it handed each address out for. The file only grows
//! (until the filter compacts it), and a line carries no time, so the
//! proxy stamps each (address, entry) pair when it first sees it and
//! trusts it for [`HOLD`], the longest hold the filter gives an address.
//! After that the pair is stale: the connection is allowed only if the
//! name, looked up again through the DNS filter, still resolves to the
//! address (which also renews the filter's own hold), and the pair is
//! stamped anew.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long a handed-out pair is trusted without a fresh lookup.
pub const HOLD: Duration = Duration::from_secs(crate::dns::MAX_HOLD as u64);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Handed out for a matching entry within [`HOLD`].
    Live,
    /// Handed out for a matching entry, but longer ago.
    Expired,
    None,
}

/// Address -> (entry, when the proxy last saw it handed out or confirmed).
#[derive(Debug)]
pub struct Handed {
    by_ip: HashMap<IpAddr, Vec<(String, Instant)>>,
    hold: Duration,
}

impl Default for Handed {
    fn default() -> Self {
        Self::new(HOLD)
    }
}

impl Handed {
    /// Pairs trusted for `hold` (the tests shorten [`HOLD`]).
    pub fn new(hold: Duration) -> Self {
        Self {
            by_ip: HashMap::new(),
            hold,
        }
    }

    /// Take the file's current content: pairs new to us are stamped `now`,
    /// known ones keep their stamp, pairs gone from the file go.
    pub fn merge(&mut self, file: HashMap<IpAddr, Vec<String>>, now: Instant) {
        let old = std::mem::take(&mut self.by_ip);
        for (ip, entries) in file {
            let before = old.get(&ip);
            let v = entries
                .into_iter()
                .map(|e| {
                    let at = before
                        .and_then(|b| b.iter().find(|(x, _)| *x == e))
                        .map_or(now, |(_, t)| *t);
                    (e, at)
                })
                .collect();
            self.by_ip.insert(ip, v);
        }
    }

    /// Whether `dst` was handed out for an entry `entry` accepts.
    pub fn hold(&self, dst: IpAddr, entry: &dyn Fn(&str) -> bool, now: Instant) -> Hold {
        let mut found = Hold::None;
        for (e, at) in self.by_ip.get(&dst).into_iter().flatten() {
            if entry(e) {
                if now.saturating_duration_since(*at) <= self.hold {
                    return Hold::Live;
                }
                found = Hold::Expired;
            }
        }
        found
    }

    /// A fresh lookup confirmed `dst` for `entries`: trusted for [`HOLD`] again.
    pub fn stamp(&mut self, dst: IpAddr, entries: &[String], now: Instant) {
        let v = self.by_ip.entry(dst).or_default();
        for e in entries {
            match v.iter_mut().find(|(x, _)| x == e) {
                Some(p) => p.1 = now,
                None => v.push((e.clone(), now)),
            }
        }
    }
}
