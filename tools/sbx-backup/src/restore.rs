//! Restore a snapshot into a directory. Every path is opened beneath the
//! target's directory fd without following a link (`beneath`), each file
//! is written to a short random temporary name created 0600, gets its
//! final mode and mtime on the fd, and is renamed into place; symlinks
//! come after every file, directory modes deepest first, and one syncfs
//! before the in-progress marker goes.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Seek, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::manifest::{Entry, Kind, Manifest};
use crate::store::Remote;
use crate::sync::{EMPTY, PARALLEL};
use futures::StreamExt;
use nix::sys::stat::{Mode, UtimensatFlags, fchmod, futimens, utimensat};
use nix::sys::time::TimeSpec;
use object_store::ObjectStoreExt;
use sbx_core::Exit;
use sbx_core::error::Message;
use sbx_sys::beneath::{self, Dir};

/// Ranges of a pack closer than this are fetched as one GET.
const COALESCE: u64 = 1 << 20;

/// The marker a restore leaves in its target until it is complete.
pub const MARKER: &str = ".sbx-restore-in-progress";

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Report {
    pub files: u64,
    pub bytes: u64,
    pub reused: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Set-uid/set-gid bits dropped because the owner is not restored.
    pub dropped_setid: u64,
    /// Directories left alone because another file system is mounted
    /// there in the target (a sandbox's ~/.claude and ~/.codex volumes).
    pub mounts_left: Vec<String>,
}

type Res<T> = Result<T, Box<dyn sbx_core::SbxError>>;

fn msg(exit: Exit, m: String) -> Box<dyn sbx_core::SbxError> {
    Box::new(Message::new(exit, m))
}

pub async fn load(remote: &Remote, id: Option<&str>) -> Res<Manifest> {
    let id = match id {
        Some(i) => i.to_owned(),
        None => remote
            .snapshot_ids()
            .await?
            .pop()
            .ok_or_else(|| msg(Exit::NoInput, format!("{}: no snapshots", remote.url)))?,
    };
    let got = remote
        .store
        .get(&remote.snapshot(&id))
        .await
        .map_err(|e| match e {
            object_store::Error::NotFound { .. } => {
                msg(Exit::NoInput, format!("{}: no snapshot {id}", remote.url))
            }
            e => Box::new(remote.down(e)),
        })?;
    let bytes = got.bytes().await.map_err(|e| remote.down(e))?;
    Manifest::parse(&id, &bytes).map_err(|e| msg(Exit::DataErr, e.to_string()))
}

fn io(p: &[u8], e: impl std::fmt::Display) -> Box<dyn sbx_core::SbxError> {
    let text = e.to_string();
    let hint = if text.contains("No space left") {
        " (disk full; the partial file was removed)"
    } else {
        ""
    };
    msg(
        Exit::IoErr,
        format!("{}: {text}{hint}", String::from_utf8_lossy(p)),
    )
}

fn ts(ns: i128) -> TimeSpec {
    TimeSpec::new(
        ns.div_euclid(1_000_000_000) as i64,
        ns.rem_euclid(1_000_000_000) as i64,
    )
}

/// The mode restore gives an entry: set-uid/set-gid only when the file
/// ends up owned by the owner (group) it had, i.e. who runs restore; a
/// root-run restore of an agent's set-uid file must not make it set-uid
/// root (restore does not chown).
pub fn safe_mode(e: &Entry) -> u32 {
    // Asked once, not twice per file.
    static IDS: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    let (uid, gid) = *IDS.get_or_init(|| {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    });
    let mut m = e.mode & 0o7777;
    if e.uid != Some(uid) {
        m &= !0o4000;
    }
    if e.gid != Some(gid) {
        m &= !0o2000;
    }
    m
}

/// Give an open file its final mode and times (after its content).
fn finish_fd(fd: BorrowedFd<'_>, mode: u32, mtime_ns: i128) -> nix::Result<()> {
    fchmod(fd, Mode::from_bits_truncate(mode))?;
    futimens(fd, &TimeSpec::UTIME_NOW, &ts(mtime_ns))
}

/// The parent directory fd of the last file written: files come in path
/// order, so neighbours share it and the walk from the root is rare.
struct Parent<'a> {
    root: &'a Dir,
    last: Option<(Vec<u8>, Dir)>,
}

impl Parent<'_> {
    fn of(&mut self, rel: &[u8]) -> Res<&Dir> {
        let (parent, _) = split(rel);
        if self.last.as_ref().is_none_or(|(p, _)| p != parent) {
            let fd = walk(self.root, parent).map_err(|e| io(rel, e))?;
            self.last = Some((parent.to_vec(), fd));
        }
        Ok(self.last.as_ref().map(|(_, f)| f).expect("set"))
    }
}

/// Split a relative path into (parent, name).
fn split(rel: &[u8]) -> (&[u8], &OsStr) {
    let (parent, name) = match rel.iter().rposition(|b| *b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&b""[..], rel),
    };
    (parent, OsStr::from_bytes(name))
}

/// The directory `rel` beneath `root`, missing ones made 0700. One
/// openat2 for the whole path when it exists (the usual case: directories
/// are made first), one per component only when one is missing.
fn walk(root: &Dir, rel: &[u8]) -> std::io::Result<Dir> {
    let p = Path::new(OsStr::from_bytes(rel));
    match root.walk(p, None) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => root.walk(p, Some(0o700)),
        r => r,
    }
}

/// A file to write: its entry (path, hash, mode, mtime, size).
type Job = Entry;

/// Write one file from `src` (chunks) into `dir` as `e`: a fresh 0600
/// temp, content checked against the hash, final mode and mtime on the
/// fd, then renamed over the name. Returns the bytes written.
fn write_entry<I>(dir: &Dir, e: &Job, src: I, what: &str) -> Res<u64>
where
    I: IntoIterator<Item = Res<bytes::Bytes>>,
{
    let rel = &e.path.0;
    let (_, name) = split(rel);
    let (mut f, tmp) = dir.temp_file().map_err(|er| io(rel, er))?;
    crate::hook::point("restore-temp-made");
    let r = (|| -> Res<u64> {
        let mut h = blake3::Hasher::new();
        let mut n = 0u64;
        // Whether the file ends in a hole (seeked over, not written).
        let mut hole = false;
        for chunk in src {
            let chunk = chunk?;
            n += chunk.len() as u64;
            if n > e.size {
                return Err(msg(
                    Exit::DataErr,
                    format!(
                        "{}: content{what} is larger than the {} bytes the snapshot says",
                        String::from_utf8_lossy(rel),
                        e.size
                    ),
                ));
            }
            h.update(&chunk);
            // Runs of zeros become holes: a sparse file restores sparse.
            hole = !chunk.is_empty() && chunk.iter().all(|b| *b == 0);
            if hole {
                f.seek(std::io::SeekFrom::Current(chunk.len() as i64))
                    .map_err(|er| io(rel, er))?;
            } else {
                f.write_all(&chunk).map_err(|er| io(rel, er))?;
            }
        }
        if hole {
            f.set_len(n).map_err(|er| io(rel, er))?;
        }
        // The disk starts on it now, while the next files are fetched:
        // the syncfs at the end then waits for little.
        if n > 0 {
            sbx_sys::start_writeback(f.as_fd());
        }
        let hash = e.hash.as_deref().unwrap_or_default();
        if h.finalize().to_hex().as_str() != hash {
            return Err(msg(
                Exit::DataErr,
                format!(
                    "{}: content {hash}{what} does not match its hash",
                    String::from_utf8_lossy(rel)
                ),
            ));
        }
        finish_fd(f.as_fd(), safe_mode(e), e.mtime_ns).map_err(|er| io(rel, er))?;
        drop(f);
        replace(dir, &tmp, name).map_err(|er| io(rel, er))?;
        Ok(n)
    })();
    if r.is_err() {
        let _ = dir.unlink(&tmp);
    }
    r
}

/// Stream one file: blob `hash`, or (`at`) its range of a pack of its own.
async fn fetch(remote: &Remote, root: &Dir, e: Job, at: Option<(String, u64)>) -> Res<u64> {
    let hash = e.hash.clone().unwrap_or_default();
    let (loc, what, opts) = match &at {
        Some((p, off)) => (
            remote.pack(p),
            format!("pack {p}"),
            object_store::GetOptions {
                range: Some(object_store::GetRange::Bounded(*off..off + e.size)),
                ..Default::default()
            },
        ),
        None => (
            remote.blob(&hash),
            format!("blob {hash}"),
            Default::default(),
        ),
    };
    let got = remote
        .store
        .get_opts(&loc, opts)
        .await
        .map_err(|er| match er {
            object_store::Error::NotFound { .. } => msg(
                Exit::DataErr,
                format!(
                    "{what} for {} is missing from {}",
                    String::from_utf8_lossy(&e.path.0),
                    remote.url
                ),
            ),
            er => Box::new(remote.down(er)),
        })?;
    // The stream is pulled on a blocking thread, which writes as it goes.
    let mut stream = got.into_stream();
    let (tx, rx) = std::sync::mpsc::sync_channel::<Res<bytes::Bytes>>(4);
    let root = root.try_clone().map_err(|er| io(&e.path.0, er))?;
    let writer = tokio::task::spawn_blocking(move || {
        let mut parent = Parent {
            root: &root,
            last: None,
        };
        let dir = parent.of(&e.path.0)?;
        write_entry(dir, &e, rx, "")
    });
    while let Some(chunk) = stream.next().await {
        let item = chunk.map_err(|er| Box::new(remote.down(er)) as Box<dyn sbx_core::SbxError>);
        let stop = item.is_err();
        if tx.send(item).is_err() || stop {
            break;
        }
    }
    drop(tx);
    writer.await.expect("restore task")
}

/// Fetch the ranges of one pack the files need (neighbours coalesced into
/// one GET) and write the files. Returns (files, bytes).
async fn fetch_pack(
    remote: &Remote,
    root: &Dir,
    pack: String,
    mut files: Vec<(u64, Job)>,
) -> Res<(u64, u64)> {
    files.sort_by_key(|f| f.0);
    let mut spans: Vec<std::ops::Range<u64>> = Vec::new();
    for (off, e) in &files {
        let end = off + e.size;
        match spans.last_mut() {
            Some(s) if *off <= s.end + COALESCE => s.end = s.end.max(end),
            _ => spans.push(*off..end),
        }
    }
    let loc = remote.pack(&pack);
    let got = remote
        .store
        .get_ranges(&loc, &spans)
        .await
        .map_err(|er| match er {
            object_store::Error::NotFound { .. } => msg(
                Exit::DataErr,
                format!(
                    "pack {pack} is missing from {} ({} files need it, e.g. {})",
                    remote.url,
                    files.len(),
                    String::from_utf8_lossy(&files[0].1.path.0)
                ),
            ),
            er => Box::new(remote.down(er)),
        })?;
    let root = root.try_clone().map_err(|er| io(b"restore target", er))?;
    tokio::task::spawn_blocking(move || {
        let mut bytes = 0;
        let what = format!(" in pack {pack}");
        // Path order within the pack's files, so the parent fd is reused.
        files.sort_by(|a, b| a.1.path.cmp(&b.1.path));
        let mut parent = Parent {
            root: &root,
            last: None,
        };
        for (off, e) in &files {
            let i = spans.partition_point(|s| s.end < off + e.size);
            let slice = spans.get(i).zip(got.get(i)).and_then(|(s, b)| {
                let from = (off - s.start) as usize;
                b.get(from..from + e.size as usize)
                    .map(|_| b.slice(from..from + e.size as usize))
            });
            let Some(slice) = slice else {
                return Err(msg(
                    Exit::DataErr,
                    format!(
                        "{}: pack {pack} is too short",
                        String::from_utf8_lossy(&e.path.0)
                    ),
                ));
            };
            let dir = parent.of(&e.path.0)?;
            write_entry(dir, e, [Ok(slice)], &what)?;
            bytes += e.size;
        }
        Ok((files.len() as u64, bytes))
    })
    .await
    .expect("restore task")
}

/// Whether the file already at `name` has exactly `e`'s content (hashed,
/// not judged by size and mtime); if so it gets `e`'s mode and mtime.
fn reuse(dir: &Dir, name: &OsStr, e: &Entry) -> Res<bool> {
    let Ok(mut f) = dir.open_file(name) else {
        return Ok(false);
    };
    let Ok(md) = f.metadata() else {
        return Ok(false);
    };
    if !md.is_file() || md.len() != e.size {
        return Ok(false);
    }
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                h.update(&buf[..n]);
            }
            Err(_) => return Ok(false),
        }
    }
    if Some(h.finalize().to_hex().as_str()) != e.hash.as_deref() {
        return Ok(false);
    }
    use std::os::unix::fs::MetadataExt;
    let mode = safe_mode(e);
    let mt = i128::from(md.mtime()) * 1_000_000_000 + i128::from(md.mtime_nsec());
    // A file that already has its mode and time is left alone: it may be
    // another user's (an image's root-owned file in the home).
    if md.mode() & 0o7777 != mode || mt != e.mtime_ns {
        finish_fd(f.as_fd(), mode, e.mtime_ns).map_err(|er| io(&e.path.0, er))?;
    }
    Ok(true)
}

/// Whether `to` holds anything; refused (before anything changes) when
/// it does, without --force and without a restore of ours to resume.
/// The snapshot an interrupted restore into `to` was bringing back (its
/// marker's id; None when there is none, or it is empty: the newest).
pub fn pending(to: &Path) -> Option<String> {
    let p = to.join(MARKER);
    if !fs::symlink_metadata(&p).is_ok_and(|m| m.is_file() && m.len() <= 64) {
        return None;
    }
    let id = fs::read_to_string(&p).ok()?.trim().to_owned();
    (!id.is_empty()).then_some(id)
}

pub fn may_restore_into(to: &Path, force: bool) -> Res<bool> {
    let resuming = fs::symlink_metadata(to.join(MARKER)).is_ok();
    let non_empty = fs::read_dir(to)
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    if non_empty && !force && !resuming {
        return Err(msg(
            Exit::Usage,
            format!(
                "{}: not empty; use --force to restore over it",
                to.display()
            ),
        ));
    }
    Ok(non_empty)
}

/// Restore `m` into `to`. Files already there with the right content are
/// kept, so an interrupted restore resumes.
pub async fn restore(remote: &Remote, m: &Manifest, to: &Path, force: bool) -> Res<Report> {
    fs::create_dir_all(to).map_err(|e| msg(Exit::IoErr, format!("{}: {e}", to.display())))?;
    if fs::symlink_metadata(to).is_ok_and(|md| md.file_type().is_symlink()) {
        return Err(msg(
            Exit::Usage,
            format!(
                "{}: is a symlink; restore into the real directory",
                to.display()
            ),
        ));
    }
    let root = Dir::open(to).map_err(|e| msg(Exit::IoErr, format!("{}: {e}", to.display())))?;
    let resuming = root.kind(OsStr::new(MARKER)).ok().flatten().is_some();
    let non_empty = may_restore_into(to, force)?;
    // A resume keeps its marker: removed and made again, a kill in
    // between would leave a half target unmarked. Whatever else the home
    // holds under the marker's name (a link) goes first.
    let kept = resuming
        && root.kind(OsStr::new(MARKER)).ok().flatten() == Some(beneath::Kind::File)
        && root
            .open_file(OsStr::new(MARKER))
            .and_then(|mut f| {
                let mut s = String::new();
                f.read_to_string(&mut s).map(|_| s)
            })
            .is_ok_and(|s| s == m.id);
    if !kept {
        root.remove_all(OsStr::new(MARKER))
            .and_then(|()| write_marker(&root, &m.id))
            .map_err(|e| io(MARKER.as_bytes(), e))?;
    }
    let mut rep = Report::default();
    // A snapshot from before the marker was left out of backups may hold
    // one: restored, it would replace this restore's own.
    let without;
    let m = if m.entries.iter().any(|e| e.path.0 == MARKER.as_bytes()) {
        let mut w = m.clone();
        w.entries.retain(|e| e.path.0 != MARKER.as_bytes());
        without = w;
        &without
    } else {
        m
    };

    // A directory of the target on another file system (a volume
    // mounted in the home, shared with other sandboxes and newer than
    // the snapshot) is left alone with all beneath it.
    let left;
    let mounts = if non_empty {
        mounted(&root, m)
    } else {
        Vec::new()
    };
    let m = match mounts {
        mounts if !mounts.is_empty() => {
            let mut w = m.clone();
            w.entries.retain(|e| {
                !mounts.iter().any(|p| {
                    e.path.0 == *p
                        || (e.path.0.starts_with(p) && e.path.0.get(p.len()) == Some(&b'/'))
                })
            });
            for p in &mounts {
                let p = String::from_utf8_lossy(p).into_owned();
                sbx_core::output::warn(&format!(
                    "{}: another file system is mounted there; left as it is, not restored",
                    to.join(&p).display()
                ));
                rep.mounts_left.push(p);
            }
            left = w;
            &left
        }
        _ => m,
    };

    // Directories, shallowest first (path order), writable by us until the end.
    for e in m.entries.iter().filter(|e| e.kind == Kind::Dir) {
        let (parent, name) = split(&e.path.0);
        let d = walk(&root, parent).map_err(|er| io(&e.path.0, er))?;
        d.ensure_dir(name, 0o700).map_err(|er| io(&e.path.0, er))?;
        // One already there may be read-only (a resume killed after the
        // modes were set, --force over a Go module cache): writable by
        // us until the end too, or its files and links cannot be put in.
        if let Ok(Some(md)) = d.stat(name)
            && md.mode & 0o700 != 0o700
            && let Ok(sub) = d.sub(name)
        {
            let _ = sub.chmod(md.mode | 0o700);
        }
        rep.dirs += 1;
    }
    if resuming {
        remove_strays(&root, m)?;
    }
    // Files in parallel: one task per pack (ranged GETs), one per blob.
    let mut blobs = Vec::new();
    let mut packed: HashMap<&str, Vec<(u64, Job)>> = HashMap::new();
    {
        let mut parent = Parent {
            root: &root,
            last: None,
        };
        for e in m.entries.iter().filter(|e| e.kind == Kind::File) {
            if safe_mode(e) != e.mode & 0o7777 {
                rep.dropped_setid += 1;
            }
            // Into a target that was empty there is nothing to reuse: no
            // stat per file.
            if non_empty {
                let dir = parent.of(&e.path.0)?;
                let (_, name) = split(&e.path.0);
                match dir.stat(name).map_err(|er| io(&e.path.0, er))? {
                    Some(md)
                        if md.kind == beneath::Kind::File
                            && md.size == e.size
                            && reuse(dir, name, e)? =>
                    {
                        rep.reused += 1;
                        continue;
                    }
                    _ => {}
                }
            }
            match m.location(e) {
                _ if e.size == 0 && e.hash.as_deref() == Some(EMPTY) => {
                    let none: [Res<bytes::Bytes>; 0] = [];
                    write_entry(parent.of(&e.path.0)?, e, none, "")?;
                    rep.files += 1;
                }
                // A large file in a pack (stored anew after a prune
                // condemned its blob) streams, never whole in memory.
                Some((pack, off)) if e.size >= crate::sync::PACK_FILE_MAX => {
                    blobs.push((e.clone(), Some((pack.to_owned(), off))))
                }
                Some((pack, off)) => packed.entry(pack).or_default().push((off, e.clone())),
                None => blobs.push((e.clone(), None)),
            }
        }
    }
    let root_ref = &root;
    let results: Vec<Res<(u64, u64)>> = futures::stream::iter(
        blobs
            .into_iter()
            .map(|(e, at)| async move { fetch(remote, root_ref, e, at).await.map(|n| (1, n)) })
            .map(futures::future::Either::Left)
            .chain(packed.into_iter().map(|(pack, files)| {
                futures::future::Either::Right(fetch_pack(remote, root_ref, pack.to_owned(), files))
            })),
    )
    .buffer_unordered(PARALLEL)
    .collect()
    .await;
    for r in results {
        let (files, bytes) = r?;
        rep.bytes += bytes;
        rep.files += files;
    }
    crate::hook::point("restore-files-done");
    // Symlinks last: nothing was written through them (and nothing is:
    // every open above refuses links).
    for e in m.entries.iter().filter(|e| e.kind == Kind::Symlink) {
        let (parent, name) = split(&e.path.0);
        let d = walk(&root, parent).map_err(|er| io(&e.path.0, er))?;
        let target = e.target.as_ref().expect("checked").as_path();
        let tmp = d
            .temp_symlink(target.as_os_str())
            .map_err(|er| io(&e.path.0, er))?;
        let r = utimensat(
            d.as_fd(),
            tmp.as_os_str(),
            &TimeSpec::UTIME_NOW,
            &ts(e.mtime_ns),
            UtimensatFlags::NoFollowSymlink,
        )
        .map_err(std::io::Error::from)
        .and_then(|()| replace(&d, &tmp, name));
        if let Err(er) = r {
            let _ = d.unlink(&tmp);
            return Err(io(&e.path.0, er));
        }
        rep.symlinks += 1;
    }
    // Durable before the marker goes: one syncfs instead of one fsync per file.
    nix::unistd::syncfs(&root)
        .map_err(|er| msg(Exit::IoErr, format!("{}: syncfs: {er}", to.display())))?;
    // Directory modes and mtimes deepest first (a read-only one last).
    let mut dirs: Vec<_> = m.entries.iter().filter(|e| e.kind == Kind::Dir).collect();
    dirs.sort_by_key(|e| std::cmp::Reverse(e.path.0.iter().filter(|b| **b == b'/').count()));
    for e in dirs {
        if let Ok(d) = root.walk(Path::new(OsStr::from_bytes(&e.path.0)), None) {
            let _ = finish_fd(d.as_fd(), safe_mode(e), e.mtime_ns);
        }
    }
    crate::hook::point("restore-dirs-done");
    let _ = root.unlink(OsStr::new(MARKER));
    Ok(rep)
}

/// The snapshot's directories that exist in the target on another file
/// system than the target itself (outermost only).
fn mounted(root: &Dir, m: &Manifest) -> Vec<Vec<u8>> {
    let Ok(dev) = nix::sys::stat::fstat(root.as_fd()).map(|s| s.st_dev) else {
        return Vec::new();
    };
    let mut out: Vec<Vec<u8>> = Vec::new();
    for e in m.entries.iter().filter(|e| e.kind == Kind::Dir) {
        if out
            .iter()
            .any(|p| e.path.0.starts_with(p) && e.path.0.get(p.len()) == Some(&b'/'))
        {
            continue;
        }
        if let Ok(d) = root.walk(Path::new(OsStr::from_bytes(&e.path.0)), None)
            && nix::sys::stat::fstat(d.as_fd()).is_ok_and(|s| s.st_dev != dev)
        {
            out.push(e.path.0.clone());
        }
    }
    out
}

/// A name `Dir::temp_file`/`temp_symlink` make: `.sbx-` and 16 hex digits.
fn is_temp_name(n: &[u8]) -> bool {
    n.len() == 21
        && n.starts_with(b".sbx-")
        && n[5..]
            .iter()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The temporaries a killed restore left in the snapshot's directories
/// (never a name the snapshot itself holds): a resumed restore would
/// otherwise leave them in the home for good.
fn remove_strays(root: &Dir, m: &Manifest) -> Res<()> {
    let names: std::collections::HashSet<&[u8]> =
        m.entries.iter().map(|e| e.path.0.as_slice()).collect();
    let dirs = std::iter::once(&b""[..]).chain(
        m.entries
            .iter()
            .filter(|e| e.kind == Kind::Dir)
            .map(|e| e.path.0.as_slice()),
    );
    for rel in dirs {
        let d = walk(root, rel).map_err(|er| io(rel, er))?;
        for n in d.names().map_err(|er| io(rel, er))? {
            let full = if rel.is_empty() {
                n.as_bytes().to_vec()
            } else {
                [rel, b"/", n.as_bytes()].concat()
            };
            if is_temp_name(n.as_bytes()) && !names.contains(full.as_slice()) {
                d.remove_all(&n).map_err(|er| io(&full, er))?;
            }
        }
    }
    Ok(())
}

fn write_marker(root: &Dir, id: &str) -> std::io::Result<()> {
    // Made under its own name, not renamed from a temporary: a restore
    // killed between the two left a stray temporary and no marker, and
    // the retry (or first boot) then saw a non-empty, unmarked target.
    // A marker killed before its id is written is empty: the newest.
    let mut f = root.create_new(OsStr::new(MARKER), 0o600)?;
    crate::hook::point("restore-marker-made");
    f.write_all(id.as_bytes()).and_then(|()| f.sync_all())
}

/// Put `tmp` in place of `name`; a directory in the way (the snapshot
/// has a file where the target has a tree) goes first, never followed.
fn replace(dir: &Dir, tmp: &OsStr, name: &OsStr) -> std::io::Result<()> {
    if dir.kind(name)? == Some(beneath::Kind::Dir) {
        dir.remove_all(name)?;
    }
    dir.replace(tmp, name)
}
