//! `[network.rules]`: which requests the proxy lets through to a host,
//! by method and path (issue 44). One parser for the config, the state
//! sbx-fw init records and the proxy that judges.
//!
//! The language, exactly:
//! - a rule is `METHOD PATH`, separated by spaces;
//! - `METHOD` is an HTTP method (a token, written in any case, stored in
//!   upper case) or `*` for any; a request's method is compared without
//!   regard to case (a lenient server reads `get` as `GET`);
//! - `PATH` is `*` (any request target at all), or starts with `/` and is
//!   matched segment by segment against the request's path: `*` inside a
//!   segment matches any run of characters except `/`, and a segment that
//!   is just `**` matches any number of segments (none too);
//! - the query string is not matched (a rule cannot name one; `?` and `#`
//!   are refused in a rule); matching is case-sensitive;
//! - both the rule's path and the request's are first brought to one form:
//!   `%XX` escapes are decoded except those of `/`, `%`, `?`, `#`, space
//!   and non-ASCII bytes, which stay escaped in upper case (npm's
//!   `@scope%2fname` stays one segment). A request whose path has a `.` or
//!   `..` segment (also `..;x`: Tomcat drops `;params`), escapes that are
//!   not UTF-8 (overlong `%C0%AE`), an empty segment other than a trailing slash (`//`), a
//!   `\` (or `%5C`), a control character or a malformed escape is refused
//!   on a host with rules, whatever they say: servers disagree on what
//!   those mean, so no rule can be written against them.
//! - a preset name stands for rules: [`Preset`].

use std::fmt;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};

/// Hosts whose rules, unless the config gives some, are `off`: error
/// reporting and feature flags take data for any customer's project (an
/// agent can post the workspace to its own Sentry project through a
/// public DSN). Only matters when the name is allowlisted at all.
pub const DEFAULT_OFF: &[&str] = &[
    "statsig.anthropic.com",
    "sentry.io",
    "*.sentry.io",
    "statsig.com",
    "*.statsig.com",
];

/// A rule set by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Package registries: `GET *`, `HEAD *`, `OPTIONS *` (installs work;
    /// publish, unpublish, dist-tag changes, audits and logins do not).
    ReadOnly,
    /// Git hosting: reads, and git's fetch and push (and LFS) for the
    /// workspace's own repositories only: those its remotes name on this
    /// host when the sandbox starts.
    RepoOnly,
    /// No request at all.
    Off,
}

impl Preset {
    pub const ALL: [(&str, Preset); 3] = [
        ("read-only", Preset::ReadOnly),
        ("repo-only", Preset::RepoOnly),
        ("off", Preset::Off),
    ];

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("?", |(n, _)| n)
    }
}

/// One entry of a host's rules as written: a rule or a preset's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Rule(Rule),
    Preset(Preset),
}

impl std::str::FromStr for Entry {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some((_, p)) = Preset::ALL.iter().find(|(n, _)| *n == s) {
            return Ok(Self::Preset(*p));
        }
        if !s.trim().contains(' ') {
            let names: Vec<&str> = Preset::ALL.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "rule \"{s}\": write METHOD PATH (\"GET *\", \"POST /owner/repo.git/git-receive-pack\") or a preset ({})",
                names.join(", ")
            ));
        }
        s.parse().map(Self::Rule)
    }
}

/// A host's rules: a preset's name (`"read-only"`, `"repo-only"`,
/// `"off"`), or a list of `METHOD PATH` rules and preset names, such as
/// `["GET *", "POST /me/app.git/git-receive-pack"]`. `*` matches within a
/// path segment, `**` any number of segments; the query is not matched.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostRules(pub Vec<Entry>);

impl<'de> Deserialize<'de> for HostRules {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            One(String),
            Many(Vec<String>),
        }
        let raw = Raw::deserialize(d).map_err(|_| {
            de::Error::custom("expected a preset name or a list of \"METHOD PATH\" rules")
        })?;
        let list = match raw {
            Raw::One(s) => vec![s],
            Raw::Many(v) => v,
        };
        list.iter()
            .map(|s| s.parse().map_err(de::Error::custom))
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

impl HostRules {
    /// The rules these entries stand for; `repos` are the paths
    /// (`/owner/repo`, no `.git`) of the workspace's repositories on this
    /// host, for `repo-only`.
    pub fn expand(&self, repos: &[String]) -> Vec<Rule> {
        let mut out: Vec<Rule> = Vec::new();
        let mut add = |s: &str| {
            if let Ok(r) = s.parse::<Rule>()
                && !out.contains(&r)
            {
                out.push(r);
            }
        };
        for e in &self.0 {
            match e {
                Entry::Rule(r) => add(&r.to_string()),
                Entry::Preset(Preset::Off) => {}
                Entry::Preset(Preset::ReadOnly) => {
                    for r in ["GET *", "HEAD *", "OPTIONS *"] {
                        add(r);
                    }
                }
                Entry::Preset(Preset::RepoOnly) => {
                    add("GET *");
                    add("HEAD *");
                    for p in repos {
                        for base in [p.clone(), format!("{p}.git")] {
                            add(&format!("POST {base}/git-upload-pack"));
                            add(&format!("POST {base}/git-receive-pack"));
                            add(&format!("POST {base}/info/lfs/**"));
                            add(&format!("PUT {base}/info/lfs/**"));
                        }
                    }
                }
            }
        }
        out
    }

    pub fn uses(&self, p: Preset) -> bool {
        self.0.contains(&Entry::Preset(p))
    }
}

/// One `METHOD PATH` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Upper case; None for `*`.
    method: Option<String>,
    /// None for the path `*`.
    path: Option<Vec<String>>,
}

impl std::str::FromStr for Rule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("rule \"{s}\": {why}");
        let mut words = s.split_whitespace();
        let (Some(m), Some(p), None) = (words.next(), words.next(), words.next()) else {
            return Err(bad("write METHOD PATH, like \"GET *\" or \"POST /a/b\""));
        };
        let method = match m {
            "*" => None,
            m if m.bytes().all(is_tchar) => Some(m.to_ascii_uppercase()),
            _ => return Err(bad("the method is not an HTTP method (or *)")),
        };
        let path = match p {
            "*" => None,
            p if p.starts_with('/') => {
                if p.contains(['?', '#']) {
                    return Err(bad(
                        "a query or fragment cannot be matched: end the path before '?'",
                    ));
                }
                let segs = segments(p).map_err(|e| bad(&e))?;
                if segs.iter().any(|s| s.contains("**") && s != "**") {
                    return Err(bad("'**' must be a whole segment (/a/**/b)"));
                }
                Some(segs)
            }
            _ => return Err(bad("the path is * or starts with /")),
        };
        Ok(Self { method, path })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.method.as_deref().unwrap_or("*"))?;
        match &self.path {
            None => f.write_str(" *"),
            Some(segs) => write!(f, " /{}", segs.join("/")),
        }
    }
}

impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

impl Rule {
    /// Whether a request (its method, and its target in origin form, or
    /// `*`) is one this rule lets through. `path` is [`request_path`]'s.
    pub fn allows(&self, method: &str, path: &Target) -> bool {
        if let Some(m) = &self.method
            && !m.eq_ignore_ascii_case(method)
        {
            return false;
        }
        match (&self.path, path) {
            (None, _) => true,
            (Some(_), Target::Asterisk) => false,
            (Some(p), Target::Path(segs)) => match_segs(p, segs),
        }
    }
}

/// A request target brought to the form rules are matched against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `OPTIONS *`: only a rule whose path is `*` matches it.
    Asterisk,
    Path(Vec<String>),
}

/// The request target as rules see it: origin-form only (an absolute-form
/// target is refused before this), the query dropped. Err: why no rule
/// can judge it (the request is refused).
pub fn request_path(target: &str) -> Result<Target, String> {
    if target == "*" {
        return Ok(Target::Asterisk);
    }
    if !target.starts_with('/') {
        return Err("the request target is not a path".into());
    }
    if target.contains('#') {
        return Err("a fragment in the request target".into());
    }
    let path = target.split('?').next().unwrap_or_default();
    segments(path).map(Target::Path)
}

/// Whether the target's query has a `_method` parameter, which Laravel,
/// Symfony and Rack's MethodOverride read as the request's real method.
/// Its name is read as PHP reads it: escapes decoded, `.`, space, `+` and
/// `[` taken for `_`, any case.
pub fn query_overrides_method(target: &str) -> bool {
    let Some((_, query)) = target.split_once('?') else {
        return false;
    };
    query.split(['&', ';']).any(|kv| {
        let key = kv.split('=').next().unwrap_or_default();
        let mut name = Vec::with_capacity(key.len());
        let b = key.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let hex = (b[i] == b'%')
                .then(|| b.get(i + 1..i + 3))
                .flatten()
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            let c = match hex {
                Some(c) => {
                    i += 3;
                    c
                }
                None => {
                    i += 1;
                    b[i - 1]
                }
            };
            name.push(if matches!(c, b'.' | b' ' | b'+' | b'[') {
                b'_'
            } else {
                c
            });
        }
        name.eq_ignore_ascii_case(b"_method")
    })
}

/// `/a/b%41/c/` -> ["a", "bA", "c", ""], after the checks in the module
/// docs.
fn segments(path: &str) -> Result<Vec<String>, String> {
    let rest = &path[1..];
    let raw: Vec<&str> = rest.split('/').collect();
    let mut out = Vec::with_capacity(raw.len());
    for (i, seg) in raw.iter().enumerate() {
        let s = canonical(seg)?;
        if s.is_empty() && i + 1 < raw.len() {
            return Err("an empty path segment (//)".into());
        }
        // Tomcat and Spring drop `;params` from a segment: `..;x` is `..`.
        let bare = s.split(';').next().unwrap_or_default();
        if bare == "." || bare == ".." {
            return Err("a '.' or '..' path segment".into());
        }
        out.push(s);
    }
    Ok(out)
}

/// One segment with its escapes decoded where that is unambiguous.
fn canonical(seg: &str) -> Result<String, String> {
    let b = seg.as_bytes();
    let mut out = String::with_capacity(seg.len());
    // Escaped non-ASCII bytes must spell UTF-8: an overlong `%C0%AE` is
    // `.` to a lenient decoder.
    let mut decoded = Vec::with_capacity(seg.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let byte = if c == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("a malformed %-escape in the path")?;
            i += 3;
            hex
        } else {
            i += 1;
            if c == b'\\' || !c.is_ascii() || c.is_ascii_control() || c == b' ' {
                return Err("a '\\', space, control or raw non-ASCII byte in the path".into());
            }
            out.push(char::from(c));
            decoded.push(c);
            continue;
        };
        if byte == b'\\' || byte.is_ascii_control() {
            return Err("an escaped '\\' or control character in the path".into());
        }
        decoded.push(byte);
        if byte.is_ascii() && !matches!(byte, b'/' | b'%' | b'?' | b'#' | b' ') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    if std::str::from_utf8(&decoded).is_err() {
        return Err("escaped bytes in the path that are not UTF-8".into());
    }
    Ok(out)
}

fn match_segs(pat: &[String], segs: &[String]) -> bool {
    match pat.split_first() {
        None => segs.is_empty(),
        Some((p, rest)) if p == "**" => (0..=segs.len()).any(|k| match_segs(rest, &segs[k..])),
        Some((p, rest)) => match segs.split_first() {
            Some((s, more)) => glob(p.as_bytes(), s.as_bytes()) && match_segs(rest, more),
            None => false,
        },
    }
}

/// `*` matches any run of bytes; everything else itself.
fn glob(p: &[u8], s: &[u8]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|k| glob(rest, &s[k..])),
        Some((c, rest)) => s.first() == Some(c) && glob(rest, &s[1..]),
    }
}

/// RFC 9110 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The repository path (`/owner/repo`, no `.git`, no trailing slash) a
/// git remote URL names on `host`: `https://host/o/r.git`,
/// `ssh://git@host/o/r`, `git@host:o/r.git`. None for another host or
/// anything else.
pub fn remote_repo(url: &str, host: &str) -> Option<String> {
    let (h, path) = if let Some((scheme, rest)) = url.split_once("://") {
        if !matches!(scheme, "https" | "http" | "ssh" | "git") {
            return None;
        }
        let (auth, path) = rest.split_once('/')?;
        let hostport = auth.rsplit('@').next()?;
        let h = hostport.split(':').next()?;
        (h, format!("/{path}"))
    } else {
        // scp-like: [user@]host:path
        let (auth, path) = url.split_once(':')?;
        if auth.contains('/') {
            return None;
        }
        let h = auth.rsplit('@').next()?;
        (h, format!("/{}", path.trim_start_matches('/')))
    };
    if !h.eq_ignore_ascii_case(host) {
        return None;
    }
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    // The path must itself be a fair rule path: no '..', no query.
    let r: Rule = format!("POST {path}").parse().ok()?;
    let segs = r.path?;
    (segs.len() >= 2 && !segs.iter().any(|x| x.is_empty() || x.contains('*')))
        .then(|| format!("/{}", segs.join("/")))
}

#[cfg(test)]
mod tests;
