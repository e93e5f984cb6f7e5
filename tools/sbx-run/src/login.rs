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
/// warns and goes on. Where the volumes' directories are reachable from
/// here (a local engine, sbx-run as root) the copy is done in place, in
/// milliseconds; otherwise by the helper container (a few hundred).
pub fn sync(n: &Names, image: &str) -> Result<String, RunError> {
    // SBX_LOGIN_VIA_HELPER=1: the helper even where the fast path works
    // (the tests run both).
    let helper_only = std::env::var_os("SBX_LOGIN_VIA_HELPER").is_some_and(|v| v == "1");
    if !helper_only && let Some(dirs) = local_dirs(n) {
        return Ok(host::sync(&dirs));
    }
    let mut mounts = Vec::new();
    for c in CLIS {
        mounts.push((c.store(), format!("/s/{}", c.name)));
        mounts.push((c.volume(n), format!("/w/{}", c.name)));
    }
    helper(image, &mounts, &sync_script(), None)
}

/// (store dir, workspace dir) of each CLI, when every one is a directory
/// this process can write. The store is created if missing.
fn local_dirs(n: &Names) -> Option<Vec<(&'static Cli, std::path::PathBuf, std::path::PathBuf)>> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let mut names = Vec::new();
    for c in CLIS {
        names.push(c.store());
        names.push(c.volume(n));
    }
    // Through the engine's API where sbx-run has it (about a millisecond each).
    let mut dirs = Vec::new();
    for v in &names {
        let info = match docker::inspect("volume", v).ok()? {
            Some(i) => i,
            None => {
                docker::output(&["volume", "create", v]).ok()?;
                docker::inspect("volume", v).ok()??
            }
        };
        let d = std::path::PathBuf::from(info["Mountpoint"].as_str()?);
        if !d.is_dir() {
            return None;
        }
        dirs.push(d);
    }
    Some(
        CLIS.iter()
            .zip(dirs.chunks(2))
            .map(|(c, d)| (c, d[0].clone(), d[1].clone()))
            .collect(),
    )
}

/// The same copy as the helper's script, done by this process on the
/// volumes' directories. The workspace side is the agent's: nothing there
/// is followed (no symlinks, FIFOs or devices are opened), files are read
/// only when regular, and written by a fresh temp file renamed into place,
/// owned like the volume's root.
mod host {
    use std::fs::{File, OpenOptions};
    use std::io::{Read, Write};
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::path::{Path, PathBuf};
    use std::time::SystemTime;

    use super::Cli;

    const MAX: u64 = 1 << 20;

    /// A credentials file: a regular file under 1 MiB holding a JSON object.
    fn read_ok(p: &Path) -> Option<(Vec<u8>, SystemTime)> {
        let flags = (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits();
        let mut f = OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(p)
            .ok()?;
        let md = f.metadata().ok()?;
        if !md.is_file() || md.len() > MAX {
            return None;
        }
        let mut data = Vec::new();
        Read::by_ref(&mut f)
            .take(MAX + 1)
            .read_to_end(&mut data)
            .ok()?;
        serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&data).ok()?;
        Some((data, md.modified().ok()?))
    }

    fn put(data: &[u8], mtime: SystemTime, dest: &Path) -> std::io::Result<()> {
        let dir = dest.parent().unwrap_or(Path::new("/"));
        let owner = std::fs::metadata(dir)?;
        let tmp = dir.join(format!(".sbx-login-{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let mut f: File = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&tmp)?;
        let r = (|| {
            f.write_all(data)?;
            std::os::unix::fs::fchown(&f, Some(owner.uid()), Some(owner.gid()))?;
            f.set_modified(mtime)?;
            f.sync_all()?;
            std::fs::rename(&tmp, dest)
        })();
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        r
    }

    pub fn sync(dirs: &[(&Cli, PathBuf, PathBuf)]) -> String {
        let mut out = String::new();
        for (c, store, ws) in dirs {
            for f in c.credentials {
                let (s, w) = (read_ok(&store.join(f)), read_ok(&ws.join(f)));
                let step = match (&s, &w) {
                    (_, Some((d, t))) if s.as_ref().is_none_or(|(_, st)| t > st) => {
                        put(d, *t, &store.join(f)).map(|_| "stored")
                    }
                    (Some((d, t)), _) if w.as_ref().is_none_or(|(_, wt)| t > wt) => {
                        put(d, *t, &ws.join(f)).map(|_| "loaded")
                    }
                    _ => continue,
                };
                match step {
                    Ok(what) => out.push_str(&format!("{what} {}/{f}\n", c.name)),
                    Err(e) => out.push_str(&format!("not synced {}/{f}: {e}\n", c.name)),
                }
            }
            for f in c.seeds {
                let w = ws.join(f);
                if std::fs::symlink_metadata(&w).is_ok() {
                    continue;
                }
                let flags = (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits();
                let Ok(mut src) = OpenOptions::new()
                    .read(true)
                    .custom_flags(flags)
                    .open(store.join(f))
                else {
                    continue;
                };
                let Ok(md) = src.metadata() else { continue };
                let mut data = Vec::new();
                if md.is_file()
                    && md.len() <= MAX
                    && src.read_to_end(&mut data).is_ok()
                    && let Ok(t) = md.modified()
                    && put(&data, t, &w).is_ok()
                {
                    out.push_str(&format!("seeded {}/{f}\n", c.name));
                }
            }
        }
        out
    }
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
