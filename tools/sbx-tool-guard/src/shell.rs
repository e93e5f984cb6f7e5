//! What a Bash call runs: the script parsed as bash parses it
//! (brush-parser), every simple command's words unquoted, the known
//! wrappers (`env`, `sudo`, `xargs`, `timeout`, …) unwrapped and the
//! scripts of `sh -c`, `eval` and `$(…)` read too. A word the shell only
//! computes when it runs (`$X`, `$(…)`, a glob) stays unknown, so a deny
//! rule can refuse what it cannot see instead of letting it through.
//!
//! Advisory all the same: a script written to a file and run, or
//! `python -c`, runs commands this never sees. The mounts and the
//! firewall are what hold.

use brush_parser::ast::{
    AndOr, AndOrList, Assignment, AssignmentValue, Command, CommandPrefixOrSuffixItem,
    CompoundCommand, CompoundList, ExtendedTestExpr, IoFileRedirectTarget, IoRedirect,
    SimpleCommand,
};
use brush_parser::word::{self, WordPiece, WordPieceWithSource};
use brush_parser::{Parser, ParserOptions};

/// How deep `sh -c "eval '…'"` and `$( $( … ) )` are followed.
const MAX_DEPTH: usize = 16;

/// One word of a command as it will run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Word {
    /// Known text.
    Lit(String),
    /// A glob or brace expansion (`cur?`, `{c,}url`): the shell picks the
    /// text. Kept as a wildcard pattern (`\` escapes), `*` for braces.
    Pattern(String),
    /// Computed when it runs: `$X`, `$(…)`, `$((…))`.
    Dynamic,
}

/// One simple command: its words, wrappers already unwrapped (each layer
/// is its own entry: `sudo curl x` gives `sudo curl x` and `curl x`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleCmd(pub Vec<Word>);

/// The commands of a script.
#[derive(Debug, Default)]
pub struct Script {
    pub commands: Vec<SimpleCmd>,
    /// Why what runs cannot be known from the text (a parse error, a shell
    /// reading its script from stdin, `eval "$x"`); the first reason.
    pub unknown: Option<String>,
}

pub fn analyze(script: &str) -> Script {
    let mut w = Walker {
        out: Script::default(),
        depth: 0,
        opts: ParserOptions::default(),
    };
    w.script(script);
    w.out
}

struct Walker {
    out: Script,
    depth: usize,
    opts: ParserOptions,
}

impl Walker {
    fn unknown(&mut self, why: impl Into<String>) {
        if self.out.unknown.is_none() {
            self.out.unknown = Some(why.into());
        }
    }

    fn script(&mut self, text: &str) {
        if self.depth >= MAX_DEPTH {
            return self.unknown("scripts are nested too deeply to follow");
        }
        self.depth += 1;
        let mut p = Parser::new(std::io::Cursor::new(text.as_bytes()), &self.opts);
        match p.parse_program() {
            Ok(prog) => {
                for c in &prog.complete_commands {
                    self.list(c);
                }
            }
            Err(e) => self.unknown(format!("it cannot be parsed ({e})")),
        }
        self.depth -= 1;
    }

    fn list(&mut self, l: &CompoundList) {
        for item in &l.0 {
            self.and_or(&item.0);
        }
    }

    fn and_or(&mut self, l: &AndOrList) {
        for c in &l.first.seq {
            self.command(c);
        }
        for a in &l.additional {
            let (AndOr::And(p) | AndOr::Or(p)) = a;
            for c in &p.seq {
                self.command(c);
            }
        }
    }

    fn command(&mut self, c: &Command) {
        match c {
            Command::Simple(s) => self.simple(s),
            Command::Compound(cc, redirs) => {
                self.compound(cc);
                for r in redirs.iter().flat_map(|r| r.0.iter()) {
                    self.redirect(r);
                }
            }
            Command::Function(f) => {
                self.compound(&f.body.0);
                for r in f.body.1.iter().flat_map(|r| r.0.iter()) {
                    self.redirect(r);
                }
            }
            Command::ExtendedTest(t, redirs) => {
                self.ext_test(&t.expr);
                for r in redirs.iter().flat_map(|r| r.0.iter()) {
                    self.redirect(r);
                }
            }
        }
    }

    fn compound(&mut self, c: &CompoundCommand) {
        match c {
            CompoundCommand::Arithmetic(a) => self.arith(&a.expr.value),
            CompoundCommand::ArithmeticForClause(a) => {
                for e in [&a.initializer, &a.condition, &a.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arith(&e.value);
                }
                self.list(&a.body.list);
            }
            CompoundCommand::BraceGroup(b) => self.list(&b.list),
            CompoundCommand::Subshell(s) => self.list(&s.list),
            CompoundCommand::ForClause(f) => {
                for v in f.values.iter().flatten() {
                    self.word(&v.value);
                }
                self.list(&f.body.list);
            }
            CompoundCommand::CaseClause(c) => {
                self.word(&c.value.value);
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value);
                    }
                    if let Some(l) = &item.cmd {
                        self.list(l);
                    }
                }
            }
            CompoundCommand::IfClause(i) => {
                self.list(&i.condition);
                self.list(&i.then);
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.list(c);
                    }
                    self.list(&e.body);
                }
            }
            CompoundCommand::WhileClause(w) | CompoundCommand::UntilClause(w) => {
                self.list(&w.0);
                self.list(&w.1.list);
            }
            CompoundCommand::Coprocess(c) => self.command(&c.body),
        }
    }

    fn ext_test(&mut self, e: &ExtendedTestExpr) {
        match e {
            ExtendedTestExpr::And(a, b) | ExtendedTestExpr::Or(a, b) => {
                self.ext_test(a);
                self.ext_test(b);
            }
            ExtendedTestExpr::Not(a) | ExtendedTestExpr::Parenthesized(a) => self.ext_test(a),
            ExtendedTestExpr::UnaryTest(_, w) => {
                self.word(&w.value);
            }
            ExtendedTestExpr::BinaryTest(_, a, b) => {
                self.word(&a.value);
                self.word(&b.value);
            }
        }
    }

    fn redirect(&mut self, r: &IoRedirect) {
        match r {
            IoRedirect::File(_, _, t) => match t {
                IoFileRedirectTarget::Filename(w) | IoFileRedirectTarget::Duplicate(w) => {
                    self.word(&w.value);
                }
                IoFileRedirectTarget::ProcessSubstitution(_, s) => self.list(&s.list),
                IoFileRedirectTarget::Fd(_) => {}
            },
            IoRedirect::HereDocument(_, h) => {
                // An unquoted delimiter: the body's `$(…)` run.
                if h.requires_expansion {
                    match word::parse_heredoc(&h.doc.value, &self.opts) {
                        Ok(pieces) => {
                            self.pieces(&h.doc.value, &pieces, false);
                        }
                        Err(_) => self.unknown("a here-document cannot be parsed"),
                    }
                }
            }
            IoRedirect::HereString(_, w) | IoRedirect::OutputAndError(w, _) => {
                self.word(&w.value);
            }
        }
    }

    fn assignment(&mut self, a: &Assignment) {
        match &a.value {
            AssignmentValue::Scalar(w) => {
                self.word(&w.value);
            }
            AssignmentValue::Array(items) => {
                for (k, v) in items {
                    if let Some(k) = k {
                        self.word(&k.value);
                    }
                    self.word(&v.value);
                }
            }
        }
    }

    fn simple(&mut self, s: &SimpleCommand) {
        let mut words = Vec::new();
        for item in s.prefix.iter().flat_map(|p| p.0.iter()) {
            match item {
                CommandPrefixOrSuffixItem::IoRedirect(r) => self.redirect(r),
                CommandPrefixOrSuffixItem::Word(w) => words.push(self.word(&w.value)),
                CommandPrefixOrSuffixItem::AssignmentWord(a, _) => self.assignment(a),
                CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => self.list(&sub.list),
            }
        }
        if let Some(w) = &s.word_or_name {
            words.push(self.word(&w.value));
        }
        for item in s.suffix.iter().flat_map(|p| p.0.iter()) {
            match item {
                CommandPrefixOrSuffixItem::IoRedirect(r) => self.redirect(r),
                CommandPrefixOrSuffixItem::Word(w)
                | CommandPrefixOrSuffixItem::AssignmentWord(_, w) => {
                    words.push(self.word(&w.value))
                }
                CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                    self.list(&sub.list);
                    words.push(Word::Dynamic);
                }
            }
        }
        self.argv(words);
    }

    /// `$((…))`: only its command substitutions run anything.
    fn arith(&mut self, text: &str) {
        if text.contains("$(") || text.contains('`') {
            self.unknown("a command substitution inside $((…)) is not followed");
        }
    }

    /// One word: what it will be, and the scripts of its substitutions read.
    fn word(&mut self, raw: &str) -> Word {
        match word::parse(raw, &self.opts) {
            Ok(pieces) => {
                let mut b = Builder::default();
                if self.pieces_into(raw, &pieces, false, &mut b) {
                    b.finish()
                } else {
                    Word::Dynamic
                }
            }
            Err(_) => {
                self.unknown(format!("the word {raw:?} cannot be parsed"));
                Word::Dynamic
            }
        }
    }

    /// Read the substitutions of `pieces`; their text is of no use.
    fn pieces(&mut self, raw: &str, pieces: &[WordPieceWithSource], quoted: bool) {
        let mut b = Builder::default();
        self.pieces_into(raw, pieces, quoted, &mut b);
    }

    /// Append the pieces' text to `b`; false when some piece is computed.
    fn pieces_into(
        &mut self,
        raw: &str,
        pieces: &[WordPieceWithSource],
        quoted: bool,
        b: &mut Builder,
    ) -> bool {
        let mut known = true;
        for p in pieces {
            match &p.piece {
                WordPiece::Text(t) => b.push(t, quoted),
                WordPiece::SingleQuotedText(t) => b.push(t, true),
                WordPiece::AnsiCQuotedText(t) => {
                    // `$'\x63url'`: escapes are not decoded here.
                    if t.contains('\\') {
                        known = false;
                    } else {
                        b.push(t, true);
                    }
                }
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    known &= self.pieces_into(raw, inner, true, b);
                }
                WordPiece::TildeExpansion(_) => b.push("~", true),
                WordPiece::EscapeSequence(e) => {
                    let c = e.strip_prefix('\\').unwrap_or(e);
                    // Inside double quotes `\x` keeps its backslash unless
                    // x is special; either way it is literal text.
                    b.push(c, true);
                }
                WordPiece::ParameterExpansion(_) => {
                    let text = raw.get(p.start_index..p.end_index).unwrap_or(raw);
                    if text.contains("$(") || text.contains('`') {
                        self.unknown("a command substitution inside ${…} is not followed");
                    }
                    known = false;
                }
                WordPiece::CommandSubstitution(s) => {
                    self.script(s);
                    known = false;
                }
                WordPiece::BackquotedCommandSubstitution(s) => {
                    let s = s
                        .replace("\\`", "`")
                        .replace("\\$", "$")
                        .replace("\\\\", "\\");
                    self.script(&s);
                    known = false;
                }
                WordPiece::ArithmeticExpression(e) => {
                    self.arith(&e.value);
                    known = false;
                }
            }
        }
        known
    }

    /// Record the command and each command a known wrapper runs.
    fn argv(&mut self, words: Vec<Word>) {
        let mut w: &[Word] = &words;
        // Each step drops at least one word.
        while let Some(first) = w.first() {
            self.out.commands.push(SimpleCmd(w.to_vec()));
            let Word::Lit(name) = first else {
                return;
            };
            let name = basename(name).to_owned();
            let rest = &w[1..];
            let next = match name.as_str() {
                // `-S` (split a string into the command) is not listed:
                // refused as unknown.
                "env" => options(
                    rest,
                    &Opts {
                        assign: true,
                        ..o("uC", "i0v")
                    },
                ),
                "sudo" => options(
                    rest,
                    &Opts {
                        assign: true,
                        ..o("ughpCDrtUTR", "EHnSkKbisPABNlve")
                    },
                ),
                "doas" => options(rest, &o("uC", "nsL")),
                "xargs" => options(
                    rest,
                    &Opts {
                        opt: "eil",
                        ..o("adEIsLnP", "0oprtx")
                    },
                ),
                "command" => options(rest, &o("", "pvV")),
                "exec" => options(rest, &o("a", "cl")),
                "builtin" | "nohup" | "busybox" => Ok(rest),
                "nice" => nice(rest),
                // The duration, then the command.
                "timeout" => options(rest, &o("sk", "v")).map(|r| r.get(1..).unwrap_or(&[])),
                "stdbuf" => options(rest, &o("ioe", "")),
                "time" => options(rest, &o("fo", "pavq")),
                "setsid" => options(rest, &o("", "cfw")),
                "ionice" => options(rest, &o("cnpPu", "t")),
                "find" => {
                    self.find(rest);
                    return;
                }
                "eval" => {
                    self.eval(rest);
                    return;
                }
                "su" | "runuser" => {
                    self.su(rest);
                    return;
                }
                "alias" => {
                    for a in rest {
                        if let Word::Lit(a) = a {
                            if let Some((_, v)) = a.split_once('=') {
                                self.script(v);
                            }
                        }
                    }
                    return;
                }
                "trap" => {
                    if let Some(Word::Lit(a)) = rest.iter().find(|a| **a != lit("--")) {
                        self.script(a);
                    }
                    return;
                }
                n if SHELLS.contains(&n) => {
                    self.shell(rest);
                    return;
                }
                _ => return,
            };
            match next {
                Ok(r) => w = r,
                Err(why) => return self.unknown(format!("{name}: {why}")),
            }
        }
    }

    /// `find … -exec cmd … ;`.
    fn find(&mut self, w: &[Word]) {
        let mut i = 0;
        while i < w.len() {
            let exec = matches!(&w[i], Word::Lit(a) if matches!(a.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir"));
            i += 1;
            if exec {
                let start = i;
                while i < w.len() && !matches!(&w[i], Word::Lit(a) if a == ";" || a == "+") {
                    i += 1;
                }
                self.argv(w[start..i].to_vec());
            }
        }
    }

    fn eval(&mut self, w: &[Word]) {
        let mut text = String::new();
        for a in w {
            match a {
                Word::Lit(a) => {
                    text.push_str(a);
                    text.push(' ');
                }
                _ => return self.unknown("eval runs a string computed at run time"),
            }
        }
        self.script(&text);
    }

    /// `su [user] -c CMD`; without -c it is a shell reading stdin.
    fn su(&mut self, w: &[Word]) {
        let mut it = w.iter();
        while let Some(a) = it.next() {
            match a {
                Word::Lit(a) if a == "-c" || a == "--command" => {
                    return match it.next() {
                        Some(Word::Lit(s)) => self.script(s),
                        _ => self.unknown("su -c runs a command computed at run time"),
                    };
                }
                Word::Lit(a) if a.starts_with("--command=") => {
                    return self.script(&a["--command=".len()..]);
                }
                Word::Lit(_) => {}
                _ => return self.unknown("su has an argument computed at run time"),
            }
        }
        self.unknown("su without -c runs a shell reading its commands from stdin");
    }

    /// `sh [-e] -c SCRIPT`, `sh FILE` (advisory: the file is not read),
    /// or a shell reading stdin (refused when a rule needs to know).
    fn shell(&mut self, w: &[Word]) {
        let mut c_mode = false;
        let mut stdin = false;
        let mut i = 0;
        while let Some(a) = w.get(i) {
            let Word::Lit(a) = a else {
                return self.unknown("a shell option is computed at run time");
            };
            if a == "--" {
                i += 1;
                break;
            }
            if matches!(
                a.as_str(),
                "-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file"
            ) {
                i += 2;
                continue;
            }
            if a.starts_with("--") {
                i += 1;
                continue;
            }
            if (a.starts_with('-') || a.starts_with('+')) && a.len() > 1 {
                c_mode |= a[1..].contains('c');
                stdin |= a[1..].contains('s');
                i += 1;
                continue;
            }
            break;
        }
        match w.get(i) {
            Some(Word::Lit(s)) if c_mode => self.script(s),
            Some(_) if c_mode => self.unknown("sh -c runs a script computed at run time"),
            None if c_mode => self.unknown("sh -c without a script"),
            Some(_) if !stdin => {}
            _ => self.unknown("a shell reading its commands from stdin runs what it reads"),
        }
    }
}

/// Shells whose `-c` script is read.
const SHELLS: [&str; 10] = [
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "rbash",
];

fn lit(s: &str) -> Word {
    Word::Lit(s.to_owned())
}

fn basename(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// A wrapper's short options: `arg` letters take a value (attached or the
/// next word), `opt` letters an optional attached one, `flag` letters none;
/// `assign`: `NAME=value` words may come before the command.
struct Opts {
    arg: &'static str,
    flag: &'static str,
    opt: &'static str,
    assign: bool,
}

const fn o(arg: &'static str, flag: &'static str) -> Opts {
    Opts {
        arg,
        flag,
        opt: "",
        assign: false,
    }
}

/// Skip a wrapper's options (`--long[=v]` whole). An option the wrapper
/// does not list is an error: the command after it cannot be told apart
/// from its value.
fn options<'w>(mut w: &'w [Word], o: &Opts) -> Result<&'w [Word], String> {
    while let Some(first) = w.first() {
        let Word::Lit(a) = first else {
            return Err("an option is computed at run time".into());
        };
        if a == "--" {
            return Ok(&w[1..]);
        }
        if let Some(long) = a.strip_prefix("--") {
            let name = long.split('=').next().unwrap_or(long);
            let skip = if LONG_WITH_ARG.contains(&name) && !long.contains('=') {
                2
            } else if LONG_WITH_ARG.contains(&name) || LONG_FLAGS.contains(&name) {
                1
            } else {
                return Err(format!("unknown option {a:?}"));
            };
            w = w.get(skip..).unwrap_or(&[]);
            continue;
        }
        if o.assign && a.contains('=') && !a.starts_with('-') {
            w = &w[1..];
            continue;
        }
        if a == "-" {
            w = &w[1..];
            continue;
        }
        if !a.starts_with('-') {
            return Ok(w);
        }
        let mut skip = 1;
        for (i, c) in a.char_indices().skip(1) {
            if o.arg.contains(c) {
                if i + c.len_utf8() == a.len() {
                    skip = 2;
                }
                break;
            }
            if o.opt.contains(c) {
                break;
            }
            if !o.flag.contains(c) && !c.is_ascii_digit() {
                return Err(format!("unknown option {a:?}"));
            }
        }
        w = w.get(skip..).unwrap_or(&[]);
    }
    Ok(w)
}

/// The wrappers' long options that take a value.
const LONG_WITH_ARG: &[&str] = &[
    "user",
    "group",
    "signal",
    "kill-after",
    "unset",
    "chdir",
    "arg-file",
    "delimiter",
    "max-args",
    "max-lines",
    "max-procs",
    "max-chars",
    "adjustment",
    "input",
    "output",
    "error",
    "format",
    "class",
    "classdata",
    "prompt",
    "host",
    "close-from",
    "chroot",
    "role",
    "type",
    "other-user",
    "command-timeout",
    "eof",
    "replace",
    "process-slot-var",
];
/// The wrappers' long options without a value (`=v` accepted too).
const LONG_FLAGS: &[&str] = &[
    "preserve-env",
    "login",
    "shell",
    "non-interactive",
    "null",
    "no-run-if-empty",
    "verbose",
    "interactive",
    "open-tty",
    "exit",
    "ignore-environment",
    "preserve-status",
    "foreground",
    "portability",
    "append",
    "quiet",
    "debug",
    "wait",
    "fork",
    "ctty",
    "stdin",
    "reset-timestamp",
    "remove-timestamp",
    "background",
    "set-home",
    "preserve-groups",
    "ignore",
    "ignore-case",
];

/// `nice [-n N | -N | --adjustment=N] command`.
fn nice(w: &[Word]) -> Result<&[Word], String> {
    match w.first() {
        Some(Word::Lit(a)) if a.starts_with('-') && a[1..].chars().all(|c| c.is_ascii_digit()) => {
            Ok(&w[1..])
        }
        _ => options(w, &o("n", "")),
    }
}

/// A word's text and its wildcard pattern, built piece by piece.
#[derive(Default)]
struct Builder {
    text: String,
    pattern: String,
    wild: bool,
}

impl Builder {
    fn push(&mut self, s: &str, quoted: bool) {
        self.text.push_str(s);
        if quoted {
            for c in s.chars() {
                if matches!(c, '*' | '?' | '[' | ']' | '\\' | '{' | '}') {
                    self.pattern.push('\\');
                }
                self.pattern.push(c);
            }
            return;
        }
        // Unquoted: globs and brace expansion are the shell's to expand.
        let glob = s.contains(['*', '?']) || s.find('[').is_some_and(|i| s[i..].contains(']'));
        let brace = s.find('{').is_some_and(|i| {
            s[i..].contains('}') && (s[i..].contains(',') || s[i..].contains(".."))
        });
        if glob || brace {
            self.wild = true;
        }
        let mut in_brace = false;
        for c in s.chars() {
            match c {
                '{' if brace => {
                    in_brace = true;
                    self.pattern.push('*');
                }
                '}' if brace && in_brace => in_brace = false,
                _ if in_brace => {}
                '[' if glob => self.pattern.push('?'),
                ']' if glob => {}
                '\\' => self.pattern.push_str("\\\\"),
                _ => self.pattern.push(c),
            }
        }
    }

    fn finish(self) -> Word {
        if self.wild {
            Word::Pattern(self.pattern)
        } else {
            Word::Lit(self.text)
        }
    }
}

/// Whether `pat` (`*`, `?`, `\` escapes) can match `s`. A bracket
/// expression is taken as `?` that also matches nothing, a superset.
pub fn wild_match(pat: &str, s: &str) -> bool {
    let p: Vec<char> = pat.chars().collect();
    let s: Vec<char> = s.chars().collect();
    fn go(p: &[char], s: &[char]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some('*') => (0..=s.len()).any(|i| go(&p[1..], &s[i..])),
            Some('?') => go(&p[1..], s) || (!s.is_empty() && go(&p[1..], &s[1..])),
            Some('\\') if p.len() > 1 => s.first() == Some(&p[1]) && go(&p[2..], &s[1..]),
            Some(c) => s.first() == Some(c) && go(&p[1..], &s[1..]),
        }
    }
    go(&p, &s)
}

#[cfg(test)]
mod tests;
