//! Refusals in the audit log, few enough that a loop cannot fill the disk.

use std::collections::HashSet;
use std::time::Instant;

use sbx_core::audit::{Outcome, Record};

use super::filter::Filter;
use super::{AUDIT_EVERY, AUDIT_NAMES, AUDIT_RATE};

/// What keeps refusal records few: per name and reason once a period,
/// and at most [`AUDIT_RATE`] a second in all.
pub(super) struct AuditBudget {
    new: HashSet<String>,
    old: HashSet<String>,
    since: Instant,
    /// (generation, second within it) the count below is for.
    window: (Instant, u64),
    in_window: u32,
    suppressed: u64,
    summary_at: Option<Instant>,
}

impl AuditBudget {
    pub(super) fn new() -> Self {
        Self {
            new: HashSet::new(),
            old: HashSet::new(),
            since: Instant::now(),
            window: (Instant::now(), 0),
            in_window: 0,
            suppressed: 0,
            summary_at: None,
        }
    }
}

impl Filter {
    pub(super) fn audit_refusal(&self, name: &str, why: &str) {
        let mut a = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        // Two generations, swapped each period: a lookup sees the last
        // minute or two, and nothing is ever scanned whole.
        if now.duration_since(a.since) >= AUDIT_EVERY {
            a.old = std::mem::take(&mut a.new);
            a.since = now;
        }
        let key = format!("{name} {why}");
        if a.new.contains(&key) || a.old.contains(&key) {
            return;
        }
        if a.new.len() < AUDIT_NAMES {
            a.new.insert(key);
        }
        // The global budget: AUDIT_RATE records a second, the rest counted.
        let secs = now.duration_since(a.since).as_secs();
        if a.window != (a.since, secs) {
            a.window = (a.since, secs);
            a.in_window = 0;
        }
        if a.in_window >= AUDIT_RATE {
            a.suppressed += 1;
            return;
        }
        a.in_window += 1;
        drop(a);
        self.audit.append(
            &Record::new("sbx-fw", "dns", name, Outcome::Blocked, "dns-filter").reason(
                if why == "not on the allowlist" {
                    "name is not on the allowlist"
                } else {
                    why
                },
            ),
        );
    }

    /// One record a minute for the refusals the budget left out.
    pub(super) fn audit_summary(&self) {
        let mut a = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if a.suppressed == 0
            || a.summary_at
                .is_some_and(|t| now.duration_since(t) < AUDIT_EVERY)
        {
            return;
        }
        let n = std::mem::take(&mut a.suppressed);
        a.summary_at = Some(now);
        drop(a);
        self.audit.append(
            &Record::new(
                "sbx-fw",
                "dns",
                "(refusals over the audit budget)",
                Outcome::Blocked,
                "dns-filter",
            )
            .reason(&format!("{n} more refused queries not logged one by one")),
        );
    }
}
