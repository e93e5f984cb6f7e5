//! sbx-fw: the sandbox's egress firewall. Default deny in both families;
//! allowlisted names on TCP 443, GitHub's ranges on 22 and 443, DNS only
//! through a filter that answers allowlisted names. Everything is resolved
//! and built before anything is installed; a failure leaves the previous
//! firewall, or, on a first run, everything blocked. Never open.
#![forbid(unsafe_code)]

pub mod allowlist;
pub mod apply;
pub mod dns;
pub mod error;
pub mod github;
pub mod plan;
pub mod probe;
pub mod proxy;
pub mod resolve;
pub mod state;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use clap::{Args, CommandFactory, Parser, Subcommand};
use sbx_core::audit::{self, Outcome, Record};
use sbx_core::cli::CommonArgs;
use sbx_core::config::Domain;
use sbx_core::error::{BoxError, IoContext};
use sbx_core::{Exit, config, output};

use allowlist::{Allowlist, Source};
use error::FwError;
use plan::{Family, Plan};
use state::State;

const TOOL: &str = "sbx-fw";
const RESOLV_CONF: &str = "/etc/resolv.conf";
const RESOLV_MARK: &str = "# sbx-fw: DNS filter";
/// Prefix of the original's lines, kept as comments in the rewritten file.
const RESOLV_ORIGINAL: &str = "# sbx-fw original: ";
const DEFAULT_CACHE: &str = "/var/cache/sbx-fw";
const DEFAULT_CA: &str = "/etc/ssl/certs/ca-certificates.crt";

#[derive(Debug, Parser)]
#[command(
    name = "sbx-fw",
    version,
    about = "Fail-closed egress firewall for the sandbox",
    long_about = "Fail-closed egress firewall for the sandbox.\n\n\
        `sbx-fw init` runs as root before the agent starts. It resolves every allowlisted name and \
        fetches GitHub's published ranges first, in parallel and with timeouts, builds the complete \
        IPv4 and IPv6 rulesets and set contents, and only then installs them: one `ipset restore`, one \
        `iptables-restore` and one `ip6tables-restore` at once (each a single kernel transaction), then flushes \
        conntrack so connections opened before the rules die. Any failure leaves the previous firewall \
        in place, or on a first run everything blocked. It never leaves the sandbox open.",
    after_long_help = AFTER_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonArgs,

    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Resolve, build and install the firewall and start the DNS filter (root, CAP_NET_ADMIN).
    Init(InitArgs),
    /// Prove the firewall works: blocked targets are refused, an allowlisted one is reachable.
    Verify(VerifyArgs),
    /// Allow more names now, keeping every open connection.
    Allow(NamesArgs),
    /// Remove names from the running allowlist, with the addresses the DNS filter handed out for them alone (their connections are cut).
    Deny(NamesArgs),
    /// Rules, set sizes, the DNS filter and the last refresh.
    Status,
    /// Remove the firewall entirely: everything becomes reachable. Needs --yes.
    Reset(ResetArgs),
    /// Try connections and report whether each was refused or open.
    Probe(ProbeArgs),
    /// Serve the DNS filter in the foreground (init starts it).
    Dns(DnsArgs),
    /// Serve the name-checking proxy in the foreground ([network] mode = "proxy"; init starts it).
    Proxy,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Print the exact sets and rules that would be installed, and install nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Where GitHub's ranges are fetched from.
    #[arg(long, value_name = "URL", env = "SBX_FW_GITHUB_META_URL", default_value = github::DEFAULT_META_URL)]
    pub github_meta_url: String,
    /// Deadline for all name lookups and for the GitHub fetch, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    pub timeout: u64,
    /// Do not start the DNS filter (resolv.conf is left as it is; the agent
    /// then cannot resolve names at all, since only uid 0 may reach DNS).
    #[arg(long)]
    pub no_dns_filter: bool,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The allowlisted name that must be reachable on 443 (default: the first one resolved).
    #[arg(long, value_name = "NAME")]
    pub reach: Option<String>,
    /// An IPv4 address that must be refused.
    #[arg(long, value_name = "ADDR", default_value = "192.0.2.1")]
    pub blocked_v4: IpAddr,
    /// An IPv6 address that must be refused.
    #[arg(long, value_name = "ADDR", default_value = "2001:db8::1")]
    pub blocked_v6: IpAddr,
    /// A resolver other than the configured ones, which must be refused.
    #[arg(long, value_name = "ADDR", default_value = "192.0.2.53")]
    pub other_resolver: IpAddr,
    /// Per-probe deadline in milliseconds (probes run in parallel).
    #[arg(long, value_name = "MS", default_value_t = 80)]
    pub timeout: u64,
}

#[derive(Debug, Args)]
pub struct NamesArgs {
    /// Names like api.example.com, or *.example.com (answered by the DNS filter when asked).
    #[arg(value_name = "DOMAIN", required = true)]
    pub domains: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ResetArgs {
    /// Confirm that the sandbox should be left without a firewall.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// tcp:ADDR:PORT, udp:ADDR:PORT, dns:SERVER[:PORT]/NAME[/TYPE], raw, packet ([v6] in brackets).
    #[arg(value_name = "PROBE", required = true)]
    pub probes: Vec<String>,
    /// Per-probe deadline in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    pub timeout: u64,
}

#[derive(Debug, Args)]
pub struct DnsArgs {
    /// Address to listen on (UDP and TCP).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.53:53")]
    pub listen: SocketAddr,
}

const AFTER_HELP: &str = "\
Policy, both families, default deny:
  out  first, whatever conntrack says: a packet from a source address this
         host does not own (FREEBIND, TRANSPARENT) is dropped; IPv6 with a
         routing header (any type) is dropped; connections uid 0 opened are
         connmarked, and another uid's packet on one is refused (no riding
         on the filter's upstream flows by re-binding a freed port);
       loopback (allow-localhost); replies to established connections;
       DNS: the agent asks the filter on 127.0.0.53; only uid 0 (the filter,
         Docker's own resolver) reaches the upstream resolvers;
       TCP 443 to addresses of allowlisted names (set sbx-allow4/6);
       TCP 22 and 443 to GitHub's meta ranges (set sbx-gh4/6) with github = true;
         allow-git = false drops the 22 (no git over SSH; HTTPS git still works);
       never: this sandbox's subnets and gateway, private, shared, link-local
         (cloud metadata), multicast and reserved ranges, even when an
         allowlisted name resolves there (DNS rebinding);
       everything else: TCP reset, other protocols ICMP port unreachable.
  in   loopback, replies, IPv6 neighbour discovery, published container ports.

Allowlist: the AI services the image's CLIs use (Anthropic, OpenAI, ChatGPT,
OpenRouter, Sentry, Statsig); [network].allow-domains (with *.wildcards);
with registries = true the hosts npm, pip, cargo and apt are configured to use
(their own config files and variables, read at init); GitHub by its ranges;
the [backup].url store's endpoints, read from the variables sbx-backup uses
(s3: AWS_ENDPOINT_URL[_S3], AWS_REGION, else the regional AWS endpoint and the
bucket's host; gs: Google's storage and token hosts).

Why a DNS filter rather than re-resolving on a timer: addresses of CDN names
rotate, and a timer is always late. The filter hands out each answer only
after adding its addresses to the allow set (for the TTL, at least 5 min,
at most 1 h; the next init starts the sets afresh), so what the agent
connects to is what it was just told. It refuses every other name
(audited: once per name a minute, at most 10 records a second, then one
summary record a minute), which also closes DNS tunnelling, and wildcards
work because it sees the names asked. `sbx-fw deny` also takes out what it
handed out for the denied entries alone. Names resolved at init stay allowed until the next
init. GitHub's names are answered only with addresses inside GitHub's
ranges (others are left out of the answer, or the query is refused) and
add nothing to the allow set.

The filter parses strictly: one question of host-name labels (letters,
digits, - and _), class IN, at most an EDNS OPT record, nothing after it.
It builds the upstream query and the reply anew from that question, from
a fresh random source port each time, with the name's letter case mixed
(DNS 0x20); a reply must repeat the question exactly, and only records of
the name and its CNAME chain are kept. Anything else gets FORMERR or
REFUSED, never silence, counted by reason (`sbx-fw status`). It serves UDP
with a fixed pool of threads and at most 32 TCP connections (each query
within 15 s, each connection within 60 s); a new one beyond takes the
oldest's slot.

Failure: a duplicate address between names or a name that does not resolve
is a warning; a [network].required name that fails aborts. An abort before
the commit keeps the previous firewall, or blocks everything on a first run.
GitHub's ranges come from the meta API (GH_TOKEN raises the rate limit),
else from the last good copy in /var/cache/sbx-fw, else GitHub stays blocked.

Files and variables:
  /run/sbx-fw/state.json    what init installed (SBX_FW_STATE_DIR)
  /run/sbx-fw/dns.pid       the filter; a pid in another network namespace
                            is not ours, and init starts a filter here
  /var/cache/sbx-fw         last good GitHub ranges (SBX_FW_CACHE_DIR)
  SSL_CERT_FILE             CA bundle for the GitHub fetch
  SBX_FW_GITHUB_META_URL    the meta URL (tests use a local stand-in)
  SBX_FW_BACKEND            legacy or system: which iptables holds the
                            rules. By default the one the last init used,
                            else iptables-legacy when the kernel has
                            x_tables (a table commit in ~1 ms against ~15 ms
                            for nft-backed iptables), else the system's.

Exit status: 0 done; 1 verify found a leak; 64 usage; 69 a required name or
  the kernel's netfilter is unavailable; 77 no CAP_NET_ADMIN (audited);
  78 bad config.

Examples:
  sbx-fw init --dry-run             # the exact sets and rules
  sbx-fw verify --json
  sbx-fw allow api.example.com '*.cdn.example.com'
  sbx-fw probe tcp:192.0.2.1:443 dns:192.0.2.53/example.com/txt";

pub fn command() -> clap::Command {
    Cli::command()
}

pub fn run(cli: Cli) -> Result<Exit, BoxError> {
    output::init(TOOL, &cli.common);
    let dir = state::dir_from_env();
    match cli.command {
        Cmd::Init(a) => init(&cli.common, &a, &dir),
        Cmd::Verify(a) => verify(&cli.common, &a, &dir),
        Cmd::Allow(a) => allow(&a, &dir),
        Cmd::Deny(a) => deny(&a, &dir),
        Cmd::Status => status(&cli.common, &dir),
        Cmd::Reset(a) => reset(&a, &dir),
        Cmd::Probe(a) => probe_cmd(&cli.common, &a),
        Cmd::Dns(a) => {
            dns::serve(&dir, a.listen, || {
                println!("ready");
                let _ = std::io::stdout().flush();
            })
            .map_err(|e| FwError::dns_serve(a.listen, e))?;
            Ok(Exit::Ok)
        }
        Cmd::Proxy => proxy_cmd(&dir),
    }
}

/// Every command that changes or reads netfilter needs CAP_NET_ADMIN; the
/// refusal is audited, since an agent trying it is worth knowing about.
fn need_net_admin(op: &'static str) -> Result<(), FwError> {
    if apply::has_net_admin() {
        return Ok(());
    }
    audit::append(
        &Record::new(TOOL, op, "firewall", Outcome::Blocked, "net-admin")
            .reason("caller lacks CAP_NET_ADMIN"),
    );
    Err(FwError::NoNetAdmin { op })
}

fn env_path(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default))
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Container-side TCP ports of `[sandbox].ports` (UDP is never let in).
fn inbound_ports(cfg: &config::Config) -> Vec<u16> {
    cfg.sandbox
        .ports
        .iter()
        .filter(|p| !p.udp)
        .map(|p| p.container)
        .collect()
}

fn init(common: &CommonArgs, a: &InitArgs, dir: &Path) -> Result<Exit, BoxError> {
    if !a.dry_run {
        need_net_admin("init")?;
    }
    let loaded = config::discover_from_env(common.config.as_deref())?;
    let cfg = &loaded.config;
    let net = &cfg.network;
    let prev = State::load(dir).unwrap_or_else(|e| {
        output::warn(&format!("ignoring unreadable state: {e}"));
        None
    });

    if net.allow_external {
        return open_everything(a, dir, &loaded.describe());
    }

    // Upstreams: resolv.conf, unless it already points at our filter.
    let resolv = std::fs::read_to_string(RESOLV_CONF).unwrap_or_default();
    let ours = resolv.starts_with(RESOLV_MARK);
    let (upstreams, original) = match (&prev, ours) {
        (Some(p), true) => (p.upstreams.clone(), p.resolv_conf_original.clone()),
        // Ours, but no state: a new container in a kept network namespace
        // (sbx-run's holder shares its resolv.conf). The file keeps the original.
        (None, true) => {
            let o = original_resolv_conf(&resolv);
            (resolve::nameservers(&o), Some(o))
        }
        _ => (resolve::nameservers(&resolv), Some(resolv.clone())),
    };
    if upstreams.is_empty() {
        return fail(a.dry_run, FwError::NoNameserver { path: RESOLV_CONF });
    }

    let registries = if net.registries {
        allowlist::registry_hosts(Path::new("/"), &|k| std::env::var(k).ok())
    } else {
        Vec::new()
    };
    let mut list = Allowlist::build(net, &registries);
    // The meta host must be answerable when init re-runs behind the filter.
    if net.github
        && let Some(h) = allowlist::url_host(&a.github_meta_url)
        && let Ok(d) = h.parse()
    {
        list.push(d, Source::Github);
    }
    // The backup store, reached from inside by sbx-backup (first boot, sync).
    if let Some(u) = &cfg.backup.url {
        for e in allowlist::backup_endpoints(u, &|k| std::env::var(k).ok()) {
            match allowlist::url_host(&e).and_then(|h| h.parse().ok()) {
                Some(d) if allowlist::url_port(&e) == Some(443) => list.push(d, Source::Backup),
                _ => output::warn(&format!(
                    "[backup].url {}: endpoint {e} is not https on port 443 to a name, \
                     which the firewall never allows; backups from inside will fail \
                     (use an https endpoint on 443, or back up from the host)",
                    u.text
                )),
            }
        }
    }
    // The agent's API endpoint; a loopback one never leaves the sandbox.
    if let Some(u) = cfg.agent.base_url.as_ref().filter(|u| !u.is_loopback()) {
        match u.host.parse() {
            Ok(d) => list.push(d, Source::AgentApi),
            Err(_) => output::warn(&format!(
                "[agent].base-url {}: host {} is not a name the firewall can allow; the agent cannot reach it",
                u.text, u.host
            )),
        }
    }
    if let Some(p) = &prev {
        for n in p.names.iter().filter(|n| n.source == "runtime") {
            if let Ok(d) = n.name.parse() {
                list.push(d, Source::Runtime);
            }
        }
        // Wildcards added at run time; GitHub's come back only with github = true.
        for d in p
            .allow
            .iter()
            .filter(|d| d.starts_with("*.") && !p.github_only.contains(d))
        {
            if let Ok(d) = d.parse() {
                list.push(d, Source::Runtime);
            }
        }
    }
    let timeout = Duration::from_millis(a.timeout);
    let names: Vec<String> = list.to_resolve().map(|e| e.domain.name.clone()).collect();

    // Resolve and fetch at the same time.
    let t0 = Instant::now();
    let (outcomes, gh) = std::thread::scope(|s| {
        let gh = net.github.then(|| {
            let url = a.github_meta_url.clone();
            s.spawn(move || {
                let token = std::env::var("GH_TOKEN")
                    .or_else(|_| std::env::var("GITHUB_TOKEN"))
                    .ok();
                github::ranges(
                    &url,
                    &env_path("SSL_CERT_FILE", DEFAULT_CA),
                    token.as_deref(),
                    &env_path("SBX_FW_CACHE_DIR", DEFAULT_CACHE),
                    timeout,
                )
            })
        });
        let outcomes = resolve::resolve_all(&upstreams, &names, timeout);
        (outcomes, gh.map(|h| h.join().expect("github thread")))
    });
    output::debug(&format!(
        "resolved {} names in {:?}",
        names.len(),
        t0.elapsed()
    ));

    let mut st = State::new();
    let mut fatal = Vec::new();
    let mut owner: BTreeMap<IpAddr, String> = BTreeMap::new();
    let mut plan = Plan {
        upstreams: upstreams.clone(),
        allow_localhost: net.allow_localhost,
        no_git_ssh: !net.allow_git,
        inbound: inbound_ports(cfg),
        local: apply::local_nets(),
        proxy_uid: (net.mode == config::NetMode::Proxy).then_some(proxy::PROXY_UID),
        ..Plan::default()
    };
    for (name, res) in &outcomes {
        let entry = list
            .entries
            .iter()
            .find(|e| e.domain.name == *name && !e.domain.wildcard)
            .expect("listed");
        let source = serde_json::to_value(entry.source)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        match res {
            Ok(addrs) => {
                for ip in addrs
                    .v4
                    .iter()
                    .map(|a| IpAddr::V4(*a))
                    .chain(addrs.v6.iter().map(|a| IpAddr::V6(*a)))
                {
                    if let Some(first) = owner.get(&ip) {
                        st.warnings
                            .push(format!("{ip} is shared by {first} and {name}"));
                    } else {
                        owner.insert(ip, name.clone());
                        match ip {
                            IpAddr::V4(v) => plan.allow4.push(v),
                            IpAddr::V6(v) => plan.allow6.push(v),
                        }
                    }
                }
                st.names.push(state::Name {
                    name: name.clone(),
                    source,
                    v4: addrs.v4.clone(),
                    v6: addrs.v6.clone(),
                    error: None,
                });
            }
            Err(f) => {
                if entry.required {
                    fatal.push(format!("{name}: {f}"));
                } else {
                    st.warnings.push(format!("{name}: {f}; left out"));
                }
                st.names.push(state::Name {
                    name: name.clone(),
                    source,
                    error: Some(f.to_string()),
                    ..Default::default()
                });
            }
        }
    }
    if let Some(gh) = &gh {
        match (gh.source.as_str(), &gh.error) {
            ("none", Some(e)) => st.warnings.push(format!(
                "GitHub stays blocked: cannot fetch its ranges ({e}) and none are cached"
            )),
            ("cache", Some(e)) => st.warnings.push(format!(
                "GitHub ranges from the cache of {}: fetch failed ({e})",
                gh.fetched_at.as_deref().unwrap_or("an earlier run")
            )),
            _ => {}
        }
        plan.github = gh.nets.clone();
        st.github = state::GithubState {
            enabled: true,
            source: gh.source.clone(),
            ranges: gh.nets.len(),
            fetched_at: gh.fetched_at.clone(),
        };
    }
    for w in &st.warnings {
        output::warn(w);
    }
    if !fatal.is_empty() {
        return fail(a.dry_run, FwError::RequiredFailed(fatal));
    }

    if a.dry_run {
        let mut out = std::io::stdout().lock();
        if common.json {
            let data = serde_json::json!({
                "ipset": plan.ipset_script(),
                "iptables": plan.rules(Family::V4),
                "ip6tables": plan.rules(Family::V6),
                "nat": {
                    "iptables": plan.nat(Family::V4),
                    "ip6tables": plan.nat(Family::V6),
                    "jump": plan.nat(Family::V4).map(|_| plan::nat_jump().join(" ")),
                },
                "names": st.names,
                "warnings": st.warnings,
            });
            output::json_line(&mut out, "plan", &data).with_path("stdout")?;
        } else {
            writeln!(out, "# ipset -exist restore\n{}", plan.ipset_script()).with_path("stdout")?;
            writeln!(out, "# iptables-restore\n{}", plan.rules(Family::V4)).with_path("stdout")?;
            writeln!(out, "# ip6tables-restore\n{}", plan.rules(Family::V6)).with_path("stdout")?;
            for (prog, fam) in [("iptables", Family::V4), ("ip6tables", Family::V6)] {
                if let Some(nat) = plan.nat(fam) {
                    let jump = plan::nat_jump().join(" ");
                    writeln!(
                        out,
                        "# {prog}-restore --noflush, then {prog} -t nat -I {jump} unless -C finds it\n{nat}"
                    )
                    .with_path("stdout")?;
                }
            }
        }
        return Ok(Exit::Ok);
    }

    // Commit. From here on a failure closes everything.
    let commit = || -> Result<(), error::NetfilterError> {
        output::debug(&format!("built in {:?}", t0.elapsed()));
        apply::ipset_restore(&plan.ipset_script())?;
        output::debug(&format!("sets in {:?}", t0.elapsed()));
        let v6 = plan.rules(Family::V6);
        apply::tables_restore_both(
            &plan.rules(Family::V4),
            apply::has_ipv6().then_some(v6.as_str()),
        )?;
        // The nat table is shared (Docker's DNS is there): only our chain
        // and its jump, after the filter rules, which already keep the
        // agent's 80/443 from going out directly.
        let was_proxy = prev.as_ref().is_some_and(|p| p.proxy);
        let nat = |fam| match plan.nat(fam) {
            Some(nat) => apply::nat_install(fam, &nat),
            // Leaving proxy mode. Not on every init: listing the nat
            // table costs a process and creates the table where there
            // was none. A redirect left over without state (reset
            // removes it) leads to no proxy: blocked, not open.
            None if was_proxy => apply::nat_remove(fam),
            None => Ok(()),
        };
        // Both families at once, as for the filter rules.
        std::thread::scope(|s| {
            let six = apply::has_ipv6().then(|| s.spawn(|| nat(Family::V6)));
            let four = nat(Family::V4);
            let six = six.map_or(Ok(()), |h| {
                h.join()
                    .unwrap_or(Err(error::NetfilterError::Panicked("nat")))
            });
            four.and(six)
        })?;
        output::debug(&format!("rules in {:?}", t0.elapsed()));
        apply::flush_conntrack()
    };
    if let Err(e) = commit() {
        let closed = apply::block_everything();
        let how = if closed.is_ok() {
            "all traffic is blocked"
        } else {
            "and blocking everything failed too"
        };
        return Err(Box::new(FwError::Aborted {
            cause: Box::new(e.into()),
            how: how.to_owned(),
        }));
    }

    let mut allow: Vec<String> = list.entries.iter().map(|e| e.domain.to_string()).collect();
    allow.sort();
    allow.dedup();
    st.allow = allow;
    // The meta host is GitHub's too, but must resolve before any range is
    // known: only the built-in GitHub names are held to the ranges.
    st.github_only = list
        .entries
        .iter()
        .filter(|e| e.source == Source::Github)
        .map(|e| e.domain.to_string())
        .filter(|d| allowlist::GITHUB_NAMES.contains(&d.as_str()))
        .collect();
    st.github_nets = plan.github.clone();
    st.proxy = plan.proxy_uid.is_some();
    st.upstreams = upstreams;
    st.resolv_conf_original = original;
    st.installed_at = now();
    st.refreshed_at = st.installed_at.clone();
    st.store(dir).with_path(state::path(dir))?;

    if !a.no_dns_filter {
        start_filter(dir)?;
        if !ours {
            point_resolv_conf(&resolv)?;
        }
    }
    if st.proxy {
        start_proxy(dir)?;
    }
    output::info(&format!(
        "installed: {} names ({} IPv4, {} IPv6 addresses), {} GitHub ranges ({}), in {:?}",
        st.names.iter().filter(|n| n.error.is_none()).count(),
        plan.allow4.len(),
        plan.allow6.len(),
        plan.github.len(),
        if st.github.enabled {
            st.github.source.as_str()
        } else {
            "off"
        },
        t0.elapsed()
    ));
    Ok(Exit::Ok)
}

/// An init that failed before the commit: keep an installed firewall, or
/// block everything if there is none. Never open.
fn fail(dry_run: bool, cause: FwError) -> Result<Exit, BoxError> {
    if dry_run {
        return Err(Box::new(cause));
    }
    let msg = cause.to_string();
    let had = apply::installed(Family::V4) && (!apply::has_ipv6() || apply::installed(Family::V6));
    let how = if had {
        "the previous firewall is unchanged".to_owned()
    } else {
        match apply::block_everything() {
            Ok(()) => "all traffic is blocked".to_owned(),
            Err(e) => format!("and blocking everything failed too: {e}"),
        }
    };
    audit::append(
        &Record::new(TOOL, "init", "firewall", Outcome::Blocked, "fail-closed").reason(&msg),
    );
    Err(Box::new(FwError::Aborted {
        cause: Box::new(cause),
        how,
    }))
}

fn open_everything(a: &InitArgs, dir: &Path, cfg: &str) -> Result<Exit, BoxError> {
    output::warn(&format!(
        "allow-external = true in {cfg}: THE FIREWALL IS OFF, the sandbox can reach any host"
    ));
    if a.dry_run {
        println!(
            "# iptables-restore and ip6tables-restore\n{}",
            plan::open_all()
        );
        return Ok(Exit::Ok);
    }
    audit::append(
        &Record::new(TOOL, "init", "firewall", Outcome::Passed, "allow-external")
            .reason("allow-external = true: no egress filtering"),
    );
    apply::tables_restore(Family::V4, &plan::open_all()).map_err(FwError::from)?;
    if apply::has_ipv6() {
        apply::tables_restore(Family::V6, &plan::open_all()).map_err(FwError::from)?;
    }
    leave_proxy_mode(dir)?;
    let mut st = State::new();
    st.open = true;
    st.installed_at = now();
    st.refreshed_at = st.installed_at.clone();
    st.store(dir).with_path(state::path(dir))?;
    Ok(Exit::Ok)
}

fn filter_pid(dir: &Path) -> Option<u32> {
    filter_pid_why(dir).ok()
}

/// The running filter's pid, or why the recorded one is not it: gone,
/// another program, or a filter in another network namespace (a state
/// directory shared with another sandbox), which serves its own loopback,
/// not ours.
fn filter_pid_why(dir: &Path) -> Result<u32, String> {
    let pid: u32 = std::fs::read_to_string(dir.join("dns.pid"))
        .map_err(|_| "no dns.pid".to_owned())?
        .trim()
        .parse()
        .map_err(|_| "dns.pid holds no pid".to_owned())?;
    let cmdline =
        std::fs::read(format!("/proc/{pid}/cmdline")).map_err(|_| format!("pid {pid} is gone"))?;
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let is_ours =
        args.first().is_some_and(|a| a.ends_with(b"sbx-fw")) && args.iter().any(|a| *a == b"dns");
    if !is_ours {
        return Err(format!("pid {pid} is not an sbx-fw DNS filter"));
    }
    let netns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/net")).ok();
    let (theirs, ours) = (netns(&pid.to_string()), netns("self"));
    if theirs.is_none() || theirs != ours {
        return Err(format!(
            "pid {pid} is a DNS filter in another network namespace ({})",
            theirs.map_or("unknown".into(), |t| t.display().to_string())
        ));
    }
    Ok(pid)
}

/// Start the DNS filter unless it runs; it re-reads the state file itself.
fn start_filter(dir: &Path) -> Result<(), BoxError> {
    match filter_pid_why(dir) {
        Ok(_) => return Ok(()),
        Err(why) if dir.join("dns.pid").exists() => {
            output::warn(&format!(
                "{}: {why}; starting a DNS filter for this namespace",
                dir.join("dns.pid").display()
            ));
        }
        Err(_) => {}
    }
    spawn_helper(dir, "dns", "the DNS filter", |_| {
        "the DNS filter did not start (is 127.0.0.53:53 taken?); the firewall is installed and DNS is closed".into()
    })
}

/// Start `sbx-fw SUB` as a daemon of this state directory: its diagnostics
/// go to SUB.log beside the state (an inherited stderr would keep our
/// caller's pipe open for as long as it lives); it is up once it prints
/// "ready", and its pid goes to SUB.pid. `refusal(log)` says what is left
/// blocked when it does not start.
fn spawn_helper(
    dir: &Path,
    sub: &str,
    what: &'static str,
    refusal: impl Fn(&Path) -> String,
) -> Result<(), BoxError> {
    let exe = std::env::current_exe().with_path("/proc/self/exe")?;
    let log_path = dir.join(format!("{sub}.log"));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_path(&log_path)?;
    let mut child = Command::new(exe)
        .arg(sub)
        .env("SBX_FW_STATE_DIR", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|source| FwError::Spawn { what, source })?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    if line.trim() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        return Err(Box::new(FwError::NotReady(refusal(&log_path))));
    }
    let pid_file = dir.join(format!("{sub}.pid"));
    std::fs::write(&pid_file, format!("{}\n", child.id())).with_path(&pid_file)?;
    Ok(())
}

/// `sbx-fw proxy`: as root it drops to its own uid first. It records its
/// pid itself (while still root): a supervisor may restart it without init.
fn proxy_cmd(dir: &Path) -> Result<Exit, BoxError> {
    if nix::unistd::getuid().is_root() {
        let pid_file = dir.join("proxy.pid");
        std::fs::write(&pid_file, format!("{}\n", std::process::id())).with_path(&pid_file)?;
    }
    proxy::serve(dir, || {
        println!("ready");
        let _ = std::io::stdout().flush();
    })
    .map_err(|source| FwError::Serve {
        what: "proxy",
        listen: "its ports".into(),
        source,
    })?;
    Ok(Exit::Ok)
}

/// Start the proxy unless it runs (it follows the state file itself). If
/// it cannot start, the redirect leads nowhere: blocked, never open.
fn start_proxy(dir: &Path) -> Result<(), BoxError> {
    let pid_file = dir.join("proxy.pid");
    if let Ok(p) = std::fs::read_to_string(&pid_file)
        && let Ok(pid) = p.trim().parse::<u32>()
        && is_ours(pid, "proxy")
    {
        return Ok(());
    }
    spawn_helper(dir, "proxy", "the proxy", |log| {
        format!(
            "the proxy did not start (see {}); the firewall is installed and TCP 80/443 stay blocked",
            log.display()
        )
    })
}

/// Out of proxy mode (reset, allow-external): our nat chain and its jump
/// go, in both families, then the proxy is stopped. The rest of the nat
/// table is not ours (Docker's DNS lives there) and stays as it is.
fn leave_proxy_mode(dir: &Path) -> Result<(), BoxError> {
    for fam in families() {
        apply::nat_remove(fam).map_err(FwError::from)?;
    }
    let pid_file = dir.join("proxy.pid");
    if let Ok(p) = std::fs::read_to_string(&pid_file)
        && let Ok(pid) = p.trim().parse::<u32>()
        && is_ours(pid, "proxy")
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    let _ = std::fs::remove_file(pid_file);
    Ok(())
}

/// The families this kernel has.
fn families() -> Vec<Family> {
    let mut fams = vec![Family::V4];
    if apply::has_ipv6() {
        fams.push(Family::V6);
    }
    fams
}

/// `pid` is an `sbx-fw SUB` in our network namespace.
fn is_ours(pid: u32, sub: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let netns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/net")).ok();
    args.first().is_some_and(|a| a.ends_with(b"sbx-fw"))
        && args.contains(&sub.as_bytes())
        && netns(&pid.to_string()).is_some_and(|n| Some(n) == netns("self"))
}

/// Point resolv.conf at the filter, in place: it is a bind mount in Docker
/// and under `ip netns exec`, so it cannot be renamed over.
fn point_resolv_conf(old: &str) -> Result<(), BoxError> {
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

/// The resolv.conf that `point_resolv_conf` replaced, from its comments.
fn original_resolv_conf(ours: &str) -> String {
    ours.lines()
        .filter_map(|l| l.strip_prefix(RESOLV_ORIGINAL))
        .fold(String::new(), |mut o, l| {
            o.push_str(l);
            o.push('\n');
            o
        })
}

fn load_state(dir: &Path) -> Result<State, FwError> {
    State::load(dir)?.ok_or_else(|| FwError::NoState(dir.to_owned()))
}

fn parse_domains(raw: &[String]) -> Result<Vec<Domain>, FwError> {
    raw.iter()
        .map(|d| d.parse::<Domain>().map_err(FwError::BadDomain))
        .collect()
}

fn allow(a: &NamesArgs, dir: &Path) -> Result<Exit, BoxError> {
    need_net_admin("allow")?;
    let domains = parse_domains(&a.domains)?;
    let mut st = load_state(dir)?;
    let exact: Vec<String> = domains
        .iter()
        .filter(|d| !d.wildcard)
        .map(|d| d.name.clone())
        .collect();
    let outcomes = resolve::resolve_all(&st.upstreams, &exact, Duration::from_secs(3));
    // All or nothing: one unresolvable name changes nothing.
    if let Some((n, Err(f))) = outcomes.iter().find(|(_, r)| r.is_err()) {
        return Err(Box::new(FwError::Unresolvable {
            name: n.clone(),
            why: f.to_string(),
        }));
    }
    let mut script = String::new();
    for (name, res) in &outcomes {
        let addrs = res.as_ref().expect("checked");
        for v in &addrs.v4 {
            script.push_str(&format!("add {} {v} timeout 0\n", plan::SET_ALLOW4));
        }
        for v in &addrs.v6 {
            script.push_str(&format!("add {} {v} timeout 0\n", plan::SET_ALLOW6));
        }
        st.names.retain(|n| n.name != *name);
        st.names.push(state::Name {
            name: name.clone(),
            source: "runtime".into(),
            v4: addrs.v4.clone(),
            v6: addrs.v6.clone(),
            error: None,
        });
    }
    apply::ipset_restore(&script).map_err(FwError::from)?;
    for d in &domains {
        let s = d.to_string();
        if !st.allow.contains(&s) {
            st.allow.push(s.clone());
        }
        audit::append(&Record::new(
            TOOL,
            "allow",
            &s,
            Outcome::Allowed,
            "runtime-allow",
        ));
    }
    st.refreshed_at = now();
    st.store(dir).with_path(state::path(dir))?;
    Ok(Exit::Ok)
}

fn deny(a: &NamesArgs, dir: &Path) -> Result<Exit, BoxError> {
    need_net_admin("deny")?;
    let domains = parse_domains(&a.domains)?;
    let mut st = load_state(dir)?;
    let mut script = String::new();
    for d in &domains {
        let s = d.to_string();
        st.allow.retain(|x| *x != s);
        if let Some(pos) = st
            .names
            .iter()
            .position(|n| n.name == d.name && !d.wildcard)
        {
            let gone = st.names.remove(pos);
            // Keep addresses another allowed name still resolves to.
            for v in gone.v4.iter().filter(|v| !st.is_permanent(IpAddr::V4(**v))) {
                script.push_str(&format!("del {} {v}\n", plan::SET_ALLOW4));
            }
            for v in gone.v6.iter().filter(|v| !st.is_permanent(IpAddr::V6(**v))) {
                script.push_str(&format!("del {} {v}\n", plan::SET_ALLOW6));
            }
        }
        audit::append(&Record::new(
            TOOL,
            "deny",
            &s,
            Outcome::Blocked,
            "runtime-deny",
        ));
    }
    // The filter stops answering for the denied entries first, then what
    // it handed out for them alone goes too.
    st.refreshed_at = now();
    st.store(dir).with_path(state::path(dir))?;
    let denied: Vec<String> = domains.iter().map(|d| d.to_string()).collect();
    let mut removed: Vec<IpAddr> = Vec::new();
    for (ip, entries) in dns::read_handed(dir) {
        let held_by_denied = entries.iter().any(|e| denied.contains(e));
        let still_held = entries
            .iter()
            .any(|e| !denied.contains(e) && st.allow.contains(e));
        if held_by_denied && !still_held && !st.is_permanent(ip) {
            let set = if ip.is_ipv4() {
                plan::SET_ALLOW4
            } else {
                plan::SET_ALLOW6
            };
            script.push_str(&format!("del {set} {ip}\n"));
            removed.push(ip);
        }
    }
    if !script.is_empty() {
        apply::ipset_restore(&script).map_err(FwError::from)?;
        forget_flows(&removed)?;
    }
    Ok(Exit::Ok)
}

/// Connections already open to a removed address die too: their conntrack
/// entries go (conntrack(8) deletes by address; without it the whole
/// table is flushed, which also cuts other connections, but fails closed).
fn forget_flows(removed: &[IpAddr]) -> Result<(), BoxError> {
    for ip in removed {
        match Command::new("conntrack")
            .args(["-D", "-d", &ip.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
        {
            // 1: no entry to delete.
            Ok(s) if matches!(s.code(), Some(0 | 1)) => {}
            _ => {
                apply::flush_conntrack().map_err(FwError::from)?;
                return Ok(());
            }
        }
    }
    Ok(())
}

fn set_sizes() -> BTreeMap<String, Option<usize>> {
    let mut out = BTreeMap::new();
    for s in plan::SETS {
        let n = Command::new("ipset")
            .args(["list", "-t", s])
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout).lines().find_map(|l| {
                    l.strip_prefix("Number of entries:")
                        .and_then(|n| n.trim().parse().ok())
                })
            });
        out.insert(s.to_owned(), n);
    }
    out
}

fn rule_count(fam: Family) -> Option<usize> {
    let o = Command::new(apply::backend().tables(fam))
        .args(["--wait", "-S", "SBX-OUT"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    o.status.success().then(|| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with("-A"))
            .count()
    })
}

fn status(common: &CommonArgs, dir: &Path) -> Result<Exit, BoxError> {
    need_net_admin("status")?;
    let st = State::load(dir)?;
    let sets = set_sizes();
    let rules4 = rule_count(Family::V4);
    let rules6 = if apply::has_ipv6() {
        rule_count(Family::V6)
    } else {
        None
    };
    let filter = filter_pid(dir);
    // The filter's refusal counters, when the file is the running filter's.
    let refused = std::fs::read_to_string(dir.join(dns::STATS_FILE))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .filter(|v| filter.is_some_and(|p| v["pid"] == p))
        .map(|v| v["refused"].clone());
    let mut out = std::io::stdout().lock();
    if common.json {
        let data = serde_json::json!({
            "installed": rules4.is_some(),
            "open": st.as_ref().is_some_and(|s| s.open),
            "rules": {"ipv4": rules4, "ipv6": rules6, "backend": apply::backend().name()},
            "sets": sets,
            "dns_filter": {"running": filter.is_some(), "pid": filter, "listen": format!("{}:53", plan::FILTER_ADDR), "refused": refused},
            "state": st,
        });
        output::json_line(&mut out, "status", &data).with_path("stdout")?;
        return Ok(Exit::Ok);
    }
    let Some(st) = st else {
        writeln!(
            out,
            "not initialized (no {}); rules: {}",
            state::path(dir).display(),
            rules4.map_or("none".into(), |n| n.to_string())
        )
        .with_path("stdout")?;
        return Ok(Exit::Ok);
    };
    if st.open {
        writeln!(
            out,
            "OPEN: allow-external = true, no filtering (since {})",
            st.installed_at
        )
        .with_path("stdout")?;
        return Ok(Exit::Ok);
    }
    let show = |n: Option<usize>| n.map_or("missing".to_owned(), |n| n.to_string());
    writeln!(out, "installed     {}", st.installed_at).with_path("stdout")?;
    writeln!(out, "refreshed     {}", st.refreshed_at).with_path("stdout")?;
    writeln!(
        out,
        "rules         {} IPv4, {} IPv6 in SBX-OUT ({} iptables)",
        show(rules4),
        show(rules6),
        apply::backend().name()
    )
    .with_path("stdout")?;
    for (s, n) in &sets {
        writeln!(out, "set {s:<10}    {} entries", show(*n)).with_path("stdout")?;
    }
    let ok = st.names.iter().filter(|n| n.error.is_none()).count();
    writeln!(
        out,
        "names         {} allowed, {ok} resolved at init or allow",
        st.allow.len()
    )
    .with_path("stdout")?;
    writeln!(
        out,
        "github        {}",
        if st.github.enabled {
            format!(
                "{} ranges ({}{})",
                st.github.ranges,
                st.github.source,
                st.github
                    .fetched_at
                    .as_deref()
                    .map(|t| format!(", fetched {t}"))
                    .unwrap_or_default()
            )
        } else {
            "off".into()
        }
    )
    .with_path("stdout")?;
    let ups: Vec<String> = st.upstreams.iter().map(|u| u.to_string()).collect();
    writeln!(
        out,
        "dns filter    {} on {}:53, upstream {}",
        filter.map_or("NOT RUNNING".to_owned(), |p| format!("pid {p}")),
        plan::FILTER_ADDR,
        ups.join(", ")
    )
    .with_path("stdout")?;
    if let Some(r) = refused.as_ref().and_then(|r| r.as_object()) {
        let nonzero: Vec<String> = r
            .iter()
            .filter(|(_, n)| n.as_u64().is_some_and(|n| n > 0))
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(
            out,
            "dns refused   {}",
            if nonzero.is_empty() {
                "none".to_owned()
            } else {
                nonzero.join(", ")
            }
        )
        .with_path("stdout")?;
    }
    for w in &st.warnings {
        writeln!(out, "warning       {w}").with_path("stdout")?;
    }
    Ok(Exit::Ok)
}

fn reset(a: &ResetArgs, dir: &Path) -> Result<Exit, BoxError> {
    need_net_admin("reset")?;
    if !a.yes {
        return Err(Box::new(FwError::ResetNeedsYes));
    }
    let open = plan::open_all();
    apply::tables_restore(Family::V4, &open).map_err(FwError::from)?;
    if apply::has_ipv6() {
        apply::tables_restore(Family::V6, &open).map_err(FwError::from)?;
    }
    let destroy: String = plan::SETS
        .iter()
        .map(|s| format!("destroy {s}\n"))
        .collect();
    let _ = apply::ipset_restore(&destroy);
    leave_proxy_mode(dir)?;
    if let Some(pid) = filter_pid(dir) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    if let Ok(Some(st)) = State::load(dir)
        && let Some(orig) = st.resolv_conf_original
        && std::fs::read_to_string(RESOLV_CONF).is_ok_and(|t| t.starts_with(RESOLV_MARK))
    {
        std::fs::write(RESOLV_CONF, orig).with_path(RESOLV_CONF)?;
    }
    let _ = std::fs::remove_file(state::path(dir));
    let _ = std::fs::remove_file(dir.join("dns.pid"));
    audit::append(
        &Record::new(TOOL, "reset", "firewall", Outcome::Passed, "reset")
            .reason("firewall removed by sbx-fw reset --yes"),
    );
    output::warn("firewall removed: the sandbox can reach any host");
    Ok(Exit::Ok)
}

fn probe_cmd(common: &CommonArgs, a: &ProbeArgs) -> Result<Exit, BoxError> {
    let probes = a
        .probes
        .iter()
        .map(|p| {
            p.parse::<probe::Probe>()
                .map_err(|e| Box::new(FwError::BadProbe(e)) as BoxError)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let results = probe::run_all(&probes, Duration::from_millis(a.timeout));
    let mut out = std::io::stdout().lock();
    for r in &results {
        if common.json {
            output::json_line(&mut out, "probe", r).with_path("stdout")?;
        } else {
            let v = serde_json::to_value(r.verdict).unwrap_or_default();
            writeln!(
                out,
                "{:<10} {:<40} {} ({:.1} ms)",
                v.as_str().unwrap_or(""),
                r.probe,
                r.detail,
                r.ms
            )
            .with_path("stdout")?;
        }
    }
    Ok(Exit::Ok)
}

#[derive(serde::Serialize)]
struct Check {
    check: &'static str,
    probe: String,
    expect: &'static str,
    verdict: probe::Verdict,
    detail: String,
    ms: f64,
    pass: bool,
}

fn verify(common: &CommonArgs, a: &VerifyArgs, dir: &Path) -> Result<Exit, BoxError> {
    let t0 = Instant::now();
    let st = load_state(dir)?;
    if st.open {
        return Err(Box::new(FwError::FirewallOff));
    }
    let reach = match &a.reach {
        Some(n) => st.names.iter().find(|x| x.name == *n && !x.v4.is_empty()),
        None => st
            .names
            .iter()
            .find(|x| !x.v4.is_empty() && x.error.is_none()),
    }
    .ok_or_else(|| FwError::NothingToReach(a.reach.clone()))?;
    let ip = IpAddr::V4(reach.v4[0]);
    use probe::Probe::*;
    let plan: Vec<(&'static str, probe::Probe, bool)> = vec![
        (
            "blocked IPv4 address",
            Tcp(SocketAddr::new(a.blocked_v4, 443)),
            false,
        ),
        (
            "blocked IPv6 address",
            Tcp(SocketAddr::new(a.blocked_v6, 443)),
            false,
        ),
        (
            "other port on an allowlisted address",
            Tcp(SocketAddr::new(ip, 80)),
            false,
        ),
        (
            "DNS to another resolver",
            Dns(
                SocketAddr::new(a.other_resolver, 53),
                reach.name.clone(),
                hickory_proto::rr::RecordType::A,
            ),
            false,
        ),
        (
            "SSH to a non-GitHub host",
            Tcp(SocketAddr::new(ip, 22)),
            false,
        ),
        (
            "allowlisted name reachable",
            Tcp(SocketAddr::new(ip, 443)),
            true,
        ),
    ];
    let probes: Vec<probe::Probe> = plan.iter().map(|p| p.1.clone()).collect();
    let results = probe::run_all(&probes, Duration::from_millis(a.timeout));
    let mut failed = 0;
    let mut out = std::io::stdout().lock();
    for ((check, _, want_open), r) in plan.iter().zip(results) {
        let pass = if *want_open {
            r.verdict == probe::Verdict::Open
        } else {
            matches!(
                r.verdict,
                probe::Verdict::Refused | probe::Verdict::DnsRefused
            )
        };
        failed += usize::from(!pass);
        let target = format!("{check}: {}", r.probe);
        let rec = match (pass, want_open) {
            (true, false) => Record::new(
                TOOL,
                "verify",
                &target,
                Outcome::Blocked,
                "egress-default-deny",
            ),
            (true, true) => Record::new(TOOL, "verify", &target, Outcome::Allowed, "allowlist"),
            (false, _) => Record::new(TOOL, "verify", &target, Outcome::Allowed, "verify-failed")
                .reason(&r.detail),
        };
        audit::append(&rec);
        let c = Check {
            check,
            probe: r.probe,
            expect: if *want_open { "open" } else { "refused" },
            verdict: r.verdict,
            detail: r.detail,
            ms: r.ms,
            pass,
        };
        if common.json {
            output::json_line(&mut out, "check", &c).with_path("stdout")?;
        } else if !output::is_quiet() {
            writeln!(
                out,
                "{}  {:<38} {} ({}, {:.1} ms)",
                if pass { "ok  " } else { "FAIL" },
                c.check,
                c.probe,
                c.detail,
                c.ms
            )
            .with_path("stdout")?;
        }
    }
    let total = t0.elapsed().as_secs_f64() * 1e3;
    if common.json {
        output::json_line(
            &mut out,
            "summary",
            &serde_json::json!({"checks": plan.len(), "failed": failed, "ms": total}),
        )
        .with_path("stdout")?;
    }
    if failed > 0 {
        output::error(&format!(
            "verify: {failed} of {} checks failed: the firewall leaks",
            plan.len()
        ));
        return Ok(Exit::No);
    }
    Ok(Exit::Ok)
}
