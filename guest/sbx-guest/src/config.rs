//! Who the agent is (from sbx-run's environment) and which services the
//! guest supervises (`/etc/sbx/guest.toml` in the image). A root service,
//! such as the git broker, is one table there:
//!
//! ```toml
//! [services.git-broker]
//! command = ["sbx-git-guard", "serve", "--socket", "/run/sbx-git/broker.sock"]
//! user = "root"
//! ready_socket = "/run/sbx-git/broker.sock"
//! ```
//!
//! With `ready_socket`, the agent's command starts (and the status says
//! ready) only once that socket accepts connections.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{var}={value}: not a uid/gid number (unset it for the default 1000)")]
    BadId { var: &'static str, value: String },
    #[error("{var}=0: the agent never runs as root (set a non-zero id)")]
    Root { var: &'static str },
    #[error("{file}: {msg}")]
    File { file: String, msg: String },
}

/// The agent's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agent {
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

impl Agent {
    /// From `SBX_AGENT_UID`, `SBX_AGENT_GID`, `SBX_AGENT_HOME`, given as a
    /// lookup so tests need not touch the process environment.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let id = |var: &'static str| -> Result<u32, ConfigError> {
            match get(var).filter(|v| !v.is_empty()) {
                None => Ok(1000),
                Some(v) => match v.parse::<u32>() {
                    Ok(0) => Err(ConfigError::Root { var }),
                    Ok(n) => Ok(n),
                    Err(_) => Err(ConfigError::BadId { var, value: v }),
                },
            }
        };
        Ok(Self {
            uid: id("SBX_AGENT_UID")?,
            gid: id("SBX_AGENT_GID")?,
            home: get("SBX_AGENT_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/home/agent")),
        })
    }

    pub fn creds(&self) -> sbx_sys::Creds {
        sbx_sys::Creds {
            uid: self.uid,
            gid: self.gid,
            groups: vec![self.gid],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum User {
    /// The agent's uid, no capabilities (the default).
    #[default]
    Agent,
    /// Root with the guest's remaining capabilities: for brokers the agent
    /// talks to over a socket, never for anything the agent controls.
    Root,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    pub command: Vec<String>,
    #[serde(default)]
    pub user: User,
    /// A unix socket the service listens on, awaited before the agent starts.
    #[serde(default)]
    pub ready_socket: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestFile {
    #[serde(default)]
    pub services: BTreeMap<String, Service>,
}

/// The services file; a missing file means none.
pub fn load(path: &Path) -> Result<GuestFile, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(GuestFile::default()),
        Err(e) => {
            return Err(ConfigError::File {
                file: path.display().to_string(),
                msg: e.to_string(),
            });
        }
    };
    parse(&text).map_err(|msg| ConfigError::File {
        file: path.display().to_string(),
        msg,
    })
}

pub fn parse(text: &str) -> Result<GuestFile, String> {
    let f: GuestFile = toml::from_str(text).map_err(|e| e.to_string().trim().replace('\n', " "))?;
    for (name, s) in &f.services {
        if s.command.is_empty() || s.command[0].is_empty() {
            return Err(format!(
                "services.{name}.command: give the program and its arguments"
            ));
        }
        if s.ready_socket.as_ref().is_some_and(|p| !p.is_absolute()) {
            return Err(format!(
                "services.{name}.ready_socket: give an absolute path"
            ));
        }
    }
    Ok(f)
}

/// The environment of a process the guest starts for the agent: the
/// container's own, with the agent's identity and home, and `SBX_AGENT`.
pub fn agent_env(
    base: impl IntoIterator<Item = (OsString, OsString)>,
    agent: &Agent,
    name: &str,
) -> Vec<(OsString, OsString)> {
    let drop = ["HOME", "USER", "LOGNAME", "SBX_AGENT"];
    let mut agent_name = None;
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    for (k, v) in base {
        if k == "SBX_AGENT" && !v.is_empty() {
            agent_name = Some(v);
        } else if !drop.iter().any(|d| k == *d) {
            env.push((k, v));
        }
    }
    env.push(("HOME".into(), agent.home.clone().into_os_string()));
    env.push(("USER".into(), "agent".into()));
    env.push(("LOGNAME".into(), "agent".into()));
    env.push((
        "SBX_AGENT".into(),
        agent_name.unwrap_or_else(|| name.into()),
    ));
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(vars: &[(&str, &str)]) -> Result<Agent, ConfigError> {
        let m: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Agent::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn agent_identity_defaults_and_refuses_root() {
        assert_eq!(
            agent(&[]).unwrap(),
            Agent {
                uid: 1000,
                gid: 1000,
                home: "/home/agent".into()
            }
        );
        assert_eq!(
            agent(&[("SBX_AGENT_UID", "1234"), ("SBX_AGENT_GID", "99")])
                .unwrap()
                .uid,
            1234
        );
        assert_eq!(
            agent(&[("SBX_AGENT_UID", "0")]),
            Err(ConfigError::Root {
                var: "SBX_AGENT_UID"
            })
        );
        assert_eq!(
            agent(&[("SBX_AGENT_GID", "0")]),
            Err(ConfigError::Root {
                var: "SBX_AGENT_GID"
            })
        );
        assert!(matches!(
            agent(&[("SBX_AGENT_UID", "-1")]),
            Err(ConfigError::BadId { .. })
        ));
        assert!(matches!(
            agent(&[("SBX_AGENT_UID", "root")]),
            Err(ConfigError::BadId { .. })
        ));
    }

    #[test]
    fn services_parse_strictly() {
        let f = parse(
            "[services.git-broker]\ncommand = [\"sbx-git-guard\", \"serve\"]\nuser = \"root\"\n",
        )
        .unwrap();
        assert_eq!(f.services["git-broker"].user, User::Root);
        assert_eq!(f.services["git-broker"].ready_socket, None);
        let f = parse("[services.b]\ncommand = [\"b\"]\nready_socket = \"/run/b.sock\"\n").unwrap();
        assert_eq!(
            f.services["b"].ready_socket.as_deref(),
            Some(Path::new("/run/b.sock"))
        );
        let f = parse("[services.ttyd]\ncommand = [\"ttyd\"]\n").unwrap();
        assert_eq!(f.services["ttyd"].user, User::Agent);
        for bad in [
            "[services.x]\ncommand = []\n",
            "[services.x]\ncommand = [\"a\"]\nuser = \"admin\"\n",
            "[services.x]\ncommand = [\"a\"]\nrestart = 1\n",
            "[services.x]\ncommand = [\"a\"]\nready_socket = \"run/x.sock\"\n",
            "[other]\n",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn agent_env_replaces_identity() {
        let a = agent(&[]).unwrap();
        let env = agent_env(
            [
                ("HOME".into(), "/root".into()),
                ("PATH".into(), "/bin".into()),
            ],
            &a,
            "sleep",
        );
        assert!(env.contains(&("HOME".into(), "/home/agent".into())));
        assert!(env.contains(&("PATH".into(), "/bin".into())));
        assert!(!env.contains(&("HOME".into(), "/root".into())));
    }
}
