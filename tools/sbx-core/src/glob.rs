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

/// An ordered list of name globs that reports which pattern matched.
#[derive(Debug, Clone)]
pub struct NameSet {
    patterns: Vec<String>,
    set: GlobSet,
}

impl NameSet {
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Self, globset::Error> {
        let mut b = GlobSetBuilder::new();
        for p in patterns {
            b.add(name_glob(p.as_ref())?);
        }
        Ok(Self {
            patterns: patterns.iter().map(|p| p.as_ref().to_owned()).collect(),
            set: b.build()?,
        })
    }

    /// The first pattern (in list order) that matches `name`.
    pub fn first_match(&self, name: &OsStr) -> Option<&str> {
        let m = self.set.matches(Path::new(name));
        m.into_iter().min().map(|i| self.patterns[i].as_str())
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
