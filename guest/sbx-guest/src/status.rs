//! The start's outcome as a small JSON file the host can read (sbx-run
//! list/start) and `sbx-guest health` answers from; written atomically.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Starting,
    Ready,
    Unhealthy,
    Stopping,
    /// Stopped by the guest itself (`reason`: why, e.g. "idle"); the host
    /// reads it from the file once the container has ended.
    Stopped,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub state: State,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The exit status a failed start stands for (branch provisioning's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<i32>,
    /// With backups on, after a stop: whether the final sync completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_backup: Option<sbx_core::backup::FinalBackup>,
    pub since: String,
}

impl Status {
    pub fn new(state: State, reason: Option<String>, warnings: Vec<String>) -> Self {
        Self {
            state,
            reason,
            warnings,
            exit: None,
            final_backup: None,
            since: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        }
    }
}

/// Replace the status file (tmp + rename, 0644: the host user reads it).
pub fn write(path: &Path, st: &Status) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&tmp)?;
    let mut v = serde_json::to_vec(st).map_err(io::Error::other)?;
    v.push(b'\n');
    f.write_all(&v)?;
    std::fs::rename(&tmp, path)
}

pub fn read(path: &Path) -> io::Result<Status> {
    let text = std::fs::read_to_string(path)?;
    serde_json::from_str(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// (healthy, one line saying so and why).
pub fn health(path: &Path) -> (bool, String) {
    match read(path) {
        Ok(st) => match st.state {
            State::Ready if st.warnings.is_empty() => (true, "healthy".into()),
            State::Ready => (true, format!("healthy ({})", st.warnings.join("; "))),
            State::Starting => (false, "starting".into()),
            State::Stopping => (false, "stopping".into()),
            State::Stopped => (false, "stopped".into()),
            State::Unhealthy => (
                false,
                format!(
                    "unhealthy: {}",
                    st.reason.as_deref().unwrap_or("no reason given")
                ),
            ),
        },
        Err(e) => (
            false,
            format!("unhealthy: no status at {} ({e})", path.display()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_follows_the_file() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("status.json");
        assert!(!health(&p).0);
        write(
            &p,
            &Status::new(State::Unhealthy, Some("sbx-fw is missing".into()), vec![]),
        )
        .unwrap();
        assert_eq!(health(&p), (false, "unhealthy: sbx-fw is missing".into()));
        write(&p, &Status::new(State::Ready, None, vec!["offline".into()])).unwrap();
        assert_eq!(health(&p), (true, "healthy (offline)".into()));
        std::fs::write(&p, "{").unwrap();
        assert!(!health(&p).0);
    }
}
