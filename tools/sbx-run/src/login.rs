//! Log in once per machine without sharing a config directory. Each
//! workspace has its own ~/.claude and ~/.codex volumes (settings, hooks,
//! transcripts, AGENTS.md stay with their project: one sandbox can neither
//! read another's transcripts nor plant hooks that run in it). Only the
//! credential files cross, through a machine-wide store volume that is never
//! mounted into a sandbox: a short-lived helper container, started by
//! sbx-run on the host, copies the newer of each pair each way when a
//! sandbox starts, stops or is removed. So a login made inside one sandbox
//! reaches the store when that sandbox stops (or starts again), and every
//! other sandbox at its next start.
//!
//! Why a host-side copy: Claude Code writes its credentials by temp file and
//! rename, which replaces a symlink or fails on a bind-mounted file, and
//! this engine has no volume subpaths; a copy is the one way that holds.
//! What a sandbox can still do: replace the machine's login with another
//! valid JSON object (any login made in a sandbox is the machine's login, by
//! design). It cannot place any other file in another project's home.

use std::io::Write;
use std::process::Stdio;

use crate::names::{self, Names};
use crate::{RunError, docker};

/// One AI CLI: its per-workspace volume and the files shared between them.
pub struct Cli {
    pub name: &'static str,
    pub target: &'static str,
    /// Copied both ways, newer wins.
    pub credentials: &'static [&'static str],
    /// Copied from the store into a workspace only where missing
    /// (codex-init-config's defaults); never back.
    pub seeds: &'static [&'static str],
}

pub const CLIS: &[Cli] = &[
    Cli {
        name: "claude",
        target: "/home/agent/.claude",
        credentials: &[".credentials.json"],
        seeds: &[],
    },
    Cli {
        name: "codex",
        target: "/home/agent/.codex",
        credentials: &["auth.json", "profile.json"],
        seeds: &["config.toml", "AGENTS.md"],
    },
];

impl Cli {
    pub fn store(&self) -> String {
        match self.name {
            "claude" => names::claude_store(),
            _ => names::codex_store(),
        }
    }

    pub fn volume(&self, n: &Names) -> String {
        match self.name {
            "claude" => n.claude.clone(),
            _ => n.codex.clone(),
        }
    }
}

/// A JSON object in a regular file (not a link) under 1 MiB: what a
/// credentials file is. Anything else is neither stored nor handed out.
const SYNC_FUNCS: &str = r#"set -eu
command -v jq >/dev/null || { echo "jq is missing from the image" >&2; exit 3; }
ok() { [ -f "$1" ] && [ ! -L "$1" ] && [ "$(stat -c %s "$1")" -le 1048576 ] && jq -e 'type == "object"' "$1" >/dev/null 2>&1; }
put() { t="$2.sbx-$$"; cp "$1" "$t"; chmod 600 "$t"; touch -r "$1" "$t"; mv -f "$t" "$2"; }
"#;

/// The sync script for `CLIS`, with stores at /s/<cli> and workspace
/// volumes at /w/<cli>.
fn sync_script() -> String {
    let mut s = String::from(SYNC_FUNCS);
    for c in CLIS {
        for f in c.credentials {
            let (w, st) = (format!("/w/{}/{f}", c.name), format!("/s/{}/{f}", c.name));
            s.push_str(&format!(
                "if ok {w} && {{ ! ok {st} || [ {w} -nt {st} ]; }}; then put {w} {st}; echo stored {n}/{f}; \
                 elif ok {st} && {{ ! ok {w} || [ {st} -nt {w} ]; }}; then put {st} {w}; echo loaded {n}/{f}; fi\n",
                n = c.name
            ));
        }
        for f in c.seeds {
            let (w, st) = (format!("/w/{}/{f}", c.name), format!("/s/{}/{f}", c.name));
            s.push_str(&format!(
                "if [ ! -e {w} ] && [ ! -L {w} ] && [ -f {st} ] && [ ! -L {st} ]; then cp {st} {w}; echo seeded {n}/{f}; fi\n",
                n = c.name
            ));
        }
    }
    s
}

/// Run `script` as the agent in a throwaway container of `image` with the
/// given volumes mounted. Docker creates a missing volume root-owned, so
/// root first hands the mount roots (only those, not following anything
/// inside) to the agent, then drops to it for everything else.
pub fn helper(
    image: &str,
    mounts: &[(String, String)],
    script: &str,
    stdin: Option<&[u8]>,
) -> Result<String, RunError> {
    let mut prelude = String::from("set -e\n");
    for (_, target) in mounts {
        prelude.push_str(&format!("chown agent:agent {target}\n"));
    }
    prelude.push_str(
        "exec setpriv --reuid=agent --regid=agent --init-groups --inh-caps=-all --bounding-set=-all -- /bin/sh -c \"$1\"\n",
    );
    let mut cmd = docker::cmd();
    cmd.args(["run", "--rm", "--interactive", "--network", "none"])
        .args(["--cap-drop", "ALL", "--cap-add", "CHOWN"])
        .args([
            "--cap-add",
            "SETUID",
            "--cap-add",
            "SETGID",
            "--cap-add",
            "SETPCAP",
        ])
        .args(["--security-opt", "no-new-privileges", "--user", "0"])
        .args(["--label", "sbx.role=login-helper"])
        .args(["--entrypoint", "/bin/sh"]);
    for (vol, target) in mounts {
        cmd.arg("--mount")
            .arg(format!("type=volume,source={vol},target={target}"));
    }
    cmd.args([image, "-c", &prelude, "sh", script]);
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RunError::Build(e.to_string()))?;
    if let Some(mut i) = child.stdin.take() {
        if let Some(data) = stdin {
            i.write_all(data)
                .map_err(|e| RunError::Build(e.to_string()))?;
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| RunError::Build(e.to_string()))?;
    if !out.status.success() {
        return Err(RunError::Docker {
            command: "docker run (login store helper)".into(),
            message: docker::first_line(&String::from_utf8_lossy(&out.stderr)),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Copy credentials between the machine's stores and this workspace's
/// volumes, newer wins. A failure costs a login, not a guard: the caller
/// warns and goes on.
pub fn sync(n: &Names, image: &str) -> Result<String, RunError> {
    let mut mounts = Vec::new();
    for c in CLIS {
        mounts.push((c.store(), format!("/s/{}", c.name)));
        mounts.push((c.volume(n), format!("/w/{}", c.name)));
    }
    helper(image, &mounts, &sync_script(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_moves_only_credentials_and_seeds() {
        let s = sync_script();
        for f in [".credentials.json", "auth.json", "profile.json"] {
            assert!(s.contains(&format!("/{f} && {{ ! ok")), "{f}");
        }
        // Nothing else of a workspace ever reaches the store.
        let stores_written: Vec<&str> = s
            .lines()
            .filter_map(|l| l.split("put /w/").nth(1))
            .collect();
        assert_eq!(stores_written.len(), 3, "{s}");
        assert!(!s.contains("settings") && !s.contains("hooks") && !s.contains("projects"));
    }
}
