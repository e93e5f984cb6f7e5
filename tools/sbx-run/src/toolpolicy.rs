//! `[tools]` at the agent: the Claude Code managed settings sbx-run
//! installs (sbx-tool-guard decides what they say). The directory is bound
//! read-only over /etc/claude-code, so the agent can neither edit the file
//! nor add another managed file beside it.

use std::path::{Path, PathBuf};

use sbx_tool_guard::settings;

use crate::RunError;
use crate::spec::state_dir;
use crate::workspace::Workspace;

/// Where the container sees the directory.
pub const TARGET: &str = "/etc/claude-code";

/// The host directory holding a container's managed settings.
pub fn host_dir(container: &str) -> PathBuf {
    state_dir().join("managed").join(container)
}

/// The managed settings file's text, or None without a `[tools]` table.
pub fn settings_text(ws: &Workspace) -> Option<String> {
    let v = settings::managed(&ws.loaded.config, &ws.target())?;
    let mut s = serde_json::to_string_pretty(&v).ok()?;
    s.push('\n');
    Some(s)
}

/// Write (atomically) or remove the container's managed settings.
pub fn install(ws: &Workspace, container: &str) -> Result<(), RunError> {
    use std::os::unix::fs::PermissionsExt;
    let dir = host_dir(container);
    let file = dir.join("managed-settings.json");
    let io = |p: &Path, e| RunError::Io(p.to_owned(), e);
    let Some(text) = settings_text(ws) else {
        if file.exists() {
            std::fs::remove_file(&file).map_err(|e| io(&file, e))?;
        }
        return Ok(());
    };
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| io(&dir, e))?;
    let tmp = dir.join(".managed-settings.json.tmp");
    std::fs::write(&tmp, text).map_err(|e| io(&tmp, e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o444))
        .map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, &file).map_err(|e| io(&file, e))
}

/// For show-run: the commands that install the file, shell-quoted.
pub fn show(ws: &Workspace, container: &str) -> String {
    let Some(text) = settings_text(ws) else {
        return "# [tools]: none (no Claude Code managed settings)\n".into();
    };
    let dir = host_dir(container);
    let q = |p: &Path| {
        shlex::try_quote(&p.to_string_lossy())
            .map(|q| q.into_owned())
            .unwrap_or_default()
    };
    format!(
        "# [tools]: Claude Code managed settings, bound read-only at {TARGET}/managed-settings.json\nmkdir -p {d} && cat > {f} <<'SBX_MANAGED_SETTINGS'\n{text}SBX_MANAGED_SETTINGS\n",
        d = q(&dir),
        f = q(&dir.join("managed-settings.json")),
    )
}
