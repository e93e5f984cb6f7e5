//! sbx-fw: the sandbox's egress firewall. Default deny in both families;
//! allowlisted names on TCP 443, GitHub's ranges on 22 and 443, DNS only
//! through a filter that answers allowlisted names. Everything is resolved
//! and built before anything is installed; a failure leaves the previous
//! firewall, or, on a first run, everything blocked. Never open.
#![forbid(unsafe_code)]

// The command line and its failures.
pub mod cli;
pub mod error;

// The commands.
mod grant;
mod init;
mod reset;
mod runtime;
mod status;
mod verify;

// What the firewall is made of: names, plan, and the outside world
// (each side effect behind a trait with a recording fake in tests).
pub mod allowlist;
pub mod auditlog;
pub mod clock;
pub mod github;
pub mod netfilter;
pub mod plan;
pub mod resolve;
pub mod state;

// The host, resolv.conf, and the helpers init leaves running.
mod daemons;
pub mod dns;
pub mod gateway;
pub mod host;
pub mod probe;
pub mod proxy;
pub mod resolv;

#[cfg(test)]
mod fake;

use clap::CommandFactory;
use sbx_core::audit::{self, Outcome, Record};
use sbx_core::error::BoxError;
use sbx_core::{Exit, output};

pub use cli::{Cli, Cmd};
use clock::SystemClock;
use error::FwError;
use netfilter::System;
use resolve::Hickory;

const TOOL: &str = "sbx-fw";

pub fn command() -> clap::Command {
    Cli::command()
}

pub fn run(cli: Cli) -> Result<Exit, BoxError> {
    output::init(TOOL, &cli.common);
    let dir = state::dir_from_env();
    let common = &cli.common;
    match cli.command {
        Cmd::Init(a) => init::init(common, &a, &dir)?,
        Cmd::Verify(a) => return Ok(verify::verify(common, &a, &dir)?),
        Cmd::Allow(a) => {
            need_net_admin("allow")?;
            let domains = runtime::parse_domains(&a.domains)?;
            runtime::allow(&runtime(&dir), &Hickory, &domains)?;
        }
        Cmd::Deny(a) => {
            need_net_admin("deny")?;
            let domains = runtime::parse_domains(&a.domains)?;
            runtime::deny(&runtime(&dir), &domains)?;
        }
        Cmd::Grant(a) => return Ok(grant::run(common, &a, &dir)?),
        Cmd::Secret(a) => grant::secret(&a)?,
        Cmd::Status => {
            need_net_admin("status")?;
            status::status(&System, common, &dir)?;
        }
        Cmd::Reset(a) => {
            need_net_admin("reset")?;
            if !a.yes {
                return Err(FwError::ResetNeedsYes.into());
            }
            reset::reset(&System, &dir)?;
        }
        Cmd::Probe(a) => verify::probe_cmd(common, &a)?,
        Cmd::Dns(a) => dns::serve(&dir, a.listen, daemons::ready)
            .map_err(|e| FwError::dns_serve(a.listen, e))?,
        Cmd::Proxy => daemons::serve_proxy(&dir)?,
    }
    Ok(Exit::Ok)
}

fn runtime(dir: &std::path::Path) -> runtime::Runtime<'_> {
    runtime::Runtime {
        nf: &System,
        clock: &SystemClock,
        dir,
    }
}

/// Every command that changes or reads netfilter needs CAP_NET_ADMIN; the
/// refusal is audited, since an agent trying it is worth knowing about.
fn need_net_admin(op: &'static str) -> Result<(), FwError> {
    if host::has_net_admin() {
        return Ok(());
    }
    audit::append(
        &Record::new(TOOL, op, "firewall", Outcome::Blocked, "net-admin")
            .reason("caller lacks CAP_NET_ADMIN"),
    );
    Err(FwError::NoNetAdmin { op })
}
