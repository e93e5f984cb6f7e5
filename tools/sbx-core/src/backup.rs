//! sbx-backup's status file and the stop's record of its final sync.
//!
//! The status file lives in the home (the agent can write it): it is read
//! as bounded data, for a time to show, never to decide that a backup
//! completed. That comes from how the daemon's process ended.

use serde::{Deserialize, Serialize};

/// sbx-backup's state directory, relative to the home (never backed up).
pub const STATE_DIR: &str = ".local/state/sbx-backup";

/// The status file in the state directory.
pub const STATUS_FILE: &str = "status.json";

/// Larger than this is no status sbx-backup wrote.
pub const STATUS_MAX: u64 = 64 << 10;

/// What the daemon and `sbx-backup sync` record after each pass.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub last_ok: Option<String>,
    pub last_ok_unix: Option<u64>,
    pub last_snapshot: Option<String>,
    pub last_error: Option<String>,
    pub last_attempt: Option<String>,
    pub files: u64,
    pub bytes: u64,
}

impl Status {
    pub fn parse(bytes: &[u8]) -> Option<Status> {
        serde_json::from_slice(bytes).ok()
    }
}

/// The stop's final backup as the guest saw it end, kept in the guest's
/// status.json (`final_backup`) for `sbx-run stop` and `rm --volumes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalBackup {
    /// The daemon's final sync ended on its own with success.
    pub done: bool,
    /// The newest completed backup (RFC 3339), as sbx-backup recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ok: Option<String>,
    /// Why it did not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl FinalBackup {
    /// One line for the user when the final backup did not complete.
    pub fn line(&self, volume: &str) -> Option<String> {
        if self.done {
            return None;
        }
        let since = match &self.last_ok {
            Some(t) => format!("since {t}"),
            None => "ever".into(),
        };
        Some(format!(
            "the final backup did not complete ({}): what changed in the home {since} is in no backup; \
             the home volume {volume} still has it (start the sandbox again to back it up)",
            self.why.as_deref().unwrap_or("no reason given")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_incomplete_final_backup_names_since_when_and_the_volume() {
        let f = FinalBackup {
            done: false,
            last_ok: Some("2026-01-01T00:00:00Z".into()),
            why: Some("cut at the stop's deadline (25 s)".into()),
        };
        let l = f.line("agent-sandbox-x-home").unwrap();
        assert!(l.contains("(cut at the stop's deadline (25 s))"), "{l}");
        assert!(l.contains("since 2026-01-01T00:00:00Z"), "{l}");
        assert!(l.contains("agent-sandbox-x-home still has it"), "{l}");
        let never = FinalBackup {
            last_ok: None,
            ..f.clone()
        };
        assert!(never.line("v").unwrap().contains("home ever is"));
        let done = FinalBackup { done: true, ..f };
        assert_eq!(done.line("v"), None);
        assert_eq!(Status::parse(b"{"), None);
        assert_eq!(
            Status::parse(br#"{"last_ok":"t","files":1,"bytes":2}"#).map(|s| s.last_ok),
            Some(Some("t".into()))
        );
    }
}
