//! Recording fakes of the outside world, for the fail-closed tests: each
//! records what it was asked and fails where the test says.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use hickory_proto::op::Message;
use sbx_core::audit::Record;

use crate::auditlog::AuditSink;
use crate::clock::Clock;
use crate::dns::Upstream;
use crate::error::NetfilterError;
use crate::github::{MetaError, MetaFetch};
use crate::netfilter::Netfilter;
use crate::plan::Family;
use crate::resolve::{Addresses, Failure, Outcome, Resolver};

/// One request to the packet filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Ipset(String),
    Tables(Family, String),
    NatInstall(Family),
    NatRemove(Family),
    Flush,
}

/// A packet filter that records every call. `fail` lists calls to refuse,
/// each once, matched by kind (and family); `set_room` is how many entries
/// an `add` script may hold before the set is full.
#[derive(Default)]
pub struct FakeNetfilter {
    pub calls: Mutex<Vec<Call>>,
    pub fail: Mutex<Vec<Call>>,
    pub set_room: Option<usize>,
    pub installed: bool,
    pub no_ipv6: bool,
}

impl FakeNetfilter {
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// Record `call`; refuse it if the test said so.
    fn take(&self, call: Call) -> Result<(), NetfilterError> {
        self.calls.lock().unwrap().push(call.clone());
        let mut fail = self.fail.lock().unwrap();
        let same = |f: &Call| match (f, &call) {
            (Call::Tables(a, _), Call::Tables(b, _)) => a == b,
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        };
        if let Some(i) = fail.iter().position(same) {
            fail.remove(i);
            return Err(NetfilterError::Refused {
                command: format!("{call:?}"),
                detail: "refused by the test".into(),
            });
        }
        Ok(())
    }
}

impl Netfilter for FakeNetfilter {
    fn ipset_restore(&self, script: &str) -> Result<(), NetfilterError> {
        let adds = script.lines().filter(|l| l.starts_with("add ")).count();
        if self.set_room.is_some_and(|room| adds > room) {
            self.calls.lock().unwrap().push(Call::Ipset(script.into()));
            return Err(NetfilterError::Refused {
                command: "ipset -exist restore".into(),
                detail: "Hash is full, cannot add more elements".into(),
            });
        }
        self.take(Call::Ipset(script.into()))
    }

    fn tables_restore(&self, fam: Family, rules: &str) -> Result<(), NetfilterError> {
        self.take(Call::Tables(fam, rules.into()))
    }

    fn nat_install(&self, fam: Family, _chain: &str) -> Result<(), NetfilterError> {
        self.take(Call::NatInstall(fam))
    }

    fn nat_remove(&self, fam: Family) -> Result<(), NetfilterError> {
        self.take(Call::NatRemove(fam))
    }

    fn flush_conntrack(&self) -> Result<(), NetfilterError> {
        self.take(Call::Flush)
    }

    fn installed(&self, _fam: Family) -> bool {
        self.installed
    }

    fn has_ipv6(&self) -> bool {
        !self.no_ipv6
    }
}

/// Shared, so a test can read the calls of a fake it handed over.
impl Netfilter for std::sync::Arc<FakeNetfilter> {
    fn ipset_restore(&self, script: &str) -> Result<(), NetfilterError> {
        (**self).ipset_restore(script)
    }

    fn tables_restore(&self, fam: Family, rules: &str) -> Result<(), NetfilterError> {
        (**self).tables_restore(fam, rules)
    }

    fn nat_install(&self, fam: Family, chain: &str) -> Result<(), NetfilterError> {
        (**self).nat_install(fam, chain)
    }

    fn nat_remove(&self, fam: Family) -> Result<(), NetfilterError> {
        (**self).nat_remove(fam)
    }

    fn flush_conntrack(&self) -> Result<(), NetfilterError> {
        (**self).flush_conntrack()
    }

    fn installed(&self, fam: Family) -> bool {
        (**self).installed(fam)
    }

    fn has_ipv6(&self) -> bool {
        (**self).has_ipv6()
    }
}

/// Answers from a table; any other name times out.
#[derive(Default)]
pub struct FakeResolver(pub HashMap<String, Addresses>);

impl FakeResolver {
    pub fn with(names: &[(&str, &str)]) -> Self {
        let mut m = HashMap::new();
        for (n, ip) in names {
            let mut a = Addresses::default();
            match ip.parse::<IpAddr>() {
                Ok(IpAddr::V4(v)) => a.v4.push(v),
                Ok(IpAddr::V6(v)) => a.v6.push(v),
                Err(e) => panic!("{ip}: {e}"),
            }
            m.insert((*n).to_owned(), a);
        }
        Self(m)
    }
}

impl Resolver for FakeResolver {
    fn resolve_all(&self, _up: &[IpAddr], names: &[String], _t: Duration) -> Vec<Outcome> {
        names
            .iter()
            .map(|n| {
                let r = self.0.get(n).cloned();
                (n.clone(), r.ok_or(Failure::Failed("timed out".into())))
            })
            .collect()
    }
}

/// A meta API that returns this body, or fails so.
pub struct FakeMeta(pub Result<String, MetaError>);

impl MetaFetch for FakeMeta {
    fn fetch(&self, _url: &str, _timeout: Duration) -> Result<String, MetaError> {
        self.0.clone()
    }
}

pub struct FixedClock;

impl Clock for FixedClock {
    fn now(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }
}

/// Audit records as their JSON lines.
#[derive(Default)]
pub struct FakeAudit(pub Mutex<Vec<String>>);

impl FakeAudit {
    pub fn text(&self) -> String {
        self.0.lock().unwrap().join("")
    }
}

impl AuditSink for FakeAudit {
    fn append(&self, r: &Record<'_>) {
        let line = String::from_utf8_lossy(&r.to_line()).into_owned();
        self.0.lock().unwrap().push(line);
    }
}

/// An upstream resolver that answers with whatever `reply` makes of the
/// query it was sent (garbage, silence, a canned answer).
pub struct FakeUpstream<F>(pub F);

impl<F> Upstream for FakeUpstream<F>
where
    F: Fn(&Message) -> std::io::Result<Vec<u8>> + Send + Sync,
{
    fn udp(&self, q: &Message, _ip: IpAddr) -> std::io::Result<Vec<u8>> {
        (self.0)(q)
    }

    fn tcp(&self, q: &Message, _ip: IpAddr) -> std::io::Result<Vec<u8>> {
        (self.0)(q)
    }
}
