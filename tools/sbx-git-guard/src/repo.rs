//! Which repository a git command will act on, and its effective
//! configuration, found the way git's setup.c finds them but without
//! running git: one extra process per call would double the cost of the
//! guard.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
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
    /// `extensions.worktreeConfig` in the common config (read without
    /// includes, as setup.c reads it): only then is `config.worktree` read.
    pub worktree_config: bool,
}

/// The environment variables setup reads, taken once.
#[derive(Debug, Default, Clone)]
pub struct SetupEnv {
    pub git_dir: Option<OsString>,
    pub work_tree: Option<OsString>,
    pub home: Option<OsString>,
    pub xdg_config_home: Option<OsString>,
    pub config_nosystem: bool,
    pub common_dir: Option<OsString>,
    pub object_dir: Option<OsString>,
}

impl SetupEnv {
    /// The directory git reads `~` and `.gitconfig` from: HOME, `/` when it
    /// is empty (git appends "/.gitconfig" to an empty HOME).
    pub fn home_dir(&self) -> Option<&Path> {
        self.home
            .as_deref()
            .map(|h| Path::new(if h.is_empty() { OsStr::new("/") } else { h }))
    }
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

/// setup.c's `validate_headref`: HEAD is `ref: refs/...`, a symlink into
/// refs/, or an object id. An empty or garbage HEAD is not a repository (a
/// decoy `.git` with such a HEAD is skipped and discovery goes on upward).
fn valid_head(d: &Path) -> bool {
    let head = d.join("HEAD");
    let Ok(meta) = std::fs::symlink_metadata(&head) else {
        return false;
    };
    if meta.file_type().is_symlink() {
        return std::fs::read_link(&head)
            .is_ok_and(|t| t.as_os_str().as_bytes().starts_with(b"refs/"));
    }
    let Ok(text) = std::fs::read(&head) else {
        return false;
    };
    let text = &text[..text.len().min(256)];
    if let Some(rest) = text.strip_prefix(b"ref:") {
        let rest = rest.trim_ascii_start();
        return rest.starts_with(b"refs/");
    }
    // get_oid_hex_any: a SHA-1 or SHA-256 hex id at the start.
    let hex = text.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    hex >= 40
}

/// `access(p, X_OK)` for a directory, as git checks `objects` and `refs`.
fn searchable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_dir())
}

/// setup.c's `is_git_directory`: HEAD valid in `d`; objects and refs in
/// the common dir (`$GIT_COMMON_DIR`, else `commondir`, else `d`);
/// `$GIT_OBJECT_DIRECTORY` replaces the objects check.
fn is_git_dir(d: &Path, env: &SetupEnv) -> bool {
    let common = common_dir_noenv(d);
    let objects_ok = match &env.object_dir {
        Some(o) => searchable(Path::new(o)),
        None => searchable(&common.join("objects")),
    };
    objects_ok && searchable(&common.join("refs")) && valid_head(d)
}

/// What a `.git` file says, as `read_gitfile_gently` reads it.
enum Gitfile {
    /// `.git` is not a regular file.
    NotAFile,
    /// git dies on it (bad format, or it names no repository).
    Invalid,
    Repo(PathBuf),
}

/// `.git` as a file: `gitdir: <path>`, trailing CR and LF removed
/// (linked worktrees, submodules).
fn read_gitfile(f: &Path, env: &SetupEnv) -> Gitfile {
    if !std::fs::metadata(f).is_ok_and(|m| m.is_file()) {
        return Gitfile::NotAFile;
    }
    let Ok(text) = std::fs::read(f) else {
        return Gitfile::Invalid;
    };
    let Some(mut rest) = text.strip_prefix(b"gitdir: ") else {
        return Gitfile::Invalid;
    };
    while let Some(r) = rest
        .strip_suffix(b"\n")
        .or_else(|| rest.strip_suffix(b"\r"))
    {
        rest = r;
    }
    let Some(parent) = f.parent() else {
        return Gitfile::Invalid;
    };
    let d = resolve(parent, Path::new(OsStr::from_bytes(rest)));
    if is_git_dir(&d, env) {
        Gitfile::Repo(d)
    } else {
        Gitfile::Invalid
    }
}

/// The `commondir` file's answer (relative to the git dir), or the git dir.
fn common_dir_noenv(git_dir: &Path) -> PathBuf {
    match std::fs::read(git_dir.join("commondir")) {
        Ok(text) => {
            let t = text.strip_suffix(b"\n").unwrap_or(&text);
            resolve(git_dir, Path::new(OsStr::from_bytes(t)))
        }
        Err(_) => git_dir.to_owned(),
    }
}

/// `get_common_dir`: `$GIT_COMMON_DIR` wins over the `commondir` file.
fn common_dir_of(cwd: &Path, git_dir: &Path, env: &SetupEnv) -> PathBuf {
    match env.common_dir.as_deref().filter(|c| !c.is_empty()) {
        Some(c) => resolve(cwd, Path::new(c)),
        None => common_dir_noenv(git_dir),
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
    let common_dir = common_dir_of(cwd, &git_dir, env);
    // git refuses to run with a repository config it cannot parse; so do we.
    let local = read_local(&common_dir)?;
    let core_bare = local
        .as_ref()
        .and_then(|c| c.boolean("core.bare").ok().flatten());
    let worktree_config = local
        .as_ref()
        .and_then(|c| c.boolean("extensions.worktreeConfig").ok().flatten())
        == Some(true);
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
        worktree_config,
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
            let d = match read_gitfile(&d, env) {
                Gitfile::Repo(g) => g,
                Gitfile::Invalid => return None,
                Gitfile::NotAFile => d,
            };
            // git would stop with "not a git repository".
            if !is_git_dir(&d, env) {
                return None;
            }
            // With GIT_DIR and no work tree setting, cwd is the top level.
            (d, Some(resolve(cwd, Path::new("."))), false)
        }
        None => {
            let mut found = None;
            for dir in cwd.ancestors() {
                let dot = dir.join(".git");
                match read_gitfile(&dot, env) {
                    Gitfile::Repo(g) => {
                        found = Some((g, Some(dir.to_owned()), false));
                        break;
                    }
                    // git dies ("invalid gitfile format"): nothing runs.
                    Gitfile::Invalid => return None,
                    Gitfile::NotAFile => {}
                }
                if is_git_dir(&dot, env) {
                    found = Some((resolve(dir, Path::new(".git")), Some(dir.to_owned()), false));
                    break;
                }
                if is_git_dir(dir, env) {
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
    match std::fs::symlink_metadata(&path) {
        Err(_) => return Ok(None),
        Ok(m) if m.file_type().is_symlink() || !m.is_file() => {
            if let Some(why) = read_otherwise(&path) {
                return Err(ConfigError(format!("{} {why}", path.display())));
            }
            if !path.exists() {
                return Ok(None);
            }
        }
        Ok(_) => {}
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
    let home = env.home_dir();
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
        if r.worktree_config {
            push(r.git_dir.join("config.worktree"), Source::Worktree);
        }
    }
    let opts = init::Options {
        includes: includes::Options::follow(
            gix_config::path::interpolate::Context {
                home_dir: home,
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
    for m in &metas {
        if let Some(p) = m
            .path
            .as_deref()
            .filter(|p| p != &Path::new("/etc/gitconfig"))
        {
            if let Some(why) = read_otherwise(p) {
                return Err(ConfigError(format!("{} {why}", p.display())));
            }
        }
    }
    let mut buf = Vec::with_capacity(4096);
    let file = File::from_paths_metadata_buf(&mut metas.into_iter(), &mut buf, false, opts)
        .map_err(|e| ConfigError(format!("{e:#}")))?
        .unwrap_or_default();
    includes_as_git_reads_them(&file, home)?;
    Ok(file)
}

/// The includes of `file` (followed or not) are files git reads as this
/// process reads them: git's section names know no case, and gix follows
/// only `[include]` and `[includeIf "…"]` as spelt so (an `[INCLUDE]` or
/// `[includeif "gitdir:…"]` naming a merge driver made `git cherry-pick`
/// commit its output unseen, round eight); and an include's path may not
/// lead through /proc or /dev, nor be other than a regular file (see
/// [`read_otherwise`]).
fn includes_as_git_reads_them(file: &File, home: Option<&Path>) -> Result<(), ConfigError> {
    for sec in file.sections() {
        let name = sec.header().name();
        let exact = name == "include" || name == "includeIf";
        if !exact
            && !name.eq_ignore_ascii_case(b"include")
            && !name.eq_ignore_ascii_case(b"includeif")
        {
            continue;
        }
        let at = sec
            .meta()
            .path
            .as_deref()
            .map_or_else(|| "the command line".into(), |p| p.display().to_string());
        if !exact {
            return Err(ConfigError(format!(
                "[{name}] in {at}: spell it [include] or [includeIf \"...\"], as the guard reads includes"
            )));
        }
        for v in sec.values("path") {
            let p = include_target(&v, sec.meta().path.as_deref(), home);
            if let Some(why) = read_otherwise(&p) {
                return Err(ConfigError(format!(
                    "include.path {} in {at} {why}",
                    p.display()
                )));
            }
        }
    }
    Ok(())
}

/// git follows `includeIf "hasconfig:remote.*.url:GLOB"` when a remote URL
/// anywhere in its configuration matches (a remote of `.git/config`, for an
/// include in `~/.gitconfig`: the feature's own use); gix reads each file's
/// includes with that file alone in view, so such an include naming a merge
/// driver was followed by git and not by the guard, and `git cherry-pick`
/// committed the driver's output without pre-commit (round eight). Where
/// `cfg` (every source, the command line's too) has a matching URL and
/// nothing read from that include, the guard cannot read it in git's order:
/// refused.
pub fn hasconfig_as_git_reads_it(cfg: &File, home: Option<&Path>) -> Result<(), ConfigError> {
    let mut urls: Vec<Vec<u8>> = Vec::new();
    for sec in cfg.sections() {
        if sec.header().name().eq_ignore_ascii_case(b"remote")
            && sec.header().subsection_name().is_some()
        {
            urls.extend(sec.values("url").into_iter().map(|u| u.to_vec()));
        }
    }
    if urls.is_empty() {
        return Ok(());
    }
    for sec in cfg.sections() {
        let Some(cond) = sec.header().subsection_name() else {
            continue;
        };
        let Some(glob) = cond.strip_prefix(b"hasconfig:remote.*.url:") else {
            continue;
        };
        if !sec.header().name().eq_ignore_ascii_case(b"includeif") {
            continue;
        }
        let mode = gix_glob::wildmatch::Mode::NO_MATCH_SLASH_LITERAL;
        let hit = urls
            .iter()
            .any(|u| gix_glob::wildmatch(glob.into(), u.as_slice().into(), mode));
        if !hit {
            continue;
        }
        for v in sec.values("path") {
            let p = include_target(&v, sec.meta().path.as_deref(), home);
            let read = cfg
                .sections()
                .any(|s| s.meta().path.as_deref() == Some(p.as_path()));
            if !read && p.is_file() {
                return Err(ConfigError(format!(
                    "includeIf \"{}\" in {} matches a remote URL the guard reads elsewhere; git follows it, the guard cannot in git's order: use includeIf \"gitdir:...\" or a plain include",
                    String::from_utf8_lossy(cond),
                    sec.meta()
                        .path
                        .as_deref()
                        .map_or_else(|| "the command line".into(), |p| p.display().to_string()),
                )));
            }
        }
    }
    Ok(())
}

/// Where an include's `path` value leads: `~/` from HOME, a relative one
/// from the including file's directory (git's handle_path_include).
fn include_target(v: &[u8], from: Option<&Path>, home: Option<&Path>) -> PathBuf {
    let v = Path::new(OsStr::from_bytes(v));
    if let (Some(rest), Some(h)) = (v.as_os_str().as_bytes().strip_prefix(b"~/"), home) {
        return h.join(OsStr::from_bytes(rest));
    }
    match from.and_then(Path::parent) {
        Some(dir) if v.is_relative() && !v.as_os_str().as_bytes().starts_with(b"~") => dir.join(v),
        _ => v.to_owned(),
    }
}

/// Why git could read the configuration file at `p` as another one than
/// this process does: a relative path (git reads configuration from the
/// top of the work tree, the guard from the caller's directory: `HOME=.`
/// in a subdirectory); a way through /proc or /dev, literal or by a
/// symlink (per-process views: `/proc/self/cwd` is each process's own
/// directory); or a file there that is not a regular one (a FIFO gives
/// each reader what its writer writes next, and gix skips an include that
/// is not a regular file, which git reads: round eight, a FIFO named by
/// `include.path` served a merge driver to git only). A path that leads
/// nowhere is fine: git finds nothing there either.
fn read_otherwise(p: &Path) -> Option<&'static str> {
    if !p.is_absolute() {
        return Some(
            "is a relative path, which git reads from the top of the work tree; use an absolute HOME and XDG_CONFIG_HOME",
        );
    }
    match walk(p) {
        Walk::PerProcess | Walk::BadLink => Some(
            "leads through /proc or /dev, which git reads as its own process; use a plain path",
        ),
        Walk::At(at) if std::fs::metadata(&at).is_ok_and(|m| !m.is_file()) => {
            Some("is not a regular file, which git and the guard could read differently")
        }
        Walk::At(_) | Walk::Missing | Walk::Failed => None,
    }
}

/// Where an absolute path leads, walked a component at a time as the
/// kernel walks it, each symlink's target checked (at most 40 links).
pub enum Walk {
    /// Through /proc or /dev, literal or by a symlink: a per-process view.
    PerProcess,
    /// A symlink that cannot be read, or one too many.
    BadLink,
    /// Nothing there, from some component on.
    Missing,
    /// A component that cannot be looked at (other than missing).
    Failed,
    /// The path it resolves to, which exists.
    At(PathBuf),
}

pub fn walk(p: &Path) -> Walk {
    let per_process = |p: &Path| p.starts_with("/proc") || p.starts_with("/dev");
    let mut todo: Vec<OsString> = p
        .components()
        .rev()
        .map(|c| c.as_os_str().to_owned())
        .collect();
    let mut at = PathBuf::from("/");
    let mut links = 0;
    while let Some(c) = todo.pop() {
        match c.to_str() {
            Some("/") => at = PathBuf::from("/"),
            Some(".") => {}
            Some("..") => {
                at.pop();
            }
            _ => {
                let next = at.join(&c);
                if per_process(&next) {
                    return Walk::PerProcess;
                }
                match std::fs::symlink_metadata(&next) {
                    Ok(m) if m.file_type().is_symlink() => {
                        links += 1;
                        match std::fs::read_link(&next) {
                            Ok(t) if links <= 40 => {
                                todo.extend(t.components().rev().map(|c| c.as_os_str().to_owned()));
                            }
                            _ => return Walk::BadLink,
                        }
                    }
                    Ok(_) => at = next,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Walk::Missing,
                    Err(_) => return Walk::Failed,
                }
            }
        }
    }
    Walk::At(at)
}

/// Command-line and environment configuration as a config file of its own,
/// appended last as git reads it last.
pub fn inline_file<'a>(pairs: impl Iterator<Item = &'a (String, Option<String>)>) -> File {
    let mut f = File::new(Metadata::from(Source::Cli));
    for (key, value) in pairs {
        let Some(k) = crate::keys::split(key) else {
            continue;
        };
        let sec = match k.sub {
            Some(sub) => f.new_section(k.section.clone(), sub.to_owned()),
            None => f.new_section(k.section.clone(), None),
        };
        let Ok(mut sec) = sec else {
            continue;
        };
        let _ = sec.push(
            k.name.as_str(),
            value.as_deref().map(|v| v.as_bytes().into()),
        );
    }
    f
}

/// alias.c: the alias name is everything after `alias.` (so
/// `alias.x.y` is the alias `x.y`), compared without regard to case; the
/// last definition wins.
pub fn alias(cfg: &File, cmd: &str) -> Option<Vec<u8>> {
    let mut found = None;
    for sec in cfg.sections_by_name("alias")? {
        let sub = sec.header().subsection_name().map(|s| s.to_vec());
        for name in sec.value_names() {
            let full = match &sub {
                Some(s) => [s.as_slice(), b".", name.as_bytes()].concat(),
                None => name.as_bytes().to_vec(),
            };
            if full.eq_ignore_ascii_case(cmd.as_bytes()) {
                if let Some(v) = sec.values(&name).into_iter().last() {
                    found = Some(v.to_vec());
                }
            }
        }
    }
    found
}

/// `refs/heads/<name>` when HEAD is on a branch.
pub fn current_branch(git_dir: &Path) -> Option<String> {
    let head = std::fs::read_to_string(git_dir.join("HEAD")).ok()?;
    // As refs/files-backend.c reads it: trailing whitespace trimmed, any
    // after `ref:` skipped. `ref:refs/heads/main` (a HEAD written by hand)
    // is main to git, and a guard that read no branch skipped an
    // `includeIf "onbranch:main"` naming a merge driver (round eight).
    let ws = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r');
    head.trim_end_matches(ws)
        .strip_prefix("ref:")
        .map(|r| r.trim_start_matches(ws).to_owned())
        .filter(|r| r.starts_with("refs/heads/"))
}

/// The trusted hooks directory. In a sandbox, always the workspace's: a
/// repository other than the workspace's (a scratch clone, a git dir or
/// common dir the agent made, with the workspace's refs and objects linked
/// in) has hooks the agent writes. Outside, the
/// repository's own: husky's `.husky/_` (v9) or `.husky` (v4–8) when the
/// work tree is a husky repository, else the common dir's `hooks`.
pub fn trusted_hooks(repo: &Repo) -> PathBuf {
    // Even the workspace's own repository: its .git may have been renamed
    // (taking the mount along) and another made in its place, and a path
    // that merely leads to the mount (a symlink) can be retargeted.
    sandbox_hooks().unwrap_or_else(|| own_hooks(repo))
}

/// In a sandbox, the workspace's trusted hooks (also for a command that
/// acts on no repository the guard can see).
pub fn sandbox_hooks() -> Option<PathBuf> {
    sandbox_repo().map(|ws| own_hooks(&ws))
}

/// The workspace as a repository whose hooks are the read-only mount,
/// wherever that mount now is.
fn sandbox_repo() -> Option<Repo> {
    if !Path::new("/.agent-sandbox").is_dir() {
        return None;
    }
    let w = sandbox_mounts()?;
    let common = w.hooks.parent()?.to_owned();
    Some(Repo {
        git_dir: common.clone(),
        common_dir: common,
        work_tree: Some(w.dir.clone()),
        inside_git_dir: false,
        worktree_config: false,
    })
}

/// This process's one reading of mountinfo, so the hooks pinned and the fd
/// opened for them (`pin_by_fd`) come from the same look. Each decision
/// runs in a process of its own (the broker forks one per request before
/// it decides; its accept loop never asks).
pub fn sandbox_mounts() -> Option<&'static SandboxWorkspace> {
    static ONCE: std::sync::OnceLock<Option<SandboxWorkspace>> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        sandbox_workspace(&std::fs::read("/proc/self/mountinfo").unwrap_or_default())
    })
    .as_ref()
}

/// The sandbox's workspace and its hooks mount.
#[derive(Debug, PartialEq, Eq)]
pub struct SandboxWorkspace {
    /// `/workspace/<name>`: a mount point, so the agent cannot rename it.
    pub dir: PathBuf,
    /// The read-only hooks mount: `<dir>/.git/hooks` as sbx-run made it, or
    /// where a rename of `.git` (the mount's parent, which the agent can
    /// rename) has taken it.
    pub hooks: PathBuf,
    /// The hooks mount's id (mountinfo's first field, fdinfo's `mnt_id`).
    pub mount_id: u64,
}

/// Found from mountinfo (the agent can make no mount, while it sets any
/// variable): the read-only mount named `hooks` under a `/workspace/<name>`
/// mount; `<name>/.git/hooks` first, else the shallowest.
pub fn sandbox_workspace(mountinfo: &[u8]) -> Option<SandboxWorkspace> {
    let mut mounts: Vec<(Vec<u8>, bool, u64)> = Vec::new();
    for line in mountinfo.split(|b| *b == b'\n') {
        let f: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
        let (Some(mp), Some(opts)) = (f.get(4), f.get(5)) else {
            continue;
        };
        let ro = opts.split(|b| *b == b',').any(|o| o == b"ro");
        let id = std::str::from_utf8(f[0])
            .ok()
            .and_then(|i| i.parse().ok())
            .unwrap_or(0);
        mounts.push((unescape_mount(mp), ro, id));
    }
    let is_mount = |p: &[u8]| mounts.iter().any(|(m, _, _)| m == p);
    let mut best: Option<(Vec<u8>, Vec<u8>, u64)> = None;
    for (mp, ro, id) in &mounts {
        if !ro || !mp.ends_with(b"/hooks") {
            continue;
        }
        // /workspace/<name>/...
        let Some(rest) = mp.strip_prefix(b"/workspace/") else {
            continue;
        };
        let Some(slash) = rest.iter().position(|b| *b == b'/') else {
            continue;
        };
        let dir = &mp[..b"/workspace/".len() + slash];
        if !is_mount(dir) {
            continue;
        }
        let exact = mp[dir.len()..] == *b"/.git/hooks";
        let better = match &best {
            None => true,
            Some((d, h, _)) => {
                let best_exact = h[d.len()..] == *b"/.git/hooks";
                (exact && !best_exact) || (exact == best_exact && mp.len() < h.len())
            }
        };
        if better {
            best = Some((dir.to_vec(), mp.clone(), *id));
        }
    }
    best.map(|(d, h, mount_id)| SandboxWorkspace {
        dir: PathBuf::from(OsString::from_vec(d)),
        hooks: PathBuf::from(OsString::from_vec(h)),
        mount_id,
    })
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_mount(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let oct = s
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (s[i], oct) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

fn own_hooks(repo: &Repo) -> PathBuf {
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

    #[test]
    fn the_workspace_is_found_from_its_read_only_hooks_mount() {
        let ws = |d: &str, h: &str, mount_id: u64| {
            Some(SandboxWorkspace {
                dir: PathBuf::from(d),
                hooks: PathBuf::from(h),
                mount_id,
            })
        };
        let mi = b"174 101 0:61 / / rw,relatime master:5 - overlay overlay rw\n\
            180 174 254:0 /a /workspace/my\\040ws rw,relatime - ext4 /dev/vda rw\n\
            181 180 254:0 /b /workspace/my\\040ws/s/.git/hooks ro,relatime - ext4 /dev/vda rw\n\
            182 180 254:0 /c /workspace/my\\040ws/.git/hooks ro,relatime - ext4 /dev/vda rw\n\
            183 180 254:0 /d /tmp/x/.git/hooks ro,relatime - ext4 /dev/vda rw\n";
        assert_eq!(
            sandbox_workspace(mi),
            ws("/workspace/my ws", "/workspace/my ws/.git/hooks", 182)
        );
        // `.git` renamed: the mount went with it, and is still the hooks.
        let moved = b"180 174 254:0 /a /workspace/w rw,relatime - ext4 /dev/vda rw\n\
            182 180 254:0 /c /workspace/w/.gitold/hooks ro,relatime - ext4 /dev/vda rw\n";
        assert_eq!(
            sandbox_workspace(moved),
            ws("/workspace/w", "/workspace/w/.gitold/hooks", 182)
        );
        // Writable, or not under a workspace mount: not the sandbox's.
        let rw = b"180 174 254:0 /a /workspace/w rw,relatime - ext4 /dev/vda rw\n\
            183 180 254:0 /d /workspace/w/.git/hooks rw,relatime - ext4 /dev/vda rw\n\
            184 180 254:0 /d /tmp/w/.git/hooks ro,relatime - ext4 /dev/vda rw\n";
        assert_eq!(sandbox_workspace(rw), None);
    }
}
