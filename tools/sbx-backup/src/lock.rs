//! Leases that keep `prune` and `sync` apart on one store.
//!
//! The rule: a writer puts its own lock object `locks/<kind>-<id>.json`
//! first and lists `locks/` second. A sync conflicts with a live prune
//! lock; a prune conflicts with any other live lock. Because each side
//! lists only after its own lock is visible (stores are read-after-write
//! consistent), two conflicting writers cannot both miss each other: at
//! worst both back off. A lock is live while its object was rewritten less
//! than `LEASE` ago (the holder refreshes it every `LEASE / 4`), unless it
//! names this host and a process that no longer exists (a sync killed with
//! -9 does not block prune for long). A holder whose refresh failed for a
//! whole lease stops before committing or deleting anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::TryStreamExt;
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

use crate::store::{Remote, StoreError};

pub const LEASE: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sync,
    Prune,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Sync => "sync",
            Kind::Prune => "prune",
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Body {
    kind: String,
    host: String,
    pid: u32,
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub struct Lease {
    remote: Remote,
    name: String,
    /// Unix seconds until which the lock is known to be ours.
    valid_until: Arc<AtomicU64>,
    refresher: tokio::task::JoinHandle<()>,
}

impl Lease {
    /// The lease is still ours, with a margin for the request that follows.
    pub fn held(&self) -> bool {
        now() + 30 < self.valid_until.load(Ordering::Relaxed)
    }

    pub fn check(&self) -> Result<(), StoreError> {
        if self.held() {
            Ok(())
        } else {
            Err(self.remote.down(format!(
                "lock {} could not be refreshed for {} s",
                self.name,
                LEASE.as_secs()
            )))
        }
    }

    pub async fn release(self) {
        self.refresher.abort();
        let _ = self
            .remote
            .store
            .delete(&self.remote.lock(&self.name))
            .await;
    }
}

/// Another holder's lock that keeps us out.
#[derive(Debug)]
pub struct Busy(pub String);

async fn put(remote: &Remote, name: &str, body: &[u8]) -> Result<(), StoreError> {
    remote
        .store
        .put(&remote.lock(name), PutPayload::from(body.to_vec()))
        .await
        .map(|_| ())
        .map_err(|e| remote.down(e))
}

/// Take a lock of `kind`, or name the live lock that conflicts.
pub async fn try_acquire(remote: &Remote, kind: Kind) -> Result<Result<Lease, Busy>, StoreError> {
    let name = format!("{}-{}", kind.name(), crate::sync::new_id());
    let body = serde_json::to_vec(&Body {
        kind: kind.name().into(),
        host: host(),
        pid: std::process::id(),
    })
    .unwrap_or_default();
    let start = now();
    put(remote, &name, &body).await?;
    let metas: Vec<_> = remote
        .store
        .list(Some(&remote.locks_dir()))
        .try_collect()
        .await
        .map_err(|e| remote.down(e))?;
    let me = format!("{name}.json");
    for m in metas {
        let Some(other) = m.location.filename().map(str::to_owned) else {
            continue;
        };
        if other == me || (kind == Kind::Sync && !other.starts_with("prune-")) {
            continue;
        }
        let age = now().saturating_sub(m.last_modified.timestamp().max(0) as u64);
        if age >= LEASE.as_secs() || dead_here(remote, &m.location).await {
            continue;
        }
        let _ = remote.store.delete(&remote.lock(&name)).await;
        return Ok(Err(Busy(other)));
    }
    let valid_until = Arc::new(AtomicU64::new(start + LEASE.as_secs()));
    let refresher = tokio::spawn({
        let (remote, name, valid_until) = (remote.clone(), name.clone(), valid_until.clone());
        async move {
            loop {
                tokio::time::sleep(LEASE / 4).await;
                let t = now();
                if put(&remote, &name, &body).await.is_ok() {
                    valid_until.store(t + LEASE.as_secs(), Ordering::Relaxed);
                }
            }
        }
    });
    Ok(Ok(Lease {
        remote: remote.clone(),
        name,
        valid_until,
        refresher,
    }))
}

/// A lock this host wrote for a process that is gone.
async fn dead_here(remote: &Remote, loc: &object_store::path::Path) -> bool {
    let Ok(got) = remote.store.get(loc).await else {
        return false;
    };
    let Ok(bytes) = got.bytes().await else {
        return false;
    };
    let Ok(b) = serde_json::from_slice::<Body>(&bytes) else {
        return false;
    };
    b.host == host() && !std::path::Path::new(&format!("/proc/{}", b.pid)).exists()
}

/// `try_acquire`, retried every second for up to `wait`.
pub async fn acquire(
    remote: &Remote,
    kind: Kind,
    wait: Duration,
) -> Result<Lease, Box<dyn sbx_core::SbxError>> {
    let until = std::time::Instant::now() + wait;
    loop {
        match try_acquire(remote, kind).await? {
            Ok(l) => return Ok(l),
            Err(Busy(other)) if std::time::Instant::now() >= until => {
                return Err(Box::new(remote.down(format!(
                    "the store is locked by {other} (a {} holds it; a lock is stale {} s after its last refresh)",
                    if other.starts_with("prune-") {
                        "prune"
                    } else {
                        "sync"
                    },
                    LEASE.as_secs()
                ))));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}
