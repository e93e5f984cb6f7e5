//! `check` (is everything the snapshots reference there, and right?) and
//! `prune` (drop snapshots by rule, then the packs and blobs nothing
//! references), under the lock rule in `lock`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::Serialize;

use crate::manifest::{Kind, Manifest};
use crate::store::Remote;
use crate::sync::{EMPTY, PACK_FILE_MAX, PARALLEL};

type Res<T> = Result<T, Box<dyn sbx_core::SbxError>>;

/// One file's use of an object: (snapshot, path, offset, size, hash).
struct Use {
    snapshot: String,
    path: String,
    off: u64,
    size: u64,
    hash: String,
}

#[derive(Debug, Serialize)]
pub struct Problem {
    /// `pack <id>`, `blob <hash>` or `snapshot <id>`.
    pub object: String,
    pub why: String,
    /// `<snapshot>:<path>` of every file it breaks.
    pub files: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct CheckReport {
    pub snapshots: usize,
    pub packs: usize,
    pub blobs: usize,
    pub read_bytes: u64,
    pub problems: Vec<Problem>,
}

fn path_text(e: &crate::manifest::Entry) -> String {
    format!("{:?}", e.path.as_path())
}

/// Every object the snapshots reference, keyed `pack <id>` / `blob <hash>`.
fn uses(ms: &[Manifest]) -> BTreeMap<String, Vec<Use>> {
    let mut out: BTreeMap<String, Vec<Use>> = BTreeMap::new();
    for m in ms {
        for e in m.entries.iter().filter(|e| e.kind == Kind::File) {
            let Some(h) = &e.hash else { continue };
            let (key, off) = match m.location(e) {
                _ if e.size == 0 && h == EMPTY => continue,
                Some((p, off)) => (format!("pack {p}"), off),
                None => (format!("blob {h}"), 0),
            };
            out.entry(key).or_default().push(Use {
                snapshot: m.id.clone(),
                path: path_text(e),
                off,
                size: e.size,
                hash: h.clone(),
            });
        }
    }
    out
}

fn loc(remote: &Remote, key: &str) -> object_store::path::Path {
    match key.split_once(' ') {
        Some(("pack", id)) => remote.pack(id),
        Some((_, h)) => remote.blob(h),
        None => remote.blob(key),
    }
}

fn names(us: &[Use]) -> Vec<String> {
    us.iter()
        .map(|u| format!("{}:{}", u.snapshot, u.path))
        .collect()
}

pub async fn check(remote: &Remote, only: Option<&str>, read_data: bool) -> Res<CheckReport> {
    let mut rep = CheckReport::default();
    let ids = match only {
        Some(id) => vec![id.to_owned()],
        None => remote.snapshot_ids().await?,
    };
    let mut ms = Vec::new();
    for id in &ids {
        match crate::restore::load(remote, Some(id)).await {
            Ok(m) => ms.push(m),
            Err(e) if only.is_some() => return Err(e),
            Err(e) => rep.problems.push(Problem {
                object: format!("snapshot {id}"),
                why: e.to_string(),
                files: Vec::new(),
            }),
        }
    }
    rep.snapshots = ms.len();
    let refs = uses(&ms);
    let mut sizes: HashMap<String, u64> = HashMap::new();
    for (p, n) in remote.pack_ids().await? {
        sizes.insert(format!("pack {p}"), n);
    }
    for (h, n) in remote.blob_hashes().await? {
        sizes.insert(format!("blob {h}"), n);
    }
    let mut present = Vec::new();
    for (key, us) in &refs {
        if key.starts_with("pack") {
            rep.packs += 1;
        } else {
            rep.blobs += 1;
        }
        let need = us.iter().map(|u| u.off + u.size).max().unwrap_or(0);
        match sizes.get(key) {
            None => rep.problems.push(Problem {
                object: key.clone(),
                why: "missing".into(),
                files: names(us),
            }),
            Some(n) if *n < need => rep.problems.push(Problem {
                object: key.clone(),
                why: format!("{n} bytes, shorter than the {need} its files need"),
                files: names(us),
            }),
            Some(_) => present.push((key, us)),
        }
    }
    if read_data {
        let found: Vec<Res<(u64, Option<Problem>)>> =
            futures::stream::iter(present.into_iter().map(|(key, us)| async move {
                let got = remote
                    .store
                    .get(&loc(remote, key))
                    .await
                    .map_err(|e| remote.down(e))?;
                let name = key.split_once(' ').map(|x| x.1).unwrap_or(key);
                // A pack of its own: one large file at offset 0, then its salt.
                let alone = key.starts_with("pack")
                    && us
                        .iter()
                        .all(|u| u.off == 0 && u.size >= PACK_FILE_MAX && u.hash == us[0].hash);
                if key.starts_with("blob") || alone {
                    // Large: streamed, never whole in memory.
                    let mut s = got.into_stream();
                    let mut h = blake3::Hasher::new();
                    let mut content = blake3::Hasher::new();
                    let head = if alone { us[0].size } else { u64::MAX };
                    let mut n = 0u64;
                    while let Some(c) = s.next().await {
                        let c = c.map_err(|e| remote.down(e))?;
                        let take = head.saturating_sub(n).min(c.len() as u64) as usize;
                        content.update(&c[..take]);
                        n += c.len() as u64;
                        h.update(&c);
                    }
                    let whole = h.finalize().to_hex().as_str() == name;
                    // A blob's name is its content's hash.
                    let bytes_ok = if alone {
                        n >= head && content.finalize().to_hex().as_str() == us[0].hash
                    } else {
                        whole
                    };
                    let p = (!whole || !bytes_ok).then(|| Problem {
                        object: key.clone(),
                        why: if bytes_ok {
                            "content does not match its name (no file's bytes are affected)".into()
                        } else {
                            "content does not match its hash".into()
                        },
                        files: if bytes_ok { Vec::new() } else { names(us) },
                    });
                    return Ok((n, p));
                }
                let bytes = got.bytes().await.map_err(|e| remote.down(e))?;
                let whole = blake3::hash(&bytes).to_hex().as_str() == name;
                let bad: Vec<String> = us
                    .iter()
                    .filter(|u| {
                        let r = u.off as usize..(u.off + u.size) as usize;
                        bytes
                            .get(r)
                            .is_none_or(|b| blake3::hash(b).to_hex().as_str() != u.hash)
                    })
                    .map(|u| format!("{}:{}", u.snapshot, u.path))
                    .collect();
                let p = (!whole || !bad.is_empty()).then(|| Problem {
                    object: key.clone(),
                    why: if bad.is_empty() {
                        "content does not match its name (no file's bytes are affected)".into()
                    } else {
                        "content does not match its hash".into()
                    },
                    files: bad,
                });
                Ok((bytes.len() as u64, p))
            }))
            .buffer_unordered(PARALLEL)
            .collect()
            .await;
        for f in found {
            let (n, p) = f?;
            rep.read_bytes += n;
            rep.problems.extend(p);
        }
    }
    Ok(rep)
}

#[derive(Debug, Default, Serialize)]
pub struct PruneReport {
    pub kept_snapshots: Vec<String>,
    pub removed_snapshots: Vec<String>,
    pub deleted_packs: u64,
    pub deleted_blobs: u64,
    pub deleted_bytes: u64,
    /// Bytes in kept packs that no kept snapshot uses (packs are not
    /// rewritten; they go when their last file does).
    pub unused_bytes_in_kept_packs: u64,
    pub dry_run: bool,
}

pub struct PruneOpts {
    pub keep_last: Option<u32>,
    pub keep_within: Option<Duration>,
    pub dry_run: bool,
    pub wait: Duration,
}

fn created_unix(m: &Manifest) -> Option<SystemTime> {
    humantime::parse_rfc3339(&m.created).ok()
}

pub async fn prune(remote: &Remote, o: &PruneOpts) -> Res<PruneReport> {
    let lease = crate::lock::acquire(remote, crate::lock::Kind::Prune, o.wait).await?;
    let r = prune_locked(remote, o, &lease).await;
    lease.release().await;
    r
}

/// Write this prune's marker before its first delete: its own garbage,
/// and what the newest marker named that a prune paused past its lease
/// (its lock stolen, its marker overwritten) may still delete: every
/// pack still listed, and every blob (a blob's name is its content's
/// hash, so it is stored again under that name once gone; a pack's
/// name never repeats). Markers form a chain of conditional creates;
/// one is in force only while it is the newest, so a prune that created
/// one below a newer marker (it read the chain before pausing) makes
/// another on top, and never overwrites what it did not read.
async fn mark(remote: &Remote, garbage: &[(String, u64)], listed: &HashSet<String>) -> Res<()> {
    for _ in 0..10 {
        let (top, prev) = crate::sync::newest_marker(remote).await?;
        let mut names: BTreeSet<String> = garbage.iter().map(|(k, _)| k.clone()).collect();
        names.extend(
            crate::sync::condemned(prev.as_deref())
                .into_iter()
                .filter(|k| k.starts_with("blob ") || listed.contains(k)),
        );
        let seq = top.map_or(1, |s| s + 1);
        let body = serde_json::to_vec(&crate::sync::Marker {
            id: crate::sync::new_id(),
            condemned: names.into_iter().collect(),
        })
        .expect("serializable");
        let create = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        crate::hook::point("prune-mark");
        match remote
            .store
            .put_opts(&remote.marker(seq), PutPayload::from(body.clone()), create)
            .await
        {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => continue,
            Err(e) => return Err(Box::new(remote.down(e))),
        }
        if remote.marker_seqs().await?.last() != Some(&seq) {
            continue;
        }
        // For older versions on this prefix, which read only this one.
        remote
            .store
            .put(&remote.pruned(), PutPayload::from(body))
            .await
            .map_err(|e| remote.down(e))?;
        for old in remote.marker_seqs().await?.into_iter().filter(|&s| s < seq) {
            let _ = remote.store.delete(&remote.marker(old)).await;
        }
        return Ok(());
    }
    Err(Box::new(
        remote.down("other prunes kept writing their markers meanwhile"),
    ))
}

async fn prune_locked(
    remote: &Remote,
    o: &PruneOpts,
    lease: &crate::lock::Lease,
) -> Res<PruneReport> {
    let mut rep = PruneReport {
        dry_run: o.dry_run,
        ..Default::default()
    };
    // Any manifest that cannot be read stops prune: what it uses is unknown.
    let ids = remote.snapshot_ids().await?;
    let mut ms = Vec::new();
    for id in &ids {
        ms.push(crate::restore::load(remote, Some(id)).await?);
    }
    // --keep-within counts back from the newest snapshot (by order, not
    // time), as restic's does: this machine's clock, set years ahead or
    // behind, would keep too little or everything.
    let newest = ms.last().and_then(created_unix);
    let n = ms.len();
    let keep = |i: usize, m: &Manifest| -> bool {
        if o.keep_last.is_none() && o.keep_within.is_none() {
            return true;
        }
        // The newest always stays: it is what a restore and the next sync start from.
        i + 1 == n
            || o.keep_last.is_some_and(|k| i + (k as usize) >= n)
            || o.keep_within.is_some_and(|d| {
                created_unix(m)
                    .zip(newest)
                    .is_none_or(|(t, top)| top.duration_since(t).unwrap_or_default() <= d)
            })
    };
    let (kept, removed): (Vec<_>, Vec<_>) =
        ms.into_iter().enumerate().partition(|(i, m)| keep(*i, m));
    let kept: Vec<Manifest> = kept.into_iter().map(|x| x.1).collect();
    rep.kept_snapshots = kept.iter().map(|m| m.id.clone()).collect();
    rep.removed_snapshots = removed.iter().map(|x| x.1.id.clone()).collect();
    let refs = uses(&kept);
    let mut garbage = Vec::new();
    let mut listed = HashSet::new();
    for (p, size) in remote.pack_ids().await? {
        let key = format!("pack {p}");
        listed.insert(key.clone());
        match refs.get(&key) {
            None => garbage.push((key, size)),
            Some(us) => {
                let mut live = HashSet::new();
                for u in us {
                    live.insert((u.off, u.size));
                }
                let used: u64 = live.iter().map(|x| x.1).sum();
                rep.unused_bytes_in_kept_packs += size.saturating_sub(used);
            }
        }
    }
    for (h, size) in remote.blob_hashes().await? {
        let key = format!("blob {h}");
        if !refs.contains_key(&key) {
            garbage.push((key, size));
        }
    }
    let acting = !o.dry_run && (!garbage.is_empty() || !rep.removed_snapshots.is_empty());
    if acting {
        // Fencing. The lease alone cannot keep a sync out of what this
        // prune deletes: a prune paused past its lease (a suspended VM,
        // whose monotonic clock stops too; a request stuck in the network)
        // has its lock called stale, and a sync commits meanwhile. So the
        // marker names every object this prune will delete, before any
        // goes: a sync that reads it never references them (it stores
        // such contents anew, under fresh names), and one that read the
        // marker before sees it changed after its commit and commits
        // again. Snapshots committed before the listing below keep what
        // they use here.
        lease.check()?;
        mark(remote, &garbage, &listed).await?;
        let fresh: Vec<String> = remote
            .snapshot_ids()
            .await?
            .into_iter()
            .filter(|i| !ids.contains(i))
            .collect();
        let mut ms = Vec::new();
        for id in &fresh {
            ms.push(crate::restore::load(remote, Some(id)).await?);
        }
        let used = uses(&ms);
        garbage.retain(|(k, _)| !used.contains_key(k));
    }
    for (key, size) in &garbage {
        if key.starts_with("pack") {
            rep.deleted_packs += 1;
        } else {
            rep.deleted_blobs += 1;
        }
        rep.deleted_bytes += size;
    }
    if o.dry_run || (garbage.is_empty() && rep.removed_snapshots.is_empty()) {
        return Ok(rep);
    }
    for id in &rep.removed_snapshots {
        lease.check()?;
        remote
            .store
            .delete(&remote.snapshot(id))
            .await
            .map_err(|e| remote.down(e))?;
    }
    let results: Vec<_> = futures::stream::iter(garbage.iter().map(|(key, _)| async move {
        lease.check()?;
        // A pause here outlives any lease check (see the marker above).
        crate::hook::point("prune-delete");
        match remote.store.delete(&loc(remote, key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(remote.down(e)),
        }
    }))
    .buffer_unordered(PARALLEL)
    .collect()
    .await;
    for r in results {
        r?;
    }
    Ok(rep)
}
