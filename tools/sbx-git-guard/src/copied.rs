//! A stash's change 3-way merged into a file the branch changed since.
//!
//! `cherry-pick`, a `rebase -i` pick or `revert -m` of a stash commit onto
//! a branch that changed the same file has neither the stash's id, tree nor
//! blob: the merge makes a new blob, and the sequencer commits it with no
//! pre-commit. In a 3-way merge of (base S^, ours P, theirs S), every line
//! the result adds against P comes from S's added lines; so a new commit
//! (one that [`crate::hooks`]' blob check lets through) may not add a line a
//! recorded stash commit added, unless the line is already in its first
//! parent's tree or a branch commit outside that parent's history added or
//! removed it (the original of a rebased commit, made with pre-commit).

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use crate::hooks::{Git, finish, git_start};

/// The diff options every patch here is read with: git's own diff of the
/// contents (no external driver, no textconv, binary as text), one path
/// per file, from the top directory.
const PATCH: &[&str] = &[
    "-p",
    "-U0",
    "--text",
    "--no-ext-diff",
    "--no-textconv",
    "--no-renames",
    "--no-color",
    "--no-relative",
    "--ignore-submodules=none",
    "--format=%x00%H %P",
    "--encoding=UTF-8",
];

/// A line worth comparing: one with a letter or digit (or a byte beyond
/// ASCII). Blank and punctuation-only lines (`}`, `*/`) are in nearly every
/// change, so matching them would refuse unrelated pulls and merges.
pub fn telling(line: &[u8]) -> bool {
    line.iter().any(|b| b.is_ascii_alphanumeric() || *b >= 0x80)
}

/// One commit's patch as `git log -p` with [`PATCH`] prints it: the commit,
/// its first parent (empty for a root), and the lines its hunks add and
/// remove.
#[derive(Debug, Default, PartialEq)]
pub struct Patch {
    pub commit: Vec<u8>,
    pub parent: Vec<u8>,
    pub added: Vec<Vec<u8>>,
    pub removed: Vec<Vec<u8>>,
}

/// Parse `git log -p` output with `--format=%x00%H %P`. A hunk's lines are
/// counted from its `@@` header, so a content line that looks like a
/// header (`+++ b/x`, a NUL) is read as content.
pub fn parse(out: &[u8]) -> Vec<Patch> {
    let mut patches: Vec<Patch> = Vec::new();
    let (mut old_left, mut new_left) = (0usize, 0usize);
    let lines = out.split(|b| *b == b'\n');
    for l in lines {
        if old_left > 0 || new_left > 0 {
            let Some(p) = patches.last_mut() else { break };
            match l.first() {
                Some(b'+') => {
                    new_left = new_left.saturating_sub(1);
                    p.added.push(l[1..].to_vec());
                }
                Some(b'-') => {
                    old_left = old_left.saturating_sub(1);
                    p.removed.push(l[1..].to_vec());
                }
                Some(b'\\') => {}
                // Context (none with -U0; a blank one may print empty
                // under diff.suppressBlankEmpty).
                _ => {
                    old_left = old_left.saturating_sub(1);
                    new_left = new_left.saturating_sub(1);
                }
            }
            continue;
        }
        if let Some(head) = l.strip_prefix(b"\0") {
            let mut w = head.split(|b| *b == b' ');
            patches.push(Patch {
                commit: w.next().unwrap_or_default().to_vec(),
                parent: w.next().unwrap_or_default().to_vec(),
                ..Patch::default()
            });
        } else if let Some(h) = l.strip_prefix(b"@@ -") {
            // `@@ -a[,b] +c[,d] @@`
            let mut w = h.split(|b| *b == b' ');
            let count = |r: Option<&[u8]>| -> usize {
                match r.and_then(|r| r.split(|b| *b == b',').nth(1)) {
                    Some(n) => std::str::from_utf8(n)
                        .ok()
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0),
                    None => 1,
                }
            };
            old_left = count(w.next());
            new_left = count(w.next().and_then(|r| r.strip_prefix(b"+")));
        }
    }
    patches
}

/// `git log ARGS` with [`PATCH`], started.
fn start_patches<'a>(
    real: &Git,
    walk: impl IntoIterator<Item = &'a OsStr>,
    extra: &'a [&'static str],
) -> Option<std::process::Child> {
    let mut args: Vec<&OsStr> = vec![OsStr::new("log")];
    args.extend(PATCH.iter().map(OsStr::new));
    args.extend(extra.iter().map(OsStr::new));
    args.extend(walk);
    args.push(OsStr::new("--"));
    git_start(real, &args)
}

/// ERE for one line exactly, as `git log -G` compiles it.
fn ere_escape(line: &[u8], out: &mut Vec<u8>) {
    for b in line {
        if b"\\^$.|?*+()[]{}".contains(b) {
            out.push(b'\\');
        }
        out.push(*b);
    }
}

/// Refuse when a commit of `new` (each with a new blob that is no stash's,
/// from the caller's raw listing) adds a telling line that one of
/// `stash_commits` added, unless an exemption above holds. Err names the
/// commit and the line.
pub fn check(real: &Git, stash_commits: &[Vec<u8>], new: &[Vec<u8>]) -> Result<(), String> {
    if stash_commits.is_empty() || new.is_empty() {
        return Ok(());
    }
    // The two listings at once (each through the broker is a round trip).
    // Not `-m`: that means `log.diffMerges`, which the agent sets.
    let stash_walk = [
        "--no-walk",
        "--root",
        "--diff-merges=first-parent",
        "--first-parent",
    ];
    let stashed = start_patches(
        real,
        stash_commits.iter().map(|c| OsStr::from_bytes(c)),
        &stash_walk,
    );
    let picked = start_patches(real, new.iter().map(|c| OsStr::from_bytes(c)), &stash_walk);
    let (Some(stashed), Some(picked)) = (
        finish(stashed).filter(|o| o.status.success()),
        finish(picked).filter(|o| o.status.success()),
    ) else {
        return Err("cannot read the changes of the commits the update adds".into());
    };
    let stash_lines: HashSet<Vec<u8>> = parse(&stashed.stdout)
        .into_iter()
        .flat_map(|p| p.added)
        .filter(|l| telling(l))
        .collect();
    if stash_lines.is_empty() {
        return Ok(());
    }
    // (commit, its first parent, line) a stash added too.
    let mut flagged: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> = Vec::new();
    for p in parse(&picked.stdout) {
        let mut seen = HashSet::new();
        for l in p.added {
            if stash_lines.contains(&l) && seen.insert(l.clone()) {
                flagged.push((p.commit.clone(), p.parent.clone(), l));
            }
        }
    }
    if flagged.is_empty() {
        return Ok(());
    }
    // Lines that cannot be named on a command line stay flagged.
    let asked: Vec<&[u8]> = {
        let mut v: Vec<&[u8]> = flagged
            .iter()
            .map(|(_, _, l)| l.as_slice())
            .filter(|l| !l.contains(&0))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let mut parents: Vec<&[u8]> = flagged
        .iter()
        .map(|(_, p, _)| p.as_slice())
        .filter(|p| !p.is_empty())
        .collect();
    parents.sort_unstable();
    parents.dedup();
    // (1) In the first parent's tree already (any path: a rename or a
    // move of one's own code), as git grep prints `<rev>:<path>\0<line>`.
    let grep = (!asked.is_empty() && !parents.is_empty()).then(|| {
        let mut args: Vec<OsString> = [
            "grep",
            "-z",
            "-F",
            "--text",
            "--no-textconv",
            "--no-color",
            "--no-line-number",
            "--no-column",
        ]
        .map(OsString::from)
        .to_vec();
        for l in &asked {
            args.push("-e".into());
            args.push(OsStr::from_bytes(l).to_owned());
        }
        args.extend(parents.iter().map(|p| OsStr::from_bytes(p).to_owned()));
        args.push("--".into());
        let refs: Vec<&OsStr> = args.iter().map(OsString::as_os_str).collect();
        git_start(real, &refs)
    });
    // (2) Added or removed by a branch commit outside the parents' history
    // (the original of a rebased or cherry-picked commit).
    let branch = (!asked.is_empty()).then(|| {
        let mut re = b"-G^(".to_vec();
        for (i, l) in asked.iter().enumerate() {
            if i > 0 {
                re.push(b'|');
            }
            ere_escape(l, &mut re);
        }
        re.extend_from_slice(b")$");
        let re = OsString::from(OsStr::from_bytes(&re));
        let mut walk: Vec<&OsStr> = vec![re.as_os_str(), OsStr::new("--branches")];
        if !parents.is_empty() {
            walk.push(OsStr::new("--not"));
            walk.extend(parents.iter().map(|p| OsStr::from_bytes(p)));
        }
        start_patches(real, walk, &[])
    });
    let mut in_parent: HashMap<&[u8], HashSet<&[u8]>> = HashMap::new();
    let grepped = grep.map(finish);
    if let Some(Some(o)) = &grepped {
        // Exit 1: nothing matched.
        for rec in o.stdout.split(|b| *b == b'\n') {
            let Some(z) = rec.iter().position(|b| *b == 0) else {
                continue;
            };
            let (name, line) = (&rec[..z], &rec[z + 1..]);
            let rev = name.split(|b| *b == b':').next().unwrap_or_default();
            in_parent.entry(rev).or_default().insert(line);
        }
    }
    let branched = branch.map(finish);
    let mut on_branch: HashSet<Vec<u8>> = HashSet::new();
    if let Some(Some(o)) = &branched {
        if o.status.success() {
            for p in parse(&o.stdout) {
                on_branch.extend(p.added);
                on_branch.extend(p.removed);
            }
        }
    }
    for (c, parent, l) in &flagged {
        let known = in_parent
            .get(parent.as_slice())
            .is_some_and(|s| s.contains(l.as_slice()))
            || on_branch.contains(l);
        if !known {
            let shown = String::from_utf8_lossy(&l[..l.len().min(60)]);
            return Err(format!(
                "{} adds `{shown}`, a line a stash commit added, that no pre-commit hook saw (a stash's change merged by cherry-pick, rebase or revert); `git stash pop` (or apply) and commit instead",
                String::from_utf8_lossy(&c[..c.len().min(12)])
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_is_read_by_its_hunk_counts() {
        let out = b"\0c1 p1\n\ndiff --git a/x b/x\nindex 1..2 100644\n--- a/x\n+++ b/x\n@@ -1 +1,3 @@\n-old\n+++ b/y\n+\0z\n+new\n\\ No newline at end of file\n@@ -5,0 +8 @@ f\n+last\n\0c2 \n\ndiff --git a/n b/n\nnew file mode 100644\n--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+@@ -1 +1 @@\n";
        let p = parse(out);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].commit, b"c1");
        assert_eq!(p[0].parent, b"p1");
        assert_eq!(p[0].removed, vec![b"old".to_vec()]);
        assert_eq!(
            p[0].added,
            vec![
                b"++ b/y".to_vec(),
                b"\0z".to_vec(),
                b"new".to_vec(),
                b"last".to_vec()
            ]
        );
        assert_eq!(p[1].commit, b"c2");
        assert_eq!(p[1].parent, b"");
        assert_eq!(p[1].added, vec![b"@@ -1 +1 @@".to_vec()]);
    }

    #[test]
    fn only_lines_with_a_letter_or_digit_tell() {
        assert!(telling(b"MARKER"));
        assert!(telling(b"  x = 1;"));
        assert!(telling("é".as_bytes()));
        assert!(!telling(b""));
        assert!(!telling(b"   \t"));
        assert!(!telling(b"});"));
    }

    #[test]
    fn an_ere_matches_the_line_literally() {
        let mut re = Vec::new();
        ere_escape(b"a.b*(c)|[d]{1}^$\\", &mut re);
        assert_eq!(re, b"a\\.b\\*\\(c\\)\\|\\[d\\]\\{1\\}\\^\\$\\\\".to_vec());
    }
}
