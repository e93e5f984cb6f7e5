//! The ledger of approved commits (issue 46). Refusing the bypasses one
//! recognises never ends; instead a branch may move (and a push may send)
//! only commits some check approved:
//!
//! - commits in the ledger: each one a `git commit`, `merge` or `am` made
//!   on the call's private index (pre-commit ran on the index git
//!   committed from) whose message is the one commit-msg passed. The
//!   reference-transaction step adds them through the broker, which
//!   appends as root to `/run/sbx-git/ledger` (kept in the git record
//!   volume) and only for a call that has a live private index;
//! - commits already on a local branch or a remote-tracking ref (the
//!   repository as it was, and what fetches brought: both move only
//!   through this step, or through a fetch);
//! - for the commands that make commits without running commit-msg on
//!   each (rebase, cherry-pick, revert, am, pull: their continuations and
//!   autosquash included), commits the step itself ran pre-commit and
//!   commit-msg on first, on the commit's own tree and message, in a
//!   private view ([`verify`]).
//!
//! Anything else (a commit made by `commit-tree`, `hash-object`, another
//! program, a stash or notes commit) is refused with one line. The check is
//! in force only under a broker (the sandbox) and where the repository has
//! pre-commit or commit-msg: without either there is nothing to skip.

use std::ffi::{OsStr, OsString};
use std::io::Read as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use crate::hooks::{Git, TRUSTED_ENV, executable, git_output};

/// Set by the guard for the commands whose commits no commit-msg saw one
/// by one (`rebase`, `cherry-pick`, `revert`, `am`, `pull`): their step
/// may run the hooks on such a commit itself and admit it. Removed from
/// the agent's environment like the other `SBX_GUARD_*` variables.
pub const VERIFY_ENV: &str = "SBX_GUARD_VERIFY";

/// Set by the guard for `clone`, and for `fetch` and `pull` from a remote
/// that is not a local path (which could name any local commit by id):
/// the commits they bring are fetched, and refs may move onto them.
pub const FETCH_ENV: &str = "SBX_GUARD_FETCH";

/// Set by the guard for `receive-pack` (a push into a repository of the
/// sandbox): a branch may move onto a tip the pushing side's pre-push
/// step let go ([`sent`]), else only as the repository's own moves do.
/// Run by hand with a request the agent wrote, no pre-push step saw what
/// it lands (a46x).
pub const RECEIVE_ENV: &str = "SBX_GUARD_RECEIVE";

/// Is `name` set to 1 (by the guard, for this call)?
pub(crate) fn env_is(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| v == "1")
}

/// The repository's trusted hooks directory, where the guard set one.
fn trusted() -> Option<PathBuf> {
    std::env::var_os(TRUSTED_ENV)
        .filter(|t| !t.is_empty())
        .map(PathBuf::from)
}

/// The broker's socket, where the ledger is in force: a broker runs git
/// (the step has its group) and the repository has a hook a commit could
/// skip.
fn in_force(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    let sock = crate::hooks::hook_broker(env)?;
    let t = trusted()?;
    (executable(&t.join("pre-commit")) || executable(&t.join("commit-msg"))).then_some(sock)
}

/// Add the commits this call approved (`msg::check_commit`) to the ledger.
pub fn record(env: &[(OsString, OsString)], ids: &[Vec<u8>]) -> Result<(), String> {
    if ids.is_empty() {
        return Ok(());
    }
    let Some(sock) = in_force(env) else {
        return Ok(());
    };
    let Some(private) = env
        .iter()
        .find(|(k, _)| k == crate::index::PRIVATE_VAR)
        .map(|(_, v)| v.clone())
    else {
        return Ok(());
    };
    let lines = ids.join(&b'\n');
    crate::broker::add_to_ledger(&sock, &lines, &private)
        .map_err(|e| format!("cannot add the commit to the ledger: {e}"))
}

/// pre-push, after its checks passed: the tips it sends, for the
/// receiving side's step ([`RECEIVE_ENV`]).
pub fn vouch(env: &[(OsString, OsString)], tips: &[&[u8]]) -> Result<(), String> {
    let Some(sock) = in_force(env) else {
        return Ok(());
    };
    if tips.is_empty() {
        return Ok(());
    }
    crate::broker::add_sent(&sock, &tips.join(&b'\n'))
}

/// The tips pre-push steps let go ([`vouch`]).
pub fn sent(env: &[(OsString, OsString)]) -> std::collections::HashSet<Vec<u8>> {
    ids_in(crate::broker::sent_path(env))
}

/// The ledger's ids, one a line (empty when there is none yet).
fn ledger_ids(env: &[(OsString, OsString)]) -> std::collections::HashSet<Vec<u8>> {
    ids_in(crate::broker::ledger_path(env))
}

/// The ids in a file the broker appends to, one a line.
fn ids_in(path: Option<PathBuf>) -> std::collections::HashSet<Vec<u8>> {
    let text = path.and_then(|p| std::fs::read(p).ok()).unwrap_or_default();
    text.split(|b| *b == b'\n')
        .filter(|l| matches!(l.len(), 40 | 64))
        .map(<[u8]>::to_vec)
        .collect()
}

fn is_zero(oid: &[u8]) -> bool {
    !oid.is_empty() && oid.iter().all(|b| *b == b'0')
}

/// `(old, new, ref)`: refuse when `new` brings in, beyond the local
/// branches, the remote-tracking refs and `old`, a commit that is neither
/// in `approved` (this call's) nor passed by the hooks the step runs on it
/// now. The step runs them on a commit in the ledger (or, with
/// `may_verify`, on any commit): an entry there only says a commit may be
/// checked, never that it passed. Anything with git's group can ask the
/// broker for one, and a program git starts during a commit (an editor, a
/// credential helper, a pager) has that group and the call's private
/// index: an editor asked for a commit of MARKER no hook saw, and a
/// branch then moved onto it (a46g).
pub fn check(
    real: &Git,
    moves: &[(&[u8], &[u8], &[u8])],
    approved: &[Vec<u8>],
    may_verify: bool,
) -> Result<(), String> {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let Some(sock) = in_force(&env) else {
        return Ok(());
    };
    let mut ledger = None;
    // Commits this walk let through: a verified commit's parent must be
    // one of them or already known (`known_parent`).
    let mut admitted: Vec<Vec<u8>> = Vec::new();
    for &(old, new, name) in moves {
        if is_zero(new) || new.starts_with(b"ref:") || old == new {
            continue;
        }
        let args = walk_args(&["rev-list", "--reverse", "--ignore-missing"], new, old);
        let Some(out) = git_output(real, &args) else {
            return Err("cannot list the commits the update adds".into());
        };
        for c in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            if approved.iter().any(|a| a == c) {
                admitted.push(c.to_vec());
                continue;
            }
            let short = String::from_utf8_lossy(&c[..c.len().min(12)]).into_owned();
            let what = String::from_utf8_lossy(name);
            if !may_verify && !ledger.get_or_insert_with(|| ledger_ids(&env)).contains(c) {
                return Err(format!(
                    "{what} would point at {short}, a commit no pre-commit and commit-msg passed (made by plumbing, another program, a stash or notes); commit it with `git commit` (or cherry-pick it) instead"
                ));
            }
            // Not the ledger's word for the parent either: an entry
            // anyone with git's group asked for would hide a parent of
            // MARKER from the hooks' comparison (`.git/shallow`).
            let known = |p: &[u8]| {
                admitted.iter().any(|a| a == p)
                    || approved.iter().any(|a| a == p)
                    || known_parent(real, p, old)
            };
            verify(real, &sock, c, &known)
                .map_err(|why| format!("{what} would point at {short}: {why}"))?;
            admitted.push(c.to_vec());
        }
    }
    Ok(())
}

/// `git <first> NEW --not --branches --remotes [OLD] --`: the commits
/// `new` brings in beyond every local branch, every remote-tracking ref
/// and `old` (the ledger's walk, and [`known_parent`]'s question).
fn walk_args<'a>(first: &[&'a str], new: &'a [u8], old: &'a [u8]) -> Vec<&'a OsStr> {
    let mut args: Vec<&OsStr> = first.iter().map(|a| OsStr::new(*a)).collect();
    args.extend([
        OsStr::from_bytes(new),
        OsStr::new("--not"),
        OsStr::new("--branches"),
        OsStr::new("--remotes"),
    ]);
    if !is_zero(old) {
        args.push(OsStr::from_bytes(old));
    }
    args.push(OsStr::new("--"));
    args
}

/// Is `p` on a local branch, a remote-tracking ref or `old`'s history?
/// Asked for the parent a verified commit's hooks compared with: the walk
/// that listed the commit stops where `.git/shallow` (the agent's file)
/// says, so a parent no hook saw was never listed (a46x).
fn known_parent(real: &Git, p: &[u8], old: &[u8]) -> bool {
    let args = walk_args(&["rev-list", "-1"], p, old);
    git_output(real, &args).is_some_and(|o| o.trim_ascii().is_empty())
}

/// A commit's parents and message, from its raw object.
pub(crate) fn parse_commit(raw: &[u8]) -> (Vec<&[u8]>, &[u8]) {
    let end = raw
        .windows(2)
        .position(|w| w == b"\n\n")
        .unwrap_or(raw.len());
    let parents = raw[..end]
        .split(|b| *b == b'\n')
        .filter_map(|l| l.strip_prefix(b"parent "))
        .collect();
    let msg = raw.get(end + 2..).unwrap_or_default();
    (parents, msg)
}

/// Where the private view is made: the broker's private-index directory
/// (root's, 01730: git's group may make an entry there, the agent's own
/// processes cannot enter it), else the temporary directory.
pub(crate) fn view_base(sock: &Path) -> PathBuf {
    let root = sock.with_file_name(crate::index::ROOT_NAME);
    if root.is_dir() {
        root
    } else {
        std::env::temp_dir()
    }
}

/// A fresh directory under `base` with a name nobody can guess (drawn
/// before the call, in a broker's runner: off the call's path).
fn make_view(base: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt as _;
    let mut r = [0u8; 16];
    match crate::index::take_view_name() {
        Some(drawn) => r = drawn,
        None => std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut r))
            .map_err(|e| format!("no random name for the private view: {e}"))?,
    }
    let name: String = r.iter().map(|b| format!("{b:02x}")).collect();
    let dir = base.join(format!("{name}.view"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("cannot make the private view {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Removes the view when the check ends, however it ends.
struct View(PathBuf);

impl View {
    /// The directory, left for another process to remove.
    fn keep(self) -> PathBuf {
        let mut me = std::mem::ManuallyDrop::new(self);
        std::mem::take(&mut me.0)
    }
}

impl Drop for View {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run pre-commit and commit-msg on commit `c` itself: a private git
/// directory (HEAD detached at `c`'s parent, the repository's objects and
/// refs through `commondir`), an index and a work tree holding `c`'s tree,
/// and `c`'s message in a file. The hooks run through the broker as for
/// git; a failure is the refusal's reason.
fn verify(real: &Git, sock: &Path, c: &[u8], known: &dyn Fn(&[u8]) -> bool) -> Result<(), String> {
    let trusted = trusted().ok_or("no trusted hooks directory")?;
    let raw = git_output(
        real,
        &[
            OsStr::new("cat-file"),
            OsStr::new("commit"),
            OsStr::from_bytes(c),
        ],
    )
    .ok_or("cannot read the commit")?;
    let (parents, message) = parse_commit(&raw);
    if parents.len() > 1 {
        return Err(
            "a merge commit no commit-msg passed; merge with `git merge` instead".to_owned(),
        );
    }
    if let Some(p) = parents.first().filter(|p| !known(p)) {
        let short = String::from_utf8_lossy(&p[..p.len().min(12)]);
        return Err(format!(
            "its parent {short} is a commit no pre-commit and commit-msg passed (the hooks compared the commit with it)"
        ));
    }
    // The refs and objects, not the repository itself (`commondir`): its
    // configuration, a scratch repository's the agent's, goes through
    // [`crate::keys::view_config`] (a46).
    let snap = snapshot_from_git(real)?;
    let config = std::fs::read(snap.common.join("config")).unwrap_or_default();
    let config = crate::keys::view_config(&config)?;
    let view = View(make_view(&view_base(sock))?);
    let g = view.0.join("g");
    let w = view.0.join("w");
    let io = |p: &Path, e: std::io::Error| format!("the private view {}: {e}", p.display());
    std::fs::create_dir(&g).map_err(|e| io(&g, e))?;
    std::fs::create_dir(&w).map_err(|e| io(&w, e))?;
    let head = match parents.first() {
        Some(p) => [*p, b"\n"].concat(),
        // A root commit: HEAD unborn, so the hooks see every file staged.
        None => b"ref: refs/heads/sbx-ledger-unborn\n".to_vec(),
    };
    std::fs::write(g.join("HEAD"), head).map_err(|e| io(&g, e))?;
    std::fs::create_dir(g.join("refs")).map_err(|e| io(&g, e))?;
    std::fs::write(g.join("packed-refs"), &snap.refs).map_err(|e| io(&g, e))?;
    std::fs::write(g.join("config"), config).map_err(|e| io(&g, e))?;
    let index = g.join("index");
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| {
            let k = k.as_bytes();
            !(k.starts_with(b"GIT_")
                && [
                    &b"GIT_DIR"[..],
                    b"GIT_WORK_TREE",
                    b"GIT_INDEX_FILE",
                    b"GIT_PREFIX",
                    b"GIT_COMMON_DIR",
                    b"GIT_OBJECT_DIRECTORY",
                    b"GIT_ALTERNATE_OBJECT_DIRECTORIES",
                    b"GIT_REFLOG_ACTION",
                ]
                .contains(&k))
                && k != crate::index::PRIVATE_VAR.as_bytes()
        })
        .collect();
    env.push(("GIT_DIR".into(), g.clone().into()));
    env.push(("GIT_WORK_TREE".into(), w.clone().into()));
    env.push(("GIT_INDEX_FILE".into(), index.into()));
    env.push(("GIT_OBJECT_DIRECTORY".into(), snap.objects.clone().into()));
    let filled = crate::hooks::git_with_env(
        real,
        &[
            OsStr::new("read-tree"),
            OsStr::new("--reset"),
            OsStr::new("-u"),
            OsStr::from_bytes(c),
        ],
        &env,
        &w,
    );
    if !filled {
        return Err("cannot check the commit out into a private view".into());
    }
    let dir =
        sbx_sys::privsep::open_path(&trusted).map_err(|e| format!("{}: {e}", trusted.display()))?;
    let here = std::env::current_dir().ok();
    let run = |name: &str, args: &[OsString]| -> Result<(), String> {
        if !executable(&trusted.join(name)) {
            return Ok(());
        }
        std::env::set_current_dir(&w).map_err(|e| io(&w, e))?;
        let mut env = env.clone();
        if name == "commit-msg" {
            // The broker's hook process then runs commit-msg on a copy
            // it names by fd (msg.rs `run_on_copy`): the message file's
            // path on the hook's command line, which any process can
            // read, led a daemon with git's group into the view to
            // rewrite it before the hook read it (a46g).
            env.push((
                crate::index::PRIVATE_VAR.into(),
                view.0.join("verify").into(),
            ));
        }
        let code = crate::broker::run_hook_with_env(
            sock,
            std::os::fd::AsFd::as_fd(&dir),
            name,
            args,
            None,
            env,
        );
        if let Some(h) = &here {
            let _ = std::env::set_current_dir(h);
        }
        match code {
            Ok(c) if c == std::process::ExitCode::SUCCESS => Ok(()),
            Ok(_) => Err(format!(
                "its {name} hook fails on its own tree and message (run by the guard, as no hook saw the commit made); fix the commit and commit it with `git commit`"
            )),
            Err(e) => Err(format!("cannot run {name}: {e}")),
        }
    };
    run("pre-commit", &[])?;
    let msg = g.join("COMMIT_EDITMSG");
    std::fs::write(&msg, message).map_err(|e| io(&msg, e))?;
    run("commit-msg", &[msg.into_os_string()])
}

/// In the call's private directory: the commit HEAD named when the step
/// pinned it for pre-commit ([`pre_commit_on_view`]).
pub const PINNED_HEAD: &str = "pre-commit.head";

/// The view's HEAD and refs asked of git (three brokered calls), where
/// the repository is not one [`crate::viewrefs::read`] reads itself.
fn snapshot_from_git(real: &Git) -> Result<crate::viewrefs::Snapshot, String> {
    let ask = |args: &[&str]| {
        let a: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        crate::hooks::git_output_any(real, &a)
    };
    // Asked at once: the refs, and HEAD with the directories.
    let refs = crate::hooks::git_start(
        real,
        &[
            OsStr::new("for-each-ref"),
            OsStr::new("--format=%(objectname) %(refname)"),
        ],
    );
    let sym = crate::hooks::git_start(
        real,
        &[
            OsStr::new("symbolic-ref"),
            OsStr::new("-q"),
            OsStr::new("HEAD"),
        ],
    );
    let out = ask(&[
        "rev-parse",
        "--path-format=absolute",
        "--git-common-dir",
        "--git-path",
        "objects",
        "HEAD",
    ])
    .ok_or("cannot ask git where HEAD points")?;
    let sym = crate::hooks::finish(sym)
        .filter(|o| o.status.success())
        .map(|o| o.stdout)
        .unwrap_or_default();
    let refs = crate::hooks::finish(refs)
        .filter(|o| o.status.success())
        .map(|o| o.stdout)
        .ok_or("cannot list the repository's refs")?;
    let lines: Vec<&[u8]> = out.split(|b| *b == b'\n').collect();
    let (common, objects) = match lines[..] {
        [c, o, ..] if c.starts_with(b"/") && o.starts_with(b"/") => (c, o),
        _ => return Err("cannot find the repository's directories".into()),
    };
    let hex = |h: &[u8]| matches!(h.len(), 40 | 64) && h.iter().all(u8::is_ascii_hexdigit);
    Ok(crate::viewrefs::Snapshot {
        common: OsStr::from_bytes(common).into(),
        objects: OsStr::from_bytes(objects).into(),
        // Unborn (rev-parse stops at HEAD): a first commit.
        head: lines.get(2).copied().filter(|h| hex(h)).map(<[u8]>::to_vec),
        sym: sym.trim_ascii_end().to_vec(),
        refs,
    })
}

/// `git commit`'s pre-commit, through the broker, on a view the agent
/// cannot change (issue 46, route 2): git read HEAD before pre-commit, and
/// the hook read `.git/HEAD` again, so HEAD pointed elsewhere for the
/// hook's few milliseconds made it see no change. The hook now runs with
/// `GIT_DIR` a private git directory (in the call's private directory,
/// root's and unguessable): HEAD names the same branch (hooks that refuse
/// commits to a branch still see it), its refs a snapshot in which that
/// branch is the commit HEAD names now, the repository's configuration,
/// the repository's object store (`GIT_OBJECT_DIRECTORY`, so what a hook
/// stages is there for git), and the index the private copy git commits
/// from. The commit's prepared step then requires git's parent to be that
/// commit ([`check_pinned`]). Returns the hook's exit code.
///
/// Run here, in a guard the step started, only where the broker's worker
/// could not read the snapshot itself ([`view_for_pre_commit`]; it starts
/// this step then, and its hook request carries [`VIEW_MADE_ENV`]).
pub fn pre_commit_on_view(
    real: &Git,
    sock: &Path,
    trusted: &Path,
    args: &[OsString],
    msg_dir: &Path,
) -> Result<u8, String> {
    let top = std::env::current_dir().map_err(|e| format!("the working directory: {e}"))?;
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let snap = crate::viewrefs::read(&top, std::env::var_os("GIT_DIR").as_deref(), &|v| {
        std::env::var_os(v).is_some()
    });
    let snap = match snap {
        Some(s) => s,
        None => snapshot_from_git(real)?,
    };
    let (view, mut env) = make_pre_commit_view(sock, &view_base(sock), &top, &snap, &env, msg_dir)?;
    env.push((VIEW_MADE_ENV.into(), "1".into()));
    let dir =
        sbx_sys::privsep::open_path(trusted).map_err(|e| format!("{}: {e}", trusted.display()))?;
    let code = crate::broker::run_hook_with_env(
        sock,
        std::os::fd::AsFd::as_fd(&dir),
        "pre-commit",
        args,
        None,
        env,
    )?;
    drop(view);
    Ok(if code == std::process::ExitCode::SUCCESS {
        0
    } else {
        1
    })
}

/// In a pre-commit hook request: the view is already made (by the step,
/// [`pre_commit_on_view`]); the broker runs the hook as asked. Anything
/// with git's group could send a request without it, or with it, as it
/// could run the hook itself: what git runs is the step.
pub const VIEW_MADE_ENV: &str = "SBX_GUARD_VIEW_MADE";

/// The broker's worker, as the peer, for `git commit`'s pre-commit
/// request from sbx-git-client: the view [`pre_commit_on_view`] makes,
/// made here, without a guard's start (~70% of what a hooked commit
/// added was starting and ending processes: bench/RESULTS.md). `base`
/// is the broker's private-index directory, `cwd` the call's. Ok(None):
/// the snapshot is git's to give ([`crate::viewrefs::read`]), so the
/// step's guard makes the view. Else the view, to remove once the hook
/// ends, and the hook's environment.
pub fn view_for_pre_commit(
    sock: &Path,
    base: &Path,
    cwd: &Path,
    env: &[(OsString, OsString)],
) -> Result<Option<(PathBuf, HookEnv)>, String> {
    let msg_dir = crate::msg::private_dir(env).ok_or("no private index named")?;
    // getenv's answer: a name's first entry.
    let var = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v);
    let Some(snap) = crate::viewrefs::read(cwd, var("GIT_DIR").map(OsString::as_os_str), &|v| {
        var(v).is_some()
    }) else {
        return Ok(None);
    };
    let (view, env) = make_pre_commit_view(sock, base, cwd, &snap, env, &msg_dir)?;
    Ok(Some((view.keep(), env)))
}

/// A hook's environment, name and value pairs.
type HookEnv = Vec<(OsString, OsString)>;

/// The view's directory and the hook's environment; the root process
/// keeps the pin (once per call).
fn make_pre_commit_view(
    sock: &Path,
    base: &Path,
    top: &Path,
    snap: &crate::viewrefs::Snapshot,
    env: &[(OsString, OsString)],
    msg_dir: &Path,
) -> Result<(View, HookEnv), String> {
    use std::os::unix::fs::DirBuilderExt as _;
    let head = snap.head.as_deref();
    let sym = snap.sym.as_slice();
    let refs = snap.refs.as_slice();
    let branch = (head.is_some() && sym.starts_with(b"refs/heads/")).then_some(sym);
    let io = |p: &Path, e: std::io::Error| format!("the private view {}: {e}", p.display());
    let zero = b"0".repeat(40);
    // Kept by the root process, once: a copy in the private directory was
    // rewritten by a clean filter's daemon that had flipped main for the
    // snapshot (a46g). Asked first, answered once the view is made (the
    // root process wakes meanwhile); the view is removed if it is not kept.
    let private = env
        .iter()
        .find(|(k, _)| k == crate::index::PRIVATE_VAR)
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let pin = crate::broker::ask_pin_from_worker(sock, &private, head.unwrap_or(&zero))?;
    match std::fs::DirBuilder::new().mode(0o700).create(msg_dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(io(msg_dir, e)),
        _ => {}
    }
    // Not under the private directory, whose name every program git
    // starts during the commit can derive (`$SBX_GUARD_PRIVATE_INDEX`): a
    // clean filter `git commit -a` ran left a daemon that rewrote the
    // view's refs while the hook ran, naming a commit already holding
    // MARKER as the branch's tip (a46g). A fresh name in the private-index
    // directory, which no process can list, removed when the hook ends.
    let view = View(make_view(base)?);
    let g = view.0.join("g");
    // No `objects`: with `GIT_OBJECT_DIRECTORY` set (the hook's is) git
    // looks for none. Each entry made here is a journal write, 0.5 ms on
    // a busy disk (bench/RESULTS.md).
    for d in [&g, &g.join("refs")] {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(d)
            .map_err(|e| io(d, e))?;
    }
    let head_line = match (branch, head) {
        (Some(b), _) => [b"ref: ", b, b"\n"].concat(),
        (None, Some(h)) => [h, b"\n"].concat(),
        (None, None) => b"ref: refs/heads/sbx-ledger-unborn\n".to_vec(),
    };
    std::fs::write(g.join("HEAD"), &head_line).map_err(|e| io(&g, e))?;
    // The snapshot: every ref as listed, the branch at the pinned commit.
    let mut packed = Vec::with_capacity(refs.len() + 100);
    for l in refs.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let name = l.splitn(2, |b| *b == b' ').nth(1).unwrap_or_default();
        if Some(name) != branch {
            packed.extend_from_slice(l);
            packed.push(b'\n');
        }
    }
    if let (Some(b), Some(h)) = (branch, head) {
        packed.extend_from_slice(&[h, b" ", b, b"\n"].concat());
    }
    std::fs::write(g.join("packed-refs"), packed).map_err(|e| io(&g, e))?;
    let config = std::fs::read(snap.common.join("config")).unwrap_or_default();
    let config = crate::keys::view_config(&config)?;
    std::fs::write(g.join("config"), config).map_err(|e| io(&g, e))?;
    pin.answer()?;
    // The copy stays for sbx-git-client's routing.
    std::fs::write(msg_dir.join(PINNED_HEAD), head.unwrap_or(&zero)).map_err(|e| io(msg_dir, e))?;
    let mut env: Vec<(OsString, OsString)> = env
        .iter()
        .filter(|(k, _)| {
            k != "GIT_DIR"
                && k != "GIT_WORK_TREE"
                && k != "GIT_COMMON_DIR"
                && k != "GIT_OBJECT_DIRECTORY"
                && k != VIEW_MADE_ENV
        })
        .cloned()
        .collect();
    env.push(("GIT_DIR".into(), g.into()));
    env.push(("GIT_WORK_TREE".into(), top.into()));
    env.push(("GIT_OBJECT_DIRECTORY".into(), snap.objects.clone().into()));
    Ok((view, env))
}

/// A `git commit`'s prepared step: each branch or HEAD it moves must move
/// from the commit pre-commit's view pinned ([`PINNED_HEAD`]), the parent
/// the hook compared the index with. No pin where the repository has
/// pre-commit (`required`): pre-commit did not run on a view, so a move
/// is refused (a46: the agent's `SBX_GUARD_VIEW_MADE` had the hook run on
/// the real git dir, with no pin, and a flipped HEAD hid MARKER).
pub fn check_pinned(pin: &Path, stdin: &[u8], required: bool) -> Result<(), String> {
    let Ok(pinned) = std::fs::read(pin) else {
        if required && crate::msg::head_moves(stdin).next().is_some() {
            return Err(
                "pre-commit did not run on the commit's private view (no parent was pinned); the commit is refused"
                    .into(),
            );
        }
        return Ok(());
    };
    for (old, _) in crate::msg::head_moves(stdin) {
        if old != pinned.as_slice() {
            return Err(format!(
                "the commit's parent {} is not the commit pre-commit compared the index with ({}): HEAD changed while the hook ran",
                String::from_utf8_lossy(&old[..old.len().min(12)]),
                String::from_utf8_lossy(&pinned[..pinned.len().min(12)])
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{PINNED_HEAD, check_pinned, parse_commit};

    /// A commit's branch (or detached HEAD) must move from the commit
    /// pre-commit's view was pinned at; other refs, and no pin, pass.
    #[test]
    fn a_commit_moves_only_from_the_head_pre_commit_saw() {
        let d = tempfile::tempdir().unwrap();
        let (a, b, c) = ("a".repeat(40), "b".repeat(40), "c".repeat(40));
        let line = |old: &str, name: &str| format!("{old} {c} {name}\n");
        let pin = d.path().join(PINNED_HEAD);
        assert!(check_pinned(&pin, line(&b, "refs/heads/main").as_bytes(), false).is_ok());
        // No pin where the repository has pre-commit: refused.
        assert!(check_pinned(&pin, line(&b, "refs/heads/main").as_bytes(), true).is_err());
        assert!(check_pinned(&pin, line(&b, "refs/tags/t").as_bytes(), true).is_ok());
        std::fs::write(&pin, &a).unwrap();
        assert!(check_pinned(&pin, line(&a, "refs/heads/main").as_bytes(), true).is_ok());
        assert!(check_pinned(&pin, line(&a, "HEAD").as_bytes(), true).is_ok());
        assert!(check_pinned(&pin, line(&b, "refs/heads/main").as_bytes(), true).is_err());
        assert!(check_pinned(&pin, line(&b, "HEAD").as_bytes(), true).is_err());
        assert!(check_pinned(&pin, line(&b, "refs/tags/t").as_bytes(), true).is_ok());
    }

    #[test]
    fn a_raw_commit_gives_its_parents_and_message() {
        let raw = b"tree t\nparent p1\nparent p2\nauthor a\ncommitter c\n\nsubject\n\nbody\n";
        let (p, m) = parse_commit(raw);
        assert_eq!(p, [&b"p1"[..], b"p2"]);
        assert_eq!(m, b"subject\n\nbody\n");
        let (p, m) = parse_commit(b"tree t\nauthor a\n\nroot\n");
        assert!(p.is_empty());
        assert_eq!(m, b"root\n");
    }
}
