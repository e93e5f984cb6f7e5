//! One sync pass: a stat walk compared with the local index, hashing only
//! what changed, uploading only blobs the store lacks, then committing a
//! manifest with a conditional put.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, WriteMultipart};
use sbx_core::glob::{PathPattern, PathSet};
use serde::{Deserialize, Serialize};

use crate::manifest::{self, Entry, Kind, Manifest, RelPath, Skipped};
use crate::store::{Remote, StoreError};

pub const PARALLEL: usize = 8;
/// Files below this size go into packs. At 1 MiB a file's own request
/// costs less than its transfer, while the home's many small files (the
/// 20,000-file bench home has 99.9% below 64 KiB) would each cost a
/// request; keeping larger files whole keeps their dedup and restore
/// independent of the packs.
pub const PACK_FILE_MAX: u64 = 1 << 20;
/// A pack is closed at this size: few objects, and still a dozen packs to
/// upload and fetch in parallel for a home like the bench's.
pub const PACK_TARGET: usize = 4 << 20;
/// Files up to this size are uploaded in one request; larger ones stream
/// through a multipart upload and are never held whole in memory.
const SMALL: u64 = 8 << 20;
const CHUNK: usize = 1 << 20;
/// Built-in excludes beyond [backup].exclude: none. `*.lock` used to be
/// one and silently dropped committed lockfiles (Cargo.lock, yarn.lock);
/// the daemon's own state is left out by path (the state dir).
pub const DEFAULT_EXCLUDES: &[&str] = &[];

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Row {
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub ino: u64,
    pub mode: u32,
    pub hash: String,
}

/// Where a content hash lives in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loc {
    Blob,
    Pack(String, u64),
}

/// What was uploaded: path → stat and hash, and where each content lives.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Index {
    pub url: String,
    pub rows: Vec<(RelPath, Row)>,
    /// Contents stored as `blobs/<hash>`.
    pub blobs: Vec<String>,
    /// Contents stored in packs: (hash, pack id, offset).
    #[serde(default)]
    pub packed: Vec<(String, String, u64)>,
    /// The store's `pruned` marker when `blobs` and `packed` were last
    /// known right; a different one means a prune ran since.
    #[serde(default)]
    pub epoch: Option<String>,
    /// Digest of the entries of the last committed snapshot.
    pub last: Option<String>,
    pub last_id: Option<String>,
    /// blake3 of the index serialised without this field: a corrupted
    /// index (a flipped hash would put another file's bytes in the next
    /// snapshot) is dropped and the home hashed afresh.
    #[serde(default)]
    pub checksum: Option<String>,
    /// The store was seen to honour conditional creates (probed once).
    /// Left out while false, so an older index keeps its checksum.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub conditional: bool,
}

impl Index {
    pub fn load(path: &Path, url: &str) -> Self {
        let checked = |mut i: Index| {
            let sum = i.checksum.take();
            (sum == Some(i.digest())).then_some(i)
        };
        match fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Index>(&b).ok())
            .and_then(checked)
        {
            // An index for another store says nothing about this one; a
            // corrupted one says nothing at all.
            Some(i) if i.url == url => i,
            _ => Index {
                url: url.to_owned(),
                ..Default::default()
            },
        }
    }

    /// Forget where contents are (after a prune deleted some).
    pub fn forget_locations(&mut self) {
        self.blobs.clear();
        self.packed.clear();
        self.epoch = None;
    }

    fn digest(&self) -> String {
        blake3::hash(&serde_json::to_vec(self).expect("serializable"))
            .to_hex()
            .to_string()
    }

    pub fn store(&mut self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        self.checksum = None;
        self.checksum = Some(self.digest());
        // No fsync: an index lost or older after a crash is still right
        // (rows are used only when the stat matches; contents it names are
        // checked against a listing before a commit references them).
        let r = fs::write(&tmp, serde_json::to_vec(self).expect("serializable"))
            .and_then(|()| fs::rename(&tmp, path));
        self.checksum = None;
        r
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
    /// Files with more than one hard link: each is backed up, and
    /// restored, as a file of its own (the link between them is not kept).
    pub hardlinked: u64,
    /// Files hashed this pass that carry extended attributes or ACLs,
    /// which are not backed up.
    pub xattrs: u64,
    /// Contents the index said were stored but the store no longer has:
    /// uploaded again from the home before the commit.
    pub reuploaded_missing: u64,
    /// Paths left out, by the rule that matched.
    pub excluded: std::collections::BTreeMap<String, u64>,
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
    /// How long to wait for a running prune.
    pub wait: Duration,
}

fn ns(sec: i64, nsec: i64) -> i128 {
    i128::from(sec) * 1_000_000_000 + i128::from(nsec)
}

struct Walked {
    entries: Vec<(Entry, fs::Metadata, PathBuf)>,
    skipped: Skipped,
    unreadable: Vec<String>,
    excluded: HashMap<String, u64>,
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

/// Threads that walk the home: stat latency, not CPU, bounds a walk.
const WALKERS: usize = 4;

/// Walk the home with `WALKERS` threads sharing a stack of directories.
fn walk(home: &Path, excludes: &PathSet, skip: Option<&Path>) -> Walked {
    use std::sync::{Condvar, Mutex};
    // (directories to read, walkers busy reading one)
    let shared = (Mutex::new((vec![PathBuf::new()], 0usize)), Condvar::new());
    let parts: Vec<Walked> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..WALKERS)
            .map(|_| {
                s.spawn(|| {
                    let mut w = Walked {
                        entries: Vec::new(),
                        skipped: Skipped::default(),
                        unreadable: Vec::new(),
                        excluded: HashMap::new(),
                    };
                    let (lock, cv) = &shared;
                    loop {
                        let rel = {
                            let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
                            loop {
                                if let Some(r) = g.0.pop() {
                                    g.1 += 1;
                                    break Some(r);
                                }
                                if g.1 == 0 {
                                    break None;
                                }
                                g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
                            }
                        };
                        let Some(rel) = rel else {
                            cv.notify_all();
                            return w;
                        };
                        let mut found = Vec::new();
                        walk_dir(home, excludes, skip, rel, &mut w, &mut found);
                        let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
                        g.0.extend(found);
                        g.1 -= 1;
                        cv.notify_all();
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("walker")).collect()
    });
    let mut w = Walked {
        entries: Vec::new(),
        skipped: Skipped::default(),
        unreadable: Vec::new(),
        excluded: HashMap::new(),
    };
    for p in parts {
        for (k, n) in p.excluded {
            *w.excluded.entry(k).or_default() += n;
        }
        w.entries.extend(p.entries);
        w.skipped.sockets += p.skipped.sockets;
        w.skipped.fifos += p.skipped.fifos;
        w.skipped.devices += p.skipped.devices;
        w.unreadable.extend(p.unreadable);
    }
    w
}

/// Read one directory: its entries into `w`, its subdirectories onto `stack`.
fn walk_dir(
    home: &Path,
    excludes: &PathSet,
    skip: Option<&Path>,
    rel: PathBuf,
    w: &mut Walked,
    stack: &mut Vec<PathBuf>,
) {
    {
        let dir = home.join(&rel);
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) => {
                w.unreadable.push(format!("{}: {e}", dir.display()));
                return;
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
            // sbx-backup's own state: the state dir, and a restore's
            // in-progress marker (restored, it would name another snapshot).
            if skip == Some(r.as_path()) || r.as_os_str() == crate::restore::MARKER {
                continue;
            }
            if let Some(p) = excludes.first_match(&r, ft.is_dir()) {
                *w.excluded.entry(p.text.clone()).or_default() += 1;
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
                pack: None,
                offset: None,
                uid: Some(md.uid()),
                gid: Some(md.gid()),
            };
            w.entries.push((entry, md, full));
        }
    }
}

/// Read `f` to its end in `CHUNK`s, each handed to `each`.
fn read_all(f: &mut fs::File, mut each: impl FnMut(&[u8])) -> std::io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        each(&buf[..n]);
    }
}

/// Hash a file while making sure it did not change under us; also
/// whether it carries extended attributes (not backed up: reported).
fn hash_file(path: &Path, before: &fs::Metadata) -> Result<Option<(String, bool)>, std::io::Error> {
    let mut f = fs::File::open(path)?;
    let xattrs = {
        use std::os::fd::AsFd;
        sbx_sys::has_xattrs(f.as_fd()).unwrap_or(false)
    };
    let mut h = blake3::Hasher::new();
    read_all(&mut f, |b| {
        h.update(b);
    })?;
    let after = f.metadata()?;
    let same = after.len() == before.len()
        && after.mtime() == before.mtime()
        && after.mtime_nsec() == before.mtime_nsec()
        && after.ctime() == before.ctime()
        && after.ctime_nsec() == before.ctime_nsec();
    Ok(same.then(|| (h.finalize().to_hex().to_string(), xattrs)))
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
    multipart(remote, &loc, path, hash, &[]).await
}

/// Stream `path` to `loc` through a multipart upload, then `trailer`;
/// false (the upload aborted) when its bytes do not hash to `hash`.
async fn multipart(
    remote: &Remote,
    loc: &object_store::path::Path,
    path: &Path,
    hash: &str,
    trailer: &[u8],
) -> Result<bool, StoreError> {
    let Ok(mut f) = tokio::fs::File::open(path).await else {
        return Ok(false);
    };
    let up = remote
        .store
        .put_multipart(loc)
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
    w.write(trailer);
    w.finish().await.map_err(|e| remote.down(e))?;
    Ok(true)
}

/// Upload one large file as a pack of its own (its content, then a salt),
/// streamed: read once for the pack's name, once to send it, the content
/// checked against `hash` both times. None: it changed meanwhile.
async fn upload_alone(remote: &Remote, path: &Path, hash: &str) -> Result<Option<Loc>, StoreError> {
    let salt = salt();
    let named = {
        let (path, salt, hash) = (path.to_owned(), salt.clone(), hash.to_owned());
        tokio::task::spawn_blocking(move || -> std::io::Result<Option<String>> {
            let (mut content, mut pack) = (blake3::Hasher::new(), blake3::Hasher::new());
            read_all(&mut fs::File::open(&path)?, |b| {
                content.update(b);
                pack.update(b);
            })?;
            pack.update(&salt);
            Ok((content.finalize().to_hex().as_str() == hash)
                .then(|| pack.finalize().to_hex().to_string()))
        })
        .await
        .expect("hash task")
    };
    let Ok(Some(id)) = named else {
        return Ok(None);
    };
    let sent = multipart(remote, &remote.pack(&id), path, hash, &salt).await?;
    Ok(sent.then_some(Loc::Pack(id, 0)))
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

type Res<T> = Result<T, Box<dyn sbx_core::SbxError>>;

/// How a pass ended: done, or behind a snapshot another writer committed
/// (its seq), so the home is walked again after it.
enum Pass {
    Done(Box<Report>),
    Behind(u64),
}

/// One sync: a pass, walked again while another writer commits first, so
/// a snapshot never sorts after one taken from a newer walk.
pub async fn sync(remote: &Remote, o: &Options<'_>) -> Res<Report> {
    let mut base = None;
    for _ in 0..5 {
        match pass(remote, o, base).await? {
            Pass::Done(r) => return Ok(*r),
            Pass::Behind(head) => base = Some(head),
        }
    }
    Err(Box::new(remote.down(
        "other writers kept committing to this prefix during five passes",
    )))
}

async fn pass(remote: &Remote, o: &Options<'_>, base: Option<u64>) -> Res<Pass> {
    let mut patterns: Vec<PathPattern> = o.excludes.to_vec();
    for p in DEFAULT_EXCLUDES {
        patterns.push(PathPattern::new(p).expect("built-in pattern"));
    }
    // The state dir is left out by path, not by a glob of its name: a name
    // with `[` or `*` would panic or exclude its siblings.
    let skip = state_rel(o.home, o.state_dir);
    let set = PathSet::new(&patterns)
        .map_err(|e| sbx_core::error::Message::new(sbx_core::Exit::Config, e.to_string()))?;
    let index_path = o.state_dir.join("index.json");
    // Parse the index while the home is walked.
    let loading = tokio::task::spawn_blocking({
        let (p, url) = (index_path.clone(), remote.url.clone());
        move || Index::load(&p, &url)
    });
    let walked = tokio::task::spawn_blocking({
        let home = o.home.to_owned();
        move || walk(&home, &set, skip.as_deref())
    });
    let mut index = loading.await.expect("index");
    // The snapshot this walk follows: the last one this state committed,
    // or the head a previous attempt found.
    let base = base.unwrap_or_else(|| {
        index
            .last_id
            .as_deref()
            .and_then(crate::store::seq_of)
            .unwrap_or(0)
    });
    let rows: HashMap<Vec<u8>, Row> = index.rows.drain(..).map(|(p, r)| (p.0, r)).collect();
    let mut known: HashMap<String, Loc> = index
        .blobs
        .drain(..)
        .map(|h| (h, Loc::Blob))
        .chain(
            index
                .packed
                .drain(..)
                .map(|(h, p, off)| (h, Loc::Pack(p, off))),
        )
        .collect();

    let walked = walked.await.expect("walk");
    let mut rep = Report {
        skipped: walked.skipped,
        unreadable: walked.unreadable,
        excluded: walked.excluded.into_iter().collect(),
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
                rep.hardlinked += u64::from(md.nlink() > 1);
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
    for j in hashed {
        let (mut e, full, mut row, r) = j.expect("hash task");
        match r {
            Ok(Some((h, xattrs))) => {
                rep.xattrs += u64::from(xattrs);
                row.hash = h.clone();
                e.hash = Some(h);
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
    entries.sort_by(|a, b| a.path.cmp(&b.path));

    // Nothing differs from the last commit: three listings show that
    // commit is still whole (a lifecycle rule or a wiped bucket takes a
    // quiet home's objects too); if it is not, a new one is committed,
    // uploading again what is gone.
    if !o.dry_run
        && index.last.as_deref() == Some(digest(&entries, &rep.skipped).as_str())
        && !last_intact(remote, &index, &entries, &known).await?
    {
        index.last = None;
    }
    if !o.dry_run && index.last.as_deref() == Some(digest(&entries, &rep.skipped).as_str()) {
        finish_counts(&mut rep, &entries);
        rep.unchanged = true;
        rep.snapshot = index.last_id.clone();
        if rep.hashed == 0 {
            // Every row came from the index as it is: no write, no fsync.
            return Ok(Pass::Done(Box::new(rep)));
        }
        return save(o, &index_path, index, new_rows, &known, rep).map(|r| Pass::Done(Box::new(r)));
    }
    if o.dry_run {
        if known.is_empty() {
            known = locations(remote).await?;
        }
        let need = missing(&entries, &known, o.home);
        rep.uploaded = need.len() as u64;
        rep.uploaded_bytes = need.values().map(|(_, size)| size).sum();
        finish_counts(&mut rep, &entries);
        return Ok(Pass::Done(Box::new(rep)));
    }

    // A store that ignores conditional creates gets nothing but the probe,
    // not even the lock: it is refused before anything of ours is written.
    if !index.conditional {
        require_conditional(remote).await?;
        index.conditional = true;
    }
    // Prune may not run from here to the commit; a prune that ran since the
    // index was written may have deleted what it says exists.
    let lease = crate::lock::acquire(remote, crate::lock::Kind::Sync, o.wait).await?;
    let r = commit(
        remote,
        o,
        Commit {
            index: &mut index,
            index_path: &index_path,
            known: &mut known,
            entries: &mut entries,
            new_rows: &mut new_rows,
            old_rows: &rows,
            rep: &mut rep,
            lease: &lease,
            base,
        },
    )
    .await;
    match r {
        Err(e) => {
            lease.release().await;
            Err(e)
        }
        Ok(Some(head)) => {
            lease.release().await;
            Ok(Pass::Behind(head))
        }
        Ok(None) => {
            // The lock's DELETE goes out while the index is written.
            let (_, saved) = tokio::join!(lease.release(), async {
                save(o, &index_path, index, new_rows, &known, rep)
            });
            saved.map(|r| Pass::Done(Box::new(r)))
        }
    }
}

/// Whether the snapshot the index last committed is still listed with
/// every pack and blob it uses (by the index's locations; by the manifest
/// itself when the index has forgotten them, after a prune).
async fn last_intact(
    remote: &Remote,
    index: &Index,
    entries: &[Entry],
    known: &HashMap<String, Loc>,
) -> Res<bool> {
    let Some(last) = &index.last_id else {
        return Ok(false);
    };
    let (ids, packs, blobs) = tokio::try_join!(
        remote.snapshot_ids(),
        remote.pack_ids(),
        remote.blob_hashes()
    )?;
    if !ids.contains(last) {
        return Ok(false);
    }
    let packs: HashMap<String, u64> = packs.into_iter().collect();
    let blobs: HashMap<String, u64> = blobs.into_iter().collect();
    let files = entries
        .iter()
        .filter_map(|e| Some((e.hash.as_deref()?, e.size)))
        .filter(|(h, _)| *h != EMPTY);
    if let Some(all) = files
        .map(|(h, n)| known.get(h).map(|l| whole(l, h, Some(n), &packs, &blobs)))
        .collect::<Option<Vec<bool>>>()
    {
        return Ok(all.into_iter().all(|b| b));
    }
    let m = match crate::restore::load(remote, Some(last)).await {
        Ok(m) => m,
        Err(e) if e.exit() == sbx_core::Exit::TempFail => return Err(e),
        Err(_) => return Ok(false),
    };
    Ok(m.entries.iter().all(|e| match (&e.hash, m.location(e)) {
        (Some(h), _) if h == EMPTY => true,
        (Some(h), Some((p, off))) => {
            whole(&Loc::Pack(p.into(), off), h, Some(e.size), &packs, &blobs)
        }
        (Some(h), None) => whole(&Loc::Blob, h, Some(e.size), &packs, &blobs),
        (None, _) => true,
    }))
}

/// Each content's size, by hash.
fn sizes(entries: &[Entry]) -> HashMap<&str, u64> {
    entries
        .iter()
        .filter_map(|e| Some((e.hash.as_deref()?, e.size)))
        .collect()
}

/// Whether the store's listing (object -> size) holds content `h` at `l`
/// whole: a blob of its size, a pack long enough for its range. An
/// object cut short (a partial write) counts as gone.
fn whole(
    l: &Loc,
    h: &str,
    size: Option<u64>,
    packs: &HashMap<String, u64>,
    blobs: &HashMap<String, u64>,
) -> bool {
    match l {
        Loc::Blob => blobs.get(h).is_some_and(|n| size.is_none_or(|s| *n == s)),
        Loc::Pack(p, off) => packs
            .get(p)
            .is_some_and(|n| size.is_none_or(|s| *n >= off.saturating_add(s))),
    }
}

struct Commit<'a> {
    index: &'a mut Index,
    index_path: &'a Path,
    known: &'a mut HashMap<String, Loc>,
    entries: &'a mut Vec<Entry>,
    new_rows: &'a mut Vec<(RelPath, Row)>,
    old_rows: &'a HashMap<Vec<u8>, Row>,
    rep: &'a mut Report,
    lease: &'a crate::lock::Lease,
    base: u64,
}

/// This home's id (the state dir's `home-id`), checked against the
/// prefix's: one home per prefix, or two homes rotate each other's
/// snapshots out and a first boot restores the other one.
pub async fn claim_home(remote: &Remote, state_dir: &Path) -> Res<String> {
    let file = state_dir.join("home-id");
    // The prefix's id first, then ours: a pass of this home writes its
    // local id before it claims the prefix, so one read in this order
    // that sees the claim also sees the id. In the other order a first
    // pass running meanwhile (the daemon's) looked like another home.
    let stored = match remote.store.get(&remote.home_id()).await {
        Ok(g) => Some(
            String::from_utf8_lossy(&g.bytes().await.map_err(|e| remote.down(e))?)
                .trim()
                .to_owned(),
        ),
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => return Err(Box::new(remote.down(e))),
    };
    crate::hook::point("home-id-between");
    let local = fs::read_to_string(&file)
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty());
    let refuse = |theirs: &str, ours: &str| -> Box<dyn sbx_core::SbxError> {
        Box::new(sbx_core::error::Message::new(
            sbx_core::Exit::Config,
            format!(
                "{}: holds the backups of another home ({theirs}; this one is {ours}): give this \
                 home its own [backup].url prefix, replace its files with that home's (`sbx-backup \
                 restore --force`), or make it the prefix's owner keeping its files (`sbx-backup \
                 adopt`)",
                remote.url
            ),
        ))
    };
    match (local, stored) {
        (Some(l), Some(s)) if l == s => Ok(l),
        (Some(l), Some(s)) => Err(refuse(&s, &l)),
        (None, Some(s)) => Err(refuse(&s, "new, with no id yet")),
        (local, None) => {
            crate::hook::point("home-id-read");
            let id = match local {
                Some(l) => l,
                None => new_home_id(state_dir, &file).map_err(|e| sbx_core::error::PathError {
                    path: file.clone(),
                    source: e,
                })?,
            };
            let opts = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            match remote
                .store
                .put_opts(&remote.home_id(), PutPayload::from(id.clone()), opts)
                .await
            {
                Ok(_) => Ok(id),
                // Claimed meanwhile: by another pass of this home (the
                // daemon's first and a sync the user runs) or another home.
                Err(object_store::Error::AlreadyExists { .. }) => {
                    let g = remote
                        .store
                        .get(&remote.home_id())
                        .await
                        .map_err(|e| remote.down(e))?;
                    let s = g.bytes().await.map_err(|e| remote.down(e))?;
                    if String::from_utf8_lossy(&s).trim() == id {
                        Ok(id)
                    } else {
                        Err(refuse("claimed a moment ago", &id))
                    }
                }
                Err(e) => Err(Box::new(remote.down(e))),
            }
        }
    }
}

/// Refuse a store that ignores conditional creates (S3's `If-None-Match:
/// *`, GCS's `x-goog-if-generation-match: 0`; some S3-compatible servers,
/// GCS emulators and proxies drop them): snapshot order and the prefix's
/// one home rest on them, and there two writers would silently overwrite
/// each other's snapshot. Probed by creating one object twice: the second
/// must fail.
async fn require_conditional(remote: &Remote) -> Res<()> {
    let key = remote.probe(&sbx_sys::beneath::tmp_name()[5..]);
    let header = if remote.url.starts_with("gs://") {
        "x-goog-if-generation-match: 0"
    } else {
        "If-None-Match: *"
    };
    let create = || PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    let refuse = |why: &str| -> Box<dyn sbx_core::SbxError> {
        Box::new(sbx_core::error::Message::new(
            sbx_core::Exit::Config,
            format!(
                "{}: the store {why} a conditional write ({header}), which sbx-backup \
                 needs to order snapshots and keep one home per prefix: use a store that honours \
                 them (S3, GCS, file://) or remove the proxy that drops the header",
                remote.url
            ),
        ))
    };
    let r = async {
        for body in ["1", "2"] {
            match remote
                .store
                .put_opts(&key, PutPayload::from(body), create())
                .await
            {
                Ok(_) if body == "1" => {}
                Ok(_) => return Err(refuse("ignored")),
                Err(object_store::Error::AlreadyExists { .. }) if body == "2" => {}
                Err(object_store::Error::NotImplemented { .. }) => return Err(refuse("refused")),
                Err(e) => return Err(Box::new(remote.down(e)) as Box<dyn sbx_core::SbxError>),
            }
        }
        Ok(())
    }
    .await;
    let _ = remote.store.delete(&key).await;
    r
}

/// A new id for this home, published whole and once: two passes of one
/// home that start together (the daemon's first and a sync the user runs)
/// must not each make one, or the loser's id, left in the state dir, would
/// lock this home out of its own prefix for good.
fn new_home_id(state_dir: &Path, file: &Path) -> std::io::Result<String> {
    fs::create_dir_all(state_dir)?;
    let id = sbx_sys::beneath::tmp_name()[5..].to_owned();
    let tmp = state_dir.join(format!("home-id.{id}"));
    fs::write(&tmp, &id)?;
    let r = fs::hard_link(&tmp, file);
    let _ = fs::remove_file(&tmp);
    match r {
        Ok(()) => Ok(id),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok(fs::read_to_string(file)?.trim().to_owned())
        }
        Err(e) => Err(e),
    }
}

/// Record `id` as this home's (after restoring a snapshot into it).
pub fn adopt_home(state_dir: &Path, id: &str) -> std::io::Result<()> {
    fs::create_dir_all(state_dir)?;
    fs::write(state_dir.join("home-id"), id)
}

/// blake3 of no bytes: an empty file is never stored, only named.
pub const EMPTY: &str = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262";

fn digest(entries: &[Entry], skipped: &Skipped) -> String {
    blake3::hash(&serde_json::to_vec(&(entries, skipped)).expect("serializable"))
        .to_hex()
        .to_string()
}

/// Contents the entries need that the store lacks: hash -> (path, size).
fn missing(
    entries: &[Entry],
    known: &HashMap<String, Loc>,
    home: &Path,
) -> HashMap<String, (PathBuf, u64)> {
    let mut out = HashMap::new();
    for e in entries {
        if let Some(h) = &e.hash
            && h != EMPTY
            && !known.contains_key(h)
        {
            out.entry(h.clone())
                .or_insert_with(|| (home.join(e.path.as_path()), e.size));
        }
    }
    out
}

/// Where every content of every snapshot lives, from the store: blobs by
/// listing, packed contents from the manifests.
pub async fn locations(
    remote: &Remote,
) -> Result<HashMap<String, Loc>, Box<dyn sbx_core::SbxError>> {
    let mut known: HashMap<String, Loc> = remote
        .blob_hashes()
        .await?
        .into_iter()
        .map(|(h, _)| (h, Loc::Blob))
        .collect();
    let packs: HashSet<String> = remote
        .pack_ids()
        .await?
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let ids = remote.snapshot_ids().await?;
    let ms: Vec<_> =
        futures::stream::iter(ids.iter().map(|id| crate::restore::load(remote, Some(id))))
            .buffer_unordered(PARALLEL)
            .collect()
            .await;
    for m in ms {
        // An unreadable snapshot only means less to deduplicate against.
        let Ok(m) = m else { continue };
        for e in &m.entries {
            if let (Some(h), Some((p, off))) = (&e.hash, m.location(e))
                && packs.contains(p)
            {
                known
                    .entry(h.clone())
                    .or_insert_with(|| Loc::Pack(p.to_owned(), off));
            }
        }
    }
    Ok(known)
}

/// The newest prune marker's text (None: no prune has deleted anything).
pub(crate) async fn epoch(remote: &Remote) -> Result<Option<String>, StoreError> {
    Ok(newest_marker(remote).await?.1)
}

/// The newest prune marker: its number (None: only the single marker
/// older versions wrote, or none) and its text. With a chain, the single
/// marker's text follows on a line of its own when it differs: a prune
/// of an older version on this prefix writes only that one.
pub(crate) async fn newest_marker(
    remote: &Remote,
) -> Result<(Option<u64>, Option<String>), StoreError> {
    let text = |g: object_store::GetResult| async move {
        g.bytes()
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(|e| remote.down(e))
    };
    // A newer prune may remove the one listed as newest before it is read.
    for _ in 0..5 {
        let at = match remote.marker_seqs().await?.last() {
            Some(&s) => (Some(s), remote.marker(s)),
            None => (None, remote.pruned()),
        };
        match remote.store.get(&at.1).await {
            Ok(g) if at.0.is_some() => {
                let top = text(g).await?;
                let single = match remote.store.get(&remote.pruned()).await {
                    Ok(g) => Some(text(g).await?),
                    Err(object_store::Error::NotFound { .. }) => None,
                    Err(e) => return Err(remote.down(e)),
                };
                return Ok(match single {
                    Some(o) if o.trim() != top.trim() => (at.0, Some(format!("{top}\n{o}"))),
                    _ => (at.0, Some(top)),
                });
            }
            Ok(g) => return Ok((at.0, Some(text(g).await?))),
            Err(object_store::Error::NotFound { .. }) if at.0.is_none() => return Ok((None, None)),
            Err(object_store::Error::NotFound { .. }) => continue,
            Err(e) => return Err(remote.down(e)),
        }
    }
    Err(remote.down("prune markers kept changing while read"))
}

/// The `pruned` marker: which prune wrote it last, and every object it
/// deletes (`pack <id>`, `blob <hash>`), named before the first goes.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Marker {
    pub id: String,
    #[serde(default)]
    pub condemned: Vec<String>,
}

/// The objects marker text `ep` condemns, one marker a line (none for an
/// older marker: an id).
pub(crate) fn condemned(ep: Option<&str>) -> HashSet<String> {
    ep.unwrap_or_default()
        .lines()
        .filter_map(|t| serde_json::from_str::<Marker>(t).ok())
        .flat_map(|m| m.condemned)
        .collect()
}

/// The object content `h` lives in at `l`, as the marker names it.
fn object_key(l: &Loc, h: &str) -> String {
    match l {
        Loc::Blob => format!("blob {h}"),
        Loc::Pack(p, _) => format!("pack {p}"),
    }
}

/// 16 random bytes closing every pack: a pack's name (its blake3) is
/// never one an earlier pack had, so content stored again after a prune
/// condemned its old pack never lands under a name that prune deletes.
fn salt() -> Vec<u8> {
    sbx_sys::beneath::tmp_name().into_bytes()
}

/// Upload what the store lacks and commit snapshot `base + 1`. Ok(Some(head)):
/// another writer committed since `base`; nothing was committed.
async fn commit(remote: &Remote, o: &Options<'_>, c: Commit<'_>) -> Res<Option<u64>> {
    let Commit {
        index,
        index_path,
        known,
        entries,
        new_rows,
        old_rows,
        rep,
        lease,
        base,
    } = c;
    // An empty home where snapshots exist is a lost volume, not a deletion.
    if entries.is_empty() && !remote.snapshot_ids().await?.is_empty() {
        sbx_core::output::warn(
            "the home is empty but snapshots exist: not committing (restore with `sbx-backup first-boot` or `restore`)",
        );
        rep.unchanged = true;
        rep.snapshot = index.last_id.clone();
        return Ok(None);
    }
    let home = claim_home(remote, o.state_dir).await?;
    let ep = epoch(remote).await?;
    if ep != index.epoch || known.is_empty() {
        *known = locations(remote).await?;
        index.epoch = ep.clone();
    }
    // What a prune is deleting is never referenced, even while it is
    // still listed: it is stored again under a fresh name.
    let doomed = condemned(ep.as_deref());
    known.retain(|h, l| !doomed.contains(&object_key(l, h)));
    // Objects vanish behind the index's back (a lifecycle rule, a wiped
    // bucket): what it says is stored is checked against one listing, and
    // whatever is gone is uploaded again from the home below.
    let (packs, blobs) = tokio::try_join!(remote.pack_ids(), remote.blob_hashes())?;
    let (packs, blobs) = (packs.into_iter().collect(), blobs.into_iter().collect());
    let before = known.len();
    {
        let sizes = sizes(entries);
        known.retain(|h, l| whole(l, h, sizes.get(h.as_str()).copied(), &packs, &blobs));
    }
    let gone = before - known.len();
    let need = missing(entries, known, o.home);
    if gone > 0 {
        rep.reuploaded_missing = need.len() as u64;
    }
    crate::hook::point("before-upload");
    let (small, large): (Vec<_>, Vec<_>) = need
        .into_iter()
        .partition(|(_, (_, size))| *size < PACK_FILE_MAX);

    let mut failed: HashSet<String> = HashSet::new();
    // Large files: an object each.
    let doomed = &doomed;
    let results: Vec<_> =
        futures::stream::iter(large.into_iter().map(|(h, (full, size))| async move {
            // Its blob's name is condemned: a pack of its own instead.
            let ok = if doomed.contains(&format!("blob {h}")) {
                upload_alone(remote, &full, &h).await
            } else {
                upload(remote, &full, &h, size)
                    .await
                    .map(|ok| ok.then_some(Loc::Blob))
            };
            (h, size, ok)
        }))
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    for (h, size, ok) in results {
        if let Some(l) = ok? {
            rep.uploaded += 1;
            rep.uploaded_bytes += size;
            known.insert(h, l);
        } else {
            rep.changing += 1;
            failed.insert(h);
        }
    }
    // Small files: packs, in path order so a directory restores from few.
    let mut small: Vec<_> = small.into_iter().collect();
    small.sort_by(|a, b| a.1.0.cmp(&b.1.0));
    let mut groups: Vec<Vec<(String, PathBuf, u64)>> = Vec::new();
    let mut fill = PACK_TARGET;
    for (h, (full, size)) in small {
        if fill + size as usize > PACK_TARGET {
            groups.push(Vec::new());
            fill = 0;
        }
        fill += size as usize;
        if let Some(g) = groups.last_mut() {
            g.push((h, full, size));
        }
    }
    let results: Vec<_> = futures::stream::iter(groups.into_iter().map(|g| write_pack(remote, g)))
        .buffer_unordered(PARALLEL / 2)
        .collect()
        .await;
    for r in results {
        let (id, stored, bad) = r?;
        for (h, off, size) in stored {
            rep.uploaded += 1;
            rep.uploaded_bytes += size;
            known.insert(h, Loc::Pack(id.clone(), off));
        }
        rep.changing += bad.len() as u64;
        failed.extend(bad);
    }
    // A file whose bytes did not match its hash changed while read: it
    // keeps its last good version (when the store has it) and is retried
    // next pass; only a file never stored before is left out.
    if !failed.is_empty() {
        let mut kept = Vec::with_capacity(entries.len());
        for mut e in entries.drain(..) {
            if e.hash.as_ref().is_some_and(|h| failed.contains(h)) {
                match old_rows.get(&e.path.0) {
                    Some(old) if old.hash == EMPTY || known.contains_key(&old.hash) => {
                        e.hash = Some(old.hash.clone());
                        e.size = old.size;
                        e.mtime_ns = old.mtime_ns;
                    }
                    _ => continue,
                }
            }
            kept.push(e);
        }
        *entries = kept;
        // No row for them: the next pass hashes them again.
        new_rows.retain(|(_, r)| !failed.contains(&r.hash));
    }
    finish_counts(rep, entries);

    let ids = remote.snapshot_ids().await?;
    let dg = digest(entries, &rep.skipped);
    if index.last.as_deref() == Some(dg.as_str()) {
        rep.unchanged = true;
        rep.snapshot = index.last_id.clone();
        return Ok(None);
    }
    // Someone committed after the snapshot this walk follows: walk again
    // after it rather than commit an older view as the newest.
    let head = ids
        .iter()
        .filter_map(|i| crate::store::seq_of(i))
        .max()
        .unwrap_or(0);
    if head > base {
        return Ok(Some(head));
    }
    let mut packs: Vec<String> = Vec::new();
    let mut slot: HashMap<String, u32> = HashMap::new();
    let mut located = entries.clone();
    for e in &mut located {
        let Some(h) = &e.hash else { continue };
        match known.get(h) {
            Some(Loc::Pack(p, off)) => {
                let n = *slot.entry(p.clone()).or_insert_with(|| {
                    packs.push(p.clone());
                    packs.len() as u32 - 1
                });
                e.pack = Some(n);
                e.offset = Some(*off);
            }
            Some(Loc::Blob) => {}
            None if h == EMPTY => {}
            None => {
                return Err(Box::new(remote.down(format!(
                    "content {h} of {:?} is neither uploaded nor in the store",
                    e.path.as_path()
                ))));
            }
        }
    }
    let seq = base + 1;
    let mut m = Manifest {
        format: manifest::FORMAT.into(),
        version: manifest::VERSION,
        id: crate::store::seq_id(seq),
        // For people and --keep-within only; order is `seq`.
        created: humantime::format_rfc3339_seconds(crate::hook::wall_clock()).to_string(),
        entries: located,
        skipped: rep.skipped.clone(),
        packs,
        home: Some(home),
        seq: Some(seq),
        checksum: None,
    };
    let body = m.seal();
    // A pass that could not record its snapshot must not commit it (each
    // retry would commit another and rotate history out): the index,
    // with the rows it will reference, is written first.
    crate::hook::point("before-index");
    fs::create_dir_all(o.state_dir).ok();
    let mut pre = Index {
        url: index.url.clone(),
        rows: new_rows.clone(),
        epoch: index.epoch.clone(),
        last: index.last.clone(),
        last_id: index.last_id.clone(),
        conditional: index.conditional,
        ..Default::default()
    };
    pre.store(index_path)
        .map_err(|e| sbx_core::error::PathError {
            path: index_path.to_owned(),
            source: e,
        })?;
    crate::hook::point("before-commit");
    let opts = PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    lease.check()?;
    crate::hook::point("commit-put");
    match remote
        .store
        .put_opts(&remote.snapshot(&m.id), PutPayload::from(body), opts)
        .await
    {
        Ok(_) => {}
        // The store serialised another writer into this seq first.
        Err(object_store::Error::AlreadyExists { .. }) => return Ok(Some(seq)),
        Err(e) => return Err(Box::new(remote.down(e))),
    }
    crate::hook::point("after-commit");
    // A prune that wrote its marker after ours was read (its lock called
    // stale while it was paused) may delete what this snapshot uses:
    // then the snapshot is withdrawn, unreported, and the home committed
    // again from what that marker leaves.
    let now = epoch(remote).await?;
    if now != ep {
        let doomed = condemned(now.as_deref());
        let hit = m
            .packs
            .iter()
            .any(|p| doomed.contains(&format!("pack {p}")))
            || m.entries.iter().any(|e| {
                e.pack.is_none()
                    && e.hash
                        .as_ref()
                        .is_some_and(|h| doomed.contains(&format!("blob {h}")))
            });
        if hit {
            remote
                .store
                .delete(&remote.snapshot(&m.id))
                .await
                .map_err(|e| remote.down(e))?;
            return Ok(Some(seq));
        }
    }
    index.last = Some(dg);
    index.last_id = Some(m.id.clone());
    rep.snapshot = Some(m.id.clone());
    // Retention: manifests only (packs and blobs go in `prune`), in the
    // store's order; never the snapshot just reported, never the newest,
    // never the one an interrupted restore into the home is bringing back
    // (its retry would find nothing to finish from).
    let ids = remote.snapshot_ids().await?;
    if ids.len() > o.keep as usize {
        let newest = ids.last().cloned();
        let restoring = crate::restore::pending(o.home);
        for id in &ids[..ids.len() - o.keep as usize] {
            if *id == m.id || Some(id) == newest.as_ref() || restoring.as_ref() == Some(id) {
                continue;
            }
            remote
                .store
                .delete(&remote.snapshot(id))
                .await
                .map_err(|e| remote.down(e))?;
            rep.deleted_snapshots.push(id.clone());
        }
    }
    Ok(None)
}

/// Read the files of one pack (each checked against its hash), upload it
/// as `packs/<blake3 of the pack>`. Returns the pack id, what it holds
/// (hash, offset, size) and the hashes whose file changed since hashing.
async fn write_pack(
    remote: &Remote,
    files: Vec<(String, PathBuf, u64)>,
) -> Result<(String, Vec<(String, u64, u64)>, Vec<String>), StoreError> {
    let (buf, stored, bad) = tokio::task::spawn_blocking(move || {
        let mut buf = Vec::with_capacity(files.iter().map(|f| f.2 as usize).sum());
        let (mut stored, mut bad) = (Vec::new(), Vec::new());
        for (h, full, _) in files {
            match fs::read(&full) {
                Ok(b) if blake3::hash(&b).to_hex().as_str() == h => {
                    stored.push((h, buf.len() as u64, b.len() as u64));
                    buf.extend_from_slice(&b);
                }
                _ => bad.push(h),
            }
        }
        (buf, stored, bad)
    })
    .await
    .expect("pack task");
    let mut buf = buf;
    buf.extend_from_slice(&salt());
    let id = blake3::hash(&buf).to_hex().to_string();
    if !stored.is_empty() {
        remote
            .store
            .put(&remote.pack(&id), PutPayload::from(buf))
            .await
            .map_err(|e| remote.down(e))?;
    }
    Ok((id, stored, bad))
}

fn save(
    o: &Options<'_>,
    index_path: &Path,
    mut index: Index,
    rows: Vec<(RelPath, Row)>,
    known: &HashMap<String, Loc>,
    rep: Report,
) -> Result<Report, Box<dyn sbx_core::SbxError>> {
    index.rows = rows;
    index.blobs.clear();
    index.packed.clear();
    for (h, l) in known {
        match l {
            Loc::Blob => index.blobs.push(h.clone()),
            Loc::Pack(p, off) => index.packed.push((h.clone(), p.clone(), *off)),
        }
    }
    fs::create_dir_all(o.state_dir).ok();
    index
        .store(index_path)
        .map_err(|e| sbx_core::error::PathError {
            path: index_path.to_owned(),
            source: e,
        })?;
    Ok(rep)
}

fn finish_counts(rep: &mut Report, entries: &[Entry]) {
    rep.files = entries.iter().filter(|e| e.kind == Kind::File).count() as u64;
    rep.bytes = entries.iter().map(|e| e.size).sum();
}
