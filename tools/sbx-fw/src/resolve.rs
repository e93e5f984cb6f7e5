//! Resolve every allowlisted name at once (A and AAAA in parallel, one
//! timeout for the lot) with hickory-resolver against the upstream servers
//! themselves, so a re-run never depends on the filter it is replacing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::{Resolver, TokioResolver};

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
    Resolver::builder_with_config(
        ResolverConfig::from_name_servers(servers),
        TokioRuntimeProvider::default(),
    )
    .with_options(opts)
    .build()
    .map_err(|e| e.to_string())
}

/// Resolve `names` against `upstreams`; every name gets an outcome, in order.
pub fn resolve_all(upstreams: &[IpAddr], names: &[String], timeout: Duration) -> Vec<Outcome> {
    if upstreams.is_empty() {
        let why = Failure::Failed("no nameserver in resolv.conf".into());
        return names
            .iter()
            .map(|n| (n.clone(), Err(why.clone())))
            .collect();
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let why = Failure::Failed(format!("cannot start the resolver: {e}"));
            return names
                .iter()
                .map(|n| (n.clone(), Err(why.clone())))
                .collect();
        }
    };
    rt.block_on(async {
        let r = match resolver(upstreams, timeout) {
            Ok(r) => r,
            Err(e) => {
                let why = Failure::Failed(e);
                return names
                    .iter()
                    .map(|n| (n.clone(), Err(why.clone())))
                    .collect();
            }
        };
        let mut tasks = tokio::task::JoinSet::new();
        for (i, name) in names.iter().enumerate() {
            let fqdn = format!("{}.", name.trim_end_matches('.'));
            for rt in [RecordType::A, RecordType::AAAA] {
                let (r, fqdn) = (r.clone(), fqdn.clone());
                tasks.spawn(async move { (i, rt, r.lookup(fqdn.as_str(), rt).await) });
            }
        }
        let mut done = vec![0u8; names.len()];
        let mut out: Vec<(Addresses, Option<Failure>)> =
            names.iter().map(|_| (Addresses::default(), None)).collect();
        // One deadline for the lot: a silent server cannot stretch it.
        let deadline = tokio::time::Instant::now() + timeout;
        while let Ok(Some(joined)) = tokio::time::timeout_at(deadline, tasks.join_next()).await {
            let Ok((i, _rt, res)) = joined else { continue };
            done[i] += 1;
            let slot = &mut out[i];
            match res {
                Ok(lookup) => {
                    for rec in lookup.answers() {
                        match &rec.data {
                            RData::A(a) => slot.0.v4.push(a.0),
                            RData::AAAA(a) => slot.0.v6.push(a.0),
                            _ => continue,
                        }
                        slot.0.ttl = if slot.0.ttl == 0 {
                            rec.ttl
                        } else {
                            slot.0.ttl.min(rec.ttl)
                        };
                    }
                }
                Err(e) if e.is_nx_domain() => slot.1 = Some(Failure::NxDomain),
                Err(e) if e.is_no_records_found() => {}
                Err(e) => {
                    if !matches!(slot.1, Some(Failure::NxDomain)) {
                        slot.1 = Some(Failure::Failed(e.to_string()));
                    }
                }
            }
        }
        tasks.abort_all();
        names
            .iter()
            .zip(out)
            .enumerate()
            .map(|(i, (n, (mut addrs, fail)))| {
                addrs.v4.sort();
                addrs.v4.dedup();
                addrs.v6.sort();
                addrs.v6.dedup();
                // Any address is a usable answer; a failed AAAA beside a good
                // A only costs that family.
                let res = if !addrs.v4.is_empty() || !addrs.v6.is_empty() {
                    Ok(addrs)
                } else {
                    Err(fail.unwrap_or_else(|| {
                        if done[i] == 2 {
                            Failure::NoAddress
                        } else {
                            Failure::Failed("timed out".into())
                        }
                    }))
                };
                (n.clone(), res)
            })
            .collect()
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
}
