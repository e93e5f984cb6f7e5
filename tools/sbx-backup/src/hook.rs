//! Crash and pause points for tests, compiled in only with the
//! `test-hooks` feature (the crate's own tests turn it on), so a test can
//! kill a pass exactly where a crash would hurt.

/// With `SBX_BACKUP_CRASH_AT=<name>`, die here as kill -9 would (no
/// unwinding, nothing flushed); with `SBX_BACKUP_PAUSE_AT=<name>` and
/// `SBX_BACKUP_PAUSE_FILE=<path>`, create `<path>.paused` holding the
/// name and wait until `<path>` exists. `SBX_BACKUP_PAUSE_AT` may name
/// several points, comma-separated: then each resume consumes `<path>`.
#[cfg(feature = "test-hooks")]
pub fn point(name: &str) {
    if std::env::var("SBX_BACKUP_CRASH_AT").is_ok_and(|v| v == name) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
    let at = std::env::var("SBX_BACKUP_PAUSE_AT").unwrap_or_default();
    if at.split(',').any(|v| v == name)
        && let Ok(f) = std::env::var("SBX_BACKUP_PAUSE_FILE")
    {
        let _ = std::fs::write(format!("{f}.paused"), name);
        while !std::path::Path::new(&f).exists() {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        if at.contains(',') {
            let _ = std::fs::remove_file(&f);
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub fn point(_: &str) {}
