//! docs/config.md's defaults and examples are parsed by the real config
//! parser: an example that does not load, or a default that is not what
//! the parser fills in, fails here rather than misleading a reader.

use std::path::Path;

use sbx_core::config::{Config, parse_toml};
use xtask::configdoc::{Default, Key, Schema, header};

fn parse(text: &str) -> Result<Config, String> {
    parse_toml(text, Path::new("config.toml")).map_err(|e| e.to_string())
}

/// A file holding `key = value` in its table. In a table of named entries
/// (`[agent.mcp.NAME]`) the entry's required keys get their examples, so
/// the entry loads with only `key` changed.
fn with(schema: &Schema, key: &Key, value: Option<&str>) -> String {
    let mut text = format!("{}\n", header(&key.table));
    for k in schema.keys.iter().filter(|k| k.table == key.table) {
        let v = if k.name == key.name {
            value.map(str::to_owned)
        } else if k.default == Default::Required {
            k.example.clone()
        } else {
            None
        };
        if let Some(v) = v {
            text.push_str(&format!("{} = {v}\n", k.name));
        }
    }
    text
}

#[test]
fn the_schema_is_complete() {
    let s = Schema::read();
    assert!(s.errors.is_empty(), "{:#?}", s.errors);
    let mut missing = Vec::new();
    for k in &s.keys {
        if k.example.is_none() {
            missing.push(format!("[{}] {}: no `Example:` doc line", k.table, k.name));
        }
        if k.default == Default::Undocumented {
            missing.push(format!("[{}] {}: no `Default:` doc line", k.table, k.name));
        }
        if k.doc.is_empty() {
            missing.push(format!("[{}] {}: no description", k.table, k.name));
        }
    }
    assert!(
        missing.is_empty(),
        "add doc lines in tools/sbx-core/src/config.rs:\n{}",
        missing.join("\n")
    );
    assert!(s.keys.len() > 40, "only {} keys found", s.keys.len());
}

#[test]
fn every_example_loads() {
    let s = Schema::read();
    for k in &s.keys {
        let Some(e) = &k.example else { continue };
        let text = with(&s, k, Some(e));
        if let Err(err) = parse(&text) {
            panic!(
                "[{}] {}: the example does not load: {err}\n{text}",
                k.table, k.name
            );
        }
    }
}

#[test]
fn every_default_is_the_parsers() {
    let s = Schema::read();
    for k in &s.keys {
        let Default::Value(d) = &k.default else {
            continue;
        };
        let without = with(&s, k, None);
        let given = with(&s, k, Some(d));
        let a = parse(&without).unwrap_or_else(|e| panic!("{without}: {e}"));
        let b = parse(&given)
            .unwrap_or_else(|e| panic!("[{}] {}: the default does not load: {e}", k.table, k.name));
        assert_eq!(
            format!("{a:?}"),
            format!("{b:?}"),
            "[{}] {}: `Default: {d}` is not what the parser fills in",
            k.table,
            k.name
        );
    }
}

/// The README's config brief is one click from every key: a key added to
/// the parser must be added to its table too.
#[test]
fn the_readme_links_every_key() {
    let readme = std::fs::read_to_string(xtask::root().join("README.md")).unwrap();
    let missing: Vec<String> = Schema::read()
        .keys
        .iter()
        .map(|k| {
            let slug = xtask::links::slug(&xtask::configdoc::key_heading(k));
            format!("docs/config.md#{slug}")
        })
        .filter(|link| !readme.contains(&format!("({link})")))
        .collect();
    assert!(missing.is_empty(), "README.md does not link {missing:#?}");
}

/// The README's example config loads.
#[test]
fn the_readme_example_loads() {
    let readme = std::fs::read_to_string(xtask::root().join("README.md")).unwrap();
    let start = readme.find("```toml\n").expect("a toml block in README.md") + 8;
    let len = readme[start..].find("```").expect("the block ends");
    parse(&readme[start..start + len]).unwrap_or_else(|e| panic!("README.md's example: {e}"));
}

/// The template `sbx-run init` writes (base-image/config.toml): as written,
/// every line commented out, it loads; with every commented `key = value`
/// and `[table]` line switched on, it still loads; and it names every key.
#[test]
fn the_init_template_loads_and_names_every_key() {
    let text = std::fs::read_to_string(xtask::root().join("base-image/config.toml")).unwrap();
    parse(&text).unwrap_or_else(|e| panic!("the template as written: {e}"));
    let on: String = text
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest)
                if rest.starts_with('[')
                    || rest.split_once(" = ").is_some_and(|(k, _)| {
                        !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                    }) =>
            {
                rest
            }
            _ => l,
        })
        .map(|l| format!("{l}\n"))
        .collect();
    parse(&on).unwrap_or_else(|e| panic!("the template with every key switched on: {e}\n{on}"));
    let s = Schema::read();
    let missing: Vec<String> = s
        .keys
        .iter()
        // Legacy spellings are accepted, not taught.
        .filter(|k| !(k.table == "sandbox" && k.name == "enabled"))
        .filter(|k| !on.lines().any(|l| l.starts_with(&format!("{} = ", k.name))))
        .map(|k| format!("[{}] {}", k.table, k.name))
        .collect();
    assert!(missing.is_empty(), "the template lacks {missing:?}");
}
