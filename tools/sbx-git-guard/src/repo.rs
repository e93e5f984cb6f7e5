//! Which repository a git command will act on, and its effective
//! configuration, found the way git's setup.c finds them but without
//! running git: one extra process per call would double the cost of the
//! guard.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use gix_config::file::{Metadata, includes, init};
use gix_config::{File, Source};

/// The repository a command runs in.
#[derive(Debug, Clone)]
pub struct Repo {
    pub git_dir: PathBuf,
    /// Where hooks, config and refs live (differs from `git_dir` in a
    /// linked worktree).
    pub common_dir: PathBuf,
    /// `None` for a bare repository.
    pub work_tree: Option<PathBuf>,
    /// Found by standing inside a git directory that has a work tree
    /// elsewhere (`cd .git && git …`).
    pub inside_git_dir: bool,
}

/// The environment variables setup reads, taken once.
#[derive(Debug, Default, Clone)]
pub struct SetupEnv {
    pub git_dir: Option<OsString>,
    pub work_tree: Option<OsString>,
    pub home: Option<OsString>,
    pub xdg_config_home: Option<OsString>,
    pub config_nosystem: bool,
}

/// Make `p` absolute against `base` and canonical as far as it exists (the
/// rest is appended lexically), so a symlink cannot disguise where it points.
pub fn resolve(base: &Path, p: &Path) -> PathBuf {
    let abs = if p.is_absolute() {
        p.to_owned()
    } else {
        base.join(p)
    };
    if let Ok(c) = abs.canonicalize() {
        return c;
    }
    // Lexically normalise, then canonicalise the longest existing prefix.
    let mut norm = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                norm.pop();
            }
            Component::CurDir => {}
            other => norm.push(other),
        }
    }
    let mut tail = Vec::new();
    let mut head = norm.as_path();
    loop {
        if let Ok(c) = head.canonicalize() {
            let mut out = c;
            for t in tail.iter().rev() {
                out.push(t);
            }
            return out;
        }
        match (head.parent(), head.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name.to_owned());
                head = parent;
            }
            _ => return norm,
        }
    }
}

fn is_git_dir(d: &Path) -> bool {
    d.join("HEAD").is_file()
        && (d.join("objects").is_dir() || d.join("commondir").is_file())
        && (d.join("refs").is_dir() || d.join("commondir").is_file())
}

/// `.git` as a file: `gitdir: <path>` (linked worktrees, submodules).
fn read_gitfile(f: &Path) -> Option<PathBuf> {
    let text = std::fs::read(f).ok()?;
    let rest = text.strip_prefix(b"gitdir: ")?;
    let rest = rest.strip_suffix(b"\n").unwrap_or(rest);
    let p = Path::new(OsStr::from_bytes(rest));
    Some(resolve(f.parent()?, p))
}

fn common_dir_of(git_dir: &Path) -> PathBuf {
    match std::fs::read(git_dir.join("commondir")) {
        Ok(text) => {
            let t = text.strip_suffix(b"\n").unwrap_or(&text);
            resolve(git_dir, Path::new(OsStr::from_bytes(t)))
        }
        Err(_) => git_dir.to_owned(),
    }
}

/// Find the repository for a command run in `cwd` with `--git-dir`,
/// `--work-tree` and `--bare` already folded into `git_dir`/`work_tree`.
pub fn discover(
    cwd: &Path,
    git_dir: Option<&OsStr>,
    work_tree: Option<&OsStr>,
    bare: bool,
    env: &SetupEnv,
) -> Result<Option<Repo>, ConfigError> {
    let Some((git_dir, default_wt, inside, explicit_wt)) = locate(cwd, git_dir, work_tree, env)
    else {
        return Ok(None);
    };
    let common_dir = common_dir_of(&git_dir);
    // git refuses to run with a repository config it cannot parse; so do we.
    let local = read_local(&common_dir)?;
    let core_bare = local
        .as_ref()
        .and_then(|c| c.boolean("core.bare").ok().flatten());
    let core_wt = local
        .as_ref()
        .and_then(|c| c.string("core.worktree"))
        .map(|w| resolve(&git_dir, Path::new(OsStr::from_bytes(&w))));
    let work_tree = if bare {
        None
    } else if explicit_wt.is_some() {
        explicit_wt
    } else if core_wt.is_some() {
        core_wt
    } else if core_bare == Some(true) || inside {
        None
    } else {
        default_wt
    };
    // Standing in the git dir of a repository whose work tree is elsewhere.
    let inside_git_dir = inside && core_bare != Some(true);
    Ok(Some(Repo {
        git_dir,
        common_dir,
        work_tree,
        inside_git_dir,
    }))
}

type Located = (PathBuf, Option<PathBuf>, bool, Option<PathBuf>);

/// The git dir, the default work tree, whether cwd is inside a git dir, and
/// an explicit work tree.
fn locate(
    cwd: &Path,
    git_dir: Option<&OsStr>,
    work_tree: Option<&OsStr>,
    env: &SetupEnv,
) -> Option<Located> {
    let explicit_wt = work_tree
        .or(env.work_tree.as_deref())
        .map(|w| resolve(cwd, Path::new(w)));
    let (git_dir, default_wt, inside) = match git_dir.or(env.git_dir.as_deref()) {
        Some(d) => {
            let d = resolve(cwd, Path::new(d));
            let d = if d.is_file() { read_gitfile(&d)? } else { d };
            // git would stop with "not a git repository".
            if !is_git_dir(&d) {
                return None;
            }
            // With GIT_DIR and no work tree setting, cwd is the top level.
            (d, Some(resolve(cwd, Path::new("."))), false)
        }
        None => {
            let mut found = None;
            for dir in cwd.ancestors() {
                let dot = dir.join(".git");
                if dot.is_dir() && is_git_dir(&dot) {
                    found = Some((resolve(dir, Path::new(".git")), Some(dir.to_owned()), false));
                    break;
                }
                if dot.is_file() {
                    if let Some(g) = read_gitfile(&dot) {
                        found = Some((g, Some(dir.to_owned()), false));
                        break;
                    }
                }
                if is_git_dir(dir) {
                    found = Some((dir.to_owned(), None, true));
                    break;
                }
            }
            found?
        }
    };
    Some((git_dir, default_wt, inside, explicit_wt))
}

fn read_local(common_dir: &Path) -> Result<Option<File>, ConfigError> {
    let path = common_dir.join("config");
    if !path.exists() {
        return Ok(None);
    }
    File::from_path_no_includes(path, Source::Local)
        .map(Some)
        .map_err(|e| ConfigError(format!("{e:#}")))
}

/// An error reading configuration: the guard cannot see what git would.
#[derive(Debug, thiserror::Error)]
#[error("cannot read git configuration: {0}")]
pub struct ConfigError(pub String);

/// The configuration git would read for `repo` (system, global, local,
/// worktree; includes and `includeIf` followed), or for no repository.
pub fn config(repo: Option<&Repo>, env: &SetupEnv) -> Result<File, ConfigError> {
    let mut metas: Vec<Metadata> = Vec::new();
    let mut push = |path: PathBuf, source: Source| {
        metas.push(Metadata::from(source).at(path));
    };
    if !env.config_nosystem {
        push(PathBuf::from("/etc/gitconfig"), Source::System);
    }
    let home = env.home.as_deref().map(PathBuf::from);
    let xdg = env
        .xdg_config_home
        .as_deref()
        .filter(|x| !x.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")));
    if let Some(x) = xdg {
        push(x.join("git/config"), Source::Git);
    }
    if let Some(h) = &home {
        push(h.join(".gitconfig"), Source::User);
    }
    let branch = repo.and_then(|r| current_branch(&r.git_dir));
    let branch_ref = branch
        .as_deref()
        .and_then(|b| gix_ref::FullName::try_from(b).ok());
    if let Some(r) = repo {
        push(r.common_dir.join("config"), Source::Local);
        push(r.git_dir.join("config.worktree"), Source::Worktree);
    }
    let opts = init::Options {
        includes: includes::Options::follow(
            gix_config::path::interpolate::Context {
                home_dir: home.as_deref(),
                ..Default::default()
            },
            includes::conditional::Context {
                git_dir: repo.map(|r| r.git_dir.as_path()),
                branch_name: branch_ref.as_ref().map(|b| b.as_ref()),
            },
        ),
        lossy: true,
        ignore_io_errors: false,
    };
    let mut buf = Vec::with_capacity(4096);
    let file = File::from_paths_metadata_buf(&mut metas.into_iter(), &mut buf, false, opts)
        .map_err(|e| ConfigError(format!("{e:#}")))?;
    Ok(file.unwrap_or_default())
}

/// `refs/heads/<name>` when HEAD is on a branch.
pub fn current_branch(git_dir: &Path) -> Option<String> {
    let head = std::fs::read_to_string(git_dir.join("HEAD")).ok()?;
    head.strip_prefix("ref: ")
        .map(|r| r.trim_end().to_owned())
        .filter(|r| r.starts_with("refs/heads/"))
}

/// The trusted hooks directory: husky's `.husky/_` (v9) or `.husky` (v4–8)
/// when the work tree is a husky repository, else the common dir's `hooks`.
pub fn trusted_hooks(repo: &Repo) -> PathBuf {
    if let Some(wt) = &repo.work_tree {
        let husky = wt.join(".husky");
        // In a sandbox, sbx-run mounts a .husky that existed at start
        // read-only; one the agent made since is writable and would let it
        // choose the hooks git runs, so only the protected one is trusted.
        if Path::new("/.agent-sandbox").is_dir() && !sbx_sys::on_readonly_mount(&husky) {
            return repo.common_dir.join("hooks");
        }
        if husky.join("_/h").is_file() {
            return husky.join("_");
        }
        if husky.join("_/husky.sh").is_file() {
            return husky;
        }
    }
    repo.common_dir.join("hooks")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_follows_symlinks_and_keeps_missing_tails() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().canonicalize().unwrap();
        std::fs::create_dir(real.join("d")).unwrap();
        std::os::unix::fs::symlink(real.join("d"), real.join("l")).unwrap();
        assert_eq!(resolve(&real, Path::new("l/new/x")), real.join("d/new/x"));
        assert_eq!(resolve(&real, Path::new("d/../l")), real.join("d"));
        assert_eq!(resolve(&real, Path::new("missing/../d")), real.join("d"));
    }
}
