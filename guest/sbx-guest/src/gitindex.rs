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
use std::path::Path;

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

/// The first entry of the index `data` whose name git would refuse to
/// write, escaped for one line; None when every name is one git writes
/// beneath the work tree, or when the file is no index git reads (wrong
/// signature or version: git refuses it too). `hash_len`: 20 (SHA-1) or
/// 32 (SHA-256). A structure git would read differently (a name running
/// past the end, an extended entry in version 2) is refused.
pub fn bad_entry(data: &[u8], hash_len: usize) -> Option<String> {
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
    let malformed = || Some("(an entry git would read past its end)".to_owned());
    let mut pos = 12usize;
    let mut prev: Vec<u8> = Vec::new();
    for _ in 0..count {
        let flags_at = pos + 40 + hash_len;
        let Some(f) = data.get(flags_at..flags_at + 2) else {
            return malformed();
        };
        let flags = u16::from_be_bytes([f[0], f[1]]);
        let mode = u32_at(pos + 24).unwrap_or(0);
        let extended = flags & 0x4000 != 0;
        if extended && version < 3 {
            return malformed();
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
                    return malformed();
                };
                name_at += 1;
                strip = (strip << 7) | usize::from(c & 0x7f);
                if c & 0x80 == 0 {
                    break;
                }
                strip += 1;
                if strip > 1 << 24 {
                    return malformed();
                }
            }
            let Some(copy) = prev.len().checked_sub(strip) else {
                return malformed();
            };
            let rest = data.get(name_at..).unwrap_or_default();
            let suffix_len = if flag_len == 0x0fff {
                match rest.iter().position(|b| *b == 0) {
                    Some(n) => n,
                    None => return malformed(),
                }
            } else {
                match flag_len.checked_sub(copy) {
                    Some(n) if n < rest.len() => n,
                    _ => return malformed(),
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
                    None => return malformed(),
                }
            } else {
                flag_len
            };
            if len >= rest.len() {
                return malformed();
            }
            name = rest[..len].to_vec();
            pos = (name_at - pos + len + 8) / 8 * 8 + pos;
        }
        if !name_ok(&name, mode & 0o170000 == 0o040000) {
            return Some(sbx_core::sanitize::field(&String::from_utf8_lossy(&name)).into_owned());
        }
        prev = name;
    }
    None
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

/// Check the index at `path` (under the workspace `root`); when it holds
/// a name git would write outside the checkout or into a `.git`, kill
/// every process of the agent (`uid`), so none swaps it back, and move
/// it aside as the agent (whose directory it is). Returns what was done.
pub fn check(root: &Path, path: &Path, uid: u32, gid: u32) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let r = sbx_sys::beneath::Root::open(root).ok()?;
    let sha256 = std::fs::read_to_string(root.join(".git/config"))
        .map(|c| {
            let c = c.to_ascii_lowercase();
            c.contains("objectformat") && c.contains("sha256")
        })
        .unwrap_or(false);
    let bad = |r: &sbx_sys::beneath::Root| {
        use std::io::Read as _;
        let f = r.open_read(rel).ok()?;
        let mut data = Vec::new();
        // An index larger than this is no index the agent's git made.
        f.take(1 << 30).read_to_end(&mut data).ok()?;
        bad_entry(&data, if sha256 { 32 } else { 20 })
    };
    let name = bad(&r)?;
    // Aside first: killing the agent's main process ends the sandbox.
    let moved = move_aside(&r, rel, uid, gid);
    kill_uid(uid);
    // One the agent put back before it was killed.
    let again = bad(&r).map(|_| move_aside(&r, rel, uid, gid));
    Some(format!(
        "{}: an entry {name} git would write outside the checkout: the agent's processes were killed and the index {}",
        rel.display(),
        match again.unwrap_or(moved) {
            Ok(()) => "moved aside (.sbx-refused)".to_owned(),
            Err(e) => format!("could not be moved aside: {e}"),
        }
    ))
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

    /// Indexes git itself wrote, in each version, with long and nested
    /// names and an extended (intent-to-add) entry, pass.
    #[test]
    fn indexes_git_writes_pass() {
        let t = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let o = std::process::Command::new("git")
                .arg("-C")
                .arg(t.path())
                .args(args)
                .output()
                .unwrap();
            assert!(o.status.success(), "{args:?}: {o:?}");
        };
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
