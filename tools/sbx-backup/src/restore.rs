//! Restore a snapshot into a directory: content first (temp file, rename;
//! packs fetched with ranged GETs, several at once), symlinks after every
//! file (so nothing is written through one), then modes and mtimes,
//! directories deepest first, and one syncfs before the in-progress marker
//! goes.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use futures::StreamExt;
use nix::sys::stat::{UtimensatFlags, utimensat};
use nix::sys::time::TimeSpec;
use object_store::ObjectStoreExt;
use sbx_core::Exit;
use sbx_core::error::Message;

use crate::manifest::{Kind, Manifest};
use crate::store::Remote;
use crate::sync::{EMPTY, PARALLEL};

/// Ranges of a pack closer than this are fetched as one GET.
const COALESCE: u64 = 1 << 20;

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Report {
    pub files: u64,
    pub bytes: u64,
    pub reused: u64,
    pub dirs: u64,
    pub symlinks: u64,
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

/// No ancestor of `p` below `root` may be a symlink: that would let a
/// restore write outside the target.
fn inside(root: &Path, p: &Path) -> bool {
    let mut cur = root.to_path_buf();
    let Ok(rel) = p.strip_prefix(root) else {
        return false;
    };
    let mut comps: Vec<_> = rel.components().collect();
    comps.pop();
    for c in comps {
        cur.push(c);
        if fs::symlink_metadata(&cur).is_ok_and(|m| m.file_type().is_symlink()) {
            return false;
        }
    }
    true
}

/// Whether `p` already has this mode (permission bits) and mtime.
fn already(p: &Path, mode: u32, mtime_ns: i128) -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(p).is_ok_and(|md| {
        md.mode() & 0o7777 == mode & 0o7777
            && i128::from(md.mtime()) * 1_000_000_000 + i128::from(md.mtime_nsec()) == mtime_ns
    })
}

fn set_times(p: &Path, mtime_ns: i128, follow: bool) -> std::io::Result<()> {
    let t = TimeSpec::new(
        (mtime_ns.div_euclid(1_000_000_000)) as i64,
        (mtime_ns.rem_euclid(1_000_000_000)) as i64,
    );
    let flag = if follow {
        UtimensatFlags::FollowSymlink
    } else {
        UtimensatFlags::NoFollowSymlink
    };
    utimensat(nix::fcntl::AT_FDCWD, p, &t, &t, flag).map_err(std::io::Error::from)
}

async fn fetch(remote: &Remote, hash: &str, dest: &Path) -> Res<u64> {
    let tmp = tmp_of(dest);
    let got = remote
        .store
        .get(&remote.blob(hash))
        .await
        .map_err(|e| match e {
            object_store::Error::NotFound { .. } => msg(
                Exit::DataErr,
                format!(
                    "blob {hash} for {} is missing from {}",
                    dest.display(),
                    remote.url
                ),
            ),
            e => Box::new(remote.down(e)),
        })?;
    let mut stream = got.into_stream();
    let mut f =
        fs::File::create(&tmp).map_err(|e| msg(Exit::IoErr, format!("{}: {e}", tmp.display())))?;
    let mut h = blake3::Hasher::new();
    let mut n = 0u64;
    let fail = |tmp: &Path, e: std::io::Error| {
        let _ = fs::remove_file(tmp);
        let hint = if e.kind() == std::io::ErrorKind::StorageFull {
            " (disk full; the partial file was removed)"
        } else {
            ""
        };
        msg(Exit::IoErr, format!("{}: {e}{hint}", tmp.display()))
    };
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(Box::new(remote.down(e)));
            }
        };
        h.update(&chunk);
        n += chunk.len() as u64;
        // Runs of zeros become holes: a sparse file restores sparse.
        if chunk.iter().all(|b| *b == 0) {
            use std::io::Seek;
            f.seek(std::io::SeekFrom::Current(chunk.len() as i64))
                .map_err(|e| fail(&tmp, e))?;
        } else {
            f.write_all(&chunk).map_err(|e| fail(&tmp, e))?;
        }
    }
    f.set_len(n).map_err(|e| fail(&tmp, e))?;
    f.sync_all().map_err(|e| fail(&tmp, e))?;
    if h.finalize().to_hex().as_str() != hash {
        let _ = fs::remove_file(&tmp);
        return Err(msg(
            Exit::DataErr,
            format!("blob {hash} in {} does not match its hash", remote.url),
        ));
    }
    fs::rename(&tmp, dest).map_err(|e| fail(&tmp, e))?;
    Ok(n)
}

fn tmp_of(dest: &Path) -> PathBuf {
    dest.with_file_name(format!(
        ".{}.sbx-restore",
        dest.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ))
}

/// Write `bytes` to `dest` through a temporary file, after checking they
/// hash to `hash` (`what` names their origin in the error).
fn write_file(dest: &Path, bytes: &[u8], hash: &str, what: &str) -> Res<()> {
    if blake3::hash(bytes).to_hex().as_str() != hash {
        return Err(msg(
            Exit::DataErr,
            format!(
                "{}: content {hash}{what} does not match its hash",
                dest.display()
            ),
        ));
    }
    let tmp = tmp_of(dest);
    let r = fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| fs::rename(&tmp, dest));
    r.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        let hint = if e.kind() == std::io::ErrorKind::StorageFull {
            " (disk full; the partial file was removed)"
        } else {
            ""
        };
        msg(Exit::IoErr, format!("{}: {e}{hint}", tmp.display()))
    })
}

/// Fetch the ranges of one pack the files need (neighbours coalesced into
/// one GET) and write the files. Returns (files, bytes).
async fn fetch_pack(
    remote: &Remote,
    pack: String,
    mut files: Vec<(String, PathBuf, u64, u64)>,
) -> Res<(u64, u64)> {
    files.sort_by_key(|f| f.2);
    let mut spans: Vec<std::ops::Range<u64>> = Vec::new();
    for (_, _, off, size) in &files {
        match spans.last_mut() {
            Some(s) if *off <= s.end + COALESCE => s.end = s.end.max(off + size),
            _ => spans.push(*off..off + size),
        }
    }
    let loc = remote.pack(&pack);
    let got = remote
        .store
        .get_ranges(&loc, &spans)
        .await
        .map_err(|e| match e {
            object_store::Error::NotFound { .. } => msg(
                Exit::DataErr,
                format!(
                    "pack {pack} is missing from {} ({} files need it, e.g. {})",
                    remote.url,
                    files.len(),
                    files[0].1.display()
                ),
            ),
            e => Box::new(remote.down(e)),
        })?;
    tokio::task::spawn_blocking(move || {
        let mut bytes = 0;
        let what = format!(" in pack {pack}");
        for (h, p, off, size) in &files {
            let i = spans.partition_point(|s| s.end < off + size);
            let (s, b) = (&spans[i], &got[i]);
            let from = (off - s.start) as usize;
            let Some(slice) = b.get(from..from + *size as usize) else {
                return Err(msg(
                    Exit::DataErr,
                    format!("{}: pack {pack} is too short", p.display()),
                ));
            };
            write_file(p, slice, h, &what)?;
            bytes += size;
        }
        Ok((files.len() as u64, bytes))
    })
    .await
    .expect("restore task")
}

/// Restore `m` into `to`. Files already there with the right size and
/// mtime are kept, so an interrupted restore resumes.
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
    let to = to
        .canonicalize()
        .map_err(|e| msg(Exit::IoErr, format!("{}: {e}", to.display())))?;
    let marker = to.join(".sbx-restore-in-progress");
    let resuming = marker.exists();
    let non_empty = fs::read_dir(&to)
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
    fs::write(&marker, &m.id)
        .map_err(|e| msg(Exit::IoErr, format!("{}: {e}", marker.display())))?;
    let mut rep = Report::default();
    let path = |e: &crate::manifest::Entry| -> PathBuf { to.join(e.path.as_path()) };

    // Directories, shallowest first, writable by us until the end.
    for e in m.entries.iter().filter(|e| e.kind == Kind::Dir) {
        let p = path(e);
        if !inside(&to, &p) {
            return Err(msg(
                Exit::DataErr,
                format!("{}: would leave {}", p.display(), to.display()),
            ));
        }
        if fs::symlink_metadata(&p).is_ok_and(|md| !md.is_dir()) {
            fs::remove_file(&p).map_err(|er| msg(Exit::IoErr, format!("{}: {er}", p.display())))?;
        }
        fs::create_dir_all(&p).map_err(|er| msg(Exit::IoErr, format!("{}: {er}", p.display())))?;
        fs::set_permissions(&p, fs::Permissions::from_mode(0o700)).ok();
        rep.dirs += 1;
    }
    // Files in parallel: one task per pack (ranged GETs), one per blob.
    let mut empties = Vec::new();
    let mut blobs = Vec::new();
    let mut packed: HashMap<&str, Vec<(String, PathBuf, u64, u64)>> = HashMap::new();
    for e in m.entries.iter().filter(|e| e.kind == Kind::File) {
        let p = path(e);
        if !inside(&to, &p) {
            return Err(msg(
                Exit::DataErr,
                format!("{}: would leave {}", p.display(), to.display()),
            ));
        }
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).ok();
        }
        let have = fs::symlink_metadata(&p).ok();
        if let Some(md) = &have {
            use std::os::unix::fs::MetadataExt;
            let mt = i128::from(md.mtime()) * 1_000_000_000 + i128::from(md.mtime_nsec());
            if md.is_file() && md.len() == e.size && mt == e.mtime_ns {
                rep.reused += 1;
                continue;
            }
            if md.is_dir() {
                fs::remove_dir_all(&p).ok();
            }
        }
        let h = e.hash.clone().expect("checked");
        match m.location(e) {
            _ if e.size == 0 && h == EMPTY => empties.push(p),
            Some((pack, off)) => packed.entry(pack).or_default().push((h, p, off, e.size)),
            None => blobs.push((h, p)),
        }
    }
    for p in empties {
        write_file(&p, &[], blake3::hash(b"").to_hex().as_str(), "")?;
        rep.files += 1;
    }
    let results: Vec<Res<(u64, u64)>> = futures::stream::iter(
        blobs
            .into_iter()
            .map(|(h, p)| async move { fetch(remote, &h, &p).await.map(|n| (1, n)) })
            .map(futures::future::Either::Left)
            .chain(packed.into_iter().map(|(pack, files)| {
                futures::future::Either::Right(fetch_pack(remote, pack.to_owned(), files))
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
    // Symlinks last: nothing was written through them.
    for e in m.entries.iter().filter(|e| e.kind == Kind::Symlink) {
        let p = path(e);
        if !inside(&to, &p) {
            return Err(msg(
                Exit::DataErr,
                format!("{}: would leave {}", p.display(), to.display()),
            ));
        }
        if let Ok(md) = fs::symlink_metadata(&p) {
            if md.is_dir() {
                fs::remove_dir_all(&p)
            } else {
                fs::remove_file(&p)
            }
            .map_err(|er| msg(Exit::IoErr, format!("{}: {er}", p.display())))?;
        }
        symlink(e.target.as_ref().expect("checked").as_path(), &p)
            .map_err(|er| msg(Exit::IoErr, format!("{}: {er}", p.display())))?;
        set_times(&p, e.mtime_ns, false).ok();
        rep.symlinks += 1;
    }
    // Modes and mtimes after content; directories deepest first.
    for e in m.entries.iter().filter(|e| e.kind == Kind::File) {
        let p = path(e);
        // A file that already has its mode and time is left alone: it may
        // be another user's (an image's root-owned file in the home), which
        // we could not chmod, and there is nothing to change.
        if already(&p, e.mode, e.mtime_ns) {
            continue;
        }
        fs::set_permissions(&p, fs::Permissions::from_mode(e.mode))
            .map_err(|er| msg(Exit::IoErr, format!("{}: {er}", p.display())))?;
        set_times(&p, e.mtime_ns, false)
            .map_err(|er| msg(Exit::IoErr, format!("{}: {er}", p.display())))?;
    }
    let mut dirs: Vec<_> = m.entries.iter().filter(|e| e.kind == Kind::Dir).collect();
    dirs.sort_by_key(|e| std::cmp::Reverse(e.path.0.iter().filter(|b| **b == b'/').count()));
    // Durable before the marker goes: one syncfs instead of one fsync per file.
    if let Ok(d) = fs::File::open(&to) {
        nix::unistd::syncfs(&d)
            .map_err(|er| msg(Exit::IoErr, format!("{}: syncfs: {er}", to.display())))?;
    }
    fs::remove_file(&marker).ok();
    for e in dirs {
        let p = path(e);
        fs::set_permissions(&p, fs::Permissions::from_mode(e.mode)).ok();
        set_times(&p, e.mtime_ns, false).ok();
    }
    Ok(rep)
}
