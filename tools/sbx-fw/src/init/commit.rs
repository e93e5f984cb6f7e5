//! Installing what init built, and what happens when anything fails: an
//! installed firewall stays, a first run blocks everything. Never open.

use std::io::Write;
use std::path::Path;

use sbx_core::audit::{Outcome, Record};
use sbx_core::error::IoContext;
use sbx_core::output;

use super::Sys;
use crate::error::{FwError, NetfilterError};
use crate::netfilter::Netfilter;
use crate::plan::{self, Family, Plan};
use crate::state::{self, State};
use crate::{TOOL, daemons};

/// Sets, then both families' rules, then the nat redirect, then the
/// conntrack flush. Any failure on the way blocks everything.
pub fn commit(nf: &dyn Netfilter, plan: &Plan, was_proxy: bool) -> Result<(), FwError> {
    install(nf, plan, was_proxy).map_err(|e| {
        let how = if nf.block_everything().is_ok() {
            "all traffic is blocked"
        } else {
            "and blocking everything failed too"
        };
        FwError::Aborted {
            cause: Box::new(e.into()),
            how: how.to_owned(),
        }
    })
}

fn install(nf: &dyn Netfilter, plan: &Plan, was_proxy: bool) -> Result<(), NetfilterError> {
    nf.ipset_restore(&plan.ipset_script())?;
    let v6 = plan.rules(Family::V6);
    nf.tables_restore_both(
        &plan.rules(Family::V4),
        nf.has_ipv6().then_some(v6.as_str()),
    )?;
    // The nat table is shared (Docker's DNS is there): only our chain and
    // its jump, after the filter rules, which already keep the agent's
    // 80/443 from going out directly.
    let nat = |fam| match plan.nat(fam) {
        Some(nat) => nf.nat_install(fam, &nat),
        // Leaving proxy mode. Not on every init: listing the nat table
        // costs a process and creates the table where there was none. A
        // redirect left over without state (reset removes it) leads to no
        // proxy: blocked, not open.
        None if was_proxy => nf.nat_remove(fam),
        None => Ok(()),
    };
    // Both families at once, as for the filter rules.
    std::thread::scope(|s| {
        let six = nf.has_ipv6().then(|| s.spawn(|| nat(Family::V6)));
        let four = nat(Family::V4);
        let six = six.map_or(Ok(()), |h| {
            h.join().unwrap_or(Err(NetfilterError::Panicked("nat")))
        });
        four.and(six)
    })?;
    nf.flush_conntrack()
}

/// An init that failed before the commit: keep an installed firewall, or
/// block everything if there is none. Never open. A dry run changes
/// nothing and just reports the cause.
pub fn fail(sys: &Sys<'_>, dry_run: bool, cause: FwError) -> FwError {
    let nf = sys.nf;
    if dry_run {
        return cause;
    }
    if nf.installed_everywhere() {
        let how = "the previous firewall is unchanged".to_owned();
        return aborted(sys, cause, how);
    }
    fail_blocked(sys, cause)
}

/// A failure after the commit: whatever was installed, block everything.
pub fn fail_blocked(sys: &Sys<'_>, cause: FwError) -> FwError {
    let how = match sys.nf.block_everything() {
        Ok(()) => "all traffic is blocked".to_owned(),
        Err(e) => format!("and blocking everything failed too: {e}"),
    };
    aborted(sys, cause, how)
}

fn aborted(sys: &Sys<'_>, cause: FwError, how: String) -> FwError {
    sys.audit.append(
        &Record::new(TOOL, "init", "firewall", Outcome::Blocked, "fail-closed")
            .reason(&cause.to_string()),
    );
    FwError::Aborted {
        cause: Box::new(cause),
        how,
    }
}

/// `allow-external = true`: no filtering at all, loudly.
pub fn open_everything(
    sys: &Sys<'_>,
    dry_run: bool,
    json: bool,
    dir: &Path,
    cfg: &str,
) -> Result<(), FwError> {
    let nf = sys.nf;
    output::warn(&format!(
        "allow-external = true in {cfg}: THE FIREWALL IS OFF, the sandbox can reach any host"
    ));
    if dry_run {
        let mut out = std::io::stdout().lock();
        if json {
            let rules = plan::open_all();
            let data = serde_json::json!({"open": true, "iptables": rules, "ip6tables": rules});
            output::json_line(&mut out, "plan", &data).with_path("stdout")?;
        } else {
            writeln!(
                out,
                "# iptables-restore and ip6tables-restore\n{}",
                plan::open_all()
            )
            .with_path("stdout")?;
        }
        return Ok(());
    }
    sys.audit.append(
        &Record::new(TOOL, "init", "firewall", Outcome::Passed, "allow-external")
            .reason("allow-external = true: no egress filtering"),
    );
    for fam in nf.families() {
        nf.tables_restore(fam, &plan::open_all())?;
    }
    daemons::leave_proxy_mode(nf, dir)?;
    let mut st = State::new();
    st.open = true;
    st.installed_at = sys.clock.stamp();
    st.refreshed_at = st.installed_at.clone();
    st.store(dir).with_path(state::path(dir))?;
    Ok(())
}
