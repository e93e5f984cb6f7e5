//! The time, behind a trait so tests can fix it.

use std::time::SystemTime;

pub trait Clock: Send + Sync {
    fn now(&self) -> SystemTime;

    /// Now as RFC 3339 in whole seconds, as the state file records it.
    fn stamp(&self) -> String {
        humantime::format_rfc3339_seconds(self.now()).to_string()
    }
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}
