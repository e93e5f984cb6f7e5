//! `[ssh] enabled`: sshd as the agent, never root. The host made the keys
//! and left the host key and the project's public key in the host directory
//! (root's alone inside); the guest copies them with a config of its own into
//! a root-owned directory the agent cannot change, and supervises sshd like
//! any agent service. sshd's log comes to the guest on a pipe: each session's
//! start and end, and each refused key, become audit records (sshd runs as
//! the agent, so they are marked as the agent's, not verified).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use sbx_core::audit::{Entry, Outcome, Peer};

/// sshd's files in the sandbox: root's 0755 directory, root's 0644 files.
pub const DIR: &str = "/run/sbx-ssh";
pub const SSHD: &str = "/usr/sbin/sshd";
/// What sbx-run leaves in the host directory (sbx_run::ssh).
pub const HOST_KEY_HANDOFF: &str = "ssh_host_ed25519";
pub const AUTHORIZED_HANDOFF: &str = "ssh_authorized_keys";

/// sshd's config. Only the project's key, as the agent; no password, no
/// PAM (root's business). Local forwarding to the sandbox's own loopback
/// only, which VS Code Remote-SSH needs (its server listens there); sshd
/// opens those connections as the agent, so the firewall judges them like
/// any other. Everything that would open a way out of the sandbox through
/// the client (remote forwarding, agent and X11 forwarding, tunnels, unix
/// sockets) is off, and nothing of the client's environment is accepted.
pub fn sshd_config(dir: &Path, port: u16, setenv: &[(String, String)]) -> String {
    let d = dir.display();
    let mut s = format!(
        "# Written by sbx-guest at each start ([ssh] enabled).\n\
         Port {port}\n\
         HostKey {d}/host_ed25519\n\
         AuthorizedKeysFile {d}/authorized_keys\n\
         AuthorizedPrincipalsFile none\n\
         PidFile none\n\
         UsePAM no\n\
         AllowUsers agent\n\
         PubkeyAuthentication yes\n\
         AuthenticationMethods publickey\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         HostbasedAuthentication no\n\
         PermitEmptyPasswords no\n\
         StrictModes yes\n\
         MaxAuthTries 3\n\
         AllowTcpForwarding local\n\
         PermitOpen localhost:* 127.0.0.1:* [::1]:*\n\
         PermitListen none\n\
         GatewayPorts no\n\
         AllowStreamLocalForwarding no\n\
         AllowAgentForwarding no\n\
         X11Forwarding no\n\
         PermitTunnel no\n\
         PermitUserEnvironment no\n\
         PermitUserRC no\n\
         PrintMotd no\n\
         PrintLastLog no\n\
         LogLevel VERBOSE\n\
         Subsystem sftp internal-sftp\n"
    );
    if !setenv.is_empty() {
        s.push_str("SetEnv");
        for (k, v) in setenv {
            s.push_str(&format!(" \"{k}={v}\""));
        }
        s.push('\n');
    }
    s
}

/// The agent's variables a session gets as well (sshd makes its own
/// environment): those whose value sshd's config can hold as it is.
pub fn session_env(env: &[(std::ffi::OsString, std::ffi::OsString)]) -> Vec<(String, String)> {
    const KEEP: &[&str] = &["SBX_WORKSPACE", "SBX_BRANCH", "LANG", "TZ"];
    let plain = |v: &str| {
        !v.is_empty()
            && v.chars()
                .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\' && c != '#')
    };
    let mut out: Vec<(String, String)> = env
        .iter()
        .filter_map(|(k, v)| Some((k.to_str()?, v.to_str()?)))
        .filter(|(k, v)| KEEP.contains(k) && plain(v))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    out.push(("SBX_AGENT".into(), "ssh".into()));
    out
}

/// Copy the host's keys and write the config into `dir`, made anew.
pub fn install(
    sshd: &Path,
    shared: &Path,
    dir: &Path,
    port: u16,
    setenv: &[(String, String)],
) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let read = |name: &str| {
        let p = shared.join(name);
        std::fs::read(&p).map_err(|e| {
            format!(
                "[ssh] enabled but {}: {e} (sbx-run makes the keys at start: start it with this sbx-run)",
                p.display()
            )
        })
    };
    if !sshd.exists() {
        return Err(format!(
            "{} is not in the image: rebuild it (`sbx-run build-base`, then `sbx-run start --build`)",
            sshd.display()
        ));
    }
    let host = read(HOST_KEY_HANDOFF)?;
    let authorized = read(AUTHORIZED_HANDOFF)?;
    let one_key = std::str::from_utf8(&authorized)
        .ok()
        .map(|t| t.lines().filter(|l| !l.trim().is_empty()).count() == 1)
        .unwrap_or(false);
    if !one_key || !authorized.starts_with(b"ssh-ed25519 ") {
        return Err(format!(
            "{}: not one ed25519 public key",
            shared.join(AUTHORIZED_HANDOFF).display()
        ));
    }
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    // A restarted container's old files are root's and read-only: removed.
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(dir, e)),
        _ => {}
    }
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| io(dir, e))?;
    // The host key is readable by the agent: sshd runs as the agent, so
    // the agent could read it from sshd anyway (security.md says what
    // that means). sshd checks a key's modes only when it owns the file.
    for (name, data) in [
        ("host_ed25519", host.as_slice()),
        ("authorized_keys", authorized.as_slice()),
        ("sshd_config", sshd_config(dir, port, setenv).as_bytes()),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, data).map_err(|e| io(&p, e))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444))
            .map_err(|e| io(&p, e))?;
    }
    Ok(())
}

/// sshd's argv: in the foreground, logging to stderr (the guest's pipe).
pub fn argv(dir: &Path) -> Vec<std::ffi::OsString> {
    vec![
        SSHD.into(),
        "-D".into(),
        "-e".into(),
        "-f".into(),
        dir.join("sshd_config").into_os_string(),
    ]
}

/// What one line of sshd's log means for the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A session began: the peer ("ADDR port N") and the key.
    Start {
        peer: String,
        key: String,
    },
    End {
        peer: String,
    },
    /// A login refused: the peer and why.
    Refused {
        peer: String,
        why: String,
    },
}

/// The part of `line` after `marker`, up to `end` (or the line's end).
fn after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|i| &line[i + marker.len()..])
}

fn peer_of(rest: &str) -> String {
    // "ADDR port N[ ssh2…| [preauth]|:…]": the address and port only.
    let w: Vec<&str> = rest.split_whitespace().take(3).collect();
    match w.as_slice() {
        [addr, "port", n, ..] => format!("{addr} port {}", n.trim_end_matches([':', ','])),
        _ => rest.chars().take(80).collect(),
    }
}

pub fn parse(line: &str) -> Option<Event> {
    if let Some(rest) = after(line, "Accepted publickey for agent from ") {
        let key = rest.split_once("ssh2: ").map_or("", |(_, k)| k).trim();
        return Some(Event::Start {
            peer: peer_of(rest),
            key: key.chars().take(120).collect(),
        });
    }
    for m in [
        "Disconnected from user agent ",
        "Connection closed by user agent ",
        "Connection reset by user agent ",
    ] {
        if let Some(rest) = after(line, m) {
            return Some(Event::End {
                peer: peer_of(rest),
            });
        }
    }
    if let Some(rest) = after(line, "Failed publickey for ") {
        let (user, rest) = rest.split_once(" from ")?;
        let key = rest.split_once("ssh2: ").map_or("", |(_, k)| k).trim();
        return Some(Event::Refused {
            peer: peer_of(rest),
            why: format!(
                "not this project's key: {} as {}",
                key.chars().take(120).collect::<String>(),
                user.chars().take(64).collect::<String>()
            ),
        });
    }
    if let Some(rest) = after(line, "Connection closed by authenticating user agent ") {
        return Some(Event::Refused {
            peer: peer_of(rest),
            why: "no key of this project's offered".into(),
        });
    }
    if let Some(rest) = after(line, "Invalid user ") {
        let (user, rest) = rest.split_once(" from ")?;
        return Some(Event::Refused {
            peer: peer_of(rest),
            why: format!(
                "not the agent's user: {}",
                user.chars().take(64).collect::<String>()
            ),
        });
    }
    None
}

/// The audit record of an event; `pid`/`uid`: sshd's, the agent's.
pub fn record(ev: &Event, pid: i32, uid: u32) -> Entry {
    let (op, target, result, reason) = match ev {
        Event::Start { peer, key } => (
            "ssh-session-start",
            peer,
            Outcome::Allowed,
            Some(key.clone()),
        ),
        Event::End { peer } => ("ssh-session-end", peer, Outcome::Allowed, None),
        Event::Refused { peer, why } => ("ssh-login", peer, Outcome::Blocked, Some(why.clone())),
    };
    Entry {
        timestamp: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        tool: "sshd".into(),
        agent: "ssh".into(),
        operation: op.into(),
        target: target.clone(),
        result,
        policy: "ssh".into(),
        reason,
        // No source: sshd is the agent's process, its lines unverified.
        peer: Some(Peer {
            pid,
            uid,
            source: None,
        }),
        origin: None,
    }
}

/// Read sshd's log until it ends: each line to the container's log, each
/// event to `emit`; an open session holds the sandbox from an idle stop.
pub fn follow(r: impl std::io::Read, mut emit: impl FnMut(&Event)) {
    let mut open: BTreeMap<String, crate::idle::Live> = BTreeMap::new();
    for line in std::io::BufReader::new(r).split(b'\n') {
        let Ok(line) = line else { break };
        let line = String::from_utf8_lossy(&line);
        let line = line.trim_end_matches('\r');
        eprintln!("sshd: {}", line.escape_debug());
        let Some(ev) = parse(line) else { continue };
        match &ev {
            Event::Start { peer, .. } => {
                open.insert(peer.clone(), crate::idle::Live::new());
            }
            Event::End { peer } => {
                open.remove(peer);
                crate::idle::touch();
            }
            Event::Refused { .. } => {}
        }
        emit(&ev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sshd_lines() {
        assert_eq!(
            parse(
                "Accepted publickey for agent from 172.18.0.1 port 40122 ssh2: ED25519 SHA256:abc"
            ),
            Some(Event::Start {
                peer: "172.18.0.1 port 40122".into(),
                key: "ED25519 SHA256:abc".into()
            })
        );
        assert_eq!(
            parse("Disconnected from user agent 172.18.0.1 port 40122"),
            Some(Event::End {
                peer: "172.18.0.1 port 40122".into()
            })
        );
        assert_eq!(
            parse("Failed publickey for agent from 172.18.0.1 port 40200 ssh2: ED25519 SHA256:zzz"),
            Some(Event::Refused {
                peer: "172.18.0.1 port 40200".into(),
                why: "not this project's key: ED25519 SHA256:zzz as agent".into()
            })
        );
        assert!(matches!(
            parse("Invalid user root from 172.18.0.1 port 1"),
            Some(Event::Refused { .. })
        ));
        assert_eq!(parse("Server listening on 0.0.0.0 port 2222."), None);
        assert_eq!(
            parse("Received disconnect from 1.2.3.4 port 5:11: bye"),
            None
        );
    }

    #[test]
    fn config_refuses_what_leads_out() {
        let c = sshd_config(Path::new("/run/sbx-ssh"), 2222, &session_env(&[]));
        for line in [
            "UsePAM no",
            "PasswordAuthentication no",
            "AllowTcpForwarding local",
            "PermitListen none",
            "AllowAgentForwarding no",
            "X11Forwarding no",
            "AllowStreamLocalForwarding no",
            "PermitTunnel no",
            "AuthorizedKeysFile /run/sbx-ssh/authorized_keys",
            "SetEnv \"SBX_AGENT=ssh\"",
        ] {
            assert!(c.lines().any(|l| l == line), "{line} missing:\n{c}");
        }
        assert!(!c.contains("AcceptEnv"));
    }

    #[test]
    fn install_takes_one_ed25519_key_and_nothing_else() {
        let t = tempfile::tempdir().unwrap();
        let e = install(
            &t.path().join("no-sshd"),
            t.path(),
            &t.path().join("d"),
            2222,
            &[],
        )
        .unwrap_err();
        assert!(e.contains("not in the image"), "{e}");
        // Any file stands for sshd here.
        let sshd = Path::new("/bin/sh");
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("sshd");
        let e = install(sshd, t.path(), &dir, 2222, &[]).unwrap_err();
        assert!(e.contains(HOST_KEY_HANDOFF), "{e}");
        std::fs::write(t.path().join(HOST_KEY_HANDOFF), "k").unwrap();
        std::fs::write(
            t.path().join(AUTHORIZED_HANDOFF),
            "ssh-ed25519 AAAA a\nssh-ed25519 BBBB b\n",
        )
        .unwrap();
        assert!(
            install(sshd, t.path(), &dir, 2222, &[]).is_err(),
            "two keys taken"
        );
        std::fs::write(t.path().join(AUTHORIZED_HANDOFF), "ssh-ed25519 AAAA a\n").unwrap();
        install(sshd, t.path(), &dir, 2222, &[]).unwrap();
        use std::os::unix::fs::PermissionsExt;
        for f in ["host_ed25519", "authorized_keys", "sshd_config"] {
            let m = std::fs::metadata(dir.join(f)).unwrap().permissions().mode();
            assert_eq!(m & 0o777, 0o444, "{f}");
        }
        // Made anew at the next start, over the read-only files.
        install(sshd, t.path(), &dir, 2222, &[]).unwrap();
    }

    #[test]
    fn only_plain_values_reach_the_session() {
        let env: Vec<_> = [
            ("SBX_WORKSPACE", "/workspace/app"),
            ("LANG", "a b"),
            ("TZ", "x\"y"),
            ("ANTHROPIC_API_KEY", "sk"),
        ]
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
        let s = session_env(&env);
        assert_eq!(
            s,
            [
                ("SBX_WORKSPACE".to_owned(), "/workspace/app".to_owned()),
                ("SBX_AGENT".into(), "ssh".into())
            ]
        );
    }
}
