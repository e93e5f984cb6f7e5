//! The host's apt sources, read in both formats (one-line `deb` entries and
//! deb822 `.sources` stanzas). The mirror a bootstrap image is built from,
//! and the registry hosts a firewall allows, come from here at run time and
//! are never written into the code.

use std::path::Path;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
/// A stanza with `Enabled: no` (or any of apt's other words for false) is
/// left out, as apt leaves it out.
pub fn parse_sources(text: &str) -> Vec<AptSource> {
    let mut out = Vec::new();
    let mut s = Stanza::default();
    for line in text.lines() {
        // apt ends a stanza at a line that is empty or only white space.
        if line.trim().is_empty() {
            out.extend(std::mem::take(&mut s).finish());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        // Continuation lines start with white space.
        let (field, value) = if line.starts_with([' ', '\t']) {
            match &s.last {
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
            "types" => s.src.types.extend(words),
            "uris" => s.src.uris.extend(words),
            "suites" => s.src.suites.extend(words),
            "components" => s.src.components.extend(words),
            "enabled" => s.enabled = !is_apt_false(value),
            _ => {}
        }
        s.last = Some(field);
    }
    out.extend(s.finish());
    out
}

/// One deb822 stanza while it is read.
struct Stanza {
    src: AptSource,
    enabled: bool,
    last: Option<String>,
}

impl Default for Stanza {
    fn default() -> Self {
        Self {
            src: AptSource::default(),
            enabled: true,
            last: None,
        }
    }
}

impl Stanza {
    fn finish(self) -> Option<AptSource> {
        (self.enabled && !self.src.uris.is_empty() && !self.src.suites.is_empty())
            .then_some(self.src)
    }
}

/// apt's words for false (`StringToBool`); anything else leaves a stanza on.
fn is_apt_false(v: &str) -> bool {
    ["no", "false", "without", "off", "disable", "0"]
        .iter()
        .any(|f| v.eq_ignore_ascii_case(f))
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

    #[test]
    fn deb822_disabled_stanzas_and_odd_spacing() {
        let uris = |t: &str| -> Vec<String> {
            parse_sources(t).into_iter().flat_map(|s| s.uris).collect()
        };
        for off in ["no", "No", "false", "off", "0", "disable"] {
            let t =
                format!("Types: deb\nURIs: http://off.test/x\nSuites: bookworm\nEnabled: {off}\n");
            assert_eq!(uris(&t), Vec::<String>::new(), "Enabled: {off}");
        }
        for on in ["yes", "true", "1"] {
            let t =
                format!("Types: deb\nURIs: http://on.test/x\nSuites: bookworm\nEnabled: {on}\n");
            assert_eq!(uris(&t), ["http://on.test/x"], "Enabled: {on}");
        }
        // A line of spaces ends a stanza, so Enabled: no below it belongs
        // to the second; CRLF files and continuation lines read the same.
        let t = "Types: deb\r\nURIs: http://a.test/x\r\n  http://b.test/x\r\nSuites: bookworm\r\n \t\r\n\
                 Types: deb\nURIs: http://off.test/x\nSuites: bookworm\nEnabled: no\n";
        assert_eq!(uris(t), ["http://a.test/x", "http://b.test/x"]);
        // Enabled: no on the first stanza does not leak into the next.
        let t = "Enabled: no\nTypes: deb\nURIs: http://off.test/x\nSuites: bookworm\n\n\n\
                 Types: deb\nURIs: http://on.test/x\nSuites: bookworm\n";
        assert_eq!(uris(t), ["http://on.test/x"]);
    }

    #[test]
    fn read_sources_skips_disabled_files_content() {
        let d = tempfile::tempdir().unwrap();
        let etc = d.path().join("etc/apt/sources.list.d");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(
            etc.join("a.sources"),
            "Types: deb\nURIs: http://off.test/debian\nSuites: bookworm\nEnabled: no\n",
        )
        .unwrap();
        std::fs::write(
            etc.join("b.sources"),
            "Types: deb\nURIs: http://on.test/debian\nSuites: bookworm\n",
        )
        .unwrap();
        let s = read_sources(d.path());
        assert_eq!(
            mirror_for(&s, "bookworm").as_deref(),
            Some("http://on.test/debian")
        );
    }
}
