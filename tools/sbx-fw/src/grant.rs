//! `sbx-fw grant`: a refused name opened while the sandbox runs, until a
//! time. Only the state file changes: the DNS filter and the proxy read
//! grants from it and compare their times per query and per connection,
//! so an expired grant refuses with nothing left to undo, and no
//! capability is needed (the guest has dropped NET_ADMIN by then).

use std::io::Write;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use sbx_core::Exit;
use sbx_core::audit::{self, Outcome, Record};
use sbx_core::cli::CommonArgs;
use sbx_core::error::IoContext;
use sbx_core::output;

use crate::TOOL;
use crate::cli::GrantArgs;
use crate::error::FwError;
use crate::runtime::{load_state, parse_domains};
use crate::state::{self, Grant, unix_now};

/// Longer than this is an allowlist entry's job (`[network] allow-domains`).
pub const MAX_GRANT: Duration = Duration::from_secs(7 * 24 * 3600);

pub fn run(common: &CommonArgs, a: &GrantArgs, dir: &Path) -> Result<Exit, FwError> {
    // Why root and not the caller's word: the agent reaches sbx-fw too,
    // and a grant is the user's decision. The state file is root's as
    // well; this says so first, and audits the attempt.
    if !nix::unistd::geteuid().is_root() {
        audit::append(
            &Record::new(
                TOOL,
                "grant",
                &a.domains.join(" "),
                Outcome::Blocked,
                "grant",
            )
            .reason("only the sandbox's root may open names"),
        );
        return Err(FwError::NotRoot { op: "grant" });
    }
    if a.list {
        return list(common, dir);
    }
    let domains = parse_domains(&a.domains)?;
    if a.revoke {
        return revoke(dir, &domains);
    }
    if a.duration.0 > MAX_GRANT {
        return Err(FwError::BadGrant(format!(
            "--for {}: at most 7d; a name needed longer belongs in [network] allow-domains",
            humantime::format_duration(a.duration.0)
        )));
    }
    let held = state::lock(dir).with_path(dir.join("policy.lock"))?;
    let mut st = load_state(dir)?;
    let now = unix_now();
    let until = now + a.duration.0.as_secs();
    st.grants.retain(|g| g.live(now));
    for d in &domains {
        st.grants.retain(|g| g.entry != *d);
        st.grants.push(Grant {
            entry: d.clone(),
            until,
            by: a.by.clone(),
        });
    }
    st.store(dir).with_path(state::path(dir))?;
    drop(held);
    for d in &domains {
        audit::append(
            &Record::new(TOOL, "grant", &d.to_string(), Outcome::Allowed, "grant").reason(
                &format!(
                    "opened for {} by {} (until {})",
                    humantime::format_duration(a.duration.0),
                    a.by,
                    stamp(until)
                ),
            ),
        );
    }
    Ok(Exit::Ok)
}

/// End grants now. Exit 1 when a name had none (nothing changed for it).
fn revoke(dir: &Path, domains: &[sbx_core::config::Domain]) -> Result<Exit, FwError> {
    let held = state::lock(dir).with_path(dir.join("policy.lock"))?;
    let mut st = load_state(dir)?;
    let now = unix_now();
    let mut missing = Vec::new();
    for d in domains {
        let before = st.grants.len();
        st.grants.retain(|g| g.entry != *d);
        if st.grants.len() == before {
            missing.push(d.to_string());
        }
    }
    st.grants.retain(|g| g.live(now));
    st.store(dir).with_path(state::path(dir))?;
    drop(held);
    for d in domains {
        let s = d.to_string();
        if !missing.contains(&s) {
            audit::append(
                &Record::new(TOOL, "revoke", &s, Outcome::Blocked, "grant")
                    .reason("grant ended by the user"),
            );
        }
    }
    if missing.is_empty() {
        Ok(Exit::Ok)
    } else {
        output::warn(&format!("no grant in force for {}", missing.join(", ")));
        Ok(Exit::No)
    }
}

fn list(common: &CommonArgs, dir: &Path) -> Result<Exit, FwError> {
    let st = load_state(dir)?;
    let now = unix_now();
    let mut out = std::io::stdout().lock();
    for g in st.grants.iter().filter(|g| g.live(now)) {
        if common.json {
            let v = serde_json::json!({
                "name": g.entry.to_string(),
                "until": stamp(g.until),
                "seconds_left": g.until - now,
                "by": g.by,
            });
            output::json_line(&mut out, "grant", &v).with_path("stdout")?;
        } else {
            writeln!(
                out,
                "{}\tuntil {}\t({} left, by {})",
                g.entry,
                stamp(g.until),
                humantime::format_duration(Duration::from_secs(g.until - now)),
                g.by
            )
            .with_path("stdout")?;
        }
    }
    Ok(Exit::Ok)
}

fn stamp(secs: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs)).to_string()
}

/// `sbx-fw secret NAME [--failed REASON]`: a renewed value (stdin) or a
/// failed renewal for the running proxy. Root only, like a grant: the
/// host's `sbx-run` runs it through the guest.
pub fn secret(a: &crate::cli::SecretArgs) -> Result<(), FwError> {
    use crate::proxy::inject;
    use std::io::Read;
    if !nix::unistd::geteuid().is_root() {
        audit::append(
            &Record::new(TOOL, "secret", &a.name, Outcome::Blocked, "secrets")
                .reason("only the sandbox's root may renew secrets"),
        );
        return Err(FwError::SecretNotRoot);
    }
    let value = match &a.failed {
        Some(_) => None,
        None => {
            let mut v = String::new();
            std::io::stdin()
                .take(64 * 1024)
                .read_to_string(&mut v)
                .map_err(|e| FwError::Secret(format!("secret {}: stdin: {e}", a.name)))?;
            Some(v.trim_end_matches(['\r', '\n']).to_owned())
        }
    };
    let u = inject::Update {
        name: a.name.clone(),
        value,
        failed: a.failed.clone(),
    };
    let dir = inject::dir();
    inject::store(&dir, &u).with_path(dir.join(inject::BINDINGS))?;
    let sent = inject::send(&dir, &u).with_path(dir.join(inject::CONTROL))?;
    sent.map_err(|why| FwError::Secret(format!("secret {}: the proxy refused it: {why}", a.name)))
}
