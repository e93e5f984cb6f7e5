//! The trusted side of `verify-commits`: where the repository's hooks live
//! (`core.hooksPath`, the hooks directory, husky's generated `_`) and what
//! they hold, recorded by `sbx-run start` before the agent runs and read
//! back by the check. Neither the agent's later `.git/config` nor the
//! commit under test decides which hooks check it.
//!
//! Everything here is read as data: git's own parser reads the config
//! (`git config`, `rev-parse --git-path`), no program it names is run, and
//! no link is followed (a hook that is a link is recorded as one).

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{VerifyError, git_reading_hooks_path as git, run};

/// One hook file at most, and all of them: hooks are small scripts.
const FILE_CAP: u64 = 1 << 20;
const TOTAL_CAP: u64 = 16 << 20;
/// What the record directory holds besides `hooks/`.
pub const RECORD_FILE: &str = "record.json";
pub const HOOKS_DIR: &str = "hooks";

/// Where git finds the hooks, relative to what the clean room rebuilds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Location {
    /// The repository's own `$GIT_DIR/hooks` (no `core.hooksPath`).
    GitDir,
    /// A directory in the work tree, e.g. husky's `.husky/_`.
    Tree(String),
    /// A directory elsewhere on the host (`core.hooksPath=/etc/hooks`).
    Absolute(String),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// `core.hooksPath` as git's parser read it, if set.
    pub hooks_path: Option<String>,
    pub location: Location,
    /// The hooks directory git uses, absolute, as found at the record
    /// (what a hook that is a relative link is resolved against).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks_dir: Option<String>,
    /// "start" when `sbx-run start` made it, "host-now" for the fallback.
    pub source: String,
    /// Seconds since the epoch.
    pub recorded_at: u64,
}

/// The record of workspace `hash`: root's, outside the workspace, in
/// sbx-run's state directory.
pub fn dir_in(state: &Path, hash: &str) -> PathBuf {
    state.join("trusted").join(hash)
}

pub fn dir(hash: &str) -> PathBuf {
    dir_in(&crate::spec::state_dir(), hash)
}

/// Record the trusted hooks of the repository at `top` for workspace
/// `hash` under `state` (replacing an older record whole).
pub fn record_in(state: &Path, top: &Path, hash: &str) -> Result<Record, VerifyError> {
    let io = |p: &Path, e| VerifyError::Io(p.to_owned(), e);
    let parent = state.join("trusted");
    std::fs::create_dir_all(&parent).map_err(|e| io(&parent, e))?;
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| io(&parent, e))?;
    let tmp = tempfile::Builder::new()
        .prefix(".new-")
        .tempdir_in(&parent)
        .map_err(|e| io(&parent, e))?;
    let rec = snapshot(top, tmp.path(), "start")?;
    let dest = dir_in(state, hash);
    let old = parent.join(format!(".old-{hash}-{}", std::process::id()));
    if dest.exists() {
        std::fs::rename(&dest, &old).map_err(|e| io(&dest, e))?;
    }
    let new = tmp.keep();
    std::fs::rename(&new, &dest).map_err(|e| io(&dest, e))?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(rec)
}

/// `record_in` sbx-run's state directory; a failure is a warning (the
/// check falls back to the host's current hooks and says so).
pub fn record_at_start(top: &Path, hash: &str) {
    let state = crate::spec::state_dir();
    match record_in(&state, top, hash) {
        Ok(rec) => tell_tree_tool(&state, top, hash, &rec),
        Err(e) => sbx_core::output::warn(&format!(
            "the hooks for verify-commits were not recorded ({e}); it will read the host's current ones"
        )),
    }
}

/// Say once (per set of hooks) that a hook runs a tool from the work
/// tree: sbx holds git's configuration and hooks, but what a hook runs
/// from the tree is repository content the agent writes in bind mode, and
/// the user's own `git commit` on the host runs it (docs/security.md,
/// "Scripts a hook calls").
fn tell_tree_tool(state: &Path, top: &Path, hash: &str, rec: &Record) {
    let Some((hook, tool)) = tree_tool(&dir_in(state, hash), top, rec) else {
        return;
    };
    let said = state.join("trusted").join(format!("{hash}.told"));
    let key = crate::names::digest(format!("{hook} {tool}").as_bytes());
    if std::fs::read_to_string(&said).is_ok_and(|k| k == key) {
        return;
    }
    let _ = std::fs::write(&said, &key);
    sbx_core::output::warn(&format!(
        "the {} hook runs {} from the work tree, which the agent writes: your own `git commit` here runs the agent's version; check its commits with `sbx-run verify-commits`, or commit inside the sandbox",
        sbx_core::sanitize::field(&hook),
        sbx_core::sanitize::field(&tool)
    ));
}

/// The first work-tree tool (`super::room::tree_tool`) a hook recorded in
/// `dir` runs, as (hook, tool). Read too, beneath `top` through no link:
/// husky's scripts (`.husky/pre-commit`, run by its generated `_`) and
/// the work-tree files recorded hooks are links to.
pub fn tree_tool(dir: &Path, top: &Path, rec: &Record) -> Option<(String, String)> {
    let hooks = dir.join(HOOKS_DIR);
    let mut names: Vec<_> = std::fs::read_dir(&hooks)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut texts = Vec::new();
    for n in &names {
        if let Ok(f) = open_nofollow(&hooks.join(n)) {
            texts.push((n.clone(), read_capped(f)));
        }
    }
    let mut tree = Vec::new();
    if matches!(&rec.location, Location::Tree(r) if r.starts_with(".husky")) {
        tree.extend(names.iter().map(|n| (n.clone(), format!(".husky/{n}"))));
    }
    for t in linked_targets(dir, rec, top) {
        let hook = t.rsplit('/').next().unwrap_or(&t).to_owned();
        tree.push((hook, t));
    }
    if !tree.is_empty()
        && let Ok(root) = sbx_sys::beneath::Root::open(top)
    {
        for (hook, rel) in tree {
            if let Ok(f) = root.open_read(Path::new(&rel)) {
                texts.push((hook, read_capped(f)));
            }
        }
    }
    texts
        .into_iter()
        .find_map(|(hook, text)| super::room::tree_tool(&text).map(|t| (hook, t)))
}

fn open_nofollow(p: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let flags = (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(p)
}

fn read_capped(f: std::fs::File) -> String {
    let mut b = Vec::new();
    let _ = f.take(FILE_CAP).read_to_end(&mut b);
    String::from_utf8_lossy(&b).into_owned()
}

/// The recorded state, if `sbx-run start` of this version made one.
pub fn load(dir: &Path) -> Option<Record> {
    let text = std::fs::read_to_string(dir.join(RECORD_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Read the hooks' configuration and files of `top` into `dest`
/// (`record.json` and `hooks/`).
pub fn snapshot(top: &Path, dest: &Path, source: &str) -> Result<Record, VerifyError> {
    let io = |p: &Path, e| VerifyError::Io(p.to_owned(), e);
    let mut c = git(top);
    c.args(["config", "--get", "core.hooksPath"]);
    let hooks_path = run(c, "config").ok().filter(|s| !s.is_empty());
    let mut c = git(top);
    c.args(["rev-parse", "--path-format=absolute", "--git-path", "hooks"]);
    let found = PathBuf::from(run(c, "rev-parse --git-path hooks")?);
    // A relative `core.hooksPath` is the work tree's, read from its own
    // value: git's answer has any link in it resolved, and the agent can
    // make the directory a link to a host directory.
    let location = match &hooks_path {
        None => Location::GitDir,
        Some(h) if Path::new(h).is_relative() && !h.starts_with('~') => {
            Location::Tree(plain_relative(Path::new(h)).ok_or_else(|| {
                VerifyError::Config(format!(
                    "core.hooksPath = {}: leads outside the work tree through '..'; give a plain path",
                    sbx_core::sanitize::field(h)
                ))
            })?)
        }
        Some(_) => match found.strip_prefix(top) {
            Ok(rel) => Location::Tree(plain_relative(rel).ok_or_else(|| {
                VerifyError::Config(format!(
                    "core.hooksPath = {}: leads outside the work tree through '..'; give a plain path",
                    sbx_core::sanitize::field(&found.to_string_lossy())
                ))
            })?),
            Err(_) => Location::Absolute(found.to_string_lossy().into_owned()),
        },
    };
    let out = dest.join(HOOKS_DIR);
    std::fs::create_dir_all(&out).map_err(|e| io(&out, e))?;
    let from = match &location {
        Location::Tree(rel) => top.join(rel),
        _ => found,
    };
    copy_hooks(top, &from, &out)?;
    let rec = Record {
        hooks_path,
        location,
        hooks_dir: Some(from.to_string_lossy().into_owned()),
        source: source.into(),
        recorded_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    let p = dest.join(RECORD_FILE);
    let text = serde_json::to_string_pretty(&rec).expect("a record serialises");
    std::fs::write(&p, text).map_err(|e| io(&p, e))?;
    Ok(rec)
}

/// The files under the work tree `top` that the recorded hooks (in `dir`)
/// are links to, workspace-relative: `.git/hooks/pre-commit ->
/// ../../scripts/pre-commit` makes the host's git run
/// `scripts/pre-commit`, a file the agent writes unless it is held. A
/// link is resolved against the hooks directory by its names (`..` taken
/// lexically: every directory on the way is checked for links when the
/// path is held, and refused if one is).
pub fn linked_targets(dir: &Path, rec: &Record, top: &Path) -> Vec<String> {
    match rec.hooks_dir.as_deref() {
        Some(hooks) => links_into(&dir.join(HOOKS_DIR), Path::new(hooks), top),
        None => Vec::new(),
    }
}

/// The targets of the links in `links` (a hooks directory or its
/// record), resolved against the hooks directory `hooks`, that lie under
/// `top`, workspace-relative and sorted.
pub fn links_into(links: &Path, hooks: &Path, top: &Path) -> Vec<String> {
    let tops = [
        top.to_owned(),
        std::fs::canonicalize(top).unwrap_or_else(|_| top.to_owned()),
    ];
    let Ok(rd) = std::fs::read_dir(links) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        if e.file_name().to_string_lossy().ends_with(".sample") {
            continue;
        }
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        let mut abs = PathBuf::new();
        for c in hooks.join(&target).components() {
            match c {
                Component::ParentDir => {
                    abs.pop();
                }
                Component::CurDir => {}
                other => abs.push(other),
            }
        }
        if let Some(rel) = tops
            .iter()
            .find_map(|t| abs.strip_prefix(t).ok())
            .and_then(plain_relative)
            && !out.contains(&rel)
        {
            out.push(rel);
        }
    }
    out.sort();
    out
}

/// A relative path of plain names only, as a string.
fn plain_relative(rel: &Path) -> Option<String> {
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then(|| out.to_string_lossy().into_owned())
}

/// The regular files and links directly in `from` (hooks are not nested),
/// links kept as links; a missing directory is an empty record. Under the
/// work tree `from` is opened beneath `top` through no link: the agent
/// writes there, and a `.githooks` it made a link to `/root/.ssh` had the
/// host's files recorded as hooks.
fn copy_hooks(top: &Path, from: &Path, to: &Path) -> Result<(), VerifyError> {
    use sbx_sys::beneath::{Dir, Kind, Root};
    let io = |p: &Path, e| VerifyError::Io(p.to_owned(), e);
    let dir = match from.strip_prefix(top) {
        Ok(rel) => Root::open(top).and_then(|r| r.dir(rel)),
        Err(_) => Dir::open(from),
    };
    let dir = match dir {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(from, e)),
    };
    let mut names = dir.names().map_err(|e| io(from, e))?;
    names.sort();
    let mut total = 0u64;
    for name in names {
        // git's samples never run.
        if name.to_string_lossy().ends_with(".sample") {
            continue;
        }
        let src = from.join(&name);
        let dst = to.join(&name);
        let Some(meta) = dir.stat(&name).map_err(|e| io(&src, e))? else {
            continue;
        };
        if meta.kind == Kind::Symlink {
            let target = dir.readlink(&name).map_err(|e| io(&src, e))?;
            std::os::unix::fs::symlink(&target, &dst).map_err(|e| io(&dst, e))?;
        } else if meta.kind == Kind::File {
            // No link followed: a file swapped for a link since the stat is not read through.
            let f = dir.open_file(&name).map_err(|e| io(&src, e))?;
            let mut buf = Vec::new();
            f.take(FILE_CAP + 1)
                .read_to_end(&mut buf)
                .map_err(|e| io(&src, e))?;
            total += buf.len() as u64;
            if buf.len() as u64 > FILE_CAP || total > TOTAL_CAP {
                return Err(VerifyError::Config(format!(
                    "{}: hooks larger than {} MiB are not recorded; is this a hooks directory?",
                    sbx_core::sanitize::field(&src.to_string_lossy()),
                    FILE_CAP >> 20
                )));
            }
            std::fs::write(&dst, &buf).map_err(|e| io(&dst, e))?;
            let mode = meta.mode & 0o755;
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(mode))
                .map_err(|e| io(&dst, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Links in the recorded hooks that lead into the work tree, relative
    /// or absolute, are named workspace-relative; others are not.
    #[test]
    fn hooks_linked_into_the_work_tree_are_found() {
        let rec_dir = tempfile::tempdir().unwrap();
        let hooks = rec_dir.path().join(HOOKS_DIR);
        std::fs::create_dir_all(&hooks).unwrap();
        let link = |name: &str, to: &str| std::os::unix::fs::symlink(to, hooks.join(name)).unwrap();
        link("pre-commit", "../../scripts/pre-commit");
        link("post-merge", "/r/tools/post-merge");
        link("pre-push", "/etc/hooks/pre-push");
        link("commit-msg", "../../../elsewhere");
        std::fs::write(hooks.join("post-commit"), "#!/bin/sh\n").unwrap();
        let rec = Record {
            hooks_path: None,
            location: Location::GitDir,
            hooks_dir: Some("/r/.git/hooks".into()),
            source: "start".into(),
            recorded_at: 0,
        };
        assert_eq!(
            linked_targets(rec_dir.path(), &rec, Path::new("/r")),
            ["scripts/pre-commit", "tools/post-merge"]
        );
        let old = Record {
            hooks_dir: None,
            ..rec
        };
        assert!(linked_targets(rec_dir.path(), &old, Path::new("/r")).is_empty());
    }
}
