//! Snapshots of a whole sandbox (`sbx-run snapshot`, `snapshots`, `start
//! --from-snapshot`): the system state outside the home and the workspace
//! as an image, a home backup taken with it, one record on the host.
//!
//! The image is one `docker commit` of the running sandbox, so it holds
//! what the agent wrote outside its home (/tmp, /var/tmp, files it owns
//! anywhere) and whatever runtime state was in the container's layer. None
//! of it outlives the start of a sandbox made from it: sbx-run starts the
//! guest with `--from-snapshot`, which removes it before any service or
//! anything of the agent's runs (sbx-guest's snapclean.rs), and the guards
//! are made anew as in a fresh start. Every variable the container got at
//! `docker run` (host values, passed secrets) is emptied in the image's
//! config: a sandbox started from it gets them anew from the config.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use sbx_core::audit::{self, Outcome, Record};
use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;
use sbx_core::output;

use crate::workspace::Workspace;
use crate::{RunError, docker, spec};

/// The label naming a snapshot image's workspace (checked at start).
pub const LABEL_SNAPSHOT: &str = "sbx.snapshot.workspace";

/// One snapshot: written only once its image exists.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapRecord {
    pub id: String,
    pub tag: Option<String>,
    /// The workspace's path: another workspace's start refuses it.
    pub workspace: PathBuf,
    pub image: String,
    /// Seconds since the epoch.
    pub created: u64,
    /// Bytes the snapshot adds to the per-repo image.
    pub size: u64,
    /// The home backup taken with it (sbx-backup's snapshot id), when
    /// `[backup].url` is set.
    pub home_backup: Option<String>,
}

fn dir_of(ws: &Workspace) -> PathBuf {
    spec::state_dir().join("snapshots").join(&ws.names.hash)
}

fn root_dir() -> PathBuf {
    spec::state_dir().join("snapshots")
}

fn io(p: &Path, e: std::io::Error) -> RunError {
    RunError::Io(p.to_owned(), e)
}

/// The records in `dir`, oldest first; unreadable ones are skipped with
/// a warning (never a half-written one: those are `.tmp`).
fn records_in(dir: &Path) -> Vec<SnapRecord> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut v: Vec<SnapRecord> = rd
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| {
            let p = e.path();
            match std::fs::read(&p).map(|b| serde_json::from_slice::<SnapRecord>(&b)) {
                Ok(Ok(r)) => Some(r),
                _ => {
                    output::warn(&format!("{}: not a snapshot record (skipped)", p.display()));
                    None
                }
            }
        })
        .collect();
    v.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
    v
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn image_size(image: &str) -> u64 {
    docker::inspect("image", image)
        .ok()
        .flatten()
        .and_then(|v| v.get("Size").and_then(Value::as_u64))
        .unwrap_or(0)
}

/// A tag: printable, one line, not too long (it is printed as is).
fn check_tag(t: &str) -> Result<(), String> {
    if t.is_empty() || t.len() > 128 || t.chars().any(char::is_control) {
        return Err(format!(
            "{:?} is not a tag: 1 to 128 characters, no control characters",
            t
        ));
    }
    Ok(())
}

/// `sbx-run snapshot [PATH] [--tag T]`.
pub fn snapshot(
    common: &CommonArgs,
    path: Option<PathBuf>,
    tag: Option<&str>,
) -> Result<ExitCode, BoxError> {
    if let Some(t) = tag {
        check_tag(t).map_err(|why| RunError::Usage(format!("--tag: {why}")))?;
    }
    let ws = Workspace::open(common, path)?;
    if ws.loaded.config.lifecycle.keep_snapshots == Some(0) {
        return Err(RunError::Config(format!(
            "{}: [lifecycle] keep-snapshots = 0 would remove every snapshot: keep at least 1, or leave it unset to keep all",
            ws.loaded.describe()
        ))
        .into());
    }
    let name = ws.names.container.clone();
    let c = crate::lifecycle::owned_container(&ws)?.ok_or_else(|| {
        RunError::NoSandbox(format!(
            "{name}: no sandbox for {}: start it first (`sbx-run start`), then snapshot it",
            ws.path.display()
        ))
    })?;
    if c.pointer("/State/Running").and_then(Value::as_bool) != Some(true) {
        return Err(RunError::NoSandbox(format!(
            "{name}: the sandbox is stopped: a snapshot is taken of a running one (`sbx-run start`, then snapshot)"
        ))
        .into());
    }
    let created = now();
    let id = format!(
        "{}-{:04x}",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
            .to_string()
            .replace([':', '-'], "")
            .to_lowercase()
            .trim_end_matches('z'),
        std::process::id() & 0xffff
    );
    let image = format!("{}-snap:{id}", ws.names.image);
    // The home's backup runs beside the commit: the same moment.
    let backup = std::thread::scope(|s| {
        let b = s.spawn(|| home_backup(&ws));
        let made = make_image(&ws, &c, &name, &image);
        made.map(|()| b.join().unwrap_or(Ok(None)))
    });
    let home_backup = match backup {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => {
            let _ = remove_image(&image);
            return Err(too_deep(&name, disk_full(&name, e)));
        }
        Err(e) => {
            let _ = remove_image(&image);
            return Err(too_deep(&name, disk_full(&name, e.into())));
        }
    };
    let base = image_size(&ws.names.image);
    let rec = SnapRecord {
        id: id.clone(),
        tag: tag.map(str::to_owned),
        workspace: ws.path.clone(),
        image: image.clone(),
        created,
        size: image_size(&image).saturating_sub(base),
        home_backup,
    };
    if let Err(e) = write_record(&ws, &rec) {
        // No record, no snapshot: its image goes too.
        let _ = remove_image(&image);
        return Err(e.into());
    }
    audit::append(
        &Record::new("sbx-run", "snapshot", &id, Outcome::Allowed, "snapshot").reason(&image),
    );
    prune(&ws);
    if common.json {
        let _ = output::json_line(&mut std::io::stdout().lock(), "snapshot", &rec);
    } else if !common.quiet {
        println!("{id}");
    }
    Ok(ExitCode::SUCCESS)
}

/// A snapshot the engine's disk could not hold: one line naming that disk
/// (exit 74), not docker's message as an internal error. Whatever the
/// commit made is gone by then; the sandbox was only paused.
fn disk_full(container: &str, e: BoxError) -> BoxError {
    if !e.to_string().contains("no space left on device") {
        return e;
    }
    let root = docker::output(&["info", "--format", "{{.DockerRootDir}}"])
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "the Docker engine's data root".into());
    RunError::Io(
        PathBuf::from(root),
        std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            format!(
                "no space left on device for a snapshot of {container}: none was kept and the \
                 sandbox runs on; free space there (`docker system df`), then snapshot again"
            ),
        ),
    )
    .into()
}

/// The engine's layer limit (125 for overlay2): a sandbox started from a
/// snapshot of a snapshot… adds a layer each time. One line saying so
/// and what to do, not docker's "max depth exceeded" as an internal error.
fn too_deep(container: &str, e: BoxError) -> BoxError {
    if !e.to_string().contains("max depth exceeded") {
        return e;
    }
    Box::new(sbx_core::error::Message::new(
        sbx_core::Exit::Unavailable,
        format!(
            "{container}: the engine cannot add a layer to its image (docker's limit of 125; \
             every start from a snapshot adds one): none was kept and the sandbox runs on; \
             for a new chain, start anew from the per-repo image (`sbx-run rm`, then `sbx-run \
             start`: the home's volume stays) and snapshot that"
        ),
    ))
}

/// The commit message of the first commit of a snapshot taken before the
/// cleanup moved to the start (a second commit was built on it): removal
/// finds that untagged parent by it and removes it alone.
const RAW_MARK: &str = "sbx-run snapshot: raw commit";

/// One commit of the running sandbox (paused), its config set by
/// `--change`s: a second container and commit to clean the layer cost
/// 5-8x the commit itself (bench/RESULTS.md). What the layer holds of the
/// agent's and of the runtime state is removed when a sandbox starts from
/// the image instead (`sbx-guest init --from-snapshot`, which the image's
/// own entry point asks for too).
fn make_image(ws: &Workspace, c: &Value, container: &str, image: &str) -> Result<(), RunError> {
    // Variables `docker run` gave the container, which the image must not
    // keep: emptied (the config can set, not unset).
    let base_env: Vec<String> = docker::inspect("image", &ws.names.image)?
        .and_then(|v| v.pointer("/Config/Env").cloned())
        .and_then(|e| serde_json::from_value(e).ok())
        .unwrap_or_default();
    let run_env: Vec<String> = c
        .pointer("/Config/Env")
        .cloned()
        .and_then(|e| serde_json::from_value(e).ok())
        .unwrap_or_default();
    let json = |v: &[&str]| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
    let mut changes: Vec<String> = run_env
        .iter()
        .filter(|e| !base_env.contains(e))
        .filter_map(|e| {
            let name = e.split('=').next().unwrap_or_default();
            (!name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
                .then(|| format!("ENV {name}="))
        })
        .collect();
    changes.push(format!(
        "LABEL {LABEL_SNAPSHOT}={}",
        serde_json::to_string(&ws.path.to_string_lossy()).unwrap_or_default()
    ));
    changes.push("USER 0:0".into());
    // Run by hand, the image still starts through the guest's cleanup.
    changes.push(format!(
        "ENTRYPOINT {}",
        json(&[spec::GUEST, "init", spec::FROM_SNAPSHOT, "--"])
    ));
    changes.push(format!("CMD {}", json(&["sleep", "infinity"])));
    // Paused from the check to the commit: what is committed is what was
    // checked (the commit leaves a paused container paused).
    docker::pause(container, "pause")?;
    let made = whiteout_name(c, container).and_then(|found| match found {
        None => docker::commit(container, image, &changes),
        Some(p) => {
            audit::append(
                &Record::new(
                    "sbx-run",
                    "snapshot",
                    container,
                    Outcome::Blocked,
                    "whiteout-name",
                )
                .reason(&p),
            );
            Err(RunError::BadWorkspace(format!(
                "{container}: {p}: docker's image layers read a name beginning with .wh. as the \
                 removal of its namesake, so a snapshot would lose files the sandbox cannot \
                 remove (another's in /tmp, /var/tmp, a world-writable directory): none was \
                 taken; remove it (`sbx-run exec --root rm`), then snapshot again"
            )))
        }
    });
    let unpaused = docker::pause(container, "unpause");
    made.and(unpaused)
}

/// The first name beginning with `.wh.` among what the sandbox changed
/// ([`forged_whiteout`] says why), the container paused. Read from its
/// own overlay2 layer where this process may (root beside the engine):
/// by fd, no link followed, names only, a few milliseconds for what a
/// sandbox writes. Else from the engine's list of changes, which compares
/// the whole tree with the image (about 2 s).
fn whiteout_name(c: &Value, container: &str) -> Result<Option<String>, RunError> {
    if let Some(upper) = c
        .pointer("/GraphDriver/Data/UpperDir")
        .and_then(Value::as_str)
        .filter(|_| c.pointer("/GraphDriver/Name").and_then(Value::as_str) == Some("overlay2"))
        .filter(|p| plain_layer_dir(p))
    {
        let upper = Path::new(upper);
        let mut find = FindWhiteout {
            root: upper,
            found: None,
        };
        if sbx_sys::sweep::sweep(upper, &mut find).is_ok() {
            return Ok(find.found);
        }
    }
    // Unlisted (docker's walk stops at a path longer than PATH_MAX, which
    // the agent can make): not checked, so not taken.
    let listed = docker::changes(container).map_err(|e| {
        RunError::BadWorkspace(format!(
            "{container}: cannot list what the sandbox changed, so no snapshot was taken (a \
             path longer than PATH_MAX? remove it): {}",
            sbx_core::sanitize::field(&e.to_string().chars().take(300).collect::<String>())
        ))
    })?;
    Ok(forged_whiteout(&listed))
}

/// A walk of a container's layer that notes the first `.wh.` name and
/// removes nothing.
struct FindWhiteout<'a> {
    root: &'a Path,
    found: Option<String>,
}

impl sbx_sys::sweep::Policy for FindWhiteout<'_> {
    type Dir = ();

    fn enter(&mut self, _: &Path, _: &sbx_sys::sweep::Stat) -> ((), bool) {
        ((), false)
    }

    fn decide(
        &mut self,
        dir: &Path,
        _: &(),
        name: &std::ffi::OsStr,
        _: Option<&sbx_sys::sweep::Stat>,
    ) -> sbx_sys::sweep::Act {
        use std::os::unix::ffi::OsStrExt;
        if self.found.is_some() {
            return sbx_sys::sweep::Act::Keep;
        }
        if name.as_bytes().starts_with(b".wh.") {
            let rel = dir.strip_prefix(self.root).unwrap_or(dir).join(name);
            let p = Path::new("/").join(rel);
            self.found = Some(sbx_core::sanitize::field(&p.to_string_lossy()).into_owned());
        }
        sbx_sys::sweep::Act::Enter
    }
}

/// The first of the paths `docker diff` lists whose name begins with
/// `.wh.` (escaped): docker's layer format has no way to hold one. In a
/// layer, `.wh.NAME` removes NAME from the layers below and `.wh..wh..opq`
/// hides everything its directory held, so an agent that may create names
/// in a world-writable directory, and no more, could have root's files
/// there gone from the snapshot. Overlayfs itself never makes such a name
/// (its removals are device nodes, which docker converts). A path cut at
/// a newline (the CLI's lines) can only be over-reported.
pub fn forged_whiteout(paths: &[String]) -> Option<String> {
    paths
        .iter()
        .find(|p| p.rsplit('/').next().is_some_and(|n| n.starts_with(".wh.")))
        .map(|p| sbx_core::sanitize::field(p).into_owned())
}

/// Remove a snapshot's image, and its raw commit when nothing else is
/// built on it. `--no-prune`: docker's pruning would also take untagged
/// parents further down (an old per-repo image, the build cache a
/// concurrent build may be using).
pub fn remove_image(image: &str) -> Result<(), RunError> {
    let parent = docker::inspect("image", image)?
        .and_then(|v| v.get("Parent").and_then(Value::as_str).map(str::to_owned))
        .filter(|p| !p.is_empty());
    docker::remove(&["image", "rm", "--force", "--no-prune", image])?;
    if let Some(p) = parent {
        let raw = docker::inspect("image", &p)?.filter(|v| {
            v.get("Comment").and_then(Value::as_str) == Some(RAW_MARK)
                && v.get("RepoTags")
                    .and_then(Value::as_array)
                    .is_none_or(|t| t.is_empty())
        });
        if raw.is_some() {
            // Another snapshot on it (an import's) keeps it: not an error.
            let _ = docker::remove(&["image", "rm", "--no-prune", &p]);
        }
    }
    Ok(())
}

/// One `sbx-backup sync` pass as the agent, when the config names a
/// store: its snapshot id.
fn home_backup(ws: &Workspace) -> Result<Option<String>, BoxError> {
    if ws.loaded.config.backup.url.is_none() {
        return Ok(None);
    }
    let out = backup_run(ws, &["sync", "--json"], "the home's backup")?;
    // The last JSON line naming a snapshot.
    let id = String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            v.pointer("/data/snapshot")
                .or_else(|| v.get("snapshot"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .next_back();
    Ok(id)
}

/// `sbx-backup -q ARGS` as the agent in the running sandbox; its stdout.
pub fn backup_run(ws: &Workspace, args: &[&str], what: &str) -> Result<Vec<u8>, BoxError> {
    use crate::guestexec;
    let sock = guestexec::socket_for(ws);
    let req = sbx_core::guestapi::ExecReq {
        argv: ["sbx-backup", "-q"]
            .iter()
            .chain(args)
            .map(|a| a.to_string())
            .collect(),
        ..Default::default()
    };
    let mut out = Vec::new();
    let mut err = Vec::new();
    let x = guestexec::connect(&sock)
        .and_then(|c| guestexec::run_with(c, req, None, &mut out, &mut err, false))
        .map_err(|e| RunError::NotReady(format!("{what}: {e}")))?;
    if x.status != 0 {
        return Err(RunError::Docker {
            command: format!("sbx-backup {} ({what})", args.join(" ")),
            message: docker::first_line(&String::from_utf8_lossy(&err)),
        }
        .into());
    }
    Ok(out)
}

fn write_record(ws: &Workspace, rec: &SnapRecord) -> Result<(), RunError> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = dir_of(ws);
    // 0700: the records are the host user's, never in the workspace.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| io(&dir, e))?;
    let tmp = dir.join(format!("{}.json.tmp", rec.id));
    let dst = dir.join(format!("{}.json", rec.id));
    let body = serde_json::to_vec_pretty(rec).unwrap_or_default();
    std::fs::write(&tmp, body)
        .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
        .and_then(|()| std::fs::rename(&tmp, &dst))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(&dst, e)
        })
}

/// `[lifecycle] keep-snapshots`: the oldest beyond N go, image and
/// record, never the one the sandbox runs from.
fn prune(ws: &Workspace) {
    let Some(keep) = ws.loaded.config.lifecycle.keep_snapshots else {
        return;
    };
    let in_use = in_use(ws);
    let all = records_in(&dir_of(ws));
    let excess = all.len().saturating_sub(keep as usize);
    for r in all
        .iter()
        .filter(|r| Some(&r.image) != in_use.as_ref())
        .take(excess)
    {
        if remove_image(&r.image).is_ok() {
            let _ = std::fs::remove_file(dir_of(ws).join(format!("{}.json", r.id)));
            output::info(&format!(
                "snapshot {} removed ([lifecycle] keep-snapshots = {keep})",
                r.id
            ));
        }
    }
}

/// `rm --volumes`: every snapshot of the workspace, image and record
/// (the container is gone already), each removal audited.
pub fn remove_all(ws: &Workspace) -> Result<(), RunError> {
    let dir = dir_of(ws);
    for r in records_in(&dir) {
        if docker::inspect("image", &r.image)?.is_some() {
            remove_image(&r.image)?;
        }
        let f = dir.join(format!("{}.json", r.id));
        std::fs::remove_file(&f).map_err(|e| io(&f, e))?;
        audit::append(
            &Record::new(
                "sbx-run",
                "snapshot-rm",
                &r.id,
                Outcome::Allowed,
                "rm-volumes",
            )
            .reason("sbx-run rm --volumes"),
        );
    }
    match std::fs::remove_dir(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&dir, e)),
        _ => Ok(()),
    }
}

/// The record `id` (or tag) of this workspace, the newest without one;
/// another workspace's is refused like `resolve` refuses it.
pub fn record(ws: &Workspace, id: Option<&str>) -> Result<SnapRecord, RunError> {
    resolve(ws, id)?;
    let mine = records_in(&dir_of(ws));
    Ok(match id {
        None => mine.last().cloned(),
        Some(id) => mine
            .into_iter()
            .find(|r| r.id == id || r.tag.as_deref() == Some(id)),
    }
    .expect("resolve found it"))
}

/// The newest snapshot's image, if the workspace has one whose image is
/// there (seed 001's start: the system state comes from it).
pub fn newest_image(ws: &Workspace) -> Option<(String, String)> {
    let r = records_in(&dir_of(ws)).pop()?;
    resolve(ws, Some(&r.id)).ok().map(|img| (r.id, img))
}

fn in_use(ws: &Workspace) -> Option<String> {
    docker::inspect("container", &ws.names.container)
        .ok()
        .flatten()
        .and_then(|c| {
            c.pointer("/Config/Image")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
}

/// `sbx-run snapshots [PATH] [--json]`.
pub fn list(common: &CommonArgs, path: Option<PathBuf>) -> Result<ExitCode, BoxError> {
    let ws = Workspace::open(common, path)?;
    let now = now();
    let use_ = in_use(&ws);
    for r in records_in(&dir_of(&ws)) {
        let age = now.saturating_sub(r.created);
        if common.json {
            let mut v = serde_json::to_value(&r).unwrap_or_default();
            v["age_secs"] = age.into();
            v["in_use"] = (Some(&r.image) == use_.as_ref()).into();
            let _ = output::json_line(&mut std::io::stdout().lock(), "snapshot", &v);
        } else {
            println!(
                "{}\t{}\t{} ago\t{}",
                r.id,
                r.tag.as_deref().unwrap_or("-"),
                humantime::format_duration(std::time::Duration::from_secs(age)),
                human_size(r.size)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn human_size(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// The layers the snapshot image `snapshot` holds above the per-repo
/// image `base`, top first, as the engine's overlay2 directories: what
/// the sandbox changed, for the guest's cleanup to look at instead of the
/// whole image (sbx-guest's snapclean.rs). Empty (the guest reads every
/// directory) unless both are overlay2 images, `base`'s layers are the
/// bottom of `snapshot`'s, and every path is one the engine makes.
pub fn own_layers(snapshot: &str, base: &str) -> Result<Vec<PathBuf>, RunError> {
    let (Some(s), Some(b)) = (
        docker::inspect("image", snapshot)?,
        docker::inspect("image", base)?,
    ) else {
        return Ok(Vec::new());
    };
    Ok(layers_above(&s, &b))
}

/// The label of a base image whose guest takes `--snapshot-layers`
/// (base-image/Dockerfile); images made on it inherit it.
pub const LABEL_GUEST_LAYERS: &str = "sbx.guest.snapshot-layers";

/// /var/lib/docker/overlay2/<id>/diff: nothing a bind's options could
/// misread (commas, quotes), nothing relative.
fn plain_layer_dir(p: &str) -> bool {
    p.starts_with('/')
        && p.ends_with("/diff")
        && !p.contains("/../")
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b))
}

/// [`own_layers`] of two `docker image inspect` objects.
pub fn layers_above(snapshot: &Value, base: &Value) -> Vec<PathBuf> {
    // An older guest would refuse the flag (the start fails) or, were it
    // only mounted, leave the layers in sight of the agent.
    if snapshot
        .pointer(&format!("/Config/Labels/{LABEL_GUEST_LAYERS}"))
        .and_then(Value::as_str)
        != Some("1")
    {
        return Vec::new();
    }
    fn chain(img: &Value) -> Option<Vec<&str>> {
        let gd = img.get("GraphDriver")?;
        if gd.get("Name")?.as_str()? != "overlay2" {
            return None;
        }
        let data = gd.get("Data")?;
        let mut c = vec![data.get("UpperDir")?.as_str()?];
        if let Some(l) = data.get("LowerDir").and_then(Value::as_str) {
            c.extend(l.split(':'));
        }
        c.iter().all(|p| plain_layer_dir(p)).then_some(c)
    }
    let (Some(s), Some(b)) = (chain(snapshot), chain(base)) else {
        return Vec::new();
    };
    match s.len().checked_sub(b.len()) {
        Some(n) if n > 0 && s[n..] == b[..] => s[..n].iter().map(PathBuf::from).collect(),
        _ => Vec::new(),
    }
}

/// The image `start --from-snapshot [ID]` starts from: the newest, or ID,
/// which must be this workspace's (another's is refused, named, 77).
pub fn resolve(ws: &Workspace, id: Option<&str>) -> Result<String, RunError> {
    let mine = records_in(&dir_of(ws));
    let rec = match id {
        None => mine.last().cloned().ok_or_else(|| {
            RunError::NoSandbox(format!(
                "{}: no snapshot: take one with `sbx-run snapshot`",
                ws.path.display()
            ))
        })?,
        Some(id) => match mine
            .iter()
            .find(|r| r.id == id || r.tag.as_deref() == Some(id))
        {
            Some(r) => r.clone(),
            None => {
                let other = std::fs::read_dir(root_dir())
                    .into_iter()
                    .flatten()
                    .flatten()
                    .flat_map(|d| records_in(&d.path()))
                    .find(|r| r.id == id);
                return Err(match other {
                    Some(r) => {
                        audit::append(
                            &Record::new(
                                "sbx-run",
                                "start-from-snapshot",
                                id,
                                Outcome::Blocked,
                                "snapshot-owner",
                            )
                            .reason("the snapshot belongs to another workspace"),
                        );
                        RunError::Denied(format!(
                            "snapshot {id} belongs to {}, not to {}: a sandbox starts only from its own workspace's snapshots",
                            r.workspace.display(),
                            ws.path.display()
                        ))
                    }
                    None => RunError::NoSandbox(format!(
                        "snapshot {id}: no such snapshot of {} (`sbx-run snapshots` lists them)",
                        ws.path.display()
                    )),
                });
            }
        },
    };
    // The image must say the same (a record and an image of another name).
    let label = docker::inspect("image", &rec.image)?
        .and_then(|v| {
            v.pointer(&format!(
                "/Config/Labels/{}",
                LABEL_SNAPSHOT.replace('/', "~1")
            ))
            .cloned()
        })
        .and_then(|v| v.as_str().map(str::to_owned));
    match label {
        Some(l) if Path::new(&l) == ws.path => Ok(rec.image),
        Some(l) => Err(RunError::Denied(format!(
            "snapshot {}: its image {} belongs to {l}, not to {}",
            rec.id,
            rec.image,
            ws.path.display()
        ))),
        None => Err(RunError::NoSandbox(format!(
            "snapshot {}: its image {} is gone (remove the record from {})",
            rec.id,
            rec.image,
            dir_of(ws).display()
        ))),
    }
}

/// The record's name in an exported archive: its first entry, which
/// `docker load` leaves alone (it reads `manifest.json` and what that names).
const RECORD_ENTRY: &str = "sbx-snapshot.json";

/// The sandboxed workspace (or scratch root) `dir` is in, if any: a
/// directory some agent writes (`workspaces`, or one `.agent-sandbox`
/// marks).
fn agent_writes(dir: &Path, workspaces: &[PathBuf]) -> Option<PathBuf> {
    let scratch = spec::state_dir().join("scratch");
    let scratch = scratch.canonicalize().unwrap_or(scratch);
    if dir.starts_with(&scratch) {
        return Some(scratch);
    }
    dir.ancestors()
        .find(|d| {
            workspaces.iter().any(|w| w == d)
                || d.join(sbx_core::config::DIR).symlink_metadata().is_ok()
        })
        .map(Path::to_path_buf)
}

/// An archive is never written or read inside a workspace: its agent could
/// rewrite it (an import runs its root-owned files as they are) or put a
/// link on the way (the write would follow it). Each prefix of the path is
/// resolved from the top and the first that lands in a workspace stops
/// it, so no link inside one is followed.
fn outside_workspaces(ws: &Workspace, file: &Path, what: &str) -> Result<(), RunError> {
    let abs = std::path::absolute(file).map_err(|e| io(file, e))?;
    // This workspace, and every one with a sandbox here (configured or not).
    let label = crate::names::LABEL_WORKSPACE;
    let listed = docker::output(&[
        "ps",
        "--all",
        "--filter",
        &format!("label={label}"),
        "--format",
        &format!("{{{{.Label \"{label}\"}}}}"),
    ])?;
    let mut workspaces = vec![ws.path.clone()];
    workspaces.extend(listed.lines().filter(|l| !l.is_empty()).map(PathBuf::from));
    let mut prefix = PathBuf::new();
    for c in abs.components() {
        prefix.push(c);
        let Ok(real) = prefix.canonicalize() else {
            break;
        };
        if let Some(w) = agent_writes(&real, &workspaces) {
            return Err(RunError::BadWorkspace(format!(
                "{}: in {}, which a sandbox's agent writes: it could rewrite the archive or lead the {what} elsewhere by a link; use a path outside every workspace (nothing was {what}ed)",
                sbx_core::sanitize::field(&file.to_string_lossy()),
                sbx_core::sanitize::field(&w.to_string_lossy()),
            )));
        }
    }
    Ok(())
}

/// `sbx-run snapshot export ID -o FILE`: the record, then `docker save`.
pub fn export(
    common: &CommonArgs,
    path: Option<PathBuf>,
    id: &str,
    out: &Path,
) -> Result<ExitCode, BoxError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let ws = Workspace::open(common, path)?;
    let rec = record(&ws, Some(id))?;
    outside_workspaces(&ws, out, "export")?;
    let body = serde_json::to_vec_pretty(&rec).unwrap_or_default();
    let mut h = tar::Header::new_ustar();
    h.set_path(RECORD_ENTRY).map_err(|e| io(out, e))?;
    h.set_size(body.len() as u64);
    h.set_mode(0o644);
    h.set_mtime(rec.created);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    // Never over another file (nor through a link there).
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .map_err(|e| io(out, e))?;
    let pad = (512 - body.len() % 512) % 512;
    let written = f
        .write_all(h.as_bytes())
        .and_then(|()| f.write_all(&body))
        .and_then(|()| f.write_all(&vec![0u8; pad]))
        .and_then(|()| f.try_clone());
    let saved = written.map_err(|e| io(out, e)).and_then(|dup| {
        let o = docker::cmd()
            .args(["save", &rec.image])
            .stdin(std::process::Stdio::null())
            .stdout(dup)
            .stderr(std::process::Stdio::piped())
            .output()
            .map_err(|e| RunError::Docker {
                command: "docker save".into(),
                message: e.to_string(),
            })?;
        if !o.status.success() {
            return Err(RunError::Docker {
                command: format!("docker save {}", rec.image),
                message: docker::first_line(&String::from_utf8_lossy(&o.stderr)),
            });
        }
        f.sync_all().map_err(|e| io(out, e))
    });
    if let Err(e) = saved {
        let _ = std::fs::remove_file(out);
        return Err(e.into());
    }
    audit::append(
        &Record::new(
            "sbx-run",
            "snapshot-export",
            &rec.id,
            Outcome::Allowed,
            "export",
        )
        .reason(&out.display().to_string()),
    );
    if !common.quiet {
        output::info(&format!("snapshot {} written to {}", rec.id, out.display()));
    }
    Ok(ExitCode::SUCCESS)
}

/// What an archive says before anything is loaded: its record, and the
/// image (its one tag and id) from `manifest.json`.
fn read_archive(f: &std::fs::File, file: &Path) -> Result<(SnapRecord, String), RunError> {
    use std::io::Read;
    let bad = |why: String| {
        RunError::BadWorkspace(format!(
            "{}: not an archive `sbx-run snapshot export` wrote ({why}): nothing was imported",
            file.display()
        ))
    };
    let mut rec: Option<SnapRecord> = None;
    let mut manifest: Option<Value> = None;
    let mut ar = tar::Archive::new(f);
    for (i, e) in ar.entries().map_err(|e| bad(e.to_string()))?.enumerate() {
        let mut e = e.map_err(|e| bad(e.to_string()))?;
        let name = e.path_bytes().into_owned();
        let want_rec = i == 0 && name == RECORD_ENTRY.as_bytes();
        // What docker's loader reads is the last entry that names
        // manifest.json once cleaned (`./manifest.json`, a link): one
        // regular file of that exact name, or what is checked here is not
        // what is loaded.
        let is_manifest = loader_name(&name) == Path::new("manifest.json");
        if is_manifest
            && (name != b"manifest.json"
                || manifest.is_some()
                || e.header().entry_type() != tar::EntryType::Regular)
        {
            return Err(bad(format!(
                "a second or unusual manifest.json ({:?})",
                String::from_utf8_lossy(&name)
            )));
        }
        if !want_rec && !is_manifest {
            continue;
        }
        if e.size() > 1 << 20 {
            return Err(bad(format!(
                "{} is too large",
                String::from_utf8_lossy(&name)
            )));
        }
        let mut b = Vec::new();
        e.read_to_end(&mut b).map_err(|e| bad(e.to_string()))?;
        if want_rec {
            rec =
                Some(serde_json::from_slice(&b).map_err(|e| bad(format!("{RECORD_ENTRY}: {e}")))?);
        } else {
            manifest =
                Some(serde_json::from_slice(&b).map_err(|e| bad(format!("manifest.json: {e}")))?);
        }
    }
    let rec = rec.ok_or_else(|| bad(format!("no {RECORD_ENTRY} first")))?;
    let manifest = manifest.ok_or_else(|| bad("no manifest.json".into()))?;
    // One image, tagged with the record's name alone: `docker load` moves
    // every tag an archive names, and this one names nothing else.
    let [img] = manifest.as_array().map(Vec::as_slice).unwrap_or_default() else {
        return Err(bad("it must hold exactly one image".into()));
    };
    let tags: Vec<&str> = img
        .get("RepoTags")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    // Shown on the host's terminal and passed to sbx-backup: plain text,
    // and a backup id as sbx-backup names them (20261122T120000.1Z-42).
    if let Some(t) = &rec.tag
        && let Err(why) = check_tag(t)
    {
        return Err(bad(format!("the record's tag {why}")));
    }
    if let Some(b) = &rec.home_backup
        && (!(1..=64).contains(&b.len())
            || b.starts_with('-')
            || !b
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c)))
    {
        return Err(bad("the record's home backup is not a backup id".into()));
    }
    let valid_id = !rec.id.is_empty()
        && rec.id.len() <= 64
        && rec
            .id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid_id {
        return Err(bad("the record's id is not a snapshot id".into()));
    }
    if tags != [rec.image.as_str()] || !rec.image.ends_with(&format!("-snap:{}", rec.id)) {
        return Err(bad(format!("its image must be tagged {} alone", rec.image)));
    }
    // docker save names the config `<hex>.json` or `blobs/sha256/<hex>`.
    let config = img
        .get("Config")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let hex = config
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .trim_end_matches(".json");
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad("manifest.json names no image id".into()));
    }
    Ok((rec, format!("sha256:{hex}")))
}

/// An entry's name as docker's loader writes it out (Go's filepath.Clean
/// under its directory): `./manifest.json` is manifest.json too.
fn loader_name(name: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let mut out = PathBuf::new();
    for c in Path::new(std::ffi::OsStr::from_bytes(name)).components() {
        match c {
            std::path::Component::Normal(n) => out.push(n),
            std::path::Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// `sbx-run snapshot import FILE [PATH]`: load, label for this workspace,
/// then record. An image that could not be labelled is removed.
pub fn import(
    common: &CommonArgs,
    path: Option<PathBuf>,
    file: &Path,
) -> Result<ExitCode, BoxError> {
    use std::io::Seek;
    let ws = Workspace::open(common, path)?;
    outside_workspaces(&ws, file, "import")?;
    let mut f = std::fs::File::open(file).map_err(|e| io(file, e))?;
    let (mut rec, image_id) = read_archive(&f, file)?;
    if records_in(&dir_of(&ws)).iter().any(|r| r.id == rec.id) {
        return Err(RunError::BadWorkspace(format!(
            "snapshot {} is already one of {}'s: nothing was imported",
            rec.id,
            ws.path.display()
        ))
        .into());
    }
    let loaded = rec.image.clone();
    let before = docker::inspect("image", &loaded)?
        .and_then(|v| v.get("Id").and_then(Value::as_str).map(str::to_owned));
    match &before {
        // Another workspace's snapshot of this name here: a load would
        // move its tag. The same image needs no load.
        Some(id) if *id != image_id => {
            return Err(RunError::BadWorkspace(format!(
                "{}: its image {loaded} is another image of that name on this machine: nothing was imported",
                file.display()
            ))
            .into());
        }
        Some(_) => {}
        None => {
            f.rewind().map_err(|e| io(file, e))?;
            let o = docker::cmd()
                .args(["load", "--quiet"])
                .stdin(f)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .output()
                .map_err(|e| RunError::Docker {
                    command: "docker load".into(),
                    message: e.to_string(),
                })?;
            if !o.status.success() {
                return Err(RunError::Docker {
                    command: format!("docker load < {}", file.display()),
                    message: docker::first_line(&String::from_utf8_lossy(&o.stderr)),
                }
                .into());
            }
        }
    }
    // docker names an image by its config's digest, whatever the manifest
    // calls the config: what is removed on a failure below is the image
    // this load made, never one the manifest merely names.
    let got = docker::inspect("image", &loaded)?
        .and_then(|v| v.get("Id").and_then(Value::as_str).map(str::to_owned));
    if got.as_deref() != Some(image_id.as_str()) {
        if before.is_none() {
            let _ = docker::remove(&["image", "rm", "--no-prune", &loaded]);
        }
        return Err(RunError::BadWorkspace(format!(
            "{}: its manifest names image {image_id}, but docker loaded {}: nothing was imported",
            file.display(),
            got.as_deref().unwrap_or("nothing")
        ))
        .into());
    }
    let image = format!("{}-snap:{}", ws.names.image, rec.id);
    let made = label_as(&ws, &loaded, &image, &rec.id);
    // The loaded tag goes unless it was there before (the snapshot's
    // layers stay under the new image).
    if before.is_none() && loaded != image {
        let _ = docker::remove(&["image", "rm", "--no-prune", &loaded]);
    }
    // No check of the image's content: whatever an agent could have left
    // in it (a real snapshot holds it too) is removed when a sandbox
    // starts from it (`init --from-snapshot`, snapclean.rs).
    if let Err(e) = made {
        let _ = docker::remove(&["image", "rm", "--force", "--no-prune", &image]);
        if before.is_none() {
            let _ = docker::remove(&["image", "rm", "--force", "--no-prune", &image_id]);
        }
        return Err(e.into());
    }
    rec.workspace = ws.path.clone();
    rec.image = image.clone();
    rec.size = image_size(&image).saturating_sub(image_size(&ws.names.image));
    if let Err(e) = write_record(&ws, &rec) {
        let _ = remove_image(&image);
        return Err(e.into());
    }
    audit::append(
        &Record::new(
            "sbx-run",
            "snapshot-import",
            &rec.id,
            Outcome::Allowed,
            "import",
        )
        .reason(&file.display().to_string()),
    );
    if common.json {
        let _ = output::json_line(&mut std::io::stdout().lock(), "snapshot", &rec);
    } else if !common.quiet {
        println!("{}", rec.id);
    }
    Ok(ExitCode::SUCCESS)
}

/// `image` = `loaded` with this workspace's label (an empty layer: a
/// commit of a container never started).
fn label_as(ws: &Workspace, loaded: &str, image: &str, id: &str) -> Result<(), RunError> {
    let tmp = format!("{}-import-{id}", ws.names.container);
    let label = format!(
        "LABEL {LABEL_SNAPSHOT}={}",
        serde_json::to_string(&ws.path.to_string_lossy()).unwrap_or_default()
    );
    let r = docker::output(&["create", "--name", &tmp, "--network", "none", loaded])
        .and_then(|_| docker::output(&["commit", "--change", &label, &tmp, image]).map(drop));
    let _ = docker::remove(&["rm", "--force", "--volumes", &tmp]);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docker diff`'s paths: a name docker's layers read as a removal is
    /// found wherever it is, and nothing else is.
    #[test]
    fn a_whiteout_name_is_found_in_docker_diff() {
        let v = |s: &[&str]| s.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        let clean = v(&[
            "/var",
            "/var/tmp",
            "/var/tmp/x.wh.y",
            "/var/tmp/.whx",
            "/var/tmp/gone",
        ]);
        assert_eq!(forged_whiteout(&clean), None);
        for (diff, want) in [
            (
                v(&["/opt/shared", "/opt/shared/.wh.roots"]),
                "/opt/shared/.wh.roots",
            ),
            (
                v(&["/var/tmp", "/var/tmp/.wh..wh..opq"]),
                "/var/tmp/.wh..wh..opq",
            ),
            (v(&["/tmp/.wh.d", "/tmp/.wh.d/f"]), "/tmp/.wh.d"),
            // The CLI's line of a name with a newline in it.
            (v(&["/tmp/a", "b/.wh.c"]), "b/.wh.c"),
            (v(&["/tmp/.wh.\u{1b}[2J"]), "/tmp/.wh.\\e[2J"),
        ] {
            assert_eq!(forged_whiteout(&diff).as_deref(), Some(want), "{diff:?}");
        }
    }

    /// The snapshot's own layers are those above the per-repo image's,
    /// and only when the engine's paths are plain overlay2 directories.
    #[test]
    fn own_layers_are_those_above_the_repo_image() {
        let img = |upper: &str, lower: &[&str]| {
            let mut d = serde_json::json!({"UpperDir": upper, "MergedDir": "/x/merged"});
            if !lower.is_empty() {
                d["LowerDir"] = lower.join(":").into();
            }
            serde_json::json!({
                "GraphDriver": {"Name": "overlay2", "Data": d},
                "Config": {"Labels": {LABEL_GUEST_LAYERS: "1"}},
            })
        };
        let o = |id: &str| format!("/var/lib/docker/overlay2/{id}/diff");
        let (a, b, c, s1, s2) = (o("a"), o("b"), o("c"), o("s1"), o("s2"));
        let base = img(&c, &[&b, &a]);
        let want = |v: &[&String]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert_eq!(layers_above(&img(&s1, &[&c, &b, &a]), &base), want(&[&s1]));
        assert_eq!(
            layers_above(&img(&s2, &[&s1, &c, &b, &a]), &base),
            want(&[&s2, &s1])
        );
        // Another base (a rebuilt per-repo image), the base itself, no
        // lower layers at all, another driver, a path docker would not
        // make: every directory is read.
        for (snap, base) in [
            (img(&s1, &[&o("c2"), &b, &a]), &base),
            (img(&c, &[&b, &a]), &base),
            (img(&s1, &[]), &base),
            (img(&s1, &[&c, &b, &a]), &img(&c, &[&b])),
        ] {
            assert!(layers_above(&snap, base).is_empty(), "{snap}");
        }
        let mut vfs = img(&s1, &[&c, &b, &a]);
        vfs["GraphDriver"]["Name"] = "vfs".into();
        assert!(layers_above(&vfs, &base).is_empty());
        // A guest that does not say it reads layers gets none.
        let mut old = img(&s1, &[&c, &b, &a]);
        old["Config"]["Labels"] = serde_json::json!({});
        assert!(layers_above(&old, &base).is_empty());
        for bad in [
            "/x/a,readonly=false/diff",
            "rel/diff",
            "/x/../../etc/diff",
            "/x/a",
        ] {
            assert!(
                layers_above(&img(bad, &[&c, &b, &a]), &base).is_empty(),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_name_docker_s_loader_reads_as_the_manifest_is_the_manifest() {
        for n in [
            "manifest.json",
            "./manifest.json",
            "/manifest.json",
            "a/../manifest.json",
            ".//manifest.json",
            "../manifest.json",
        ] {
            assert_eq!(loader_name(n.as_bytes()), Path::new("manifest.json"), "{n}");
        }
        for n in ["x/manifest.json", "manifest.json.bak", "manifest"] {
            assert_ne!(loader_name(n.as_bytes()), Path::new("manifest.json"), "{n}");
        }
    }

    #[test]
    fn a_tag_is_one_printable_line() {
        assert!(check_tag("before upgrade").is_ok());
        for bad in ["", "a\nb", "\u{1b}[2J", &"x".repeat(129)] {
            assert!(check_tag(bad).is_err(), "{bad:?}");
        }
    }
}
