//! Snapshots of a whole sandbox (`sbx-run snapshot`, `snapshots`, `start
//! --from-snapshot`): the system state outside the home and the workspace
//! as an image, a home backup taken with it, one record on the host.
//!
//! The image is never the container's writable layer as it is: the agent
//! wrote parts of it (/tmp, /var/tmp, files it owns anywhere) and the
//! guest keeps its runtime state there (/run: the firewall's, the
//! broker's and the audit sink's files). A second layer, made with no
//! network, removes all of that, and every variable the container got at
//! `docker run` (host values, passed secrets) is emptied in its config:
//! a sandbox started from a snapshot gets them anew from the config, and
//! its guards are made at start as in a fresh one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};

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

/// What the cleanup layer removes: every file (directories stay, as the
/// image made them) of the guest's runtime state, /tmp, /var/tmp and
/// scratch space, and whatever the agent owns outside its home (a
/// volume, not in the layer). Root-owned changes (packages, /opt,
/// /usr/local) stay.
fn clean_script(mounts: &[String]) -> String {
    // Mount points (volumes, binds) keep the owner the image gave them:
    // a fresh volume takes it.
    let prune: Vec<String> = ["/proc", "/sys", "/dev", "/home"]
        .into_iter()
        .map(str::to_owned)
        .chain(mounts.iter().cloned())
        .filter_map(|p| shlex::try_quote(&p).ok().map(|q| format!("-path {q}")))
        .collect();
    format!(
        "set -e; \
for d in /run/sbx /run/sbx-audit /run/sbx-git /run/sbx-fw /run/xtables.lock /tmp /scratch; do \
  [ -e \"$d\" ] || continue; find \"$d\" -xdev ! -type d -delete; done; \
u=$(id -u agent 2>/dev/null || echo 1000); \
find / -xdev \\( {} \\) -prune -o -uid \"$u\" -print0 | xargs -0 -r rm -rf",
        prune.join(" -o ")
    )
}

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

/// `sbx-run snapshot [PATH] [--tag T]`.
pub fn snapshot(
    common: &CommonArgs,
    path: Option<PathBuf>,
    tag: Option<&str>,
) -> Result<ExitCode, BoxError> {
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
    let raw = format!("{}-snap:{id}-raw", ws.names.image);
    // The home's backup runs beside the commit: the same moment.
    let backup = std::thread::scope(|s| {
        let b = s.spawn(|| home_backup(&ws));
        let made = make_image(&ws, &name, &raw, &image);
        let _ = docker::remove(&["image", "rm", "--force", &raw]);
        made.map(|()| b.join().unwrap_or(Ok(None)))
    });
    let home_backup = match backup {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => {
            let _ = docker::remove(&["image", "rm", "--force", &image]);
            return Err(e);
        }
        Err(e) => {
            let _ = docker::remove(&["image", "rm", "--force", &image]);
            return Err(e.into());
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
        let _ = docker::remove(&["image", "rm", "--force", &image]);
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

/// Commit the container, then the cleanup layer on top (no network); the
/// raw commit is removed by the caller.
fn make_image(ws: &Workspace, container: &str, raw: &str, image: &str) -> Result<(), RunError> {
    // Variables `docker run` gave the container, which the image must not
    // keep: emptied (the config can set, not unset).
    let base_env: Vec<String> = docker::inspect("image", &ws.names.image)?
        .and_then(|v| v.pointer("/Config/Env").cloned())
        .and_then(|e| serde_json::from_value(e).ok())
        .unwrap_or_default();
    let c = docker::inspect("container", container)?.unwrap_or_default();
    let run_env: Vec<String> = c
        .pointer("/Config/Env")
        .cloned()
        .and_then(|e| serde_json::from_value(e).ok())
        .unwrap_or_default();
    let mounts: Vec<String> = c
        .get("Mounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| {
            m.get("Destination")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    let mut dockerfile = format!("FROM {raw}\n");
    for e in run_env.iter().filter(|e| !base_env.contains(e)) {
        let name = e.split('=').next().unwrap_or_default();
        if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            dockerfile.push_str(&format!("ENV {name}=\n"));
        }
    }
    dockerfile.push_str(&format!(
        "LABEL {LABEL_SNAPSHOT}={}\nUSER 0:0\nRUN {}\n",
        serde_json::to_string(&ws.path.to_string_lossy()).unwrap_or_default(),
        serde_json::to_string(&["/bin/sh", "-c", &clean_script(&mounts)]).unwrap_or_default()
    ));
    docker::output(&["commit", "--pause=true", container, raw])?;
    let mut child = docker::cmd()
        .args([
            "build",
            "--quiet",
            "--network",
            "none",
            "--force-rm",
            "--tag",
            image,
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RunError::Docker {
            command: "docker build".into(),
            message: e.to_string(),
        })?;
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(dockerfile.as_bytes());
    }
    let out = child.wait_with_output().map_err(|e| RunError::Docker {
        command: "docker build".into(),
        message: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(RunError::Docker {
            command: format!("docker build --tag {image}"),
            message: docker::first_line(&String::from_utf8_lossy(&out.stderr)),
        });
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
        if docker::remove(&["image", "rm", "--force", &r.image]).is_ok() {
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
            docker::remove(&["image", "rm", "--force", &r.image])?;
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
