//! What init reports: the plan of a dry run, and one line once installed.

use std::io::Write;
use std::time::Duration;

use sbx_core::error::IoContext;
use sbx_core::output;

use crate::error::FwError;
use crate::plan::{self, Family, Plan};
use crate::state::State;

/// `init --dry-run`: the exact sets and rules, installed nowhere.
pub fn dry_run(json: bool, plan: &Plan, st: &State) -> Result<(), FwError> {
    let mut out = std::io::stdout().lock();
    if json {
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
        return Ok(());
    }
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
    Ok(())
}

/// The one line `-v` shows once the firewall is up.
pub fn installed(plan: &Plan, st: &State, took: Duration) {
    output::info(&format!(
        "installed: {} names ({} IPv4, {} IPv6 addresses), {} GitHub ranges ({}), in {took:?}",
        st.names.iter().filter(|n| n.error.is_none()).count(),
        plan.allow4.len(),
        plan.allow6.len(),
        plan.github.len(),
        if st.github.enabled {
            st.github.source.name()
        } else {
            "off"
        },
    ));
}
