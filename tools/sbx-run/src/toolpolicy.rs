//! `[tools]` at the agent: the Claude Code managed settings and the Codex
//! requirements sbx-run installs (sbx-tool-guard decides what they say).
//! Each directory is bound read-only over the CLI's /etc directory, so the
//! agent can neither edit a file nor add another managed file beside it.

use std::path::{Path, PathBuf};

use sbx_tool_guard::settings;

use crate::RunError;
use crate::spec::state_dir;
use crate::workspace::Workspace;

/// A managed file: (host subdirectory, file name, container directory).
pub type Managed = (&'static str, &'static str, &'static str);

pub const CLAUDE: Managed = ("claude-code", "managed-settings.json", "/etc/claude-code");
pub const CODEX: Managed = ("codex", "requirements.toml", "/etc/codex");

/// The host directory holding a container's managed files.
pub fn host_dir(container: &str) -> PathBuf {
    state_dir().join("managed").join(container)
}

/// The Claude Code managed settings' text, or None without a `[tools]` table.
pub fn settings_text(ws: &Workspace) -> Option<String> {
    let v = settings::managed(&ws.loaded.config, &ws.target())?;
    let mut s = serde_json::to_string_pretty(&v).ok()?;
    s.push('\n');
    Some(s)
}

/// Each managed file with its text (None: not installed).
pub fn files(ws: &Workspace) -> [(Managed, Option<String>); 2] {
    [
        (CLAUDE, settings_text(ws)),
        (CODEX, settings::codex_requirements(&ws.loaded.config)),
    ]
}

/// The `--mount` sources and targets for the files `ws` installs.
pub fn mounts(ws: &Workspace, container: &str) -> Vec<(PathBuf, &'static str)> {
    files(ws)
        .into_iter()
        .filter(|(_, t)| t.is_some())
        .map(|((sub, _, target), _)| (host_dir(container).join(sub), target))
        .collect()
}

/// Write (atomically) or remove the container's managed files.
pub fn install(ws: &Workspace, container: &str) -> Result<(), RunError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |p: &Path, e| RunError::Io(p.to_owned(), e);
    for ((sub, name, _), text) in files(ws) {
        let dir = host_dir(container).join(sub);
        let file = dir.join(name);
        let Some(text) = text else {
            if file.exists() {
                std::fs::remove_file(&file).map_err(|e| io(&file, e))?;
            }
            continue;
        };
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| io(&dir, e))?;
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).map_err(|e| io(&tmp, e))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o444))
            .map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &file).map_err(|e| io(&file, e))?;
    }
    Ok(())
}

/// For show-run: the commands that install the files, shell-quoted.
pub fn show(ws: &Workspace, container: &str) -> String {
    let q = |p: &Path| {
        shlex::try_quote(&p.to_string_lossy())
            .map(|q| q.into_owned())
            .unwrap_or_default()
    };
    let mut out = String::new();
    for ((sub, name, target), text) in files(ws) {
        let Some(text) = text else {
            continue;
        };
        let dir = host_dir(container).join(sub);
        out.push_str(&format!(
            "# [tools]: {target}/{name}, bound read-only\nmkdir -p {d} && cat > {f} <<'SBX_MANAGED'\n{text}SBX_MANAGED\n",
            d = q(&dir),
            f = q(&dir.join(name)),
        ));
    }
    if out.is_empty() {
        out.push_str("# [tools]: none (no Claude Code managed settings)\n");
    }
    out
}
