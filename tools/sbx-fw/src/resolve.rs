//! Resolve every allowlisted name at once (A and AAAA in parallel, one
//! timeout for the lot) with hickory-resolver against the upstream servers
//! themselves, so a re-run never depends on the filter it is replacing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Addresses {
    pub v4: Vec<Ipv4Addr>,
    pub v6: Vec<Ipv6Addr>,
    /// Smallest TTL among the answers, seconds.
    pub ttl: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The name does not exist.
    NxDomain,
    /// The name exists but has no A or AAAA records.
    NoAddress,
    /// Timeout, SERVFAIL, refused, network error.
    Failed(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NxDomain => f.write_str("no such name (NXDOMAIN)"),
            Failure::NoAddress => f.write_str("no A or AAAA records"),
            Failure::Failed(why) => write!(f, "lookup failed: {why}"),
        }
    }
}

pub type Outcome = (String, Result<Addresses, Failure>);

/// Name lookups against the upstream resolvers. Every name gets an
/// outcome, in order, within one deadline for the lot.
pub trait Resolver: Send + Sync {
    fn resolve_all(
        &self,
        upstreams: &[IpAddr],
        names: &[String],
        timeout: Duration,
    ) -> Vec<Outcome>;
}

/// hickory-resolver, asking the upstream servers themselves.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hickory;

impl Resolver for Hickory {
    fn resolve_all(
        &self,
        upstreams: &[IpAddr],
        names: &[String],
        timeout: Duration,
    ) -> Vec<Outcome> {
        resolve_all(upstreams, names, timeout)
    }
}

/// Every name failed for the same reason.
fn fail_all(names: &[String], why: Failure) -> Vec<Outcome> {
    names
        .iter()
        .map(|n| (n.clone(), Err(why.clone())))
        .collect()
}

fn resolver(upstreams: &[IpAddr], timeout: Duration) -> Result<TokioResolver, String> {
    let servers = upstreams
        .iter()
        .map(|ip| NameServerConfig::udp_and_tcp(*ip))
        .collect();
    let mut opts = ResolverOpts::default();
    // Short tries, several of them, inside the overall deadline: a resolver
    // that drops a datagram under a burst (Docker's does) costs one try.
    opts.timeout = timeout.min(Duration::from_millis(400));
    opts.attempts = 4;
    opts.ndots = 0;
    opts.use_hosts_file = ResolveHosts::Never;
    opts.cache_size = 0;
    opts.num_concurrent_reqs = upstreams.len().max(1);
    opts.try_tcp_on_error = false;
    hickory_resolver::Resolver::builder_with_config(
        ResolverConfig::from_name_servers(servers),
        TokioRuntimeProvider::default(),
    )
    .with_options(opts)
    .build()
    .map_err(|e| e.to_string())
}

/// Resolve `names` against `upstreams`; every name gets an outcome, in order.
pub(crate) fn resolve_all(
    upstreams: &[IpAddr],
    names: &[String],
    timeout: Duration,
) -> Vec<Outcome> {
    if upstreams.is_empty() {
        return fail_all(
            names,
            Failure::Failed("no nameserver in resolv.conf".into()),
        );
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return fail_all(
                names,
                Failure::Failed(format!("cannot start the resolver: {e}")),
            );
        }
    };
    rt.block_on(async {
        match resolver(upstreams, timeout) {
            Ok(r) => lookup_all(&r, names, timeout).await,
            Err(e) => fail_all(names, Failure::Failed(e)),
        }
    })
}

/// A and AAAA of every name at once; what has not answered by the
/// deadline has timed out.
async fn lookup_all(r: &TokioResolver, names: &[String], timeout: Duration) -> Vec<Outcome> {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, name) in names.iter().enumerate() {
        let fqdn = format!("{}.", name.trim_end_matches('.'));
        for rt in [RecordType::A, RecordType::AAAA] {
            let (r, fqdn) = (r.clone(), fqdn.clone());
            tasks.spawn(async move { (i, r.lookup(fqdn.as_str(), rt).await) });
        }
    }
    let mut got: Vec<Gathered> = names.iter().map(|_| Gathered::default()).collect();
    // One deadline for the lot: a silent server cannot stretch it.
    let deadline = tokio::time::Instant::now() + timeout;
    while let Ok(Some(joined)) = tokio::time::timeout_at(deadline, tasks.join_next()).await {
        let Ok((i, res)) = joined else { continue };
        got[i].take(res);
    }
    tasks.abort_all();
    names
        .iter()
        .zip(got)
        .map(|(n, g)| (n.clone(), g.settle()))
        .collect()
}

/// One name's answers so far.
#[derive(Default)]
struct Gathered {
    addrs: Addresses,
    fail: Option<Failure>,
    /// Lookups (of two) that came back.
    done: u8,
}

impl Gathered {
    fn take(
        &mut self,
        res: Result<hickory_resolver::lookup::Lookup, hickory_resolver::net::NetError>,
    ) {
        self.done += 1;
        match res {
            Ok(lookup) => {
                for rec in lookup.answers() {
                    match &rec.data {
                        RData::A(a) => self.addrs.v4.push(a.0),
                        RData::AAAA(a) => self.addrs.v6.push(a.0),
                        _ => continue,
                    }
                    self.addrs.ttl = if self.addrs.ttl == 0 {
                        rec.ttl
                    } else {
                        self.addrs.ttl.min(rec.ttl)
                    };
                }
            }
            Err(e) if e.is_nx_domain() => self.fail = Some(Failure::NxDomain),
            Err(e) if e.is_no_records_found() => {}
            Err(e) => {
                if !matches!(self.fail, Some(Failure::NxDomain)) {
                    self.fail = Some(Failure::Failed(e.to_string()));
                }
            }
        }
    }

    /// Any address is a usable answer; a failed AAAA beside a good A only
    /// costs that family.
    fn settle(mut self) -> Result<Addresses, Failure> {
        let a = &mut self.addrs;
        a.v4.sort();
        a.v4.dedup();
        a.v6.sort();
        a.v6.dedup();
        if !a.v4.is_empty() || !a.v6.is_empty() {
            return Ok(self.addrs);
        }
        Err(self.fail.unwrap_or_else(|| {
            if self.done == 2 {
                Failure::NoAddress
            } else {
                Failure::Failed("timed out".into())
            }
        }))
    }
}
