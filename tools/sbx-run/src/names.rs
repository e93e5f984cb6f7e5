//! Names of everything sbx-run creates, derived from the workspace path
//! alone, so `list` and `prune` need no state file.

use std::path::Path;

use md5::{Digest, Md5};
use sbx_core::sanitize_branch;

pub use sbx_image::BASE_IMAGE;
/// The machine-wide login stores (credentials only reach sandboxes, see
/// login.rs; these volumes are never mounted into one). The names are those
/// of the old shared config volumes, so an existing login carries over.
pub const CLAUDE_VOLUME: &str = "agent-sandbox-claude-code-config";
pub const CODEX_VOLUME: &str = "agent-sandbox-codex-config";

/// The Claude Code login store: `$SBX_CLAUDE_VOLUME` or [`CLAUDE_VOLUME`].
pub fn claude_store() -> String {
    store_from_env("SBX_CLAUDE_VOLUME", CLAUDE_VOLUME)
}

/// The Codex login store: `$SBX_CODEX_VOLUME` or [`CODEX_VOLUME`].
pub fn codex_store() -> String {
    store_from_env("SBX_CODEX_VOLUME", CODEX_VOLUME)
}

fn store_from_env(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// Labels on containers, networks and volumes.
pub const LABEL_WORKSPACE: &str = "sbx.workspace";
pub const LABEL_BRANCH: &str = "sbx.branch";
pub const LABEL_MODE: &str = "sbx.mode";
pub const LABEL_HASH: &str = "sbx.hash";
/// On a per-repo image: its workspace (not `sbx.workspace`, which the
/// image would hand down to every container run from it).
pub const LABEL_IMAGE: &str = "sbx.image.workspace";
/// On the network holder: `netns`. Sandbox containers carry no role.
pub const LABEL_ROLE: &str = "sbx.role";
/// On the network holder: a digest of its spec, to tell when it is stale.
pub const LABEL_SPEC: &str = "sbx.spec";

/// MD5 hex of the absolute, canonical workspace path.
pub fn path_hash(canonical: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    digest(canonical.as_os_str().as_bytes())
}

/// MD5 hex of some bytes.
pub fn digest(bytes: &[u8]) -> String {
    Md5::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Docker names allow `[a-zA-Z0-9][a-zA-Z0-9_.-]*`, image names only lower
/// case: keep what fits, replace the rest with `-`.
pub fn sanitize_repo(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    while s.starts_with(['.', '-', '_']) {
        s.remove(0);
    }
    if s.is_empty() {
        s.push_str("repo");
    }
    s
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub repo: String,
    pub hash: String,
    pub image: String,
    pub container: String,
    /// The container that holds the sandbox's network namespace (see spec.rs).
    pub holder: String,
    pub network: String,
    pub repo_shelf: String,
    pub history: String,
    /// The git broker's record of stash and notes commits (root's, never
    /// the agent's): one per workspace, so it outlives a sandbox made
    /// again and its branch sandboxes share it like the shelf.
    pub git_record: String,
    /// Per-workspace ~/.claude and ~/.codex: settings, hooks and
    /// transcripts stay with their project.
    pub claude: String,
    pub codex: String,
    /// /home/agent, one per sandbox: backups restore into a new one.
    pub home: String,
}

impl Names {
    pub fn new(canonical: &Path, branch: Option<&str>) -> Self {
        let base = canonical
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let repo = sanitize_repo(&base);
        let hash = path_hash(canonical);
        let container = match branch {
            Some(b) => format!(
                "agent-sandbox-{repo}-{}-{hash}",
                sanitize_container_part(&sanitize_branch(b))
            ),
            None => format!("agent-sandbox-{repo}-{hash}"),
        };
        Self {
            image: format!("agent-sandbox-{repo}-{hash}"),
            network: container.clone(),
            holder: format!("{container}-net"),
            home: format!("{container}-home"),
            container,
            repo_shelf: format!("agent-sbx-repo-{hash}"),
            history: format!("agent-sandbox-{hash}-history"),
            git_record: format!("agent-sandbox-{hash}-git"),
            claude: format!("agent-sandbox-{hash}-claude"),
            codex: format!("agent-sandbox-{hash}-codex"),
            repo,
            hash,
        }
    }
}

/// Branch names may hold characters Docker refuses in a name.
fn sanitize_container_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Golden names (md5sum of the path): these must never change, or
    /// users lose their volumes and history.
    #[test]
    fn golden() {
        assert_eq!(
            path_hash(Path::new("/")),
            "6666cd76f96956469e7be39d750cc7d9"
        );
        let n = Names::new(Path::new("/home/dev/src/my-app"), None);
        let h = "8cea8a8ac6771dd42d09893adb318dd0";
        assert_eq!(n.hash, h);
        assert_eq!(n.container, format!("agent-sandbox-my-app-{h}"));
        assert_eq!(n.image, format!("agent-sandbox-my-app-{h}"));
        assert_eq!(n.network, format!("agent-sandbox-my-app-{h}"));
        assert_eq!(n.holder, format!("agent-sandbox-my-app-{h}-net"));
        assert_eq!(n.repo_shelf, format!("agent-sbx-repo-{h}"));
        assert_eq!(n.history, format!("agent-sandbox-{h}-history"));
        assert_eq!(n.git_record, format!("agent-sandbox-{h}-git"));
        assert_eq!(n.claude, format!("agent-sandbox-{h}-claude"));
        assert_eq!(n.codex, format!("agent-sandbox-{h}-codex"));
        let b = Names::new(
            Path::new("/home/dev/src/my-app"),
            Some("feature/login page"),
        );
        assert_eq!(
            b.container,
            format!("agent-sandbox-my-app-feature__login__page-{h}")
        );
        // Spaces and non-ASCII in the path: hashed as bytes, named safely.
        let u = Names::new(Path::new("/tmp/with space/ünï"), None);
        assert_eq!(
            u.container,
            "agent-sandbox-n--713570c4a0061568740708a3d8938c71"
        );
    }

    #[test]
    fn sanitizing() {
        assert_eq!(sanitize_repo("My Repo ü"), "my-repo--");
        assert_eq!(sanitize_repo(".hidden"), "hidden");
        assert_eq!(sanitize_repo("日本"), "repo");
    }
}
