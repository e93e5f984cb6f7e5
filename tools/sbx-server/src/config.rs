//! A project's `.agent-sandbox/config.toml`, from the request (TOML text,
//! or JSON of the same schema) or the server's default file: read by
//! sbx-core's parser, the one every sbx tool obeys, then held to the keys
//! a project may set. The rest (host paths, mounts, host tools, the
//! server's environment, the backup store, the firewall's off switch) is
//! the server's.

use std::path::Path;

use sbx_core::config::{Config, Size};

/// The keys a project may set, by table; `*`: every key of that table.
const PROJECT_KEYS: &[(&str, &[&str])] = &[
    (
        "sandbox",
        &["memory", "cpus", "pids", "protected", "enabled"],
    ),
    ("filesystem", &["*"]),
    // allow-external turns the firewall off, which also keeps sandboxes
    // from the host's network and cloud metadata: the server's.
    (
        "network",
        &[
            "allow-domains",
            "required",
            "registries",
            "github",
            "allow-git",
            "allow-localhost",
            "mode",
            "dns-types",
        ],
    ),
    ("git", &["*"]),
];

/// The server's caps on what one sandbox may ask for.
#[derive(Debug, Clone)]
pub struct Caps {
    pub cpus: f64,
    pub memory: Size,
}

/// Why a project's config is refused.
#[derive(Debug, PartialEq)]
pub enum Refused {
    /// Not a config sbx accepts: sbx-core's message, naming the key.
    Invalid(String),
    /// Keys the server owns, named.
    ServerOwned(Vec<String>),
    /// Asks for more than the server's caps.
    OverCap(String),
}

/// Where messages say the config is.
pub const NAME: &str = ".agent-sandbox/config.toml";

/// The TOML text of a config given as TOML text or as a JSON object.
pub fn text_of(v: &serde_json::Value) -> Result<String, Refused> {
    match v {
        serde_json::Value::String(s) => Ok(s.clone()),
        serde_json::Value::Object(_) => {
            let t: toml::Table = serde_json::from_value(v.clone())
                .map_err(|e| Refused::Invalid(format!("config: {e}")))?;
            toml::to_string(&t).map_err(|e| Refused::Invalid(format!("config: {e}")))
        }
        _ => Err(Refused::Invalid(
            "config: TOML text or a JSON object of .agent-sandbox/config.toml's keys".into(),
        )),
    }
}

/// `text` checked: by sbx-core's parser, then against [`PROJECT_KEYS`],
/// then against the caps. Ok: the parsed config.
pub fn check(text: &str, caps: &Caps) -> Result<Config, Refused> {
    let cfg = sbx_core::config::parse_toml(text, Path::new(NAME))
        .map_err(|e| Refused::Invalid(e.to_string()))?;
    // Parsed once more as a table, for the names the config spelled out.
    let t: toml::Table = text
        .parse()
        .map_err(|e| Refused::Invalid(format!("{NAME}: {e}")))?;
    let mut owned = Vec::new();
    for (table, v) in &t {
        let allowed = PROJECT_KEYS.iter().find(|(n, _)| n == table).map(|k| k.1);
        match (allowed, v.as_table()) {
            (Some(keys), Some(inner)) if !keys.contains(&"*") => owned.extend(
                inner
                    .keys()
                    .filter(|k| !keys.contains(&k.as_str()))
                    .map(|k| format!("{table}.{k}")),
            ),
            (Some(_), _) => {}
            (None, _) => owned.push(table.clone()),
        }
    }
    if !owned.is_empty() {
        return Err(Refused::ServerOwned(owned));
    }
    if cfg.sandbox.cpus.0 > caps.cpus && asked(&t, "cpus") {
        return Err(Refused::OverCap(format!(
            "sandbox.cpus = {} is over this server's {} per sandbox",
            cfg.sandbox.cpus.0, caps.cpus
        )));
    }
    if cfg.sandbox.memory.bytes > caps.memory.bytes && asked(&t, "memory") {
        return Err(Refused::OverCap(format!(
            "sandbox.memory = \"{}\" is over this server's \"{}\" per sandbox",
            cfg.sandbox.memory.text, caps.memory.text
        )));
    }
    Ok(cfg)
}

/// Whether `[sandbox].key` is spelled out (not sbx's default).
fn asked(t: &toml::Table, key: &str) -> bool {
    t.get("sandbox")
        .and_then(toml::Value::as_table)
        .is_some_and(|s| s.contains_key(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> Caps {
        Caps {
            cpus: 2.0,
            memory: Size::parse("4g").unwrap(),
        }
    }

    #[test]
    fn only_a_projects_keys_pass() {
        assert!(check("[network]\nallow-domains = [\"a.example\"]\n", &caps()).is_ok());
        assert_eq!(
            check(
                "[environment]\npass = [\"JWT_SECRET\"]\n[sandbox]\nports = [\"80\"]\n",
                &caps()
            )
            .unwrap_err(),
            Refused::ServerOwned(vec!["environment".into(), "sandbox.ports".into()])
        );
        assert!(matches!(
            check("[network]\nallow-external = true\n", &caps()),
            Err(Refused::ServerOwned(k)) if k == ["network.allow-external"]
        ));
        assert!(matches!(
            check("[sandbox]\ncpus = 3\n", &caps()),
            Err(Refused::OverCap(m)) if m.contains("sandbox.cpus")
        ));
        // sbx's default memory (4g) is not asked for: under a lower cap it
        // is the cap, set at start, not a refusal.
        let low = Caps {
            cpus: 1.0,
            memory: Size::parse("1g").unwrap(),
        };
        assert!(check("", &low).is_ok());
        assert!(matches!(
            check("[sandbox]\nmemry = \"1g\"\n", &caps()),
            Err(Refused::Invalid(m)) if m.contains("memry")
        ));
    }
}
