//! The guard's own hooks directory. For commands that can move refs, git's
//! hooks path is pinned here instead of at the repository's hooks: every
//! hook name is a link to this binary, which runs the repository's hook of
//! that name (from `$SBX_GUARD_TRUSTED_HOOKS`, which only the guard sets)
//! and, for two of them, checks first what git itself computed:
//!
//! - `pre-push` reads the exact ref updates git is about to send and refuses
//!   deletions and non-fast-forwards, so no spelling of a push target
//!   (pushDefault, pushRemote, `-c`, mirror remotes, `.git/remotes` files)
//!   can disagree with git;
//! - `reference-transaction` (state `prepared`) refuses moving a branch onto
//!   a stash or `git notes` commit, or onto a new commit whose tree is
//!   one's (a stash cherry-picked), since no pre-commit hook ever saw them.
//!   The stashes are the repository's own and, under a broker, every one
//!   any repository's step saw made (the broker's root-owned record).

use std::ffi::{OsStr, OsString};
use std::io::{Read as _, Write as _};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use crate::rules::R;

/// Set by the guard for git's children: the repository's trusted hooks.
pub const TRUSTED_ENV: &str = "SBX_GUARD_TRUSTED_HOOKS";

/// Set with [`TRUSTED_ENV`] when the call needs no pre-push or
/// reference-transaction check: the step only runs the hook. Removed from
/// the agent's environment like [`TRUSTED_ENV`].
pub const HOOKS_ONLY_ENV: &str = "SBX_GUARD_HOOKS_ONLY";

/// Set by the guard for `git commit`: the commit it makes was built from
/// the index pre-commit saw (through a broker, a private one), so its
/// reference-transaction step judges the commit's parents, not its own
/// content (a `MERGE_HEAD` written by hand adds any commit as a parent).
/// Its prepared step also compares the commit's message with the one
/// commit-msg passed (`msg::check_commit`); set for every commit.
/// Removed from the agent's environment like [`TRUSTED_ENV`].
pub const COMMIT_ENV: &str = "SBX_GUARD_COMMIT";

/// No longer set (the steps ask git): removed from what hooks inherit, so
/// an agent's value is never read as the guard's.
pub const COMMON_ENV: &str = "SBX_GUARD_COMMON_DIR";

/// Where the image installs the directory (root-owned).
pub const IMAGE_DIR: &str = "/usr/lib/sbx/hooks";

/// Every hook git runs from the hooks path on the client side. Left out on
/// purpose: `push-to-checkout` and `proc-receive`, whose mere presence
/// changes what receive-pack does.
pub const HOOK_NAMES: &[&str] = &[
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "post-receive",
    "post-update",
    "reference-transaction",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "post-index-change",
];

/// Is `name` a hook this binary answers to (argv[0]'s basename)?
pub fn is_hook_name(name: &str) -> bool {
    HOOK_NAMES.contains(&name)
}

/// What a hooks directory links to: the libc-free client beside the
/// guard when there is one (it answers a hooks-only step for a hook the
/// repository lacks without starting the guard, and execs the guard for
/// the rest), else the guard.
pub fn step_exe(guard: &Path) -> PathBuf {
    let client = guard.with_file_name("sbx-git-client");
    if std::fs::metadata(&client).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    {
        client
    } else {
        guard.to_owned()
    }
}

/// Every hook name, as a set.
const ALL: u32 = (1 << HOOK_NAMES.len()) - 1;

fn bit(name: &str) -> u32 {
    HOOK_NAMES
        .iter()
        .position(|h| *h == name)
        .map_or(0, |i| 1 << i)
}

fn names(set: u32) -> impl Iterator<Item = &'static str> {
    HOOK_NAMES
        .iter()
        .enumerate()
        .filter(move |(i, _)| set & 1 << i != 0)
        .map(|(_, h)| *h)
}

/// Steps that run a second hook after their own (see [`run`]).
const CHAINED: [(&str, &str); 3] = [
    ("pre-applypatch", "pre-commit"),
    ("pre-merge-commit", "pre-commit"),
    ("applypatch-msg", "commit-msg"),
];

/// The hook names a routed call needs steps for: the hooks `trusted`
/// has, each chained step whose hooks it has, and with `checked` the
/// pre-push and reference-transaction checks. git starts no step for a
/// name missing from the directory, so a commit in a repository with one
/// hook starts one step, not nine. A hook added to `trusted` after this
/// call began is not run by it (it runs from the next call on).
pub fn needed(trusted: &Path, checked: bool) -> u32 {
    // One directory read, then a stat of each hook name it holds (most
    // repositories have a few), not a stat of every name.
    // A directory it cannot list (searchable only): a stat of every name.
    let mut set = match std::fs::read_dir(trusted) {
        Ok(d) => d
            .filter_map(|e| {
                let e = e.ok()?;
                let b = bit(e.file_name().to_str()?);
                (b != 0 && executable(&e.path())).then_some(b)
            })
            .fold(0, |s, b| s | b),
        Err(_) => HOOK_NAMES
            .iter()
            .filter(|h| executable(&trusted.join(h)))
            .fold(0, |s, h| s | bit(h)),
    };
    for (step, then) in CHAINED {
        if set & (bit(step) | bit(then)) != 0 {
            set |= bit(step);
        }
    }
    if checked {
        set |= bit("pre-push") | bit("reference-transaction");
    }
    set
}

/// Where the directories of hook sets are: root-made in the sandbox (the
/// broker's root process makes them, [`make_set`]), else beside this binary.
pub const SETS_DIR: &str = "/run/sbx-git/hooks";

fn sets_dir(sandboxed: bool, exe: &Path) -> Option<PathBuf> {
    if sandboxed {
        return Some(PathBuf::from(SETS_DIR));
    }
    Some(exe.parent()?.join(".sbx-git-hooks.d"))
}

fn set_dir(base: &Path, set: u32) -> PathBuf {
    base.join(format!("{set:06x}"))
}

/// The directory git's hooks path points at for a routed call: one with
/// steps for `set` ([`needed`]) only, made on first use, else (it cannot
/// be made) the directory of every name.
pub fn routed_dir(sandboxed: bool, set: u32) -> Option<PathBuf> {
    let set_path = || -> Option<PathBuf> {
        // The kernel's link is the resolved path already.
        let exe = std::fs::read_link("/proc/self/exe").ok()?;
        let dir = set_dir(&sets_dir(sandboxed, &exe)?, set);
        if is_current(&dir, &exe, set) {
            return Some(dir);
        }
        // Only root may make one in the sandbox (a directory the agent
        // could write would let it choose what git runs with the group).
        let made = match crate::broker::ask_for_set(set) {
            Some(made) => made,
            None if sandboxed && !nix::unistd::geteuid().is_root() => false,
            None => install_set(&dir, &exe, set).is_ok(),
        };
        (made && is_current(&dir, &exe, set)).then_some(dir)
    };
    if set == 0 {
        return guard_dir(sandboxed);
    }
    set_path().or_else(|| guard_dir(sandboxed))
}

/// The broker's root process: make the directory of hook set `set`.
pub fn make_set(set: u32) -> std::io::Result<()> {
    if set == 0 || set & !ALL != 0 {
        return Err(std::io::Error::other(format!("no hook set {set:#x}")));
    }
    let exe = std::fs::read_link("/proc/self/exe")?;
    let base = sets_dir(crate::in_sandbox(), &exe)
        .ok_or_else(|| std::io::Error::other("no directory for hook sets"))?;
    std::fs::create_dir_all(&base)?;
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755))?;
    install_set(&set_dir(&base, set), &exe, set)
}

fn is_current(dir: &Path, exe: &Path, set: u32) -> bool {
    let step = step_exe(exe);
    names(set).all(|h| std::fs::read_link(dir.join(h)).is_ok_and(|t| t == step))
}

/// Create `dir` with a link per hook to [`step_exe`] of `exe`, atomically (a sibling
/// temporary directory renamed into place), unless it is already current.
pub fn install(dir: &Path, exe: &Path) -> std::io::Result<()> {
    install_set(dir, exe, ALL)
}

fn install_set(dir: &Path, exe: &Path, set: u32) -> std::io::Result<()> {
    if is_current(dir, exe, set) {
        return Ok(());
    }
    let parent = dir.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(parent)?;
    let tmp = tempfile_dir(parent)?;
    let step = step_exe(exe);
    for h in names(set) {
        std::os::unix::fs::symlink(&step, tmp.join(h))?;
    }
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
    // Guards replacing a stale directory at once (parallel tests over one a
    // build at another path made) each move what is there aside and retry
    // until theirs, or another's current one, is in place.
    let mut last = None;
    for _ in 0..64 {
        match std::fs::rename(&tmp, dir) {
            Ok(()) => return Ok(()),
            Err(_) if is_current(dir, exe, set) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Ok(());
            }
            Err(e) if occupied(&e) => {
                let old = tempfile_dir(parent)?;
                std::fs::remove_dir(&old)?;
                // Gone meanwhile: another guard moved it.
                match std::fs::rename(dir, &old) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        let _ = std::fs::remove_dir_all(&tmp);
                        return Err(e);
                    }
                    _ => {}
                }
                let _ = std::fs::remove_dir_all(&old);
                last = Some(e);
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(e);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    Err(last.unwrap_or_else(|| std::io::Error::other("cannot install the hooks directory")))
}

/// rename(2)'s answer when the target is a directory with entries.
fn occupied(e: &std::io::Error) -> bool {
    use nix::errno::Errno;
    e.raw_os_error()
        .is_some_and(|n| n == Errno::ENOTEMPTY as i32 || n == Errno::EEXIST as i32)
}

fn tempfile_dir(parent: &Path) -> std::io::Result<PathBuf> {
    for i in 0..100u32 {
        let p = parent.join(format!(".sbx-git-hooks.{}.{i}", std::process::id()));
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no temporary directory name left"))
}

/// The guard's hooks directory. In the sandbox only the image's (the agent
/// could rewrite any other); outside, one next to this binary, made on
/// first use. `None`: hooks are pinned to the repository's directly.
pub fn guard_dir(in_sandbox: bool) -> Option<PathBuf> {
    let exe = std::fs::canonicalize("/proc/self/exe").ok()?;
    if in_sandbox {
        let d = PathBuf::from(IMAGE_DIR);
        return is_current(&d, &exe, ALL).then_some(d);
    }
    let dir = exe.parent()?.join(".sbx-git-hooks");
    install(&dir, &exe).ok()?;
    Some(dir)
}

const ZERO: &[u8] = b"0000000000000000000000000000000000000000";

fn is_zero(oid: &[u8]) -> bool {
    !oid.is_empty() && oid.iter().all(|b| *b == b'0') && oid.len() >= ZERO.len()
}

/// How the hook steps run git. Where a broker runs git (the sandbox: the
/// agent can neither run the real binary nor name one with SBX_REAL_GIT),
/// through this binary (or the client beside it) as `git`, so the broker
/// decides and runs it as the caller; a broker that is down makes each
/// call fail, and the steps refuse. Elsewhere, the real git directly.
#[derive(Debug, Clone)]
pub enum Git {
    Real(PathBuf),
    ViaGuard(PathBuf),
}

impl Git {
    /// The runner for this process's environment; None: no git at all.
    pub fn for_env(env: &[(OsString, OsString)]) -> Option<Git> {
        let sandboxed = crate::in_sandbox();
        if sandboxed || crate::broker::socket_path(env).is_some() {
            let me = std::fs::canonicalize("/proc/self/exe").ok()?;
            // The forwarding client beside this binary sends the broker the
            // guard's own request (tests/client.rs) and execs this binary
            // for whatever it does not forward, and it starts without libc:
            // ~0.3 ms less for each git a check asks.
            let client = me.with_file_name(crate::CLIENT);
            return Some(Git::ViaGuard(if executable(&client) { client } else { me }));
        }
        crate::real_git(env, sandboxed).map(Git::Real)
    }

    fn command(&self) -> Command {
        match self {
            Git::Real(p) => Command::new(p),
            Git::ViaGuard(me) => {
                use std::os::unix::process::CommandExt as _;
                let mut c = Command::new(me);
                c.arg0("git");
                c
            }
        }
    }
}

/// The steps only read objects and refs: where git named the repository
/// (`GIT_DIR`, as receive-pack sets it for hooks it runs inside a
/// non-bare repository's `.git`), as a bare one, so the work tree that
/// GIT_DIR alone implies (the git dir itself) is no work tree at all.
///
/// That GIT_DIR is resolved once per step (symlinks and all), so every
/// question the step asks reads one repository: a `GIT_DIR` symlink flipped
/// while it runs cannot answer "no stash" from one and have git move the
/// other's branch (the commit git adds is then missing and the move refused).
fn git(real: &Git, args: &[&OsStr]) -> Option<std::process::Output> {
    finish(git_start(real, args))
}

/// [`git`] started, not waited for: the checks ask git their independent
/// questions at once (each through the broker costs a process start and
/// a round trip, ~1 ms).
pub(crate) fn git_start(real: &Git, args: &[&OsStr]) -> Option<std::process::Child> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let d = std::env::var_os("GIT_DIR").filter(|d| !d.is_empty())?;
        Some(std::fs::canonicalize(&d).unwrap_or_else(|_| PathBuf::from(d)))
    });
    let mut c = real.command();
    if let Some(d) = dir {
        c.arg("--bare").env("GIT_DIR", d);
    }
    // What the objects say, not a commit-graph the agent may have written
    // (the guard pins this for every git call; here for the real git run
    // directly, outside a sandbox).
    c.args(["-c", "core.commitGraph=false"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// git run with exactly `env` in `cwd` (the ledger's private view); did
/// it succeed? Its output goes nowhere.
pub(crate) fn git_with_env(
    real: &Git,
    args: &[&OsStr],
    env: &[(OsString, OsString)],
    cwd: &Path,
) -> bool {
    real.command()
        .args(["-c", "core.commitGraph=false"])
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// [`git`]'s standard output when it succeeded.
/// [`git`]'s standard output whatever its status (None: it did not run).
pub(crate) fn git_output_any(real: &Git, args: &[&OsStr]) -> Option<Vec<u8>> {
    git(real, args).map(|o| o.stdout)
}

pub(crate) fn git_output(real: &Git, args: &[&OsStr]) -> Option<Vec<u8>> {
    git(real, args)
        .filter(|o| o.status.success())
        .map(|o| o.stdout)
}

pub(crate) fn finish(child: Option<std::process::Child>) -> Option<std::process::Output> {
    child?.wait_with_output().ok()
}

/// pre-push: each line is `<local ref> <local oid> <remote ref> <remote oid>`
/// for an update git will make (rejected ones are not listed). An input
/// without a line sbx-git-client answers itself (`needs_no_check`).
pub fn check_push(real: &Git, stdin: &[u8]) -> Result<(), String> {
    for line in stdin.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let f: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
        let [_lref, loid, rref, roid] = f[..] else {
            return Err(format!(
                "cannot read git's pre-push line `{}`",
                String::from_utf8_lossy(line)
            ));
        };
        let rref_s = String::from_utf8_lossy(rref);
        if is_zero(loid) {
            return Err(format!("the push deletes {rref_s} on the remote"));
        }
        if is_zero(roid) {
            continue;
        }
        // Exit 0: ancestor. 1: not. Else (128): the remote's commit is not
        // here, so git could only be pushing it by force.
        let ok = git(
            real,
            &[
                OsStr::new("merge-base"),
                OsStr::new("--is-ancestor"),
                OsStr::from_bytes(roid),
                OsStr::from_bytes(loid),
            ],
        )
        .is_some_and(|o| o.status.success());
        if !ok {
            return Err(format!(
                "the push rewinds {rref_s} on the remote (not a fast-forward)"
            ));
        }
    }
    Ok(())
}

/// What the stash holds: its commits (each entry's own commit and its
/// index and untracked parents, not its base), their trees, and the blobs
/// they bring in (against the base; every blob of an untracked commit).
#[derive(Default)]
struct StashSets {
    commits: Vec<Vec<u8>>,
    trees: Vec<Vec<u8>>,
    blobs: Vec<Vec<u8>>,
    /// Raw lines that bring in no blob: a deletion, a mode change, an
    /// empty file. Cherry-picked onto a moved branch they had no blob and
    /// no tree to match (attack15k).
    changes: Vec<Vec<u8>>,
}

/// The empty blob: common to unrelated changes, and holds nothing.
const EMPTY_BLOB: &[u8] = b"e69de29bb2d1d6434b8b29ae775ad8c2e48c5391";

/// The new blob ids in `git log --raw --no-abbrev` lines
/// (`:100644 100644 <old> <new> M\tpath`), added or modified only (a
/// mode change keeps its blob: no new content, a change of its own).
fn raw_new_blob(line: &[u8]) -> Option<&[u8]> {
    let meta = line.strip_prefix(b":")?;
    let meta = meta.split(|b| *b == b'\t').next()?;
    let w: Vec<&[u8]> = meta.split(|b| *b == b' ').collect();
    let (old, new, status) = (w.get(2)?, w.get(3)?, w.get(4)?);
    (matches!(status.first(), Some(b'A' | b'M' | b'T' | b'C' | b'R'))
        && !is_zero(new)
        && old != new
        && *new != EMPTY_BLOB)
        .then_some(*new)
}

/// `git log` of `walk`, each commit with its raw diff against its first
/// parent: a `%H %T %P` line, then the `:` lines `stash_commits` reads.
fn raw_log<'a>(
    real: &Git,
    walk: impl IntoIterator<Item = &'a OsStr>,
) -> Option<std::process::Output> {
    let mut args = vec![OsStr::new("log")];
    args.extend(walk);
    args.extend(
        [
            // Not `-m`, which means `log.diffMerges` (`off` left a stash's
            // worktree commit with no diff at all: attack15k).
            "--diff-merges=first-parent",
            "--first-parent",
            "--raw",
            "-r",
            "--no-abbrev",
            "--no-renames",
            // `diff.ignoreSubmodules=all` hid a gitlink's change, so a
            // stash changing only a submodule counted no tree (attack15k).
            "--ignore-submodules=none",
            // `log.showRoot=false` hid a root commit's (a first notes
            // commit's) blobs.
            "--root",
            "--format=%H %T %P",
            // `i18n.logOutputEncoding` (UTF-16) re-encoded the ids.
            "--encoding=UTF-8",
            "--",
        ]
        .map(OsStr::new),
    );
    git(real, &args)
}

fn stash_commits(real: &Git) -> StashSets {
    let mut set = StashSets::default();
    // Each entry's commit against its base (first parent), with its raw diff.
    let list = |walk: &str| raw_log(real, [walk, "refs/stash"].map(OsStr::new));
    // The reflog holds every stash; without one, refs/stash names the last.
    let mut out = list("-g")
        .filter(|o| !o.stdout.is_empty())
        .or_else(|| list("--no-walk"))
        .map(|o| o.stdout)
        .unwrap_or_default();
    // Every notes commit a notes ref reaches (made before the guard saw it,
    // or fetched).
    if let Some(o) = raw_log(real, [OsStr::new("--glob=refs/notes/")]) {
        out.extend_from_slice(&o.stdout);
    }
    // And every one the guard saw made, dropped or not (gone ones skipped),
    // here or in any repository of the sandbox (fetched in, they are here).
    let mut seen = common_dir(real)
        .and_then(|c| std::fs::read(c.join(SEEN_FILE)).ok())
        .unwrap_or_default();
    seen.push(b'\n');
    seen.extend(shared_seen());
    let mut ids: Vec<&OsStr> = seen
        .split(|b| *b == b'\n')
        .filter(|l| l.len() >= 40 && l.iter().all(u8::is_ascii_hexdigit))
        .map(OsStr::from_bytes)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    if !ids.is_empty() {
        let walk = ["--no-walk", "--ignore-missing"].map(OsStr::new);
        if let Some(o) = raw_log(real, walk.into_iter().chain(ids)) {
            out.extend_from_slice(&o.stdout);
        }
    }
    let mut extra: Vec<OsString> = Vec::new();
    let read = |stdout: &[u8], set: &mut StashSets, extra: Option<&mut Vec<OsString>>| {
        let mut extra = extra;
        // A commit's tree counts only where it changes something against
        // its parent (or has none): an index commit of a stash with nothing
        // staged has its base's tree, a commit's, and a revert back to that
        // base was refused as a copy of the stash (round seven).
        let mut tree: Option<&[u8]> = None;
        for line in stdout.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            if line.starts_with(b":") {
                if let Some(t) = tree.take() {
                    set.trees.push(t.to_vec());
                }
                match raw_new_blob(line) {
                    Some(b) => set.blobs.push(b.to_vec()),
                    None => set.changes.push(line.to_vec()),
                }
                continue;
            }
            let w: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
            if w.len() < 2 || w[0].len() < 40 {
                continue;
            }
            set.commits.push(w[0].to_vec());
            // `%H %T %P` without a parent: a root commit, all it holds.
            if extra.is_some() && w.get(2).is_none_or(|p| p.is_empty()) {
                set.trees.push(w[1].to_vec());
            } else {
                tree = Some(w[1]);
            }
            if let Some(extra) = extra.as_deref_mut() {
                for p in w.iter().skip(3) {
                    extra.push(OsStr::from_bytes(p).to_owned());
                }
            }
        }
    };
    read(&out, &mut set, Some(&mut extra));
    if !extra.is_empty() {
        // The index and untracked commits, each against its own parent (the
        // untracked one has none: every file it holds).
        let mut args: Vec<&OsStr> = vec![
            OsStr::new("log"),
            OsStr::new("--no-walk"),
            OsStr::new("--root"),
            OsStr::new("--raw"),
            OsStr::new("-r"),
            OsStr::new("--no-abbrev"),
            OsStr::new("--no-renames"),
            OsStr::new("--ignore-submodules=none"),
            OsStr::new("--format=%H %T"),
            OsStr::new("--encoding=UTF-8"),
        ];
        args.extend(extra.iter().map(|e| e.as_os_str()));
        if let Some(o) = git(real, &args) {
            read(&o.stdout, &mut set, None);
        }
    }
    set
}

/// Every stash commit the guard's step saw made (one id a line, in the
/// common dir): a stash dropped or cleared leaves its commits in the object
/// store, where `git cherry-pick <id>` still finds them. Kept until the
/// repository is; deleting it by hand is writing the git dir, limit (1).
pub const SEEN_FILE: &str = "sbx-stash-seen";

/// The sandbox-wide record (see [`crate::broker::shared_record`]): every
/// stash and notes commit any repository's step saw made. Empty without a
/// broker.
fn shared_seen() -> Vec<u8> {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    crate::broker::shared_record(&env)
        .and_then(|p| std::fs::read(p).ok())
        .unwrap_or_default()
}

/// Has any repository's step recorded a stash or notes commit in the
/// sandbox-wide record? One stat.
pub fn shared_stash_seen(env: &[(OsString, OsString)]) -> bool {
    crate::broker::shared_record(env)
        .is_some_and(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
}

/// Add `ids` (one a line) to the sandbox-wide record through the broker,
/// where one runs git and this is git's own process; else nothing (the
/// repository's own record is all there is).
pub(crate) fn record_shared(env: &[(OsString, OsString)], ids: &[u8]) -> Result<(), String> {
    match hook_broker(env) {
        Some(sock) => crate::broker::record(&sock, ids)
            .map_err(|e| format!("cannot record the stash with the git broker: {e}")),
        None => Ok(()),
    }
}

/// Does the repository have a stash (a reflog, a loose or a packed
/// refs/stash; a stash ref without a reflog still names one stash commit)?
pub fn stash_exists(common: &Path) -> bool {
    // reftable keeps refs in tables the guard does not read: assume one.
    common.join("reftable").is_dir()
        || std::fs::metadata(common.join(SEEN_FILE)).is_ok_and(|m| m.len() > 0)
        || common.join("logs/refs/stash").is_file()
        || common.join("refs/stash").is_file()
        || std::fs::read_dir(common.join("refs/notes")).is_ok_and(|mut d| d.next().is_some())
        || std::fs::read(common.join("packed-refs")).is_ok_and(|p| {
            p.windows(11).any(|w| w == b" refs/stash\n")
                || p.windows(12).any(|w| w == b" refs/notes/")
        })
}

/// reference-transaction, `prepared`: lines `<old> <new> <ref>`.
///
/// sbx-git-client answers, without this, the inputs it passes without
/// asking git or recording anything (no `refs/stash` or notes line, no
/// branch whose old and new ids differ: `needs_no_check`; under
/// [`COMMIT_ENV`], a branch moved to a commit whose one parent is its old
/// id: its commit.rs): a new check on other lines must narrow that too
/// (tests/client.rs `check_inputs` and
/// `a_commits_prepared_step_is_answered_only_for_one_parent_the_old_tip`).
pub fn check_transaction(real: &Git, stdin: &[u8]) -> Result<(), String> {
    let approved = crate::msg::check_commit(real, stdin)?;
    let mut moves = Vec::new();
    // Remote-tracking refs too, but for a fetch: what they point at counts
    // as fetched for the ledger.
    let mut tracking = Vec::new();
    let fetched = crate::ledger::env_is(crate::ledger::FETCH_ENV);
    // receive-pack: what a pre-push step sent, the rest as our own moves.
    let sent = crate::ledger::env_is(crate::ledger::RECEIVE_ENV)
        .then(|| crate::ledger::sent(&std::env::vars_os().collect::<Vec<_>>()));
    let vouched = |new: &[u8]| sent.as_ref().is_some_and(|s| s.contains(new));
    let mut stashed: Vec<u8> = Vec::new();
    for line in stdin.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let f: Vec<&[u8]> = line.splitn(3, |b| *b == b' ').collect();
        let [old, new, name] = f[..] else { continue };
        // `git notes` makes commits too (their tree holds the notes' text),
        // and no pre-commit sees them: recorded and refused like a stash's.
        if (name == b"refs/stash" || name.starts_with(b"refs/notes/"))
            && !is_zero(new)
            && !new.starts_with(b"ref:")
        {
            stashed.extend_from_slice(new);
            stashed.push(b'\n');
        }
        if name.starts_with(b"refs/heads/")
            && !is_zero(new)
            && old != new
            && !new.starts_with(b"ref:")
        {
            moves.push((old, new, name));
        }
        if !fetched
            && name.starts_with(b"refs/remotes/")
            && !is_zero(new)
            && old != new
            && !new.starts_with(b"ref:")
        {
            tracking.push((old, new, name));
        }
    }
    if !stashed.is_empty() {
        let common = common_dir(real).ok_or("cannot find the repository's common directory")?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(common.join(SEEN_FILE))
            .map_err(|e| format!("cannot record the stash in {SEEN_FILE}: {e}"))?;
        f.write_all(&stashed)
            .map_err(|e| format!("cannot record the stash in {SEEN_FILE}: {e}"))?;
        let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        record_shared(&env, &stashed)?;
    }
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    crate::ledger::record(&env, &approved)?;
    // A fetch from a remote brings fetched commits; receive-pack, tips a
    // pushing side's pre-push step checked.
    // The stash checks first: their refusal names the stash.
    if !moves.is_empty() {
        refuse_stash_copies(real, &moves)?;
    }
    if !fetched {
        let verify = crate::ledger::env_is(crate::ledger::VERIFY_ENV);
        // A tip a pre-push step let go is checked too, by the hooks the
        // step runs on each commit it brings (the pushing repository's
        // history is not the ledger's): anything with git's group, a
        // program git started among them, can record a tip as sent
        // (a46g).
        let (sent_moves, moves): (Vec<_>, Vec<_>) =
            moves.into_iter().partition(|(_, new, _)| vouched(new));
        let (sent_tracking, tracking): (Vec<_>, Vec<_>) =
            tracking.into_iter().partition(|(_, new, _)| vouched(new));
        // A sequencer's commits (rebase, cherry-pick, revert, am, pull)
        // are each checked by the hooks the step runs, even one whose
        // message is the one commit-msg passed: a program the call
        // started (a sequence editor's daemon) can have commit-msg pass
        // a message of its own for the call, and a pick of MARKER
        // carrying that message would match it (a46g).
        let approved: &[Vec<u8>] = if verify { &[] } else { &approved };
        crate::ledger::check(real, &tracking, approved, false)?;
        crate::ledger::check(real, &moves, approved, verify)?;
        crate::ledger::check(real, &sent_tracking, approved, true)?;
        crate::ledger::check(real, &sent_moves, approved, true)?;
    }
    Ok(())
}

/// Is `blob` in some local branch's history? Asked only for a blob a stash
/// brought in; a git that cannot answer says no.
fn on_a_branch(real: &Git, blob: &[u8]) -> bool {
    let mut find = OsString::from("--find-object=");
    find.push(OsStr::from_bytes(blob));
    git(
        real,
        &[
            OsStr::new("log"),
            OsStr::new("--branches"),
            &find,
            OsStr::new("-1"),
            OsStr::new("--format=%H"),
            OsStr::new("--encoding=UTF-8"),
            OsStr::new("--"),
        ],
    )
    .is_some_and(|o| o.status.success() && !o.stdout.trim_ascii().is_empty())
}

/// Is the raw line `change` (one that brings in no blob) a change some
/// local branch's history made too (a rebase of one's own commits)? A
/// quoted path, or a git that cannot answer: no.
fn change_on_a_branch(real: &Git, change: &[u8]) -> bool {
    let Some(tab) = change.iter().position(|b| *b == b'\t') else {
        return false;
    };
    let path = &change[tab + 1..];
    if path.first() == Some(&b'"') || path.is_empty() {
        return false;
    }
    let mut spec = OsString::from(":(literal)");
    spec.push(OsStr::from_bytes(path));
    git(
        real,
        &[
            OsStr::new("log"),
            OsStr::new("--branches"),
            OsStr::new("--raw"),
            OsStr::new("-r"),
            OsStr::new("--no-abbrev"),
            OsStr::new("--no-renames"),
            OsStr::new("--ignore-submodules=none"),
            OsStr::new("--diff-merges=first-parent"),
            OsStr::new("--root"),
            OsStr::new("--format="),
            OsStr::new("--"),
            &spec,
        ],
    )
    .is_some_and(|o| o.status.success() && o.stdout.split(|b| *b == b'\n').any(|l| l == change))
}

/// The common dir: the guard's variable, else git's answer.
/// The common dir of the repository git runs this hook in, asked of git:
/// `$SBX_GUARD_COMMON_DIR` is the one the guard looked at, which a swapped
/// `GIT_DIR` symlink or `.git` can make another than git's.
fn common_dir(real: &Git) -> Option<PathBuf> {
    // One answer per step: each question after the first reads the
    // repository it named.
    static COMMON: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    COMMON
        .get_or_init(|| {
            let asked = PREFETCHED
                .lock()
                .ok()
                .and_then(|mut p| p.take())
                .or_else(|| start_common_dir(real));
            finish(asked)
                .filter(|o| o.status.success())
                .map(|o| PathBuf::from(OsStr::from_bytes(o.stdout.trim_ascii_end())))
        })
        .clone()
}

/// [`common_dir`]'s question, asked ahead by [`prefetch_common_dir`].
static PREFETCHED: std::sync::Mutex<Option<std::process::Child>> = std::sync::Mutex::new(None);

fn start_common_dir(real: &Git) -> Option<std::process::Child> {
    git_start(
        real,
        &[OsStr::new("rev-parse"), OsStr::new("--git-common-dir")],
    )
}

/// Start [`common_dir`]'s question now, to run beside the push's
/// ancestry questions.
fn prefetch_common_dir(real: &Git) {
    if let Ok(mut p) = PREFETCHED.lock() {
        if p.is_none() {
            *p = start_common_dir(real);
        }
    }
}

/// pre-push, with `block_no_verify`: the commits a push sends may not be a
/// stash's either (`git push origin 'stash@{0}^2:refs/heads/x'` is a plain
/// new branch or fast-forward to the first check).
pub fn check_push_commits(real: &Git, stdin: &[u8]) -> Result<(), String> {
    let moves = push_moves(stdin);
    if moves.is_empty() {
        return Ok(());
    }
    refuse_stash_copies(real, &moves)?;
    // `(remote oid, local oid, ref)`: the ledger's `(old, new, ref)`.
    crate::ledger::check(real, &moves, &[], false)?;
    // A push into a repository of the sandbox: its receive-pack step
    // admits these tips (ledger.rs RECEIVE_ENV).
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let tips: Vec<&[u8]> = moves.iter().map(|(_, new, _)| *new).collect();
    crate::ledger::vouch(&env, &tips)
}

/// Every ref a push sends must lead to a commit, through any annotated
/// tags: a ref on a blob or a tree (`git tag t $(git hash-object -w f)`)
/// sends content no commit carried, which no hook saw and the commit
/// checks never read (issue 46, route 8). A tag's target commit is then
/// checked like any commit the push sends ([`check_push_commits`] walks
/// from the tag). One question for all refs: `rev-parse` fails when any
/// does not peel to a commit (or is missing: refused too).
fn check_push_objects(real: &Git, moves: &[(&[u8], &[u8], &[u8])]) -> Result<(), String> {
    if moves.is_empty() {
        return Ok(());
    }
    let peeled: Vec<Vec<u8>> = moves
        .iter()
        .map(|(_, new, _)| [*new, b"^{commit}".as_slice()].concat())
        .collect();
    let mut args: Vec<&OsStr> = vec![OsStr::new("rev-parse"), OsStr::new("--quiet")];
    args.extend(peeled.iter().map(|p| OsStr::from_bytes(p)));
    args.push(OsStr::new("--"));
    if git(real, &args).is_some_and(|o| o.status.success()) {
        return Ok(());
    }
    let names: Vec<_> = moves
        .iter()
        .map(|(_, _, r)| String::from_utf8_lossy(r).into_owned())
        .collect();
    Err(format!(
        "the push sends a ref that points at a blob or a tree, not a commit ({}): no hook saw that content; set `push-non-commits = true` under [git] in .agent-sandbox/config.toml to allow it",
        names.join(", ")
    ))
}

/// The updates of a pre-push input that send commits, as
/// `(remote oid, local oid, remote ref)`.
fn push_moves(stdin: &[u8]) -> Vec<(&[u8], &[u8], &[u8])> {
    let mut moves = Vec::new();
    for line in stdin.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let f: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
        if let [_lref, loid, rref, roid] = f[..] {
            if !is_zero(loid) {
                moves.push((roid, loid, rref));
            }
        }
    }
    moves
}

/// [`start_shapes`] asked ahead, with the new ids it was asked for.
type Shapes = (Vec<Vec<u8>>, std::process::Child);
static SHAPES: std::sync::Mutex<Option<Shapes>> = std::sync::Mutex::new(None);

fn new_ids(moves: &[(&[u8], &[u8], &[u8])]) -> Vec<Vec<u8>> {
    moves.iter().map(|(_, new, _)| new.to_vec()).collect()
}

/// Start [`start_shapes`] of `moves` now, beside the push's other questions.
fn prefetch_shapes(real: &Git, moves: &[(&[u8], &[u8], &[u8])]) {
    if let (Ok(mut p), Some(child)) = (SHAPES.lock(), start_shapes(real, moves)) {
        *p = Some((new_ids(moves), child));
    }
}

/// The shapes asked ahead for exactly these moves, or asked now.
fn shapes_of(real: &Git, moves: &[(&[u8], &[u8], &[u8])]) -> Option<std::process::Child> {
    let ahead = SHAPES.lock().ok().and_then(|mut p| p.take());
    match ahead {
        Some((ids, child)) if ids == new_ids(moves) => Some(child),
        _ => start_shapes(real, moves),
    }
}

/// `(old, new, name)`: refuse when a `new` brings in, beyond the branches
/// and `old`, a stash commit or a commit with a stash's tree.
/// With no stash in the repository the step reads, git's new commits must
/// still be there and none may be shaped as `git stash` makes them (a
/// second parent titled "index on ..."): the repository may not be git's
/// (swapped in by path while git ran), and its "no stash" then says
/// nothing about the commits git is moving a branch onto.
fn start_shapes(real: &Git, moves: &[(&[u8], &[u8], &[u8])]) -> Option<std::process::Child> {
    let mut args: Vec<&OsStr> = vec![
        OsStr::new("log"),
        OsStr::new("--no-walk"),
        OsStr::new("--format=%P%x09%s"),
        OsStr::new("--encoding=UTF-8"),
    ];
    args.extend(moves.iter().map(|(_, new, _)| OsStr::from_bytes(new)));
    args.push(OsStr::new("--"));
    git_start(real, &args)
}

/// `shapes`: [`start_shapes`] of the same moves.
fn no_stash_shapes(real: &Git, shapes: Option<std::process::Child>) -> Result<(), String> {
    let Some(out) = finish(shapes).filter(|o| o.status.success()) else {
        return Err(
            "the commits the update adds are not in the repository the check reads (one swapped in while git ran?)"
                .into(),
        );
    };
    // A stash's index or untracked commit itself (`reset --hard
    // stash^2`): one parent or none, titled as git stash titles them.
    let lines = || {
        out.stdout
            .split(|b| *b == b'\n')
            .filter_map(|l| l.iter().position(|b| *b == b'\t').map(|t| l.split_at(t)))
    };
    if lines().any(|(_, s)| {
        s[1..].starts_with(b"index on ") || s[1..].starts_with(b"untracked files on ")
    }) {
        return Err("the update moves a branch onto a stash's index or untracked commit".into());
    }
    let second: Vec<&OsStr> = lines()
        .filter_map(|(p, _)| p.split(|b| *b == b' ').nth(1))
        .filter(|p| !p.is_empty())
        .map(OsStr::from_bytes)
        .collect();
    if second.is_empty() {
        return Ok(());
    }
    let mut args = vec![
        OsStr::new("log"),
        OsStr::new("--no-walk"),
        OsStr::new("--format=%s"),
        OsStr::new("--encoding=UTF-8"),
    ];
    args.extend(second);
    args.push(OsStr::new("--"));
    let Some(out) = git(real, &args).filter(|o| o.status.success()) else {
        return Err("cannot read the parents of the commits the update adds".into());
    };
    if out
        .stdout
        .split(|b| *b == b'\n')
        .any(|l| l.starts_with(b"index on "))
    {
        return Err("the update moves a branch onto a stash commit".into());
    }
    Ok(())
}

fn refuse_stash_copies(real: &Git, moves: &[(&[u8], &[u8], &[u8])]) -> Result<(), String> {
    // No stash, nothing that skipped pre-commit this way: the common case
    // costs a few stats, and the question it then asks git is asked now,
    // beside git's answer for the common dir.
    let shapes = shapes_of(real, moves);
    let common = common_dir(real);
    // Unknown (git could not run, e.g. the broker is down): refuse.
    let Some(common) = common else {
        return Err("cannot find the repository's common directory".into());
    };
    // Or one made in another repository of the sandbox, which the
    // workspace may have fetched (a stash or its index commit).
    let has_stash = stash_exists(&common) || {
        let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        shared_stash_seen(&env)
    };
    if !has_stash {
        return no_stash_shapes(real, shapes);
    }
    // Not needed: a process of the broker's that ends on its own.
    drop(shapes);
    // Listed lazily: most updates add no commit that is not on a branch.
    let mut stash: Option<StashSets> = None;
    // `git commit`: pre-commit saw the new commit's tree; what it adds
    // beyond that comes in through its parents (a `MERGE_HEAD` the agent
    // wrote), so those are listed instead: a commit of content a dropped
    // stash once held still passes. A lone parent that is `old` lists
    // nothing: sbx-git-client answers that case without this (commit.rs).
    let committed = std::env::var_os(COMMIT_ENV).is_some_and(|v| v == "1");
    // New commits with a blob no stash holds, for the line check.
    let mut merged: Vec<Vec<u8>> = Vec::new();
    for &(old, new, name) in moves {
        let mut parents = new.to_vec();
        parents.extend_from_slice(b"^@");
        // Each new commit with the blobs it brings in (against its first
        // parent): a stash's change cherry-picked, reverted or rebased onto
        // a moved branch has another tree, but still its file contents.
        let mut args: Vec<&OsStr> = vec![
            OsStr::new("log"),
            OsStr::new("--format=%H %T"),
            OsStr::new("--encoding=UTF-8"),
            OsStr::new("--raw"),
            OsStr::new("-r"),
            OsStr::new("--no-abbrev"),
            OsStr::new("--no-renames"),
            OsStr::new("--ignore-submodules=none"),
            OsStr::new("--root"),
            OsStr::from_bytes(if committed { &parents } else { new }),
            OsStr::new("--not"),
            // Not `--tags`: a tag is made with no check (`git tag t
            // stash@{0}`), and one on a stash commit hid it here.
            OsStr::new("--branches"),
        ];
        if !is_zero(old) {
            args.push(OsStr::from_bytes(old));
        }
        args.push(OsStr::new("--"));
        // A git that cannot run (a broker that is down) refuses the move.
        let Some(out) = git(real, &args).filter(|o| o.status.success()) else {
            return Err("cannot list the commits the update adds".into());
        };
        let mut current: &[u8] = b"";
        for line in out.stdout.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let set = stash.get_or_insert_with(|| stash_commits(real));
            let copied = if let Some(blob) = raw_new_blob(line) {
                // Content already on a branch came there through a commit
                // or a step like this one (a rebase of one's own commits).
                let stashed = set.blobs.iter().any(|s| s == blob);
                if !stashed && merged.last().is_none_or(|m| m != current) {
                    // A blob no stash holds: the line check below.
                    merged.push(current.to_vec());
                }
                stashed && !on_a_branch(real, blob)
            } else if line.starts_with(b":") {
                // No blob (its commit line was read before: `current`).
                set.changes.iter().any(|c| c == line) && !change_on_a_branch(real, line)
            } else {
                let mut w = line.split(|b| *b == b' ');
                let (Some(c), Some(t)) = (w.next(), w.next()) else {
                    continue;
                };
                current = c;
                set.commits.iter().any(|s| s == c) || set.trees.iter().any(|s| s == t)
            };
            if copied {
                let c = current;
                return Err(format!(
                    "{} would point at {}, a stash commit (or a notes commit, or a copy of one's change) that no pre-commit hook saw; `git stash pop` (or drop) and commit instead",
                    String::from_utf8_lossy(name),
                    String::from_utf8_lossy(&c[..c.len().min(12)])
                ));
            }
        }
    }
    match &stash {
        Some(set) if !merged.is_empty() => crate::copied::check(real, &set.commits, &merged),
        _ => Ok(()),
    }
}

/// A regular file someone may execute (a hook git would run).
pub(crate) fn executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The broker that starts the repository's hooks, where one runs git.
/// Not for root (no agent process can trace root's hooks), nor for a step
/// without the image's git group: one the agent ran itself, whose hook is
/// the agent's to trace anyway (and the broker would refuse it).
pub(crate) fn hook_broker(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    if nix::unistd::geteuid().is_root() {
        return None;
    }
    if let Some(g) = crate::broker::group_gid(crate::broker::DEFAULT_GROUP) {
        if g != nix::unistd::getegid().as_raw() {
            return None;
        }
    }
    crate::broker::socket_path(env)
}

/// Hook `name` in `dir`, started by the broker (see
/// [`crate::broker::run_hook`]); `input` is written to its stdin. A broker
/// that cannot run it refuses: git sees a failed hook.
fn via_broker(
    socket: &Path,
    dir: &Path,
    name: &str,
    args: &[OsString],
    input: Option<&[u8]>,
) -> ExitCode {
    let run = || -> Result<ExitCode, String> {
        let d = sbx_sys::privsep::open_path(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let stdin = match input {
            Some(b) => Some(input_fd(b).map_err(|e| format!("the hook's input: {e}"))?),
            None => None,
        };
        crate::broker::run_hook(socket, std::os::fd::AsFd::as_fd(&d), name, args, stdin)
    };
    run().unwrap_or_else(|msg| {
        eprintln!(
            "sbx-git-guard: {name}: git broker {}: {msg}; refusing",
            socket.display()
        );
        ExitCode::from(1)
    })
}

/// `input` as a readable fd at offset 0 (a memory file: no thread needed to
/// feed a pipe while the broker runs the hook).
fn input_fd(input: &[u8]) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::io::Seek as _;
    let fd =
        nix::sys::memfd::memfd_create(c"sbx-hook-input", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)?;
    let mut f = std::fs::File::from(fd);
    f.write_all(input)?;
    f.rewind()?;
    Ok(f.into())
}

/// Run as hook `name` (argv[0]'s basename) with git's hook arguments.
pub fn run(name: &str, args: Vec<OsString>) -> ExitCode {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let Some(trusted) = std::env::var_os(TRUSTED_ENV).filter(|t| !t.is_empty()) else {
        eprintln!(
            "sbx-git-guard: {name}: run outside the guard ({TRUSTED_ENV} is unset); refusing"
        );
        return ExitCode::from(1);
    };
    let target = PathBuf::from(trusted).join(name);
    let checked = std::env::var_os(HOOKS_ONLY_ENV).is_none()
        && (name == "pre-push"
            || (name == "reference-transaction" && args.first().is_some_and(|a| a == "prepared")));
    let broker = hook_broker(&env);
    if !checked {
        // `git am` runs neither pre-commit nor commit-msg: its own hooks
        // run them after themselves here, as git's sample hooks do.
        // Nor does an automatic merge run pre-commit (only pre-merge-commit),
        // though its tree is new content: run it after, as git's sample
        // pre-merge-commit does.
        let then = CHAINED.iter().find(|(s, _)| *s == name).map(|(_, t)| *t);
        if let Some(then) = then {
            let trusted = target.parent().unwrap_or(Path::new("/"));
            for hook in [name, then] {
                let p = trusted.join(hook);
                if !executable(&p) {
                    continue;
                }
                if let Some(sock) = &broker {
                    let code = via_broker(sock, trusted, hook, &args, None);
                    if code != ExitCode::SUCCESS {
                        return code;
                    }
                    if hook == "pre-commit" {
                        crate::msg::mark_pre_commit(&env);
                    }
                    continue;
                }
                match Command::new(&p).args(&args).status() {
                    Ok(st) if st.success() => {}
                    Ok(st) => {
                        return ExitCode::from(
                            st.code().and_then(|c| u8::try_from(c).ok()).unwrap_or(1),
                        );
                    }
                    Err(e) => {
                        eprintln!("sbx-git-guard: cannot run {}: {e}", p.display());
                        return ExitCode::from(126);
                    }
                }
            }
            return ExitCode::SUCCESS;
        }
        if !executable(&target) {
            return ExitCode::SUCCESS;
        }
        if let Some(sock) = &broker {
            let dir = target.parent().unwrap_or(Path::new("/"));
            // `git commit`'s pre-commit on a private view (ledger.rs).
            let committing = std::env::var_os(COMMIT_ENV).is_some_and(|v| v == "1");
            if let (true, "pre-commit", Some(msg_dir), Some(real)) = (
                committing,
                name,
                crate::msg::private_dir(&env),
                Git::for_env(&env),
            ) {
                return match crate::ledger::pre_commit_on_view(&real, sock, dir, &args, &msg_dir) {
                    Ok(code) => ExitCode::from(code),
                    Err(e) => {
                        eprintln!("sbx-git-guard: pre-commit: {e}; refusing");
                        ExitCode::from(1)
                    }
                };
            }
            return via_broker(sock, dir, name, &args, None);
        }
        let mut argv = vec![target.clone().into_os_string()];
        argv.extend(args);
        let err = sbx_sys::exec(&target, &argv, &env);
        eprintln!("sbx-git-guard: cannot run {}: {err}", target.display());
        return ExitCode::from(126);
    }
    let mut input = Vec::new();
    if std::io::stdin().read_to_end(&mut input).is_err() {
        eprintln!("sbx-git-guard: {name}: cannot read git's input; refusing");
        return ExitCode::from(1);
    }
    let settings = crate::settings_for(None).unwrap_or_default();
    let real = Git::for_env(&env);
    let verdict = match &real {
        None => Err((R::Internal, "the real git was not found".to_owned())),
        Some(real) if name == "pre-push" => {
            // Asked by check_push_commits for any update that sends
            // commits; asked now, they run beside check_push's questions.
            let moves = push_moves(&input);
            if settings.block_no_verify && !moves.is_empty() {
                prefetch_common_dir(real);
                prefetch_shapes(real, &moves);
            }
            let force = if settings.block_force_push {
                check_push(real, &input).map_err(|e| (R::ForcePush, e))
            } else {
                Ok(())
            };
            force
                .and_then(|()| {
                    if settings.push_non_commits {
                        Ok(())
                    } else {
                        check_push_objects(real, &moves).map_err(|e| (R::UnverifiedCommit, e))
                    }
                })
                .and_then(|()| {
                    if settings.block_no_verify {
                        check_push_commits(real, &input).map_err(|e| (R::UnverifiedCommit, e))
                    } else {
                        Ok(())
                    }
                })
        }
        Some(real) => {
            if settings.block_no_verify {
                check_transaction(real, &input).map_err(|e| (R::UnverifiedCommit, e))
            } else {
                Ok(())
            }
        }
    };
    if let Err((rule, why)) = verdict {
        let b = crate::policy::Block {
            rule: rule.name(),
            reason: why,
        };
        let mut words = vec![OsString::from(name)];
        words.extend(args.iter().cloned());
        crate::record_block(&words, &b);
        eprintln!("sbx-git-guard: {}", b.message());
        return ExitCode::from(1);
    }
    if !executable(&target) {
        return ExitCode::SUCCESS;
    }
    if let Some(sock) = &broker {
        let dir = target.parent().unwrap_or(Path::new("/"));
        return via_broker(sock, dir, name, &args, Some(&input));
    }
    let child = Command::new(&target)
        .args(&args)
        .stdin(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sbx-git-guard: cannot run {}: {e}", target.display());
            return ExitCode::from(126);
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that does not read its input closes the pipe: not an error.
        let _ = stdin.write_all(&input);
    }
    match child.wait() {
        Ok(st) => match st.code() {
            Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
            None => ExitCode::from(1),
        },
        Err(_) => ExitCode::from(1),
    }
}

#[cfg(test)]
mod tests {
    use super::{bit, make_set, names, needed, raw_new_blob};

    /// A routed call's steps: the hooks the directory has (executable
    /// files only), the chained step of each hook that is run by one, and
    /// the two checks when the call is checked.
    #[test]
    fn a_set_holds_the_present_hooks_their_chained_steps_and_the_checks() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempfile::tempdir().unwrap();
        let add = |h: &str, mode: u32| {
            std::fs::write(d.path().join(h), "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(d.path().join(h), std::fs::Permissions::from_mode(mode))
                .unwrap();
        };
        let set = |checked| names(needed(d.path(), checked)).collect::<Vec<_>>();
        assert!(set(false).is_empty());
        assert_eq!(set(true), ["pre-push", "reference-transaction"]);
        add("post-commit", 0o644);
        std::fs::create_dir(d.path().join("post-merge")).unwrap();
        assert!(set(false).is_empty(), "not executable files");
        add("pre-commit", 0o755);
        assert_eq!(
            set(false),
            ["pre-applypatch", "pre-commit", "pre-merge-commit"]
        );
        add("commit-msg", 0o700);
        add("post-checkout", 0o755);
        assert_eq!(
            set(true),
            [
                "applypatch-msg",
                "pre-applypatch",
                "pre-commit",
                "pre-merge-commit",
                "commit-msg",
                "post-checkout",
                "pre-push",
                "reference-transaction"
            ]
        );
        assert_eq!(bit("no-such-hook"), 0);
        for bad in [0, 1 << 21, u32::MAX] {
            assert!(make_set(bad).is_err(), "{bad:#x}");
        }
    }

    /// Added and modified blobs count; deletions and the empty blob do not.
    #[test]
    fn raw_lines_give_the_blobs_a_commit_brings_in() {
        let z = "0".repeat(40);
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let line = |s: &str| format!(":100644 100644 {a} {b} {s}\tpath with space");
        assert_eq!(raw_new_blob(line("M").as_bytes()), Some(b.as_bytes()));
        assert_eq!(
            raw_new_blob(format!(":000000 100644 {z} {b} A\tnew").as_bytes()),
            Some(b.as_bytes())
        );
        assert_eq!(
            raw_new_blob(format!(":100644 000000 {a} {z} D\tgone").as_bytes()),
            None
        );
        let empty = format!(":000000 100644 {z} e69de29bb2d1d6434b8b29ae775ad8c2e48c5391 A\te");
        assert_eq!(raw_new_blob(empty.as_bytes()), None);
        assert_eq!(raw_new_blob(format!("{a} {b}").as_bytes()), None);
    }
}
