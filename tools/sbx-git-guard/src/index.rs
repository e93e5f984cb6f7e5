//! The index a commit is built from, out of the agent's reach. `git
//! commit` re-reads its index file by path after the pre-commit hook ran,
//! and builds the commit's tree from what it reads then: a file renamed
//! over `.git/index` between the hook's own `git diff --cached` and that
//! re-read was committed unseen; so was one renamed between the pre-commit
//! the guard runs before a sequencer `--continue` and git's read. (`git
//! merge` commits the tree it merged before pre-merge-commit, and `git am`
//! the index it holds in memory, whatever either re-reads.) So the broker's git process
//! runs such a command on a private copy (`GIT_INDEX_FILE`) in a directory
//! only git's group can enter, holding the real index's lock meanwhile,
//! and puts the copy back as the index once git is done, as git would have
//! left it.
//!
//! git's own lock on the copy (`<copy>.lock`, for `commit -a`, `--include`,
//! `--interactive`) is in that directory too. A partial commit (`git commit
//! <paths>`, `--only`) builds its tree from a second index git puts in the
//! git dir (`next-index-<pid>.lock`), where the agent can rename over it:
//! its pre-commit is refused ([`partial_commit`]).

use std::ffi::{OsStr, OsString};
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use sbx_core::{Exit, output};

use crate::policy::Allow;

/// Set by the broker for the git it runs on a private index: that index's
/// path. Removed from the agent's environment (`hookenv`), so only a value
/// the broker set reaches a hook request.
pub const PRIVATE_VAR: &str = "SBX_GUARD_PRIVATE_INDEX";

/// The private indexes' directory, beside the broker's socket
/// (`/run/sbx-git/index` in the sandbox): root's, mode 01730, group
/// `sbx-git`, so the agent's own processes cannot enter it, and git's
/// group can make a file in it but not list it: the copy's name is
/// its secret (git run through the broker can be made to list any
/// directory it can read, `git init` there and `git status -uall`).
pub const ROOT_NAME: &str = "index";

/// The broker's root process, at start: make (or fix) [`ROOT_NAME`]
/// beside the socket. Not root (a test broker): a directory of its own.
pub fn make_root(socket_dir: &Path, gid: u32) -> std::io::Result<PathBuf> {
    let root = socket_dir.join(ROOT_NAME);
    match std::fs::create_dir(&root) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let m = std::fs::symlink_metadata(&root)?;
    if !m.is_dir() {
        return Err(std::io::Error::other(format!(
            "{} is not a directory",
            root.display()
        )));
    }
    if nix::unistd::geteuid().is_root() {
        // The image makes it so; a broker without CAP_CHOWN (the
        // sandbox's) can only check.
        if (m.uid(), m.gid(), m.mode() & 0o7777) == (0, gid, 0o1730) {
            return Ok(root);
        }
        std::os::unix::fs::lchown(&root, Some(0), Some(gid))?;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o1730))?;
    } else {
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(root)
}

/// Does `allow` build a commit's tree from the index after a hook the
/// repository has (so it must run on a private index)?
pub fn needed(allow: &Allow) -> bool {
    if !allow.builds_tree {
        return false;
    }
    let Some((_, trusted)) = &allow.pin else {
        return false;
    };
    // commit-msg too: its message is checked against git's the same way
    // (msg.rs), from the same private directory.
    ["pre-commit", "commit-msg"]
        .iter()
        .any(|h| crate::hooks::executable(&trusted.join(h)))
}

/// The index file git would use: `$GIT_INDEX_FILE` (its first value, as
/// git's getenv reads it; absolute only), else `<git dir>/index`; a
/// symlink is followed, as git's lock file follows it.
fn index_path(allow: &Allow, cwd: &Path) -> Result<PathBuf, String> {
    let p = match allow.env.iter().find(|(k, _)| k == "GIT_INDEX_FILE") {
        Some((_, v)) if Path::new(v).is_absolute() => PathBuf::from(v),
        Some((_, v)) => {
            return Err(format!(
                "GIT_INDEX_FILE={} is relative; name it by its absolute path",
                v.to_string_lossy()
            ));
        }
        None => {
            let repo = allow
                .repo
                .as_ref()
                .ok_or("no repository found to commit in")?;
            cwd.join(&repo.git_dir).join("index")
        }
    };
    Ok(match std::fs::symlink_metadata(&p) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(&p).unwrap_or(p),
        _ => p,
    })
}

fn lock_path(index: &Path) -> PathBuf {
    let mut l = index.as_os_str().to_owned();
    l.push(".lock");
    PathBuf::from(l)
}

/// 16 random bytes, read ahead of a call ([`draw_name`]): off its path.
static NAME: std::sync::OnceLock<[u8; 16]> = std::sync::OnceLock::new();

/// 16 more, for the one pre-commit view a runner may make
/// ([`take_view_name`]).
static VIEW_NAME: std::sync::Mutex<Option<[u8; 16]>> = std::sync::Mutex::new(None);

/// A broker's runner, before it waits for a call: draw the names a private
/// copy and a pre-commit view would take (a process forked per call, so
/// each has its own).
pub fn draw_name() {
    let mut r = [0u8; 32];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut r))
        .is_ok()
    {
        let (copy, view) = r.split_at(16);
        let _ = NAME.set(copy.try_into().unwrap_or_default());
        if let Ok(mut v) = VIEW_NAME.lock() {
            *v = view.try_into().ok();
        }
    }
}

/// The view name [`draw_name`] drew, once; then None.
pub fn take_view_name() -> Option<[u8; 16]> {
    VIEW_NAME.lock().ok()?.take()
}

/// A fresh name under `root` nobody can guess (the agent cannot list
/// `root`, and a hook's environment, which names it, is not the agent's
/// to read). A file, not a directory of its own: git's lock on it
/// (`<name>.lock`) lands beside it, and no directory is made and removed
/// per call (two metadata writes on the call's path).
fn private_name(root: &Path) -> std::io::Result<PathBuf> {
    let r = match NAME.get() {
        Some(r) => *r,
        None => {
            let mut r = [0u8; 16];
            std::fs::File::open("/dev/urandom")?.read_exact(&mut r)?;
            r
        }
    };
    let name: String = r.iter().map(|b| format!("{b:02x}")).collect();
    Ok(root.join(name))
}

/// Copy `from` to `to` (a new file, made here: a name taken is an error),
/// with `from`'s mode and times, by fd: git takes an entry changed in the
/// index file's own second as racily clean and checks its content, so the
/// copy keeps the index's mtime. Returns the copy's [`Untouched`] mark.
/// Its cache-tree is dropped ([`without_cache_tree`]).
fn copy_as_is(from: &Path, to: &Path) -> std::io::Result<Untouched> {
    let mut src = std::fs::File::open(from)?;
    let m = src.metadata()?;
    let mut data = Vec::with_capacity(m.len() as usize);
    src.read_to_end(&mut data)?;
    let data = without_cache_tree(&data).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not an index file git writes",
        )
    })?;
    let mut dst = std::fs::File::options()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)?;
    dst.write_all(&data)?;
    dst.set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o7777))?;
    dst.set_times(
        std::fs::FileTimes::new()
            .set_accessed(m.accessed()?)
            .set_modified(m.modified()?),
    )?;
    Ok(Untouched::of(&dst.metadata()?))
}

/// The index file `data` without its cache-tree (`TREE`) and the offset
/// tables that would then be stale (`EOIE`, `IEOT`), ending in a zero
/// checksum (git skips checking one, as for `index.skipHash`). git
/// commits the cache-tree's tree ids for the directories it marks valid
/// rather than the entries: an index written by hand whose cache-tree
/// named a tree holding MARKER, entries holding none, passed pre-commit
/// (its `git diff --cached` compares the entries) and committed MARKER
/// (round eight). Without one, git builds the tree from the entries.
/// None: not an index this reads (versions 2 to 4, SHA-1 or SHA-256).
pub fn without_cache_tree(data: &[u8]) -> Option<Vec<u8>> {
    [20, 32].into_iter().find_map(|h| strip_tree(data, h))
}

fn strip_tree(data: &[u8], hash: usize) -> Option<Vec<u8>> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?))
    };
    if data.get(..4)? != b"DIRC" {
        return None;
    }
    let version = u32_at(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let entries = u32_at(8)?;
    let mut at = 12usize;
    for _ in 0..entries {
        let start = at;
        let flags = u16::from_be_bytes(data.get(at + 40 + hash..at + 42 + hash)?.try_into().ok()?);
        at += 42 + hash;
        if flags & 0x4000 != 0 {
            if version < 3 {
                return None;
            }
            at += 2;
        }
        if version == 4 {
            // The part of the previous path to drop, a varint.
            while *data.get(at)? & 0x80 != 0 {
                at += 1;
            }
            at += 1;
        }
        at += data.get(at..)?.iter().position(|&b| b == 0)? + 1;
        if version < 4 {
            // NUL padding to a multiple of eight from the entry's start.
            at = start + (at - start).div_ceil(8) * 8;
        }
        if at > data.len() {
            return None;
        }
    }
    let end = data.len().checked_sub(hash)?;
    let mut out = data.get(..at)?.to_vec();
    while at < end {
        let sig = data.get(at..at + 4)?;
        let len = 8 + u32_at(at + 4)? as usize;
        if len > end - at {
            return None;
        }
        let ext = &data[at..at + len];
        if !matches!(sig, b"TREE" | b"EOIE" | b"IEOT") {
            out.extend_from_slice(ext);
        }
        at += len;
    }
    (at == end).then(|| {
        out.resize(out.len() + hash, 0);
        out
    })
}

/// A file's inode and change time: git replaces an index it writes (a new
/// inode), and any write, chmod or touch in place moves the ctime, which
/// nobody can set. A copy still so marked when git ends is the index as it
/// was, so the index is left as it is: no copy back, no rename. (git 2.39
/// writes none for a commit whose index has a whole cache-tree; the copy
/// has none since round eight, so git writes one, from the entries.)
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Untouched([u64; 4]);

impl Untouched {
    /// Nothing to compare (no copy was made).
    const NONE: Untouched = Untouched([0; 4]);

    fn of(m: &std::fs::Metadata) -> Untouched {
        Untouched([m.dev(), m.ino(), m.ctime() as u64, m.ctime_nsec() as u64])
    }
}

/// The broker's runner: run git (`git`, by fd) as `allow` says, on a
/// private copy of its index; the session puts the copy back once git is
/// done ([`put_back_from`]), so git is exec'd here, not waited for. The
/// index's lock is held throughout (the session holds it open), so no
/// other git writes the index meanwhile (one that tries fails, as it
/// would against git's own lock). Returns only when git did not start.
pub fn run_private(git: BorrowedFd<'_>, allow: &Allow, root: &Path, session: &UnixStream) -> u8 {
    output::set_tool_if_unset(crate::TOOL);
    let cwd = std::env::current_dir().unwrap_or_default();
    let index = match index_path(allow, &cwd) {
        Ok(p) => p,
        Err(msg) => {
            output::error(&format!("{msg}; nothing was run"));
            return Exit::Denied.code();
        }
    };
    let lock = lock_path(&index);
    let held = match std::fs::File::options()
        .write(true)
        .create_new(true)
        .mode(0o666)
        .open(&lock)
    {
        Ok(f) => f,
        Err(e) => {
            // git's own words for a lock it cannot take.
            eprintln!("fatal: Unable to create '{}': {e}.", lock.display());
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                eprintln!(
                    "\nAnother git process seems to be running in this repository; if none is, remove the file and try again."
                );
            }
            return 128;
        }
    };
    let copy = match private_name(root) {
        Ok(d) => d,
        Err(e) => {
            let _ = std::fs::remove_file(&lock);
            output::error(&format!(
                "cannot make a private index in {}: {e}; nothing was run",
                root.display()
            ));
            return Exit::WrapperFailed.code();
        }
    };
    // No index yet: git makes the copy, which then becomes the index.
    let mark = match copy_as_is(&index, &copy) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Untouched::NONE,
        Err(e) => {
            let _ = std::fs::remove_file(&copy);
            let _ = std::fs::remove_file(&lock);
            output::error(&format!(
                "cannot copy the index {}: {e}; nothing was run",
                index.display()
            ));
            return Exit::WrapperFailed.code();
        }
    };
    // From here on, whatever happens (git refused, killed, never started),
    // the session puts the copy back as the index and lets go of the lock.
    if let Err(e) = order_put_back(session, &index, &copy, mark, &held) {
        let _ = std::fs::remove_file(&copy);
        let _ = std::fs::remove_file(&lock);
        output::error(&format!(
            "cannot hand the private index to the session: {e}; nothing was run"
        ));
        return Exit::WrapperFailed.code();
    }
    drop(held);
    let real = PathBuf::from(format!("/proc/self/fd/{}", git.as_raw_fd()));
    // A sequencer `--continue`: pre-commit on the copy (see
    // `crate::precommit_first`), which git then commits from.
    if allow.precommit_first {
        let mut on_copy = allow.clone();
        on_copy.env.retain(|(k, _)| k != "GIT_INDEX_FILE");
        on_copy
            .env
            .push(("GIT_INDEX_FILE".into(), copy.clone().into()));
        if let Err(b) = crate::precommit_first(&real, &on_copy) {
            crate::record_block(&allow.args, &b);
            output::error(&b.message());
            return Exit::Denied.code();
        }
    }
    // A split index reads its shared part from the git dir at each read,
    // the re-read after the hook included: written whole here. Last among
    // the `-c`s, before the hooks pin, so a caller's `-c
    // core.splitIndex=true` cannot undo it.
    let mut argv: Vec<OsString> = vec!["git".into()];
    argv.extend(allow.args.iter().cloned());
    let at = allow.pin.as_ref().map_or(1, |(i, _)| *i);
    argv.splice(at..at, ["-c".into(), "core.splitIndex=false".into()]);
    let mut env: Vec<(OsString, OsString)> = allow
        .env
        .iter()
        .filter(|(k, _)| k != "GIT_INDEX_FILE" && k != PRIVATE_VAR)
        .cloned()
        .collect();
    env.push(("GIT_INDEX_FILE".into(), copy.clone().into()));
    env.push((PRIVATE_VAR.into(), copy.into()));
    let err = sbx_sys::privsep::execveat_fd(git, &argv, &env);
    output::error(&format!("cannot run the real git: {err}"));
    Exit::CannotInvoke.code()
}

/// The order a runner gives its session: `i`, the copy's [`Untouched`]
/// mark (four little-endian u64), the index's path, NUL, the copy's path;
/// the held lock and the caller's stderr attached.
fn order_put_back(
    session: &UnixStream,
    index: &Path,
    copy: &Path,
    mark: Untouched,
    held: &std::fs::File,
) -> std::io::Result<()> {
    let mut msg = b"i".to_vec();
    for n in mark.0 {
        msg.extend_from_slice(&n.to_le_bytes());
    }
    msg.extend_from_slice(index.as_os_str().as_bytes());
    msg.push(0);
    msg.extend_from_slice(copy.as_os_str().as_bytes());
    let stderr = std::io::stderr();
    let n =
        sbx_sys::privsep::send_with_fds(session.as_fd(), &msg, &[held.as_fd(), stderr.as_fd()])?;
    (&*session).write_all(&msg[n..])
}

/// The session, once git has ended: if its runner ordered it, put the
/// copy back as the index (git's result, or the copy as it was if git
/// did not start), through the lock the runner took. No copy (a
/// repository without an index yet, and git made none), or the copy as it
/// was made ([`Untouched`]): the index stays as it is. Errors go to the
/// caller's stderr. What is left in the private directory (the copy, and
/// what git or commit-msg left beside it) only this session can name: it
/// is removed after the reply ([`Leftovers::remove`]), off the call's path.
pub fn put_back_from(session: &UnixStream) -> Leftovers {
    let mut first = vec![0u8; 8192];
    let Ok((n, mut fds)) = sbx_sys::privsep::recv_with_fds(session.as_fd(), &mut first, 2) else {
        return Leftovers(None, None);
    };
    // A pre-commit's view (broker.rs `exec_hook`): removed after the hook.
    if n > 0 && first[0] == VIEW_ORDER {
        let mut dir = first[1..n].to_vec();
        let _ = (&*session).read_to_end(&mut dir);
        return Leftovers(None, Some(PathBuf::from(OsString::from_vec(dir))));
    }
    if n == 0 || first[0] != b'i' || fds.len() != 2 {
        return Leftovers(None, None);
    }
    let mut msg = first[1..n].to_vec();
    let _ = (&*session).read_to_end(&mut msg);
    let stderr = std::fs::File::from(fds.remove(1));
    let held = std::fs::File::from(fds.remove(0));
    let mut mark = Untouched::NONE;
    for (i, n) in mark.0.iter_mut().enumerate() {
        let Some(b) = msg
            .get(i * 8..i * 8 + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
        else {
            return Leftovers(None, None);
        };
        *n = u64::from_le_bytes(b);
    }
    let msg = &msg[32..];
    let Some(cut) = msg.iter().position(|b| *b == 0) else {
        return Leftovers(None, None);
    };
    let index = PathBuf::from(OsStr::from_bytes(&msg[..cut]));
    let copy = PathBuf::from(OsStr::from_bytes(&msg[cut + 1..]));
    if let Err(m) = put_back(&index, &copy, mark, held) {
        let _ = writeln!(&stderr, "{}: error: {m}", crate::TOOL);
    }
    Leftovers(Some(copy), None)
}

/// On a session's channel from its runner: the rest is a pre-commit
/// view's directory, to remove once the hook has ended.
pub const VIEW_ORDER: u8 = b'v';

/// A private copy's files, once the index is back ([`put_back_from`]).
#[must_use]
pub struct Leftovers(Option<PathBuf>, Option<PathBuf>);

impl Leftovers {
    /// The copy, git's lock on it where git was killed before it let go,
    /// and commit-msg's private copy and what it passed (msg.rs).
    pub fn remove(self) {
        if let Some(view) = self.1 {
            let _ = std::fs::remove_dir_all(view);
        }
        let Some(copy) = self.0 else { return };
        let _ = std::fs::remove_file(&copy);
        let _ = std::fs::remove_file(lock_path(&copy));
        let _ = std::fs::remove_dir_all(crate::msg::msg_dir(&copy));
    }
}

/// Put the copy back as `index` through the lock `held`, or (no copy, or
/// [`Untouched`]) let go of the lock. The copy stays (see [`Leftovers`]):
/// nothing but this session can open it.
fn put_back(
    index: &Path,
    copy: &Path,
    mark: Untouched,
    mut held: std::fs::File,
) -> Result<(), String> {
    let lock = lock_path(index);
    let back = (|| -> std::io::Result<bool> {
        // One stat answers the usual case (git wrote no index).
        match std::fs::metadata(copy) {
            Ok(m) if mark != Untouched::NONE && Untouched::of(&m) == mark => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            _ => {}
        }
        let mut f = match std::fs::File::open(copy) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        let m = f.metadata()?;
        if mark != Untouched::NONE && Untouched::of(&m) == mark {
            return Ok(false);
        }
        std::io::copy(&mut f, &mut held)?;
        held.set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o7777))?;
        held.set_times(
            std::fs::FileTimes::new()
                .set_accessed(m.accessed()?)
                .set_modified(m.modified()?),
        )?;
        Ok(true)
    })();
    match back {
        Ok(true) => {
            std::fs::rename(&lock, index).map_err(|e| format!("cannot put the index back: {e}"))
        }
        Ok(false) => {
            let _ = std::fs::remove_file(&lock);
            Ok(())
        }
        Err(e) => {
            let _ = std::fs::remove_file(&lock);
            Err(format!(
                "cannot put the index back from {}: {e}",
                copy.display()
            ))
        }
    }
}

/// A hook request's verdict on its index (the broker's runner, before the
/// hook starts): under a private index (`$SBX_GUARD_PRIVATE_INDEX` set, by
/// the broker only), a pre-commit whose `GIT_INDEX_FILE` is neither it nor
/// git's lock on it is a partial commit's, which git re-reads from the git
/// dir after the hook.
pub fn partial_commit(name: &str, env: &[(OsString, OsString)]) -> Option<String> {
    if name != "pre-commit" {
        return None;
    }
    let var = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_os_str());
    let copy = var(PRIVATE_VAR).filter(|d| !d.is_empty())?;
    let inside = var("GIT_INDEX_FILE")
        .is_some_and(|i| i == copy || i == lock_path(Path::new(copy)).as_os_str());
    (!inside).then(|| {
        "a partial commit (`git commit <paths>`, `--only`) builds its tree from an index in the git dir, which can be swapped after pre-commit; `git add` the paths and commit them (or use `--include`)".to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::partial_commit;
    use std::ffi::OsString;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    /// Only pre-commit under a private index is judged; its index must be
    /// the private one (or git's lock beside it).
    #[test]
    fn a_pre_commit_outside_the_private_index_is_a_partial_commits() {
        let d = "/run/sbx-git/index/00ff";
        for ok in ["/run/sbx-git/index/00ff", "/run/sbx-git/index/00ff.lock"] {
            let e = env(&[(super::PRIVATE_VAR, d), ("GIT_INDEX_FILE", ok)]);
            assert_eq!(partial_commit("pre-commit", &e), None, "{ok}");
        }
        for bad in [
            "/w/.git/next-index-12.lock",
            "/run/sbx-git/index/00ff/../00ff",
            "/run/sbx-git/index/00ff/index",
            "/run/sbx-git/index/00ff.lock/x",
            "/run/sbx-git/index/00ffx",
            "",
        ] {
            let e = env(&[(super::PRIVATE_VAR, d), ("GIT_INDEX_FILE", bad)]);
            assert!(partial_commit("pre-commit", &e).is_some(), "{bad}");
        }
        let e = env(&[(super::PRIVATE_VAR, d)]);
        assert!(partial_commit("pre-commit", &e).is_some(), "no index");
        let e = env(&[("GIT_INDEX_FILE", "/w/.git/next-index-1.lock")]);
        assert_eq!(partial_commit("pre-commit", &e), None, "not private");
        let e = env(&[(super::PRIVATE_VAR, d), ("GIT_INDEX_FILE", "/x")]);
        assert_eq!(partial_commit("commit-msg", &e), None);
    }

    /// The copy git reads is the index without its cache-tree, entries
    /// and other extensions kept, for each index version and hash git
    /// writes: git reads it, lists the same entries and builds the same
    /// tree from them.
    #[test]
    fn the_private_copy_drops_only_the_cache_tree() {
        let run = |dir: &std::path::Path, index: &std::path::Path, args: &[&str]| {
            let o = std::process::Command::new("git")
                .args(args)
                .current_dir(dir)
                .env("GIT_INDEX_FILE", index)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("HOME", dir)
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            o.stdout
        };
        for (format, version) in [
            ("sha1", "2"),
            ("sha1", "3"),
            ("sha1", "4"),
            ("sha256", "2"),
            ("sha256", "4"),
        ] {
            let d = tempfile::tempdir().unwrap();
            let dir = d.path();
            let index = dir.join(".git/index");
            run(
                dir,
                &index,
                &["init", "-q", &format!("--object-format={format}")],
            );
            std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
            for f in ["a", "sub/b", "sub/deeper/c", "sub/deeper/long-name-to-pad"] {
                std::fs::write(dir.join(f), f).unwrap();
            }
            run(dir, &index, &["add", "."]);
            if version == "3" {
                std::fs::write(dir.join("ita"), "x").unwrap();
                run(dir, &index, &["add", "-N", "ita"]);
            }
            run(dir, &index, &["update-index", "--index-version", version]);
            let tree = run(dir, &index, &["write-tree"]);
            let data = std::fs::read(&index).unwrap();
            assert!(
                data.windows(4).any(|w| w == b"TREE"),
                "{format} v{version}: a cache-tree"
            );
            let stripped =
                super::without_cache_tree(&data).unwrap_or_else(|| panic!("{format} v{version}"));
            assert!(
                !stripped.windows(4).any(|w| w == b"TREE"),
                "{format} v{version}"
            );
            let copy = dir.join("copy");
            std::fs::write(&copy, &stripped).unwrap();
            let list = |i: &std::path::Path| run(dir, i, &["ls-files", "-s", "--debug"]);
            assert_eq!(list(&copy), list(&index), "{format} v{version}");
            assert_eq!(
                run(dir, &copy, &["write-tree"]),
                tree,
                "{format} v{version}"
            );
        }
        assert!(super::without_cache_tree(b"DIRC").is_none());
        assert!(super::without_cache_tree(b"").is_none());
    }
}
