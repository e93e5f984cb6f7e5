//! The object store behind a URL, and where things live in it:
//! `<prefix>/packs/<2 hex>/<blake3 of the pack>` (small files, back to
//! back), `<prefix>/blobs/<2 hex>/<blake3>` (a large file each),
//! `<prefix>/snapshots/<id>.json`, `<prefix>/locks/<kind>-<id>.json` and
//! `<prefix>/pruned.d/<seq>` (one more by every prune that deletes
//! anything; `<prefix>/pruned` holds a copy of the newest for older
//! versions).

use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{BackoffConfig, ObjectStore, RetryConfig};
use sbx_core::Exit;
use sbx_core::config::{StoreKind, StoreUrl};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{url}: {why}")]
    Config { url: String, why: String },
    #[error("backend {url} unavailable: {why}; nothing was deleted (retry later)")]
    Down { url: String, why: String },
}

impl sbx_core::SbxError for StoreError {
    fn exit(&self) -> Exit {
        match self {
            StoreError::Config { .. } => Exit::Config,
            StoreError::Down { .. } => Exit::TempFail,
        }
    }
}

/// The id of snapshot number `seq`: fixed width, so the conditional
/// create of the next number is what serialises writers.
pub fn seq_id(seq: u64) -> String {
    format!("{seq:020}")
}

/// The sequence number of an id `seq_id` made (None: an older timestamp id).
pub fn seq_of(id: &str) -> Option<u64> {
    (id.len() == 20 && id.bytes().all(|b| b.is_ascii_digit()))
        .then(|| id.parse().ok())
        .flatten()
}

#[derive(Debug, Clone)]
pub struct Remote {
    pub url: String,
    pub store: Arc<dyn ObjectStore>,
    pub prefix: Path,
}

fn retry() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: 4,
        retry_timeout: Duration::from_secs(30),
    }
}

/// The workspace's one TLS provider, ring, made the process default:
/// reqwest is built without one of its own (it would bring aws-lc-rs) and
/// panics when a client is built with none installed.
fn tls_provider() -> bool {
    let _ = rustls::crypto::ring::default_provider().install_default();
    rustls::crypto::CryptoProvider::get_default().is_some()
}

impl Remote {
    /// Open `url`. Credentials come from the environment only
    /// (`AWS_*`, `GOOGLE_APPLICATION_CREDENTIALS`, `GOOGLE_SERVICE_ACCOUNT*`).
    pub fn open(url: &StoreUrl) -> Result<Self, StoreError> {
        let cfg = |why: String| StoreError::Config {
            url: url.text.clone(),
            why,
        };
        let prefix = Path::from(url.path.as_str());
        let store: Arc<dyn ObjectStore> = match url.kind {
            StoreKind::File => {
                let dir = std::path::Path::new(&url.path);
                std::fs::create_dir_all(dir)
                    .map_err(|e| cfg(format!("cannot create {}: {e}", dir.display())))?;
                return Ok(Self {
                    url: url.text.clone(),
                    store: Arc::new(
                        object_store::local::LocalFileSystem::new_with_prefix(dir)
                            .map_err(|e| cfg(e.to_string()))?,
                    ),
                    prefix: Path::default(),
                });
            }
            StoreKind::Memory => Arc::new(object_store::memory::InMemory::new()),
            StoreKind::S3 | StoreKind::Gs if !tls_provider() => {
                return Err(cfg("no TLS crypto provider could be installed".into()));
            }
            StoreKind::S3 => Arc::new(
                object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(&url.bucket)
                    .with_retry(retry())
                    .build()
                    .map_err(|e| cfg(format!("{e} (credentials come from AWS_* variables)")))?,
            ),
            StoreKind::Gs => Arc::new(
                object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(&url.bucket)
                    .with_retry(retry())
                    .build()
                    .map_err(|e| {
                        cfg(format!(
                            "{e} (credentials come from GOOGLE_APPLICATION_CREDENTIALS)"
                        ))
                    })?,
            ),
        };
        Ok(Self {
            url: url.text.clone(),
            store,
            prefix,
        })
    }

    pub fn in_memory() -> Self {
        Self {
            url: "memory://".into(),
            store: Arc::new(object_store::memory::InMemory::new()),
            prefix: Path::default(),
        }
    }

    fn child(&self, parts: &[&str]) -> Path {
        let mut p = self.prefix.clone();
        for s in parts {
            p = p.join(*s);
        }
        p
    }

    pub fn blob(&self, hash: &str) -> Path {
        self.child(&["blobs", &hash[..2], hash])
    }

    pub fn pack(&self, id: &str) -> Path {
        self.child(&["packs", &id[..2], id])
    }

    pub fn lock(&self, name: &str) -> Path {
        self.child(&["locks", &format!("{name}.json")])
    }

    pub fn locks_dir(&self) -> Path {
        self.child(&["locks"])
    }

    /// Which home this prefix belongs to (created once, conditionally).
    pub fn home_id(&self) -> Path {
        self.child(&["home-id"])
    }

    /// A throwaway object for probing what the store honours.
    pub fn probe(&self, name: &str) -> Path {
        self.child(&[&format!("probe-{name}")])
    }

    /// The single marker older versions wrote (and read); still written.
    pub fn pruned(&self) -> Path {
        self.child(&["pruned"])
    }

    /// Prune marker number `seq`, each created once, conditionally.
    pub fn marker(&self, seq: u64) -> Path {
        self.child(&["pruned.d", &seq_id(seq)])
    }

    /// The prune markers' numbers, oldest first.
    pub async fn marker_seqs(&self) -> Result<Vec<u64>, StoreError> {
        let metas: Vec<_> = self
            .store
            .list(Some(&self.child(&["pruned.d"])))
            .try_collect()
            .await
            .map_err(|e| self.down(e))?;
        let mut v: Vec<u64> = metas
            .iter()
            .filter_map(|m| seq_of(m.location.filename()?))
            .collect();
        v.sort_unstable();
        v.dedup();
        Ok(v)
    }

    pub fn snapshot(&self, id: &str) -> Path {
        self.child(&["snapshots", &format!("{id}.json")])
    }

    pub fn down(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Down {
            url: self.url.clone(),
            why: e.to_string(),
        }
    }

    /// Snapshot ids, oldest first: the store's order (`seq_of`), never a
    /// clock's; ids of older versions (a timestamp each) sort before them.
    pub async fn snapshot_ids(&self) -> Result<Vec<String>, StoreError> {
        let metas: Vec<_> = self
            .store
            .list(Some(&self.child(&["snapshots"])))
            .try_collect()
            .await
            .map_err(|e| self.down(e))?;
        let mut ids: Vec<String> = metas
            .iter()
            .filter_map(|m| {
                m.location
                    .filename()?
                    .strip_suffix(".json")
                    .map(str::to_owned)
            })
            .collect();
        ids.sort_by(|a, b| (seq_of(a), a).cmp(&(seq_of(b), b)));
        // A listing that names an object twice (a paging bug, a replayed
        // page) must not count it twice: retention would delete more.
        ids.dedup();
        Ok(ids)
    }

    /// Every blob hash in the store, with its size.
    pub async fn blob_hashes(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.names("blobs").await
    }

    /// Every pack id in the store, with its size.
    pub async fn pack_ids(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.names("packs").await
    }

    async fn names(&self, dir: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let metas: Vec<_> = self
            .store
            .list(Some(&self.child(&[dir])))
            .try_collect()
            .await
            .map_err(|e| self.down(e))?;
        Ok(metas
            .iter()
            .filter_map(|m| Some((m.location.filename()?.to_owned(), m.size)))
            .filter(|(n, _)| crate::manifest::is_hash(n))
            .collect())
    }
}
