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
//! git's own lock on the copy (`index.lock`, for `commit -a`, `--include`,
//! `--interactive`) is in that directory too. A partial commit (`git commit
//! <paths>`, `--only`) builds its tree from a second index git puts in the
//! git dir (`next-index-<pid>.lock`), where the agent can rename over it:
//! its pre-commit is refused ([`partial_commit`]).

use std::ffi::{OsStr, OsString};
use std::io::{Read as _, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{
    DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};

use sbx_core::{Exit, output};

use crate::policy::Allow;

/// Set by the broker for the git it runs on a private index: that index's
/// directory. Removed from the agent's environment (`hookenv`), so only a
/// value the broker set reaches a hook request.
pub const DIR_VAR: &str = "SBX_GUARD_INDEX_DIR";

/// The private indexes' directory, beside the broker's socket
/// (`/run/sbx-git/index` in the sandbox): root's, mode 01730, group
/// `sbx-git`, so the agent's own processes cannot enter it, and git's
/// group can make a directory in it but not list it: the copy's name is
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
    ["pre-commit", "commit-msg"].iter().any(|h| {
        std::fs::metadata(trusted.join(h))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
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

/// A fresh directory under `root` with a name nobody can guess (the agent
/// cannot list `root`, and a hook's environment, which names it, is not
/// the agent's to read).
fn private_dir(root: &Path) -> std::io::Result<PathBuf> {
    let mut r = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut r)?;
    let name: String = r.iter().map(|b| format!("{b:02x}")).collect();
    let d = root.join(name);
    std::fs::DirBuilder::new().mode(0o700).create(&d)?;
    Ok(d)
}

/// Copy `from` to `to` (a new file), with `from`'s mode and times: git
/// takes an entry changed in the index file's own second as racily clean
/// and checks its content, so the copy keeps the index's mtime.
fn copy_as_is(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::copy(from, to)?;
    let m = std::fs::metadata(from)?;
    let f = std::fs::File::options().write(true).open(to)?;
    f.set_times(
        std::fs::FileTimes::new()
            .set_accessed(m.accessed()?)
            .set_modified(m.modified()?),
    )
}

/// Run git (`real`, by its `/proc/self/fd` path) as `allow` says, on a
/// private copy of its index, then put the copy back. Returns git's exit
/// code (or 128 + signal). The index's lock is held throughout, so no
/// other git writes the index meanwhile (one that tries fails, as it
/// would against git's own lock).
pub fn run_private(real: &Path, allow: &Allow, root: &Path) -> u8 {
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
    let mut held = match std::fs::File::options()
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
    let dir = match private_dir(root) {
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
    let copy = dir.join("index");
    let code = run_on(real, allow, &index, &copy, &dir);
    // Back as the index: git's result, or (git did not start) the copy
    // as it was. No copy (a repository without an index yet, and git
    // made none): the index stays as it is.
    let back = (|| -> std::io::Result<bool> {
        let mut f = match std::fs::File::open(&copy) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        let m = f.metadata()?;
        std::io::copy(&mut f, &mut held)?;
        held.set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o7777))?;
        held.set_times(
            std::fs::FileTimes::new()
                .set_accessed(m.accessed()?)
                .set_modified(m.modified()?),
        )?;
        held.flush()?;
        Ok(true)
    })();
    match back {
        Ok(true) => {
            if let Err(e) = std::fs::rename(&lock, &index) {
                output::error(&format!("cannot put the index back: {e}"));
            }
        }
        Ok(false) => {
            let _ = std::fs::remove_file(&lock);
        }
        Err(e) => {
            let _ = std::fs::remove_file(&lock);
            output::error(&format!(
                "cannot put the index back from {}: {e}",
                copy.display()
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    code
}

fn run_on(real: &Path, allow: &Allow, index: &Path, copy: &Path, dir: &Path) -> u8 {
    match copy_as_is(index, copy) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            output::error(&format!(
                "cannot copy the index {}: {e}; nothing was run",
                index.display()
            ));
            return Exit::WrapperFailed.code();
        }
    }
    // A sequencer `--continue`: pre-commit on the copy (see
    // `crate::precommit_first`), which git then commits from.
    if allow.precommit_first {
        let mut on_copy = allow.clone();
        on_copy.env.retain(|(k, _)| k != "GIT_INDEX_FILE");
        on_copy.env.push(("GIT_INDEX_FILE".into(), copy.into()));
        if let Err(b) = crate::precommit_first(real, &on_copy) {
            crate::record_block(&allow.args, &b);
            output::error(&b.message());
            return Exit::Denied.code();
        }
    }
    // A split index reads its shared part from the git dir at each read,
    // the re-read after the hook included: written whole here.
    let mut args: Vec<&OsStr> = vec![OsStr::new("-c"), OsStr::new("core.splitIndex=false")];
    args.extend(allow.args.iter().map(OsString::as_os_str));
    // Signals the session relays to git's group end git, not this process,
    // which still has to put the index back: blocked here (the child's
    // mask is reset by spawn), dropped when it exits.
    let relayed = {
        let mut s = nix::sys::signal::SigSet::empty();
        for sig in crate::broker::RELAYED {
            if let Ok(sig) = nix::sys::signal::Signal::try_from(*sig) {
                s.add(sig);
            }
        }
        s
    };
    let _ = relayed.thread_block();
    let status = std::process::Command::new(real)
        .arg0("git")
        .args(args)
        .env_clear()
        .envs(
            allow
                .env
                .iter()
                .filter(|(k, _)| k != "GIT_INDEX_FILE" && k != DIR_VAR)
                .map(|(k, v)| (k, v)),
        )
        .env("GIT_INDEX_FILE", copy)
        .env(DIR_VAR, dir)
        .status();
    match status {
        Ok(st) => {
            use std::os::unix::process::ExitStatusExt as _;
            match (st.code(), st.signal()) {
                (Some(c), _) => u8::try_from(c).unwrap_or(1),
                (None, Some(s)) => u8::try_from(128 + s).unwrap_or(255),
                _ => 1,
            }
        }
        Err(e) => {
            output::error(&format!("cannot run the real git: {e}"));
            Exit::CannotInvoke.code()
        }
    }
}

/// A hook request's verdict on its index (the broker's runner, before the
/// hook starts): under a private index (`$SBX_GUARD_INDEX_DIR` set, by the
/// broker only), a pre-commit whose `GIT_INDEX_FILE` is not in it is a
/// partial commit's, which git re-reads from the git dir after the hook.
pub fn partial_commit(name: &str, env: &[(OsString, OsString)]) -> Option<String> {
    if name != "pre-commit" {
        return None;
    }
    let var = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_os_str());
    let dir = var(DIR_VAR).filter(|d| !d.is_empty())?;
    let inside = var("GIT_INDEX_FILE").is_some_and(|i| {
        Path::new(i).parent() == Some(Path::new(dir))
            && !i.as_bytes().contains(&b'\n')
            && Path::new(i)
                .file_name()
                .is_some_and(|f| f == "index" || f == "index.lock")
    });
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
        for ok in [
            "/run/sbx-git/index/00ff/index",
            "/run/sbx-git/index/00ff/index.lock",
        ] {
            let e = env(&[(super::DIR_VAR, d), ("GIT_INDEX_FILE", ok)]);
            assert_eq!(partial_commit("pre-commit", &e), None, "{ok}");
        }
        for bad in [
            "/w/.git/next-index-12.lock",
            "/run/sbx-git/index/00ff/../x/index",
            "/run/sbx-git/index/00ff/other",
            "",
        ] {
            let e = env(&[(super::DIR_VAR, d), ("GIT_INDEX_FILE", bad)]);
            assert!(partial_commit("pre-commit", &e).is_some(), "{bad}");
        }
        let e = env(&[(super::DIR_VAR, d)]);
        assert!(partial_commit("pre-commit", &e).is_some(), "no index");
        let e = env(&[("GIT_INDEX_FILE", "/w/.git/next-index-1.lock")]);
        assert_eq!(partial_commit("pre-commit", &e), None, "not private");
        let e = env(&[(super::DIR_VAR, d), ("GIT_INDEX_FILE", "/x")]);
        assert_eq!(partial_commit("commit-msg", &e), None);
    }
}
