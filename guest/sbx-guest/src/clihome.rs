//! Claude Code's own files in the agent's home, held read-only while a
//! `[tools]` policy is in force (a38).
//!
//! The CLI runs what these hold without asking its PreToolUse hook: the
//! user settings' `env` (`BASH_FUNC_echo%%`, `PATH`), `statusLine` and
//! helper commands, `~/.claude.json`'s MCP servers, the session's shell
//! snapshot and `session-env` files it sources before every Bash command,
//! the subagents, skills, commands and plugins it loads. The checker
//! refuses the file tools there, but a Bash rule is text: an allowed `cp`,
//! `tee`, `sed -i`, `dd` or `python3 -c` wrote them, and the next Bash call
//! ran what the checker never saw. So each is bound read-only onto itself
//! before the agent starts: a mount point can be neither written, renamed
//! nor removed, whatever program tries. Claude Code 2.1.332 runs without
//! them: no snapshot (the Bash tool then runs a login shell, whose startup
//! files rcfiles.rs holds), its state in `~/.claude.json` not saved
//! ("continuing without persisting").

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::fcntl::OFlag;
use sbx_sys::beneath::{Dir, Kind};

/// Files, made (as the agent, holding `{}`) when missing.
pub const FILES: &[&str] = &[
    ".claude.json",
    ".claude/settings.json",
    ".claude/settings.local.json",
];

/// Directories, made (as the agent) when missing: the names Claude Code's
/// own sandbox keeps its Bash tool from writing in its config directory.
pub const DIRS: &[&str] = &[
    ".claude/shell-snapshots",
    ".claude/session-env",
    ".claude/agents",
    ".claude/skills",
    ".claude/commands",
    ".claude/plugins",
    ".claude/hooks",
    ".claude/workflows",
    ".claude/routines",
    ".claude/rules",
    ".claude/output-styles",
];

/// Hold every one of them in `home`, the agent's (`uid`, `gid`): a missing
/// one is made as the agent, one of the wrong kind (a link, a file where a
/// directory belongs) is renamed aside first, then `hold` binds it
/// read-only onto itself. Returns what failed.
pub fn hold_all(
    home: &Path,
    uid: u32,
    gid: u32,
    hold: &mut (dyn FnMut(&OwnedFd) -> std::io::Result<()> + Send),
) -> Vec<String> {
    let Ok(top) = Dir::open(home) else {
        return vec![format!("{}: cannot be opened", home.display())];
    };
    // A thread of its own: the fsuid switch must touch no other.
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut errs = Vec::new();
            let wanted = FILES
                .iter()
                .map(|p| (p, Kind::File))
                .chain(DIRS.iter().map(|p| (p, Kind::Dir)));
            for (rel, want) in wanted {
                let rel = Path::new(rel);
                let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
                    continue;
                };
                let fd = {
                    let _as = crate::api::FsId::set(uid, gid);
                    top.walk(parent, Some(0o755))
                        .and_then(|d| make(&d, name, want))
                };
                if let Err(e) = fd.and_then(|fd| hold(&fd)) {
                    errs.push(format!("{}: {e}", home.join(rel).display()));
                }
            }
            errs
        })
        .join()
        .unwrap_or_else(|_| vec!["the holding thread panicked".into()])
    })
}

/// `name` in `dir` as `want`, opened O_PATH without following a link.
fn make(dir: &Dir, name: &OsStr, want: Kind) -> std::io::Result<OwnedFd> {
    let have = dir.kind(name)?;
    if have.is_some_and(|k| k != want) {
        let aside = format!(
            "{}.sbx-moved-{}",
            name.to_string_lossy(),
            sbx_sys::beneath::tmp_name()
        );
        nix::fcntl::renameat(dir.as_fd(), name, dir.as_fd(), aside.as_str())
            .map_err(std::io::Error::from)?;
    }
    if have != Some(want) {
        if want == Kind::Dir {
            dir.ensure_dir(name, 0o755)?;
        } else {
            use std::io::Write;
            dir.create_new(name, 0o600)?.write_all(b"{}\n")?;
        }
    }
    let fd = nix::fcntl::openat(
        dir.as_fd(),
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(std::io::Error::from)?;
    if sbx_sys::beneath::kind(&fd)? != want {
        return Err(std::io::Error::other("changed while being held"));
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_is_made_of_its_kind_and_links_are_moved_aside() {
        let t = tempfile::tempdir().unwrap();
        let h = t.path();
        std::fs::create_dir_all(h.join(".claude")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", h.join(".claude.json")).unwrap();
        std::fs::write(h.join(".claude/shell-snapshots"), "x").unwrap();
        std::fs::write(h.join(".claude/settings.json"), "{\"model\": \"m\"}").unwrap();
        let me = nix::unistd::getuid().as_raw();
        let mut n = 0;
        let errs = hold_all(h, me, nix::unistd::getgid().as_raw(), &mut |fd| {
            n += 1;
            assert!(sbx_sys::beneath::kind(fd).is_ok());
            Ok(())
        });
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(n, FILES.len() + DIRS.len());
        for f in FILES {
            assert!(
                std::fs::symlink_metadata(h.join(f)).unwrap().is_file(),
                "{f}"
            );
        }
        for d in DIRS {
            assert!(
                std::fs::symlink_metadata(h.join(d)).unwrap().is_dir(),
                "{d}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(h.join(".claude/settings.json")).unwrap(),
            "{\"model\": \"m\"}"
        );
        assert_eq!(
            std::fs::read_to_string(h.join(".claude.json")).unwrap(),
            "{}\n"
        );
        let names: Vec<String> = std::fs::read_dir(h.join(".claude"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names
                .iter()
                .any(|n| n.starts_with("shell-snapshots.sbx-moved-")),
            "{names:?}"
        );
    }
}
