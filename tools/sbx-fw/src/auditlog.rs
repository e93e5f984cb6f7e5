//! The audit log behind a trait, so tests can see what a fail-closed path
//! recorded without writing to the user's log.

use sbx_core::audit::{self, Record};

pub trait AuditSink: Send + Sync {
    fn append(&self, record: &Record<'_>);
}

/// The project's audit log (`sbx_core::audit`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Log;

impl AuditSink for Log {
    fn append(&self, record: &Record<'_>) {
        audit::append(record);
    }
}
