//! Log in once per machine without sharing a config directory. Each
//! workspace has its own ~/.claude and ~/.codex volumes (settings, hooks,
//! transcripts, AGENTS.md stay with their project: one sandbox can neither
//! read another's transcripts nor plant hooks that run in it). Only the
//! credential files cross, one way (issue 37): from a machine-wide store
//! volume that is never mounted into a sandbox into a workspace's volume
//! that has no login of its own, by sbx-run on the host when a sandbox
//! starts. Nothing a sandbox writes reaches the store, and its file dates
//! mean nothing: project A's agent forging a login dated 2100 changes
//! only project A. The store is written by the user (`sbx-run
//! codex-init-config --auth`, or a login copied into it by hand).
//!
//! Why a host-side copy: Claude Code writes its credentials by temp file and
//! rename, which replaces a symlink or fails on a bind-mounted file, and
//! this engine has no volume subpaths; a copy is the one way that holds.
//! A login made inside a sandbox stays that workspace's.

use std::io::Write;
use std::process::Stdio;

use crate::names::{self, Names};
use crate::{RunError, docker};

/// One AI CLI: its per-workspace volume and the files shared between them.
pub struct Cli {
    pub name: &'static str,
    pub target: &'static str,
    /// Copied from the store into a workspace that has none; never back.
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

/// `ok`: a JSON object in a regular file (not a link) under 1 MiB, what a
/// credentials file is; anything else is neither stored nor handed out.
/// `put`: the copy is made in a directory `mktemp -d` creates under a
/// random name (mkdir never follows or reuses anything), so nothing the
/// agent planted beside the target is written through; the old fixed name
/// `$2.sbx-$$` (PID 1 in the helper) let a planted link send the store's
/// login into another store file. The rename replaces a link at the target.
/// The directory is the agent uid's, as the helper is: an agent of another
/// running sandbox of the workspace (same volume) that finds it in time
/// could plant `f` there, so cp unlinks whatever is at `f` and creates it
/// with O_EXCL (GNU cp for a removed destination), 0600 by the umask, and
/// no chmod follows a name. (`t`, not `d`: shell variables are global,
/// and `d` is the digest the sync script prints after `put`.)
const SYNC_FUNCS: &str = r#"set -eu
command -v jq >/dev/null || { echo "jq is missing from the image" >&2; exit 3; }
ok() { [ -f "$1" ] && [ ! -L "$1" ] && [ "$(stat -c %s "$1")" -le 1048576 ] && jq -e 'type == "object"' "$1" >/dev/null 2>&1; }
put() { t=$(mktemp -d "${2%/*}/.sbx-XXXXXXXXXXXXXXXX"); (umask 077; cp --remove-destination "$1" "$t/f"); mv -f "$t/f" "$2"; rmdir "$t"; }
"#;

/// What a workspace volume last loaded from the store, by file name: the
/// store file's digest. Kept on the host (the sandbox cannot edit it), so
/// a new login in the store reaches a workspace at its next start, and a
/// login of the workspace's own stays while the store is unchanged.
pub type Loaded = std::collections::BTreeMap<String, String>;

fn record_path(volume: &str) -> std::path::PathBuf {
    crate::spec::state_dir().join("logins").join(volume)
}

/// The record of `volume` ("FILE DIGEST" lines); empty when unreadable.
pub fn loaded(volume: &str) -> Loaded {
    std::fs::read_to_string(record_path(volume))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(f, d)| (f.to_owned(), d.to_owned()))
        .collect()
}

fn save_loaded(volume: &str, rec: &Loaded) {
    let p = record_path(volume);
    if let Some(d) = p.parent() {
        let _ = std::fs::create_dir_all(d);
    }
    let text: String = rec.iter().map(|(f, d)| format!("{f} {d}\n")).collect();
    let _ = std::fs::write(p, text);
}

/// Forget what `volume` loaded (it is being removed).
pub fn forget(volume: &str) {
    let _ = std::fs::remove_file(record_path(volume));
}

/// Whether the store's file (digest `store`) goes into a workspace whose
/// own is `ws_ok` and which last loaded `last`: when it has none, or the
/// store changed since. The workspace's file dates never count.
pub fn should_load(store: Option<&str>, ws_ok: bool, last: Option<&str>) -> bool {
    store.is_some_and(|s| !ws_ok || last != Some(s))
}

/// The sync script for `CLIS`, with stores at /s/<cli> and workspace
/// volumes at /w/<cli>: the store into the workspace only (issue 37),
/// no credentials of a CLI in `keep_out`.
fn sync_script(records: &[Loaded], keep_out: &[&str]) -> String {
    let mut s = String::from(SYNC_FUNCS);
    for (c, rec) in CLIS.iter().zip(records) {
        for f in c.credentials.iter().filter(|_| !keep_out.contains(&c.name)) {
            let (w, st) = (format!("/w/{}/{f}", c.name), format!("/s/{}/{f}", c.name));
            let last = rec.get(*f).map_or("-", String::as_str);
            s.push_str(&format!(
                "if ok {st}; then d=$(md5sum < {st} | cut -c1-32); \
                 if ! ok {w} || [ \"$d\" != {last} ]; then put {st} {w}; echo loaded {n}/{f} $d; fi; fi\n",
                n = c.name,
                last = shlex::try_quote(last).unwrap_or_default()
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

/// `sbx-run login --share`: this workspace's credentials into the store,
/// because the user said so (a login made in that sandbox is then every
/// workspace's at its next start).
fn share_script(c: &Cli) -> String {
    let mut s = String::from(SYNC_FUNCS);
    {
        for f in c.credentials {
            let (w, st) = (format!("/w/{}/{f}", c.name), format!("/s/{}/{f}", c.name));
            s.push_str(&format!(
                "if ok {w}; then put {w} {st}; touch {st}; echo shared {n}/{f}; fi\n",
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

/// The CLIs whose login the store does not bring into a workspace with
/// `secrets`: Claude's, when a `claude-login:` secret stands for it. That
/// workspace gets placeholders only ([`place_claude`]); the store's real
/// tokens must not pass through its volume, which its other sandboxes
/// (branches) have mounted while this one starts, and which the agent can
/// empty to make the store's copy come (a44).
pub fn kept_out(
    secrets: &std::collections::BTreeMap<String, sbx_core::config::Secret>,
) -> &'static [&'static str] {
    if secrets
        .values()
        .any(|s| matches!(s.from, sbx_core::config::SecretFrom::ClaudeLogin(_)))
    {
        &["claude"]
    } else {
        &[]
    }
}

/// Load the machine's stores into this workspace's volumes (never the
/// other way). `keep_out`: CLIs whose login the store must not bring
/// (a `[secrets]` `claude-login:` workspace: the store's real tokens
/// would land in a volume its running sandboxes share, a44). A failure costs a login, not a guard: the caller warns and
/// goes on. Where the volumes' directories are reachable from here (a
/// local engine, sbx-run as root) the copy is done in place, in
/// milliseconds; otherwise by the helper container (a few hundred).
pub fn sync(n: &Names, image: &str, keep_out: &[&str]) -> Result<String, RunError> {
    // SBX_LOGIN_VIA_HELPER=1: the helper even where the fast path works
    // (the tests run both).
    let helper_only = std::env::var_os("SBX_LOGIN_VIA_HELPER").is_some_and(|v| v == "1");
    let mut records: Vec<Loaded> = CLIS.iter().map(|c| loaded(&c.volume(n))).collect();
    let out = if !helper_only && let Some(dirs) = local_dirs(n) {
        host::sync(&dirs, &mut records, keep_out)
    } else {
        let out = helper(image, &mounts(n), &sync_script(&records, keep_out), None)?;
        // "loaded CLI/FILE DIGEST": what the workspace now holds.
        for l in out.lines() {
            let mut w = l.split(' ');
            if let (Some("loaded"), Some(what), Some(d)) = (w.next(), w.next(), w.next())
                && let Some((cli, f)) = what.split_once('/')
                && let Some(i) = CLIS.iter().position(|c| c.name == cli)
            {
                records[i].insert(f.to_owned(), d.to_owned());
            }
        }
        out
    };
    for (c, rec) in CLIS.iter().zip(&records) {
        save_loaded(&c.volume(n), rec);
    }
    Ok(out
        .lines()
        .map(|l| l.split(' ').take(2).collect::<Vec<_>>().join(" ") + "\n")
        .collect())
}

/// Put `text`, the placeholder login of a `[secrets]` `claude-login:`
/// entry, in this workspace's ~/.claude over whatever login is there
/// (issue 44): the sandbox's CLI then holds placeholders only, and the
/// proxy puts the host's access token in. Run after [`sync`], so a login
/// the store brings is replaced before the agent runs.
pub fn place_claude(n: &Names, image: &str, text: &str) -> Result<(), RunError> {
    let c = &CLIS[0];
    let script = format!(
        "{SYNC_FUNCS}l=$(mktemp); cat > \"$l\"; ok \"$l\"; put \"$l\" /w/{n}/{f}; rm -f \"$l\"\n",
        n = c.name,
        f = c.credentials[0]
    );
    helper(
        image,
        &[(c.volume(n), format!("/w/{}", c.name))],
        &script,
        Some(text.as_bytes()),
    )
    .map(drop)
}

/// Copy this workspace's credentials into the machine's stores: only on
/// the user's word (`sbx-run login --share`).
pub fn share(n: &Names, c: &Cli, image: &str) -> Result<String, RunError> {
    helper(image, &mounts(n), &share_script(c), None)
}

/// The CLI's own login, interactive, in a throwaway container whose one
/// volume is the machine's store (at the CLI's config directory), run as
/// the agent user; its exit status is returned.
pub fn interactive(c: &Cli, image: &str) -> Result<u8, RunError> {
    let login = match c.name {
        "claude" => "claude /login",
        _ => "codex login",
    };
    let script = format!(
        "chown agent:agent {t} && exec setpriv --reuid=agent --regid=agent --init-groups --inh-caps=-all --bounding-set=-all -- env HOME=/home/agent {login}",
        t = c.target
    );
    let mut cmd = docker::cmd();
    cmd.args(["run", "--rm", "--interactive"]);
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        cmd.arg("--tty");
    }
    cmd.args([
        "--cap-drop",
        "ALL",
        "--cap-add",
        "CHOWN",
        "--cap-add",
        "SETUID",
    ])
    .args(["--cap-add", "SETGID", "--cap-add", "SETPCAP"])
    .args(["--security-opt", "no-new-privileges", "--user", "0"])
    .args(["--label", "sbx.role=login"])
    .arg("--mount")
    .arg(format!(
        "type=volume,source={},target={}",
        c.store(),
        c.target
    ))
    .args(["--entrypoint", "/bin/sh", image, "-c", &script]);
    let st = cmd.status().map_err(|e| RunError::Build(e.to_string()))?;
    Ok(st.code().map_or(125, |c| u8::try_from(c).unwrap_or(125)))
}

/// The stores at /s/<cli> and the workspace's volumes at /w/<cli>.
fn mounts(n: &Names) -> Vec<(String, String)> {
    let mut m = Vec::new();
    for c in CLIS {
        m.push((c.store(), format!("/s/{}", c.name)));
        m.push((c.volume(n), format!("/w/{}", c.name)));
    }
    m
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
    use std::fs::OpenOptions;
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::path::{Path, PathBuf};

    use super::Cli;

    const MAX: u64 = 1 << 20;

    /// A credentials file: a regular file under 1 MiB holding a JSON object.
    fn read_ok(p: &Path) -> Option<Vec<u8>> {
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
        Some(data)
    }

    /// Replace `rel` in the workspace volume by rename, owned like its root.
    fn put(root: &sbx_sys::beneath::Root, data: &[u8], rel: &Path) -> std::io::Result<()> {
        let owner = std::fs::metadata(root.path())?;
        root.write_atomic(rel, data, 0o600)?;
        let fd = root.open_path(rel)?;
        nix::unistd::fchownat(
            &fd,
            "",
            Some(owner.uid().into()),
            Some(owner.gid().into()),
            nix::fcntl::AtFlags::AT_EMPTY_PATH,
        )?;
        Ok(())
    }

    pub fn sync(
        dirs: &[(&Cli, PathBuf, PathBuf)],
        records: &mut [super::Loaded],
        keep_out: &[&str],
    ) -> String {
        let mut out = String::new();
        for ((c, store, ws), rec) in dirs.iter().zip(records.iter_mut()) {
            // The workspace side is the agent's: written through no link.
            let Ok(root) = sbx_sys::beneath::Root::open(ws) else {
                continue;
            };
            let creds = if keep_out.contains(&c.name) {
                &[][..]
            } else {
                c.credentials
            };
            for f in creds {
                let Some(d) = read_ok(&store.join(f)) else {
                    continue;
                };
                let digest = crate::names::digest(&d);
                let ws_ok = read_ok(&ws.join(f)).is_some();
                if !super::should_load(Some(&digest), ws_ok, rec.get(*f).map(String::as_str)) {
                    continue;
                }
                match put(&root, &d, Path::new(f)) {
                    Ok(()) => {
                        out.push_str(&format!("loaded {}/{f}\n", c.name));
                        rec.insert((*f).to_owned(), digest);
                    }
                    Err(e) => out.push_str(&format!("not loaded {}/{f}: {e}\n", c.name)),
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
                    && put(&root, &data, Path::new(f)).is_ok()
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
        let s = sync_script(&[Loaded::new(), Loaded::new()], &[]);
        for f in [".credentials.json", "auth.json", "profile.json"] {
            assert!(s.contains("put /s/") && s.contains(f), "{f}");
        }
        // Nothing of a workspace ever reaches the store (issue 37), and
        // no date is compared.
        assert!(!s.contains("put /w/") && !s.contains("-nt"), "{s}");
        assert!(!s.contains("settings") && !s.contains("hooks") && !s.contains("projects"));
    }

    /// The store's file goes in when the workspace has none or the store
    /// changed since the workspace last loaded it; never by date.
    #[test]
    fn loads_only_a_new_or_missing_login() {
        for (store, ws_ok, last, want) in [
            (None, false, None, false),
            (Some("a"), false, None, true),
            (Some("a"), true, None, true),
            (Some("a"), true, Some("a"), false),
            (Some("b"), true, Some("a"), true),
            (Some("a"), false, Some("a"), true),
        ] {
            assert_eq!(
                should_load(store, ws_ok, last),
                want,
                "{store:?} {ws_ok} {last:?}"
            );
        }
    }

    /// A `claude-login:` workspace whose agent emptied its login (so the
    /// store's would be copied in, with a sandbox of the workspace
    /// running) gets nothing from the store, by the fast path or the
    /// helper's script; another workspace still does, and Codex's too.
    #[test]
    fn a_claude_login_workspace_never_gets_the_store_login() {
        let dir = tempfile::tempdir().unwrap();
        let real = r#"{"claudeAiOauth":{"accessToken":"REAL-access","refreshToken":"REAL-refresh","expiresAt":1}}"#;
        let (cs, cw, xs, xw) = (
            dir.path().join("s-claude"),
            dir.path().join("w-claude"),
            dir.path().join("s-codex"),
            dir.path().join("w-codex"),
        );
        for d in [&cs, &cw, &xs, &xw] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(cs.join(".credentials.json"), real).unwrap();
        std::fs::write(xs.join("auth.json"), "{}").unwrap();
        // The agent's doing: not a login (the file gone would be the same).
        std::fs::write(cw.join(".credentials.json"), "not json").unwrap();
        let conf = |from: &str| {
            sbx_core::config::parse_toml(
                &format!("[secrets]\nc = {{ from = \"{from}\", host = \"a.test\", header = \"authorization\" }}\n"),
                std::path::Path::new("c.toml"),
            )
            .unwrap()
            .secrets
        };
        let login = conf("claude-login:/nonexistent/.credentials.json");
        let keep_out = kept_out(&login);
        let dirs = [
            (&CLIS[0], cs.clone(), cw.clone()),
            (&CLIS[1], xs.clone(), xw.clone()),
        ];
        let mut records = vec![Loaded::new(), Loaded::new()];
        let out = host::sync(&dirs, &mut records, keep_out);
        let now = std::fs::read_to_string(cw.join(".credentials.json")).unwrap();
        assert!(!now.contains("REAL"), "{out}: {now}");
        assert!(xw.join("auth.json").exists(), "{out}");
        let script = sync_script(&records, keep_out);
        assert!(!script.contains("/s/claude/"), "{script}");
        assert!(script.contains("/s/codex/auth.json"), "{script}");
        // Without the secret, the store's login is the workspace's.
        let plain = conf("env:K");
        let out = host::sync(&dirs, &mut records, kept_out(&plain));
        let now = std::fs::read_to_string(cw.join(".credentials.json")).unwrap();
        assert!(now.contains("REAL-refresh"), "{out}: {now}");
    }
}
