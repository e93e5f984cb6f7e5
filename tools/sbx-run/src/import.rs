//! `sbx-run init --import .uds/config.yaml`: the policy seed's sandbox
//! config (its AC-6 example) turned into `.agent-sandbox/config.toml`, so a
//! project that has one moves over without retyping it. sbx reads one
//! format (TOML, one parser in sbx-core); a YAML config is converted once,
//! with a note per key saying where it went or why it could not go
//! anywhere, rather than read at every start by a second parser.

use std::fmt::Write as _;
use std::path::Path;

use saphyr::{LoadableYamlNode, Scalar, Yaml};

/// What became of one key of the YAML file: one line for the user.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Note {
    /// The key's path in the YAML file: `sandbox.network.allow-git`.
    pub key: String,
    pub mapped: bool,
    pub text: String,
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.mapped { "mapped" } else { "not mapped" };
        write!(f, "{}: {what}: {}", self.key, self.text)
    }
}

/// The converted config: TOML text (notes as comments) and the notes.
#[derive(Debug)]
pub struct Imported {
    pub toml: String,
    pub notes: Vec<Note>,
}

#[derive(Clone, Copy)]
enum Kind {
    Bool,
    List,
}

/// YAML key (under `sandbox:`) -> (TOML table, key, kind). The seed's
/// names are sbx's, so most keys keep their name; `*-patterns` are the
/// policy files' spellings of `blocked` and `allowed`, and
/// `disallowed-tools` is AC-4's spelling of `[tools] disallowed`.
const MAP: [(&str, &str, &str, Kind); 11] = [
    (
        "filesystem.blocked-patterns",
        "filesystem",
        "blocked",
        Kind::List,
    ),
    (
        "filesystem.allowed-patterns",
        "filesystem",
        "allowed",
        Kind::List,
    ),
    (
        "environment.filter-secrets",
        "environment",
        "filter-secrets",
        Kind::Bool,
    ),
    ("environment.allow", "environment", "allow", Kind::List),
    ("environment.block", "environment", "block", Kind::List),
    ("environment.pass", "environment", "pass", Kind::List),
    (
        "network.allow-external",
        "network",
        "allow-external",
        Kind::Bool,
    ),
    (
        "network.allow-localhost",
        "network",
        "allow-localhost",
        Kind::Bool,
    ),
    ("network.allow-git", "network", "allow-git", Kind::Bool),
    (
        "network.allow-domains",
        "network",
        "allow-domains",
        Kind::List,
    ),
    ("tools.disallowed-tools", "tools", "disallowed", Kind::List),
];

/// Convert `text`, the YAML file at `path` (named in messages). Errors are
/// one line naming the file, the key and what to do; the result has been
/// loaded by sbx-core's parser, so it is a config every tool accepts.
pub fn from_yaml(text: &str, path: &Path) -> Result<Imported, String> {
    let file = path.display();
    let docs = Yaml::load_from_str(text).map_err(|e| format!("{file}: not valid YAML: {e}"))?;
    let doc = match docs.as_slice() {
        [d] => d,
        [] => return Err(format!("{file}: empty: nothing to import")),
        _ => return Err(format!("{file}: holds several YAML documents: import one")),
    };
    let mut leaves = Vec::new();
    flatten(doc, "", &mut leaves, &file.to_string())?;
    let mut notes = Vec::new();
    // table -> lines, in MAP's order of tables.
    let mut tables: Vec<(&str, Vec<String>)> = Vec::new();
    for (key, value) in &leaves {
        let Some(rest) = key.strip_prefix("sandbox.") else {
            notes.push(Note {
                key: key.clone(),
                mapped: false,
                text: "outside `sandbox:`, which is all sbx reads".into(),
            });
            continue;
        };
        if let Some((_, table, name, kind)) = MAP.iter().find(|(k, ..)| *k == rest) {
            let v = toml_value(value, *kind).ok_or_else(|| {
                let want = match kind {
                    Kind::Bool => "true or false",
                    Kind::List => "a list of strings",
                };
                format!("{file}: {key}: expected {want}, got {}", describe(value))
            })?;
            match tables.iter_mut().find(|(t, _)| t == table) {
                Some((_, lines)) => lines.push(format!("{name} = {v}")),
                None => tables.push((table, vec![format!("{name} = {v}")])),
            }
            notes.push(Note {
                key: key.clone(),
                mapped: true,
                text: format!("[{table}] {name}"),
            });
            continue;
        }
        notes.push(match (rest, value) {
            ("enabled", Yaml::Value(Scalar::Boolean(true))) => Note {
                key: key.clone(),
                mapped: true,
                text: "nothing to write: sbx is always on".into(),
            },
            ("enabled", _) => {
                return Err(format!(
                    "{file}: {key}: sbx has no off switch in its config: remove the key, and run the agent without sbx-run if it must run unguarded"
                ));
            }
            ("filesystem.root", Yaml::Value(Scalar::String(s)))
                if matches!(s.as_ref(), "./" | "." | "") =>
            {
                Note {
                    key: key.clone(),
                    mapped: true,
                    text: "nothing to write: the sandbox mounts only the project's root".into(),
                }
            }
            ("filesystem.root", _) => Note {
                key: key.clone(),
                mapped: false,
                text: "sbx mounts the whole project (its repository root); keep secrets out with [filesystem] blocked".into(),
            },
            ("tools.enforce-agent-permissions", _) => Note {
                key: key.clone(),
                mapped: false,
                text: "sbx reads no agent definitions; list the tools to refuse in [tools] disallowed, e.g. disallowed = [\"Write\", \"Edit\"]".into(),
            },
            _ => Note {
                key: key.clone(),
                mapped: false,
                text: "not a key sbx knows; see docs/config.md for what it has".into(),
            },
        });
    }
    let mut out = format!(
        "# Imported from {file} by `sbx-run init --import`; every key of it below.\n\
         # Check it with: sbx-envfilter --check-config; every key: docs/config.md\n"
    );
    for n in &notes {
        let _ = writeln!(out, "# {n}");
    }
    for (table, lines) in &tables {
        let _ = write!(out, "\n[{table}]\n");
        for l in lines {
            let _ = writeln!(out, "{l}");
        }
    }
    sbx_core::config::parse_toml(&out, Path::new("config.toml"))
        .map_err(|e| format!("{file}: the converted config does not load: {e}"))?;
    Ok(Imported { toml: out, notes })
}

/// Every leaf (a scalar or a list) under its dotted key, in file order.
fn flatten<'a>(
    node: &'a Yaml<'a>,
    prefix: &str,
    out: &mut Vec<(String, &'a Yaml<'a>)>,
    file: &str,
) -> Result<(), String> {
    let Yaml::Mapping(m) = node else {
        if prefix.is_empty() {
            return Err(format!(
                "{file}: expected a mapping at the top (sandbox: …)"
            ));
        }
        out.push((prefix.to_owned(), node));
        return Ok(());
    };
    for (k, v) in m {
        let Yaml::Value(Scalar::String(k)) = k else {
            return Err(format!(
                "{file}: {}: a key that is not a string ({})",
                if prefix.is_empty() {
                    "top level"
                } else {
                    prefix
                },
                describe(k)
            ));
        };
        let key = if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        };
        flatten(v, &key, out, file)?;
    }
    Ok(())
}

fn toml_value(v: &Yaml, kind: Kind) -> Option<toml::Value> {
    match (kind, v) {
        (Kind::Bool, Yaml::Value(Scalar::Boolean(b))) => Some(toml::Value::Boolean(*b)),
        (Kind::List, Yaml::Sequence(items)) => items
            .iter()
            .map(|i| match i {
                Yaml::Value(Scalar::String(s)) => Some(toml::Value::String(s.to_string())),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(toml::Value::Array),
        _ => None,
    }
}

fn describe(v: &Yaml) -> String {
    match v {
        Yaml::Value(Scalar::String(s)) => format!("the string {s:?}"),
        Yaml::Value(Scalar::Boolean(b)) => format!("{b}"),
        Yaml::Value(Scalar::Integer(i)) => format!("the number {i}"),
        Yaml::Value(Scalar::FloatingPoint(f)) => format!("the number {f}"),
        Yaml::Value(Scalar::Null) => "nothing (null)".into(),
        Yaml::Sequence(_) => "a list".into(),
        Yaml::Mapping(_) => "a mapping".into(),
        _ => "a value sbx cannot read (a tag or an alias)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The policy seed's AC-6 example, byte for byte.
    const SEED_AC6: &str = include_str!("../tests/fixtures/uds-config.yaml");

    #[test]
    fn the_seeds_example_converts_key_by_key() {
        let got = from_yaml(SEED_AC6, Path::new(".uds/config.yaml")).unwrap();
        let cfg = sbx_core::config::parse_toml(&got.toml, Path::new("config.toml")).unwrap();
        let globs = |l: &sbx_core::config::Unique<sbx_core::config::PathGlob>| {
            l.iter().map(|g| g.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(
            globs(&cfg.filesystem.blocked),
            ["**/.env*", "**/*.pem", "**/credentials*"]
        );
        assert_eq!(
            globs(cfg.filesystem.allowed.as_ref().unwrap()),
            [".env.example"]
        );
        assert!(cfg.environment.filter_secrets);
        let names = |l: &sbx_core::config::Unique<sbx_core::config::NameGlob>| {
            l.iter().map(|g| g.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(names(&cfg.environment.allow), ["NODE_ENV", "DEBUG", "CI"]);
        assert_eq!(names(&cfg.environment.block), ["AWS_*", "GITHUB_TOKEN"]);
        assert!(!cfg.network.allow_external);
        assert!(cfg.network.allow_localhost);
        assert!(cfg.network.allow_git);
        // One note per key of the file, in its order.
        let lines: Vec<String> = got.notes.iter().map(|n| n.to_string()).collect();
        assert_eq!(
            lines,
            [
                "sandbox.enabled: mapped: nothing to write: sbx is always on",
                "sandbox.filesystem.root: mapped: nothing to write: the sandbox mounts only the project's root",
                "sandbox.filesystem.blocked-patterns: mapped: [filesystem] blocked",
                "sandbox.filesystem.allowed-patterns: mapped: [filesystem] allowed",
                "sandbox.environment.filter-secrets: mapped: [environment] filter-secrets",
                "sandbox.environment.allow: mapped: [environment] allow",
                "sandbox.environment.block: mapped: [environment] block",
                "sandbox.network.allow-external: mapped: [network] allow-external",
                "sandbox.network.allow-localhost: mapped: [network] allow-localhost",
                "sandbox.network.allow-git: mapped: [network] allow-git",
                "sandbox.tools.enforce-agent-permissions: not mapped: sbx reads no agent definitions; list the tools to refuse in [tools] disallowed, e.g. disallowed = [\"Write\", \"Edit\"]",
            ]
        );
        // Each note is also in the file, as a comment.
        for l in &lines {
            assert!(got.toml.contains(&format!("# {l}\n")), "{l}");
        }
    }

    #[test]
    fn bad_input_is_one_line_naming_file_and_key() {
        for (yaml, want) in [
            (
                "sandbox:\n  enabled: false\n",
                "x.yaml: sandbox.enabled: sbx has no off switch",
            ),
            (
                "sandbox:\n  network:\n    allow-git: yes\n",
                "x.yaml: sandbox.network.allow-git: expected true or false, got the string \"yes\"",
            ),
            (
                "sandbox:\n  environment:\n    allow: NODE_ENV\n",
                "x.yaml: sandbox.environment.allow: expected a list of strings",
            ),
            (
                "sandbox:\n  filesystem:\n    blocked-patterns: [\"../x\"]\n",
                "x.yaml: the converted config does not load",
            ),
            ("a: 1\na: 2\n", "x.yaml: not valid YAML"),
            ("- 1\n", "x.yaml: expected a mapping at the top"),
            ("", "x.yaml: empty"),
        ] {
            let err = from_yaml(yaml, Path::new("x.yaml")).unwrap_err();
            assert!(err.starts_with(want), "{yaml:?}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn unknown_keys_are_noted_not_dropped() {
        let got = from_yaml(
            "sandbox:\n  filesystem:\n    watch: true\nother: 1\n",
            Path::new("x.yaml"),
        )
        .unwrap();
        let lines: Vec<String> = got.notes.iter().map(|n| n.to_string()).collect();
        assert_eq!(
            lines,
            [
                "sandbox.filesystem.watch: not mapped: not a key sbx knows; see docs/config.md for what it has",
                "other: not mapped: outside `sandbox:`, which is all sbx reads",
            ]
        );
    }
}
