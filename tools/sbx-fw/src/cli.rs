//! The command line: every subcommand, its flags and the long help.

use std::net::{IpAddr, SocketAddr};

use clap::{Args, Parser, Subcommand};
use sbx_core::cli::CommonArgs;

use crate::github;

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
    /// Open names for a while (root only: `sbx-run allow` from the host), list or revoke them.
    ///
    /// A grant makes the DNS filter answer the name and the proxy let it through until
    /// --for has passed, without a new init; what the filter hands out for it expires with
    /// it. Every grant and revoke is audited. The agent, which has no root, is refused (77).
    Grant(GrantArgs),
    /// Renew a [secrets] value in the running proxy (root only: the host's login refresh).
    ///
    /// The new value is read from stdin (one line), stored on the secrets' tmpfs for a
    /// restarted proxy and handed to the running one over its socket there, without a
    /// restart; requests after it carry it, on open connections too. With --failed the
    /// value stays and the entry's requests are answered 503 with REASON until a value
    /// comes. The agent, which has no root, is refused (77).
    Secret(SecretArgs),
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
pub struct GrantArgs {
    /// Names like api.example.com or *.example.com (with --revoke: the grants to end).
    #[arg(value_name = "DOMAIN", required_unless_present = "list")]
    pub domains: Vec<String>,
    /// How long each grant lasts, like 30m or 2h (at most 7d).
    #[arg(long = "for", value_name = "DURATION", default_value = "1h")]
    pub duration: sbx_core::config::Interval,
    /// Print the grants in force.
    #[arg(long, conflicts_with = "revoke")]
    pub list: bool,
    /// End the named grants now.
    #[arg(long)]
    pub revoke: bool,
    /// Who asked, for --list and the audit record.
    #[arg(long, value_name = "WHO", default_value = "sbx-fw grant")]
    pub by: String,
}

#[derive(Debug, Args)]
pub struct SecretArgs {
    /// The [secrets] entry, as the config names it.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The renewal failed: answer the entry's requests with this instead.
    #[arg(long, value_name = "REASON")]
    pub failed: Option<String>,
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
