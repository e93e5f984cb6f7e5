//! HEAD and the refs for pre-commit's private view, read from the
//! repository's files (issue 46, speed): asking git cost a hooked commit
//! three brokered git calls (~9 ms on a loaded machine). Only the plain
//! layout is read here: a `.git` directory (or `GIT_DIR`) holding loose
//! refs and `packed-refs`. Anything else (a worktree's `commondir`, a
//! gitfile, reftable, `core.worktree`, the variables that move the
//! directories, a name or a file git would read differently) answers None
//! and the caller asks git. What is read needs no more trust than git's
//! answer had: the agent can write these files either way, and the
//! commit's prepared step requires git's parent to be the HEAD pinned
//! here (ledger.rs `check_pinned`).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

/// What the view needs: the same fields `rev-parse`, `symbolic-ref` and
/// `for-each-ref` gave.
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub common: PathBuf,
    pub objects: PathBuf,
    /// The commit HEAD names; None when unborn.
    pub head: Option<Vec<u8>>,
    /// HEAD's branch (`refs/heads/...`), empty when detached.
    pub sym: Vec<u8>,
    /// `<oid> <name>` lines, as `for-each-ref --format='%(objectname)
    /// %(refname)'` prints them (symbolic refs resolved, sorted by name).
    pub refs: Vec<u8>,
}

/// Variables that move or redefine what git reads; any of them set and
/// git decides.
const MOVERS: [&str; 5] = [
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_WORK_TREE",
    "GIT_NAMESPACE",
    "GIT_REF_PARANOIA",
];

/// The snapshot, for a step whose working directory is `cwd` and whose
/// `GIT_DIR` is `git_dir` (None: `cwd/.git`).
pub fn read(cwd: &Path, git_dir: Option<&OsStr>, var: &dyn Fn(&str) -> bool) -> Option<Snapshot> {
    if MOVERS.iter().any(|v| var(v)) {
        return None;
    }
    let dir = match git_dir {
        Some(d) if !d.is_empty() => cwd.join(d),
        Some(_) => return None,
        None => cwd.join(".git"),
    };
    // A directory, not a gitfile or a link to elsewhere.
    if !std::fs::symlink_metadata(&dir).ok()?.is_dir() {
        return None;
    }
    // A linked worktree's refs live in two places; reftable in a table.
    // A `commondir` of `.` (sbx-run pins one in every sandbox's git dir,
    // so the agent cannot plant another) names the git dir itself.
    if std::fs::symlink_metadata(dir.join("reftable")).is_ok() {
        return None;
    }
    match std::fs::read(dir.join("commondir")) {
        Ok(c) if c.trim_ascii_end() == b"." => {}
        Ok(_) => return None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) => return None,
    }
    let config = std::fs::read(dir.join("config")).unwrap_or_default();
    let lower = config.to_ascii_lowercase();
    // extensions.refStorage, core.worktree (and include paths, which
    // could set either) are git's to read.
    for key in [&b"refstorage"[..], b"worktree", b"include"] {
        if lower.windows(key.len()).any(|w| w == key) {
            return None;
        }
    }
    let mut refs = BTreeMap::new();
    match std::fs::read(dir.join("packed-refs")) {
        Ok(p) => packed(&p, &mut refs)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) => return None,
    }
    let mut syms = BTreeMap::new();
    loose(&dir, b"refs", &mut refs, &mut syms)?;
    let head = std::fs::read(dir.join("HEAD")).ok()?;
    let (head, sym) = match value(&head)? {
        Value::Oid(o) => (Some(o), Vec::new()),
        Value::Sym(s) => (resolve(&s, &refs, &syms, 0)?, s),
    };
    if !sym.is_empty() && !sym.starts_with(b"refs/heads/") {
        return None;
    }
    for (name, target) in &syms {
        // A dangling symbolic ref is left out, as for-each-ref does.
        if let Some(oid) = resolve(target, &refs, &syms, 0)? {
            refs.insert(name.clone(), oid);
        }
    }
    let mut lines = Vec::with_capacity(refs.len() * 80);
    for (name, oid) in &refs {
        lines.extend_from_slice(&[oid.as_slice(), b" ", name, b"\n"].concat());
    }
    Some(Snapshot {
        objects: dir.join("objects"),
        common: dir,
        head,
        sym,
        refs: lines,
    })
}

enum Value {
    Oid(Vec<u8>),
    Sym(Vec<u8>),
}

fn is_oid(h: &[u8]) -> bool {
    matches!(h.len(), 40 | 64) && h.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A loose ref's or HEAD's content: an id or `ref: <name>`, one line.
fn value(raw: &[u8]) -> Option<Value> {
    let line = raw.strip_suffix(b"\n")?;
    if let Some(t) = line.strip_prefix(b"ref: ") {
        return (t.starts_with(b"refs/") && valid_name(t)).then(|| Value::Sym(t.to_vec()));
    }
    is_oid(line).then(|| Value::Oid(line.to_vec()))
}

/// Where symbolic ref `name` ends: Some(None) unborn or dangling, None
/// when the chain is too long for a plain repository (git decides).
fn resolve(
    name: &[u8],
    refs: &BTreeMap<Vec<u8>, Vec<u8>>,
    syms: &BTreeMap<Vec<u8>, Vec<u8>>,
    depth: u8,
) -> Option<Option<Vec<u8>>> {
    if depth > 4 {
        return None;
    }
    match syms.get(name) {
        Some(t) => resolve(t, refs, syms, depth + 1),
        None => Some(refs.get(name).cloned()),
    }
}

/// git's `check_refname_format` for a full name, strictly: anything it
/// might read otherwise is refused here (git decides).
fn valid_name(name: &[u8]) -> bool {
    !name.is_empty()
        && !name.ends_with(b"/")
        && !name.ends_with(b".")
        && !name.windows(2).any(|w| w == b".." || w == b"@{")
        && name.split(|b| *b == b'/').all(|c| {
            !c.is_empty()
                && !c.starts_with(b".")
                && !c.ends_with(b".lock")
                && c != b"@"
                && c.iter()
                    .all(|b| *b > b' ' && *b != 0x7f && !b"~^:?*[\\".contains(b))
        })
}

/// `packed-refs`: a header, `<oid> <name>` lines and `^<oid>` peel lines.
fn packed(raw: &[u8], refs: &mut BTreeMap<Vec<u8>, Vec<u8>>) -> Option<()> {
    let body = if raw.is_empty() {
        raw
    } else {
        raw.strip_suffix(b"\n")?
    };
    for line in body.split(|b| *b == b'\n') {
        if line.starts_with(b"# pack-refs with:") {
            continue;
        }
        if let Some(peel) = line.strip_prefix(b"^") {
            if !is_oid(peel) {
                return None;
            }
            continue;
        }
        let (oid, name) = line.split_at(line.iter().position(|b| *b == b' ')?);
        let name = &name[1..];
        if !is_oid(oid) || !name.starts_with(b"refs/") || !valid_name(name) {
            return None;
        }
        refs.insert(name.to_vec(), oid.to_vec());
    }
    Some(())
}

/// The loose refs under `dir/prefix`, over the packed ones.
fn loose(
    dir: &Path,
    prefix: &[u8],
    refs: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    syms: &mut BTreeMap<Vec<u8>, Vec<u8>>,
) -> Option<()> {
    let entries = match std::fs::read_dir(dir.join(OsStr::from_bytes(prefix))) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && prefix == b"refs" => return Some(()),
        Err(_) => return None,
    };
    for entry in entries {
        let entry = entry.ok()?;
        let name = [prefix, b"/", entry.file_name().as_bytes()].concat();
        let kind = entry.file_type().ok()?;
        if kind.is_dir() {
            loose(dir, &name, refs, syms)?;
            continue;
        }
        // A link, a lock file or a name git would skip: git decides.
        if !kind.is_file() || !valid_name(&name) {
            return None;
        }
        match value(&std::fs::read(dir.join(OsStr::from_bytes(&name))).ok()?)? {
            Value::Oid(o) => {
                refs.insert(name, o);
            }
            Value::Sym(t) => {
                refs.remove(&name);
                syms.insert(name, t);
            }
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
        let out = Command::new("git")
            .args(["-c", "user.name=a", "-c", "user.email=a@b", "-C"])
            .arg(dir)
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        out.stdout
    }

    /// What git answers, for the same repository.
    fn from_git(dir: &Path) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let refs = git(dir, &["for-each-ref", "--format=%(objectname) %(refname)"]);
        let head = git(dir, &["rev-parse", "HEAD"]).trim_ascii_end().to_vec();
        let sym = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["symbolic-ref", "-q", "HEAD"])
            .output()
            .unwrap()
            .stdout
            .trim_ascii_end()
            .to_vec();
        (refs, head, sym)
    }

    fn ours(dir: &Path) -> Option<Snapshot> {
        read(dir, None, &|_| false)
    }

    /// A fresh repository on `main`, with a first commit if `born`.
    fn fresh(born: bool) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        git(t.path(), &["init", "-q", "-b", "main"]);
        if born {
            git(t.path(), &["commit", "-q", "--allow-empty", "-m", "a"]);
        }
        t
    }

    /// Differential: loose, packed, loose over packed, a symbolic ref,
    /// a detached HEAD, nested names, tags; each as git lists them.
    #[test]
    fn a_plain_repository_reads_as_git_lists_it() {
        let t = fresh(true);
        let d = t.path();
        git(d, &["tag", "-a", "-m", "t", "v1"]);
        git(d, &["branch", "feature/x"]);
        git(d, &["pack-refs", "--all"]);
        git(d, &["commit", "-q", "--allow-empty", "-m", "b"]);
        git(d, &["branch", "loose"]);
        git(d, &["update-ref", "refs/remotes/origin/main", "HEAD~1"]);
        git(
            d,
            &[
                "symbolic-ref",
                "refs/remotes/origin/HEAD",
                "refs/remotes/origin/main",
            ],
        );
        git(
            d,
            &["symbolic-ref", "refs/heads/dangling", "refs/heads/nowhere"],
        );
        let check = |d: &Path| {
            let s = ours(d).expect("a plain repository");
            let (refs, head, sym) = from_git(d);
            assert_eq!(
                String::from_utf8_lossy(&s.refs),
                String::from_utf8_lossy(&refs)
            );
            assert_eq!(s.head.as_deref(), Some(&head[..]));
            assert_eq!(s.sym, sym);
            assert_eq!(s.common, d.join(".git"));
        };
        check(d);
        git(d, &["checkout", "-q", "--detach", "HEAD~1"]);
        check(d);
    }

    #[test]
    fn an_unborn_branch_has_no_head() {
        let t = fresh(false);
        let s = ours(t.path()).unwrap();
        assert_eq!(
            (s.head, s.sym, s.refs),
            (None, b"refs/heads/main".to_vec(), vec![])
        );
    }

    /// What git reads differently, or from elsewhere, is git's to answer.
    #[test]
    fn anything_unusual_is_left_to_git() {
        let t = fresh(true);
        let d = t.path();
        assert!(ours(d).is_some());
        assert!(read(d, None, &|v| v == "GIT_COMMON_DIR").is_none());
        let g = d.join(".git");
        let oid = git(d, &["rev-parse", "HEAD"]);
        for (file, content) in [
            ("refs/heads/a\nb", &oid[..]),
            ("refs/heads/x.lock", &oid[..]),
            ("refs/heads/short", b"1234\n"),
            ("refs/heads/sym", b"ref: HEAD\n"),
            ("commondir", b"..\n"),
            ("packed-refs", b"1234 refs/heads/x\n"),
        ] {
            std::fs::write(g.join(file), content).unwrap();
            assert!(ours(d).is_none(), "{file}");
            std::fs::remove_file(g.join(file)).unwrap();
        }
        // A sandbox's pinned `commondir` of `.`: the git dir itself.
        std::fs::write(g.join("commondir"), ".\n").unwrap();
        assert!(ours(d).is_some(), "commondir .");
        std::fs::remove_file(g.join("commondir")).unwrap();
        git(d, &["config", "core.worktree", "/elsewhere"]);
        assert!(ours(d).is_none(), "core.worktree");
        git(d, &["config", "--unset", "core.worktree"]);
        std::os::unix::fs::symlink(g.join("refs/heads/main"), g.join("refs/heads/l")).unwrap();
        assert!(ours(d).is_none(), "a link");
        let w = tempfile::tempdir().unwrap();
        git(
            d,
            &[
                "worktree",
                "add",
                "-q",
                &w.path().join("w").to_string_lossy(),
            ],
        );
        assert!(ours(&w.path().join("w")).is_none(), "a worktree's gitfile");
    }
}
