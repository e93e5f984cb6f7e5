//! The host's apt sources, read in both formats (one-line `deb` entries and
//! deb822 `.sources` stanzas). The mirror a bootstrap image is built from,
//! and the registry hosts a firewall allows, come from here at run time and
//! are never written into the code.

use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AptSource {
    pub types: Vec<String>,
    pub uris: Vec<String>,
    pub suites: Vec<String>,
    pub components: Vec<String>,
}

/// Parse one-line format: `deb [opts] uri suite [component...]`.
pub fn parse_list(text: &str) -> Vec<AptSource> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace().peekable();
        let Some(kind) = words.next() else { continue };
        if kind != "deb" && kind != "deb-src" {
            continue;
        }
        // Options are one bracketed group that may contain spaces.
        if words.peek().is_some_and(|w| w.starts_with('[')) {
            for w in words.by_ref() {
                if w.ends_with(']') {
                    break;
                }
            }
        }
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else {
            continue;
        };
        out.push(AptSource {
            types: vec![kind.to_owned()],
            uris: vec![uri.to_owned()],
            suites: vec![suite.to_owned()],
            components: words.map(str::to_owned).collect(),
        });
    }
    out
}

/// Parse deb822 format: stanzas of `Field: value` separated by blank lines.
pub fn parse_sources(text: &str) -> Vec<AptSource> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let mut s = AptSource {
            types: vec![],
            uris: vec![],
            suites: vec![],
            components: vec![],
        };
        let mut enabled = true;
        let mut last: Option<String> = None;
        for line in stanza.lines() {
            if line.starts_with('#') {
                continue;
            }
            // Continuation lines start with white space.
            let (field, value) = if line.starts_with([' ', '\t']) {
                match &last {
                    Some(f) => (f.clone(), line.trim()),
                    None => continue,
                }
            } else {
                match line.split_once(':') {
                    Some((f, v)) => (f.trim().to_ascii_lowercase(), v.trim()),
                    None => continue,
                }
            };
            let words = value.split_whitespace().map(str::to_owned);
            match field.as_str() {
                "types" => s.types.extend(words),
                "uris" => s.uris.extend(words),
                "suites" => s.suites.extend(words),
                "components" => s.components.extend(words),
                "enabled" => enabled = !value.eq_ignore_ascii_case("no"),
                _ => {}
            }
            last = Some(field);
        }
        if enabled && !s.uris.is_empty() && !s.suites.is_empty() {
            out.push(s);
        }
    }
    out
}

/// Every source under an apt root (`/` for the host): sources.list, then
/// sources.list.d/*.list and *.sources in name order, as apt reads them.
pub fn read_sources(root: &Path) -> Vec<AptSource> {
    let etc = root.join("etc/apt");
    let mut out = Vec::new();
    if let Ok(t) = std::fs::read_to_string(etc.join("sources.list")) {
        out.extend(parse_list(&t));
    }
    let mut files: Vec<_> = std::fs::read_dir(etc.join("sources.list.d"))
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    for f in files {
        let Ok(t) = std::fs::read_to_string(&f) else {
            continue;
        };
        match f.extension().and_then(|e| e.to_str()) {
            Some("list") => out.extend(parse_list(&t)),
            Some("sources") => out.extend(parse_sources(&t)),
            _ => {}
        }
    }
    out
}

/// The first binary-package mirror that serves `suite` (e.g. "bookworm").
pub fn mirror_for(sources: &[AptSource], suite: &str) -> Option<String> {
    sources
        .iter()
        .filter(|s| s.types.iter().any(|t| t == "deb"))
        .find(|s| s.suites.iter().any(|x| x == suite))
        .and_then(|s| s.uris.first().cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_format() {
        let s = parse_list(
            "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://mirror.test/debian bookworm main contrib\n\
             deb-src http://mirror.test/debian bookworm main\n\ndeb http://sec.test/debian-security bookworm-security main # x\n",
        );
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].uris, ["http://mirror.test/debian"]);
        assert_eq!(s[0].components, ["main", "contrib"]);
        assert_eq!(
            mirror_for(&s, "bookworm").as_deref(),
            Some("http://mirror.test/debian")
        );
    }

    #[test]
    fn deb822_format() {
        let s = parse_sources(
            "Types: deb\n# a comment\nURIs: http://mirror.test/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n\
             Types: deb\nURIs: http://sec.test/debian-security\nSuites: bookworm-security\nComponents: main\n\n\
             Types: deb\nURIs: http://off.test/x\nSuites: bookworm\nEnabled: no\n",
        );
        assert_eq!(s.len(), 2);
        assert_eq!(
            mirror_for(&s, "bookworm").as_deref(),
            Some("http://mirror.test/debian")
        );
        assert_eq!(mirror_for(&s, "trixie"), None);
        let uris: Vec<&str> = s.iter().flat_map(|s| &s.uris).map(String::as_str).collect();
        assert_eq!(
            uris,
            [
                "http://mirror.test/debian",
                "http://sec.test/debian-security"
            ]
        );
    }
}
