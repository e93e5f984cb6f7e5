//! The message a commit records is the one commit-msg passed.
//!
//! `git commit` runs commit-msg on `.git/COMMIT_EDITMSG`, then re-reads that
//! file by path and commits what it reads: a file renamed over it between
//! the hook's read and git's re-read was committed unseen. Through the
//! broker, on a private index ([`crate::index`]), the broker's hook process
//! copies the message into the call's private directory, runs commit-msg on
//! the copy, keeps what it passed there ([`APPROVED`]) and writes it back
//! for git (so a hook's own edit, a `Change-Id:` trailer, is kept); the
//! reference-transaction `prepared` step then compares the message of the
//! commit git made with it ([`check_commit`]), and refuses a mismatch.

use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use crate::hooks::Git;

/// What commit-msg passed, in the call's private directory.
pub const APPROVED: &str = "commit-msg.approved";

/// Left in the call's private directory by a step that ran pre-commit
/// after pre-merge-commit or pre-applypatch, and it passed: a merge's
/// commit then goes into the ledger without commit-msg in the repository
/// (a fast-forward runs neither hook, and leaves none).
pub const PRE_COMMIT_PASSED: &str = "pre-commit.passed";

/// Leave [`PRE_COMMIT_PASSED`] where the call has a private directory.
pub fn mark_pre_commit(env: &[(OsString, OsString)]) {
    use std::os::unix::fs::DirBuilderExt as _;
    if let Some(dir) = private_dir(env) {
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        let _ = write_new(&dir.join(PRE_COMMIT_PASSED), b"");
    }
}

/// The private directory of this call: `<private index>.msg`, beside the
/// copy the broker's git runs on (`$SBX_GUARD_PRIVATE_INDEX`, which only
/// the broker sets), so its name is as secret as the copy's; made by the
/// first commit-msg that needs it, removed with the copy.
pub fn private_dir(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    env.iter()
        .find(|(k, _)| k == crate::index::PRIVATE_VAR)
        .map(|(_, v)| msg_dir(Path::new(v)))
        .filter(|d| d.is_absolute())
}

/// The message directory that goes with a private index `copy`.
pub fn msg_dir(copy: &Path) -> PathBuf {
    let mut d = copy.as_os_str().to_owned();
    d.push(".msg");
    PathBuf::from(d)
}

/// The broker's hook process for commit-msg under a private index: the
/// hook (`path`, argv[0] `argv0`) on a private copy of `msg` (git's
/// argument), then what it passed kept and written back. Returns the
/// hook's exit code.
pub fn run_on_copy(
    path: &Path,
    argv0: &OsStr,
    msg: &OsStr,
    env: &[(OsString, OsString)],
    dir: &Path,
) -> Result<u8, String> {
    use std::os::unix::process::CommandExt as _;
    let read =
        std::fs::read(msg).map_err(|e| format!("cannot read {}: {e}", Path::new(msg).display()))?;
    {
        use std::os::unix::fs::DirBuilderExt as _;
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(format!("cannot make {}: {e}", dir.display()));
            }
            _ => {}
        }
    }
    let copy = dir.join("COMMIT_EDITMSG");
    write_new(&copy, &read)?;
    // Named to the hook through an fd it inherits: a path would put the
    // directory's secret name in its command line, which any process can
    // read (the environment it has is not: the hook is not dumpable).
    let d = std::fs::File::open(dir).map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
    nix::fcntl::fcntl(
        &d,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .map_err(|e| format!("{}: {e}", dir.display()))?;
    let by_fd = format!(
        "/proc/self/fd/{}/COMMIT_EDITMSG",
        std::os::fd::AsRawFd::as_raw_fd(&d)
    );
    let status = std::process::Command::new(path)
        .arg0(argv0)
        .arg(&by_fd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .status()
        .map_err(|e| format!("cannot run the hook: {e}"))?;
    drop(d);
    let code = match status.code() {
        Some(c) => u8::try_from(c).unwrap_or(1),
        None => 1,
    };
    if code != 0 {
        return Ok(code);
    }
    let passed =
        std::fs::read(&copy).map_err(|e| format!("cannot read {}: {e}", copy.display()))?;
    // Kept by the broker's root process, where no program git starts can
    // rewrite it; the copy here only tells sbx-git-client to ask the guard.
    let private = dir
        .as_os_str()
        .as_bytes()
        .strip_suffix(b".msg")
        .map(OsStr::from_bytes)
        .ok_or("not a private directory")?;
    crate::broker::keep_approved(private, &passed)?;
    write_new(&dir.join(APPROVED), &passed)?;
    // git re-reads this path: what passed, not what is there now.
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(msg)
        .and_then(|mut f| f.write_all(&passed))
        .map_err(|e| format!("cannot write {}: {e}", Path::new(msg).display()))?;
    Ok(0)
}

fn write_new(p: &Path, bytes: &[u8]) -> Result<(), String> {
    let _ = std::fs::remove_file(p);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(p)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| format!("cannot write {}: {e}", p.display()))
}

/// git's `stripspace`: trailing whitespace off each line, runs of blank
/// lines made one, none first or last; with `comments`, lines starting
/// with `#` dropped (core.commentChar may only be `#` or `auto`).
fn stripspace(msg: &[u8], comments: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut blank = false;
    for line in msg.split(|b| *b == b'\n') {
        if comments && line.first() == Some(&b'#') {
            continue;
        }
        let end = line
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(0, |i| i + 1);
        let line = &line[..end];
        if line.is_empty() {
            blank = !out.is_empty();
            continue;
        }
        if blank {
            out.push(b'\n');
            blank = false;
        }
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out
}

/// Everything before git's scissors line (`commit -v`, `--cleanup=scissors`).
fn cut(msg: &[u8]) -> &[u8] {
    const SCISSORS: &[u8] = b"# ------------------------ >8 ------------------------\n";
    let mut at = 0;
    for line in msg.split_inclusive(|b| *b == b'\n') {
        if line == SCISSORS || line == &SCISSORS[..SCISSORS.len() - 1] {
            return &msg[..at];
        }
        at += line.len();
    }
    msg
}

/// Is `committed` (the commit's message) what git's cleanup makes of
/// `approved` (the file commit-msg passed), in any cleanup mode: strip,
/// whitespace, scissors, or verbatim (compared without trailing
/// whitespace and blank-line runs, which the hook saw either way)?
pub fn matches(committed: &[u8], approved: &[u8]) -> bool {
    let c = stripspace(committed, false);
    [approved, cut(approved)]
        .iter()
        .any(|a| stripspace(a, false) == c || stripspace(a, true) == c)
}

/// The message of a raw commit object (after its headers).
fn message(raw: &[u8]) -> &[u8] {
    raw.windows(2)
        .position(|w| w == b"\n\n")
        .map_or(&[][..], |i| &raw[i + 2..])
}

/// The `(old, new)` of each line of a `prepared` input that moves HEAD or
/// a branch onto a commit.
pub fn head_moves(stdin: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    stdin
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|line| {
            let f: Vec<&[u8]> = line.splitn(3, |b| *b == b' ').collect();
            let [old, new, name] = f[..] else {
                return None;
            };
            ((name == b"HEAD" || name.starts_with(b"refs/heads/"))
                && old != new
                && !new.starts_with(b"ref:")
                && !new.iter().all(|b| *b == b'0'))
            .then_some((old, new))
        })
}

/// reference-transaction `prepared` of a `git commit` under a private index:
/// the commit HEAD (or its branch) moves to must carry the message
/// commit-msg passed. No approved message (no commit-msg ran): nothing to
/// compare, unless the repository has the hook.
///
/// Returns the commits this call approved: each new commit compared with
/// a message commit-msg passed, or, for `git commit` in a repository
/// without commit-msg, the one its pre-commit passed on the private index
/// (the ledger's entries, `crate::ledger`). Empty without a private index.
pub fn check_commit(real: &Git, stdin: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let committed = env
        .iter()
        .any(|(k, v)| k == crate::hooks::COMMIT_ENV && v == "1");
    let Some(dir) = private_dir(&env) else {
        return Ok(Vec::new());
    };
    let private = env
        .iter()
        .find(|(k, _)| k == crate::index::PRIVATE_VAR)
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    if committed {
        let pin = crate::broker::pin_path(&env, &private)
            .ok_or("no place where the broker keeps the commit pre-commit compared with")?;
        let has_pre_commit = std::env::var_os(crate::hooks::TRUSTED_ENV)
            .is_some_and(|t| crate::hooks::executable(&Path::new(&t).join("pre-commit")));
        crate::ledger::check_pinned(&pin, stdin, has_pre_commit)?;
    }
    let mut news: Vec<&[u8]> = Vec::new();
    for (_, new) in head_moves(stdin) {
        if !news.contains(&new) {
            news.push(new);
        }
    }
    // The root process's copy (`broker::keep_approved`): the one in the
    // private directory is anyone's with git's group.
    let kept = crate::broker::approved_path(&env, &private)
        .ok_or("no place where the broker keeps what commit-msg passed")?;
    let approved = match std::fs::read(&kept) {
        Ok(a) => a,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let has_hook = std::env::var_os(crate::hooks::TRUSTED_ENV)
                .is_some_and(|t| crate::hooks::executable(&Path::new(&t).join("commit-msg")));
            if has_hook {
                if committed {
                    return Err("the commit's message was not passed by commit-msg".into());
                }
                return Ok(Vec::new());
            }
            // pre-commit alone, on the private index git commits from:
            // `git commit` always runs it; a merge or am says it did.
            let marked = std::fs::remove_file(dir.join(PRE_COMMIT_PASSED)).is_ok();
            if !(committed || marked) {
                return Ok(Vec::new());
            }
            // The mark is anyone's with git's group (a smudge filter a
            // fast-forward's checkout runs left one, and the commit of
            // MARKER fast-forwarded to passed as the merge's): it stands
            // only for a merge commit, whose tree pre-merge-commit saw.
            if committed {
                return Ok(news.iter().map(|n| n.to_vec()).collect());
            }
            let mut merges = Vec::new();
            for &new in &news {
                if crate::ledger::parse_commit(&made(real, new)?).0.len() > 1 {
                    merges.push(new.to_vec());
                }
            }
            return Ok(merges);
        }
        Err(e) => return Err(format!("cannot read what commit-msg passed: {e}")),
    };
    if news.is_empty() {
        return Ok(Vec::new());
    }
    for &new in &news {
        if !matches(message(&made(real, new)?), &approved) {
            return Err(format!(
                "{}'s message is not the one commit-msg passed (.git/COMMIT_EDITMSG changed after the hook read it)",
                String::from_utf8_lossy(&new[..new.len().min(12)])
            ));
        }
    }
    // Used up: a sequencer's later commits in the same call (its picks,
    // which no commit-msg saw) are not compared with it.
    let _ = std::fs::remove_file(dir.join(APPROVED));
    let sock = crate::broker::socket_path(&env).ok_or("no broker")?;
    crate::broker::take_approved(&sock, &private)?;
    Ok(news.iter().map(|n| n.to_vec()).collect())
}

/// The raw object of commit `new`, which git made in this call.
fn made(real: &Git, new: &[u8]) -> Result<Vec<u8>, String> {
    crate::hooks::git_output(
        real,
        &[
            OsStr::new("cat-file"),
            OsStr::new("commit"),
            OsStr::from_bytes(new),
        ],
    )
    .ok_or_else(|| "cannot read the commit git made".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_matches_what_git_cleanup_makes_of_the_approved_one() {
        let approved = b"JIRA-1 ok  \n\n\n# Please enter the message\nbody\n\n# ------------------------ >8 ------------------------\ndiff\n";
        for committed in [
            &b"JIRA-1 ok\n\nbody\n"[..],
            b"JIRA-1 ok\n\n# Please enter the message\nbody\n",
            b"JIRA-1 ok  \n\n\n# Please enter the message\nbody\n\n# ------------------------ >8 ------------------------\ndiff\n",
        ] {
            assert!(matches(committed, approved), "{committed:?}");
        }
        for committed in [
            &b"no ticket\n"[..],
            b"JIRA-1 ok\n\nbody\nmore\n",
            b"JIRA-1 ok\n",
            b"no ticket\n\nJIRA-1 ok\n\nbody\n",
        ] {
            assert!(!matches(committed, approved), "{committed:?}");
        }
    }

    #[test]
    fn the_message_follows_the_headers() {
        let raw = b"tree 1\nparent 2\nauthor a\ncommitter c\n\nJIRA-1 x\n\nbody\n";
        assert_eq!(message(raw), b"JIRA-1 x\n\nbody\n");
    }
}
