//! sbx-backup: the agent's home in an object store. Content-addressed
//! blobs, one manifest per snapshot (written last, conditionally), a local
//! index so an unchanged file costs one stat, restore that never writes
//! through a symlink.
#![forbid(unsafe_code)]

pub mod hook;
pub mod lock;
pub mod maint;
pub mod manifest;
pub mod restore;
pub mod store;
pub mod sync;

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use clap::{Args, CommandFactory, Parser, Subcommand};
use sbx_core::cli::CommonArgs;
use sbx_core::error::{BoxError, IoContext, Message};
use sbx_core::{Exit, config, output};

use store::Remote;

const TOOL: &str = "sbx-backup";

#[derive(Debug, Parser)]
#[command(
    name = "sbx-backup",
    version,
    about = "Incremental, content-addressed backup of the agent's home to an object store",
    long_about = "Incremental, content-addressed backup of the agent's home to an object store.\n\n\
        Files below 1 MiB are stored back to back in packs of about 4 MiB \
        (packs/<blake3 of the pack>); larger files are one object each (blobs/<blake3>). Each \
        snapshot is one manifest (snapshots/<id>.json) holding every path with its type, mode, \
        mtime, size, hash, symlink target and pack and offset, so modes, symlinks and empty \
        directories survive, renames cost nothing and equal contents are stored once. A local \
        index of what was uploaded (size, mtime, ctime, inode, mode, hash, location) means an \
        unchanged file costs one stat and no request. The manifest is written last, with a \
        conditional put: a reader never sees half a snapshot, and two writers cannot both commit \
        the same one.",
    after_long_help = AFTER_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Object store URL instead of [backup].url: gs://bucket/prefix, s3://bucket/prefix, file:///dir.
    #[arg(long, global = true, value_name = "URL", env = "SBX_BACKUP_URL")]
    pub url: Option<String>,
    /// The directory backed up and restored into by default.
    #[arg(long, global = true, value_name = "DIR", env = "HOME")]
    pub home: Option<PathBuf>,
    /// Index and status (default ~/.local/state/sbx-backup, never backed up).
    #[arg(long, global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// One pass: upload what changed, commit a snapshot, apply retention.
    Sync(SyncArgs),
    /// Sync every interval while files change, until SIGTERM (which lets the current pass finish).
    Daemon(DaemonArgs),
    /// Restore a snapshot (default: the newest, or the one an interrupted restore began) into the home or --to DIR.
    Restore(RestoreArgs),
    /// Restore only when the home is new or empty and a snapshot exists; then mark it initialized.
    FirstBoot,
    /// Make this home its prefix's owner without restoring: its next sync continues the prefix's history, and the home that owned it is refused from then on.
    Adopt,
    /// List snapshots.
    Snapshots,
    /// Last good sync, lag and errors (also in the state dir's status.json).
    Status,
    /// Check that every pack and blob the snapshots reference exists (and with --read-data hashes right); name the files a problem breaks.
    Check(CheckArgs),
    /// Remove snapshots by --keep-last/--keep-within, then delete the packs and blobs no snapshot references.
    Prune(PruneArgs),
    /// Same as `check --read-data` (kept for scripts).
    #[command(hide = true)]
    Verify(CheckArgs),
    /// Same as `prune` without a rule (kept for scripts).
    #[command(hide = true)]
    Gc,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Only this snapshot (default: all).
    #[arg(long, value_name = "ID")]
    pub snapshot: Option<String>,
    /// Download every referenced pack and blob and check each file's hash.
    #[arg(long)]
    pub read_data: bool,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Keep the N newest snapshots (the newest is always kept).
    #[arg(long, value_name = "N")]
    pub keep_last: Option<u32>,
    /// Keep snapshots created within DURATION (e.g. 7d) of the newest one.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub keep_within: Option<Duration>,
    /// Report what would go; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// How long to wait for running syncs to finish.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "90s")]
    pub wait: Duration,
}

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// Report what would be uploaded; upload and commit nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// How long to wait for a running prune to finish (then exit 75).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "90s")]
    pub wait: Duration,
}

#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Time between passes (default: [backup].interval).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub interval: Option<Duration>,
    /// On SIGTERM, after the current pass, sync once more before exiting.
    #[arg(long)]
    pub final_sync: bool,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The snapshot (default: the one an interrupted restore into the target began, else the newest).
    #[arg(long, value_name = "ID")]
    pub snapshot: Option<String>,
    #[arg(long, value_name = "DIR")]
    pub to: Option<PathBuf>,
    /// Restore over a non-empty directory.
    #[arg(long)]
    pub force: bool,
}

const AFTER_HELP: &str = "\
Changes: every pass walks the home with lstat and compares each file with
the index; only files whose size, mtime, ctime, inode or mode changed are
hashed, and only contents the store lacks are uploaded: small files in new
packs (4 in parallel), large ones as objects (8 in parallel; over 8 MiB
through multipart uploads). A file that changes while it is read (stat
before and after differ, or the uploaded bytes do not hash right) keeps its
last good version and is retried on the next pass. Restore fetches each
pack's needed ranges with ranged GETs (neighbours coalesced), 8 at once,
and checks every file's hash before renaming it into place.

The daemon watches the home with inotify and skips a pass when nothing
changed; a watcher overflow or error, or 12 quiet intervals, forces one.
A pass is always a full stat walk (about 40 ms for 20,000 files), so an
event the watcher missed is found by the next pass anyway.

Never lossy: sync only ever adds packs, blobs and manifests and deletes
manifests beyond [backup].keep; packs and blobs go only in `prune`, and
only when no remaining manifest references them (a pack goes when its last
file does; packs are not rewritten). An empty home is backed up as an
empty snapshot but never deletes an older one; `first-boot` restores the
newest snapshot into a new, empty home. Sockets, FIFOs and devices are
skipped and counted; the state dir and a restore's in-progress marker
(.sbx-restore-in-progress) are excluded, plus [backup].exclude
(gitignore-style); every pass reports what it excluded, by rule, with
counts (`excluded` in --json). Nothing else is left out: lockfiles such
as Cargo.lock are backed up.

Order and integrity: snapshot N+1 is committed by a conditional create
of snapshots/<N+1>.json, so the store, not a clock, orders snapshots; a
pass that finds a newer snapshot than the one its walk followed walks
again. Retention never deletes the snapshot it reports nor the newest.
Every manifest and the local index carry a blake3 checksum of
themselves, checked on every read. Before a commit, what the index says
is stored is checked against a listing; anything missing is uploaded
again from the home. A pass over an unchanged home lists the store too,
and commits again when the snapshot it would report lost anything. The prefix belongs to one home (<prefix>/home-id,
recorded in every manifest): a second home is refused (78). A restore
into the home takes the prefix over (a fresh id): the home the snapshot
came from is refused from then on; `adopt` takes it over without
restoring, keeping the home's files. The store must honour conditional
writes (If-None-Match); the first pass probes it and refuses one that
does not (78).

Sync and prune on one store: each writes its own lock object
(locks/<kind>-<id>.json) first and lists locks/ second, so two that
conflict cannot both miss each other. A sync that will upload or commit
waits (--wait) while a prune holds a lock; prune waits while anything
else does. Holders rewrite their lock with a new token every 10 s; a
contender calls a lock stale once it has watched the same token for 60 s
on its own monotonic clock (no clocks compared across machines, no pids
across PID namespaces), and a holder that could not renew for 40 s stops
before committing or deleting anything. Prune first adds a marker to the
store (pruned.d/<n>, created once each, in force only as the newest),
naming every object it will delete and carrying forward what the one
before named (blobs, and packs still stored: a prune whose lock was
called stale may still delete them), and lists the snapshots again:
every later sync re-learns from the store where contents live, never
references what the marker names (it stores that content anew, under a
fresh name), and withdraws and commits again a snapshot whose commit
raced a newer marker. Hard links are backed up and restored
as separate copies, extended attributes and ACLs not at all; sync says
both, with counts.

Stores written before packs (every file a blob, manifest version 1) are
read as they are: restore, check and prune work on them, and the next sync
adds packs beside the old blobs. No migration is needed.

Credentials come from the environment only: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT (and AWS_ALLOW_HTTP for a
local server); GOOGLE_APPLICATION_CREDENTIALS or GOOGLE_SERVICE_ACCOUNT.

Exit status: 0 done; 64 usage (a non-empty restore target without --force);
65 a corrupted or foreign snapshot, a missing pack or blob, or one that
does not hash right (check names the files affected);
66 no snapshot; 74 unreadable files were skipped (the rest was synced);
75 the backend is unavailable or locked by a prune/sync (nothing was
deleted, retry later); 78 config.

Examples:
  sbx-backup sync --json
  sbx-backup restore --to /tmp/home-copy
  sbx-backup --url file:///var/tmp/sbx-backup snapshots
  sbx-backup prune --keep-last 10 --keep-within 7d
  sbx-backup check --read-data";

pub fn command() -> clap::Command {
    Cli::command()
}

struct Ctx {
    remote: Remote,
    home: PathBuf,
    state_dir: PathBuf,
    excludes: Vec<sbx_core::glob::PathPattern>,
    keep: u32,
    interval: Duration,
}

fn ctx(cli: &Cli) -> Result<Ctx, BoxError> {
    let loaded = config::discover_from_env(cli.common.config.as_deref())?;
    let b = &loaded.config.backup;
    let url = match (&cli.url, &b.url) {
        (Some(u), _) => u
            .parse::<config::StoreUrl>()
            .map_err(|e| Message::new(Exit::Config, format!("--url: {e}")))?,
        (None, Some(u)) => u.clone(),
        (None, None) => {
            return Err(Box::new(Message::new(
                Exit::Config,
                format!(
                    "{}: [backup].url is not set (or pass --url)",
                    loaded.describe()
                ),
            )));
        }
    };
    let remote = Remote::open(&url)?;
    let home = cli
        .home
        .clone()
        .ok_or_else(|| Message::new(Exit::Usage, "no home directory: set HOME or pass --home"))?;
    if std::fs::symlink_metadata(&home).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(Box::new(Message::new(
            Exit::Usage,
            format!(
                "{}: the home is a symlink; pass the real directory with --home",
                home.display()
            ),
        )));
    }
    let state_dir = cli
        .state_dir
        .clone()
        .unwrap_or_else(|| home.join(".local/state/sbx-backup"));
    Ok(Ctx {
        remote,
        home,
        state_dir,
        excludes: b.exclude.iter().map(|g| g.0.clone()).collect(),
        keep: b.keep.max(1),
        interval: b.interval.0,
    })
}

pub use sbx_core::backup::Status;

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

fn status_path(c: &Ctx) -> PathBuf {
    c.state_dir.join("status.json")
}

fn record(c: &Ctx, r: &Result<sync::Report, BoxError>) {
    let p = status_path(c);
    let mut s = std::fs::read(&p)
        .ok()
        .and_then(|b| Status::parse(&b))
        .unwrap_or_default();
    s.last_attempt = Some(now());
    match r {
        Ok(rep) => {
            s.last_ok = s.last_attempt.clone();
            s.last_ok_unix = Some(now_unix());
            s.last_snapshot = rep.snapshot.clone();
            s.last_error = None;
            s.files = rep.files;
            s.bytes = rep.bytes;
        }
        Err(e) => s.last_error = Some(e.to_string()),
    }
    let _ = std::fs::create_dir_all(&c.state_dir);
    // tmp + rename: a stop cut mid-write leaves the previous record whole.
    let tmp = p.with_extension("json.tmp");
    if std::fs::write(&tmp, serde_json::to_vec_pretty(&s).unwrap_or_default()).is_ok() {
        let _ = std::fs::rename(&tmp, &p);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

pub fn run(cli: Cli) -> Result<Exit, BoxError> {
    output::init(TOOL, &cli.common);
    let c = match ctx(&cli) {
        // The entrypoint runs first-boot in every sandbox; no URL means backups are off.
        Err(e)
            if matches!(cli.command, Cmd::FirstBoot)
                && cli.url.is_none()
                && e.to_string().contains("[backup].url is not set") =>
        {
            output::info("backups are off ([backup].url is not set): nothing to restore");
            return Ok(Exit::Ok);
        }
        r => r?,
    };
    let rt = runtime();
    let json = cli.common.json;
    let mut out = std::io::stdout().lock();
    match &cli.command {
        Cmd::Sync(a) => {
            let r = rt.block_on(sync::sync(&c.remote, &opts(&c, a.dry_run, a.wait)));
            if !a.dry_run {
                record(&c, &r);
            }
            let rep = r?;
            print_sync(&mut out, json, &rep)?;
            // Neither is kept: said on every sync, never silently dropped.
            if rep.hardlinked > 0 {
                output::warn(&format!(
                    "{} files have other hard links: each is backed up and restored as a \
                     separate copy (the link is not kept)",
                    rep.hardlinked
                ));
            }
            if rep.xattrs > 0 {
                output::warn(&format!(
                    "{} files changed since the last pass carry extended attributes or ACLs, \
                     which are not backed up",
                    rep.xattrs
                ));
            }
            if !rep.unreadable.is_empty() {
                for u in &rep.unreadable {
                    output::warn(&format!("skipped: {u}"));
                }
                return Err(Box::new(Message::new(
                    Exit::IoErr,
                    format!(
                        "{} unreadable paths were skipped; everything else is in the snapshot",
                        rep.unreadable.len()
                    ),
                )));
            }
            Ok(Exit::Ok)
        }
        Cmd::Daemon(a) => daemon(&c, &rt, a.interval.unwrap_or(c.interval), a.final_sync),
        Cmd::Restore(a) => {
            let to = a.to.clone().unwrap_or_else(|| c.home.clone());
            // A retry without --snapshot finishes what an interrupted
            // restore began: the newest may since be a pass over the half
            // home.
            let pending = a
                .snapshot
                .is_none()
                .then(|| restore::pending(&to))
                .flatten();
            let rep = rt.block_on(async {
                let m = match (&a.snapshot, &pending) {
                    (Some(id), _) => restore::load(&c.remote, Some(id)).await?,
                    (None, Some(id)) => match restore::load(&c.remote, Some(id)).await {
                        Err(e) if e.exit() == Exit::NoInput => {
                            output::warn(&format!(
                                "the interrupted restore's snapshot {id} is gone ({e}): restoring the newest"
                            ));
                            restore::load(&c.remote, None).await?
                        }
                        r => r?,
                    },
                    (None, None) => restore::load(&c.remote, None).await?,
                };
                output::progress(&format!(
                    "restoring snapshot {} ({} entries) into {}",
                    m.id,
                    m.entries.len(),
                    to.display()
                ));
                // Adopted first: a restore into the home that fails
                // part-way still made it this prefix's (the guest marks
                // it unrestored; once merged, its backups must go on).
                // But not one refused before it starts (a home not empty
                // without --force): that took the prefix from the home
                // that owns it without restoring anything.
                restore::may_restore_into(&to, a.force)?;
                adopt(&c, &to).await?;
                let rep = restore::restore(&c.remote, &m, &to, a.force).await?;
                Ok::<_, BoxError>(rep)
            })?;
            if json {
                output::json_line(&mut out, "restore", &rep).with_path("stdout")?;
            } else if !output::is_quiet() {
                writeln!(
                    out,
                    "restored {} files ({} bytes, {} already there), {} dirs, {} symlinks",
                    rep.files, rep.bytes, rep.reused, rep.dirs, rep.symlinks
                )
                .with_path("stdout")?;
            }
            Ok(Exit::Ok)
        }
        Cmd::FirstBoot => first_boot(&c, &rt),
        Cmd::Adopt => {
            rt.block_on(adopt(&c, &c.home))?;
            output::info(&format!(
                "{} now holds the backups of {}; its next sync continues them",
                c.remote.url,
                c.home.display()
            ));
            Ok(Exit::Ok)
        }
        Cmd::Snapshots => {
            let list = rt.block_on(async {
                let mut v = Vec::new();
                for id in c.remote.snapshot_ids().await? {
                    let m = restore::load(&c.remote, Some(&id)).await;
                    v.push(match m {
                        Ok(m) => serde_json::json!({"id": id, "created": m.created, "entries": m.entries.len(), "bytes": m.bytes()}),
                        Err(e) => serde_json::json!({"id": id, "error": e.to_string()}),
                    });
                }
                Ok::<_, BoxError>(v)
            })?;
            for s in &list {
                if json {
                    output::json_line(&mut out, "snapshot", s).with_path("stdout")?;
                } else {
                    writeln!(
                        out,
                        "{}  {}  {} entries  {} bytes",
                        s["id"].as_str().unwrap_or(""),
                        s["created"].as_str().unwrap_or("?"),
                        s["entries"],
                        s["bytes"]
                    )
                    .with_path("stdout")?;
                }
            }
            Ok(Exit::Ok)
        }
        Cmd::Status => {
            let s = std::fs::read(status_path(&c))
                .ok()
                .and_then(|b| Status::parse(&b))
                .unwrap_or_default();
            let lag = s.last_ok_unix.map(|t| now_unix().saturating_sub(t));
            if json {
                output::json_line(
                    &mut out,
                    "status",
                    &serde_json::json!({"status": s, "lag_seconds": lag, "url": c.remote.url}),
                )
                .with_path("stdout")?;
            } else {
                writeln!(out, "url          {}", c.remote.url).with_path("stdout")?;
                writeln!(
                    out,
                    "last good    {}",
                    s.last_ok.as_deref().unwrap_or("never")
                )
                .with_path("stdout")?;
                if let Some(l) = lag {
                    writeln!(
                        out,
                        "lag          {}",
                        humantime::format_duration(Duration::from_secs(l))
                    )
                    .with_path("stdout")?;
                }
                writeln!(
                    out,
                    "snapshot     {}",
                    s.last_snapshot.as_deref().unwrap_or("-")
                )
                .with_path("stdout")?;
                writeln!(out, "files        {} ({} bytes)", s.files, s.bytes)
                    .with_path("stdout")?;
                if let Some(e) = &s.last_error {
                    writeln!(out, "last error   {e}").with_path("stdout")?;
                }
            }
            Ok(Exit::Ok)
        }
        Cmd::Check(a) => check(&c, &rt, a.snapshot.as_deref(), a.read_data, &mut out, json),
        Cmd::Verify(a) => check(&c, &rt, a.snapshot.as_deref(), true, &mut out, json),
        Cmd::Prune(a) => prune(
            &c,
            &rt,
            &maint::PruneOpts {
                keep_last: a.keep_last,
                keep_within: a.keep_within,
                dry_run: a.dry_run,
                wait: a.wait,
            },
            &mut out,
            json,
        ),
        Cmd::Gc => prune(
            &c,
            &rt,
            &maint::PruneOpts {
                keep_last: None,
                keep_within: None,
                dry_run: false,
                wait: LOCK_WAIT,
            },
            &mut out,
            json,
        ),
    }
}

fn opts<'a>(c: &'a Ctx, dry_run: bool, wait: Duration) -> sync::Options<'a> {
    sync::Options {
        wait,
        home: &c.home,
        state_dir: &c.state_dir,
        excludes: &c.excludes,
        keep: c.keep,
        dry_run,
    }
}

fn print_sync(out: &mut impl Write, json: bool, r: &sync::Report) -> Result<(), BoxError> {
    if json {
        output::json_line(out, "sync", r).with_path("stdout")?;
    } else if !output::is_quiet() {
        writeln!(
            out,
            "{} files ({} bytes), {} dirs, {} symlinks; hashed {}, uploaded {} ({} bytes); skipped {} sockets, {} fifos; {}",
            r.files,
            r.bytes,
            r.dirs,
            r.symlinks,
            r.hashed,
            r.uploaded,
            r.uploaded_bytes,
            r.skipped.sockets,
            r.skipped.fifos,
            match (&r.snapshot, r.unchanged) {
                (Some(id), false) => format!("snapshot {id}"),
                (Some(id), true) => format!("unchanged since {id}"),
                (None, _) => "nothing committed (dry run)".into(),
            }
        )
        .with_path("stdout")?;
    }
    Ok(())
}

/// How long a daemon pass waits for a prune before it fails (and is retried).
const LOCK_WAIT: Duration = Duration::from_secs(90);

/// Passes between full walks even when the watcher saw nothing.
const FULL_EVERY: u32 = 12;

fn daemon(
    c: &Ctx,
    rt: &tokio::runtime::Runtime,
    interval: Duration,
    final_sync: bool,
) -> Result<Exit, BoxError> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).with_path("signal handler")?;
    }
    // inotify tells us whether anything changed between passes; a pass is
    // still a full stat walk. No events: no pass. An overflow, a watcher
    // error, or FULL_EVERY quiet intervals: a pass anyway.
    let dirty = Arc::new(AtomicBool::new(true));
    let _watcher = {
        use notify::Watcher;
        let (d, state) = (dirty.clone(), c.state_dir.clone());
        let w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| match ev {
            Ok(ev) if ev.need_rescan() || ev.paths.iter().any(|p| !p.starts_with(&state)) => {
                d.store(true, Ordering::Relaxed)
            }
            Ok(_) => {}
            Err(_) => d.store(true, Ordering::Relaxed),
        });
        match w.and_then(|mut w| {
            w.watch(&c.home, notify::RecursiveMode::Recursive)
                .map(|()| w)
        }) {
            Ok(w) => Some(w),
            Err(e) => {
                output::warn(&format!(
                    "file events unavailable ({e}): walking the home every pass"
                ));
                None
            }
        }
    };
    let watching = _watcher.is_some();
    let pass = || {
        let r = rt.block_on(sync::sync(&c.remote, &opts(c, false, LOCK_WAIT)));
        match &r {
            Ok(rep) => output::info(&format!(
                "pass: {} files, uploaded {}",
                rep.files, rep.uploaded
            )),
            Err(e) => output::warn(&format!("sync failed: {e}")),
        }
        record(c, &r);
        r
    };
    let mut quiet = 0u32;
    loop {
        if dirty.swap(false, Ordering::Relaxed) || !watching || quiet >= FULL_EVERY {
            quiet = 0;
            // A failed pass leaves the home dirty, so the next one retries.
            if pass().is_err() {
                dirty.store(true, Ordering::Relaxed);
            }
        } else {
            quiet += 1;
        }
        let until = std::time::Instant::now() + interval;
        while std::time::Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if stop.load(Ordering::Relaxed) {
            if final_sync {
                return pass().map(|_| Exit::Ok);
            }
            return Ok(Exit::Ok);
        }
    }
}

/// A restore into the home takes the prefix over: a fresh home id, put in
/// the store and kept in the state dir, so the next sync continues that
/// history instead of being refused, and the home the snapshot came from,
/// if it still runs (branch mode's shared URL, a second machine), is
/// refused from then on instead of both rotating each other's snapshots
/// out.
async fn adopt(c: &Ctx, to: &std::path::Path) -> Result<(), BoxError> {
    let same = |a: &std::path::Path, b: &std::path::Path| {
        a.canonicalize()
            .ok()
            .is_some_and(|x| b.canonicalize().ok() == Some(x))
    };
    if !same(to, &c.home) {
        return Ok(());
    }
    use object_store::ObjectStoreExt;
    let id = sbx_sys::beneath::tmp_name()[5..].to_owned();
    c.remote
        .store
        .put(
            &c.remote.home_id(),
            object_store::PutPayload::from(id.clone()),
        )
        .await
        .map_err(|e| c.remote.down(e))?;
    if let Err(e) = sync::adopt_home(&c.state_dir, &id) {
        output::warn(&format!("{}: {e}", c.state_dir.display()));
    }
    Ok(())
}

fn first_boot(c: &Ctx, rt: &tokio::runtime::Runtime) -> Result<Exit, BoxError> {
    let mark = c.state_dir.join("initialized");
    // A restore killed half-way left its marker: finish it (never call a
    // half home initialized).
    let pending = std::fs::read_to_string(c.home.join(restore::MARKER)).ok();
    if mark.exists() && pending.is_none() {
        return Ok(Exit::Ok);
    }
    if let Some(id) = pending {
        let id = id.trim();
        boot_restore(
            c,
            rt,
            (!id.is_empty()).then_some(id),
            "resuming the restore of",
        )?;
    } else {
        // "Empty": nothing but the state dir (or its parents) and dotfiles a fresh account gets.
        let skel: HashSet<&str> = [".local", ".bashrc", ".profile", ".bash_logout"]
            .into_iter()
            .collect();
        let empty = std::fs::read_dir(&c.home)
            .map(|d| {
                d.flatten()
                    .all(|e| e.file_name().to_str().is_some_and(|n| skel.contains(n)))
            })
            .unwrap_or(true);
        if empty && !rt.block_on(c.remote.snapshot_ids())?.is_empty() {
            boot_restore(c, rt, None, "restoring")?;
        }
    }
    std::fs::create_dir_all(&c.state_dir).with_path(&c.state_dir)?;
    std::fs::write(&mark, now()).with_path(&mark)?;
    Ok(Exit::Ok)
}

/// First boot's restore of snapshot `id` (None: the newest) into the home.
fn boot_restore(
    c: &Ctx,
    rt: &tokio::runtime::Runtime,
    id: Option<&str>,
    doing: &str,
) -> Result<(), BoxError> {
    let rep = rt.block_on(async {
        let m = restore::load(&c.remote, id).await?;
        output::progress(&format!(
            "first boot: {doing} snapshot {} into {}",
            m.id,
            c.home.display()
        ));
        adopt(c, &c.home).await?;
        let rep = restore::restore(&c.remote, &m, &c.home, true).await?;
        Ok::<_, BoxError>(rep)
    })?;
    output::info(&format!("restored {} files", rep.files));
    Ok(())
}

fn check(
    c: &Ctx,
    rt: &tokio::runtime::Runtime,
    id: Option<&str>,
    read_data: bool,
    out: &mut impl Write,
    json: bool,
) -> Result<Exit, BoxError> {
    let rep = rt.block_on(maint::check(&c.remote, id, read_data))?;
    if json {
        output::json_line(out, "check", &rep).with_path("stdout")?;
    } else {
        for p in &rep.problems {
            writeln!(
                out,
                "bad  {}: {} ({} files)",
                p.object,
                p.why,
                p.files.len()
            )
            .with_path("stdout")?;
            for f in &p.files {
                writeln!(out, "     {f}").with_path("stdout")?;
            }
        }
        if !output::is_quiet() && rep.problems.is_empty() {
            writeln!(
                out,
                "{} snapshots, {} packs, {} blobs: all present{}",
                rep.snapshots,
                rep.packs,
                rep.blobs,
                if read_data { " and right" } else { "" }
            )
            .with_path("stdout")?;
        }
    }
    if rep.problems.is_empty() {
        Ok(Exit::Ok)
    } else {
        let files: usize = rep.problems.iter().map(|p| p.files.len()).sum();
        Err(Box::new(Message::new(
            Exit::DataErr,
            format!(
                "{}: {} objects missing or corrupt, {files} files affected",
                c.remote.url,
                rep.problems.len()
            ),
        )))
    }
}

fn prune(
    c: &Ctx,
    rt: &tokio::runtime::Runtime,
    o: &maint::PruneOpts,
    out: &mut impl Write,
    json: bool,
) -> Result<Exit, BoxError> {
    let rep = rt.block_on(maint::prune(&c.remote, o))?;
    // The index may name deleted packs and blobs: forget where contents are.
    let ip = c.state_dir.join("index.json");
    if !o.dry_run && ip.exists() {
        let mut idx = sync::Index::load(&ip, &c.remote.url);
        // (a corrupted index loads empty and is stored empty: harmless)
        idx.forget_locations();
        idx.store(&ip).with_path(&ip)?;
    }
    if json {
        output::json_line(out, "prune", &rep).with_path("stdout")?;
    } else if !output::is_quiet() {
        writeln!(
            out,
            "{}removed {} snapshots (kept {}), deleted {} packs and {} blobs ({} bytes)",
            if o.dry_run { "would have " } else { "" },
            rep.removed_snapshots.len(),
            rep.kept_snapshots.len(),
            rep.deleted_packs,
            rep.deleted_blobs,
            rep.deleted_bytes
        )
        .with_path("stdout")?;
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole cycle against object_store's InMemory backend.
    #[tokio::test(flavor = "multi_thread")]
    async fn sync_then_restore_in_memory() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("home");
        std::fs::create_dir_all(home.join("sub/empty")).unwrap();
        std::fs::write(home.join("sub/a"), "alpha").unwrap();
        std::fs::write(home.join("b.lock"), "a lockfile: backed up").unwrap();
        std::os::unix::fs::symlink("sub/a", home.join("link")).unwrap();
        let remote = Remote::in_memory();
        let state = d.path().join("state");
        let o = sync::Options {
            home: &home,
            state_dir: &state,
            excludes: &[],
            keep: 2,
            dry_run: false,
            wait: LOCK_WAIT,
        };
        let r = sync::sync(&remote, &o).await.unwrap();
        assert_eq!((r.files, r.symlinks, r.dirs, r.uploaded), (2, 1, 2, 2));
        // Keep 2: a third distinct snapshot pushes the first out.
        for body in ["beta", "gamma"] {
            std::fs::write(home.join("sub/a"), body).unwrap();
            sync::sync(&remote, &o).await.unwrap();
        }
        assert_eq!(remote.snapshot_ids().await.unwrap().len(), 2);
        let m = restore::load(&remote, None).await.unwrap();
        let to = d.path().join("to");
        restore::restore(&remote, &m, &to, false).await.unwrap();
        assert_eq!(std::fs::read_to_string(to.join("sub/a")).unwrap(), "gamma");
        assert!(to.join("sub/empty").is_dir());
        assert!(to.join("b.lock").exists());
        assert_eq!(
            std::fs::read_link(to.join("link")).unwrap(),
            std::path::Path::new("sub/a")
        );
    }
}
