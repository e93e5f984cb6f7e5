//! The files under a bind-mode workspace's `.git` that the host's own git
//! reads as configuration or code, held read-only inside the sandbox: a
//! `core.fsmonitor`, pager, filter or alias the agent wrote into
//! `.git/config` ran as the user on their next plain `git status` (issue 36).
//!
//! Only paths that exist can be held; `start` first makes the missing ones
//! that git reads as empty when present (`make_missing`), so the agent
//! cannot create them later (`commondir` is made naming the git dir
//! itself). What cannot be held is in docs/security.md ("The host boundary
//! for `.git`"): an untracked nested repository, and a file pin the
//! host's own git replaces by rename (the kernel detaches a mount on a dentry
//! renamed over from another mount namespace; directory pins stay).

use std::path::{Path, PathBuf};

use crate::RunError;

/// How deep `.git/modules` is searched for submodules' git dirs (a module
/// name may hold `/`, and modules nest).
const MODULE_DEPTH: usize = 12;

/// What a git dir holds that git reads as configuration or code, and
/// whether a missing one is made (a directory, or an empty file git reads
/// as empty configuration) or can only be held when present.
const GITDIR_ENTRIES: &[(&str, Kind)] = &[
    ("config", Kind::File { make: true }),
    ("config.worktree", Kind::File { make: true }),
    // attributes (which name the drivers), exclude, grafts, sparse-checkout
    ("info", Kind::Dir { make: true }),
    ("hooks", Kind::Dir { make: true }),
    // Present in a linked worktree's admin dir. Elsewhere git reads one
    // the agent makes (`../evil`) and takes config, hooks and refs from the
    // directory it names: a `core.fsmonitor` there ran on the user's plain
    // `git status`. An empty one makes git die, so a missing one is made
    // naming the git dir itself (`.`), which git reads as no change.
    ("commondir", Kind::File { make: true }),
    ("gitdir", Kind::File { make: false }),
    // Legacy remote definitions (URLs for a name the config lacks).
    ("remotes", Kind::Dir { make: false }),
    ("branches", Kind::Dir { make: false }),
    ("objects/info/alternates", Kind::File { make: false }),
    ("objects/info/http-alternates", Kind::File { make: false }),
    // lazygit's per-repository config (read from the git dir when it
    // opens): a `git.pagers` command the agent wrote there ran as the user
    // the moment lazygit showed a diff (a36). An empty one is no settings.
    ("lazygit.yml", Kind::File { make: true }),
];

/// A made `commondir`: the git dir is its own common dir.
const COMMONDIR_SELF: &[u8] = b".\n";

#[derive(Clone, Copy)]
enum Kind {
    File { make: bool },
    Dir { make: bool },
}

/// A path to hold read-only, workspace-relative, and whether it exists
/// (else it is masked with an empty file or directory of the same kind).
#[derive(Debug, PartialEq, Eq)]
pub struct Pin {
    pub rel: String,
    pub dir: bool,
    pub exists: bool,
}

/// The git dirs whose configuration the host's git reads when run in the
/// checkout: `.git` itself, each linked worktree's admin dir and each
/// submodule's git dir under `.git/modules`, workspace-relative.
/// Empty when `.git` is not a directory (a worktree's or submodule's
/// `.git` file: its git dir is outside the workspace).
fn git_dirs(root: &Path) -> Result<Vec<String>, RunError> {
    let git = root.join(".git");
    match std::fs::symlink_metadata(&git) {
        Ok(m) if m.is_dir() => {}
        _ => return Ok(Vec::new()),
    }
    let mut out = vec![".git".to_owned()];
    let mut stack = vec![(".git/modules".to_owned(), 0usize)];
    while let Some((rel, depth)) = stack.pop() {
        for name in subdirs(root, &rel)? {
            let sub = format!("{rel}/{name}");
            if root.join(&sub).join("HEAD").is_file() {
                // A submodule's git dir, which has modules of its own.
                stack.push((format!("{sub}/modules"), depth + 1));
                out.push(sub);
            } else if depth < MODULE_DEPTH {
                stack.push((sub, depth + 1));
            }
        }
    }
    // A linked worktree's admin dir (held whole by `pins`).
    for name in subdirs(root, ".git/worktrees")? {
        out.push(format!(".git/worktrees/{name}"));
    }
    Ok(out)
}

/// The real (not symlinked) subdirectories of `rel`, sorted; none when it
/// is missing. A name docker cannot be given (not UTF-8) fails closed.
fn subdirs(root: &Path, rel: &str) -> Result<Vec<String>, RunError> {
    let dir = root.join(rel);
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => return Ok(Vec::new()),
        Err(e) => return Err(RunError::Io(dir, e)),
    };
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|e| RunError::Io(dir.clone(), e))?;
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = e.file_name();
        let name = name
            .to_str()
            .ok_or_else(|| RunError::Unmaskable(dir.join(&name)))?;
        out.push(name.to_owned());
    }
    out.sort();
    Ok(out)
}

/// Every path to hold read-only under the workspace `root`. A pinned name
/// that is a symlink, or of the other kind, is refused: docker would
/// follow the link on the host, and git reads it either way.
pub fn pins(root: &Path) -> Result<Vec<Pin>, RunError> {
    let mut out = Vec::new();
    // A `.git` file (the workspace is a linked worktree or a submodule's
    // checkout) names the git dir: the agent rewrote it to `gitdir: .evil`,
    // a git dir of its own with a `core.fsmonitor`, and the user's plain
    // `git status` there ran it (a37y). A `.git` link the agent could
    // swap for a directory of its own, and docker would follow.
    match std::fs::symlink_metadata(root.join(".git")) {
        Ok(m) if m.is_file() => out.push(Pin {
            rel: ".git".to_owned(),
            dir: false,
            exists: true,
        }),
        Ok(m) if m.file_type().is_symlink() => {
            return Err(RunError::Config(format!(
                "{}: is a symlink, so it cannot be held read-only in the sandbox (the host's git reads what it names as the repository): replace it with the directory, or a `gitdir:` file",
                root.join(".git").display()
            )));
        }
        _ => {}
    }
    for gd in git_dirs(root)? {
        // A linked worktree's admin dir, whole: its work tree is not in the
        // sandbox, so nothing there is the agent's to write.
        if gd.starts_with(".git/worktrees/") {
            out.push(Pin {
                rel: gd,
                dir: true,
                exists: true,
            });
            continue;
        }
        // `.git/hooks` is one of the always-protected paths already.
        for (name, kind) in GITDIR_ENTRIES {
            let rel = format!("{gd}/{name}");
            if rel == ".git/hooks" {
                continue;
            }
            let (dir, make) = match kind {
                Kind::File { make } => (false, *make),
                Kind::Dir { make } => (true, *make),
            };
            let exists = match std::fs::symlink_metadata(root.join(&rel)) {
                Ok(m) if m.is_dir() == dir && (dir || m.is_file()) => true,
                Ok(_) => {
                    return Err(RunError::Config(format!(
                        "{}: is a symlink or not a {}, so it cannot be held read-only in the sandbox (the host's git reads it as configuration): replace it with a plain {0}",
                        root.join(&rel).display(),
                        if dir { "directory" } else { "file" }
                    )));
                }
                Err(_) => false,
            };
            // Under a missing objects/info nothing is read; not made.
            if exists || (make && root.join(&gd).is_dir()) {
                out.push(Pin { rel, dir, exists });
            }
        }
    }
    let included = includes(root, &out)?;
    out.extend(included);
    Ok(out)
}

/// At most this many files included from inside the workspace are held.
const MAX_INCLUDES: usize = 100;

/// The files inside the workspace that the held configuration files
/// include (`include.path`, `includeIf.*.path`), and those they include in
/// turn: a held `.git/config` with `include.path = ../.gitconfig` had git
/// read the work tree's `.gitconfig`, which the agent wrote, and a
/// `core.fsmonitor` there ran on the user's next `git status` (a37y). A
/// missing one is made empty (git reads a missing include as empty); one
/// that is a link, or reached through one, is refused.
fn includes(root: &Path, held: &[Pin]) -> Result<Vec<Pin>, RunError> {
    use sbx_sys::beneath::{Kind, Root};
    let r = Root::open(root).map_err(|e| RunError::Io(root.to_owned(), e))?;
    let mut seen: std::collections::BTreeSet<String> = held.iter().map(|p| p.rel.clone()).collect();
    // Workspace-relative names (read beneath it, through no link), then
    // the host's own system and global files, which the host's git reads
    // first: an include there may name a workspace file too
    // (`includeIf "gitdir:~/src/app/"` with `path = ~/src/app/.gitconfig`).
    let mut todo: Vec<(PathBuf, bool)> = held
        .iter()
        .filter(|p| {
            !p.dir
                && p.exists
                && !p.rel.starts_with(".git/worktrees/")
                && (p.rel.ends_with("/config") || p.rel.ends_with("/config.worktree"))
        })
        .map(|p| (PathBuf::from(&p.rel), true))
        .collect();
    todo.extend(host_configs().into_iter().map(|p| (p, false)));
    let mut out = Vec::new();
    while let Some((file, inside)) = todo.pop() {
        let read = if inside {
            r.open_read(&file).and_then(|mut f| {
                let mut v = Vec::new();
                std::io::Read::read_to_end(&mut f, &mut v).map(|_| v)
            })
        } else {
            std::fs::read(&file)
        };
        let text = match read {
            Ok(v) => v,
            Err(e) if !inside || e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(RunError::Io(root.join(&file), e)),
        };
        let shown = root.join(&file);
        let base = shown.parent().unwrap_or(root).to_owned();
        for value in include_values(&text) {
            let Some(rel) = in_workspace(root, &base, &value) else {
                continue;
            };
            if !seen.insert(rel.clone()) {
                continue;
            }
            if out.len() >= MAX_INCLUDES {
                return Err(RunError::Config(format!(
                    "{}: includes more than {MAX_INCLUDES} files from the workspace, which cannot all be held read-only in the sandbox",
                    shown.display()
                )));
            }
            let refuse = |why: String| {
                RunError::Config(format!(
                    "{}: included by {} ({why}), so it cannot be held read-only in the sandbox: make it a plain file, or drop the include",
                    root.join(&rel).display(),
                    shown.display(),
                ))
            };
            let exists = match r.open_path(Path::new(&rel)) {
                Ok(fd) => match sbx_sys::beneath::kind(&fd) {
                    Ok(Kind::File) => true,
                    Ok(_) => return Err(refuse("not a regular file".into())),
                    Err(e) => return Err(refuse(e.to_string())),
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
                Err(e) => return Err(refuse(e.to_string())),
            };
            if exists {
                todo.push((PathBuf::from(&rel), true));
            }
            out.push(Pin {
                rel,
                dir: false,
                exists,
            });
        }
    }
    Ok(out)
}

/// The system and global configuration files the host's git reads, by
/// git's own rules for this environment.
fn host_configs() -> Vec<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let mut v = Vec::new();
    if var("GIT_CONFIG_NOSYSTEM").is_none() {
        v.push(var("GIT_CONFIG_SYSTEM").map_or_else(|| "/etc/gitconfig".into(), PathBuf::from));
    }
    match var("GIT_CONFIG_GLOBAL") {
        Some(g) => v.push(g.into()),
        None => {
            let home = var("HOME").map(PathBuf::from);
            match var("XDG_CONFIG_HOME") {
                Some(x) => v.push(PathBuf::from(x).join("git/config")),
                None => v.extend(home.as_ref().map(|h| h.join(".config/git/config"))),
            }
            v.extend(home.map(|h| h.join(".gitconfig")));
        }
    }
    v
}

/// The values of `include.path` and `includeIf.<cond>.path` in one
/// configuration file's bytes, as git's own parser reads them (section
/// names know no case, values may be quoted); none when git is missing
/// or cannot parse it (then the host's git cannot read it either).
fn include_values(text: &[u8]) -> Vec<String> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    // Most configs include nothing: no git started for them (a section
    // name is letters, in any case, so `[include` is always spelt out).
    if !text
        .to_ascii_lowercase()
        .windows(7)
        .any(|w| w == b"include")
    {
        return Vec::new();
    }
    let child = Command::new("git")
        .args([
            "config",
            "--file",
            "-",
            "--no-includes",
            "-z",
            "--get-regexp",
        ])
        .arg(r"^include(if\..*)?\.path$")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return Vec::new();
    };
    if let Some(mut w) = child.stdin.take() {
        let _ = w.write_all(text);
    }
    let Ok(o) = child.wait_with_output() else {
        return Vec::new();
    };
    o.stdout
        .split(|b| *b == 0)
        .filter_map(|e| {
            let s = std::str::from_utf8(e).ok()?;
            s.split_once('\n').map(|(_, v)| v.to_owned())
        })
        .collect()
}

/// An include's `value`, relative to `base` (the including file's
/// directory) or absolute, `~/` the host's home, as a path relative to
/// the workspace `root` when it lies inside it; `..` taken lexically (a
/// link on the way is refused when it is opened). `%(prefix)/` names
/// git's own files.
fn in_workspace(root: &Path, base: &Path, value: &str) -> Option<String> {
    use std::path::Component;
    if value.is_empty() || value.starts_with("%(") {
        return None;
    }
    let full = match value.strip_prefix("~/") {
        Some(rest) => PathBuf::from(std::env::var_os("HOME")?).join(rest),
        None if value.starts_with('~') => return None,
        None => base.join(value),
    };
    let mut out = PathBuf::new();
    for c in full.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    let s = out.strip_prefix(root).ok()?.to_str()?.to_owned();
    (!s.is_empty()).then_some(s)
}

/// What a missing `commondir` is masked with in the sandbox until `start`
/// has made the file: a read-only file holding [`COMMONDIR_SELF`] in
/// sbx-run's state directory (an empty mask makes git die).
pub fn commondir_mask() -> Result<PathBuf, RunError> {
    use std::os::unix::fs::PermissionsExt;
    let p = crate::spec::state_dir().join("commondir-self");
    let io = |e| RunError::Io(p.clone(), e);
    if std::fs::read(&p).ok().as_deref() != Some(COMMONDIR_SELF) {
        let _ = std::fs::remove_file(&p);
        std::fs::write(&p, COMMONDIR_SELF).map_err(io)?;
    }
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444)).map_err(io)?;
    Ok(p)
}

/// Make the missing pinned files (empty) and directories, owned as the
/// workspace is, so they are held as the host's from the start (docker
/// would make the mount points itself, as root).
pub fn make_missing(root: &Path, owner: (u32, u32)) -> Result<(), RunError> {
    // Beneath the workspace through no link: another sandbox of it (a
    // `--branch` one) may swap a directory checked here for a link.
    let r = sbx_sys::beneath::Root::open(root).map_err(|e| RunError::Io(root.to_owned(), e))?;
    for p in pins(root)? {
        if p.exists {
            continue;
        }
        let rel = Path::new(&p.rel);
        let made = if p.dir {
            match r.open_path(rel) {
                Ok(_) => Err(std::io::ErrorKind::AlreadyExists.into()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => r.create_dir_all(rel, 0o755),
                Err(e) => Err(e),
            }
        } else {
            // An included file's directories may be missing too.
            if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty())
                && let Err(e) = r.create_dir_all(parent, 0o755)
            {
                return Err(RunError::Io(root.join(parent), e));
            }
            r.create_file(rel, 0o644).and_then(|mut f| {
                use std::io::Write as _;
                if rel.file_name() == Some(std::ffi::OsStr::new("commondir")) {
                    f.write_all(COMMONDIR_SELF)?;
                }
                Ok(std::os::fd::OwnedFd::from(f))
            })
        };
        match made {
            Ok(fd) => crate::workspace::give_fd(&fd, owner),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(RunError::Io(root.join(&p.rel), e)),
        }
    }
    Ok(())
}

/// Hold each pinned *file* read-only on the host as well, for as long as
/// a sandbox of the workspace runs. git rewrites `config` by renaming
/// `config.lock` over it, and since Linux 3.18 a rename over a dentry that
/// is a mount point in another mount namespace detaches that mount there:
/// the user's `git remote add` on the host gave the sandbox a writable
/// `.git/config`. A mount point in the host's own namespace makes that
/// rename fail (EBUSY) instead, so the host's git cannot lift the pin; it
/// says `could not write config file` until the sandboxes stop.
/// Directories are not renamed over by git, and are not held here.
///
/// Needs root (the idmapped view does too); without it the pins hold only
/// until the host's git rewrites a file, said in one warning line.
pub fn hold_on_host(root: &Path) -> Result<(), RunError> {
    use std::os::fd::AsRawFd as _;
    let held: Vec<PathBuf> = sbx_sys::idmap::mounts()
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.point)
        .collect();
    for p in pins(root)? {
        // Only under `.git`, which `release_on_host` lets go of (a file
        // the config includes from the work tree is held in the sandbox).
        if p.dir
            || !p.exists
            || !Path::new(&p.rel).starts_with(".git")
            || held.contains(&root.join(&p.rel))
        {
            continue;
        }
        // By fd, never following a link: the path is the agent's to write.
        let fd = sbx_sys::beneath::Root::open(root)
            .and_then(|r| r.open_path(Path::new(&p.rel)))
            .map_err(|e| RunError::Io(root.join(&p.rel), e))?;
        let me = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        if let Err(e) = sbx_sys::idmap::bind_readonly_at(&me, &fd) {
            sbx_core::output::warn(&format!(
                "{}: cannot hold it read-only on the host ({e}): the host's own git rewriting it (git config, remote add, push -u) will make it writable in the sandbox until it restarts; run sbx-run as root",
                root.join(&p.rel).display()
            ));
            return Ok(());
        }
    }
    Ok(())
}

/// Undo `hold_on_host`: every mount under the workspace's `.git` in the
/// host's namespace (stacked ones too).
pub fn release_on_host(root: &Path) {
    let git = root.join(".git");
    for _ in 0..64 {
        let Ok(mounts) = sbx_sys::idmap::mounts() else {
            return;
        };
        let Some(m) = mounts.into_iter().rev().find(|m| m.point.starts_with(&git)) else {
            return;
        };
        if sbx_sys::idmap::detach(&m.point).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(root: &Path) -> Vec<(String, bool)> {
        pins(root)
            .unwrap()
            .into_iter()
            .map(|p| (p.rel, p.exists))
            .collect()
    }

    #[test]
    fn config_files_of_every_git_dir_are_held() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for d in [
            ".git/info",
            ".git/objects/info",
            ".git/modules/lib/a/hooks",
            ".git/modules/lib/a/modules/inner",
            ".git/worktrees/wt",
        ] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        for f in [
            ".git/config",
            ".git/objects/info/alternates",
            ".git/modules/lib/a/HEAD",
            ".git/modules/lib/a/config",
            ".git/modules/lib/a/modules/inner/HEAD",
            ".git/worktrees/wt/commondir",
        ] {
            std::fs::write(r.join(f), "").unwrap();
        }
        let got = names(r);
        for want in [
            (".git/config", true),
            (".git/config.worktree", false),
            (".git/lazygit.yml", false),
            (".git/modules/lib/a/lazygit.yml", false),
            (".git/info", true),
            (".git/objects/info/alternates", true),
            (".git/modules/lib/a/config", true),
            (".git/modules/lib/a/hooks", true),
            (".git/modules/lib/a/info", false),
            (".git/modules/lib/a/modules/inner/config", false),
            (".git/modules/lib/a/modules/inner/hooks", false),
            (".git/worktrees/wt", true),
        ] {
            assert!(
                got.contains(&(want.0.to_owned(), want.1)),
                "{want:?} not in {got:?}"
            );
        }
        // A missing commondir is made naming the git dir itself; the main
        // hooks are an always-protected path already.
        assert!(got.contains(&(".git/commondir".to_owned(), false)));
        assert!(!got.iter().any(|(p, _)| p == ".git/hooks"));
        // `lib` holds no HEAD: searched, not held.
        assert!(
            !got.iter()
                .any(|(p, _)| p.starts_with(".git/modules/lib/config"))
        );

        make_missing(r, (0, 0)).unwrap();
        assert!(pins(r).unwrap().iter().all(|p| p.exists));
        assert_eq!(std::fs::read(r.join(".git/config.worktree")).unwrap(), b"");
        assert_eq!(std::fs::read(r.join(".git/commondir")).unwrap(), b".\n");
        assert_eq!(
            std::fs::read(r.join(".git/modules/lib/a/commondir")).unwrap(),
            b".\n"
        );
    }

    #[test]
    fn a_symlinked_config_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join(".git")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", r.join(".git/config")).unwrap();
        let e = pins(r).unwrap_err().to_string();
        assert!(e.contains(".git/config") && e.contains("symlink"), "{e}");
    }

    #[test]
    fn a_worktree_git_file_is_held_itself() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join(".git"), "gitdir: /elsewhere\n").unwrap();
        assert_eq!(
            pins(t.path()).unwrap(),
            vec![Pin {
                rel: ".git".into(),
                dir: false,
                exists: true
            }]
        );
        let t = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/elsewhere", t.path().join(".git")).unwrap();
        let e = pins(t.path()).unwrap_err().to_string();
        assert!(e.contains("symlink"), "{e}");
    }

    #[test]
    fn an_include_from_home_or_an_absolute_path_lands_in_the_workspace() {
        let home = PathBuf::from(std::env::var_os("HOME").unwrap());
        let ws = home.join("src/app");
        assert_eq!(
            in_workspace(&ws, Path::new("/etc"), "~/src/app/.gitconfig").as_deref(),
            Some(".gitconfig")
        );
        assert_eq!(in_workspace(&ws, Path::new("/etc"), "~/.gitconfig"), None);
        assert_eq!(in_workspace(&ws, Path::new("/etc"), "~other/x"), None);
        assert_eq!(
            in_workspace(&ws, &ws.join(".git"), "../a/../b").as_deref(),
            Some("b")
        );
        assert_eq!(in_workspace(&ws, &ws.join(".git"), "../../x"), None);
        assert!(host_configs().iter().all(|p| p.is_absolute()));
    }

    #[test]
    fn files_the_config_includes_from_the_workspace_are_held() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join(".git/info")).unwrap();
        std::fs::create_dir_all(r.join("conf")).unwrap();
        std::fs::write(
            r.join(".git/config"),
            format!(
                "[INCLUDE]\n\tPath = ../.gitconfig\n[includeIf \"gitdir:/\"]\n\tpath = \"../conf/a\"\n\
                 [include]\n\tpath = ~user/.gitconfig\n\tpath = ../../outside\n\tpath = {}/abs\n\tpath = local\n",
                r.display()
            ),
        )
        .unwrap();
        std::fs::write(r.join(".gitconfig"), "[include]\n\tpath = deep/b\n").unwrap();
        std::fs::write(r.join("conf/a"), "").unwrap();
        let got = names(r);
        for want in [
            (".gitconfig", true),
            ("conf/a", true),
            ("deep/b", false),
            ("abs", false),
            (".git/local", false),
        ] {
            assert!(
                got.contains(&(want.0.to_owned(), want.1)),
                "{want:?} not in {got:?}"
            );
        }
        assert!(!got.iter().any(|(p, _)| p.contains("outside")), "{got:?}");
        make_missing(r, (0, 0)).unwrap();
        assert_eq!(std::fs::read(r.join("deep/b")).unwrap(), b"");
        assert!(pins(r).unwrap().iter().all(|p| p.exists));
        // A link on the way is refused, not followed.
        std::fs::remove_dir_all(r.join("conf")).unwrap();
        std::os::unix::fs::symlink("/etc", r.join("conf")).unwrap();
        let e = pins(r).unwrap_err().to_string();
        assert!(e.contains("conf/a") && e.contains("included by"), "{e}");
    }
}
