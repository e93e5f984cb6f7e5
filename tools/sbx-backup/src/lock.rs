//! Leases that keep `prune` and `sync` apart on one store.
//!
//! The rule: a writer puts its own lock object `locks/<kind>-<id>.json`
//! first and lists `locks/` second. A sync conflicts with a live prune
//! lock; a prune conflicts with any other live lock. Because each side
//! lists only after its own lock is visible (stores are read-after-write
//! consistent), two conflicting writers cannot both miss each other: at
//! worst both back off.
//!
//! Liveness is proven by the holder, never guessed from clocks or pids:
//! it rewrites its lock with a new token every `LEASE / 6`. A contender
//! calls a lock stale only after watching the same token for a whole
//! `LEASE` on its own monotonic clock (no wall clock is compared with the
//! store's, no pid is looked up across PID namespaces), and then deletes
//! it. A holder that could not rewrite its lock for `LEASE - MARGIN` on
//! its own monotonic clock stops before committing or deleting anything,
//! so by the time anyone calls it stale it has stopped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

use crate::store::{Remote, StoreError};

pub const LEASE: Duration = Duration::from_secs(60);

/// `LEASE`, or in test builds `SBX_BACKUP_TEST_LEASE_SECS`.
fn lease() -> Duration {
    #[cfg(feature = "test-hooks")]
    if let Some(s) = std::env::var("SBX_BACKUP_TEST_LEASE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return Duration::from_secs(s);
    }
    LEASE
}

/// A holder stops acting this long before its lease could be called stale.
fn margin() -> Duration {
    lease() / 3
}

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
    /// Rewritten with a new value on every renewal: the proof of life.
    token: String,
}

pub struct Lease {
    remote: Remote,
    name: String,
    /// When the last successful write of the lock started.
    renewed: Arc<Mutex<Instant>>,
    refresher: tokio::task::JoinHandle<()>,
}

impl Lease {
    /// The lease is still ours, with a margin for the request that follows.
    pub fn held(&self) -> bool {
        let at = *self.renewed.lock().unwrap_or_else(|e| e.into_inner());
        at.elapsed() + margin() < lease()
    }

    pub fn check(&self) -> Result<(), StoreError> {
        if self.held() {
            Ok(())
        } else {
            Err(self.remote.down(format!(
                "lock {} could not be renewed for {} s",
                self.name,
                (lease() - margin()).as_secs()
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

/// What a contender saw of other locks: name -> (body, since when unchanged).
pub type Seen = HashMap<String, (Vec<u8>, Instant)>;

fn body(kind: Kind) -> Vec<u8> {
    serde_json::to_vec(&Body {
        kind: kind.name().into(),
        token: sbx_sys::beneath::tmp_name()[5..].to_owned(),
    })
    .unwrap_or_default()
}

async fn put(remote: &Remote, name: &str, body: Vec<u8>) -> Result<(), StoreError> {
    remote
        .store
        .put(&remote.lock(name), PutPayload::from(body))
        .await
        .map(|_| ())
        .map_err(|e| remote.down(e))
}

/// Take a lock of `kind`, or name the live lock that conflicts. `seen`
/// carries what earlier attempts observed, so staleness is judged over
/// the attempts of one wait.
pub async fn try_acquire(
    remote: &Remote,
    kind: Kind,
    seen: &mut Seen,
) -> Result<Result<Lease, Busy>, StoreError> {
    let name = format!("{}-{}", kind.name(), crate::sync::new_id());
    let start = Instant::now();
    put(remote, &name, body(kind)).await?;
    let metas: Vec<_> = remote
        .store
        .list(Some(&remote.locks_dir()))
        .try_collect()
        .await
        .map_err(|e| remote.down(e))?;
    let me = format!("{name}.json");
    let mut busy = None;
    for m in metas {
        let Some(other) = m.location.filename().map(str::to_owned) else {
            continue;
        };
        if other == me || (kind == Kind::Sync && !other.starts_with("prune-")) {
            continue;
        }
        let Ok(got) = remote.store.get(&m.location).await else {
            continue; // gone meanwhile
        };
        let Ok(b) = got.bytes().await else { continue };
        let now = Instant::now();
        let e = seen.entry(other.clone()).or_insert((b.to_vec(), now));
        if e.0 != b.as_ref() {
            *e = (b.to_vec(), now);
        }
        if now.duration_since(e.1) >= lease() {
            // Not renewed for a whole lease: its holder has stopped.
            let _ = remote.store.delete(&m.location).await;
            continue;
        }
        busy = Some(other);
    }
    if let Some(other) = busy {
        let _ = remote.store.delete(&remote.lock(&name)).await;
        return Ok(Err(Busy(other)));
    }
    let renewed = Arc::new(Mutex::new(start));
    let refresher = tokio::spawn({
        let (remote, name, renewed) = (remote.clone(), name.clone(), renewed.clone());
        async move {
            loop {
                tokio::time::sleep(lease() / 6).await;
                let t = Instant::now();
                if put(&remote, &name, body(kind)).await.is_ok() {
                    *renewed.lock().unwrap_or_else(|e| e.into_inner()) = t;
                }
            }
        }
    });
    Ok(Ok(Lease {
        remote: remote.clone(),
        name,
        renewed,
        refresher,
    }))
}

/// `try_acquire`, retried every half second for up to `wait`.
pub async fn acquire(
    remote: &Remote,
    kind: Kind,
    wait: Duration,
) -> Result<Lease, Box<dyn sbx_core::SbxError>> {
    let until = Instant::now() + wait;
    let mut seen = Seen::new();
    loop {
        match try_acquire(remote, kind, &mut seen).await? {
            Ok(l) => return Ok(l),
            Err(Busy(other)) if Instant::now() >= until => {
                return Err(Box::new(remote.down(format!(
                    "the store is locked by {other} (a {} holds it; a lock is stale once its token \
                     stays the same for {} s; wait longer with --wait)",
                    if other.starts_with("prune-") {
                        "prune"
                    } else {
                        "sync"
                    },
                    lease().as_secs()
                ))));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}
