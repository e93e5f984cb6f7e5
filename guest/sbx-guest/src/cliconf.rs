//! An AI CLI's project configuration below the workspace's top (a38z).
//!
//! Claude Code started in a directory reads `.claude/` (settings with
//! hooks, agents, commands, skills) and `.mcp.json` (MCP servers) there,
//! codex reads `.codex/`; the user's own CLI on the host runs what they
//! hold. sbx-run binds the top-level ones read-only; below the top, the
//! agent wrote `web/.claude/settings.json` with a SessionStart hook and
//! `web/.mcp.json`, which the user's Claude Code started in `web/` ran.
//! So the user's own ones below the top are bound read-only onto
//! themselves when the watch starts, and one the agent makes (written,
//! made in a new directory, renamed into place) is renamed aside, to a
//! name no CLI reads.

use std::path::{Path, PathBuf};

/// Directory names a CLI reads its project configuration from.
const DIRS: [&str; 2] = [".claude", ".codex"];
/// File names likewise.
const FILES: [&str; 1] = [".mcp.json"];
/// A walk stops after this many entries (a new tree, the start's scan).
const MAX_WALK: usize = 200_000;

/// The part of `rel` (workspace-relative) that is a CLI's configuration
/// below the top: `web/.claude` for `web/.claude/settings.json`. `.git`
/// is not looked in, and the top-level ones are sbx-run's mounts.
pub fn below_top(rel: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for (i, c) in rel.components().enumerate() {
        let n = c.as_os_str();
        if i == 0 && n == ".git" {
            return None;
        }
        out.push(n);
        if i > 0 && (DIRS.iter().any(|d| n == *d) || FILES.iter().any(|f| n == *f)) {
            return Some(out);
        }
    }
    None
}

/// Every such path under `dir` (workspace-relative to `root`), links not
/// followed, `.git` and what a match holds not walked.
pub fn under(root: &Path, dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0usize;
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            seen += 1;
            if seen > MAX_WALK {
                return out;
            }
            let p = e.path();
            let Ok(rel) = p.strip_prefix(root) else {
                continue;
            };
            if below_top(rel).is_some_and(|m| m == rel) {
                out.push(p);
            } else if e.file_type().is_ok_and(|t| t.is_dir()) && rel != Path::new(".git") {
                stack.push(p);
            }
        }
    }
    out
}

/// A thread that walks each directory sent to it now, 100 ms and 1 s
/// later, refusing what it finds: a new directory's recursive watch
/// comes after its first entries (`mv` from another filesystem makes
/// `deep/.codex` and its file before the watch on `deep` is up). One
/// thread, whatever the number of new directories.
pub fn rewalker(root: PathBuf, uid: u32, gid: u32) -> std::sync::mpsc::Sender<PathBuf> {
    use std::time::{Duration, Instant};
    let (tx, rx) = std::sync::mpsc::channel::<PathBuf>();
    std::thread::spawn(move || {
        let mut due: std::collections::VecDeque<(Instant, PathBuf, u8)> = Default::default();
        loop {
            let wait = due
                .front()
                .map(|(t, _, _)| t.saturating_duration_since(Instant::now()));
            let got = match wait {
                Some(w) => rx
                    .recv_timeout(w)
                    .map_err(|e| matches!(e, std::sync::mpsc::RecvTimeoutError::Disconnected)),
                None => rx.recv().map_err(|_| true),
            };
            match got {
                Ok(dir) => due.push_back((Instant::now(), dir, 0)),
                Err(true) => return,
                Err(false) => {}
            }
            while due.front().is_some_and(|(t, _, _)| *t <= Instant::now()) {
                let Some((_, dir, stage)) = due.pop_front() else {
                    break;
                };
                for q in under(&root, &dir) {
                    if let Some(what) = refuse(&root, &q, uid, gid) {
                        eprintln!("sbx-guest: {what}");
                    }
                }
                let next = match stage {
                    0 => Some(Duration::from_millis(100)),
                    1 => Some(Duration::from_millis(900)),
                    _ => None,
                };
                if let Some(n) = next {
                    // Kept in time order, the next due in front.
                    due.push_back((Instant::now() + n, dir, stage + 1));
                    due.make_contiguous().sort_by_key(|(t, _, _)| *t);
                }
            }
        }
    });
    tx
}

/// Bind each of the user's own (there when the watch starts) read-only
/// onto itself. Returns what failed.
pub fn hold_existing(root: &Path) -> Vec<String> {
    let Ok(r) = sbx_sys::beneath::Root::open(root) else {
        return vec![format!("{}: cannot be opened", root.display())];
    };
    let mut errs = Vec::new();
    for p in under(root, root) {
        let Ok(rel) = p.strip_prefix(root) else {
            continue;
        };
        if sbx_sys::on_readonly_mount(&p) {
            continue;
        }
        let r = r
            .open_mount_source(rel)
            .and_then(|(fd, _)| sbx_sys::idmap::bind_onto_itself_readonly(&fd));
        if let Err(e) = r {
            errs.push(format!("{}: {e}", rel.display()));
        }
    }
    errs
}

/// `path` (an event's) when it is, or is in, such a path the agent made:
/// renamed aside as the agent. The user's own, held read-only, are left
/// alone. The agent is not ended: a package or a branch that ships one
/// (`node_modules/x/.claude/`) is common and harmless in the sandbox, and
/// the name, not the process, is what the host's CLI would read. Returns
/// what was done.
pub fn refuse(root: &Path, path: &Path, uid: u32, gid: u32) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let hit = below_top(rel)?;
    let parent = hit.parent()?;
    let name = hit.file_name()?;
    let r = sbx_sys::beneath::Root::open(root).ok()?;
    let d = r.dir(parent).ok()?;
    d.kind(name).ok()??;
    if sbx_sys::on_readonly_mount(&root.join(&hit)) {
        return None;
    }
    let aside = format!(
        "{}.sbx-refused-{}",
        name.to_string_lossy(),
        sbx_sys::beneath::tmp_name()
    );
    let moved = {
        let _id = crate::api::FsId::set(uid, gid);
        nix::fcntl::renameat(
            std::os::fd::AsFd::as_fd(&d),
            name,
            std::os::fd::AsFd::as_fd(&d),
            aside.as_str(),
        )
    };
    Some(format!(
        "{}: an AI CLI's project configuration below the top, which your own CLI started there would run: {}",
        hit.display(),
        match moved {
            Ok(()) => format!("renamed to {aside}"),
            Err(e) => format!("not renamed: {e}"),
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_the_top_only_and_never_in_git() {
        let b = |s: &str| below_top(Path::new(s)).map(|p| p.display().to_string());
        assert_eq!(
            b("web/.claude/settings.json").as_deref(),
            Some("web/.claude")
        );
        assert_eq!(b("a/b/.mcp.json").as_deref(), Some("a/b/.mcp.json"));
        assert_eq!(b("x/.codex").as_deref(), Some("x/.codex"));
        for none in [
            ".claude/settings.json",
            ".mcp.json",
            ".git/x/.claude",
            "web/claude",
            "web/.claude.bak",
        ] {
            assert_eq!(b(none), None, "{none}");
        }
    }

    #[test]
    fn a_walk_finds_them_without_entering_them() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        for d in [
            "web/.claude/agents",
            "a/b/.codex",
            ".git/c/.claude",
            ".claude",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("web/.mcp.json"), "{}").unwrap();
        let mut got: Vec<String> = under(root, root)
            .iter()
            .map(|p| p.strip_prefix(root).unwrap().display().to_string())
            .collect();
        got.sort();
        assert_eq!(got, ["a/b/.codex", "web/.claude", "web/.mcp.json"]);
    }
}
