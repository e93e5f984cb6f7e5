//! Every relative link in the project's Markdown must lead somewhere: the
//! README and docs/ point into each other by `file#anchor`, and a heading
//! renamed in one file would otherwise break a link in another unnoticed.
//! Anchors follow GitHub's rules, since that is where readers click them.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// The Markdown files whose links are checked, relative to the root:
/// the README, CONTRIBUTING.md, bench/RESULTS.md and every docs/*.md.
pub fn checked_files(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md", "bench/RESULTS.md"]
        .iter()
        .map(PathBuf::from)
        .collect();
    if let Ok(dir) = std::fs::read_dir(root.join("docs")) {
        let mut docs: Vec<PathBuf> = dir
            .filter_map(|e| e.ok())
            .map(|e| PathBuf::from("docs").join(e.file_name()))
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        docs.sort();
        files.extend(docs);
    }
    files
}

/// A link that does not resolve: the file it is in, the link as written,
/// and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    pub file: PathBuf,
    pub link: String,
    pub why: String,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.file.display(), self.link, self.why)
    }
}

/// Every broken relative link (missing file, or missing `#anchor` in a
/// Markdown target) in `files`, relative to `root`.
pub fn broken(root: &Path, files: &[PathBuf]) -> Vec<Broken> {
    let mut anchors: HashMap<PathBuf, HashSet<String>> = HashMap::new();
    let mut out = Vec::new();
    for file in files {
        let text = match std::fs::read_to_string(root.join(file)) {
            Ok(t) => t,
            Err(e) => {
                out.push(Broken {
                    file: file.clone(),
                    link: String::new(),
                    why: format!("cannot read: {e}"),
                });
                continue;
            }
        };
        for link in links(&text) {
            if let Some(why) = check(root, file, &link, &mut anchors) {
                out.push(Broken {
                    file: file.clone(),
                    link,
                    why,
                });
            }
        }
    }
    out
}

/// Why `link` (found in `file`) does not resolve, or None when it does.
fn check(
    root: &Path,
    file: &Path,
    link: &str,
    anchors: &mut HashMap<PathBuf, HashSet<String>>,
) -> Option<String> {
    // Absolute URLs (https:, mailto:) are not ours to check offline.
    if link.contains("://") || link.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match link.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (link, None),
    };
    let target = if path.is_empty() {
        file.to_path_buf()
    } else if path.starts_with('/') {
        // GitHub resolves a leading slash from the repository root.
        normalize(Path::new(path.trim_start_matches('/')))
    } else {
        normalize(&file.parent().unwrap_or(Path::new("")).join(path))
    };
    if target.components().next() == Some(Component::ParentDir) {
        return Some("points outside the repository".into());
    }
    let full = root.join(&target);
    if !full.exists() {
        return Some(format!("{} does not exist", target.display()));
    }
    let anchor = anchor?;
    if target.extension().is_none_or(|e| e != "md") {
        // Anchors into source files (#L10) are GitHub's line links.
        return None;
    }
    let known = anchors.entry(target.clone()).or_insert_with(|| {
        std::fs::read_to_string(&full)
            .map(|t| heading_anchors(&t))
            .unwrap_or_default()
    });
    if known.contains(anchor) {
        None
    } else {
        Some(format!(
            "no heading in {} has anchor #{anchor}",
            target.display()
        ))
    }
}

/// `a/./b/../c` -> `a/c`, keeping leading `..`s so escapes are seen.
fn normalize(p: &Path) -> PathBuf {
    let mut out: Vec<Component> = Vec::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out.iter().collect()
}

fn parser(text: &str) -> Parser<'_> {
    Parser::new_ext(
        text,
        Options::ENABLE_TABLES | Options::ENABLE_HEADING_ATTRIBUTES,
    )
}

/// The destinations of every link and image in `text`, as written.
pub fn links(text: &str) -> Vec<String> {
    parser(text)
        .filter_map(|e| match e {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                Some(dest_url.to_string())
            }
            _ => None,
        })
        .collect()
}

/// The anchors GitHub gives the headings of `text`: an explicit `{#id}`,
/// else the slug of the heading's text, with `-1`, `-2`… for repeats.
pub fn heading_anchors(text: &str) -> HashSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = HashSet::new();
    let mut heading: Option<(String, Option<String>)> = None;
    for e in parser(text) {
        match e {
            Event::Start(Tag::Heading { id, .. }) => {
                heading = Some((String::new(), id.map(|i| i.to_string())));
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some((s, _)) = heading.as_mut() {
                    s.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some((s, id)) = heading.take() {
                    let base = id.unwrap_or_else(|| slug(&s));
                    let n = seen.entry(base.clone()).or_insert(0);
                    out.insert(if *n == 0 {
                        base.clone()
                    } else {
                        format!("{base}-{n}")
                    });
                    *n += 1;
                }
            }
            _ => {}
        }
    }
    out
}

/// GitHub's heading slug: lower case, letters, digits, `-` and `_` kept,
/// each space a `-`, everything else dropped.
pub fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_follow_github() {
        for (heading, want) in [
            ("The first run", "the-first-run"),
            ("Tool permissions (`[tools]`)", "tool-permissions-tools"),
            (
                "Headless agent runs (`sbx-run agent`)",
                "headless-agent-runs-sbx-run-agent",
            ),
            ("The guest's host API", "the-guests-host-api"),
            (
                "Its limits: three layers, none complete alone",
                "its-limits-three-layers-none-complete-alone",
            ),
            ("sbx — guarded sandboxes", "sbx--guarded-sandboxes"),
            ("`[network]`.allow-domains", "networkallow-domains"),
            ("snake_case key", "snake_case-key"),
        ] {
            assert_eq!(slug(heading), want, "{heading}");
        }
    }

    #[test]
    fn repeated_headings_are_numbered_and_code_spans_count() {
        let a = heading_anchors("# A\n\n## Notes\n\n## Notes\n\n```\n# not a heading\n```\n");
        let want: HashSet<String> = ["a", "notes", "notes-1"].map(String::from).into();
        assert_eq!(a, want);
    }

    #[test]
    fn links_skip_code() {
        let l = links(
            "[a](x.md) `[b](y.md)`\n\n```\n[c](z.md)\n```\n\n| t |\n|---|\n| [d](w.md#k) |\n",
        );
        assert_eq!(l, ["x.md", "w.md#k"]);
    }
}
