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
    AndOr, AndOrList, Assignment, AssignmentName, AssignmentValue, BinaryPredicate, Command,
    CommandPrefixOrSuffixItem, CompoundCommand, CompoundList, ExtendedTestExpr,
    IoFileRedirectTarget, IoRedirect, SimpleCommand,
};
use brush_parser::word::{
    self, Parameter, ParameterExpr, ParameterTransformOp, WordPiece, WordPieceWithSource,
};
use brush_parser::{Parser, ParserOptions};

/// How deep `sh -c "eval '…'"` and `$( $( … ) )` are followed.
const MAX_DEPTH: usize = 16;
/// Deeper bracket or keyword nesting is not parsed (the parser recurses;
/// a stack overflow is a crash, which Claude Code takes as "let through").
const MAX_NEST: usize = 200;

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
    /// The files its redirections write (`>`, `>>`, `>|`, `<>`, `&>`).
    pub writes: Vec<Word>,
}

/// A longer command is not parsed: the hook has 30 s, and a timed-out hook
/// lets the call through.
const MAX_SCRIPT: usize = 1 << 20;

pub fn analyze(script: &str) -> Script {
    let mut w = Walker {
        out: Script::default(),
        depth: 0,
        opts: ParserOptions::default(),
    };
    if script.len() > MAX_SCRIPT {
        w.unknown(format!(
            "it is longer than {MAX_SCRIPT} bytes (write it to a file and run that)"
        ));
    } else {
        w.script(script);
    }
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
        if nesting(text) > MAX_NEST {
            return self.unknown("it is nested too deeply to parse");
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
            ExtendedTestExpr::BinaryTest(op, a, b) => {
                let wa = self.word(&a.value);
                let wb = self.word(&b.value);
                // `[[ $v -eq 0 ]]` evaluates $v's value as arithmetic, and
                // arithmetic runs the `$(…)` of an `a[$(…)]` in it.
                let arith = matches!(
                    op,
                    BinaryPredicate::ArithmeticEqualTo
                        | BinaryPredicate::ArithmeticNotEqualTo
                        | BinaryPredicate::ArithmeticLessThan
                        | BinaryPredicate::ArithmeticLessThanOrEqualTo
                        | BinaryPredicate::ArithmeticGreaterThan
                        | BinaryPredicate::ArithmeticGreaterThanOrEqualTo
                );
                if arith && !(plain_number(&wa) && plain_number(&wb)) {
                    self.unknown(
                        "[[ … -eq … ]] evaluates a value as arithmetic, which can run commands",
                    );
                }
            }
        }
    }

    fn redirect(&mut self, r: &IoRedirect) {
        match r {
            IoRedirect::File(_, kind, t) => match t {
                IoFileRedirectTarget::Filename(w) | IoFileRedirectTarget::Duplicate(w) => {
                    use brush_parser::ast::IoFileRedirectKind as K;
                    let target = self.word(&w.value);
                    let writes = match kind {
                        K::Write | K::Append | K::ReadAndWrite | K::Clobber => true,
                        // `>&FILE`: a file unless a descriptor number or `-`.
                        K::DuplicateOutput => !matches!(&target, Word::Lit(l)
                            if l == "-" || l.bytes().all(|b| b.is_ascii_digit())),
                        _ => false,
                    };
                    if writes {
                        self.out.writes.push(target);
                    }
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
            IoRedirect::HereString(_, w) => {
                let w = self.word(&w.value);
                self.subscript_text(&w);
            }
            IoRedirect::OutputAndError(w, _) => {
                let w = self.word(&w.value);
                self.subscript_text(&w);
                self.out.writes.push(w);
            }
        }
    }

    fn assignment(&mut self, a: &Assignment) {
        // `a[$(cmd)]=1`: the subscript is arithmetic, its `$(…)` run.
        if let AssignmentName::ArrayElementName(_, i) = &a.name {
            self.deferred(i);
        }
        if let (AssignmentName::VariableName(n), AssignmentValue::Scalar(w)) = (&a.name, &a.value) {
            let v = self.word(&w.value);
            self.env_value(n, &v);
        }
        match &a.value {
            AssignmentValue::Scalar(w) => {
                let v = self.word(&w.value);
                self.deferred_word(&v);
            }
            AssignmentValue::Array(items) => {
                for (k, v) in items {
                    if let Some(k) = k {
                        self.deferred(&k.value);
                        self.word(&k.value);
                    }
                    let v = self.word(&v.value);
                    self.deferred_word(&v);
                }
            }
        }
    }

    /// Text bash may evaluate later (an array subscript, a variable's value
    /// that arithmetic such as `$((x))` or `[[ $x -eq 0 ]]` evaluates, which
    /// runs its `a[$(…)]`): its substitutions are read as if they ran.
    fn deferred(&mut self, text: &str) {
        if text.contains("$(") || text.contains('`') {
            self.word(text);
        }
    }

    /// `printf -v x 'a[$(cmd)]'`, `read x <<< 'a[$(cmd)]'`: text that
    /// reaches a variable by a builtin; a subscript holding a substitution
    /// is read as if it ran.
    fn subscript_text(&mut self, w: &Word) {
        if let Word::Lit(t) = w {
            if t.find('[')
                .is_some_and(|i| t[i..].contains("$(") || t[i..].contains('`'))
            {
                let t = t.clone();
                self.word(&t);
            }
        }
    }

    /// A variable a program runs or sources: `GIT_SSH_COMMAND='curl x'`,
    /// `PAGER=…`, `BASH_ENV=/dev/stdin`.
    fn env_value(&mut self, name: &str, v: &Word) {
        if matches!(
            name,
            "SHELLOPTS" | "BASHOPTS" | "PS4" | "PS0" | "PS1" | "PS2" | "PS3"
        ) {
            // A prompt is expanded like a word (its `$(…)` run) under
            // `set -x`; SHELLOPTS turns xtrace on in the next bash.
            match v {
                Word::Lit(t) if name.starts_with("PS") => {
                    let t = t.clone();
                    self.word(&t);
                }
                _ => self.unknown(format!(
                    "{name} is set to something computed or that sets shell options"
                )),
            }
        } else if name == "BASH_ENV" || name == "ENV" {
            match v {
                Word::Lit(f) if !reads_stdin(f) => {}
                _ => self.unknown(format!("{name} names stdin, a pipe or a computed path")),
            }
        } else if COMMAND_VARS.contains(&name) {
            match v {
                Word::Lit(c) => {
                    let c = c.trim_start_matches('|').to_owned();
                    self.script(&c);
                }
                _ => self.unknown(format!("{name} is a command computed at run time")),
            }
        }
    }

    /// `NAME=value` words of env and sudo.
    fn env_words(&mut self, w: &[Word]) {
        for a in w {
            if let Word::Lit(a) = a {
                // `env 'BASH_FUNC_ls%%=() { …; }' bash -c ls`: a function
                // the next bash imports and runs in a command's place.
                if a.starts_with("BASH_FUNC_") {
                    self.unknown(
                        "an exported function (BASH_FUNC_…) replaces a command in the next shell",
                    );
                }
                if let Some((n, v)) = a.split_once('=') {
                    if !n.starts_with('-') {
                        self.env_value(n, &lit(v));
                    }
                }
            }
        }
    }

    fn deferred_word(&mut self, w: &Word) {
        if let Word::Lit(t) = w {
            let t = t.clone();
            self.deferred(&t);
        }
    }

    fn simple(&mut self, s: &SimpleCommand) {
        let mut words = Vec::new();
        // `NODE_OPTIONS=… npm test`: the assignments are part of what runs,
        // so an allow rule must match them too (a disallowed rule still
        // sees the bare command below).
        let mut assigns = Vec::new();
        for item in s.prefix.iter().flat_map(|p| p.0.iter()) {
            match item {
                CommandPrefixOrSuffixItem::IoRedirect(r) => self.redirect(r),
                CommandPrefixOrSuffixItem::Word(w) => words.push(self.word(&w.value)),
                CommandPrefixOrSuffixItem::AssignmentWord(a, w) => {
                    self.assignment(a);
                    assigns.push(Word::Lit(w.value.clone()));
                }
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
        for w in &words {
            self.subscript_text(w);
        }
        if !assigns.is_empty() {
            assigns.extend(words.iter().cloned());
            self.out.commands.push(SimpleCmd(assigns));
        }
        self.argv(words);
    }

    /// `$((…))`, `((…))`, `let`: a name or expansion in it is evaluated
    /// as arithmetic in turn, and a value like `a[$(cmd)]` runs cmd; only
    /// numbers and operators are provably harmless.
    fn arith(&mut self, text: &str) {
        if text.contains("$(") || text.contains('`') {
            self.unknown("a command substitution inside $((…)) is not followed");
        } else if text
            .chars()
            .any(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        {
            self.unknown(
                "arithmetic on a variable evaluates its value as code (a[$(…)] in it runs); write the numbers out",
            );
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
                WordPiece::ParameterExpansion(pe) => {
                    let text = raw.get(p.start_index..p.end_index).unwrap_or(raw);
                    if text.contains("$(") || text.contains('`') {
                        self.unknown("a command substitution inside ${…} is not followed");
                    }
                    if let Some(why) = param_runs(pe, text) {
                        self.unknown(why);
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
            if matches!(name.as_str(), "env" | "sudo") {
                self.env_words(rest);
            }
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
                "xargs" => {
                    let r = options(
                        rest,
                        &Opts {
                            opt: "eil",
                            ..o("adEIsLnP", "0oprtx")
                        },
                    );
                    match (r, xargs_replace(rest)) {
                        // `-I R`: the words holding R are filled from stdin.
                        (Ok(cmd), Some(repl)) => {
                            let filled = cmd
                                .iter()
                                .map(|w| match w {
                                    Word::Lit(t) if t.contains(&repl) => Word::Dynamic,
                                    w => w.clone(),
                                })
                                .collect();
                            return self.nested_argv(filled);
                        }
                        (r, _) => r,
                    }
                }
                "git" => {
                    for pair in rest.windows(2) {
                        if let [Word::Lit(c), Word::Lit(kv)] = pair {
                            if c == "-c" {
                                self.git_config(kv);
                            }
                        }
                    }
                    match git_subcommand(rest) {
                        Ok(sub) if sub.len() < rest.len() => {
                            let mut v = vec![lit("git")];
                            v.extend_from_slice(sub);
                            self.out.commands.push(SimpleCmd(v));
                        }
                        Ok(_) => {}
                        Err(why) => self.unknown(format!("git: {why}")),
                    }
                    return;
                }
                "source" | "." => {
                    let rest = rest.strip_prefix(&[lit("--")][..]).unwrap_or(rest);
                    match rest.first() {
                        Some(Word::Lit(f)) if !reads_stdin(f) => {}
                        _ => self.unknown(format!(
                            "{name} reads its script from stdin, a pipe or a computed path"
                        )),
                    }
                    return;
                }
                "let" => {
                    for a in rest {
                        match a {
                            Word::Lit(t) => self.arith(t),
                            _ => self.unknown("let evaluates a computed expression"),
                        }
                    }
                    return;
                }
                "declare" | "typeset" | "local" | "export" | "readonly" => {
                    // `-i`: every later value is evaluated as arithmetic.
                    let int_flag = |a: &Word| {
                        matches!(a, Word::Lit(t)
                            if (t.starts_with('-') || t.starts_with('+')) && t[1..].contains('i'))
                    };
                    if rest.iter().any(int_flag) {
                        self.unknown(format!(
                            "{name} -i (or a computed option) makes values arithmetic"
                        ));
                    }
                    for a in rest {
                        self.deferred_word(a);
                        if let Word::Lit(t) = a {
                            if let Some((n, v)) = t.split_once('=') {
                                self.env_value(n, &lit(v));
                            }
                        }
                    }
                    return;
                }
                "set" => {
                    self.set_options(rest);
                    return;
                }
                // A callback string run per line read or per completion.
                "mapfile" | "readarray" | "compgen" | "complete" => {
                    self.callback(&name, rest);
                    return;
                }
                "sed" | "gsed" => {
                    self.sed(rest);
                    return;
                }
                "prlimit" => prlimit(rest),
                "setarch" => options(rest, &o("", "")).and_then(|r| {
                    // The architecture, then its flags, then the command.
                    let r = r.get(1..).unwrap_or(&[]);
                    options(r, &o("", "vRFZLXBIST3"))
                }),
                "linux32" | "linux64" | "i386" | "x86_64" | "uname26" => {
                    options(rest, &o("", "vRFZLXBIST3"))
                }
                "command" => options(rest, &o("", "pvV")),
                "exec" => options(rest, &o("a", "cl")),
                // `time -- cmd`: the parser leaves the `--` to us.
                "builtin" | "nohup" | "busybox" | "--" => Ok(rest),
                // `hash -p /usr/bin/curl c` makes `c` run curl.
                "hash" => {
                    let mut it = rest.iter();
                    while let Some(a) = it.next() {
                        if *a == lit("-p") {
                            if let Some(p) = it.next() {
                                self.out.commands.push(SimpleCmd(vec![p.clone()]));
                            }
                        }
                    }
                    return;
                }
                "nice" => nice(rest),
                // The duration, then the command.
                "timeout" => options(rest, &o("sk", "v")).map(|r| r.get(1..).unwrap_or(&[])),
                "stdbuf" => options(rest, &o("ioe", "")),
                "time" => options(rest, &o("fo", "pavq")),
                "setsid" => options(rest, &o("", "cfw")),
                "ionice" => options(rest, &o("cnpPu", "t")),
                // A new root, a CPU mask, a priority: one word, then the command.
                "chroot" => options(rest, &o("", "")).map(|r| r.get(1..).unwrap_or(&[])),
                "taskset" => options(rest, &o("", "acp")).map(|r| r.get(1..).unwrap_or(&[])),
                "chrt" => {
                    options(rest, &o("TPD", "abdfiormpRve")).map(|r| r.get(1..).unwrap_or(&[]))
                }
                "unshare" => options(rest, &o("SGRw", "mUinpuCTrfc")),
                "nsenter" => options(rest, &o("tSGwr", "amuinpUCTFe")),
                "strace" | "ltrace" => options(rest, &o("eoOpPsSuEIXbaA", "fFhiqrtTvVwxyzcCDkn")),
                "flock" => {
                    // flock [opts] FILE (-c SCRIPT | CMD …)
                    match options(rest, &o("wE", "sxuneoFhV")) {
                        Ok([_, c, s, ..]) if *c == lit("-c") || *c == lit("--command") => {
                            match s {
                                Word::Lit(s) => self.script(s),
                                _ => self.unknown("flock -c runs a script computed at run time"),
                            }
                            return;
                        }
                        r => r.map(|r| r.get(1..).unwrap_or(&[])),
                    }
                }
                "watch" => {
                    // Its words are joined and run by `sh -c`.
                    match options(rest, &o("dnq", "bcegptxwr")) {
                        Ok(cmd) => {
                            let mut text = String::new();
                            for a in cmd {
                                match a {
                                    Word::Lit(a) => {
                                        text.push_str(a);
                                        text.push(' ');
                                    }
                                    _ => {
                                        return self
                                            .unknown("watch runs a command computed at run time");
                                    }
                                }
                            }
                            self.script(&text);
                            return;
                        }
                        Err(e) => Err(e),
                    }
                }
                "script" => {
                    let mut it = rest.iter();
                    while let Some(a) = it.next() {
                        if matches!(a, Word::Lit(a) if a == "--command"
                            || (a.starts_with('-') && !a.starts_with("--") && a.ends_with('c')))
                        {
                            match it.next() {
                                Some(Word::Lit(s)) => self.script(s),
                                _ => self.unknown("script -c runs a command computed at run time"),
                            }
                        } else if let Word::Lit(a) = a {
                            if let Some(s) = a.strip_prefix("--command=") {
                                self.script(s);
                            } else if let Some(s) = a.strip_prefix("-c").filter(|s| !s.is_empty()) {
                                self.script(s);
                            }
                        }
                    }
                    return;
                }
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
                    match rest.iter().find(|a| **a != lit("--")) {
                        Some(Word::Lit(a)) if a == "-p" || a == "-l" || a == "-P" => {}
                        Some(Word::Lit(a)) => self.script(a),
                        Some(_) => self.unknown("trap sets an action computed at run time"),
                        None => {}
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

    /// `git -c key=value` where git runs the value (`alias.x=!cmd`,
    /// `core.pager`, `core.sshCommand`, …).
    fn git_config(&mut self, kv: &str) {
        let Some((k, v)) = kv.split_once('=') else {
            return;
        };
        let k = k.to_ascii_lowercase();
        let runs = k.starts_with("alias.")
            || k.starts_with("pager.")
            || GIT_COMMAND_KEYS.iter().any(|s| k.ends_with(s));
        if runs {
            let v = v.trim_start_matches('!').to_owned();
            self.script(&v);
        }
    }

    /// A wrapper's command rebuilt (not a slice of the words): followed
    /// with the nesting bounded like a script's.
    fn nested_argv(&mut self, words: Vec<Word>) {
        if self.depth >= MAX_DEPTH {
            return self.unknown("wrappers are nested too deeply to follow");
        }
        self.depth += 1;
        self.argv(words);
        self.depth -= 1;
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

    /// `set -x` / `set -o xtrace`: every later command expands PS4 (which
    /// the environment or the script may set to `$(…)`).
    fn set_options(&mut self, w: &[Word]) {
        let mut it = w.iter();
        while let Some(a) = it.next() {
            match a {
                Word::Lit(a) if a == "-o" || a == "+o" => match it.next() {
                    Some(Word::Lit(o)) if o != "xtrace" && o != "verbose" => {}
                    None => {}
                    _ => return self.unknown("set -o xtrace expands PS4, which can run commands"),
                },
                Word::Lit(a) if a == "--" => return,
                Word::Lit(a) if a.starts_with('-') || a.starts_with('+') => {
                    if a[1..].contains(['x', 'v']) {
                        return self.unknown("set -x expands PS4, which can run commands");
                    }
                }
                Word::Lit(_) => return,
                _ => return self.unknown("set has an option computed at run time"),
            }
        }
    }

    /// `mapfile -C CMD`, `compgen -C CMD`/`-F FUNC`: bash runs the callback.
    fn callback(&mut self, name: &str, w: &[Word]) {
        let mut it = w.iter();
        while let Some(a) = it.next() {
            let Word::Lit(a) = a else {
                return self.unknown(format!("{name} has an option computed at run time"));
            };
            if !a.starts_with('-') || a == "--" {
                continue;
            }
            let flags = &a[1..];
            if let Some(i) = flags.find(['C', 'F']) {
                let attached = &flags[i + 1..];
                let cb = if attached.is_empty() {
                    it.next().cloned()
                } else {
                    Some(lit(attached))
                };
                match cb {
                    Some(Word::Lit(c)) if flags.as_bytes()[i] == b'C' => self.script(&c),
                    // A function name: the script's functions were read
                    // where they are defined; it may still be imported.
                    Some(Word::Lit(_)) => {}
                    _ => self.unknown(format!("{name} -C runs a callback computed at run time")),
                }
            }
        }
    }

    /// GNU sed's `e` command and the `e` flag of `s` run a shell command;
    /// a script sbx cannot read (computed, from a file) is unknown.
    fn sed(&mut self, w: &[Word]) {
        let mut scripts = Vec::new();
        let mut explicit = false;
        let mut it = w.iter();
        let mut first_operand = None;
        while let Some(a) = it.next() {
            let Word::Lit(a) = a else {
                return self.unknown("sed has an argument computed at run time");
            };
            if a == "-e" || a == "--expression" {
                explicit = true;
                match it.next() {
                    Some(Word::Lit(s)) => scripts.push(s.clone()),
                    _ => return self.unknown("sed -e has a script computed at run time"),
                }
            } else if let Some(s) = a.strip_prefix("--expression=") {
                explicit = true;
                scripts.push(s.to_owned());
            } else if a == "-f"
                || a.starts_with("--file")
                || (a.starts_with('-') && !a.starts_with("--") && a.contains('f'))
            {
                return self.unknown("sed -f runs a script file sbx cannot read");
            } else if a.starts_with("-e") && !a.starts_with("--") {
                explicit = true;
                scripts.push(a[2..].to_owned());
            } else if a.starts_with('-') && a.len() > 1 {
                // -n, -i[SUF], -E, -r, -s, -u, -z, -l N, --posix, …
                if a == "-l" || a == "--line-length" {
                    it.next();
                }
            } else if first_operand.is_none() {
                first_operand = Some(a.clone());
            }
        }
        if !explicit {
            scripts.extend(first_operand);
        }
        for s in scripts {
            if sed_runs(&s) {
                self.unknown("sed's e command runs a shell command");
            }
        }
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
                if a[1..].contains(['x', 'v']) {
                    self.unknown("a shell with -x expands PS4, which can run commands");
                }
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
            Some(Word::Lit(f)) if !stdin && !reads_stdin(f) => {}
            _ => self.unknown("a shell reading its commands from stdin runs what it reads"),
        }
    }
}

/// A word arithmetic reads as a number and nothing else.
fn plain_number(w: &Word) -> bool {
    matches!(w, Word::Lit(t) if !t.is_empty() && t.trim_start_matches(['-', '+']).chars().all(|c| c.is_ascii_digit()))
}

/// Why a `${…}` can run a command: `@P` expands the value as a prompt;
/// an indexed subscript or a substring offset is arithmetic on data; `!x`
/// names another variable whose subscript is evaluated in turn.
fn param_runs(pe: &ParameterExpr, text: &str) -> Option<&'static str> {
    if let ParameterExpr::Transform {
        op: ParameterTransformOp::PromptExpand,
        ..
    } = pe
    {
        return Some("${x@P} expands a value as a prompt, which runs its $(…)");
    }
    if let ParameterExpr::Substring { offset, length, .. } = pe {
        let plain = |e: &str| {
            e.trim()
                .trim_start_matches(['-', '+'])
                .chars()
                .all(|c| c.is_ascii_digit() || c == ' ')
        };
        if !plain(&offset.value) || length.as_ref().is_some_and(|l| !plain(&l.value)) {
            return Some(
                "a ${x:offset} offset is arithmetic on a variable, which can run commands",
            );
        }
    }
    if text.starts_with("${!") && !text.ends_with("*}") && !text.ends_with("@}") {
        return Some("${!x} follows a name held in data, whose subscript can run commands");
    }
    let index = |p: &Parameter| match p {
        Parameter::NamedWithIndex { index, .. } => {
            !index.is_empty() && !index.chars().all(|c| c.is_ascii_digit())
        }
        _ => false,
    };
    let param = match pe {
        ParameterExpr::Parameter { parameter, .. }
        | ParameterExpr::UseDefaultValues { parameter, .. }
        | ParameterExpr::AssignDefaultValues { parameter, .. }
        | ParameterExpr::IndicateErrorIfNullOrUnset { parameter, .. }
        | ParameterExpr::UseAlternativeValue { parameter, .. }
        | ParameterExpr::ParameterLength { parameter, .. }
        | ParameterExpr::RemoveSmallestSuffixPattern { parameter, .. }
        | ParameterExpr::RemoveLargestSuffixPattern { parameter, .. }
        | ParameterExpr::RemoveSmallestPrefixPattern { parameter, .. }
        | ParameterExpr::RemoveLargestPrefixPattern { parameter, .. }
        | ParameterExpr::Substring { parameter, .. }
        | ParameterExpr::Transform { parameter, .. }
        | ParameterExpr::UppercaseFirstChar { parameter, .. }
        | ParameterExpr::UppercasePattern { parameter, .. }
        | ParameterExpr::LowercaseFirstChar { parameter, .. }
        | ParameterExpr::LowercasePattern { parameter, .. }
        | ParameterExpr::ReplaceSubstring { parameter, .. } => Some(parameter),
        _ => None,
    };
    param
        .filter(|p| index(p))
        .map(|_| "an array subscript is arithmetic on data, which can run commands")
}

/// Whether a sed script uses the `e` command or the `e` flag of `s`.
/// Unsure (a syntax this does not follow) counts as yes.
fn sed_runs(script: &str) -> bool {
    let b: Vec<char> = script.chars().collect();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && (b[*i].is_whitespace() || b[*i] == ';') {
            *i += 1;
        }
    };
    // A delimited field starting after the delimiter at b[*i - 1].
    let field = |i: &mut usize, d: char| -> bool {
        while *i < b.len() && b[*i] != d {
            if b[*i] == '\\' {
                *i += 1;
            }
            *i += 1;
        }
        *i += 1;
        *i <= b.len()
    };
    loop {
        skip_ws(&mut i);
        if i >= b.len() {
            return false;
        }
        // Addresses: numbers, $, /re/, \cREc, ranges, steps, `!`.
        loop {
            match b[i] {
                c if c.is_ascii_digit()
                    || c == '$'
                    || c == ','
                    || c == '~'
                    || c == '+'
                    || c == '!'
                    || c == ' ' =>
                {
                    i += 1
                }
                '/' => {
                    i += 1;
                    if !field(&mut i, '/') {
                        return true;
                    }
                    while i < b.len() && (b[i] == 'I' || b[i] == 'M') {
                        i += 1;
                    }
                }
                '\\' if i + 1 < b.len() => {
                    let d = b[i + 1];
                    i += 2;
                    if !field(&mut i, d) {
                        return true;
                    }
                }
                _ => break,
            }
            if i >= b.len() {
                return false;
            }
        }
        let c = b[i];
        i += 1;
        match c {
            'e' => return true,
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'l' | 'n' | 'N' | 'p' | 'P'
            | 'x' | 'z' | 'F' => {}
            'q' | 'Q' | 'L' => {
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            // To the end of the line: text, a label, a file name.
            'a' | 'i' | 'c' | ':' | 'b' | 't' | 'T' | 'r' | 'R' | 'w' | 'W' | '#' => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
                // `b`/`t` labels end at `;` too; anything after is read again.
            }
            's' | 'y' => {
                let Some(&d) = b.get(i) else { return true };
                if d == '\n' || d == '\\' {
                    return true;
                }
                i += 1;
                if !field(&mut i, d) || !field(&mut i, d) {
                    return true;
                }
                if c == 's' {
                    while i < b.len() && !matches!(b[i], ';' | '\n' | '}') {
                        match b[i] {
                            'e' => return true,
                            // `w FILE` ends the command.
                            'w' => {
                                while i < b.len() && b[i] != '\n' {
                                    i += 1;
                                }
                            }
                            _ => i += 1,
                        }
                    }
                }
            }
            _ => return true,
        }
    }
}

/// `prlimit [--RESOURCE[=limits] | -X[limits] | --pid P | -o L …] command`.
fn prlimit(w: &[Word]) -> Result<&[Word], String> {
    let mut i = 0;
    while let Some(a) = w.get(i) {
        let Word::Lit(a) = a else {
            return Err("an option is computed at run time".into());
        };
        if a == "--" {
            return Ok(&w[i + 1..]);
        }
        if !a.starts_with('-') {
            return Ok(&w[i..]);
        }
        i += if matches!(a.as_str(), "-p" | "--pid" | "-o" | "--output") {
            2
        } else {
            1
        };
    }
    Ok(&[])
}

/// Variables whose value a program runs as a command.
const COMMAND_VARS: &[&str] = &[
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "GIT_PAGER",
    "PAGER",
    "MANPAGER",
    "GIT_EDITOR",
    "EDITOR",
    "VISUAL",
    "GIT_SEQUENCE_EDITOR",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "LESSOPEN",
    "LESSCLOSE",
    "PROMPT_COMMAND",
    "BROWSER",
];

/// git config keys (suffixes) whose value git runs.
const GIT_COMMAND_KEYS: &[&str] = &[
    "pager",
    "sshcommand",
    "editor",
    "fsmonitor",
    "external",
    "helper",
    "program",
    "command",
    "cmd",
    "textconv",
    "driver",
    "clean",
    "smudge",
    "process",
    "hook",
];

/// A script path that is the caller's stdin or a pipe, not a file.
fn reads_stdin(f: &str) -> bool {
    f == "-" || f.starts_with("/dev/") || (f.starts_with("/proc/") && f.contains("/fd/"))
}

/// xargs' replace string (`-I R`, `-IR`, `-i[R]`, `--replace[=R]`), when set.
fn xargs_replace(w: &[Word]) -> Option<String> {
    let mut it = w.iter();
    let mut found = None;
    while let Some(Word::Lit(a)) = it.next() {
        if !a.starts_with('-') || a == "--" {
            break;
        }
        if a == "-I" {
            if let Some(Word::Lit(r)) = it.next() {
                found = Some(r.clone());
            }
        } else if let Some(r) = a.strip_prefix("-I") {
            found = Some(r.to_owned());
        } else if let Some(r) = a.strip_prefix("-i").or_else(|| a.strip_prefix("--replace")) {
            let r = r.strip_prefix('=').unwrap_or(r);
            found = Some(if r.is_empty() { "{}" } else { r }.to_owned());
        } else if matches!(a.as_str(), "-a" | "-d" | "-E" | "-s" | "-L" | "-n" | "-P") {
            it.next();
        }
    }
    found.filter(|r| !r.is_empty())
}

/// git's global options skipped: the words from the subcommand on.
fn git_subcommand(mut w: &[Word]) -> Result<&[Word], String> {
    const WITH_ARG: &[&str] = &[
        "-C",
        "-c",
        "--git-dir",
        "--work-tree",
        "--namespace",
        "--exec-path",
        "--config-env",
        "--super-prefix",
        "--attr-source",
        "--list-cmds",
    ];
    const FLAGS: &[&str] = &[
        "-p",
        "-P",
        "--paginate",
        "--no-pager",
        "--bare",
        "--no-replace-objects",
        "--literal-pathspecs",
        "--glob-pathspecs",
        "--noglob-pathspecs",
        "--icase-pathspecs",
        "--no-optional-locks",
        "--no-advice",
        "--no-lazy-fetch",
        "--html-path",
        "--man-path",
        "--info-path",
        "--version",
        "--help",
        "-v",
        "-h",
    ];
    while let Some(first) = w.first() {
        let Word::Lit(a) = first else {
            return Err("an option is computed at run time".into());
        };
        if !a.starts_with('-') {
            return Ok(w);
        }
        let name = a.split('=').next().unwrap_or(a);
        let skip = if FLAGS.contains(&a.as_str()) || (WITH_ARG.contains(&name) && a.contains('=')) {
            1
        } else if WITH_ARG.contains(&a.as_str()) {
            2
        } else if (a.starts_with("-C") || a.starts_with("-c")) && a.len() > 2 {
            1
        } else {
            return Err(format!("unknown option {a:?}"));
        };
        w = w.get(skip..).unwrap_or(&[]);
    }
    Ok(w)
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
    // xargs: the value only with `=`.
    "replace",
    "eof",
    "max-lines",
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
    /// The word with quoted text blanked: brace expansion and extglob
    /// spanning quoted pieces (`{cu,'x'}rl`) show here.
    skeleton: String,
}

impl Builder {
    fn push(&mut self, s: &str, quoted: bool) {
        self.text.push_str(s);
        if quoted {
            self.skeleton.extend(s.chars().map(|_| '\u{0}'));
        } else {
            self.skeleton.push_str(s);
        }
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
        let sk = &self.skeleton;
        let brace = sk.find('{').is_some_and(|i| {
            sk[i..].find('}').is_some_and(|j| {
                let inner = &sk[i..i + j];
                inner.contains(',') || inner.contains("..")
            })
        });
        let extglob = ["@(", "+(", "!(", "*(", "?("]
            .iter()
            .any(|e| sk.contains(e));
        if !self.wild && (brace || extglob) {
            return Word::Pattern("*".into());
        }
        if self.wild {
            Word::Pattern(self.pattern)
        } else {
            Word::Lit(self.text)
        }
    }
}

/// Whether `pat` (`*`, `?`, `\` escapes) can match `s`. A bracket
/// expression is taken as `?` that also matches nothing, a superset; case
/// is ignored (`shopt -s nocaseglob`). Time O(len(pat) × len(s)).
pub fn wild_match(pat: &str, s: &str) -> bool {
    // (literal char or None for `*`/`?`, is_star)
    let mut toks: Vec<(Option<char>, bool)> = Vec::new();
    let mut it = pat.chars();
    while let Some(c) = it.next() {
        match c {
            '*' => toks.push((None, true)),
            '?' => toks.push((None, false)),
            '\\' => match it.next() {
                Some(n) => toks.push((Some(n), false)),
                None => toks.push((Some('\\'), false)),
            },
            c => toks.push((Some(c), false)),
        }
    }
    let s: Vec<char> = s.chars().collect();
    let eq = |a: char, b: char| a.to_lowercase().eq(b.to_lowercase());
    // can[j]: the tokens so far can match s[..j].
    let mut can = vec![false; s.len() + 1];
    can[0] = true;
    for (lit, star) in toks {
        let mut next = vec![false; s.len() + 1];
        for j in 0..=s.len() {
            next[j] = match (lit, star) {
                (None, true) => can[..=j].iter().any(|b| *b),
                (None, false) => can[j] || (j > 0 && can[j - 1]),
                (Some(c), _) => j > 0 && can[j - 1] && eq(c, s[j - 1]),
            };
        }
        can = next;
    }
    can[s.len()]
}

/// The deepest nesting of brackets and compound-command keywords, quotes
/// ignored (an overestimate is only ever a refusal).
fn nesting(text: &str) -> usize {
    let (mut d, mut max) = (0usize, 0usize);
    let mut word = String::new();
    let bump = |d: &mut usize, up: bool| {
        if up {
            *d += 1;
        } else {
            *d = d.saturating_sub(1);
        }
    };
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphabetic() {
            word.push(c);
            continue;
        }
        match word.as_str() {
            "if" | "case" | "for" | "while" | "until" | "select" => bump(&mut d, true),
            "fi" | "esac" | "done" => bump(&mut d, false),
            _ => {}
        }
        word.clear();
        match c {
            '(' | '{' | '[' => bump(&mut d, true),
            ')' | '}' | ']' => bump(&mut d, false),
            _ => {}
        }
        max = max.max(d);
    }
    max
}

#[cfg(test)]
mod tests;
