//! The index under the workspace's `.git` is the agent's to write in bind
//! mode (git's staging area), and the host's git writes what an index
//! entry names without checking the name again: the agent wrote an index
//! by hand with an entry `../canary` (git's own commands refuse such a
//! name), and the user's `git restore .` or `git checkout -- .` on the
//! host, to throw the agent's changes away, wrote the agent's bytes outside
//! the checkout as root (`../../../root/.bashrc`, or `.git/hooks/pre-commit`
//! inside it). The watcher (masks.rs) hands every index and shared index
//! it sees written under `.git` to [`check`]: one holding a name git
//! would refuse to write (`..`, `.`, `.git` in any case, an empty
//! component, a leading `/`, a NUL) has every process of the agent killed
//! and is moved aside to `index.sbx-refused`, so the host's git no longer
//! reads it.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::api::FsId;

/// Whether `path` is an index file of a git dir under the workspace
/// `root`'s `.git` (the main one, a submodule's), or a split index's
/// shared part.
pub fn is_index(root: &Path, path: &Path) -> bool {
    let Ok(rel) = path.strip_prefix(root) else {
        return false;
    };
    let Some(name) = rel.file_name().and_then(OsStr::to_str) else {
        return false;
    };
    rel.starts_with(".git")
        && !rel.starts_with(".git/objects")
        && (name == "index" || name.starts_with("sharedindex."))
}

/// One entry of an index: its name and mode.
struct Entry {
    name: Vec<u8>,
    mode: u32,
}

/// An index's entries as git reads them: None when the file is no index
/// git reads (wrong signature or version: git refuses it too); Err when
/// git would read it differently (a name running past the end, an
/// extended entry in version 2). `hash_len`: 20 (SHA-1) or 32 (SHA-256).
fn entries(data: &[u8], hash_len: usize) -> Option<Result<Vec<Entry>, ()>> {
    let u32_at = |o: usize| -> Option<u32> {
        data.get(o..o + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    if data.get(..4) != Some(b"DIRC") {
        return None;
    }
    let version = u32_at(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = u32_at(8)?;
    let mut out = Vec::new();
    let mut pos = 12usize;
    let mut prev: &[u8] = &[];
    // Each entry's offset, and whether its name stands alone (v4: strips
    // nothing of the previous one), for the offset table below.
    let mut starts: Vec<(usize, bool)> = Vec::new();
    for _ in 0..count {
        let mut whole = true;
        starts.push((pos, true));
        let flags_at = pos + 40 + hash_len;
        let Some(f) = data.get(flags_at..flags_at + 2) else {
            return Some(Err(()));
        };
        let flags = u16::from_be_bytes([f[0], f[1]]);
        let mode = u32_at(pos + 24).unwrap_or(0);
        let extended = flags & 0x4000 != 0;
        if extended && version < 3 {
            return Some(Err(()));
        }
        let mut name_at = flags_at + 2 + if extended { 2 } else { 0 };
        let flag_len = usize::from(flags & 0x0fff);
        let name: Vec<u8>;
        if version == 4 {
            // Prefix compression: strip N bytes of the previous name, then
            // a NUL-terminated suffix (git's varint).
            let mut strip = 0usize;
            loop {
                let Some(&c) = data.get(name_at) else {
                    return Some(Err(()));
                };
                name_at += 1;
                strip = (strip << 7) | usize::from(c & 0x7f);
                if c & 0x80 == 0 {
                    break;
                }
                strip += 1;
                if strip > 1 << 24 {
                    return Some(Err(()));
                }
            }
            whole = strip == prev.len();
            let Some(copy) = prev.len().checked_sub(strip) else {
                return Some(Err(()));
            };
            let rest = data.get(name_at..).unwrap_or_default();
            let suffix_len = if flag_len == 0x0fff {
                match rest.iter().position(|b| *b == 0) {
                    Some(n) => n,
                    None => return Some(Err(())),
                }
            } else {
                match flag_len.checked_sub(copy) {
                    Some(n) if n < rest.len() => n,
                    _ => return Some(Err(())),
                }
            };
            let mut n = prev[..copy].to_vec();
            n.extend_from_slice(&rest[..suffix_len]);
            name = n;
            pos = name_at + suffix_len + 1;
        } else {
            let rest = data.get(name_at..).unwrap_or_default();
            let len = if flag_len == 0x0fff {
                match rest.iter().position(|b| *b == 0) {
                    Some(n) => n,
                    None => return Some(Err(())),
                }
            } else {
                flag_len
            };
            if len >= rest.len() {
                return Some(Err(()));
            }
            name = rest[..len].to_vec();
            pos = (name_at - pos + len + 8) / 8 * 8 + pos;
        }
        if let Some(last) = starts.last_mut() {
            last.1 = whole;
        }
        out.push(Entry { name, mode });
        prev = &out[out.len() - 1].name;
    }
    if extensions(data, hash_len, pos, &starts, &mut out).is_none() {
        return Some(Err(()));
    }
    Some(Ok(out))
}

/// Read the extensions between the entries' end `at` and the trailing
/// hash as git does; None when git would read the index differently from
/// the walk above. `REUC` (resolve-undo) names are added to `out` (git's
/// `checkout -m` puts them back in the index); `EOIE` must point at `at`
/// and `IEOT`'s blocks at entries, in order, each standing alone: git's
/// threaded load reads names from those offsets, and a table pointing
/// elsewhere had it read names this check never saw. `TREE`, `UNTR`,
/// `FSMN`, `link` and `sdir` name nothing git writes (docs/security.md).
fn extensions(
    data: &[u8],
    hash_len: usize,
    mut at: usize,
    starts: &[(usize, bool)],
    out: &mut Vec<Entry>,
) -> Option<()> {
    let entries_end = at;
    let end = data.len().checked_sub(hash_len)?;
    let u32_in = |d: &[u8], o: usize| -> Option<usize> {
        d.get(o..o + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    while at < end {
        let sig = data.get(at..at + 4)?;
        let size = u32_in(data, at + 4)?;
        let body = data.get(at + 8..(at + 8).checked_add(size)?)?;
        if at + 8 + size > end {
            return None;
        }
        match sig {
            b"EOIE" if u32_in(body, 0)? != entries_end => return None,
            b"IEOT" => {
                if u32_in(body, 0)? != 1 || (body.len() - 4) % 8 != 0 {
                    return None;
                }
                let mut k = 0usize;
                for b in body[4..].chunks(8) {
                    let (offset, nr) = (u32_in(b, 0)?, u32_in(b, 4)?);
                    if starts.get(k) != Some(&(offset, true)) {
                        return None;
                    }
                    k = k.checked_add(nr)?;
                }
                if k != starts.len() {
                    return None;
                }
            }
            b"REUC" => {
                let mut i = 0usize;
                while i < body.len() {
                    let n = body[i..].iter().position(|b| *b == 0)?;
                    let name = body[i..i + n].to_vec();
                    i += n + 1;
                    let mut objects = 0;
                    for _ in 0..3 {
                        let m = body.get(i..)?.iter().position(|b| *b == 0)?;
                        let mode = std::str::from_utf8(&body[i..i + m]).ok()?;
                        if u32::from_str_radix(mode, 8).ok()? != 0 {
                            objects += 1;
                        }
                        i += m + 1;
                    }
                    i += objects * hash_len;
                    out.push(Entry { name, mode: 0 });
                }
                if i != body.len() {
                    return None;
                }
            }
            _ => {}
        }
        at += 8 + size;
    }
    (at == end).then_some(())
}

/// The first entry of the index `data` whose name git would refuse to
/// write, escaped for one line; None when every name is one git writes
/// beneath the work tree, or when the file is no index git reads.
/// A structure git would read differently is refused.
pub fn bad_entry(data: &[u8], hash_len: usize) -> Option<String> {
    let Ok(es) = entries(data, hash_len)? else {
        return Some("(an entry git would read past its end)".to_owned());
    };
    es.iter()
        .find(|e| !name_ok(&e.name, e.mode & 0o170000 == 0o040000))
        .map(|e| sbx_core::sanitize::field(&String::from_utf8_lossy(&e.name)).into_owned())
}

/// A name git writes beneath the work tree: relative, no empty, `.`,
/// `..` or `.git` (any case) component, no NUL; or no name at all (a
/// split index's replacement entry). A sparse index's
/// directory entry ends with `/`.
fn name_ok(name: &[u8], dir: bool) -> bool {
    let name = if dir {
        name.strip_suffix(b"/").unwrap_or(name)
    } else {
        name
    };
    // A split index stores an entry that replaces a shared one with no
    // name at all (git writes nothing for it).
    name.is_empty()
        || (!name.contains(&0)
            && name.split(|b| *b == b'/').all(|c| {
                !c.is_empty() && c != b"." && c != b".." && !c.eq_ignore_ascii_case(b".git")
            }))
}

/// The hash length of the workspace's repository: 32 for SHA-256, else
/// 20. Read from its `.git/config`, which the host holds read-only.
fn hash_len(root: &Path) -> usize {
    let sha256 = std::fs::read_to_string(root.join(".git/config"))
        .map(|c| {
            let c = c.to_ascii_lowercase();
            c.contains("objectformat") && c.contains("sha256")
        })
        .unwrap_or(false);
    if sha256 { 32 } else { 20 }
}

/// The bytes of the index `rel`, opened beneath `r` through no link;
/// None when missing or unreadable.
fn read_index(r: &sbx_sys::beneath::Root, rel: &Path) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let f = r.open_read(rel).ok()?;
    let mut data = Vec::new();
    // An index larger than this is no index the agent's git made.
    f.take(1 << 30).read_to_end(&mut data).ok()?;
    Some(data)
}

/// Check the index at `path` (under the workspace `root`); when it holds
/// a name git would write outside the checkout or into a `.git`, kill
/// every process of the agent (`uid`), so none swaps it back, and move
/// it aside as the agent (whose directory it is). Returns what was done.
pub fn check(root: &Path, path: &Path, uid: u32, gid: u32) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let r = sbx_sys::beneath::Root::open(root).ok()?;
    let hash = hash_len(root);
    let bad = |r: &sbx_sys::beneath::Root| bad_entry(&read_index(r, rel)?, hash);
    let name = bad(&r)?;
    Some(refuse(
        &r,
        rel,
        uid,
        gid,
        &format!("an entry {name} git would write outside the checkout"),
        |r| bad(r).is_some(),
    ))
}

/// Move the file `rel` (an index, a todo list) aside, kill every process
/// of the agent and move it aside again if `still_bad` (one the agent put
/// back in between); what was done, on one line.
pub(crate) fn refuse(
    r: &sbx_sys::beneath::Root,
    rel: &Path,
    uid: u32,
    gid: u32,
    why: &str,
    still_bad: impl Fn(&sbx_sys::beneath::Root) -> bool,
) -> String {
    // Aside first: killing the agent's main process ends the sandbox.
    let moved = move_aside(r, rel, uid, gid);
    kill_uid(uid);
    let again = still_bad(r).then(|| move_aside(r, rel, uid, gid));
    format!(
        "{}: {why}: the agent's processes were killed and the file {}",
        rel.display(),
        match again.unwrap_or(moved) {
            Ok(()) => "moved aside (.sbx-refused)".to_owned(),
            Err(e) => format!("could not be moved aside: {e}"),
        }
    )
}

/// How deep submodules in submodules are followed.
const GITLINK_DEPTH: usize = 8;

/// The gitlinks (submodules) the workspace's indexes hold, and the first
/// one refused: `(index, why)`.
#[derive(Debug, Default)]
pub struct Gitlinks {
    /// Each gitlink's work-tree path, workspace-relative.
    pub paths: Vec<PathBuf>,
    refused: Option<(PathBuf, String)>,
}

impl Gitlinks {
    /// Whether a change at `path` (under `root`) can change what a
    /// gitlink's `.git` names: it is that `.git`, or a directory above a
    /// gitlink (renamed into place).
    pub fn touched_by(&self, root: &Path, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(root) else {
            return false;
        };
        self.paths
            .iter()
            .any(|g| g.starts_with(rel) || rel == g.join(".git"))
    }
}

/// Every gitlink in the workspace's index, and in the index of each
/// submodule git dir one of them names, followed down; the host's plain
/// `git status` (and `git diff`) runs `git status` inside each populated
/// one, which reads that repository's configuration (a `core.fsmonitor`
/// runs). A gitlink's `.git` must be missing (not checked out) or a file
/// naming a git dir inside the workspace whose `config` is on a read-only
/// mount: one the host held when the sandbox started (gitpins.rs). A
/// `.git` directory, a link, or a git dir the agent made is refused.
pub fn gitlinks(root: &Path) -> Gitlinks {
    let mut out = Gitlinks::default();
    let Ok(r) = sbx_sys::beneath::Root::open(root) else {
        return out;
    };
    let hash = hash_len(root);
    let mut todo = vec![(PathBuf::from(".git/index"), PathBuf::new(), 0usize)];
    while let Some((index, tree, depth)) = todo.pop() {
        let Some(data) = read_index(&r, &index) else {
            continue;
        };
        let Some(Ok(es)) = entries(&data, hash) else {
            continue;
        };
        for e in es.iter().filter(|e| e.mode & 0o170000 == 0o160000) {
            use std::os::unix::ffi::OsStrExt as _;
            let path = tree.join(OsStr::from_bytes(&e.name));
            match held_git_dir(&r, &path) {
                Ok(None) => {}
                Ok(Some(gd)) if depth < GITLINK_DEPTH => {
                    todo.push((gd.join("index"), path.clone(), depth + 1));
                }
                Ok(Some(_)) => {}
                Err(why) => {
                    let shown = sbx_core::sanitize::field(&path.to_string_lossy()).into_owned();
                    out.refused = Some((index.clone(), format!("submodule {shown}: {why}")));
                    out.paths.push(path);
                    return out;
                }
            }
            out.paths.push(path);
        }
    }
    out
}

/// The git dir (workspace-relative) the gitlink at `path` has checked
/// out, when the host holds its configuration; None when it is not
/// checked out; Err saying why the host's git must not go into it.
fn held_git_dir(r: &sbx_sys::beneath::Root, path: &Path) -> Result<Option<PathBuf>, String> {
    use sbx_sys::beneath::Kind;
    let dotgit = path.join(".git");
    let fd = match r.open_path(&dotgit) {
        Ok(fd) => fd,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None);
        }
        Err(e) => {
            return Err(format!(
                "its .git cannot be opened beneath the workspace through no link ({e})"
            ));
        }
    };
    match sbx_sys::beneath::kind(&fd) {
        Ok(Kind::File) => {}
        Ok(Kind::Dir) => return Err("a repository of its own (a .git directory), whose configuration the host's git would read".into()),
        _ => return Err("its .git is a link or no plain file".into()),
    }
    let mut text = Vec::new();
    {
        use std::io::Read as _;
        let f = r.open_read(&dotgit).map_err(|e| e.to_string())?;
        f.take(4096)
            .read_to_end(&mut text)
            .map_err(|e| e.to_string())?;
    }
    let text = String::from_utf8_lossy(&text);
    let Some(named) = text.lines().next().and_then(|l| l.strip_prefix("gitdir: ")) else {
        return Err("its .git file names no git dir".into());
    };
    let named = Path::new(named.trim_end());
    if named.is_absolute() {
        return Err("its .git file names an absolute git dir (git writes a relative one)".into());
    }
    // `path` was opened beneath the workspace through no link, so its
    // lexical form is the directory git reads. Opened in that form: a
    // `..` in an openat2 walk fails with EAGAIN whenever any rename or
    // mount on the machine races it, and a busy machine made that a
    // false refusal of the user's own submodule.
    let raw = path.join(named);
    let not_held = || {
        format!(
            "its .git file names {}, which is no git dir the host holds read-only (one made in the sandbox)",
            sbx_core::sanitize::field(&named.to_string_lossy())
        )
    };
    let mut gd = PathBuf::new();
    for c in raw.components() {
        match c {
            std::path::Component::ParentDir if !gd.pop() => return Err(not_held()),
            std::path::Component::Normal(n) => gd.push(n),
            _ => {}
        }
    }
    let held = r.open_path(&gd.join("config")).is_ok_and(|fd| {
        matches!(sbx_sys::beneath::kind(&fd), Ok(Kind::File)) && sbx_sys::fd_on_readonly_mount(&fd)
    });
    if !held {
        return Err(not_held());
    }
    Ok(Some(gd))
}

/// Check every gitlink ([`gitlinks`]); when one is refused, kill every
/// process of the agent and move the index naming it aside. The gitlinks
/// found, and what was done.
pub fn check_gitlinks(root: &Path, uid: u32, gid: u32) -> (Gitlinks, Option<String>) {
    let found = gitlinks(root);
    let Some((index, why)) = found.refused.clone() else {
        return (found, None);
    };
    let Ok(r) = sbx_sys::beneath::Root::open(root) else {
        return (found, None);
    };
    let done = refuse(&r, &index, uid, gid, &why, |_| {
        gitlinks(root).refused.is_some_and(|(i, _)| i == index)
    });
    (found, Some(done))
}

/// Rename the index `rel` to `<name>.sbx-refused` as the agent (whose
/// directory `.git` is; the guest has no DAC override).
fn move_aside(r: &sbx_sys::beneath::Root, rel: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    let _id = FsId::set(uid, gid);
    let name = rel.file_name().unwrap_or_default();
    let mut aside = name.to_os_string();
    aside.push(".sbx-refused");
    r.dir(rel.parent().unwrap_or(Path::new("")))
        .and_then(|d| d.replace(name, &aside))
}

/// A symlink the agent made under the workspace's `.git`: the host's git
/// follows them. `.git/worktrees -> /root` (or a link inside
/// `.git/worktrees`) had the user's `git gc` or `git worktree prune`
/// delete everything below `/root`, recursively, as a worktree admin dir
/// without a `gitdir`; `.git/logs/HEAD -> /root/.bashrc` had every ref
/// update append a line to it (`checkout: moving from main to
/// x$(cmd)`, the agent's branch name). A FIFO there (`packed-refs`)
/// hung every git on the host, `sbx-run start`'s own included. git
/// itself makes neither there.
/// One found is removed as the agent and every process of the agent is
/// killed; a link on a read-only mount (`.git/hooks`, held for the host)
/// is the host's own and left alone. Returns what was done.
pub fn check_link(root: &Path, path: &Path, uid: u32, gid: u32) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    if !rel.starts_with(".git") || rel == Path::new(".git") {
        return None;
    }
    let parent = rel.parent()?;
    let r = sbx_sys::beneath::Root::open(root).ok()?;
    let d = r.dir(parent).ok()?;
    let name = rel.file_name()?;
    // A FIFO, not a socket: git's own fsmonitor daemon keeps one there.
    let odd = |k| match k {
        sbx_sys::beneath::Kind::Symlink => true,
        sbx_sys::beneath::Kind::Other => {
            use std::os::unix::fs::FileTypeExt as _;
            std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
        }
        _ => false,
    };
    if !odd(d.kind(name).ok()??) || sbx_sys::on_readonly_mount(&root.join(parent)) {
        return None;
    }
    let unlink = || {
        let _id = FsId::set(uid, gid);
        d.unlink(name)
    };
    let first = unlink();
    kill_uid(uid);
    let last = match d.kind(name) {
        Ok(Some(k)) if odd(k) => unlink(),
        _ => first,
    };
    Some(format!(
        "{}: a symlink or FIFO under .git, which the host's git would follow or hang on: the agent's processes were killed and it was {}",
        rel.display(),
        match last {
            Ok(()) => "removed".to_owned(),
            Err(e) => format!("not removed: {e}"),
        }
    ))
}

/// Every symlink under the workspace's `.git` now (each checked by
/// [`check_link`]), as the watcher starts: one made while no watcher ran.
pub fn links_in_git(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.join(".git")];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            seen += 1;
            if seen > 200_000 {
                return out;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_symlink() || std::os::unix::fs::FileTypeExt::is_fifo(&t) => {
                    out.push(e.path())
                }
                _ => {}
            }
        }
    }
    out
}

/// SIGKILL every process whose real, effective or saved uid is `uid`,
/// until none is left (a fork in between is caught by the next pass).
pub(crate) fn kill_uid(uid: u32) {
    use nix::sys::signal::{Signal, kill};
    for _ in 0..50 {
        let mut found = false;
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return;
        };
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
                continue;
            };
            let theirs = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .is_some_and(|ids| {
                    ids.split_whitespace()
                        .take(3)
                        .any(|i| i.parse::<u32>() == Ok(uid))
                });
            if theirs {
                found = true;
                let _ = kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        if !found {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &[u8], mode: u32, version: u32, prev: &[u8]) -> Vec<u8> {
        let mut e = Vec::new();
        for v in [0, 0, 0, 0, 0, 0, mode, 0, 0, 0] {
            e.extend_from_slice(&u32::to_be_bytes(v));
        }
        e.extend_from_slice(&[0xab; 20]);
        let len = name.len().min(0xfff) as u16;
        e.extend_from_slice(&len.to_be_bytes());
        if version == 4 {
            let common = prev.iter().zip(name).take_while(|(a, b)| a == b).count();
            let strip = prev.len() - common;
            assert!(strip < 128);
            e.push(strip as u8);
            e.extend_from_slice(&name[common..]);
            e.push(0);
        } else {
            e.extend_from_slice(name);
            let pad = 8 - (62 + name.len()) % 8;
            e.extend(std::iter::repeat_n(0, pad));
        }
        e
    }

    fn index(version: u32, names: &[&[u8]]) -> Vec<u8> {
        let mut d = b"DIRC".to_vec();
        d.extend_from_slice(&version.to_be_bytes());
        d.extend_from_slice(&(names.len() as u32).to_be_bytes());
        let mut prev: &[u8] = b"";
        for n in names {
            d.extend(entry(n, 0o100644, version, prev));
            prev = n;
        }
        d.extend_from_slice(&[0; 20]);
        d
    }

    #[test]
    fn names_git_would_write_elsewhere_are_found_in_every_version() {
        for v in [2, 3, 4] {
            let good: &[&[u8]] = &[b".gitignore", b"a", b"a/b.git", b"a/bb/c", b"z..z"];
            assert_eq!(bad_entry(&index(v, good), 20), None, "v{v}");
            for bad in [
                &b"../canary"[..],
                b"a/../../x",
                b".git/hooks/pre-commit",
                b"sub/.GIT/config",
                b"/etc/passwd",
                b"a//b",
                b"./a",
                b"a/x\0y",
            ] {
                let mut names: Vec<&[u8]> = good.to_vec();
                names.insert(2, bad);
                assert!(
                    bad_entry(&index(v, &names), 20).is_some(),
                    "v{v} {:?}",
                    String::from_utf8_lossy(bad)
                );
            }
        }
    }

    #[test]
    fn what_git_itself_refuses_is_left_to_git() {
        assert_eq!(bad_entry(b"", 20), None);
        assert_eq!(bad_entry(b"DIRX\0\0\0\x02\0\0\0\0", 20), None);
        let mut d = index(5, &[b"../x"]);
        assert_eq!(bad_entry(&d, 20), None);
        // Truncated in the middle of a name: refused, not skipped.
        d = index(2, &[b"a", b"b/c/d"]);
        d.truncate(12 + 64 + 62 + 2);
        assert!(bad_entry(&d, 20).is_some());
    }

    /// git in `dir` with an identity; its output, whether it failed or not.
    fn git_in(dir: &Path, args: &[&str]) -> std::process::Output {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=a", "-c", "user.email=a@b"])
            .args(args)
            .output()
            .unwrap()
    }

    /// [`git_in`], required to succeed; its stdout.
    fn git_ok(dir: &Path, args: &[&str]) -> String {
        let o = git_in(dir, args);
        assert!(o.status.success(), "{args:?}: {o:?}");
        String::from_utf8(o.stdout).unwrap()
    }

    /// Indexes git itself wrote, in each version, with long and nested
    /// names and an extended (intent-to-add) entry, pass.
    #[test]
    fn indexes_git_writes_pass() {
        let t = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| git_ok(t.path(), args);
        git(&["init", "-q"]);
        let long = "d/".repeat(1100) + "f";
        for f in ["a", "b/c", "b/cc/d", ".x..y", long.as_str()] {
            let p = t.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, f).unwrap();
        }
        git(&["add", "a", "b", ".x..y", "d"]);
        std::fs::write(t.path().join("new"), "n").unwrap();
        git(&["add", "-N", "new"]);
        for v in ["2", "3", "4"] {
            git(&["update-index", "--index-version", v]);
            let d = std::fs::read(t.path().join(".git/index")).unwrap();
            // An extended entry makes version 2 a 3.
            assert!(d[7] >= v.parse::<u8>().unwrap(), "{:?}", &d[4..8]);
            assert_eq!(bad_entry(&d, 20), None, "v{v}");
        }
        // A split index: the entry replacing a shared one has no name.
        git(&["update-index", "--index-version", "2", "--split-index"]);
        std::fs::write(t.path().join("a"), "changed").unwrap();
        git(&["add", "a"]);
        for e in std::fs::read_dir(t.path().join(".git")).unwrap().flatten() {
            let n = e.file_name().into_string().unwrap();
            if n == "index" || n.starts_with("sharedindex.") {
                let d = std::fs::read(e.path()).unwrap();
                assert_eq!(bad_entry(&d, 20), None, "{n}");
            }
        }
    }

    /// Indexes git itself writes with every extension it has: the
    /// offset tables of a threaded load (over 10000 entries), resolve-undo
    /// of a conflict, the untracked cache, a cache tree; v2 to v4.
    #[test]
    fn indexes_with_extensions_git_writes_pass() {
        use std::io::Write as _;
        let t = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| git_ok(t.path(), args);
        git(&["init", "-q", "-b", "main"]);
        std::fs::write(t.path().join("c"), "1").unwrap();
        git(&["add", "c"]);
        git(&["commit", "-qm", "1"]);
        git(&["checkout", "-qb", "b"]);
        std::fs::write(t.path().join("c"), "2").unwrap();
        git(&["commit", "-qam", "2"]);
        git(&["checkout", "-q", "main"]);
        std::fs::write(t.path().join("c"), "3").unwrap();
        git(&["commit", "-qam", "3"]);
        // A conflict, resolved: resolve-undo records it.
        assert!(!git_in(t.path(), &["merge", "-q", "b"]).status.success());
        git(&["add", "c"]);
        let blob = git(&["hash-object", "-w", "c"]);
        let mut info = String::new();
        for i in 0..25_000 {
            info.push_str(&format!("100644 {} 0\td{}/f{i:05}\n", blob.trim(), i % 7));
        }
        let mut child = std::process::Command::new("git")
            .arg("-C")
            .arg(t.path())
            .args(["update-index", "--index-info"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(info.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success());
        git(&["update-index", "--untracked-cache"]);
        git(&["status", "-s", "-uall"]);
        git(&["write-tree"]);
        let mut seen = std::collections::BTreeSet::new();
        for v in ["2", "3", "4"] {
            git(&[
                "-c",
                "index.threads=4",
                "-c",
                "index.recordEndOfIndexEntries=true",
                "-c",
                "index.recordOffsetTable=true",
                "update-index",
                "--index-version",
                v,
            ]);
            let d = std::fs::read(t.path().join(".git/index")).unwrap();
            for sig in [&b"EOIE"[..], b"IEOT", b"REUC", b"UNTR", b"TREE"] {
                if d.windows(4).any(|w| w == sig) {
                    seen.insert(String::from_utf8_lossy(sig).into_owned());
                }
            }
            assert_eq!(bad_entry(&d, 20), None, "v{v}");
        }
        assert_eq!(seen.len(), 5, "{seen:?}");
    }

    /// An offset table pointing elsewhere than the entries, an end mark
    /// elsewhere than their end, or a resolve-undo name git would write
    /// outside the checkout are refused.
    #[test]
    fn extensions_git_would_read_differently_are_refused() {
        let with = |sig: &[u8], body: &[u8]| {
            let mut d = index(2, &[b"a", b"b"]);
            d.truncate(d.len() - 20);
            d.extend_from_slice(sig);
            d.extend_from_slice(&(body.len() as u32).to_be_bytes());
            d.extend_from_slice(body);
            d.extend_from_slice(&[0; 20]);
            d
        };
        let be = |v: &[u32]| v.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
        let end = (12 + 64 * 2) as u32;
        let mut eoie = be(&[end]);
        eoie.extend_from_slice(&[0; 20]);
        assert_eq!(bad_entry(&with(b"EOIE", &eoie), 20), None);
        let mut eoie = be(&[end - 8]);
        eoie.extend_from_slice(&[0; 20]);
        assert!(bad_entry(&with(b"EOIE", &eoie), 20).is_some());
        assert_eq!(bad_entry(&with(b"IEOT", &be(&[1, 12, 1, 76, 1])), 20), None);
        assert!(bad_entry(&with(b"IEOT", &be(&[1, 12, 1, 80, 1])), 20).is_some());
        assert!(bad_entry(&with(b"IEOT", &be(&[1, 12, 1])), 20).is_some());
        let reuc = |name: &[u8]| {
            let mut b = name.to_vec();
            b.extend_from_slice(b"\x00100644\x000\x000\x00");
            b.extend_from_slice(&[1; 20]);
            b
        };
        assert_eq!(bad_entry(&with(b"REUC", &reuc(b"c")), 20), None);
        assert!(bad_entry(&with(b"REUC", &reuc(b"../x")), 20).is_some());
        // An extension running past the trailing hash.
        let mut d = with(b"ZZZZ", b"1234");
        d.truncate(d.len() - 2);
        assert!(bad_entry(&d, 20).is_some());
    }

    #[test]
    fn index_files_are_those_under_git() {
        let r = Path::new("/w/r");
        assert!(is_index(r, Path::new("/w/r/.git/index")));
        assert!(is_index(r, Path::new("/w/r/.git/modules/s/index")));
        assert!(is_index(r, Path::new("/w/r/.git/sharedindex.abc")));
        assert!(!is_index(r, Path::new("/w/r/src/index")));
        assert!(!is_index(r, Path::new("/w/r/.git/index.lock")));
    }
}
