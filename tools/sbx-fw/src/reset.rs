//! `sbx-fw reset --yes`: the firewall removed entirely, on purpose and
//! audited; the sandbox can then reach any host.

use std::path::Path;

use sbx_core::audit::{self, Outcome, Record};
use sbx_core::error::IoContext;
use sbx_core::output;

use crate::error::FwError;
use crate::netfilter::Netfilter;
use crate::resolv::{self, RESOLV_CONF};
use crate::state::{self, State};
use crate::{TOOL, daemons, plan};

pub fn reset(nf: &dyn Netfilter, dir: &Path) -> Result<(), FwError> {
    for fam in nf.families() {
        nf.tables_restore(fam, &plan::open_all())?;
    }
    let destroy: String = plan::SETS
        .iter()
        .map(|s| format!("destroy {s}\n"))
        .collect();
    // Sets still referenced by a rule elsewhere stay; they block nothing.
    let _ = nf.ipset_restore(&destroy);
    daemons::leave_proxy_mode(nf, dir)?;
    daemons::stop(dir, "dns");
    if let Ok(Some(st)) = State::load(dir)
        && let Some(orig) = st.resolv_conf_original
        && std::fs::read_to_string(RESOLV_CONF).is_ok_and(|t| resolv::is_ours(&t))
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
    Ok(())
}
