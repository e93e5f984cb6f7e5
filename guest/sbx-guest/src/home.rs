//! The agent's home on its first start: a new home volume gets the newest
//! backup back. "New" is judged by a marker the guest writes after the
//! first successful start, not by emptiness (a new volume is never empty:
//! the engine copies the image's home into it, and what the image put there
//! stays wherever the snapshot has nothing of its own).

use std::path::{Path, PathBuf};

/// Where the marker lives in the home: in sbx-backup's state directory,
/// which is never backed up, so a restore cannot bring back a marker.
pub fn marker(home: &Path) -> PathBuf {
    home.join(".local/state/sbx-backup/sbx-guest-started")
}

/// Left when the store could not be reached at the home's first start:
/// the agent works in a home without its backup, so no later start may
/// restore over it (merge by hand), and backups stay paused, or the new
/// home's snapshots would rotate the restorable ones out.
pub fn unrestored(home: &Path) -> PathBuf {
    home.join(".local/state/sbx-backup/sbx-guest-unrestored")
}

/// Left beside the unrestored mark and kept after it: a home that never
/// reached the store (or only part of a restore) is not its prefix's
/// owner, so once the user deletes the mark (merged), the next start
/// makes it the owner (`sbx-backup adopt`, keeping its files) before
/// backups resume; else every pass is refused as a second home.
pub fn adopt_pending(home: &Path) -> PathBuf {
    home.join(".local/state/sbx-backup/sbx-guest-adopt")
}

/// Below this much free space the home counts as full: the agent's tools,
/// its CLI's transcripts and the backup's own state start to fail.
pub const LOW_SPACE: u64 = 1 << 20;

/// A warning for the status when the home's file system is (nearly) full.
pub fn space_warning(home: &Path, available: std::io::Result<u64>) -> Option<String> {
    match available {
        Ok(n) if n < LOW_SPACE => Some(format!(
            "the home volume is full ({} KiB free in {}): the agent's tools and backups will fail to write there",
            n / 1024,
            home.display()
        )),
        Ok(_) => None,
        Err(e) => Some(format!(
            "cannot tell the free space of {}: {e}",
            home.display()
        )),
    }
}

/// The home operations, all run as the agent user.
pub trait HomeOps {
    fn marker_exists(&self) -> bool;
    fn unrestored_exists(&self) -> bool;
    /// Writes the unrestored mark and `adopt_pending`.
    fn mark_unrestored(&mut self) -> Result<(), String>;
    fn adopt_pending_exists(&self) -> bool;
    /// Make this home its prefix's owner, keeping its files; clears
    /// `adopt_pending`.
    fn adopt(&mut self) -> Result<(), String>;
    /// Whether the store holds a snapshot.
    fn has_snapshot(&mut self) -> Result<bool, String>;
    fn restore(&mut self) -> Result<(), String>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// Used before: nothing to do.
    Known,
    /// New; restored from a snapshot, or nothing to restore. The marker is
    /// written once the command has started.
    New { restored: bool },
    /// The store was unreachable at the first start (now or before): the
    /// home is used as it is, never restored over, backups paused.
    Unrestored { why: String },
    /// Merged (its unrestored mark deleted) but not made the prefix's
    /// owner: backups stay paused, the next start tries again.
    NotAdopted { why: String },
}

/// Restore into a new home when backups are on. A failed restore (a pack
/// the store lost for a while, a network that dropped mid-way) leaves the
/// home as it is and marks it unrestored, like an unreachable store: the
/// agent starts and works in it, so a later start that restored with
/// `--force` would put the snapshot's versions over that work. Only when
/// even the mark cannot be written is it an error (no marker, no daemon).
///
/// An unrestored home gets the started marker too once the command runs
/// (the agent used it), and the mark is looked at first: deleting the
/// mark after a merge resumes backups, never a restore over the home.
pub fn prepare(ops: &mut dyn HomeOps, backup_on: bool) -> Result<Prepared, String> {
    if backup_on && ops.unrestored_exists() {
        return Ok(Prepared::Unrestored {
            why: "an earlier first start could not reach the store or restore from it".into(),
        });
    }
    if backup_on && ops.adopt_pending_exists() {
        return Ok(match ops.adopt() {
            Ok(()) => Prepared::Known,
            Err(why) => Prepared::NotAdopted { why },
        });
    }
    if ops.marker_exists() {
        return Ok(Prepared::Known);
    }
    if !backup_on {
        return Ok(Prepared::New { restored: false });
    }
    match ops.has_snapshot() {
        Ok(false) => return Ok(Prepared::New { restored: false }),
        Ok(true) => {}
        Err(e) => {
            ops.mark_unrestored()?;
            return Ok(Prepared::Unrestored { why: e });
        }
    }
    if let Err(e) = ops.restore() {
        ops.mark_unrestored().map_err(|m| format!("{e}; and {m}"))?;
        return Ok(Prepared::Unrestored {
            why: format!("the restore failed: {e}"),
        });
    }
    Ok(Prepared::New { restored: true })
}

/// The stop's final backup, judged by how the daemon ended (the status
/// file in the home is the agent's to write: only its time is shown).
/// `daemon`: the daemon was started at all (else backups were paused);
/// `end`: `Supervisor::stop_end("backup")`.
pub fn final_backup(
    daemon: bool,
    paused: Option<&str>,
    end: Option<Option<crate::init::Ended>>,
    grace: std::time::Duration,
    st: Option<sbx_core::backup::Status>,
) -> sbx_core::backup::FinalBackup {
    use crate::init::Ended;
    let secs = grace.as_secs();
    let why = if !daemon {
        Some(format!(
            "backups are paused: {}",
            paused.unwrap_or("the daemon did not start")
        ))
    } else {
        match end {
            Some(Some(Ended::Code(0))) => None,
            None => Some("the backup daemon was not running at the stop".into()),
            Some(None) => Some(format!("still syncing at the stop's deadline ({secs} s)")),
            Some(Some(Ended::Signal(9))) => Some(format!("cut at the stop's deadline ({secs} s)")),
            Some(Some(Ended::Signal(n))) => Some(format!("the daemon ended by signal {n}")),
            Some(Some(Ended::Code(c))) => {
                Some(match st.as_ref().and_then(|s| s.last_error.as_deref()) {
                    Some(e) => format!("the last sync failed: {}", first_line(e)),
                    None => format!("the daemon exited with {c}"),
                })
            }
        }
    };
    sbx_core::backup::FinalBackup {
        done: why.is_none(),
        last_ok: st.and_then(|s| s.last_ok).map(|t| first_line(&t)),
        why,
    }
}

/// The agent writes the status file: one short line of it, no more.
fn first_line(s: &str) -> String {
    let l = s.lines().next().unwrap_or("");
    let l: String = l.chars().filter(|c| !c.is_control()).take(300).collect();
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Fake {
        marker: bool,
        snapshot: Option<bool>,
        restore_fails: bool,
        unrestored: bool,
        adopt_pending: bool,
        adopt_fails: bool,
        calls: Vec<&'static str>,
    }

    impl HomeOps for Fake {
        fn marker_exists(&self) -> bool {
            self.marker
        }
        fn unrestored_exists(&self) -> bool {
            self.unrestored
        }
        fn mark_unrestored(&mut self) -> Result<(), String> {
            self.calls.push("mark-unrestored");
            self.unrestored = true;
            self.adopt_pending = true;
            Ok(())
        }
        fn adopt_pending_exists(&self) -> bool {
            self.adopt_pending
        }
        fn adopt(&mut self) -> Result<(), String> {
            self.calls.push("adopt");
            if self.adopt_fails {
                return Err("store unreachable".into());
            }
            self.adopt_pending = false;
            Ok(())
        }
        fn has_snapshot(&mut self) -> Result<bool, String> {
            self.calls.push("snapshots");
            self.snapshot.ok_or_else(|| "store unreachable".to_owned())
        }
        fn restore(&mut self) -> Result<(), String> {
            self.calls.push("restore");
            if self.restore_fails {
                Err("disk full".into())
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn restores_only_a_new_home_with_backups_on_and_a_snapshot() {
        let mut f = Fake {
            snapshot: Some(true),
            ..Default::default()
        };
        assert_eq!(prepare(&mut f, true), Ok(Prepared::New { restored: true }));
        assert_eq!(f.calls, ["snapshots", "restore"]);

        let mut f = Fake {
            marker: true,
            snapshot: Some(true),
            ..Default::default()
        };
        assert_eq!(prepare(&mut f, true), Ok(Prepared::Known));
        assert!(f.calls.is_empty(), "a used home is never restored over");

        let mut f = Fake {
            snapshot: Some(true),
            ..Default::default()
        };
        assert_eq!(
            prepare(&mut f, false),
            Ok(Prepared::New { restored: false })
        );
        assert!(f.calls.is_empty());

        let mut f = Fake {
            snapshot: Some(false),
            ..Default::default()
        };
        assert_eq!(prepare(&mut f, true), Ok(Prepared::New { restored: false }));
        assert_eq!(f.calls, ["snapshots"]);
    }

    #[test]
    fn a_full_home_is_a_warning_that_names_it() {
        let h = Path::new("/home/agent");
        assert_eq!(space_warning(h, Ok(LOW_SPACE)), None);
        let w = space_warning(h, Ok(4096)).unwrap();
        assert!(w.contains("full (4 KiB free in /home/agent)"), "{w}");
        let e = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert!(space_warning(h, Err(e)).unwrap().contains("/home/agent"));
    }

    /// A restore that fails part-way (fresh eyes on issue 47): the agent
    /// starts in that home and works; the next start, with the store whole
    /// again, must not restore `--force` over that work.
    #[test]
    fn a_failed_restore_never_leads_to_a_restore_over_the_agents_work() {
        let mut f = Fake {
            snapshot: Some(true),
            restore_fails: true,
            ..Default::default()
        };
        assert!(matches!(
            prepare(&mut f, true),
            Ok(Prepared::Unrestored { why }) if why.contains("disk full")
        ));
        assert_eq!(f.calls, ["snapshots", "restore", "mark-unrestored"]);
        f.restore_fails = false;
        f.calls.clear();
        assert!(matches!(
            prepare(&mut f, true),
            Ok(Prepared::Unrestored { .. })
        ));
        assert!(!f.calls.contains(&"restore"), "{:?}", f.calls);
    }

    /// Issue 47 route 9: a store unreachable at the first start marks the
    /// home unrestored; no later start restores over the agent's work.
    #[test]
    fn an_unreachable_store_never_leads_to_a_restore_over_the_agents_work() {
        let mut f = Fake {
            snapshot: None,
            ..Default::default()
        };
        assert!(matches!(
            prepare(&mut f, true),
            Ok(Prepared::Unrestored { why }) if why.contains("unreachable")
        ));
        assert_eq!(f.calls, ["snapshots", "mark-unrestored"]);
        // The next start: the store is back, the agent has worked since.
        f.snapshot = Some(true);
        f.calls.clear();
        assert!(matches!(
            prepare(&mut f, true),
            Ok(Prepared::Unrestored { .. })
        ));
        assert!(!f.calls.contains(&"restore"), "{:?}", f.calls);
    }

    /// The unrestored home was used (the agent started); the user merges
    /// and deletes the mark. No start after that restores over the home.
    #[test]
    fn a_merged_home_is_known_once_its_mark_is_gone() {
        let mut f = Fake {
            snapshot: None,
            ..Default::default()
        };
        assert!(matches!(
            prepare(&mut f, true),
            Ok(Prepared::Unrestored { .. })
        ));
        // The guest writes the started marker once the command runs.
        f.marker = true;
        f.snapshot = Some(true);
        assert!(matches!(
            prepare(&mut f, true),
            Ok(Prepared::Unrestored { .. })
        ));
        f.unrestored = false;
        f.calls.clear();
        // It never reached the store: made the prefix's owner once, so
        // its backups are not refused as a second home's.
        f.adopt_fails = true;
        assert!(matches!(
            prepare(&mut f, true),
            Ok(Prepared::NotAdopted { .. })
        ));
        f.adopt_fails = false;
        assert_eq!(prepare(&mut f, true), Ok(Prepared::Known));
        assert_eq!(f.calls, ["adopt", "adopt"]);
        f.calls.clear();
        assert_eq!(prepare(&mut f, true), Ok(Prepared::Known));
        assert!(f.calls.is_empty(), "{:?}", f.calls);
    }

    /// Issue 43: only a daemon that ended 0 after the stop's TERM made the
    /// final backup; every other end says why.
    #[test]
    fn the_final_backup_is_done_only_when_the_daemon_ended_well() {
        use crate::init::Ended;
        use std::time::Duration;
        let g = Duration::from_secs(25);
        let st = || {
            Some(sbx_core::backup::Status {
                last_ok: Some("2026-01-01T00:00:00Z".into()),
                last_error: Some("store down\nmore".into()),
                ..Default::default()
            })
        };
        let f = final_backup(true, None, Some(Some(Ended::Code(0))), g, st());
        assert!(f.done && f.why.is_none());
        for (end, want) in [
            (
                Some(Some(Ended::Signal(9))),
                "cut at the stop's deadline (25 s)",
            ),
            (Some(None), "still syncing at the stop's deadline (25 s)"),
            (None, "the backup daemon was not running at the stop"),
            (
                Some(Some(Ended::Code(69))),
                "the last sync failed: store down",
            ),
            (
                Some(Some(Ended::Signal(15))),
                "the daemon ended by signal 15",
            ),
        ] {
            let f = final_backup(true, None, end, g, st());
            assert!(!f.done, "{end:?}");
            assert_eq!(f.why.as_deref(), Some(want));
            assert_eq!(f.last_ok.as_deref(), Some("2026-01-01T00:00:00Z"));
        }
        let f = final_backup(false, Some("home not restored"), None, g, None);
        assert!(!f.done);
        assert_eq!(
            f.why.as_deref(),
            Some("backups are paused: home not restored")
        );
        assert_eq!(f.last_ok, None);
    }
}
