//! Glob matching with the two dialects sbx uses: case-insensitive globs over
//! environment variable names, and gitignore-like globs over workspace paths.

use std::ffi::OsStr;
use std::path::Path;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

/// Compile a name glob: globset syntax (`*`, `?`, `[..]`, `{a,b}`, backslash
/// escapes), case-insensitive, `/` not special. The one parser for names.
pub fn name_glob(pattern: &str) -> Result<Glob, globset::Error> {
    GlobBuilder::new(pattern)
        .case_insensitive(true)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
}

/// A compiled name glob. globset is the one parser and the reference
/// matcher: a pattern with any metacharacter besides a leading or trailing
/// `*` is matched by globset itself, so validation and matching cannot
/// disagree (braces accepted by one and read as literals by the other). The
/// common shapes (`X`, `X*`, `*X`, `*X*`) are byte comparisons, because env
/// filtering runs on every exec; a table-driven test holds them to globset.
#[derive(Debug, Clone)]
enum NamePat {
    Exact(Vec<u8>),
    Prefix(Vec<u8>),
    Suffix(Vec<u8>),
    Contains(Box<memchr::memmem::Finder<'static>>),
    Glob(Box<globset::GlobMatcher>),
}

/// Upper-case ASCII: globset's case-insensitive mode folds ASCII only.
fn fold(b: u8) -> u8 {
    b.to_ascii_uppercase()
}

/// Bytes that make a pattern more than a literal in globset's syntax.
const META: &[u8] = b"*?[]{}\\";

impl NamePat {
    fn new(pattern: &str, glob: &Glob) -> Self {
        let p = pattern.as_bytes();
        let lead = p.iter().take_while(|&&b| b == b'*').count();
        let body = &p[lead..];
        let trail = body.iter().rev().take_while(|&&b| b == b'*').count();
        let body = &body[..body.len() - trail];
        if body.iter().any(|b| META.contains(b)) {
            return NamePat::Glob(Box::new(glob.compile_matcher()));
        }
        let lit: Vec<u8> = body.iter().map(|&b| fold(b)).collect();
        match (lead > 0, trail > 0) {
            (false, false) => NamePat::Exact(lit),
            (true, true) => {
                NamePat::Contains(Box::new(memchr::memmem::Finder::new(&lit).into_owned()))
            }
            (true, false) => NamePat::Suffix(lit),
            (false, true) => NamePat::Prefix(lit),
        }
    }

    /// `folded` is `name` case-folded, for the byte comparisons.
    fn matches(&self, name: &OsStr, folded: &[u8]) -> bool {
        match self {
            NamePat::Exact(l) => folded == l.as_slice(),
            NamePat::Prefix(l) => folded.starts_with(l),
            NamePat::Suffix(l) => folded.ends_with(l),
            NamePat::Contains(f) => f.find(folded).is_some(),
            NamePat::Glob(m) => m.is_match(Path::new(name)),
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
            let glob = name_glob(p)?;
            v.push((p.to_owned(), NamePat::new(p, &glob)));
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
            .find(|(_, m)| m.matches(name, &folded))
            .map(|(p, _)| p.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }
}

/// Compile an anchored path glob: globset syntax, `*` and `?` stop at `/`,
/// `**` crosses it. The one parser for path patterns, used by validation
/// and by every matcher (file masks, backup excludes).
fn path_glob(anchored: &str) -> Result<Glob, globset::Error> {
    GlobBuilder::new(anchored)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
}

/// One gitignore-like path pattern: without a `/` it matches a name at any
/// depth; with one it is anchored at the workspace root; a trailing `/`
/// matches directories only.
#[derive(Debug, Clone)]
pub struct PathPattern {
    pub text: String,
    pub dir_only: bool,
    glob: Glob,
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
        // Compiled now, by the builder the matcher uses: a pattern that
        // validates is the pattern that matches.
        Ok(Self {
            text: text.to_owned(),
            dir_only,
            glob: path_glob(&anchored)?,
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
            b.add(p.glob.clone());
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
    /// The pattern that masks the file `rel` (workspace-relative) given the
    /// exceptions in `allowed`: the file's own, or that of a directory above
    /// it, as the start-time scan masks a directory whole.
    pub fn masking(&self, rel: &Path, allowed: &PathSet) -> Option<&PathPattern> {
        rel.ancestors()
            .take_while(|a| !a.as_os_str().is_empty())
            .filter_map(|a| {
                let dir = a != rel;
                allowed
                    .first_match(a, dir)
                    .is_none()
                    .then(|| self.first_match(a, dir))?
            })
            .last()
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

    /// xorshift64*: a fixed-seed generator, so a failure reproduces.
    struct Gen(u64);
    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn string(&mut self, alphabet: &[u8], max: u64) -> String {
            let n = self.next() % (max + 1);
            (0..n)
                .map(|_| alphabet[(self.next() % alphabet.len() as u64) as usize] as char)
                .collect()
        }
    }

    /// As a property over generated patterns: whatever config
    /// validation accepts means the same wherever it is used. Env names
    /// (envfilter, sbx-run's candidates) go through `NameSet`, file masks
    /// and backup excludes through `PathSet`; both must agree with
    /// globset, the validating parser, and `PathSet` with gitignore's
    /// rule. Protected paths are literal: validation refuses anything a
    /// glob would read differently.
    #[test]
    fn accepted_patterns_mean_the_same_everywhere() {
        use crate::config::{NameGlob, PathGlob, RelPath};
        let pat_alpha = b"ab_AB*?[]{},!-^\\/.";
        let name_alpha = b"abAB_,{}[]*?-!/.";
        let mut g = Gen(0x5eed_1234_abcd_0001);
        let names: Vec<String> = (0..300).map(|_| g.string(name_alpha, 6)).collect();
        let (mut names_checked, mut paths_checked, mut braces) = (0, 0, 0);
        for _ in 0..6000 {
            let p = g.string(pat_alpha, 8);
            if p.contains('{') && p.contains('}') {
                braces += 1;
            }
            if let Ok(ng) = p.parse::<NameGlob>() {
                names_checked += 1;
                let reference = name_glob(&ng.0).unwrap().compile_matcher();
                let ours = NameSet::new(&[&ng.0]).expect("accepted pattern compiles");
                for n in &names {
                    assert_eq!(
                        ours.first_match(OsStr::new(n)).is_some(),
                        reference.is_match(n),
                        "name pattern {p:?} name {n:?}"
                    );
                }
            }
            if let Ok(pg) = p.parse::<PathGlob>() {
                paths_checked += 1;
                let set =
                    PathSet::new(std::slice::from_ref(&pg.0)).expect("accepted pattern compiles");
                // gitignore: without a '/' the pattern matches the last
                // component at any depth; with one, the whole path.
                let body = p.trim_end_matches('/');
                let body = body.strip_prefix("./").unwrap_or(body);
                let (text, whole) = if body.contains('/') {
                    (body.trim_start_matches('/'), true)
                } else {
                    (body, false)
                };
                let reference = path_glob(text).unwrap().compile_matcher();
                for n in &names {
                    let path = n.trim_matches('/');
                    if path.is_empty() || path.split('/').any(|c| c.is_empty()) {
                        continue;
                    }
                    let subject = if whole {
                        path
                    } else {
                        path.rsplit('/').next().unwrap_or(path)
                    };
                    for dir in [false, true] {
                        let want = reference.is_match(subject) && (dir || !pg.0.dir_only);
                        assert_eq!(
                            set.first_match(Path::new(path), dir).is_some(),
                            want,
                            "path pattern {p:?} path {path:?} dir={dir}"
                        );
                    }
                }
            }
            if let Ok(rp) = p.parse::<RelPath>() {
                // A literal path: a glob of it matches exactly itself.
                let lit =
                    PathSet::new(&[PathPattern::new(&format!("/{}", rp.0)).unwrap()]).unwrap();
                for n in &names {
                    assert_eq!(
                        lit.first_match(Path::new(n), false).is_some(),
                        *n == rp.0,
                        "protected {p:?} vs {n:?}"
                    );
                }
            }
        }
        // The generator must reach the interesting cases, or this proves little.
        assert!(
            names_checked > 500 && paths_checked > 500 && braces > 200,
            "{names_checked} {paths_checked} {braces}"
        );
    }

    #[test]
    fn braces_match_in_names_and_paths() {
        let s = NameSet::new(&["{DB,REDIS}_URL"]).unwrap();
        assert!(s.first_match(OsStr::new("db_url")).is_some());
        assert!(s.first_match(OsStr::new("REDIS_URL")).is_some());
        assert!(s.first_match(OsStr::new("CACHE_URL")).is_none());
        let p = PathSet::new(&[PathPattern::new("*.{pem,key}").unwrap()]).unwrap();
        assert!(p.first_match(Path::new("a/b.key"), false).is_some());
        assert!(p.first_match(Path::new("a/b.pem"), false).is_some());
        assert!(p.first_match(Path::new("a/b.crt"), false).is_none());
    }
}
