//! The shelf lock: provisioning runs one at a time per shelf (git's own
//! lock files make a concurrent `worktree add` or `fetch` fail rather
//! than wait). A blocking flock(2) in a helper thread, so waiting costs no
//! CPU and the timeout needs no polling.

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};

use crate::WorktreeError;

/// Held until dropped.
#[derive(Debug)]
pub struct ShelfLock(#[allow(dead_code, reason = "held for its Drop")] Flock<File>);

pub fn acquire(path: &Path, timeout: Duration) -> Result<ShelfLock, WorktreeError> {
    let io = |e| WorktreeError::Io(path.to_owned(), e);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .read(true)
        .open(path)
        .map_err(io)?;
    // The common case, uncontended, without a thread.
    let file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(l) => return Ok(ShelfLock(l)),
        Err((f, nix::errno::Errno::EWOULDBLOCK)) => f,
        Err((_, e)) => return Err(io(e.into())),
    };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| e));
    });
    match rx.recv_timeout(timeout) {
        Ok(Ok(l)) => Ok(ShelfLock(l)),
        Ok(Err(e)) => Err(io(e.into())),
        // The waiting thread ends with the process, which exits with 75.
        Err(_) => Err(WorktreeError::Locked(path.to_owned(), timeout.as_secs())),
    }
}
