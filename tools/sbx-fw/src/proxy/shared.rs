//! What every connection task shares: the policy (re-read after a change
//! in the state directory), the proxy's view of `dns.handed`, and the
//! refusal audit with its rate limit.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use sbx_core::audit::{self, Outcome, Record};

use super::handed::Handed;
use super::policy::{Policy, Refusal, Verdict};

/// Refusal records a second; the rest are counted into the next one.
const AUDIT_RATE: u64 = 20;
/// A stale handed-out address is looked up again within this.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(3);

pub struct Shared {
    dir: PathBuf,
    /// The policy and the change count it was loaded at.
    policy: RwLock<(u64, Arc<Policy>)>,
    /// The DNS filter's record and the change count it was read at.
    handed: Mutex<(u64, Handed)>,
    /// Changes seen in the state directory.
    pub changes: AtomicU64,
    audit: Mutex<(Instant, u64)>,
    suppressed: AtomicU64,
    /// `[secrets]`, read as root at start; None without any.
    pub inject: Option<super::inject::Injector>,
}

impl Shared {
    pub fn new(dir: PathBuf, hold: Duration, inject: Option<super::inject::Injector>) -> Self {
        let mut handed = Handed::new(hold);
        handed.merge(crate::dns::read_handed(&dir), Instant::now());
        Self {
            policy: RwLock::new((0, Arc::new(Policy::load(&dir)))),
            handed: Mutex::new((0, handed)),
            dir,
            changes: AtomicU64::new(0),
            audit: Mutex::new((Instant::now(), 0)),
            suppressed: AtomicU64::new(0),
            inject,
        }
    }

    /// The current policy, re-read after a change. Loads may race: one
    /// started earlier never replaces one that saw a later change (a
    /// `deny` must not be undone by a slow reader).
    pub fn policy(&self) -> Arc<Policy> {
        let seen = self.changes.load(Ordering::Acquire);
        {
            let cur = self.policy.read().unwrap_or_else(|e| e.into_inner());
            if cur.0 >= seen {
                return cur.1.clone();
            }
        }
        let p = Arc::new(Policy::load(&self.dir));
        let mut cur = self.policy.write().unwrap_or_else(|e| e.into_inner());
        if cur.0 < seen {
            *cur = (seen, p);
        }
        cur.1.clone()
    }

    /// The handed-out record, re-read after a change (or when `force`d:
    /// the filter may have written just now, before its change event).
    /// Read under the lock, so a later read is never merged first.
    fn handed(&self, force: bool) -> MutexGuard<'_, (u64, Handed)> {
        let seen = self.changes.load(Ordering::Acquire);
        let mut h = self.handed.lock().unwrap_or_else(|e| e.into_inner());
        if force || h.0 < seen {
            h.1.merge(crate::dns::read_handed(&self.dir), Instant::now());
            h.0 = h.0.max(seen);
        }
        h
    }

    /// The verdict for `name` on a connection to `dst`. A fronting verdict
    /// is checked once more against the filter's latest record; a stale
    /// handed-out address against a fresh lookup of the name.
    pub async fn judge(&self, name: Option<&str>, dst: IpAddr) -> Result<(), Refusal> {
        let p = self.policy();
        let once = |force| {
            p.judge(name, dst, &|d, e| {
                self.handed(force).1.hold(d, e, Instant::now())
            })
        };
        let v = match once(false) {
            Verdict::Refuse(Refusal::Fronting) => once(true),
            v => v,
        };
        match (v, name) {
            (Verdict::Allow, _) => Ok(()),
            (Verdict::Refuse(r), _) => Err(r),
            (Verdict::Stale, Some(n)) if resolves_to(n, dst).await => {
                let mut h = self.handed(false);
                h.1.stamp(dst, &p.entries(n), Instant::now());
                Ok(())
            }
            (Verdict::Stale, _) => Err(Refusal::Fronting),
        }
    }

    pub fn audit(&self, name: Option<&str>, dst: SocketAddr, r: Refusal) {
        self.audit_rule(name, dst, r, None);
    }

    /// [`Self::audit`] naming the rule that refused: the `[secrets]`
    /// entries bound to the host, so the user knows what to change.
    pub fn audit_rule(&self, name: Option<&str>, dst: SocketAddr, r: Refusal, rule: Option<&str>) {
        {
            let mut a = self.audit.lock().unwrap_or_else(|e| e.into_inner());
            if a.0.elapsed() >= Duration::from_secs(1) {
                *a = (Instant::now(), 0);
            }
            a.1 += 1;
            if a.1 > AUDIT_RATE {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let more = self.suppressed.swap(0, Ordering::Relaxed);
        let why = match rule {
            Some(rule) => format!("{rule}: {}", r.reason()),
            None => r.reason().to_owned(),
        };
        let reason = if more > 0 {
            format!("{why} (address {dst}; {more} more refusals not recorded)")
        } else {
            format!("{why} (address {dst})")
        };
        let target = name.map_or_else(|| dst.to_string(), str::to_owned);
        audit::append(
            &Record::new("sbx-fw", "connect", &target, Outcome::Blocked, "proxy").reason(&reason),
        );
    }

    /// A connection opened under a grant closed as the grant ended. Not
    /// budgeted: there are no more of these than grants' connections.
    pub fn audit_grant_end(&self, name: &str) {
        audit::append(
            &Record::new("sbx-fw", "close", name, Outcome::Blocked, "grant")
                .reason("connection closed: the grant it was opened under ended"),
        );
    }

    /// The refusals the budget left out, in one record once their second
    /// is over: a burst followed by silence is counted too (a later
    /// refusal, which would carry the count, may never come).
    pub fn audit_flush(&self) {
        {
            let a = self.audit.lock().unwrap_or_else(|e| e.into_inner());
            if a.0.elapsed() < Duration::from_secs(1) {
                return;
            }
        }
        let n = self.suppressed.swap(0, Ordering::Relaxed);
        if n == 0 {
            return;
        }
        audit::append(
            &Record::new(
                "sbx-fw",
                "connect",
                "(refusals over the audit budget)",
                Outcome::Blocked,
                "proxy",
            )
            .reason(&format!("{n} more refusals not recorded")),
        );
    }
}

/// `name`'s addresses through the DNS filter (resolv.conf).
pub async fn lookup(name: &str, port: u16) -> Vec<SocketAddr> {
    let n = name.to_owned();
    let work = tokio::task::spawn_blocking(move || {
        use std::net::ToSocketAddrs;
        (n.as_str(), port)
            .to_socket_addrs()
            .map(Iterator::collect)
            .unwrap_or_default()
    });
    match tokio::time::timeout(LOOKUP_TIMEOUT, work).await {
        Ok(Ok(v)) => v,
        _ => Vec::new(),
    }
}

async fn resolves_to(name: &str, dst: IpAddr) -> bool {
    lookup(name, 0).await.iter().any(|a| a.ip() == dst)
}
