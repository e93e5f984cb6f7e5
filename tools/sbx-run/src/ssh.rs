//! `[ssh]`: sshd in the sandbox for IDEs and terminals. The project's key
//! pair and sshd's host key are made on the host (`ssh-keygen`) at the first
//! start and kept in the user's state directory; the guest gets the host key
//! and the public key through the sandbox's host directory, and the ssh
//! config the host prints is built from these host files alone, never from
//! anything in the sandbox (the agent writes its home, and would otherwise
//! choose the key the user's client trusts).

use std::ffi::OsString;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use sbx_core::cli::CommonArgs;
use sbx_core::config::SSH_PORT;
use sbx_core::error::BoxError;
use sbx_core::{Exit, output};
use serde_json::json;

use crate::workspace::Workspace;
use crate::{RunError, docker, spec};

/// In the sandbox's host directory: what the guest installs for sshd.
pub const HOST_KEY_HANDOFF: &str = "ssh_host_ed25519";
pub const AUTHORIZED_HANDOFF: &str = "ssh_authorized_keys";

/// One sandbox's SSH files on the host: `$XDG_STATE_HOME/sbx/ssh/<container>/`
/// (0700 under a 0700 parent), each key made once.
#[derive(Debug, Clone)]
pub struct Keys {
    pub dir: PathBuf,
    /// The alias the host key is pinned under (the container's name).
    pub alias: String,
}

impl Keys {
    pub fn of(container: &str) -> Self {
        Self {
            dir: spec::state_dir().join("ssh").join(container),
            alias: container.to_owned(),
        }
    }
    /// The project's private key: what logs in.
    pub fn identity(&self) -> PathBuf {
        self.dir.join("id_ed25519")
    }
    pub fn identity_pub(&self) -> PathBuf {
        self.dir.join("id_ed25519.pub")
    }
    /// sshd's host key, made here so the host knows it without asking the sandbox.
    pub fn host_key(&self) -> PathBuf {
        self.dir.join("host_ed25519")
    }
    pub fn host_pub(&self) -> PathBuf {
        self.dir.join("host_ed25519.pub")
    }
    pub fn known_hosts(&self) -> PathBuf {
        self.dir.join("known_hosts")
    }
    /// A public key set by a caller that keeps the private one itself
    /// (sbx-server hands it out once): when present, it is the key let in
    /// and no identity pair is made here.
    pub fn authorized(&self) -> PathBuf {
        self.dir.join("authorized_key.pub")
    }
    /// `start --ssh-listen`'s address, kept for every later start.
    fn listen_file(&self) -> PathBuf {
        self.dir.join("listen")
    }

    /// Where the holder publishes sshd's port: the kept `--ssh-listen`, else
    /// 127.0.0.1 and a port the engine picks.
    pub fn listen(&self) -> Result<Option<SocketAddr>, RunError> {
        match std::fs::read_to_string(self.listen_file()) {
            Ok(t) => parse_listen(t.trim())
                .map(Some)
                .map_err(|e| RunError::Config(format!("{}: {e}", self.listen_file().display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(RunError::Io(self.listen_file(), e)),
        }
    }

    /// `docker run --publish`'s value for the holder.
    pub fn publish(&self) -> Result<String, RunError> {
        Ok(match self.listen()? {
            None => format!("127.0.0.1::{SSH_PORT}"),
            Some(SocketAddr::V4(a)) => format!("{}:{}:{SSH_PORT}", a.ip(), a.port()),
            Some(SocketAddr::V6(a)) => format!("[{}]:{}:{SSH_PORT}", a.ip(), a.port()),
        })
    }

    /// Keep `addr` for this sandbox's starts; true when it changed.
    pub fn set_listen(&self, addr: SocketAddr) -> Result<bool, RunError> {
        if self.listen()? == Some(addr) {
            return Ok(false);
        }
        self.make_dir()?;
        write_new(&self.listen_file(), format!("{addr}\n").as_bytes(), 0o600)?;
        Ok(true)
    }

    fn make_dir(&self) -> Result<(), RunError> {
        use std::os::unix::fs::PermissionsExt;
        let parent = self.dir.parent().expect("ssh dir has a parent");
        for d in [parent, self.dir.as_path()] {
            std::fs::create_dir_all(d).map_err(|e| RunError::Io(d.to_owned(), e))?;
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| RunError::Io(d.to_owned(), e))?;
        }
        Ok(())
    }

    /// Make what is missing: the project's key pair, the host key, and
    /// known_hosts pinning the host key under `alias`.
    pub fn ensure(&self) -> Result<(), RunError> {
        self.make_dir()?;
        let mut keys = vec![(self.host_key(), format!("sbx host {}", self.alias))];
        if !self.authorized().is_file() {
            keys.push((self.identity(), format!("sbx {}", self.alias)));
        }
        for (key, comment) in keys {
            let public = key.with_extension("pub");
            if key.is_file() && public.is_file() {
                continue;
            }
            // A half-made pair (an interrupted ssh-keygen) is made anew.
            for p in [&key, &public] {
                match std::fs::remove_file(p) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(RunError::Io(p.clone(), e));
                    }
                    _ => {}
                }
            }
            keygen(&key, &comment)?;
        }
        let host = std::fs::read_to_string(self.host_pub())
            .map_err(|e| RunError::Io(self.host_pub(), e))?;
        let line = known_hosts_line(&self.alias, &host)
            .ok_or_else(|| RunError::BadWorkspace(format!("{}: not an ed25519 public key: remove it (and host_ed25519) to make a new host key", self.host_pub().display())))?;
        if std::fs::read_to_string(self.known_hosts()).ok().as_deref() != Some(line.as_str()) {
            write_new(&self.known_hosts(), line.as_bytes(), 0o600)?;
        }
        Ok(())
    }

    /// Let `public` (one `ssh-ed25519` line) in instead of an identity made
    /// here, and make the host key: sshd's public host key line. Any
    /// identity made before is removed, so only `public` logs in.
    pub fn authorize(&self, public: &str) -> Result<String, RunError> {
        let line = public.trim();
        if known_hosts_line("x", line).is_none() || line.contains('\n') {
            return Err(RunError::Usage(format!(
                "{}: not one ssh-ed25519 public key",
                self.authorized().display()
            )));
        }
        self.make_dir()?;
        write_new(&self.authorized(), format!("{line}\n").as_bytes(), 0o600)?;
        for p in [self.identity(), self.identity_pub()] {
            match std::fs::remove_file(&p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(RunError::Io(p, e));
                }
                _ => {}
            }
        }
        self.ensure()?;
        std::fs::read_to_string(self.host_pub()).map_err(|e| RunError::Io(self.host_pub(), e))
    }

    /// The keys exist (made by a start with `[ssh] enabled`).
    pub fn made(&self) -> bool {
        self.identity().is_file() && self.host_key().is_file() && self.known_hosts().is_file()
    }
}

/// `ADDR:PORT` for `--ssh-listen` (`[::1]:2200` for IPv6); port 0 lets the
/// engine pick one.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>().map_err(|_| {
        format!("--ssh-listen {s:?}: not ADDR:PORT (e.g. 127.0.0.1:2222, 0.0.0.0:2222, [::1]:2222)")
    })
}

/// `ALIAS ssh-ed25519 BASE64` from a `.pub` line; None for anything else.
fn known_hosts_line(alias: &str, public: &str) -> Option<String> {
    let mut w = public.split_whitespace();
    let (kind, key) = (w.next()?, w.next()?);
    let b64 = |c: char| c.is_ascii_alphanumeric() || "+/=".contains(c);
    (kind == "ssh-ed25519" && key.chars().all(b64)).then(|| format!("{alias} {kind} {key}\n"))
}

fn keygen(key: &Path, comment: &str) -> Result<(), RunError> {
    let prog = std::env::var_os("SBX_SSH_KEYGEN")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "ssh-keygen".into());
    let out = Command::new(&prog)
        .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
        .arg(key)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => RunError::Usage(format!(
                "{}: not found: [ssh] needs OpenSSH's client tools on the host (`apt-get install openssh-client`)",
                prog.to_string_lossy()
            )),
            _ => RunError::Io(PathBuf::from(&prog), e),
        })?;
    if !out.status.success() {
        return Err(RunError::Build(format!(
            "ssh-keygen {}: {}",
            key.display(),
            docker::first_line(&String::from_utf8_lossy(&out.stderr))
        )));
    }
    Ok(())
}

/// A new ed25519 key pair, (private key in OpenSSH's format, public key
/// line), made by `ssh-keygen` in a 0700 directory of `scratch` that is
/// removed before this returns: the private key is the caller's alone.
pub fn new_pair(scratch: &Path, comment: &str) -> Result<(String, String), RunError> {
    use std::os::unix::fs::DirBuilderExt;
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = scratch.join(format!(".keygen-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new()
        .recursive(false)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| RunError::Io(dir.clone(), e))?;
    let key = dir.join("id_ed25519");
    let made = keygen(&key, comment).and_then(|()| {
        let read = |p: PathBuf| std::fs::read_to_string(&p).map_err(|e| RunError::Io(p, e));
        Ok((read(key.clone())?, read(key.with_extension("pub"))?))
    });
    let removed = std::fs::remove_dir_all(&dir).map_err(|e| RunError::Io(dir.clone(), e));
    let pair = made?;
    removed?;
    Ok(pair)
}

/// Where the host reaches `path`'s sandbox's sshd: (host, port).
pub fn endpoint_of(common: &CommonArgs, path: PathBuf) -> Result<(String, u16), BoxError> {
    let ws = Workspace::open(common, Some(path))?;
    Ok(endpoint(&ws)?)
}

/// `data` at `path`, replaced whole (a temporary file, then a rename).
fn write_new(path: &Path, data: &[u8], mode: u32) -> Result<(), RunError> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("new");
    let io = |p: &Path, e| RunError::Io(p.to_owned(), e);
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(|e| io(&tmp, e))?;
    f.write_all(data).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io(path, e))
}

/// Before a start: with `[ssh] enabled`, make the keys if missing and hand
/// the host key and the project's public key to the guest (its host
/// directory, root's alone inside); without, remove them, so the guest
/// starts no sshd.
pub fn stage(ws: &Workspace, container: &str) -> Result<(), RunError> {
    let dir = spec::host_dir(container);
    let (host, authorized) = if ws.loaded.config.ssh.enabled {
        let k = Keys::of(container);
        k.ensure()?;
        let read = |p: PathBuf| std::fs::read(&p).map_err(|e| RunError::Io(p, e));
        let public = if k.authorized().is_file() {
            k.authorized()
        } else {
            k.identity_pub()
        };
        (Some(read(k.host_key())?), Some(read(public)?))
    } else {
        (None, None)
    };
    spec::stage_file(&dir.join(HOST_KEY_HANDOFF), host.as_deref())?;
    spec::stage_file(&dir.join(AUTHORIZED_HANDOFF), authorized.as_deref())
}

/// Where the host reaches the sandbox's sshd: the holder's published port.
fn endpoint(ws: &Workspace) -> Result<(String, u16), RunError> {
    let out = docker::output(&["port", &ws.names.holder, &format!("{SSH_PORT}/tcp")])?;
    let addr = out
        .lines()
        .filter_map(|l| l.trim().parse::<SocketAddr>().ok())
        .min_by_key(|a| a.is_ipv6())
        .ok_or_else(|| {
            RunError::NoSandbox(format!(
                "{}: no published ssh port: set [ssh] enabled = true, then `sbx-run restart`",
                ws.names.container
            ))
        })?;
    // A wildcard listen is reached on loopback from here.
    let host = match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv6() => "::1".to_owned(),
        ip if ip.is_unspecified() => "127.0.0.1".to_owned(),
        ip => ip.to_string(),
    };
    Ok((host, addr.port()))
}

/// The workspace with `[ssh] enabled`, its sandbox running, and its keys.
fn ready(common: &CommonArgs, path: Option<PathBuf>) -> Result<(Workspace, Keys), BoxError> {
    let ws = Workspace::open(common, path.clone())?;
    if !ws.loaded.config.ssh.enabled {
        return Err(Box::new(RunError::Config(format!(
            "{}: [ssh] is off: set `[ssh] enabled = true` there, then `sbx-run restart`",
            ws.loaded.describe()
        ))));
    }
    let ws = crate::lifecycle::start(common, path, None)?;
    let keys = Keys::of(&ws.names.container);
    if !keys.made() {
        return Err(Box::new(RunError::NoSandbox(format!(
            "{}: no ssh keys yet: `sbx-run restart` makes them",
            ws.names.container
        ))));
    }
    Ok((ws, keys))
}

/// ssh's options that pin this sandbox: its key only, its host key only,
/// nothing forwarded from this machine.
fn client_options(keys: &Keys) -> Vec<(&'static str, String)> {
    vec![
        ("IdentityFile", keys.identity().display().to_string()),
        ("IdentitiesOnly", "yes".into()),
        ("IdentityAgent", "none".into()),
        ("HostKeyAlias", keys.alias.clone()),
        (
            "UserKnownHostsFile",
            keys.known_hosts().display().to_string(),
        ),
        ("GlobalKnownHostsFile", "/dev/null".into()),
        ("StrictHostKeyChecking", "yes".into()),
        ("ForwardAgent", "no".into()),
        ("ForwardX11", "no".into()),
    ]
}

/// `sbx-run ssh [PATH] [-- COMMAND]`: a session as the agent, through the
/// real `ssh` client with this project's key and pinned host key.
pub fn session(
    common: &CommonArgs,
    path: Option<PathBuf>,
    command: &[OsString],
) -> Result<ExitCode, BoxError> {
    use std::os::unix::process::CommandExt;
    let (ws, keys) = ready(common, path)?;
    let (host, port) = endpoint(&ws)?;
    let prog = std::env::var_os("SBX_SSH")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "ssh".into());
    let mut c = Command::new(&prog);
    // No user config: the options below decide, not a Host block elsewhere.
    c.args(["-F", "/dev/null", "-p", &port.to_string(), "-l", "agent"]);
    for (k, v) in client_options(&keys) {
        c.arg("-o").arg(format!("{k}={v}"));
    }
    if common.quiet {
        c.arg("-q");
    }
    c.arg(&host);
    if !command.is_empty() {
        c.arg("--").arg(remote_command(command));
    }
    let e = c.exec();
    Err(Box::new(match e.kind() {
        std::io::ErrorKind::NotFound => RunError::Usage(format!(
            "{}: not found: install OpenSSH's client (`apt-get install openssh-client`)",
            prog.to_string_lossy()
        )),
        _ => RunError::Io(PathBuf::from(prog), e),
    }))
}

/// ssh hands the server one string, which the agent's shell splits again:
/// each word quoted, so `-- sh -c 'exit 7'` runs as three words there.
fn remote_command(argv: &[OsString]) -> OsString {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let mut out = Vec::new();
    for (i, w) in argv.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        let b = w.as_bytes();
        let plain = !b.is_empty()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(c));
        if plain {
            out.extend_from_slice(b);
        } else {
            out.push(b'\'');
            for &c in b {
                if c == b'\'' {
                    out.extend_from_slice(b"'\\''");
                } else {
                    out.push(c);
                }
            }
            out.push(b'\'');
        }
    }
    OsString::from_vec(out)
}

/// `sbx-run ssh-key [PATH]`: the project's private key on stdout (the
/// public one with --public).
pub fn key(common: &CommonArgs, path: Option<PathBuf>, public: bool) -> Result<ExitCode, BoxError> {
    let ws = Workspace::open(common, path)?;
    let keys = Keys::of(&ws.names.container);
    if !keys.made() {
        return Err(Box::new(RunError::NoSandbox(format!(
            "{}: no ssh key yet: set `[ssh] enabled = true` in {}, then `sbx-run start` makes it",
            ws.names.container,
            ws.loaded.describe()
        ))));
    }
    let p = if public {
        keys.identity_pub()
    } else {
        keys.identity()
    };
    let data = std::fs::read(&p).map_err(|e| RunError::Io(p.clone(), e))?;
    let mut out = std::io::stdout().lock();
    let r = if common.json {
        output::json_line(
            &mut out,
            "ssh-key",
            &json!({"path": p.to_string_lossy(), "public": public, "key": String::from_utf8_lossy(&data)}),
        )
    } else {
        out.write_all(&data)
    };
    r.map_err(|e| RunError::Io("stdout".into(), e))?;
    Ok(Exit::Ok.into())
}

/// `sbx-run ssh-config [PATH]`: a Host block for ~/.ssh/config (VS Code
/// Remote-SSH reads it), pinned to this sandbox's key and host key.
pub fn config(common: &CommonArgs, path: Option<PathBuf>) -> Result<ExitCode, BoxError> {
    let (ws, keys) = ready(common, path)?;
    let (host, port) = endpoint(&ws)?;
    let mut out = std::io::stdout().lock();
    let r = if common.json {
        let mut data = json!({"host": keys.alias, "hostname": host, "port": port, "user": "agent"});
        for (k, v) in client_options(&keys) {
            data[k] = json!(v);
        }
        output::json_line(&mut out, "ssh-config", &data)
    } else {
        out.write_all(host_block(&keys.alias, &host, port, &client_options(&keys)).as_bytes())
    };
    r.map_err(|e| RunError::Io("stdout".into(), e))?;
    Ok(Exit::Ok.into())
}

/// One `Host` block; values with spaces quoted as ssh_config reads them.
fn host_block(alias: &str, host: &str, port: u16, opts: &[(&str, String)]) -> String {
    let q = |v: &str| {
        if v.contains(char::is_whitespace) {
            format!("\"{v}\"")
        } else {
            v.to_owned()
        }
    };
    let mut s = format!("Host {alias}\n  HostName {host}\n  Port {port}\n  User agent\n");
    for (k, v) in opts {
        s.push_str(&format!("  {k} {}\n", q(v)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller's key (sbx-server's) is the one let in: no identity pair
    /// is made here, and one made before is removed.
    #[test]
    fn an_authorized_key_replaces_the_identity() {
        if Command::new("ssh-keygen").arg("-?").output().is_err() {
            eprintln!("skipped: no ssh-keygen");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let k = Keys {
            dir: t.path().join("ssh").join("box"),
            alias: "box".into(),
        };
        k.ensure().unwrap();
        assert!(k.identity().is_file());
        let (private, public) = new_pair(t.path(), "c").unwrap();
        assert!(private.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"));
        assert_eq!(
            std::fs::read_dir(t.path()).unwrap().count(),
            1,
            "scratch left"
        );
        let host = k.authorize(&public).unwrap();
        assert!(host.starts_with("ssh-ed25519 "), "{host}");
        assert!(!k.identity().exists() && !k.identity_pub().exists());
        assert_eq!(
            std::fs::read_to_string(k.authorized()).unwrap().trim(),
            public.trim()
        );
        k.ensure().unwrap();
        assert!(!k.identity().exists(), "ensure made an identity again");
        for bad in ["ssh-rsa AAAA x", "", "ssh-ed25519 AAAA\nssh-ed25519 BBBB"] {
            assert!(k.authorize(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(parse_listen("0.0.0.0:2200").unwrap().port(), 2200);
        assert!(parse_listen("[::1]:22").unwrap().is_ipv6());
        for bad in ["2200", "localhost:22", "1.2.3.4", ""] {
            let e = parse_listen(bad).unwrap_err();
            assert!(e.contains("--ssh-listen") && e.contains("ADDR:PORT"), "{e}");
        }
    }

    #[test]
    fn known_hosts_only_from_an_ed25519_line() {
        assert_eq!(
            known_hosts_line("sbx-a", "ssh-ed25519 AAAAC3Nz+/= sbx host\n").unwrap(),
            "sbx-a ssh-ed25519 AAAAC3Nz+/=\n"
        );
        assert!(known_hosts_line("a", "ssh-rsa AAAA").is_none());
        assert!(
            known_hosts_line("a", "ssh-ed25519 AA\nAA").is_some_and(|l| l == "a ssh-ed25519 AA\n")
        );
        assert!(known_hosts_line("a", "ssh-ed25519 A,B").is_none());
        assert!(known_hosts_line("a", "").is_none());
    }

    #[test]
    fn remote_words_are_quoted_for_the_agents_shell() {
        let w = |v: &[&str]| -> Vec<OsString> { v.iter().map(OsString::from).collect() };
        assert_eq!(remote_command(&w(&["git", "status"])), "git status");
        assert_eq!(
            remote_command(&w(&["sh", "-c", "exit 7"])),
            "sh -c 'exit 7'"
        );
        assert_eq!(
            remote_command(&w(&["echo", "it's", ""])),
            "echo 'it'\\''s' ''"
        );
        assert_eq!(remote_command(&w(&["a;b", "$x"])), "'a;b' '$x'");
    }

    #[test]
    fn host_block_quotes_paths_with_spaces() {
        let b = host_block(
            "agent-sandbox-x-1",
            "127.0.0.1",
            40022,
            &[
                ("IdentityFile", "/home/a b/k".into()),
                ("StrictHostKeyChecking", "yes".into()),
            ],
        );
        assert_eq!(
            b,
            "Host agent-sandbox-x-1\n  HostName 127.0.0.1\n  Port 40022\n  User agent\n  IdentityFile \"/home/a b/k\"\n  StrictHostKeyChecking yes\n"
        );
    }
}
