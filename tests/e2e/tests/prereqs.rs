//! A missing install step cannot hide: every external program that the
//! tools, the tests and the scripts run by name must be in scripts/prereqs'
//! table (MAIN, TEST or BASE), so a fresh machine gets it. Checked on the
//! source, not on this machine, which may have the program by accident.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// program -> where the table puts it ("MAIN", "TEST", "BASE").
fn table() -> BTreeMap<String, &'static str> {
    let text = std::fs::read_to_string(root().join("scripts/prereqs")).unwrap();
    let mut out = BTreeMap::new();
    let mut section: Option<&'static str> = None;
    for line in text.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("declare -A ") {
            section = match rest.split('=').next() {
                Some("MAIN") => Some("MAIN"),
                Some("TEST") => Some("TEST"),
                _ => None,
            };
            continue;
        }
        if l.starts_with("BASE=(") {
            section = Some("BASE");
        }
        let Some(s) = section else { continue };
        let body = l.trim_start_matches("BASE=(").trim_end_matches(')');
        for w in body.split_whitespace() {
            let prog = match w.strip_prefix('[') {
                Some(kv) => kv.split(']').next().unwrap_or(""),
                None if s == "BASE" => w,
                None => continue,
            };
            out.insert(prog.to_owned(), s);
        }
        if l.ends_with(')') {
            section = None;
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let p = e.path();
        if p.file_name().is_some_and(|n| n == "target") {
            continue;
        }
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Programs the Rust code runs: `Command::new("x")`, and the first word of
/// the literal command lines the netfilter bed runs (`&["nft", ...]`).
fn rust_programs() -> BTreeMap<String, String> {
    let mut files = Vec::new();
    rust_files(&root().join("tools"), &mut files);
    rust_files(&root().join("tests"), &mut files);
    let attacks = fwbed_attacks();
    let mut out = BTreeMap::new();
    for f in files {
        let text: String = std::fs::read_to_string(&f)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .map(|l| format!("{l}\n"))
            .collect();
        let rel = f.strip_prefix(root()).unwrap_or(&f).display().to_string();
        for part in text.split("Command::new(\"").skip(1) {
            if let Some(p) = part.split('"').next() {
                // An absolute path names the same package's program.
                let p = p.rsplit('/').next().unwrap_or(p);
                out.entry(p.to_owned()).or_insert_with(|| rel.clone());
            }
        }
        if rel.contains("fwbed") {
            for part in text.split("&[\"").skip(1) {
                let word = part.split('"').next().unwrap_or("");
                // A command line: a program name followed by its arguments.
                let is_cmd = part[word.len()..].starts_with("\", ")
                    && word
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c == '6' || c == '-')
                    && !word.starts_with('-')
                    && !FWBED_NOT_PROGRAMS.contains(&word)
                    && !attacks.contains(word);
                if is_cmd {
                    out.entry(word.to_owned()).or_insert_with(|| rel.clone());
                }
            }
        }
    }
    out
}

/// The bed's own attack commands (`"name" =>` arms in its dispatcher), read
/// from the source so a new attack needs no entry here.
fn fwbed_attacks() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("tests/fwbed/src/attack.rs")).unwrap();
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start().strip_prefix('"')?;
            let (name, rest) = l.split_once('"')?;
            rest.trim_start().starts_with("=>").then(|| name.to_owned())
        })
        .collect()
}

/// First words of argument lists in the bed that are not programs
/// (sbx-fw subcommands and ip's objects).
const FWBED_NOT_PROGRAMS: &[&str] = &[
    "allow", "deny", "grant", "init", "probe", "reset", "status", "verify", "netns",
];

const SHELL_WORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "for", "in", "do", "done", "while", "case", "esac",
    "local", "export", "declare", "set", "unset", "exec", "return", "exit", "echo", "printf", "cd",
    "read", "trap", "shift", "break", "continue", "command", "wait", "true", "false", "test", "[",
    "[[", "]]", "!", "{", "}", "say", "die", "eval", ":", "source", ".", "type",
];

/// Shell text with quoted strings blanked, except the command
/// substitutions inside double quotes, which become commands of their own.
fn unquote(line: &str) -> String {
    let (mut out, mut single, mut double, mut depth) = (String::new(), false, false, 0);
    let b: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if single {
            single = c != '\'';
        } else if c == '$' && b.get(i + 1) == Some(&'(') && b.get(i + 2) == Some(&'(') {
            // Arithmetic, not a command: skip to its end.
            while i < b.len() && !(b[i] == ')' && b.get(i + 1) == Some(&')')) {
                i += 1;
            }
            i += 1;
        } else if c == '$' && b.get(i + 1) == Some(&'(') {
            out.push(';');
            depth += 1;
            i += 1;
        } else if c == ')' && depth > 0 {
            depth -= 1;
            out.push(';');
        } else if c == '\'' && depth == 0 && !double {
            single = true;
        } else if c == '"' {
            // A quoted word stays a word (`"$sbx" shell` runs $sbx).
            if !double && depth == 0 {
                out.push('Q');
            }
            double = !double;
        } else if !double || depth > 0 {
            out.push(c);
        }
        i += 1;
    }
    out
}

/// Words that run the next word as a command.
const PREFIXES: &[&str] = &[
    "nohup", "exec", "sudo", "env", "command", "!", "then", "do", "else",
];

/// Programs scripts/ runs: the first word of each simple command.
fn script_programs() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(root().join("scripts")).unwrap() {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap().replace("\\\n", " ");
        let rel = format!("scripts/{}", p.file_name().unwrap().to_string_lossy());
        // The script's own functions are not programs.
        let functions: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().split_once("() {").map(|(f, _)| f.trim()))
            .collect();
        for line in text.lines() {
            let l = line.trim();
            if l.starts_with('#') || l.contains("=(") || l.starts_with('[') {
                continue;
            }
            let l = unquote(l)
                .replace("&&", ";")
                .replace("||", ";")
                .replace('|', ";");
            for cmd in l.split(';') {
                let words: Vec<&str> = cmd.split_whitespace().collect();
                if matches!(words.first(), Some(&("for" | "case"))) {
                    continue;
                }
                let it = words.iter().skip_while(|w| {
                    w.contains('=') && !w.starts_with('-') || SHELL_WORDS.contains(w)
                });
                for w in it {
                    let w = w.trim_matches(|c| c == '(' || c == ')');
                    let plain = w
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
                        && w.chars().next().is_some_and(|c| c.is_ascii_lowercase());
                    if plain && !SHELL_WORDS.contains(&w) && !functions.contains(&w) {
                        out.entry(w.to_owned()).or_insert_with(|| rel.clone());
                    }
                    if !PREFIXES.contains(&w) {
                        break;
                    }
                }
            }
        }
    }
    out
}

#[test]
fn every_external_program_is_installed_by_prereqs() {
    let table = table();
    for must in ["docker", "nft", "mmdebstrap", "sh"] {
        assert!(
            table.contains_key(must),
            "the table parser lost {must}: {table:?}"
        );
    }
    let mut missing = BTreeSet::new();
    let ours = |p: &str| p.starts_with("sbx-") || p == "sbx" || p == "xtask";
    for (prog, from) in rust_programs().into_iter().chain(script_programs()) {
        if !ours(&prog) && !table.contains_key(&prog) {
            missing.insert(format!("{prog} (run by {from})"));
        }
    }
    assert!(
        missing.is_empty(),
        "programs run by name but never installed by scripts/prereqs: {missing:?}; \
         add each to MAIN, TEST or BASE there with its Debian package"
    );
}

#[test]
fn the_scan_sees_the_programs_it_must() {
    let rust = rust_programs();
    for p in ["docker", "git", "ip", "nft", "iptables", "mmdebstrap"] {
        assert!(rust.contains_key(p), "{p} not found by the scan: {rust:?}");
    }
    let scripts = script_programs();
    for p in ["apt-get", "dockerd", "make", "cargo"] {
        assert!(
            scripts.contains_key(p),
            "{p} not found by the scan: {scripts:?}"
        );
    }
}

/// scripts/server sets up what scripts/shell does, then serves: the same
/// phases up to the image, no sandbox, then sbx-server.
#[test]
fn scripts_server_sets_up_then_serves() {
    let dir = tempfile::tempdir().unwrap();
    let o = std::process::Command::new("bash")
        .arg(root().join("scripts/server"))
        .args(["--dry-run", "--listen", "127.0.0.1:9"])
        .env("XDG_STATE_HOME", dir.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let phases: Vec<&str> = out
        .lines()
        .map(|l| {
            l.trim_start_matches("sbx: ")
                .split("  ")
                .next()
                .unwrap_or("")
        })
        .collect();
    assert_eq!(
        phases,
        [
            "prerequisites",
            "build",
            "base image",
            "build server",
            "serve"
        ],
        "{out}"
    );
    assert!(out.contains("serve --listen 127.0.0.1:9"), "{out}");
    let bad = std::process::Command::new("bash")
        .arg(root().join("scripts/server"))
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(64));
}

/// scripts/shell's first run is quiet: one line per phase, named in order,
/// a few lines in all (the phases' own output goes to logs).
#[test]
fn scripts_shell_prints_one_line_per_phase() {
    let dir = tempfile::tempdir().unwrap();
    let o = std::process::Command::new("bash")
        .arg(root().join("scripts/shell"))
        .args(["--dry-run", "/nonexistent/repo"])
        .env("XDG_STATE_HOME", dir.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let phases: Vec<&str> = out
        .lines()
        .map(|l| {
            l.trim_start_matches("sbx: ")
                .split("  ")
                .next()
                .unwrap_or("")
        })
        .collect();
    assert_eq!(
        phases,
        ["prerequisites", "build", "base image", "start"],
        "{out}"
    );
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
