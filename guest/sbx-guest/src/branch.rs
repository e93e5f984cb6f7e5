//! Branch mode (`SBX_BRANCH`, set by `sbx-run start --branch`): the
//! branch's worktree on the repo shelf is provisioned inside the sandbox's
//! own start, after egress is blocked, on a thread while the firewall
//! comes up (it is local: file:// only), and before the host API or any
//! agent process: no second container. sbx-worktree runs as the agent (no
//! capabilities, no_new_privs) with a private copy of the real git that
//! root stages here, execute-only, and removes right after.
//! Then the host's hooks and protected paths (as this sandbox sees them
//! under /workspace) are pinned read-only over the shelf's, on mount
//! points the agent owns, opened without following a symlink (the shelf
//! is every sandbox's to write).

use std::path::{Path, PathBuf};

use sbx_core::sanitize_branch;

/// Where sbx-run mounts the workspace's repo-shelf volume.
pub const SHELF: &str = "/repo-shelf";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Branch {
    pub name: String,
    /// The host checkout as mounted here (`SBX_WORKSPACE`).
    pub workspace: PathBuf,
    pub shelf: PathBuf,
}

/// Why provisioning failed: sbx-worktree's own line and exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    pub reason: String,
    pub exit: i32,
}

impl Branch {
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let name = get("SBX_BRANCH").filter(|b| !b.is_empty())?;
        let workspace = PathBuf::from(get("SBX_WORKSPACE").unwrap_or_default());
        Some(Self {
            name,
            workspace,
            shelf: PathBuf::from(SHELF),
        })
    }

    /// The worktree, relative to the shelf.
    pub fn rel(&self) -> PathBuf {
        Path::new("worktrees").join(sanitize_branch(&self.name))
    }

    pub fn worktree(&self) -> PathBuf {
        self.shelf.join(self.rel())
    }

    /// sbx-worktree's arguments (run as the agent, who owns the shelf).
    pub fn argv(&self) -> Vec<String> {
        vec![
            "sbx-worktree".into(),
            "--json".into(),
            "provision".into(),
            "--shelf".into(),
            self.shelf.to_string_lossy().into_owned(),
            "--host-repo".into(),
            self.workspace.to_string_lossy().into_owned(),
            format!("--branch={}", self.name),
            "--origin-from-host".into(),
            "--keep-existing".into(),
        ]
    }

    /// What to pin, as (source, target relative to the shelf): the host's
    /// hooks over the clone's (the hooks of every worktree), each protected
    /// path over the worktree's; a protected path the host lacks gets the
    /// empty directory (not .husky, which sbx-run's bind mode leaves out
    /// too), so the agent cannot plant one the guard would obey.
    pub fn pins(&self, protected: &[String], empty_dir: &Path) -> Vec<(PathBuf, PathBuf)> {
        let mut v = Vec::new();
        for p in protected {
            let host = self.workspace.join(p);
            let dst = if p == ".git/hooks" {
                PathBuf::from("repo/.git/hooks")
            } else {
                self.rel().join(p)
            };
            if std::fs::symlink_metadata(&host).is_ok() {
                v.push((host, dst));
            } else if p != ".husky" {
                v.push((empty_dir.to_owned(), dst));
            }
        }
        v
    }
}

/// The reason and status from sbx-worktree's exit and stderr.
pub fn failure(branch: &str, code: Option<i32>, stderr: &str) -> Failed {
    let line = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message")
        .trim()
        .trim_start_matches("sbx-worktree: error: ");
    Failed {
        reason: format!("branch {branch:?}: provisioning failed: {line}"),
        exit: code.unwrap_or(70),
    }
}

/// The mount point a pin needs, made by the agent (`mkdir -p`; a file
/// for a file), so what the volume keeps after the sandbox is the agent's
/// to remove: `d:PATH` or `f:PATH` arguments for `MKPOINTS`.
pub fn mount_points(shelf: &Path, pins: &[(PathBuf, PathBuf)]) -> Vec<String> {
    pins.iter()
        .filter(|(_, rel)| std::fs::symlink_metadata(shelf.join(rel)).is_err())
        .map(|(src, rel)| {
            let kind = if src.is_dir() { "d" } else { "f" };
            format!("{kind}:{}", shelf.join(rel).display())
        })
        .collect()
}

/// A shell script over `d:`/`f:` arguments (no word of it comes from them).
pub const MKPOINTS: &str = r#"set -e
for a; do
  p=${a#?:}
  case $a in
    d:*) mkdir -p -- "$p" ;;
    f:*) mkdir -p -- "$(dirname -- "$p")"; [ -e "$p" ] || : > "$p" ;;
  esac
done"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn b() -> Branch {
        Branch::from_lookup(|k| match k {
            "SBX_BRANCH" => Some("feat/x y".into()),
            "SBX_WORKSPACE" => Some("/nonexistent/app".into()),
            _ => None,
        })
        .unwrap()
    }

    #[test]
    fn only_with_a_branch() {
        assert!(Branch::from_lookup(|_| None).is_none());
        assert!(Branch::from_lookup(|k| (k == "SBX_BRANCH").then(String::new)).is_none());
        assert_eq!(
            b().worktree(),
            Path::new("/repo-shelf/worktrees/feat__x__y")
        );
        let a = b().argv().join(" ");
        assert!(
            a.ends_with(
                "--host-repo /nonexistent/app --branch=feat/x y --origin-from-host --keep-existing"
            ),
            "{a}"
        );
        assert!(!a.contains("--owner"), "runs as the agent: {a}");
    }

    #[test]
    fn pins_cover_hooks_and_protected_paths() {
        let e = Path::new("/run/sbx/empty.d");
        let prot: Vec<String> = sbx_core::config::ALWAYS_PROTECTED
            .iter()
            .map(|s| s.to_string())
            .collect();
        let p = b().pins(&prot, e);
        assert!(p.contains(&(e.to_owned(), "repo/.git/hooks".into())));
        assert!(p.contains(&(
            e.to_owned(),
            "worktrees/feat__x__y/.agent-precommit/user-context.json".into()
        )));
        assert!(!p.iter().any(|(_, d)| d.ends_with(".husky")));
    }

    #[test]
    fn failure_keeps_the_tools_line_and_status() {
        let f = failure(
            "a/b",
            Some(64),
            "x\nsbx-worktree: error: branches \"a__b\" and \"a/b\" both map to /repo-shelf/worktrees/a__b\n",
        );
        assert_eq!(f.exit, 64);
        assert!(
            f.reason
                .starts_with("branch \"a/b\": provisioning failed: branches \"a__b\" and \"a/b\""),
            "{}",
            f.reason
        );
    }
}
