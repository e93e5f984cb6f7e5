//! Glob matching with the two dialects sbx uses: case-insensitive globs over
//! environment variable names, and gitignore-like globs over workspace paths.

use std::ffi::OsStr;
use std::path::Path;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

/// Compile a name glob (case-insensitive; `*` and `?` and `[..]`).
pub fn name_glob(pattern: &str) -> Result<Glob, globset::Error> {
    GlobBuilder::new(pattern)
        .case_insensitive(true)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
}

/// A name glob compiled for matching without a regex engine: env filtering
/// runs on every exec, so there is no compile step to pay for. The common
/// shapes (`X`, `X*`, `*X`, `*X*`) are plain byte comparisons.
#[derive(Debug, Clone)]
enum NamePat {
    Exact(Vec<u8>),
    Prefix(Vec<u8>),
    Suffix(Vec<u8>),
    Contains(Box<memchr::memmem::Finder<'static>>),
    General(Vec<Tok>),
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Lit(u8),
    Any,
    Star,
    Class {
        negated: bool,
        ranges: Vec<(u8, u8)>,
    },
}

/// Upper-case ASCII: matching is case-insensitive, like the globset
/// definition used for validation.
fn fold(b: u8) -> u8 {
    b.to_ascii_uppercase()
}

fn tokenize(pattern: &str) -> Vec<Tok> {
    let p = pattern.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            b'*' => {
                if toks.last() != Some(&Tok::Star) {
                    toks.push(Tok::Star);
                }
            }
            b'?' => toks.push(Tok::Any),
            b'\\' if i + 1 < p.len() => {
                i += 1;
                toks.push(Tok::Lit(fold(p[i])));
            }
            b'[' => {
                let mut j = i + 1;
                let negated = j < p.len() && (p[j] == b'!' || p[j] == b'^');
                if negated {
                    j += 1;
                }
                let mut ranges = Vec::new();
                let mut first = true;
                while j < p.len() && (p[j] != b']' || first) {
                    let lo = p[j];
                    if j + 2 < p.len() && p[j + 1] == b'-' && p[j + 2] != b']' {
                        ranges.push((lo, p[j + 2]));
                        j += 3;
                    } else {
                        ranges.push((lo, lo));
                        j += 1;
                    }
                    first = false;
                }
                // Validated by globset: the class is closed.
                toks.push(Tok::Class { negated, ranges });
                i = j;
            }
            b => toks.push(Tok::Lit(fold(b))),
        }
        i += 1;
    }
    toks
}

fn class_matches(negated: bool, ranges: &[(u8, u8)], b: u8) -> bool {
    // Case-insensitive: try the byte as given and in both cases.
    let hit = |c: u8| ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi);
    let any = hit(b) || hit(b.to_ascii_lowercase()) || hit(b.to_ascii_uppercase());
    any != negated
}

/// Glob match with `*` backtracking (the classic two-pointer algorithm).
fn general_match(toks: &[Tok], name: &[u8]) -> bool {
    let (mut t, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        let ok = match toks.get(t) {
            Some(Tok::Lit(c)) => *c == name[n],
            Some(Tok::Any) => true,
            Some(Tok::Class { negated, ranges }) => class_matches(*negated, ranges, name[n]),
            Some(Tok::Star) => {
                star = Some((t, n));
                t += 1;
                continue;
            }
            None => false,
        };
        if ok {
            t += 1;
            n += 1;
        } else if let Some((st, sn)) = star {
            t = st + 1;
            n = sn + 1;
            star = Some((st, sn + 1));
        } else {
            return false;
        }
    }
    toks[t..].iter().all(|x| *x == Tok::Star)
}

impl NamePat {
    fn new(pattern: &str) -> Self {
        let toks = tokenize(pattern);
        let lits = |ts: &[Tok]| -> Option<Vec<u8>> {
            ts.iter()
                .map(|t| match t {
                    Tok::Lit(c) => Some(*c),
                    _ => None,
                })
                .collect()
        };
        let n = toks.len();
        let star_at = |i: usize| toks.get(i) == Some(&Tok::Star);
        if let Some(l) = lits(&toks) {
            return NamePat::Exact(l);
        }
        if n >= 2 && star_at(0) && star_at(n - 1) {
            if let Some(l) = lits(&toks[1..n - 1]) {
                return NamePat::Contains(Box::new(memchr::memmem::Finder::new(&l).into_owned()));
            }
        }
        if n >= 1 && star_at(0) {
            if let Some(l) = lits(&toks[1..]) {
                return NamePat::Suffix(l);
            }
        }
        if n >= 1 && star_at(n - 1) {
            if let Some(l) = lits(&toks[..n - 1]) {
                return NamePat::Prefix(l);
            }
        }
        NamePat::General(toks)
    }

    /// `name` is already case-folded.
    fn matches(&self, name: &[u8]) -> bool {
        match self {
            NamePat::Exact(l) => name == l.as_slice(),
            NamePat::Prefix(l) => name.starts_with(l),
            NamePat::Suffix(l) => name.ends_with(l),
            NamePat::Contains(f) => f.find(name).is_some(),
            NamePat::General(t) => general_match(t, name),
        }
    }
}

/// An ordered list of name globs that reports which pattern matched.
#[derive(Debug, Clone)]
pub struct NameSet {
    patterns: Vec<(String, NamePat)>,
}

impl NameSet {
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Self, globset::Error> {
        let mut v = Vec::with_capacity(patterns.len());
        for p in patterns {
            let p = p.as_ref();
            // globset parses (no regex is compiled) to reject bad syntax.
            name_glob(p)?;
            v.push((p.to_owned(), NamePat::new(p)));
        }
        Ok(Self { patterns: v })
    }

    /// The first pattern (in list order) that matches `name`.
    pub fn first_match(&self, name: &OsStr) -> Option<&str> {
        use std::os::unix::ffi::OsStrExt;
        if self.patterns.is_empty() {
            return None;
        }
        let folded: Vec<u8> = name.as_bytes().iter().map(|&b| fold(b)).collect();
        self.patterns
            .iter()
            .find(|(_, m)| m.matches(&folded))
            .map(|(p, _)| p.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }
}

/// One gitignore-like path pattern: without a `/` it matches a name at any
/// depth; with one it is anchored at the workspace root; a trailing `/`
/// matches directories only.
#[derive(Debug, Clone)]
pub struct PathPattern {
    pub text: String,
    pub dir_only: bool,
    anchored: String,
}

impl PathPattern {
    pub fn new(text: &str) -> Result<Self, globset::Error> {
        let dir_only = text.ends_with('/');
        let body = text.trim_end_matches('/');
        let body = body.strip_prefix("./").unwrap_or(body);
        let anchored = if body.contains('/') {
            body.trim_start_matches('/').to_owned()
        } else {
            format!("**/{body}")
        };
        // Validate now so a bad pattern is a config error, not a later panic.
        Glob::new(&anchored)?;
        Ok(Self {
            text: text.to_owned(),
            dir_only,
            anchored,
        })
    }
}

/// A compiled list of path patterns.
#[derive(Debug, Clone)]
pub struct PathSet {
    patterns: Vec<PathPattern>,
    set: GlobSet,
}

impl PathSet {
    pub fn new(patterns: &[PathPattern]) -> Result<Self, globset::Error> {
        let mut b = GlobSetBuilder::new();
        for p in patterns {
            b.add(
                GlobBuilder::new(&p.anchored)
                    .literal_separator(true)
                    .backslash_escape(true)
                    .build()?,
            );
        }
        Ok(Self {
            patterns: patterns.to_vec(),
            set: b.build()?,
        })
    }

    /// The first pattern matching the workspace-relative `path`.
    pub fn first_match(&self, path: &Path, is_dir: bool) -> Option<&PathPattern> {
        self.set
            .matches(path)
            .into_iter()
            .map(|i| &self.patterns[i])
            .find(|p| is_dir || !p.dir_only)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_case_insensitive_and_ordered() {
        let s = NameSet::new(&["*_TOKEN", "GITHUB_*"]).unwrap();
        assert_eq!(s.first_match(OsStr::new("github_token")), Some("*_TOKEN"));
        assert_eq!(s.first_match(OsStr::new("GITHUB_USER")), Some("GITHUB_*"));
        assert_eq!(s.first_match(OsStr::new("TOKENIZER")), None);
    }

    /// The hand matcher must agree with globset (the reference) everywhere.
    #[test]
    fn name_matcher_agrees_with_globset() {
        let patterns = [
            "PATH",
            "LC_*",
            "*_KEY",
            "*SECRET*",
            "AWS_*",
            "*_TOKEN_*",
            "A?C",
            "[AB]X*",
            "[!A]*",
            "*[0-9]",
            "X\\*Y",
            "*",
            "**",
            "a*b*c",
            "*a*b",
            "[a-c]?[!x-z]*",
            "gh_*_pat",
            "é*",
        ];
        let names = [
            "PATH",
            "path",
            "PATHS",
            "LC_ALL",
            "lc_all",
            "LC",
            "MY_KEY",
            "my_key",
            "KEY",
            "_KEY",
            "SECRETARY",
            "a_secret_b",
            "AWS_",
            "aws_region",
            "X_TOKEN_Y",
            "_TOKEN_",
            "ABC",
            "abc",
            "AC",
            "AXZ",
            "BX",
            "CX",
            "B",
            "A",
            "x9",
            "X*Y",
            "XaY",
            "",
            "abc",
            "aXbYc",
            "acb",
            "b1y",
            "cQa",
            "gh_x_pat",
            "éa",
            "ÉA",
        ];
        for p in patterns {
            let reference = name_glob(p).unwrap().compile_matcher();
            let ours = NameSet::new(&[p]).unwrap();
            for n in names {
                assert_eq!(
                    ours.first_match(OsStr::new(n)).is_some(),
                    reference.is_match(n),
                    "pattern {p:?} name {n:?}"
                );
            }
        }
    }

    #[test]
    fn path_patterns_like_gitignore() {
        let pats: Vec<_> = [".env", ".env.*", "*.pem", ".ssh/", "config/prod.key"]
            .iter()
            .map(|p| PathPattern::new(p).unwrap())
            .collect();
        let set = PathSet::new(&pats).unwrap();
        let cases: &[(&str, bool, Option<&str>)] = &[
            (".env", false, Some(".env")),
            ("sub/dir/.env", false, Some(".env")),
            (".env.local", false, Some(".env.*")),
            ("a/b/cert.pem", false, Some("*.pem")),
            (".ssh", true, Some(".ssh/")),
            (".ssh", false, None),
            ("config/prod.key", false, Some("config/prod.key")),
            ("x/config/prod.key", false, None),
            ("src/main.rs", false, None),
            (".environment", false, None),
        ];
        for (path, dir, want) in cases {
            let got = set
                .first_match(Path::new(path), *dir)
                .map(|p| p.text.as_str());
            assert_eq!(got, *want, "{path} dir={dir}");
        }
    }
}
