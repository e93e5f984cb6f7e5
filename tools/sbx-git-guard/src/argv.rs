//! argv as git reads it: the global options of git.c (exact names only),
//! then parse-options for a subcommand (short clusters, attached values,
//! unique long prefixes, `--no-` negation, `--`), and git's own alias
//! splitting. A regex over the joined arguments gets all of these wrong.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// Whether an option takes a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg {
    No,
    /// `--opt=v`, `--opt v`, `-ov`, `-o v`.
    Required,
    /// Only attached: `--opt=v`, `-ov`.
    Optional,
}

/// One row of a parse-options table.
#[derive(Clone, Copy, Debug)]
pub struct Opt {
    pub short: Option<char>,
    pub long: Option<&'static str>,
    pub arg: Arg,
    /// `--no-NAME` (or, for a `no-` name, `--NAME` without it) is accepted.
    pub neg: bool,
}

/// A table row (short for the generated tables).
pub const fn o(short: Option<char>, long: Option<&'static str>, arg: Arg, neg: bool) -> Opt {
    Opt {
        short,
        long,
        arg,
        neg,
    }
}

/// A parse failure; git would refuse too, and the guard fails closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("unknown option `{0}`")]
    Unknown(String),
    #[error("ambiguous option `{0}`")]
    Ambiguous(String),
    #[error("option `{0}` requires a value")]
    MissingValue(String),
    #[error("option `{0}` takes no value")]
    UnexpectedValue(String),
    #[error("unknown global option `{0}`")]
    UnknownGlobal(String),
    #[error("bad alias.{0}: unclosed quote")]
    BadAlias(String),
}

/// An option as git understood it: its canonical long name (or `-c` for a
/// short-only one), whether it was negated, and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub name: String,
    pub negated: bool,
    pub value: Option<OsString>,
}

/// A subcommand's arguments, split as parse-options splits them.
#[derive(Debug, Default, Clone)]
pub struct Args {
    pub opts: Vec<Parsed>,
    pub positional: Vec<OsString>,
    /// parse-options would print usage and exit without doing anything.
    pub help: bool,
}

impl Args {
    /// The last effective setting of a switch: `Some(true)` set, `Some(false)`
    /// negated, `None` never given.
    pub fn flag(&self, name: &str) -> Option<bool> {
        self.opts
            .iter()
            .rev()
            .find(|o| o.name == name)
            .map(|o| !o.negated)
    }

    pub fn has(&self, name: &str) -> bool {
        self.opts.iter().any(|o| o.name == name && !o.negated)
    }

    pub fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a OsStr> + 'a {
        self.opts
            .iter()
            .filter(move |o| o.name == name && !o.negated)
            .filter_map(|o| o.value.as_deref())
    }
}

fn opt_name(o: &Opt) -> String {
    match (o.long, o.short) {
        (Some(l), _) => l.to_owned(),
        (None, Some(c)) => format!("-{c}"),
        (None, None) => String::new(),
    }
}

/// Parse a subcommand's arguments with `table`. `stop_at_non_option` is
/// parse-options' flag of that name; most commands permute instead, so
/// `git push origin main --force` has an option after two operands.
pub fn parse(
    args: &[OsString],
    table: &[Opt],
    stop_at_non_option: bool,
) -> Result<Args, ParseError> {
    let mut out = Args::default();
    // parse-options' internal options, matched exactly and before the table;
    // a lone `-h` is help only as the single argument (`ls-remote -h` is not).
    if args.len() == 1 && args[0] == "-h" {
        out.help = true;
        return Ok(out);
    }
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_bytes();
        i += 1;
        if a == b"--" || a == b"--end-of-options" {
            out.positional.extend(args[i..].iter().cloned());
            break;
        }
        if a.len() < 2 || a[0] != b'-' {
            out.positional.push(args[i - 1].clone());
            if stop_at_non_option {
                out.positional.extend(args[i..].iter().cloned());
                break;
            }
            continue;
        }
        if let Some(long) = a.strip_prefix(b"--") {
            if matches!(
                long,
                b"help" | b"help-all" | b"git-completion-helper" | b"git-completion-helper-all"
            ) {
                out.help = true;
                return Ok(out);
            }
            let (o, negated, value) = long_opt(long, table)?;
            let name = opt_name(o);
            let value = match (o.arg, value, negated) {
                (_, Some(_), true) | (Arg::No, Some(_), _) => {
                    return Err(ParseError::UnexpectedValue(lossy(a)));
                }
                (_, None, true) | (Arg::No, None, false) | (Arg::Optional, None, _) => None,
                (_, Some(v), false) => Some(v),
                (Arg::Required, None, false) => match args.get(i) {
                    Some(v) => {
                        i += 1;
                        Some(v.clone())
                    }
                    None => return Err(ParseError::MissingValue(lossy(a))),
                },
            };
            out.opts.push(Parsed {
                name,
                negated,
                value,
            });
            continue;
        }
        // A cluster of short options: `-anm msg`, `-mmsg`, `-uno`.
        let mut j = 1;
        while j < a.len() {
            let c = a[j] as char;
            j += 1;
            let o = table
                .iter()
                .find(|o| o.short == Some(c))
                .ok_or_else(|| ParseError::Unknown(format!("-{c}")))?;
            let rest = &a[j..];
            let value = match o.arg {
                Arg::No => None,
                Arg::Optional if rest.is_empty() => None,
                Arg::Optional | Arg::Required if !rest.is_empty() => {
                    j = a.len();
                    Some(OsStr::from_bytes(rest).to_owned())
                }
                _ => match args.get(i) {
                    Some(v) => {
                        i += 1;
                        Some(v.clone())
                    }
                    None => return Err(ParseError::MissingValue(format!("-{c}"))),
                },
            };
            out.opts.push(Parsed {
                name: opt_name(o),
                negated: false,
                value,
            });
        }
    }
    Ok(out)
}

/// Match `--NAME[=value]` the way parse-options' `parse_long_opt` does: an
/// exact name wins; otherwise a prefix must select one option; `no-` negates
/// negatable options, and a `no-NAME` option is negated by `NAME`.
fn long_opt<'t>(
    arg: &[u8],
    table: &'t [Opt],
) -> Result<(&'t Opt, bool, Option<OsString>), ParseError> {
    let (key, value) = match arg.iter().position(|&b| b == b'=') {
        Some(p) => (&arg[..p], Some(OsStr::from_bytes(&arg[p + 1..]).to_owned())),
        None => (arg, None),
    };
    let key = std::str::from_utf8(key).map_err(|_| ParseError::Unknown(lossy(arg)))?;
    let mut abbrev: Option<(&Opt, bool)> = None;
    let mut ambiguous = false;
    for o in table {
        let Some(long) = o.long else { continue };
        // The spellings that reach this option, with whether they negate.
        let mut forms: Vec<(String, bool)> = vec![(long.to_owned(), false)];
        if o.neg {
            match long.strip_prefix("no-") {
                Some(pos) => forms.push((pos.to_owned(), true)),
                None => forms.push((format!("no-{long}"), true)),
            }
            // `--no-no-verify` is `--verify`.
            if long.starts_with("no-") {
                forms.push((format!("no-{long}"), true));
            }
        }
        for (form, neg) in &forms {
            if key == form {
                return Ok((o, *neg, value));
            }
        }
        for (form, neg) in forms {
            if !key.is_empty() && form.starts_with(key) {
                match abbrev {
                    Some((prev, prev_neg)) if !std::ptr::eq(prev, o) || prev_neg != neg => {
                        ambiguous = true
                    }
                    _ => {}
                }
                abbrev = Some((o, neg));
            }
        }
    }
    match abbrev {
        _ if ambiguous => Err(ParseError::Ambiguous(format!("--{key}"))),
        Some((o, neg)) => Ok((o, neg, value)),
        None => Err(ParseError::Unknown(format!("--{key}"))),
    }
}

/// One global option that matters to the policy, in argv order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Global {
    /// `-c name[=value]`; no `=` means boolean true.
    Config(OsString),
    /// `--config-env=name=ENVVAR`.
    ConfigEnv(OsString),
    /// `-C dir` (an empty one is ignored, as git does).
    Chdir(OsString),
    GitDir(OsString),
    WorkTree(OsString),
    /// `--exec-path=dir`: git would run its helpers from there.
    ExecPath(OsString),
    Bare,
    /// An option that only makes git print something and exit
    /// (`--exec-path`, `--html-path`, `--list-cmds=`, `--version`, `--help`).
    Query,
    /// Any other known global option, kept for the exec.
    Other,
}

/// Parse git.c's `handle_options`: global options are matched exactly (no
/// prefixes), and the first argument that does not start with `-` is the
/// command. Returns the options and the index of the command.
pub fn globals(args: &[OsString]) -> Result<(Vec<Global>, usize), ParseError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_bytes();
        if a.first() != Some(&b'-') {
            break;
        }
        i += 1;
        let value = |i: &mut usize| -> Result<OsString, ParseError> {
            let v = args
                .get(*i)
                .cloned()
                .ok_or_else(|| ParseError::MissingValue(lossy(a)))?;
            *i += 1;
            Ok(v)
        };
        let eq = |p: &[u8]| a.strip_prefix(p).map(|v| OsStr::from_bytes(v).to_owned());
        let g = match a {
            // `git --help` / `git --version` are the help and version commands.
            b"--help" | b"-h" | b"--version" | b"-v" => {
                out.push(Global::Query);
                return Ok((out, i - 1));
            }
            b"-c" => Global::Config(value(&mut i)?),
            b"--config-env" => Global::ConfigEnv(value(&mut i)?),
            b"-C" => Global::Chdir(value(&mut i)?),
            b"--git-dir" => Global::GitDir(value(&mut i)?),
            b"--work-tree" => Global::WorkTree(value(&mut i)?),
            b"--namespace" | b"--super-prefix" | b"--shallow-file" | b"--attr-source" => {
                value(&mut i)?;
                Global::Other
            }
            b"--bare" => Global::Bare,
            b"--html-path" | b"--man-path" | b"--info-path" => Global::Query,
            b"-p"
            | b"--paginate"
            | b"-P"
            | b"--no-pager"
            | b"--no-replace-objects"
            | b"--literal-pathspecs"
            | b"--no-literal-pathspecs"
            | b"--glob-pathspecs"
            | b"--noglob-pathspecs"
            | b"--icase-pathspecs"
            | b"--no-optional-locks"
            | b"--no-advice"
            | b"--no-lazy-fetch" => Global::Other,
            _ => {
                if let Some(v) = eq(b"--config-env=") {
                    Global::ConfigEnv(v)
                } else if let Some(v) = eq(b"--git-dir=") {
                    Global::GitDir(v)
                } else if let Some(v) = eq(b"--work-tree=") {
                    Global::WorkTree(v)
                } else if let Some(v) = eq(b"--exec-path=") {
                    Global::ExecPath(v)
                } else if a.starts_with(b"--exec-path") || a.starts_with(b"--list-cmds=") {
                    // git matches `--exec-path` by prefix: anything but `=` queries.
                    Global::Query
                } else if a.starts_with(b"--namespace=")
                    || a.starts_with(b"--super-prefix=")
                    || a.starts_with(b"--attr-source=")
                {
                    Global::Other
                } else {
                    return Err(ParseError::UnknownGlobal(lossy(a)));
                }
            }
        };
        out.push(g);
    }
    Ok((out, i))
}

pub fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// git's `split_cmdline` (alias.c): whitespace separates words; single
/// quotes are literal; double quotes allow backslash escapes; a backslash
/// outside quotes escapes the next byte.
pub fn split_cmdline(s: &[u8]) -> Option<Vec<OsString>> {
    let mut words = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    let mut in_word = false;
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        i += 1;
        match quote {
            None if c.is_ascii_whitespace() => {
                if in_word {
                    words.push(OsStr::from_bytes(&cur).to_owned());
                    cur.clear();
                    in_word = false;
                }
            }
            None if c == b'\'' || c == b'"' => {
                quote = Some(c);
                in_word = true;
            }
            Some(q) if c == q => quote = None,
            None | Some(b'"') if c == b'\\' => {
                let &n = s.get(i)?;
                i += 1;
                cur.push(n);
                in_word = true;
            }
            _ => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return None;
    }
    if in_word {
        words.push(OsStr::from_bytes(&cur).to_owned());
    }
    Some(words)
}

/// Parse `GIT_CONFIG_PARAMETERS`: space-separated shell single-quoted
/// `'key'='value'` (or the older `'key=value'`) entries, as git's
/// `sq_dequote_step` reads them. `None` if malformed.
/// One `GIT_CONFIG_PARAMETERS` entry: key, and value (none = boolean true).
pub type ConfigPair = (Vec<u8>, Option<Vec<u8>>);

pub fn config_parameters(s: &[u8]) -> Option<Vec<ConfigPair>> {
    fn sq(s: &[u8], i: &mut usize) -> Option<Vec<u8>> {
        if s.get(*i) != Some(&b'\'') {
            return None;
        }
        *i += 1;
        let mut out = Vec::new();
        loop {
            match s.get(*i)? {
                b'\'' => {
                    *i += 1;
                    // `'\''` continues the word with a quote.
                    if s[*i..].starts_with(b"\\'") {
                        out.push(b'\'');
                        *i += 2;
                        if s.get(*i) != Some(&b'\'') {
                            return Some(out);
                        }
                        *i += 1;
                        continue;
                    }
                    return Some(out);
                }
                &c => {
                    out.push(c);
                    *i += 1;
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while s.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        if i >= s.len() {
            return Some(out);
        }
        let key = sq(s, &mut i)?;
        if s.get(i) == Some(&b'=') {
            i += 1;
            let value = sq(s, &mut i)?;
            out.push((key, Some(value)));
        } else {
            // Old form: the whole entry is `key=value`, or a bare key.
            match key.iter().position(|&b| b == b'=') {
                Some(p) => out.push((key[..p].to_vec(), Some(key[p + 1..].to_vec()))),
                None => out.push((key, None)),
            }
        }
    }
}

#[cfg(test)]
mod tests;
