//! `sbx-fw init`: read the config and resolv.conf, gather the allowlist,
//! look every name up and fetch GitHub's ranges at once, build the whole
//! plan, install it in one go, record it, start the helpers. Nothing is
//! installed before everything is known; any failure fails closed.

mod build;
mod commit;
mod gather;
mod rules;
mod show;
#[cfg(test)]
mod tests;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use sbx_core::cli::CommonArgs;
use sbx_core::config::{self, Config, Domain};
use sbx_core::error::IoContext;
use sbx_core::output;

pub use build::Built;
pub use commit::fail;

use crate::allowlist::{self, Allowlist, Source};
use crate::auditlog::{AuditSink, Log};
use crate::cli::InitArgs;
use crate::clock::{Clock, SystemClock};
use crate::error::FwError;
use crate::github::{self, MetaFetch, Ranges};
use crate::netfilter::{Netfilter, System};
use crate::resolv::{self, Upstreams};
use crate::resolve::{Hickory, Outcome, Resolver};
use crate::state::{self, State};
use crate::{daemons, host, need_net_admin};

const DEFAULT_CACHE: &str = "/var/cache/sbx-fw";
const DEFAULT_CA: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The outside world init works against; tests pass recording fakes.
pub struct Sys<'a> {
    pub nf: &'a dyn Netfilter,
    pub resolver: &'a dyn Resolver,
    pub meta: &'a dyn MetaFetch,
    pub clock: &'a dyn Clock,
    pub audit: &'a dyn AuditSink,
}

/// Everything one init decides from, read before anything is changed.
pub struct Request<'a> {
    pub cfg: &'a Config,
    pub list: &'a Allowlist,
    pub upstreams: &'a [IpAddr],
    /// The sandbox's own subnets and gateways.
    pub local: Vec<IpNet>,
    /// The last init's state: proxy mode is left only if it was on.
    pub was_proxy: bool,
    pub dry_run: bool,
    pub timeout: Duration,
    pub meta_url: &'a str,
    pub cache_dir: PathBuf,
    /// Where the policy lock is taken for the commit (None: not taken).
    pub lock_dir: Option<&'a Path>,
}

pub fn init(common: &CommonArgs, a: &InitArgs, dir: &Path) -> Result<(), FwError> {
    let env = |k: &str| std::env::var(k).ok();
    let prev = previous_state(dir);
    // The upstreams themselves (kept in the state once resolv.conf names
    // the filter): everything init looks up goes there, not to the filter.
    let ups = Upstreams::read(prev.as_ref());
    let https = github::Https {
        ca_file: env_path("SSL_CERT_FILE", DEFAULT_CA),
        token: env("GH_TOKEN").or_else(|| env("GITHUB_TOKEN")),
        upstreams: ups.servers.clone(),
        open: !a.dry_run,
    };
    let sys = Sys {
        nf: &System,
        resolver: &Hickory,
        meta: &https,
        clock: &SystemClock,
        audit: &Log,
    };
    if !a.dry_run {
        need_net_admin("init")?;
    }
    let loaded = config::discover_from_env(common.config.as_deref())?;
    let cfg = &loaded.config;
    if cfg.network.allow_external {
        return commit::open_everything(&sys, a.dry_run, common.json, dir, &loaded.describe());
    }
    if ups.servers.is_empty() {
        let cause = FwError::NoNameserver {
            path: resolv::RESOLV_CONF,
        };
        return Err(fail(&sys, a.dry_run, cause));
    }
    let list = gather::allowlist(cfg, &a.github_meta_url, prev.as_ref(), &env);
    let t0 = Instant::now();
    let req = Request {
        cfg,
        list: &list,
        upstreams: &ups.servers,
        local: host::local_nets(),
        was_proxy: prev.as_ref().is_some_and(|p| p.proxy),
        dry_run: a.dry_run,
        timeout: Duration::from_millis(a.timeout),
        meta_url: &a.github_meta_url,
        cache_dir: env_path("SBX_FW_CACHE_DIR", DEFAULT_CACHE),
        lock_dir: Some(dir),
    };
    let built = install(&sys, &req)?;
    if a.dry_run {
        return show::dry_run(common.json, &built.plan, &built.state);
    }
    // Once per namespace (a re-init finds the entries still permanent;
    // a new container in a kept namespace has no state and pins again).
    // After the commit: its rules let neighbour solicitations out, the
    // block before it does not. A gateway that cannot be pinned could be
    // taken over, and one that does not answer carries no traffic anyway:
    // blocked, not open.
    if prev.is_none()
        && let Err(why) = crate::gateway::pin()
    {
        return Err(commit::fail_blocked(&sys, FwError::GatewayUnpinned(why)));
    }
    let mut state = built.state;
    state.dns_types = cfg.network.dns_types.iter().map(|t| t.0).collect();
    if cfg.network.mode == config::NetMode::Proxy {
        let ws = std::env::var_os("SBX_WORKSPACE").map(PathBuf::from);
        let remotes = ws.map(|w| rules::workspace_remotes(&w)).unwrap_or_default();
        let (r, warnings) = rules::expand(&cfg.network, &remotes);
        for w in warnings {
            output::warn(&w);
        }
        state.rules = r;
    }
    let st = record(&sys, dir, &list, state, &built.plan, ups.clone())?;
    drop(built.held);
    start_helpers(dir, a, &st, &ups)?;
    show::installed(&built.plan, &st, t0.elapsed());
    Ok(())
}

/// The last init's state; an unreadable one is a warning, as if none.
fn previous_state(dir: &Path) -> Option<State> {
    State::load(dir).unwrap_or_else(|e| {
        output::warn(&format!("ignoring unreadable state: {e}"));
        None
    })
}

/// Look up, build and (unless a dry run) install. Everything init does to
/// the kernel happens here, and every failure here fails closed.
pub fn install(sys: &Sys<'_>, req: &Request<'_>) -> Result<Built, FwError> {
    let (outcomes, github) = look_up(sys, req);
    let plan = build::base_plan(req.cfg, req.upstreams, req.local.clone());
    let mut built = build::build(plan, req.list, &outcomes, github.as_ref());
    for w in &built.state.warnings {
        output::warn(w);
    }
    if !built.fatal.is_empty() {
        let cause = FwError::RequiredFailed(built.fatal.clone());
        return Err(fail(sys, req.dry_run, cause));
    }
    if !req.dry_run {
        // Held until the state is recorded: the DNS filter adds nothing
        // between the new sets and the new policy (see state::lock).
        if let Some(d) = req.lock_dir {
            let held = state::lock(d).with_path(d.join("policy.lock"))?;
            built.held = Some(held);
        }
        commit::commit(sys.nf, &built.plan, req.was_proxy)?;
    }
    Ok(built)
}

/// Resolve every name and fetch GitHub's ranges at the same time.
fn look_up(sys: &Sys<'_>, req: &Request<'_>) -> (Vec<Outcome>, Option<Ranges>) {
    let names: Vec<String> = req
        .list
        .to_resolve()
        .map(|e| e.domain.name.clone())
        .collect();
    let t0 = Instant::now();
    let found = std::thread::scope(|s| {
        let gh = req.cfg.network.github.then(|| {
            s.spawn(|| {
                let (url, cache) = (req.meta_url, req.cache_dir.as_path());
                github::ranges(sys.meta, sys.clock, url, cache, req.timeout)
            })
        });
        let outcomes = sys.resolver.resolve_all(req.upstreams, &names, req.timeout);
        let gh = gh.map(|h| {
            h.join()
                .unwrap_or_else(|_| Ranges::none("the fetch failed"))
        });
        (outcomes, gh)
    });
    output::debug(&format!(
        "resolved {} names in {:?}",
        names.len(),
        t0.elapsed()
    ));
    found
}

/// Write what was installed, for status, allow/deny and the helpers.
fn record(
    sys: &Sys<'_>,
    dir: &Path,
    list: &Allowlist,
    mut st: State,
    plan: &crate::plan::Plan,
    ups: Upstreams,
) -> Result<State, FwError> {
    let mut allow: Vec<Domain> = list.entries.iter().map(|e| e.domain.clone()).collect();
    allow.sort_by_cached_key(Domain::to_string);
    allow.dedup();
    st.allow = allow;
    // The meta host is GitHub's too, but must resolve before any range is
    // known: only the built-in GitHub names are held to the ranges.
    st.github_only = list
        .entries
        .iter()
        .filter(|e| e.source == Source::Github)
        .filter(|e| allowlist::GITHUB_NAMES.contains(&e.domain.to_string().as_str()))
        .map(|e| e.domain.clone())
        .collect();
    st.github_nets = plan.github.clone();
    st.proxy = plan.proxy_uid.is_some();
    st.upstreams = ups.servers;
    st.resolv_conf_original = ups.original;
    st.installed_at = sys.clock.stamp();
    st.refreshed_at = st.installed_at.clone();
    st.store(dir).with_path(state::path(dir))?;
    Ok(st)
}

/// The DNS filter (and resolv.conf pointed at it), and in proxy mode the proxy.
fn start_helpers(dir: &Path, a: &InitArgs, st: &State, ups: &Upstreams) -> Result<(), FwError> {
    if !a.no_dns_filter {
        daemons::start_filter(dir)?;
        if !ups.ours {
            resolv::point_at_filter(&ups.current)?;
        }
    }
    if st.proxy {
        // [secrets] on the tmpfs, and the sandbox CA, before the proxy
        // that reads them starts.
        use crate::proxy::inject;
        // A host with rules to judge needs the CA even without secrets
        // (an `off` one is refused without ending its TLS).
        let need_ca = st.rules.values().any(|r| !r.is_empty());
        inject::install(
            &Path::new(inject::HANDOFF_DIR).join(inject::HANDOFF),
            &inject::dir(),
            &inject::bundle(),
            &inject::sandbox_ca(),
            need_ca,
        )?;
        daemons::start_proxy(dir)?;
    }
    Ok(())
}

fn env_path(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default))
}
