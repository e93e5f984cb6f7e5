//! `cargo xtask git-options GIT...`: writes sbx-git-guard's option tables
//! from the `-h` and `--git-completion-helper-all` output of real gits.
//!
//! The guard must parse argv exactly as git's parse-options does, and the
//! only complete, versioned source of which short letters take values and
//! which long names are negatable is git itself. Tables from several
//! versions are merged: a name that is unique in the union is the same
//! option in each, so an abbreviation the guard resolves never means
//! something else to the git it runs.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;

/// Commands whose options the policy looks at (key, argv after `git`).
const COMMANDS: &[(&str, &[&str])] = &[
    ("am", &["am"]),
    ("archive", &["archive"]),
    ("checkout-index", &["checkout-index"]),
    ("cherry-pick", &["cherry-pick"]),
    ("clone", &["clone"]),
    ("commit", &["commit"]),
    ("config", &["config", "--get"]),
    ("config edit", &["config", "edit"]),
    ("config get", &["config", "get"]),
    ("config list", &["config", "list"]),
    ("config remove-section", &["config", "remove-section"]),
    ("config rename-section", &["config", "rename-section"]),
    ("config set", &["config", "set"]),
    ("config unset", &["config", "unset"]),
    ("difftool", &["difftool"]),
    ("fetch", &["fetch"]),
    ("hash-object", &["hash-object"]),
    ("init", &["init"]),
    ("ls-remote", &["ls-remote"]),
    ("merge", &["merge"]),
    ("pull", &["pull"]),
    ("push", &["push"]),
    ("read-tree", &["read-tree"]),
    ("rebase", &["rebase"]),
    ("remote add", &["remote", "add"]),
    ("replace", &["replace"]),
    ("revert", &["revert"]),
    ("update-ref", &["update-ref"]),
    ("worktree add", &["worktree", "add"]),
];

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Arg {
    No,
    Required,
    Optional,
}

#[derive(Clone, Debug, Default)]
struct Opt {
    short: Option<char>,
    arg: Option<Arg>,
    /// `--no-NAME` is accepted (or, for a `no-` name, the bare form).
    neg: bool,
}

fn run(git: &str, args: &[&str]) -> String {
    let out = Command::new(git)
        .args(args)
        .env("LC_ALL", "C")
        .env("COLUMNS", "200")
        .output()
        .unwrap_or_else(|e| panic!("{git}: {e}"));
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    s
}

/// One `-h` line: `-F, --[no-]file <file>`, `--fixup [(amend|reword):]commit`,
/// `-u, --untracked-files[=<mode>]`, `-b <branch>`, `-n, --no-verify`.
fn parse_help_line(line: &str) -> Option<(Option<char>, Option<String>, Arg, bool)> {
    let t = line.trim_start();
    if !t.starts_with('-') || line.len() == t.len() {
        return None;
    }
    let spec = t.split("  ").next()?.trim_end();
    let (short, rest) = match spec.strip_prefix('-') {
        Some(r) if !r.starts_with('-') => {
            let mut chars = r.chars();
            let c = chars.next()?;
            let rest = chars.as_str();
            if let Some(r) = rest.strip_prefix(", ") {
                (Some(c), r)
            } else {
                // Short only: `-b <branch>`, `-S[<keyid>]`.
                let arg = if rest.starts_with('[') {
                    Arg::Optional
                } else if rest.trim().is_empty() {
                    Arg::No
                } else {
                    Arg::Required
                };
                if c.is_ascii_alphanumeric() {
                    return Some((Some(c), None, arg, false));
                }
                return None;
            }
        }
        _ => (None, spec),
    };
    let long = rest.strip_prefix("--")?;
    let (neg, long) = match long.strip_prefix("[no-]") {
        Some(l) => (true, l),
        None => (false, long),
    };
    let end = long
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .unwrap_or(long.len());
    let (name, tail) = long.split_at(end);
    let arg = if tail.starts_with("[=") {
        Arg::Optional
    } else if tail.trim().is_empty() {
        Arg::No
    } else {
        Arg::Required
    };
    Some((short, Some(name.to_owned()), arg, neg))
}

fn merge_command(git: &str, argv: &[&str], key: &str, table: &mut BTreeMap<String, Opt>) {
    let mut h: Vec<&str> = argv.to_vec();
    h.push("-h");
    let help = run(git, &h);
    // An older git without this subcommand answers with another usage.
    let want = format!("git {key}");
    if !help.lines().next().unwrap_or("").contains(&want) {
        return;
    }
    for line in help.lines() {
        let Some((short, long, arg, neg)) = parse_help_line(line) else {
            continue;
        };
        let desc = line
            .trim_start()
            .split_once("  ")
            .map_or("", |(_, d)| d)
            .trim();
        if desc.starts_with("opposite of --") {
            // `--verify` is how 2.4x prints the negation of `no-verify`.
            let of = desc.trim_start_matches("opposite of --").to_owned();
            table.entry(of).or_default().neg = true;
            continue;
        }
        let name = long.unwrap_or_else(|| format!("-{}", short.expect("short or long")));
        let e = table.entry(name).or_default();
        e.short = e.short.or(short);
        e.arg = Some(e.arg.map_or(arg, |a| a.max(arg)));
        e.neg |= neg;
    }
    // Hidden options and negatability, from the completion helper.
    let mut c: Vec<&str> = argv.to_vec();
    c.push("--git-completion-helper-all");
    let words = run(git, &c);
    let mut after_dashdash = false;
    let mut names: Vec<(String, bool)> = Vec::new();
    for w in words.split_whitespace() {
        if w == "--" {
            after_dashdash = true;
            continue;
        }
        let Some(n) = w.strip_prefix("--") else {
            continue;
        };
        names.push((n.to_owned(), after_dashdash));
    }
    for (n, negated_list) in &names {
        let (n, takes) = match n.strip_suffix('=') {
            Some(b) => (b.to_owned(), true),
            None => (n.clone(), false),
        };
        if *negated_list {
            if let Some(e) = n.strip_prefix("no-").and_then(|p| table.get_mut(p)) {
                e.neg = true;
            }
            continue;
        }
        if table.contains_key(&n) {
            continue;
        }
        // One of a pair `X`/`no-X` is the option (as -h named it), the other
        // its negation.
        if let Some(e) = n.strip_prefix("no-").and_then(|p| table.get_mut(p)) {
            e.neg = true;
            continue;
        }
        if let Some(e) = table.get_mut(&format!("no-{n}")) {
            e.neg = true;
            continue;
        }
        // Hidden from -h: long only.
        let e = table.entry(n).or_default();
        e.arg = Some(if takes { Arg::Required } else { Arg::No });
    }
}

/// The Rust source of `options_gen.rs`.
pub fn generate(gits: &[String]) -> String {
    let versions: Vec<String> = gits
        .iter()
        .map(|g| run(g, &["--version"]).trim().to_owned())
        .collect();
    let mut out = String::new();
    writeln!(
        out,
        "// @generated by `cargo xtask git-options` from {}. Do not edit.\n",
        versions.join(", ")
    )
    .unwrap();
    out.push_str("use crate::argv::{Arg, Opt, o};\n\n");
    // Builtins: `all` is the intersection (certainly a builtin in whichever
    // git runs), `any` the union (maybe one).
    let lists: Vec<Vec<String>> = gits
        .iter()
        .map(|g| {
            let mut v: Vec<String> = run(g, &["--list-cmds=builtins"])
                .lines()
                .map(str::to_owned)
                .collect();
            v.sort();
            v
        })
        .collect();
    let mut any: Vec<&String> = lists.iter().flatten().collect();
    any.sort();
    any.dedup();
    let all: Vec<&&String> = any
        .iter()
        .filter(|c| lists.iter().all(|l| l.contains(c)))
        .collect();
    writeln!(out, "/// Builtins of every git the tables were made from.").unwrap();
    writeln!(out, "pub static BUILTINS_ALL: &[&str] = &{all:?};\n").unwrap();
    writeln!(out, "/// Builtins of at least one of them.").unwrap();
    writeln!(out, "pub static BUILTINS_ANY: &[&str] = &{any:?};\n").unwrap();
    out.push_str("/// Option tables, by command (and subcommand).\n");
    out.push_str("pub static TABLES: &[(&str, &[Opt])] = &[\n");
    for (key, argv) in COMMANDS {
        let mut table = BTreeMap::new();
        for g in gits {
            merge_command(g, argv, key, &mut table);
        }
        writeln!(out, "    (\n        {key:?},\n        &[").unwrap();
        for (name, o) in &table {
            let (short, long) = match name.strip_prefix('-') {
                Some(s) => (s.chars().next(), None),
                None => (o.short, Some(name.as_str())),
            };
            let arg = match o.arg.unwrap_or(Arg::No) {
                Arg::No => "Arg::No",
                Arg::Required => "Arg::Required",
                Arg::Optional => "Arg::Optional",
            };
            writeln!(out, "            o({short:?}, {long:?}, {arg}, {}),", o.neg).unwrap();
        }
        out.push_str("        ],\n    ),\n");
    }
    out.push_str("];\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lines() {
        let p = |l| parse_help_line(l);
        assert_eq!(
            p("    -F, --[no-]file <file>"),
            Some((Some('F'), Some("file".into()), Arg::Required, true))
        );
        assert_eq!(
            p("    -u, --[no-]untracked-files[=<mode>]"),
            Some((
                Some('u'),
                Some("untracked-files".into()),
                Arg::Optional,
                true
            ))
        );
        assert_eq!(
            p("    -n, --no-verify       bypass pre-commit and commit-msg hooks"),
            Some((Some('n'), Some("no-verify".into()), Arg::No, false))
        );
        assert_eq!(
            p("    --[no-]fixup [(amend|reword):]commit"),
            Some((None, Some("fixup".into()), Arg::Required, true))
        );
        assert_eq!(
            p("    -b <branch>           create a new branch"),
            Some((Some('b'), None, Arg::Required, false))
        );
        assert_eq!(p("Commit message options"), None);
    }
}
