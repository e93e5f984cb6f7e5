//! One sync pass: a stat walk compared with the local index, hashing only
//! what changed, uploading only blobs the store lacks, then committing a
//! manifest with a conditional put.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use futures::StreamExt;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, WriteMultipart};
use sbx_core::glob::{PathPattern, PathSet};
use serde::{Deserialize, Serialize};

use crate::manifest::{self, Entry, Kind, Manifest, RelPath, Skipped};
use crate::store::{Remote, StoreError};

pub const PARALLEL: usize = 8;
/// Files up to this size are uploaded in one request; larger ones stream
/// through a multipart upload and are never held whole in memory.
const SMALL: u64 = 8 << 20;
const CHUNK: usize = 1 << 20;
/// The daemon's own state, lock files: never backed up.
pub const DEFAULT_EXCLUDES: &[&str] = &["*.lock"];

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Row {
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub ino: u64,
    pub mode: u32,
    pub hash: String,
}

/// What was uploaded: path → stat and hash, and the blobs known to exist.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Index {
    pub url: String,
    pub rows: Vec<(RelPath, Row)>,
    pub blobs: Vec<String>,
    /// Digest of the entries of the last committed snapshot.
    pub last: Option<String>,
    pub last_id: Option<String>,
}

impl Index {
    pub fn load(path: &Path, url: &str) -> Self {
        match fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Index>(&b).ok())
        {
            // An index for another store says nothing about this one.
            Some(i) if i.url == url => i,
            _ => Index {
                url: url.to_owned(),
                ..Default::default()
            },
        }
    }

    pub fn store(&self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        fs::write(&tmp, serde_json::to_vec(self).expect("serializable"))?;
        fs::File::open(&tmp)?.sync_all()?;
        fs::rename(tmp, path)
    }
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct Report {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
    pub hashed: u64,
    pub uploaded: u64,
    pub uploaded_bytes: u64,
    pub skipped: Skipped,
    pub unreadable: Vec<String>,
    pub changing: u64,
    pub snapshot: Option<String>,
    pub unchanged: bool,
    pub deleted_snapshots: Vec<String>,
}

pub struct Options<'a> {
    pub home: &'a Path,
    pub state_dir: &'a Path,
    pub excludes: &'a [PathPattern],
    pub keep: u32,
    pub dry_run: bool,
}

fn ns(sec: i64, nsec: i64) -> i128 {
    i128::from(sec) * 1_000_000_000 + i128::from(nsec)
}

struct Walked {
    entries: Vec<(Entry, fs::Metadata, PathBuf)>,
    skipped: Skipped,
    unreadable: Vec<String>,
}

/// The state dir relative to the home, when it lies inside it (compared
/// canonically when both exist, so `home/./st` or a symlinked home match).
fn state_rel(home: &Path, state: &Path) -> Option<PathBuf> {
    let canon = |p: &Path| fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    state
        .strip_prefix(home)
        .ok()
        .map(Path::to_owned)
        .or_else(|| {
            canon(state)
                .strip_prefix(canon(home))
                .ok()
                .map(Path::to_owned)
        })
        .filter(|r| !r.as_os_str().is_empty())
}

fn walk(home: &Path, excludes: &PathSet, skip: Option<&Path>) -> Walked {
    let mut w = Walked {
        entries: Vec::new(),
        skipped: Skipped::default(),
        unreadable: Vec::new(),
    };
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = home.join(&rel);
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) => {
                w.unreadable.push(format!("{}: {e}", dir.display()));
                continue;
            }
        };
        for de in rd.flatten() {
            let r = rel.join(de.file_name());
            let full = home.join(&r);
            let md = match fs::symlink_metadata(&full) {
                Ok(m) => m,
                Err(e) => {
                    w.unreadable.push(format!("{}: {e}", full.display()));
                    continue;
                }
            };
            let ft = md.file_type();
            if excludes.first_match(&r, ft.is_dir()).is_some() || skip == Some(r.as_path()) {
                continue;
            }
            let kind = if ft.is_dir() {
                Kind::Dir
            } else if ft.is_file() {
                Kind::File
            } else if ft.is_symlink() {
                Kind::Symlink
            } else {
                if ft.is_socket() {
                    w.skipped.sockets += 1;
                } else if ft.is_fifo() {
                    w.skipped.fifos += 1;
                } else {
                    w.skipped.devices += 1;
                }
                continue;
            };
            let target = if kind == Kind::Symlink {
                match fs::read_link(&full) {
                    Ok(t) => Some(RelPath(t.as_os_str().as_bytes().to_vec())),
                    Err(e) => {
                        w.unreadable.push(format!("{}: {e}", full.display()));
                        continue;
                    }
                }
            } else {
                None
            };
            if kind == Kind::Dir {
                stack.push(r.clone());
            }
            let entry = Entry {
                path: RelPath(r.as_os_str().as_bytes().to_vec()),
                kind,
                mode: md.mode() & 0o7777,
                mtime_ns: ns(md.mtime(), md.mtime_nsec()),
                size: if kind == Kind::File { md.len() } else { 0 },
                hash: None,
                target,
            };
            w.entries.push((entry, md, full));
        }
    }
    w
}

/// Hash a file while making sure it did not change under us.
fn hash_file(path: &Path, before: &fs::Metadata) -> Result<Option<String>, std::io::Error> {
    let mut f = fs::File::open(path)?;
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    let after = f.metadata()?;
    let same = after.len() == before.len()
        && after.mtime() == before.mtime()
        && after.mtime_nsec() == before.mtime_nsec()
        && after.ctime() == before.ctime()
        && after.ctime_nsec() == before.ctime_nsec();
    Ok(same.then(|| h.finalize().to_hex().to_string()))
}

/// Upload one file as blob `hash`, checking the bytes sent hash to it.
async fn upload(remote: &Remote, path: &Path, hash: &str, size: u64) -> Result<bool, StoreError> {
    let loc = remote.blob(hash);
    if size <= SMALL {
        let Ok(bytes) = tokio::fs::read(path).await else {
            return Ok(false);
        };
        if blake3::hash(&bytes).to_hex().as_str() != hash {
            return Ok(false);
        }
        remote
            .store
            .put(&loc, PutPayload::from(bytes))
            .await
            .map_err(|e| remote.down(e))?;
        return Ok(true);
    }
    let Ok(mut f) = tokio::fs::File::open(path).await else {
        return Ok(false);
    };
    let up = remote
        .store
        .put_multipart(&loc)
        .await
        .map_err(|e| remote.down(e))?;
    let mut w = WriteMultipart::new_with_chunk_size(up, CHUNK * 8);
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        use tokio::io::AsyncReadExt;
        let n = match f.read(&mut buf).await {
            Ok(n) => n,
            Err(_) => {
                let _ = w.abort().await;
                return Ok(false);
            }
        };
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        w.wait_for_capacity(4).await.map_err(|e| remote.down(e))?;
        w.write(&buf[..n]);
    }
    if h.finalize().to_hex().as_str() != hash {
        let _ = w.abort().await;
        return Ok(false);
    }
    w.finish().await.map_err(|e| remote.down(e))?;
    Ok(true)
}

pub fn new_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let t = humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string();
    // 2026-11-22T12:00:00.123456789Z -> 20261122T120000.123456789Z, plus the pid to break ties.
    format!(
        "{}-{}",
        t.replace(['-', ':'], ""),
        (now.subsec_nanos() ^ std::process::id()) % 10000
    )
}

pub async fn sync(remote: &Remote, o: &Options<'_>) -> Result<Report, Box<dyn sbx_core::SbxError>> {
    let mut patterns: Vec<PathPattern> = o.excludes.to_vec();
    for p in DEFAULT_EXCLUDES {
        patterns.push(PathPattern::new(p).expect("built-in pattern"));
    }
    // The state dir is left out by path, not by a glob of its name: a name
    // with `[` or `*` would panic or exclude its siblings (issue 13.4).
    let skip = state_rel(o.home, o.state_dir);
    let set = PathSet::new(&patterns)
        .map_err(|e| sbx_core::error::Message::new(sbx_core::Exit::Config, e.to_string()))?;
    let index_path = o.state_dir.join("index.json");
    let mut index = Index::load(&index_path, &remote.url);
    let rows: HashMap<Vec<u8>, Row> = index.rows.drain(..).map(|(p, r)| (p.0, r)).collect();
    let mut known: HashSet<String> = index.blobs.drain(..).collect();

    let walked = tokio::task::spawn_blocking({
        let home = o.home.to_owned();
        move || walk(&home, &set, skip.as_deref())
    })
    .await
    .expect("walk");
    let mut rep = Report {
        skipped: walked.skipped,
        unreadable: walked.unreadable,
        ..Default::default()
    };

    // Reuse hashes whose stat is unchanged; hash the rest in parallel.
    let mut entries = Vec::with_capacity(walked.entries.len());
    let mut new_rows: Vec<(RelPath, Row)> = Vec::new();
    let mut to_hash = Vec::new();
    for (mut e, md, full) in walked.entries {
        match e.kind {
            Kind::Dir => rep.dirs += 1,
            Kind::Symlink => rep.symlinks += 1,
            Kind::File => {
                let row = Row {
                    size: md.len(),
                    mtime_ns: e.mtime_ns,
                    ctime_ns: ns(md.ctime(), md.ctime_nsec()),
                    ino: md.ino(),
                    mode: md.mode(),
                    hash: String::new(),
                };
                if let Some(old) = rows.get(&e.path.0)
                    && old.size == row.size
                    && old.mtime_ns == row.mtime_ns
                    && old.ctime_ns == row.ctime_ns
                    && old.ino == row.ino
                    && old.mode == row.mode
                {
                    e.hash = Some(old.hash.clone());
                    new_rows.push((e.path.clone(), old.clone()));
                } else {
                    to_hash.push((e.clone(), md, full, row));
                    continue;
                }
            }
        }
        entries.push(e);
    }
    rep.hashed = to_hash.len() as u64;
    let hashed: Vec<_> = futures::stream::iter(to_hash.into_iter().map(|(e, md, full, row)| {
        tokio::task::spawn_blocking(move || {
            let r = hash_file(&full, &md);
            (e, full, row, r)
        })
    }))
    .buffer_unordered(PARALLEL * 2)
    .collect()
    .await;

    if known.is_empty() && !hashed.is_empty() {
        // A fresh index: one listing instead of a request per blob.
        known.extend(remote.blob_hashes().await?.into_iter().map(|(h, _)| h));
    }
    let mut uploads = Vec::new();
    let mut pending: HashSet<String> = HashSet::new();
    for j in hashed {
        let (mut e, full, mut row, r) = j.expect("hash task");
        match r {
            Ok(Some(h)) => {
                row.hash = h.clone();
                e.hash = Some(h.clone());
                if !known.contains(&h) && pending.insert(h.clone()) {
                    uploads.push((h, full, e.size));
                }
                new_rows.push((e.path.clone(), row));
                entries.push(e);
            }
            Ok(None) => {
                // Changed while read: keep the last good version, retry next pass.
                rep.changing += 1;
                if let Some(old) = rows.get(&e.path.0) {
                    e.hash = Some(old.hash.clone());
                    e.size = old.size;
                    e.mtime_ns = old.mtime_ns;
                    new_rows.push((e.path.clone(), old.clone()));
                    entries.push(e);
                }
            }
            Err(err) => rep.unreadable.push(format!("{}: {err}", full.display())),
        }
    }
    if o.dry_run {
        rep.uploaded = uploads.len() as u64;
        rep.uploaded_bytes = uploads.iter().map(|u| u.2).sum();
        finish_counts(&mut rep, &entries);
        return Ok(rep);
    }

    let results: Vec<_> =
        futures::stream::iter(uploads.into_iter().map(|(h, full, size)| async move {
            let ok = upload(remote, &full, &h, size).await;
            (h, size, ok)
        }))
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    let mut failed: HashSet<String> = HashSet::new();
    for (h, size, ok) in results {
        match ok? {
            true => {
                rep.uploaded += 1;
                rep.uploaded_bytes += size;
                known.insert(h);
            }
            false => {
                rep.changing += 1;
                failed.insert(h);
            }
        }
    }
    // A file whose upload did not match its hash changed: not in this snapshot.
    if !failed.is_empty() {
        entries.retain(|e| e.hash.as_ref().is_none_or(|h| !failed.contains(h)));
        new_rows.retain(|(_, r)| !failed.contains(&r.hash));
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    finish_counts(&mut rep, &entries);

    // An empty home where snapshots exist is a lost volume, not a deletion.
    if entries.is_empty() && !remote.snapshot_ids().await?.is_empty() {
        sbx_core::output::warn(
            "the home is empty but snapshots exist: not committing (restore with `sbx-backup first-boot` or `restore`)",
        );
        rep.unchanged = true;
        rep.snapshot = index.last_id.clone();
        return Ok(rep);
    }
    let digest =
        blake3::hash(&serde_json::to_vec(&(&entries, &rep.skipped)).expect("serializable"))
            .to_hex()
            .to_string();
    if index.last.as_deref() == Some(digest.as_str()) {
        rep.unchanged = true;
        rep.snapshot = index.last_id.clone();
    } else {
        let m = Manifest {
            format: manifest::FORMAT.into(),
            version: manifest::VERSION,
            id: new_id(),
            created: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            entries,
            skipped: rep.skipped.clone(),
        };
        let body = serde_json::to_vec(&m).expect("serializable");
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        remote
            .store
            .put_opts(&remote.snapshot(&m.id), PutPayload::from(body), opts)
            .await
            .map_err(|e| match e {
                object_store::Error::AlreadyExists { .. } => remote.down(format!(
                    "snapshot {} exists: another writer on this prefix",
                    m.id
                )),
                e => remote.down(e),
            })?;
        index.last = Some(digest);
        index.last_id = Some(m.id.clone());
        rep.snapshot = Some(m.id);
        // Retention: manifests only; blobs go in `gc`.
        let ids = remote.snapshot_ids().await?;
        if ids.len() > o.keep as usize {
            for id in &ids[..ids.len() - o.keep as usize] {
                remote
                    .store
                    .delete(&remote.snapshot(id))
                    .await
                    .map_err(|e| remote.down(e))?;
                rep.deleted_snapshots.push(id.clone());
            }
        }
    }
    index.rows = new_rows;
    index.blobs = known.into_iter().collect();
    fs::create_dir_all(o.state_dir).ok();
    index
        .store(&index_path)
        .map_err(|e| sbx_core::error::PathError {
            path: index_path.clone(),
            source: e,
        })?;
    Ok(rep)
}

fn finish_counts(rep: &mut Report, entries: &[Entry]) {
    rep.files = entries.iter().filter(|e| e.kind == Kind::File).count() as u64;
    rep.bytes = entries.iter().map(|e| e.size).sum();
}
