//! Crash and pause points for tests, compiled in only with the
//! `test-hooks` feature (the crate's own tests turn it on), so a test can
//! kill a pass exactly where a crash would hurt.

/// With `SBX_BACKUP_CRASH_AT=<name>`, die here as kill -9 would (no
/// unwinding, nothing flushed); with `SBX_BACKUP_PAUSE_AT=<name>` and
/// `SBX_BACKUP_PAUSE_FILE=<path>`, create `<path>.paused` and wait until
/// `<path>` exists; `SBX_BACKUP_PAUSE2_AT` and `SBX_BACKUP_PAUSE2_FILE`,
/// a second point of the same process.
#[cfg(feature = "test-hooks")]
pub fn point(name: &str) {
    if std::env::var("SBX_BACKUP_CRASH_AT").is_ok_and(|v| v == name) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
    for (at, file) in [
        ("SBX_BACKUP_PAUSE_AT", "SBX_BACKUP_PAUSE_FILE"),
        ("SBX_BACKUP_PAUSE2_AT", "SBX_BACKUP_PAUSE2_FILE"),
    ] {
        if std::env::var(at).is_ok_and(|v| v == name)
            && let Ok(f) = std::env::var(file)
        {
            let _ = std::fs::write(format!("{f}.paused"), name);
            while !std::path::Path::new(&f).exists() {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub fn point(_: &str) {}

/// This machine's wall clock; with the `test-hooks` feature,
/// `SBX_BACKUP_TEST_CLOCK_SECS=N` moves it N seconds (negative: back), as
/// a clock set wrong would.
pub fn wall_clock() -> std::time::SystemTime {
    let now = std::time::SystemTime::now();
    #[cfg(feature = "test-hooks")]
    if let Some(n) = std::env::var("SBX_BACKUP_TEST_CLOCK_SECS")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
    {
        let d = std::time::Duration::from_secs(n.unsigned_abs());
        return if n < 0 { now - d } else { now + d };
    }
    now
}
