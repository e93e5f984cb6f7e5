//! The audit log: one JSON object per line, appended with a single
//! `write(2)` on an `O_APPEND` descriptor so records from concurrent
//! processes never interleave. Kept apart from diagnostics on stderr.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde::Serialize;

/// Inside a sandbox this marker exists and the log path is fixed, so the
/// agent cannot point `SBX_AUDIT_LOG` at /dev/null.
pub const SANDBOX_MARKER: &str = "/.agent-sandbox";
pub const SANDBOX_LOG: &str = "/var/log/sbx/audit.jsonl";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Allowed,
    Blocked,
    /// Let through by an explicit exception (e.g. `pass`), worth knowing.
    Passed,
}

/// One decision. Field order is the documented order of DESIGN.md §6.
#[derive(Debug, Clone, Serialize)]
pub struct Record<'a> {
    pub timestamp: String,
    pub tool: &'a str,
    pub agent: String,
    pub operation: &'a str,
    pub target: &'a str,
    pub result: Outcome,
    pub policy: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
}

impl<'a> Record<'a> {
    pub fn new(
        tool: &'a str,
        operation: &'a str,
        target: &'a str,
        result: Outcome,
        policy: &'a str,
    ) -> Self {
        Self {
            timestamp: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            tool,
            agent: agent().to_owned(),
            operation,
            target,
            result,
            policy,
            reason: None,
        }
    }

    pub fn reason(mut self, reason: &'a str) -> Self {
        self.reason = Some(reason);
        self
    }

    /// The record as one line, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).expect("audit records always serialize");
        v.push(b'\n');
        v
    }
}

/// The agent's name from `SBX_AGENT` (set by sbx-run), read once: a
/// lookup per record would scan a large environment again each time.
fn agent() -> &'static str {
    static AGENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    AGENT.get_or_init(|| std::env::var("SBX_AGENT").unwrap_or_else(|_| "unknown".into()))
}

/// Where records go: fixed inside a sandbox; else `$SBX_AUDIT_LOG`, else
/// `$XDG_STATE_HOME/sbx/audit.jsonl` (or `~/.local/state/sbx/audit.jsonl`).
pub fn default_path() -> PathBuf {
    if Path::new(SANDBOX_MARKER).exists() {
        return PathBuf::from(SANDBOX_LOG);
    }
    if let Some(p) = std::env::var_os("SBX_AUDIT_LOG").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    state.join("sbx/audit.jsonl")
}

/// An open audit log.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    file: File,
}

impl AuditLog {
    pub fn open(path: &Path) -> io::Result<Self> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)?;
            }
        }
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
        Ok(Self {
            path: path.to_owned(),
            file,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one record with exactly one `write` call.
    pub fn append(&self, record: &Record<'_>) -> io::Result<()> {
        let line = record.to_line();
        let n = (&self.file).write(&line)?;
        if n != line.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write to the audit log ({n} of {} bytes)", line.len()),
            ));
        }
        Ok(())
    }
}

/// A process-wide log opened on first use; a failure to open or write is a
/// warning, reported once, and never blocks the decision being logged.
#[derive(Debug, Default)]
pub struct Lazy {
    inner: Mutex<Option<Result<AuditLog, ()>>>,
}

impl Lazy {
    pub const fn new() -> Self {
        Self {
            inner: Mutex::new(None),
        }
    }

    pub fn append(&self, record: &Record<'_>) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let slot = g.get_or_insert_with(|| {
            let path = default_path();
            AuditLog::open(&path).map_err(|e| {
                crate::output::warn(&format!(
                    "audit log {}: {e}; decisions are not being logged",
                    path.display()
                ));
            })
        });
        if let Ok(log) = slot {
            if let Err(e) = log.append(record) {
                crate::output::warn(&format!("audit log {}: {e}", log.path().display()));
            }
        }
    }
}

pub static LOG: Lazy = Lazy::new();

/// Append to the process-wide log.
pub fn append(record: &Record<'_>) {
    LOG.append(record);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_shape_matches_the_design() {
        let mut r = Record::new(
            "sbx-git-guard",
            "commit",
            "git commit --no-verify",
            Outcome::Blocked,
            "block-no-verify",
        )
        .reason("--no-verify skips the pre-commit hook");
        r.timestamp = "2026-01-28T10:30:05Z".into();
        r.agent = "claude".into();
        let line = String::from_utf8(r.to_line()).unwrap();
        assert_eq!(
            line,
            "{\"timestamp\":\"2026-01-28T10:30:05Z\",\"tool\":\"sbx-git-guard\",\"agent\":\"claude\",\"operation\":\"commit\",\"target\":\"git commit --no-verify\",\"result\":\"blocked\",\"policy\":\"block-no-verify\",\"reason\":\"--no-verify skips the pre-commit hook\"}\n"
        );
    }

    #[test]
    fn appends_and_creates_parent() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("a/b/audit.jsonl");
        let log = AuditLog::open(&p).unwrap();
        log.append(&Record::new("t", "op", "x", Outcome::Allowed, "p"))
            .unwrap();
        log.append(&Record::new("t", "op", "y", Outcome::Blocked, "p"))
            .unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 2);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
