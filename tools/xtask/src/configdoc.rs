//! docs/config.md, rendered from the config parser's own source
//! (`tools/sbx-core/src/config.rs`, `config/agent.rs`, `netrules.rs`): the tables and
//! keys are the serde structs' fields, the names what serde's `rename_all`
//! makes of them, the types what the fields hold, the text their doc
//! comments. A key added to the parser shows up here without anyone
//! remembering to; the only hand-written parts are each key's `Default:`
//! and `Example:` doc lines, and tests/configdoc.rs parses both with the
//! real parser, so neither can drift either.

use std::collections::BTreeMap;

use syn::{Attribute, Fields, GenericArgument, Item, PathArguments, Type};

/// The parser's source, read at compile time so the rendered page and the
/// binary that checks it come from the same text.
const SOURCES: [&str; 3] = [
    include_str!("../../sbx-core/src/config.rs"),
    include_str!("../../sbx-core/src/config/agent.rs"),
    include_str!("../../sbx-core/src/netrules.rs"),
];

/// One key of the config file.
#[derive(Debug, Clone)]
pub struct Key {
    /// The table as written in a header: `sandbox`, `agent.mcp.NAME`.
    pub table: String,
    /// The key as written in the file (kebab-case).
    pub name: String,
    /// Other spellings the parser accepts.
    pub aliases: Vec<String>,
    /// The type, in Markdown (links into "Value types").
    pub ty: String,
    /// The doc comment without its `Default:` and `Example:` lines.
    pub doc: Vec<String>,
    pub default: Default,
    /// A TOML value that parses, from the `Example:` line.
    pub example: Option<String>,
}

/// What a key is when it is left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Default {
    /// A TOML value equal to the parser's default (`Default:` line).
    Value(String),
    /// Missing from the doc comment: a test refuses that.
    Undocumented,
    /// An `Option`: absent means unset (the doc says what that does).
    Unset,
    /// No serde default: the key must be given.
    Required,
}

/// A table: its header and the doc comment of its struct.
#[derive(Debug, Clone)]
pub struct Table {
    pub path: String,
    pub doc: Vec<String>,
}

/// Everything docs/config.md is made of.
#[derive(Debug, Default)]
pub struct Schema {
    pub tables: Vec<Table>,
    pub keys: Vec<Key>,
    /// Value types the keys link to: name -> doc.
    pub types: BTreeMap<String, Vec<String>>,
    /// Problems found while walking (an undocumented type, say).
    pub errors: Vec<String>,
}

#[derive(Debug, Default)]
struct Serde {
    rename_all: Option<String>,
    rename: Option<String>,
    aliases: Vec<String>,
    default: bool,
}

struct StructDef {
    attrs: Vec<Attribute>,
    fields: Vec<syn::Field>,
}

struct Source {
    structs: BTreeMap<String, StructDef>,
    /// Enums of unit variants: name -> the values serde accepts.
    enums: BTreeMap<String, Vec<String>>,
    /// Doc comments of every other type, by name.
    docs: BTreeMap<String, Vec<String>>,
}

fn doc_lines(attrs: &[Attribute]) -> Vec<String> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value().trim().to_owned()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn serde_attrs(attrs: &[Attribute]) -> Serde {
    let mut s = Serde::default();
    for a in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = a.parse_nested_meta(|m| {
            let key = m
                .path
                .get_ident()
                .map(|i| i.to_string())
                .unwrap_or_default();
            let value =
                || -> syn::Result<String> { Ok(m.value()?.parse::<syn::LitStr>()?.value()) };
            match key.as_str() {
                "rename_all" => s.rename_all = Some(value()?),
                "rename" => s.rename = Some(value()?),
                "alias" => s.aliases.push(value()?),
                "default" => {
                    s.default = true;
                    if m.input.peek(syn::Token![=]) {
                        value()?;
                    }
                }
                _ => {
                    // try_from = "…", untagged, deny_unknown_fields: skip any value.
                    if m.input.peek(syn::Token![=]) {
                        let _: syn::Expr = m.value()?.parse()?;
                    }
                }
            }
            Ok(())
        });
    }
    s
}

fn renamed(ident: &str, rule: Option<&str>) -> String {
    // serde's rules: fields are snake_case, variants PascalCase.
    let words: Vec<String> = if ident.contains('_') || ident.chars().all(|c| !c.is_uppercase()) {
        ident.split('_').map(str::to_lowercase).collect()
    } else {
        let mut w: Vec<String> = Vec::new();
        for c in ident.chars() {
            if c.is_uppercase() || w.is_empty() {
                w.push(String::new());
            }
            w.last_mut().expect("pushed above").extend(c.to_lowercase());
        }
        w
    };
    match rule {
        Some("kebab-case") => words.join("-"),
        Some("snake_case") => words.join("_"),
        Some("lowercase") => words.concat(),
        _ => ident.to_owned(),
    }
}

fn derives_deserialize(attrs: &[Attribute]) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("derive"))
        .any(|a| {
            let mut yes = false;
            let _ = a.parse_nested_meta(|m| {
                yes |= m
                    .path
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "Deserialize");
                Ok(())
            });
            yes
        })
}

fn read_sources() -> Source {
    let mut src = Source {
        structs: BTreeMap::new(),
        enums: BTreeMap::new(),
        docs: BTreeMap::new(),
    };
    for text in SOURCES {
        let file = syn::parse_file(text).expect("sbx-core's config source parses");
        for item in file.items {
            match item {
                Item::Struct(s) => {
                    let name = s.ident.to_string();
                    src.docs.insert(name.clone(), doc_lines(&s.attrs));
                    if let Fields::Named(f) = s.fields
                        && derives_deserialize(&s.attrs)
                    {
                        src.structs.insert(
                            name,
                            StructDef {
                                attrs: s.attrs,
                                fields: f.named.into_iter().collect(),
                            },
                        );
                    }
                }
                Item::Enum(e) => {
                    let name = e.ident.to_string();
                    src.docs.insert(name.clone(), doc_lines(&e.attrs));
                    let rule = serde_attrs(&e.attrs).rename_all;
                    if derives_deserialize(&e.attrs)
                        && e.variants.iter().all(|v| v.fields.is_empty())
                    {
                        let values = e
                            .variants
                            .iter()
                            .map(|v| {
                                serde_attrs(&v.attrs).rename.unwrap_or_else(|| {
                                    renamed(&v.ident.to_string(), rule.as_deref())
                                })
                            })
                            .collect();
                        src.enums.insert(name, values);
                    }
                }
                _ => {}
            }
        }
    }
    src
}

/// `Name<Args…>` of a type path: the last segment's name and its type arguments.
fn split(ty: &Type) -> Option<(String, Vec<&Type>)> {
    let Type::Path(p) = ty else { return None };
    let seg = p.path.segments.last()?;
    let args = match &seg.arguments {
        PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .filter_map(|g| match g {
                GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    Some((seg.ident.to_string(), args))
}

impl Schema {
    /// The schema as the parser's source defines it.
    pub fn read() -> Schema {
        let src = read_sources();
        let mut schema = Schema::default();
        schema.walk(&src, "Config", "");
        schema
    }

    fn walk(&mut self, src: &Source, name: &str, path: &str) {
        let def = &src.structs[name];
        let outer = serde_attrs(&def.attrs);
        if !path.is_empty() {
            self.tables.push(Table {
                path: path.to_owned(),
                doc: doc_lines(&def.attrs),
            });
        }
        for field in &def.fields {
            let ident = field.ident.as_ref().expect("named field").to_string();
            let fs = serde_attrs(&field.attrs);
            let key = fs
                .rename
                .clone()
                .unwrap_or_else(|| renamed(&ident, outer.rename_all.as_deref()));
            let (ty, optional) = match split(&field.ty) {
                Some((n, args)) if n == "Option" && args.len() == 1 => (args[0], true),
                _ => (&field.ty, false),
            };
            let sub = |p: &str| {
                if p.is_empty() {
                    key.clone()
                } else {
                    format!("{p}.{key}")
                }
            };
            // A struct of its own: a table. A map of structs: a table per entry.
            if let Some((n, args)) = split(ty) {
                if src.structs.contains_key(&n) {
                    self.walk(src, &n, &sub(path));
                    continue;
                }
                if n == "BTreeMap"
                    && let Some((v, _)) = args.get(1).and_then(|t| split(t))
                    && src.structs.contains_key(&v)
                {
                    self.walk(src, &v, &format!("{}.NAME", sub(path)));
                    continue;
                }
            }
            let mut doc = Vec::new();
            let mut default = if optional {
                Default::Unset
            } else if fs.default || outer.default {
                Default::Undocumented
            } else {
                Default::Required
            };
            let mut example = None;
            for line in doc_lines(&field.attrs) {
                if let Some(v) = line.strip_prefix("Default: ") {
                    default = Default::Value(toml_literal(v));
                } else if let Some(v) = line.strip_prefix("Example: ") {
                    example = Some(toml_literal(v));
                } else {
                    doc.push(line);
                }
            }
            let ty = self.type_md(src, ty, &format!("[{path}] {key}"));
            self.keys.push(Key {
                table: path.to_owned(),
                name: key,
                aliases: fs.aliases,
                ty,
                doc,
                default,
                example,
            });
        }
    }

    /// A field's type in words, with a link for the project's own types.
    fn type_md(&mut self, src: &Source, ty: &Type, key: &str) -> String {
        let Some((name, args)) = split(ty) else {
            self.errors.push(format!("{key}: a type xtask cannot name"));
            return "?".into();
        };
        let arg = |s: &mut Self, i: usize| match args.get(i) {
            Some(t) => s.type_md(src, t, key),
            None => "?".into(),
        };
        match name.as_str() {
            "bool" => "boolean".into(),
            "u8" | "u16" | "u32" | "u64" | "usize" => "integer".into(),
            "f64" => "number".into(),
            "String" => "string".into(),
            "PathBuf" => "path".into(),
            "Unique" => format!("list of distinct {}", arg(self, 0)),
            "Vec" => format!("list of {}", arg(self, 0)),
            "BTreeMap" => format!("table of {}", arg(self, 1)),
            _ => {
                if let Some(values) = src.enums.get(&name) {
                    let v: Vec<String> = values.iter().map(|v| format!("`\"{v}\"`")).collect();
                    return format!("one of {}", v.join(", "));
                }
                match src.docs.get(&name) {
                    Some(doc) if !doc.is_empty() => {
                        self.types.insert(name.clone(), doc.clone());
                        format!("[{name}](#{})", name.to_lowercase())
                    }
                    _ => {
                        self.errors.push(format!(
                            "{key}: type {name} has no doc comment in sbx-core's config source"
                        ));
                        name
                    }
                }
            }
        }
    }
}

/// `` `"4g"` `` in a doc comment -> `"4g"`: the value between the backticks.
fn toml_literal(v: &str) -> String {
    let v = v.trim().trim_end_matches('.');
    v.strip_prefix('`')
        .and_then(|v| v.strip_suffix('`'))
        .unwrap_or(v)
        .to_owned()
}

/// The header line a table is written with, NAME made a real name.
pub fn header(table: &str) -> String {
    format!("[{}]", table.replace("NAME", "x"))
}

/// docs/config.md.
pub fn render() -> Vec<u8> {
    let s = Schema::read();
    let mut out = String::new();
    out.push_str(
        "# Configuration reference: `.agent-sandbox/config.toml`\n\n\
         <!-- Generated by `cargo xtask gen` from tools/sbx-core/src/config.rs; do not edit. -->\n\n\
         One file, read by every sbx tool and mounted read-only into the sandbox at\n\
         `/.agent-sandbox/`. Every table and key is optional unless marked *required*.\n\
         Unknown keys, wrong types and bad values are refused with the file, line and key\n\
         before anything starts (exit 78); `sbx-envfilter --check-config` checks a file.\n\
         This page is generated from the parser itself (`cargo xtask gen`), and every\n\
         default and example below is parsed by it in a test.\n\n",
    );
    for t in &s.tables {
        out.push_str(&format!("## `{}`\n\n", header_doc(&t.path)));
        if !t.doc.is_empty() {
            out.push_str(&paragraph(&t.doc));
        }
        let keys: Vec<&Key> = s.keys.iter().filter(|k| k.table == t.path).collect();
        if keys.is_empty() {
            continue;
        }
        out.push_str("| key | type | default |\n|---|---|---|\n");
        for k in &keys {
            out.push_str(&format!(
                "| [`{}`](#{}) | {} | {} |\n",
                k.name,
                crate::links::slug(&key_heading(k)),
                k.ty,
                default_md(&k.default)
            ));
        }
        out.push('\n');
        for k in keys {
            out.push_str(&format!("### {}\n\n", key_heading(k)));
            if !k.doc.is_empty() {
                out.push_str(&paragraph(&k.doc));
            }
            out.push_str(&format!("- type: {}\n", k.ty));
            out.push_str(&format!("- default: {}\n", default_md(&k.default)));
            if let Some(e) = &k.example {
                out.push_str(&format!("- example: `{} = {e}`\n", k.name));
            }
            if !k.aliases.is_empty() {
                let a: Vec<String> = k.aliases.iter().map(|a| format!("`{a}`")).collect();
                out.push_str(&format!("- also accepted as: {}\n", a.join(", ")));
            }
            out.push('\n');
        }
    }
    out.push_str("## Value types\n\n");
    for (name, doc) in &s.types {
        out.push_str(&format!("### {name}\n\n{}", paragraph(doc)));
    }
    out.into_bytes()
}

/// `[agent.mcp.NAME]` reads as a pattern in a heading.
fn header_doc(table: &str) -> String {
    format!("[{table}]")
}

/// A key's heading, e.g. `` `[sandbox] memory` `` (anchor `sandbox-memory`).
pub fn key_heading(k: &Key) -> String {
    format!("`[{}] {}`", k.table, k.name)
}

fn default_md(d: &Default) -> String {
    match d {
        Default::Value(v) => format!("`{v}`"),
        Default::Undocumented => "?".into(),
        Default::Unset => "unset".into(),
        Default::Required => "*required*".into(),
    }
}

/// Doc lines joined into paragraphs (a blank doc line starts a new one).
fn paragraph(lines: &[String]) -> String {
    let mut out = String::new();
    for l in lines {
        if l.is_empty() {
            out.push_str("\n\n");
        } else {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push(' ');
            }
            out.push_str(&l.replace("[`", "`").replace("`]", "`"));
        }
    }
    out.push_str("\n\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_renamed_as_serde_does() {
        for (ident, rule, want) in [
            ("allow_domains", Some("kebab-case"), "allow-domains"),
            ("AcceptEdits", Some("kebab-case"), "accept-edits"),
            ("Claude", Some("lowercase"), "claude"),
            ("cli", Some("kebab-case"), "cli"),
            ("keep", None, "keep"),
        ] {
            assert_eq!(renamed(ident, rule), want, "{ident} {rule:?}");
        }
    }

    #[test]
    fn doc_values_lose_their_backticks() {
        assert_eq!(toml_literal("`\"4g\"`"), "\"4g\"");
        assert_eq!(toml_literal("`[]`."), "[]");
    }
}
