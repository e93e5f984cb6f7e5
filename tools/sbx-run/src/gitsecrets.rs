//! Secrets in git's objects (issue 38, class 3). A mask hides a path in
//! the workspace, not its blobs under `.git/objects`: `git show HEAD:.env`
//! or inflating the object by hand reads what `cat .env` cannot. So a start
//! is refused while a masked path is tracked (the index) or in the history
//! of any ref or reflog, unless `[filesystem].accept-in-git` names it.
//! The answer is cached by the ref tips, the index and the patterns, so a
//! second start of an unchanged repository runs two cheap git commands.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use sbx_core::audit::{self, Outcome, Record};
use sbx_core::glob::PathSet;

use crate::RunError;
use crate::workspace::Workspace;

/// One masked path found in git's objects.
#[derive(Debug, PartialEq, Eq)]
pub struct Found {
    pub path: String,
    /// The newest commit that adds, changes or removes it (None: staged).
    pub commit: Option<String>,
    /// The `[filesystem]`/`[tools]` pattern that masks it.
    pub pattern: String,
}

/// Refuse the start (exit 77, audited) when a masked path is in git's
/// objects; a workspace that is not a repository has none.
pub fn check(ws: &Workspace) -> Result<(), RunError> {
    if !ws.path.join(".git").exists() {
        return Ok(());
    }
    let cfg = &ws.loaded.config;
    let set = |p: Vec<sbx_core::glob::PathPattern>, key: &str| {
        PathSet::new(&p)
            .map_err(|e| RunError::Config(format!("{}: {key}: {e}", ws.loaded.describe())))
    };
    let blocked = set(cfg.blocked_files(), "[filesystem].blocked")?;
    let allowed = set(cfg.allowed_files(), "[filesystem].allowed")?;
    let accepted = set(cfg.accepted_in_git(), "[filesystem].accept-in-git")?;
    let patterns: Vec<String> = [
        cfg.blocked_files(),
        cfg.allowed_files(),
        cfg.accepted_in_git(),
    ]
    .iter()
    .map(|l| {
        l.iter()
            .map(|p| p.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    })
    .collect();
    let cache = crate::spec::state_dir()
        .join("git-secrets")
        .join(&ws.names.hash);
    let key = cache_key(&ws.path, &patterns.join("\0"))?;
    if std::fs::read_to_string(&cache).is_ok_and(|k| k == key) {
        return Ok(());
    }
    let found = scan(&ws.path, &blocked, &allowed, &accepted)?;
    let Some(first) = found.first() else {
        // Only a clean answer is kept: a refusal is asked again each time.
        if let Some(d) = cache.parent() {
            let _ = std::fs::create_dir_all(d);
        }
        let _ = std::fs::write(&cache, key);
        return Ok(());
    };
    let more = match found.len() {
        1 => String::new(),
        n => format!(
            " (and {} more: {})",
            n - 1,
            found[1..]
                .iter()
                .take(5)
                .map(|f| f.path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let at = match &first.commit {
        Some(c) => format!("in commit {}", &c[..c.len().min(12)]),
        None => "staged in the index".to_owned(),
    };
    let msg = format!(
        "{}{more} is in git's objects ({at}) and masked by {} ({:?}): the agent could read it with `git show`; remove it from every ref and reflog (`git rm --cached`, then rewrite history, e.g. `git filter-repo --invert-paths --path {}`) or accept it with [filesystem].accept-in-git = [{:?}] (nothing was started)",
        first.path,
        cfg.blocked_key(&first.pattern),
        first.pattern,
        first.path,
        first.path,
    );
    audit::append(
        &Record::new(
            "sbx-run",
            "start",
            &first.path,
            Outcome::Blocked,
            "filesystem.accept-in-git",
        )
        .reason(&msg),
    );
    Err(RunError::SecretInGit(msg))
}

/// What the answer depends on: every ref and HEAD, the index file, the
/// patterns and this sbx-run.
fn cache_key(repo: &Path, patterns: &str) -> Result<String, RunError> {
    use std::os::unix::fs::MetadataExt;
    let refs = git_out(repo, &["show-ref", "--head"], true)?;
    let index = git_out(repo, &["rev-parse", "--git-path", "index"], false)?;
    let index = repo.join(String::from_utf8_lossy(&index).trim_end());
    let stamp = match std::fs::metadata(&index) {
        Ok(m) => format!("{} {} {} {}", m.ino(), m.size(), m.mtime(), m.mtime_nsec()),
        Err(_) => "no index".to_owned(),
    };
    use md5::{Digest, Md5};
    let mut h = Md5::new();
    for part in [
        env!("CARGO_PKG_VERSION").as_bytes(),
        repo.as_os_str().as_encoded_bytes(),
        &refs,
        stamp.as_bytes(),
        patterns.as_bytes(),
    ] {
        h.update(part);
        h.update(b"\0");
    }
    Ok(format!("{:x}\n", h.finalize()))
}

/// The masked, not accepted paths in the index and in the history of every
/// ref and reflog, each with the newest commit that touches it; sorted.
pub fn scan(
    repo: &Path,
    blocked: &PathSet,
    allowed: &PathSet,
    accepted: &PathSet,
) -> Result<Vec<Found>, RunError> {
    let mut seen: BTreeMap<String, Option<String>> = BTreeMap::new();
    // Every path each commit adds, changes or removes, newest first; a
    // merge against its first parent, so a file only a merge brings is
    // seen too; no renames, so both names are.
    let log = git_out(
        repo,
        &[
            "-c",
            "log.showRoot=true",
            "log",
            "-z",
            "--all",
            "--reflog",
            "--no-renames",
            "--diff-merges=first-parent",
            "--name-only",
            "--format=%x01%H",
        ],
        true,
    )?;
    let mut commit = None;
    for item in log.split(|b| *b == 0) {
        let item = item.strip_prefix(b"\n").unwrap_or(item);
        if let Some(h) = item.strip_prefix(b"\x01") {
            commit = Some(String::from_utf8_lossy(h).into_owned());
        } else if !item.is_empty() {
            seen.entry(String::from_utf8_lossy(item).into_owned())
                .or_insert_with(|| commit.clone());
        }
    }
    // Staged and never committed: in the objects all the same.
    for p in git_out(repo, &["ls-files", "-z"], false)?.split(|b| *b == 0) {
        if !p.is_empty() {
            seen.entry(String::from_utf8_lossy(p).into_owned())
                .or_insert(None);
        }
    }
    let none = PathSet::new(&[]).map_err(|e| RunError::Config(e.to_string()))?;
    Ok(seen
        .into_iter()
        .filter_map(|(path, commit)| {
            let rel = Path::new(&path);
            let pat = blocked.masking(rel, allowed)?;
            if accepted.masking(rel, &none).is_some() {
                return None;
            }
            Some(Found {
                pattern: pat.text.clone(),
                path,
                commit,
            })
        })
        .collect())
}

/// The host's git, reading only (verify.rs pins off every key that could
/// run a program); `empty_ok`: a repository without commits is no error.
fn git_out(repo: &Path, args: &[&str], empty_ok: bool) -> Result<Vec<u8>, RunError> {
    let mut c: Command = crate::verify::git(repo);
    c.args(args);
    let o = c
        .output()
        .map_err(|e| RunError::Io(PathBuf::from("git"), e))?;
    if o.status.success() || (empty_ok && o.stdout.is_empty() && o.status.code() == Some(1)) {
        return Ok(o.stdout);
    }
    if empty_ok && String::from_utf8_lossy(&o.stderr).contains("does not have any commits") {
        return Ok(Vec::new());
    }
    Err(RunError::BadWorkspace(format!(
        "{}: cannot check git's objects for masked files: git {}: {} (nothing was started)",
        repo.display(),
        args.join(" "),
        String::from_utf8_lossy(&o.stderr).trim()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let o = Command::new("git")
            .args([
                "-c",
                "user.name=a",
                "-c",
                "user.email=a@b",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    fn put(dir: &Path, rel: &str, text: &str) {
        std::fs::create_dir_all(dir.join(rel).parent().unwrap()).unwrap();
        std::fs::write(dir.join(rel), text).unwrap();
    }

    #[test]
    fn finds_masked_paths_in_the_index_history_merges_and_reflogs() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        git(d, &["init", "-q"]);
        put(d, "app.rs", "1");
        put(d, "old.key", "k");
        put(d, ".env.example", "x");
        put(d, "deploy/.aws/config", "c");
        git(d, &["add", "-A"]);
        git(d, &["commit", "-qm", "one"]);
        git(d, &["rm", "-q", "old.key"]);
        git(d, &["mv", "app.rs", "prod.secret"]);
        git(d, &["commit", "-qm", "two"]);
        // A secret only a merge brings, and one only a reflog still holds.
        git(d, &["checkout", "-qb", "side"]);
        put(d, "side.rs", "s");
        git(d, &["add", "-A"]);
        git(d, &["commit", "-qm", "side"]);
        git(d, &["checkout", "-q", "main"]);
        put(d, "merge.pem", "m");
        git(d, &["merge", "-q", "--no-ff", "--no-commit", "side"]);
        git(d, &["add", "merge.pem"]);
        git(d, &["commit", "-qm", "merge"]);
        git(d, &["branch", "-qD", "side"]);
        put(d, "gone.key", "g");
        git(d, &["add", "gone.key"]);
        git(d, &["commit", "-qm", "amended away"]);
        git(d, &["reset", "-q", "--hard", "HEAD~1"]);
        put(d, "staged/.env", "s");
        git(d, &["add", "staged/.env"]);
        let cfg = sbx_core::config::Config::default();
        let set = |p: Vec<sbx_core::glob::PathPattern>| PathSet::new(&p).unwrap();
        let accepted = set(vec![
            sbx_core::glob::PathPattern::new("prod.secret").unwrap(),
        ]);
        let got = scan(
            d,
            &set(cfg.blocked_files()),
            &set(cfg.allowed_files()),
            &accepted,
        )
        .unwrap();
        let got: Vec<_> = got
            .iter()
            .map(|f| (f.path.as_str(), f.pattern.as_str(), f.commit.is_some()))
            .collect();
        assert_eq!(
            got,
            [
                ("deploy/.aws/config", ".aws/", true),
                ("gone.key", "*.key", true),
                ("merge.pem", "*.pem", true),
                ("old.key", "*.key", true),
                ("staged/.env", ".env", false),
            ]
        );
        let none = scan(d, &set(vec![]), &set(vec![]), &set(vec![])).unwrap();
        assert!(none.is_empty());
    }
}
