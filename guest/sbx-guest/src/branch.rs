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

/// The mount points the pins need, made by the agent (so what the volume
/// keeps after the sandbox is the agent's to remove), as the arguments of
/// `MKPOINTS` after its `sweep` one: the count of files, the files, then
/// the directories (a file's parent among them).
pub fn mount_points(shelf: &Path, pins: &[(PathBuf, PathBuf)]) -> Vec<String> {
    let missing: Vec<(bool, PathBuf)> = pins
        .iter()
        .filter(|(_, rel)| std::fs::symlink_metadata(shelf.join(rel)).is_err())
        .map(|(src, rel)| (src.is_dir(), shelf.join(rel)))
        .collect();
    if missing.is_empty() {
        return Vec::new();
    }
    let files: Vec<&PathBuf> = missing.iter().filter(|(d, _)| !d).map(|(_, p)| p).collect();
    let mut dirs: Vec<&Path> = missing
        .iter()
        .filter(|(d, _)| *d)
        .map(|(_, p)| p.as_path())
        .collect();
    dirs.extend(files.iter().filter_map(|f| f.parent()));
    let mut v = vec![files.len().to_string()];
    v.extend(files.iter().map(|p| p.to_string_lossy().into_owned()));
    v.extend(dirs.iter().map(|p| p.to_string_lossy().into_owned()));
    v
}

/// A shell script run as the agent once provisioning is done: with `1`
/// first, kill(-1) (every other process of the agent's uid: whatever
/// provisioning left); then `mount_points`' arguments: every directory
/// in one `mkdir -p`, each file with the shell's own `: >` (no word of the
/// script comes from the arguments).
pub const MKPOINTS: &str = r#"[ "$1" = 1 ] && { kill -9 -1 2>/dev/null || :; }
shift
[ "$#" -gt 0 ] || exit 0
set -e
m=$1
shift
i=0
for a; do
  if [ "$i" = 0 ]; then
    j=0
    while [ "$j" -lt "$m" ]; do shift; j=$((j+1)); done
    [ "$#" = 0 ] || mkdir -p -- "$@"
  fi
  i=$((i+1))
  [ "$i" -le "$m" ] || break
  [ -e "$a" ] || : > "$a"
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

    /// One `mkdir -p` and the shell's own `: >`: directories, files and
    /// their parents, names with spaces and shell words taken as names.
    #[test]
    fn mount_points_are_made_by_one_script() {
        let t = tempfile::tempdir().unwrap();
        let shelf = t.path().join("shelf");
        let src_dir = t.path().join("d");
        let src_file = t.path().join("f");
        std::fs::create_dir_all(&src_dir).unwrap();
        std::fs::write(&src_file, "").unwrap();
        std::fs::create_dir_all(shelf.join("wt/there")).unwrap();
        let pins = vec![
            (src_dir.clone(), PathBuf::from("wt/.agent sandbox")),
            (src_file.clone(), PathBuf::from("wt/$(touch x)/ctx.json")),
            (src_file.clone(), PathBuf::from("wt/a b/c/f; touch y")),
            (src_dir.clone(), PathBuf::from("wt/there")),
        ];
        let args = mount_points(&shelf, &pins);
        assert_eq!(args[0], "2", "{args:?}");
        assert_eq!(args.len(), 1 + 2 + 3, "{args:?}");
        let o = std::process::Command::new("/bin/sh")
            .args(["-c", MKPOINTS, "sh", "0"])
            .args(&args)
            .current_dir(t.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(shelf.join("wt/.agent sandbox").is_dir());
        assert!(shelf.join("wt/$(touch x)/ctx.json").is_file());
        assert!(shelf.join("wt/a b/c/f; touch y").is_file());
        assert!(!t.path().join("x").exists() && !t.path().join("y").exists());
        assert!(mount_points(&shelf, &pins).is_empty());
        // Nothing to make: the script only sweeps (here not even that).
        let o = std::process::Command::new("/bin/sh")
            .args(["-c", MKPOINTS, "sh", "0"])
            .output()
            .unwrap();
        assert!(o.status.success());
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
