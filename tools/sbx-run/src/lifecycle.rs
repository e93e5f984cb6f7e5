//! Container lifecycle: init, build, start, stop, restart, shell, exec,
//! show-run, list, rm, prune. Config is validated before any docker call;
//! an interrupted start removes what it created.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use sbx_core::audit::{self, Outcome, Record};
use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;
use sbx_core::guestapi::User;
use sbx_core::{Exit, output};
use serde_json::{Value, json};

use crate::image::{self, BuildOpts};
use crate::names::{
    BASE_IMAGE, LABEL_BRANCH, LABEL_HASH, LABEL_IMAGE, LABEL_MODE, LABEL_ROLE, LABEL_SPEC,
    LABEL_WORKSPACE,
};
use crate::workspace::{self, Workspace};
use crate::{RunError, docker, spec};

type Res = Result<ExitCode, BoxError>;

fn ok() -> Res {
    Ok(Exit::Ok.into())
}

/// One line of a command's report on stdout: `text`, or with --json a
/// `{"type": kind, "data": data}` line; nothing with -q.
fn say(common: &CommonArgs, kind: &str, data: Value, text: &str) -> Result<(), RunError> {
    if common.quiet {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    let r = if common.json {
        output::json_line(&mut out, kind, &data)
    } else {
        writeln!(out, "{text}")
    };
    r.map_err(|e| RunError::Io("stdout".into(), e))
}

/// A path as JSON: a string, or `{"bytes": base64}` when not UTF-8.
fn path_value(p: &Path) -> Value {
    use std::os::unix::ffi::OsStrExt;
    output::bytes_value(p.as_os_str().as_bytes())
}

/// Refuse to touch a container of our name that another workspace (or
/// someone else) owns; the refusal is audited.
fn check_owner(ws: &Workspace) -> Result<Option<Value>, RunError> {
    let c = owned(ws, &ws.names.container)?;
    // `a/b` and `a__b` share a directory and so a container name.
    if let (Some(c), Some(b)) = (&c, &ws.branch) {
        let there = label(c, LABEL_BRANCH);
        if there != b {
            return Err(RunError::Usage(format!(
                "branches {b:?} and {there:?} both map to {} (container {}): rename one (`/` and white space become `__`)",
                crate::branch::worktree_dir(b),
                ws.names.container
            )));
        }
    }
    Ok(c)
}

/// The workspace's sandbox container, if any (refusing a foreign one).
pub fn owned_container(ws: &Workspace) -> Result<Option<Value>, RunError> {
    check_owner(ws)
}

/// `start --from-snapshot [ID]`: the sandbox made anew from a snapshot's
/// image (snapshot::resolve refuses another workspace's), with every
/// check and guard of a fresh start.
pub fn start_from_snapshot(
    common: &CommonArgs,
    path: Option<PathBuf>,
    id: Option<&str>,
) -> Result<Workspace, BoxError> {
    let ws = Workspace::open(common, path)?;
    let image = crate::snapshot::resolve(&ws, id)?;
    if check_owner(&ws)?.is_some() {
        docker::remove(&["rm", "--force", &ws.names.container])?;
    }
    start_checked(ws, false, Some(&image))
}

/// The container `name` if it exists and carries this workspace's label.
fn owned(ws: &Workspace, name: &str) -> Result<Option<Value>, RunError> {
    let Some(c) = docker::inspect("container", name)? else {
        return Ok(None);
    };
    let owner = label(&c, LABEL_WORKSPACE);
    let me = ws.path.to_string_lossy();
    if owner != me {
        audit::append(
            &Record::new(
                "sbx-run",
                "container",
                name,
                Outcome::Blocked,
                "foreign-container",
            )
            .reason("a container of this name does not carry this workspace's label"),
        );
        return Err(RunError::ForeignContainer(name.to_owned(), me.into_owned()));
    }
    Ok(Some(c))
}

fn running(c: &Value) -> bool {
    c.pointer("/State/Running").and_then(Value::as_bool) == Some(true)
}

pub fn init(
    common: &CommonArgs,
    path: Option<PathBuf>,
    force: bool,
    import: Option<&std::path::Path>,
) -> Res {
    let root = workspace::resolve(path)?;
    let dir = root.join(sbx_core::config::DIR);
    // An import is converted (and checked) before anything is written.
    let imported = match import {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| RunError::Io(p.to_owned(), e))?;
            let got = crate::import::from_yaml(&text, p).map_err(RunError::Config)?;
            for n in &got.notes {
                say(common, "import", json!(n), &n.to_string())?;
            }
            Some(got.toml)
        }
        None => None,
    };
    let files = [
        (
            "config.toml",
            imported.as_deref().unwrap_or(image::CONFIG_TEMPLATE),
        ),
        ("Dockerfile", image::REPO_DOCKERFILE),
    ];
    if !force {
        if let Some((f, _)) = files.iter().find(|(f, _)| dir.join(f).exists()) {
            return Err(RunError::Usage(format!(
                "{} exists: sbx-run init leaves existing files alone (use --force to overwrite)",
                dir.join(f).display()
            ))
            .into());
        }
    }
    std::fs::create_dir_all(&dir).map_err(|e| RunError::Io(dir.clone(), e))?;
    for (f, text) in files {
        let p = dir.join(f);
        std::fs::write(&p, text).map_err(|e| RunError::Io(p.clone(), e))?;
        say(
            common,
            "file",
            json!({"action": "created", "path": path_value(&p)}),
            &format!("created {}", p.display()),
        )?;
    }
    let ws = Workspace::open(common, Some(root))?;
    if force {
        docker::require_engine()?;
        if check_owner(&ws)?.is_some() {
            docker::remove(&["rm", "--force", &ws.names.container])?;
        }
    }
    image::build_repo(&ws, &BuildOpts::default())?;
    ok()
}

pub fn build(common: &CommonArgs, path: Option<PathBuf>, o: &BuildOpts) -> Res {
    let ws = Workspace::open(common, path)?;
    image::build_repo(&ws, o)?;
    ok()
}

/// Start (or reuse) the sandbox and wait until its init is done.
/// With `rebuild`, the per-repo image is built first (on the base tag it
/// names) and an existing container is replaced, so the sandbox runs what
/// was just built rather than reporting "already running".
pub fn start(
    common: &CommonArgs,
    path: Option<PathBuf>,
    rebuild: Option<&BuildOpts>,
) -> Result<Workspace, BoxError> {
    start_in(common, path, rebuild, None)
}

/// `start`, in branch mode when `branch` is given: the branch is
/// provisioned on the shelf (branch.rs) before its container starts.
pub fn start_in(
    common: &CommonArgs,
    path: Option<PathBuf>,
    rebuild: Option<&BuildOpts>,
    branch: Option<&str>,
) -> Result<Workspace, BoxError> {
    let ws = Workspace::open(common, path)?.with_branch(branch);
    let name = ws.names.container.clone();
    if let Some(o) = rebuild {
        image::build_repo(&ws, o)?;
        if check_owner(&ws)?.is_some() {
            docker::remove(&["rm", "--force", &name])?;
        }
    }
    // The common case first: it is running (exec, shell). No separate engine
    // check: the first inspection fails with 69 itself.
    let container = check_owner(&ws)?;
    if let Some(c) = &container
        && running(c)
    {
        output::info(&format!("{name} is already running"));
        return Ok(ws);
    }
    // Seed 001's order for a sandbox made anew: the home volume if it is
    // there, else the guest's first boot restores the newest backup into
    // a new one; the system state from the newest snapshot if there is one.
    let from = match (&container, &ws.branch, rebuild) {
        (None, None, None) => crate::snapshot::newest_image(&ws),
        _ => None,
    };
    if container.is_none() {
        let home = if docker::exists("volume", &ws.names.home)? {
            "the home volume"
        } else {
            "a new home volume (the newest backup is restored into it)"
        };
        let system = match &from {
            Some((id, _)) => format!("snapshot {id}"),
            None => "the per-repo image".into(),
        };
        audit::append(
            &Record::new("sbx-run", "start", &name, Outcome::Allowed, "restore-order")
                .reason(&format!("home: {home}; system state: {system}")),
        );
    }
    start_checked(ws, container.is_some(), from.as_ref().map(|f| f.1.as_str()))
}

/// `sbx-run restore [PATH] --snapshot ID | --backup ID`: an older point in
/// time. A snapshot brings its system state (the sandbox made anew from
/// its image) and the home backup taken with it; a backup, the home only.
/// The home's state before is backed up first, so a restore can be undone.
pub fn restore(
    common: &CommonArgs,
    path: Option<PathBuf>,
    snapshot: Option<&str>,
    backup: Option<&str>,
) -> Res {
    let ws = Workspace::open(common, path.clone())?;
    let name = ws.names.container.clone();
    let step = |what: &str, target: &str| {
        audit::append(
            &Record::new("sbx-run", "restore", target, Outcome::Allowed, "restore")
                .reason(&format!("{name}: {what}")),
        );
    };
    let home = match snapshot {
        Some(id) => {
            let rec = crate::snapshot::record(&ws, Some(id))?;
            step("system state from a snapshot's image", &rec.id);
            start_from_snapshot(common, path, Some(&rec.id))?;
            if rec.home_backup.is_none() {
                output::info(&format!(
                    "snapshot {} has no home backup: the home is left as it is",
                    rec.id
                ));
            }
            rec.home_backup
        }
        None => {
            start(common, path, None)?;
            backup.map(str::to_owned)
        }
    };
    if let Some(b) = home {
        if ws.loaded.config.backup.url.is_none() {
            return Err(RunError::Config(format!(
                "{}: restoring the home needs [backup] url, the store its backups are in",
                ws.loaded.describe()
            ))
            .into());
        }
        crate::snapshot::backup_run(&ws, &["sync"], "the home's backup before the restore")?;
        step("home from a backup", &b);
        crate::snapshot::backup_run(
            &ws,
            &["restore", "--force", "--snapshot", &b],
            "the home's restore",
        )?;
    }
    say(
        common,
        "restored",
        json!({"sandbox": name, "snapshot": snapshot, "backup": backup}),
        &format!("{name} restored"),
    )?;
    ok()
}

/// The checks every start makes before anything is built or started, then
/// the start itself (`from`: a snapshot's image), undone if it fails.
fn start_checked(ws: Workspace, exists: bool, from: Option<&str>) -> Result<Workspace, BoxError> {
    // A login near its end is refreshed on the host first (not for
    // show-run, which only looks).
    crate::loginrefresh::at_start(&ws).map_err(RunError::LoginRefresh)?;
    // A secret that does not resolve refuses the start, naming its key.
    let secrets = secrets_for(&ws)?;
    // A workspace the agent could not write is refused; the idmapped view
    // is made now and lives as long as the sandbox is started.
    crate::branch::precheck(&ws)?;
    // A masked file whose blobs git holds would be read through git.
    crate::gitsecrets::check(&ws)?;
    // The hooks verify-commits will trust, as they are before the agent runs.
    crate::verify::record::record_at_start(&ws.path, &ws.names.hash);
    workspace::prepare_mount(&ws)?;
    let started = start_stopped(&ws, exists, from, &secrets);
    if started.is_err() {
        workspace::release_mount(&ws.names.container);
        release_git(&ws);
    }
    started.map(|()| ws)
}

/// `[secrets]` resolved on the host. They are injected by the proxy, so
/// without proxy mode there is nothing that could use them: refused.
pub fn secrets_for(ws: &Workspace) -> Result<Vec<sbx_core::secrets::Binding>, BoxError> {
    let cfg = &ws.loaded.config;
    // [network.rules] are judged by the proxy too: in address mode
    // nothing would judge them.
    if !cfg.network.rules.is_empty()
        && (cfg.network.mode != sbx_core::config::NetMode::Proxy || cfg.network.allow_external)
    {
        return Err(Box::new(RunError::Config(format!(
            "{}: [network.rules] are enforced by sbx-fw's proxy: set [network] mode = \"proxy\" (and allow-external = false), or remove them",
            ws.loaded.describe()
        ))));
    }
    if cfg.secrets.is_empty() {
        return Ok(Vec::new());
    }
    if cfg.network.mode != sbx_core::config::NetMode::Proxy || cfg.network.allow_external {
        return Err(Box::new(RunError::Config(format!(
            "{}: [secrets] are injected by sbx-fw's proxy: set [network] mode = \"proxy\" (the default; and allow-external = false), or remove [secrets]",
            ws.loaded.describe()
        ))));
    }
    sbx_core::secrets::resolve(&cfg.secrets, |k| std::env::var(k).ok())
        .map_err(|e| Box::new(e) as BoxError)
}

/// Whether the proxy ends TLS for some host ([secrets] or
/// [network.rules]): the tests' upstream root goes with the handoff then.
fn ends_tls(ws: &Workspace) -> bool {
    let c = &ws.loaded.config;
    !c.secrets.is_empty() || !c.network.rules.is_empty()
}

/// `from`: a snapshot's image instead of the per-repo one (nothing built).
fn start_stopped(
    ws: &Workspace,
    exists: bool,
    from: Option<&str>,
    secrets: &[sbx_core::secrets::Binding],
) -> Result<(), BoxError> {
    let name = ws.names.container.clone();
    // Then every other lookup at once (each is a request to the engine).
    let n = &ws.names;
    let (holder, image, network, volumes) = std::thread::scope(|s| {
        let image = s.spawn(|| match from {
            Some(_) => Ok(None),
            None => image::repo_rebuild(ws),
        });
        let network = s.spawn(|| docker::exists("network", &n.network));
        let volumes: Vec<_> = spec::workspace_volumes(n)
            .into_iter()
            .map(|v| s.spawn(move || docker::exists("volume", &v)))
            .collect();
        let holder = owned(ws, &n.holder);
        (
            holder,
            image.join().expect("inspection thread"),
            network.join().expect("inspection thread"),
            volumes
                .into_iter()
                .map(|h| h.join().expect("inspection thread"))
                .collect::<Vec<_>>(),
        )
    });
    let holder = holder?;
    if exists {
        if let Some(h) = &holder {
            if !running(h) {
                docker::start(&n.holder)?;
            }
            sync_login(ws);
            place_login(ws)?;
            spec::make_parents(ws)?;
            hold_git(ws)?;
            spec::ensure_host_dir(&name)?;
            spec::stage_secrets(&name, secrets, ends_tls(ws))?;
            crate::ssh::stage(ws, &name)?;
            crate::toolpolicy::install(ws, &name)?;
            // The container binds the staged copies: mount them anew, by fd.
            let masks = spec::mask_sources()?;
            let s = spec::build(ws, &ws.names.image, &[], (&masks.0, &masks.1), false)?;
            crate::hostpath::stage(&name, &s.staged)?;
            // docker resolves the sources' names again at every start.
            let held = crate::hostpath::identify(&s.bound)?;
            let since = logs_since_now();
            docker::start(&name)?;
            let holds = match wait_held(&name, &since) {
                Ok(h) => h,
                Err(e) => {
                    let e = crate::branch::start_failure(&name, e);
                    // Back to stopped, as it was before this start.
                    let _ = docker::probe(&["stop", "--time", "1", &name]);
                    return Err(e);
                }
            };
            // Made before the guest held the agent for the check: its
            // agent already runs, unchecked; made anew below.
            let checked = if holds {
                crate::hostpath::verify(&name, &held)
            } else {
                Err(RunError::Swapped(String::new()))
            };
            match checked {
                // Back to stopped, as it was before this start.
                Ok(()) => return release(&name, &since, &["stop", "--time", "1", &name]),
                // Made under another set of mounts (a protected path that
                // docker created since, a new pin): made anew below, where
                // a swap is refused for good.
                Err(RunError::Swapped(_)) => {
                    output::progress(&format!(
                        "{name}: its mounts changed since it was made: making it anew"
                    ));
                    docker::remove(&["rm", "--force", &name])?;
                }
                Err(e) => {
                    let _ = docker::probe(&["rm", "--force", &name]);
                    return Err(e.into());
                }
            }
        } else {
            // Its network namespace went with the holder: make both anew.
            docker::remove(&["rm", "--force", &name])?;
        }
    }
    if let Some((opts, why)) = image? {
        if !why.is_empty() {
            output::progress(&format!("{} is stale ({why}): rebuilding it", n.image));
        }
        image::build_repo(ws, &opts)?;
    }
    let masks = spec::mask_sources()?;
    let env = spec::env_names(ws, std::env::vars_os());
    let mut s = spec::build(
        ws,
        from.unwrap_or(&ws.names.image),
        &env,
        (&masks.0, &masks.1),
        false,
    )?;
    if let Some(snap) = from {
        let layers = crate::snapshot::own_layers(snap, &ws.names.image)?;
        spec::from_snapshot(&mut s.run, &layers);
    }
    if !network? {
        docker::output(&s.network.iter().map(String::as_str).collect::<Vec<_>>())?;
    }
    for (v, exists) in s.volumes.iter().zip(volumes) {
        if !exists? {
            docker::create_volume(&v.iter().map(String::as_str).collect::<Vec<_>>())?;
        }
    }
    // The holder is kept while its spec (ports, image, bridge) is current.
    match &holder {
        Some(h) if label(h, LABEL_SPEC) == s.holder_spec => {
            if !running(h) {
                docker::start(&n.holder)?;
            }
        }
        stale => {
            if stale.is_some() {
                docker::remove(&["rm", "--force", &n.holder])?;
            }
            let argv: Vec<&str> = s.holder.iter().map(String::as_str).collect();
            if let Err(e) = docker::run_detached(&argv) {
                let _ = docker::probe(&["rm", "--force", &n.holder]);
                return Err(e.into());
            }
        }
    }
    spec::make_parents(ws)?;
    hold_git(ws)?;
    spec::ensure_host_dir(&name)?;
    spec::stage_secrets(&name, secrets, ends_tls(ws))?;
    crate::ssh::stage(ws, &name)?;
    crate::toolpolicy::install(ws, &name)?;
    crate::hostpath::stage(&name, &s.staged)?;
    let held = crate::hostpath::identify(&s.bound)?;
    let since = logs_since_now();
    let run = docker::run_detached(&s.run.iter().map(String::as_str).collect::<Vec<_>>());
    if crate::tools::interrupted() || run.is_err() {
        // No half state: a container that did not start cleanly is removed.
        let _ = docker::probe(&["rm", "--force", &name]);
        run?;
        return Err(RunError::Interrupted.into());
    }
    // After the container is made: Docker has given a fresh ~/.claude
    // volume the image's ownership, which copied files then take.
    sync_login(ws);
    if let Err(e) = place_login(ws) {
        let _ = docker::probe(&["rm", "--force", &name]);
        return Err(e.into());
    }
    let holds = match wait_held(&name, &since) {
        Ok(h) => h,
        Err(e) => {
            let e = crate::branch::start_failure(&name, older_guest(from, e));
            let _ = docker::probe(&["rm", "--force", &name]);
            return Err(e);
        }
    };
    if !holds {
        // Fail closed: its agent started before any check.
        let _ = docker::probe(&["rm", "--force", &name]);
        return Err(RunError::NotReady(format!(
            "{}: its guest started the agent without waiting for the mount check (an image older than this sbx-run): rebuild it with `sbx-run build-base`",
            ws.names.image
        ))
        .into());
    }
    check_binds(&name, &held)?;
    release(&name, &since, &["rm", "--force", &name])
}

/// A snapshot whose guest predates the start-time cleanup refuses its
/// flag (clap's "unexpected argument"): said so, with what to do.
fn older_guest(from: Option<&str>, e: RunError) -> RunError {
    match (from, e) {
        (Some(image), RunError::NotReady(m)) if m.contains(spec::FROM_SNAPSHOT) => {
            RunError::NotReady(format!(
                "{image}: its sbx-guest is older than this sbx-run and cannot clean a snapshot at start ({m}): snapshot a sandbox of a rebuilt image (`sbx-run build-base`, `sbx-run start --build`) instead"
            ))
        }
        (_, e) => e,
    }
}

/// The mounts are checked: let the guest start the agent's processes,
/// then wait for its ready line (or its unhealthy one, which says why
/// they did not start). On failure `undo` (docker's arguments) runs.
fn release(name: &str, since: &str, undo: &[&str]) -> Result<(), BoxError> {
    let released = crate::hostpath::release_guest(name);
    if let Err(e) = wait_ready(name, since).and(released) {
        let _ = docker::probe(undo);
        return Err(crate::branch::start_failure(name, e));
    }
    // What the guest warns of at the start (a home that was not restored
    // from its backup, backups paused, a full home) is said here, not
    // only in the container's log (issue 43).
    if let Some(st) = read_status(name) {
        for w in st["warnings"].as_array().into_iter().flatten() {
            if let Some(w) = w.as_str() {
                output::warn(w);
            }
        }
    }
    Ok(())
}

/// What the started sandbox shows at each bind target must be what was
/// opened on the host (hostpath::verify); if not, or if it cannot be
/// asked, the container goes, and the refusal is audited.
fn check_binds(name: &str, held: &crate::hostpath::Held) -> Result<(), BoxError> {
    let Err(e) = crate::hostpath::verify(name, held) else {
        return Ok(());
    };
    let _ = docker::probe(&["rm", "--force", name]);
    if let RunError::Swapped(path) = &e {
        audit::append(
            &Record::new("sbx-run", "start", path, Outcome::Blocked, "bind-source")
                .reason("a bind source was not what docker mounted"),
        );
    }
    Err(e.into())
}

fn logs_since_now() -> String {
    humantime_rfc3339(std::time::SystemTime::now())
}

fn humantime_rfc3339(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // docker logs --since takes a Unix timestamp too.
    secs.saturating_sub(1).to_string()
}

/// What sbx-guest prints when the agent's command has started, and when
/// the start failed closed (egress blocked, the agent never started).
const READY: &str = "sbx-guest: ready";
const UNHEALTHY: &str = "sbx-guest: unhealthy:";
const HELD: &str = sbx_core::guestapi::HELD_LINE;

/// The guest's reason, from the status file it keeps in the host directory.
fn unhealthy_reason(name: &str) -> String {
    match read_status(name) {
        Some(st) => format!(
            "unhealthy: {}",
            st["reason"].as_str().unwrap_or("no reason given")
        ),
        None => "unhealthy (no status file; see `docker logs`)".into(),
    }
}

/// The guest's status.json of sandbox `name`, if it wrote one.
pub fn read_status(name: &str) -> Option<Value> {
    let p = spec::host_dir(name).join("status.json");
    serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok()
}

/// Where the sandbox works: a branch sandbox's worktree (its guest moves
/// there once it is provisioned; docker's workdir is the shelf, which
/// docker would otherwise make, root's, before the guest ran), else
/// docker's workdir.
fn workdir_of(c: &Value) -> String {
    let branch = label(c, LABEL_BRANCH);
    if matches!(label(c, LABEL_MODE), "branch" | "clone") && !branch.is_empty() {
        return crate::branch::worktree_dir(branch);
    }
    c.pointer("/Config/WorkingDir")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// Follow the container's log until its guest says it is ready; a
/// container that exits first is reported with its last lines.
fn wait_ready(name: &str, since: &str) -> Result<(), RunError> {
    wait_line(name, since, false).map(|_| ())
}

/// Follow the container's log until its guest says it holds the agent for
/// the mount check (true) or, a guest that does not hold, that it is
/// ready (false).
fn wait_held(name: &str, since: &str) -> Result<bool, RunError> {
    wait_line(name, since, true)
}

fn wait_line(name: &str, since: &str, held_too: bool) -> Result<bool, RunError> {
    let needles: &[&str] = if held_too {
        &[READY, UNHEALTHY, HELD]
    } else {
        &[READY, UNHEALTHY]
    };
    match docker::follow_logs_for(name, since, needles, Duration::from_secs(120)) {
        Some(Ok(Some(0))) => return Ok(false),
        Some(Ok(Some(2))) => return Ok(true),
        Some(Ok(Some(_))) => return Err(RunError::NotReady(unhealthy_reason(name))),
        Some(Ok(None)) => {} // ended: let the CLI path below report the last lines
        Some(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {
            return Err(RunError::Interrupted);
        }
        Some(Err(e)) => return Err(RunError::NotReady(e.to_string())),
        None => {}
    }
    let mut child = docker::cmd()
        .args(["logs", "--follow", "--since", since, name])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RunError::NotReady(e.to_string()))?;
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tail: Vec<String> = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains(READY) {
                let _ = tx.send(Ok(false));
                return;
            }
            if held_too && line.contains(HELD) {
                let _ = tx.send(Ok(true));
                return;
            }
            if let Some(i) = line.find(UNHEALTHY) {
                let _ = tx.send(Err(line[i..].trim_start_matches("sbx-guest: ").to_owned()));
                return;
            }
            tail.push(line);
            if tail.len() > 5 {
                tail.remove(0);
            }
        }
        let _ = tx.send(Err(tail.join(" | ")));
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let result = loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(r) => break r,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if crate::tools::interrupted() {
                    break Err("interrupted".into());
                }
                if Instant::now() > deadline {
                    break Err("no ready line within 120 s".into());
                }
            }
            Err(_) => break Err("log stream ended".into()),
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    result.map_err(|tail| {
        RunError::NotReady(if tail.is_empty() {
            "the container exited during init".into()
        } else {
            tail
        })
    })
}

/// The machine's AI CLI logins to and from this workspace (login.rs). A
/// failure costs a login, not a guard: warned, not fatal.
fn sync_login(ws: &Workspace) {
    let keep_out = crate::login::kept_out(&ws.loaded.config.secrets);
    match crate::login::sync(&ws.names, &ws.names.image, keep_out) {
        Ok(out) => {
            for l in out.lines() {
                output::info(&format!("login: {l}"));
            }
        }
        Err(e) => output::warn(&format!("AI CLI logins not synced: {e}")),
    }
}

/// A `[secrets]` `claude-login:` entry's placeholder login into the
/// workspace's ~/.claude (login.rs): not done, the sandbox could hold the
/// store's real login, so the start fails.
fn place_login(ws: &Workspace) -> Result<(), RunError> {
    for (name, s) in &ws.loaded.config.secrets {
        let text = sbx_core::secrets::sandbox_login(name, s)
            .map_err(|e| RunError::Config(e.to_string()))?;
        if let Some(text) = text {
            crate::login::place_claude(&ws.names, &ws.names.image, &text).map_err(|e| {
                RunError::Build(format!(
                    "[secrets] {name}: the sandbox's placeholder login: {e}"
                ))
            })?;
        }
    }
    Ok(())
}

/// Hold the checkout's pinned `.git` files on the host too, while a
/// sandbox runs (gitpins.rs): the host's git renaming over one would lift
/// the sandbox's read-only mount. Not under read-only: nothing is writable.
fn hold_git(ws: &Workspace) -> Result<(), RunError> {
    // Opt-in for now: a host mount over .git/config also stops the user's
    // own `git config`, `rm -rf` and `chown -R` of the checkout while a
    // sandbox runs (docs/security.md, "the host boundary for .git").
    // Clone mode mounts the checkout read-only whole: nothing to hold.
    if ws.loaded.config.read_only()
        || ws.clone_mode()
        || std::env::var_os("SBX_HOLD_GIT_ON_HOST").is_none()
    {
        return Ok(());
    }
    crate::gitpins::hold_on_host(&ws.path)
}

/// Lift `hold_git` once no sandbox of the workspace runs (bind and branch
/// sandboxes share the checkout); when docker cannot say, keep it.
fn release_git(ws: &Workspace) {
    let filter = format!("label={LABEL_WORKSPACE}={}", ws.path.to_string_lossy());
    // Each running container's role: the network holders (role netns)
    // outlive their sandboxes and mount nothing.
    let format = format!("{{{{.Label \"{LABEL_ROLE}\"}}}}.");
    let roles = docker::output(&["ps", "--filter", &filter, "--format", &format]);
    if roles.is_ok_and(|o| o.lines().all(|l| l == "netns.")) {
        crate::gitpins::release_on_host(&ws.path);
    }
}

/// `sbx-run login`: the machine's store written by a login the user
/// starts, or (--share) from this workspace on the user's word (login.rs).
pub fn login(common: &CommonArgs, cli: &str, share: bool, path: Option<PathBuf>) -> Res {
    let c = crate::login::CLIS
        .iter()
        .find(|c| c.name == cli)
        .ok_or_else(|| RunError::Usage(format!("--cli {cli}: give claude or codex")))?;
    if share {
        let ws = open_for_names(common, path)?;
        // Its login is placeholders, or whatever the agent wrote there (a
        // login of the agent's account, for every workspace): never shared.
        if crate::login::kept_out(&ws.loaded.config.secrets).contains(&c.name) {
            return Err(RunError::Usage(format!(
                "{}: its {cli} login is [secrets] claude-login: placeholders, or what its agent wrote: nothing to share (log in on the host, or with `sbx-run login`)",
                ws.path.display()
            ))
            .into());
        }
        docker::require_engine()?;
        if !docker::exists("image", &ws.names.image)? {
            return Err(RunError::Usage(format!(
                "{}: no sandbox was started here yet, so it has no login to share: `sbx-run start` it and log in inside first",
                ws.path.display()
            ))
            .into());
        }
        let out = crate::login::share(&ws.names, c, &ws.names.image)?;
        if out.trim().is_empty() {
            return Err(RunError::Usage(format!(
                "{}: its sandbox holds no {cli} login to share (log in inside it first)",
                ws.path.display()
            ))
            .into());
        }
        crate::tools::file_actions(common, &out)?;
        return ok();
    }
    docker::require_engine()?;
    let image = format!("{}:{}", crate::names::BASE_IMAGE, image::default_base_tag());
    if !docker::exists("image", &image)? {
        return Err(RunError::Usage(format!(
            "{image} is missing: run `sbx-run build-base` first"
        ))
        .into());
    }
    let status = crate::login::interactive(c, &image)?;
    Ok(ExitCode::from(status))
}

pub fn stop(common: &CommonArgs, path: Option<PathBuf>, branch: Option<&str>) -> Res {
    let ws = open_for_names(common, path)?.with_branch(branch);
    docker::require_engine()?;
    if check_owner(&ws)?.is_some() {
        docker::output(&["stop", "--time", spec::STOP_TIMEOUT, &ws.names.container])?;
        workspace::release_mount(&ws.names.container);
        release_git(&ws);
        if let Some(line) = unbacked_home(&ws) {
            output::warn(&line);
        }
    } else if !common.quiet {
        eprintln!("sbx-run: no sandbox container for {}", ws.path.display());
    }
    ok()
}

/// With backups on, after a stop: None when the stop's final backup
/// completed, else the one line saying what is in no backup (issue 43).
/// The guest records the outcome in its status file; no record (a guest
/// killed before it wrote one, an older guest) is not taken for done.
fn unbacked_home(ws: &Workspace) -> Option<String> {
    let n = &ws.names;
    let st = read_status(&n.container);
    let fb = st
        .as_ref()
        .and_then(|s| s.get("final_backup"))
        .and_then(|v| serde_json::from_value::<sbx_core::backup::FinalBackup>(v.clone()).ok());
    match fb {
        Some(fb) => fb.line(&n.home),
        None if ws.loaded.config.backup.url.is_some() => Some(format!(
            "the final backup's outcome is unknown (the sandbox's guest left no record of it): \
             what changed in the home since the last backup may be in none; the home volume {} still has it",
            n.home
        )),
        None => None,
    }
}

pub fn restart(common: &CommonArgs, path: Option<PathBuf>) -> Res {
    let ws = Workspace::open(common, path.clone())?;
    docker::require_engine()?;
    if check_owner(&ws)?.is_some() {
        docker::remove(&["rm", "--force", &ws.names.container])?;
    }
    start(common, path, None)?;
    ok()
}

/// Names only: stop/rm/volumes must work even when the config is broken.
fn open_for_names(common: &CommonArgs, path: Option<PathBuf>) -> Result<Workspace, BoxError> {
    match Workspace::open(common, path.clone()) {
        Ok(ws) => Ok(ws),
        Err(e) if e.exit() == Exit::Config => {
            let p = workspace::resolve(path)?;
            Ok(Workspace::with_config(
                p,
                sbx_core::config::Loaded {
                    config: Default::default(),
                    source: sbx_core::config::Source::Default,
                },
            ))
        }
        Err(e) => Err(e),
    }
}

/// The audit records' `agent` for what sbx-run starts: "shell" for the
/// interactive shell, else the program's name (claude, codex, …).
fn agent_name(shell: bool, command: &[OsString]) -> String {
    if shell {
        return "shell".into();
    }
    command
        .first()
        .and_then(|a| Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

pub fn shell(
    common: &CommonArgs,
    path: Option<PathBuf>,
    rebuild: bool,
    branch: Option<&str>,
) -> Res {
    let argv: Vec<OsString> = vec!["bash".into(), "-l".into()];
    if !rebuild {
        let ws = Workspace::open(common, path.clone())?.with_branch(branch);
        let _asks = crate::onblock::spawn(&ws);
        let _logins = crate::loginrefresh::spawn(&ws);
        if let Some(r) = via_guest(&ws, &argv, "shell")? {
            return Ok(r);
        }
    }
    let ws = start_in(
        common,
        path,
        rebuild.then(BuildOpts::default).as_ref(),
        branch,
    )?;
    let _asks = crate::onblock::spawn(&ws);
    let _logins = crate::loginrefresh::spawn(&ws);
    if let Some(r) = via_guest(&ws, &argv, "shell")? {
        return Ok(r);
    }
    Err(RunError::NoGuest(ws.names.container.clone()).into())
}

/// exec and shell: first straight to the guest's socket (no docker
/// command at all when the sandbox runs); else start it and try again; a
/// sandbox without the host API (an older base image) is refused: `docker
/// exec` would start the agent's process without the guest's seccomp filter.
pub fn exec(
    common: &CommonArgs,
    path: Option<PathBuf>,
    command: &[OsString],
    branch: Option<&str>,
) -> Res {
    let agent = agent_name(false, command);
    let ws = Workspace::open(common, path.clone())?.with_branch(branch);
    if let Some(r) = via_guest(&ws, command, &agent)? {
        return Ok(r);
    }
    let ws = start_in(common, path, None, branch)?;
    if let Some(r) = via_guest(&ws, command, &agent)? {
        return Ok(r);
    }
    Err(RunError::NoGuest(ws.names.container.clone()).into())
}

/// `sbx-run exec --root`: the user acting as the sandbox's root, through
/// the guest's socket only (never `docker exec`). The socket is the gate:
/// 0600 in a 0700 directory of the host user who owns the sandbox, and
/// root-only inside, where the agent has no root. One owned by someone
/// else is refused (77) and audited before anything is sent.
pub fn exec_root(
    common: &CommonArgs,
    path: Option<PathBuf>,
    command: &[OsString],
    branch: Option<&str>,
) -> Res {
    let ws = Workspace::open(common, path.clone())?.with_branch(branch);
    let ws = if guestexec_up(&ws) {
        ws
    } else {
        start_in(common, path, None, branch)?
    };
    let dir = spec::host_dir(&ws.names.container);
    crate::guestexec::owned_by_me(&dir).map_err(|why| {
        audit::append(
            &Record::new(
                "sbx-run",
                "exec-root",
                &ws.names.container,
                Outcome::Blocked,
                "exec-root",
            )
            .reason(&why),
        );
        RunError::Denied(format!(
            "exec --root: {why}: only the host user who owns the sandbox may act as its root"
        ))
    })?;
    match via_guest_as(&ws, command, "sbx-run", User::Root)? {
        Some(r) => Ok(r),
        None => Err(RunError::NoGuest(ws.names.container.clone()).into()),
    }
}

pub(crate) fn guestexec_up(ws: &Workspace) -> bool {
    crate::guestexec::connect(&crate::guestexec::socket_for(ws)).is_ok()
}

/// Ok(None): no guest listening, the caller falls back.
fn via_guest(ws: &Workspace, argv: &[OsString], agent: &str) -> Result<Option<ExitCode>, BoxError> {
    via_guest_as(ws, argv, agent, User::Agent)
}

fn via_guest_as(
    ws: &Workspace,
    argv: &[OsString],
    agent: &str,
    user: User,
) -> Result<Option<ExitCode>, BoxError> {
    use crate::guestexec::{self, GuestError};
    let sock = guestexec::socket_for(ws);
    let mut req = guestexec::exec_request(ws, argv, agent, guestexec::on_tty());
    req.user = user;
    match guestexec::run(&sock, req) {
        Ok(x) => Ok(Some(ExitCode::from(guestexec::status_of(&x)))),
        Err(GuestError::NoGuest(..)) => Ok(None),
        Err(e @ GuestError::Spawn(..)) => {
            output::error(&e.to_string());
            Ok(Some(ExitCode::from(e.status().clamp(0, 255) as u8)))
        }
        Err(e) => {
            output::error(&e.to_string());
            Ok(Some(ExitCode::from(e.status().clamp(0, 255) as u8)))
        }
    }
}

/// `sbx-run cp SRC DEST` through the guest (the sandbox must run).
pub fn cp(
    common: &CommonArgs,
    path: Option<PathBuf>,
    src: &OsString,
    dest: &OsString,
    follow: bool,
) -> Res {
    use crate::guestexec::{self, GuestError, Place};
    let (s, d) = (Place::parse(src), Place::parse(dest));
    let sandbox = |p: &Place| matches!(p, Place::Sandbox(_));
    if sandbox(&s) == sandbox(&d) {
        return Err(RunError::Usage(
            "cp: exactly one side must be in the sandbox, written :PATH (e.g. `sbx-run cp out.txt :/tmp/`, `sbx-run cp :/workspace/app/dist -`)".into(),
        )
        .into());
    }
    let ws = Workspace::open(common, path.clone())?;
    let mut sock = guestexec::socket_for(&ws);
    if guestexec::connect(&sock).is_err() {
        let ws = start(common, path, None)?;
        sock = guestexec::socket_for(&ws);
    }
    match guestexec::cp(&sock, &s, &d, follow) {
        Ok(o) if o.refused.is_empty() => ok(),
        Ok(o) => {
            // Agent-made names: shown escaped, one line each.
            for r in &o.refused {
                output::error(&format!("cp: {}", sbx_core::sanitize::field(r)));
            }
            output::error(&format!(
                "cp: {} entries not copied (the rest is): copy them inside the sandbox first, or leave them out",
                o.refused.len()
            ));
            Ok(ExitCode::from(77))
        }
        Err(GuestError::NoGuest(p, e)) => Err(RunError::Usage(format!(
            "cp needs the sandbox's guest API ({}: {e}): rebuild the base image (`sbx-run build-base`) and `sbx-run restart`",
            p.display()
        ))
        .into()),
        Err(e) => {
            output::error(&e.to_string());
            Ok(ExitCode::from(match &e {
                GuestError::Proto(sbx_core::guestapi::ProtoError::Remote(m))
                    if m.kind == "not-found" =>
                {
                    66
                }
                GuestError::Proto(sbx_core::guestapi::ProtoError::Remote(m))
                    if m.kind == "escape" || m.kind == "denied" =>
                {
                    77
                }
                GuestError::Refused(_) => 77,
                _ => 74,
            }))
        }
    }
}

pub fn show_run(common: &CommonArgs, path: Option<PathBuf>, branch: Option<&str>) -> Res {
    let ws = Workspace::open(common, path)?.with_branch(branch);
    // Refused as `start` refuses them (the values are not shown).
    secrets_for(&ws)?;
    let masks = spec::mask_sources()?;
    let env = spec::env_names(&ws, std::env::vars_os());
    let s = spec::build(&ws, &ws.names.image, &env, (&masks.0, &masks.1), true)?;
    let mut out = std::io::stdout().lock();
    if common.json {
        return show_run_json(&mut out, &ws, &s);
    }
    let net = spec::shell_line(&s.network);
    let scratch = workspace::scratch_root(&ws.names.hash);
    let idmap = if ws.idmapped() {
        format!(
            "# workspace owner {}:{}: docker binds its idmapped views {} and {} (of {}; owner <-> agent uid {}), which sbx-run start makes\n",
            ws.owner.0,
            ws.owner.1,
            ws.mount_source().display(),
            ws.scratch_source().display(),
            scratch.display(),
            workspace::AGENT_ID
        )
    } else {
        let q = shlex::try_quote(&scratch.to_string_lossy())
            .map(|q| q.into_owned())
            .unwrap_or_default();
        format!("mkdir -p {q} && chown {}:{} {q}\n", ws.owner.0, ws.owner.1)
    };
    let provision = match &ws.branch {
        Some(b) => format!(
            "# branch {b:?}: sbx-guest provisions {} at the start (SBX_BRANCH; sbx-worktree as the agent) and pins the host's hooks and protected paths over the shelf's; `sbx-run checkout` runs instead:\n# {}\n",
            ws.workdir(),
            spec::shell_line(&crate::branch::provision_args(
                &ws,
                b,
                &ws.mount_source().join(".git")
            )),
        ),
        None => String::new(),
    };
    let text = format!(
        "# sbx-run show-run {}\n# config: {}\n{idmap}{provision}{}\n# guest API: {sock} (host) = /run/sbx/host/{sockname} (sandbox; root-only: /run/sbx is 0700)\n{managed}mkdir -p {hostdir} && chmod 0777 {hostdir}\n{docker} network inspect {} >/dev/null 2>&1 || {net} >/dev/null\n{}\n{docker} start {} >/dev/null 2>&1 || {} >/dev/null\n{}\n",
        ws.path.display(),
        ws.loaded.describe(),
        spec::masked_comment(&s.masked),
        ws.names.network,
        s.volumes
            .iter()
            .map(|v| format!("{} >/dev/null", spec::shell_line(v)))
            .collect::<Vec<_>>()
            .join("\n"),
        ws.names.holder,
        spec::shell_line(&s.holder),
        spec::shell_line(&s.run),
        docker = docker::program().to_string_lossy(),
        managed = crate::toolpolicy::show(&ws, &ws.names.container),
        sock = crate::guestexec::socket_for(&ws).display(),
        sockname = sbx_core::guestapi::SOCKET_NAME,
        hostdir = shlex::try_quote(&spec::host_dir(&ws.names.container).to_string_lossy())
            .map(|q| q.into_owned())
            .unwrap_or_default(),
    );
    out.write_all(text.as_bytes())
        .map_err(|e| RunError::Io("stdout".into(), e))?;
    ok()
}

/// The manifests `show-run --format k8s|pod|k8s-template` prints, with
/// the workspace, branch and options they were made from: one builder for
/// the CLI and sbx-server's Kubernetes backend.
pub fn k8s_render(
    common: &CommonArgs,
    path: Option<PathBuf>,
    branch: Option<&str>,
    format: crate::k8s::Format,
    repo: Option<String>,
    image: Option<String>,
) -> Result<(Workspace, String, crate::k8s::Options, Vec<Value>), BoxError> {
    use crate::k8s;
    let ws = Workspace::open(common, path)?;
    // Before anything else: a refused key is the answer whatever the rest.
    k8s::refuse(&ws)?;
    let repo = repo.filter(|r| !r.is_empty()).ok_or_else(|| {
        RunError::Usage(
            "show-run --format k8s: give --repo URL, the repository the cluster clones (a cluster has no host checkout to bind)".into(),
        )
    })?;
    // A password or token in the URL would be printed into the manifests
    // (and the pod's spec, which anyone who can read pods reads).
    if let Some((_, rest)) = repo.split_once("://")
        && let Some((userinfo, _)) = rest.split('/').next().unwrap_or("").rsplit_once('@')
        && userinfo.contains(':')
    {
        return Err(RunError::Usage(
            "show-run: --repo has a password or token in it, which would be printed into the manifests: give the URL without it (the cluster's git credentials go in a Secret)".into(),
        )
        .into());
    }
    let branch = match branch {
        Some(b) => b.to_owned(),
        None => workspace::host_branch(&ws.path).ok_or_else(|| {
            RunError::Usage(format!(
                "{}: the checkout is on no branch (a detached HEAD): give --branch B",
                ws.path.display()
            ))
        })?,
    };
    let ws = ws.with_branch(Some(&branch));
    let masks = spec::mask_sources()?;
    let s = spec::build(&ws, &ws.names.image, &[], (&masks.0, &masks.1), true)?;
    let o = k8s::Options {
        format,
        repo,
        image: image.unwrap_or_else(|| ws.names.image.clone()),
    };
    let docs = k8s::manifests(&ws, &s, (&masks.0, &masks.1), &o)?;
    Ok((ws, branch, o, docs))
}

/// `show-run --format k8s|pod|k8s-template`: the manifests k8s.rs
/// translates from the same spec `start` runs. Branch mode always: the
/// pod clones the repository and the guest provisions the branch's
/// worktree on the shelf. No host variable crosses: a cluster's pod is
/// not started from this environment.
pub fn show_k8s(
    common: &CommonArgs,
    path: Option<PathBuf>,
    branch: Option<&str>,
    format: crate::ShowFormat,
    repo: Option<String>,
    image: Option<String>,
) -> Res {
    let (ws, branch, o, docs) = k8s_render(
        common,
        path,
        branch,
        match format {
            crate::ShowFormat::Pod => crate::k8s::Format::Pod,
            crate::ShowFormat::K8sTemplate => crate::k8s::Format::Template,
            _ => crate::k8s::Format::Sandbox,
        },
        repo,
        image,
    )?;
    let mut out = std::io::stdout().lock();
    let r = if common.json {
        output::json_line(
            &mut out,
            "show-run",
            &json!({
                "workspace": path_value(&ws.path),
                "config": ws.loaded.describe(),
                "branch": branch,
                "format": clap::ValueEnum::to_possible_value(&format)
                    .map(|v| v.get_name().to_owned()),
                "manifests": docs,
            }),
        )
    } else {
        out.write_all(
            format!(
                "# sbx-run show-run --format {} {}\n# config: {}\n# branch {branch:?}, cloned from {} (kubectl apply -f -)\n{}",
                match format {
                    crate::ShowFormat::Pod => "pod",
                    crate::ShowFormat::K8sTemplate => "k8s-template",
                    _ => "k8s",
                },
                sbx_core::sanitize::field(&ws.path.to_string_lossy()),
                sbx_core::sanitize::field(&ws.loaded.describe()),
                sbx_core::sanitize::field(&o.repo),
                crate::k8s::yaml(&docs)
            )
            .as_bytes(),
        )
    };
    r.map_err(|e| RunError::Io("stdout".into(), e))?;
    ok()
}

/// `sbx-run volume`: the machine's Claude Code login store. In `--json`
/// the same shape as a `volumes` line; it is mounted nowhere (no target).
pub fn volume(common: &CommonArgs) -> Res {
    let name = crate::names::claude_store();
    let mut out = std::io::stdout().lock();
    let r = if common.json {
        output::json_line(
            &mut out,
            "volume",
            &json!({"name": name, "target": null, "scope": "machine"}),
        )
    } else {
        writeln!(out, "{name}")
    };
    r.map_err(|e| RunError::Io("stdout".into(), e))?;
    ok()
}

/// show-run's `--json`: one document with the same facts as the text, the
/// docker commands as argument vectors (program first) rather than shell.
fn show_run_json(out: &mut impl Write, ws: &Workspace, s: &spec::Spec) -> Res {
    let path = path_value;
    let argv = |a: &[String]| {
        let mut v = vec![docker::program().to_string_lossy().into_owned()];
        v.extend(a.iter().cloned());
        v
    };
    let managed: Vec<Value> = crate::toolpolicy::files(ws)
        .into_iter()
        .filter_map(|((_, name, target), text)| {
            Some(json!({"path": format!("{target}/{name}"), "text": text?}))
        })
        .collect();
    let data = json!({
        "workspace": path(&ws.path),
        "config": ws.loaded.describe(),
        "branch": ws.branch,
        "workdir": ws.workdir(),
        "container": ws.names.container,
        "image": ws.names.image,
        "network": ws.names.network,
        "holder": ws.names.holder,
        "masked": s.masked,
        "pinned": s.pinned,
        "scratch": path(&workspace::scratch_root(&ws.names.hash)),
        "host_dir": path(&spec::host_dir(&ws.names.container)),
        "guest_socket": path(&crate::guestexec::socket_for(ws)),
        "managed": managed,
        "commands": {
            "network": argv(&s.network),
            "volumes": s.volumes.iter().map(|v| argv(v)).collect::<Vec<_>>(),
            "holder": argv(&s.holder),
            "run": argv(&s.run),
        },
    });
    output::json_line(out, "show-run", &data).map_err(|e| RunError::Io("stdout".into(), e))?;
    ok()
}

pub fn volumes(common: &CommonArgs, path: Option<PathBuf>) -> Res {
    let ws = open_for_names(common, path)?;
    let n = &ws.names;
    let list = [
        (n.claude.as_str(), "/home/agent/.claude", "workspace"),
        (n.codex.as_str(), "/home/agent/.codex", "workspace"),
        (n.history.as_str(), "/commandhistory", "workspace"),
        (n.git_record.as_str(), spec::GIT_RECORD_DIR, "workspace"),
        (n.repo_shelf.as_str(), "/repo-shelf", "workspace"),
        (n.home.as_str(), "/home/agent", "sandbox"),
    ];
    let mut out = std::io::stdout().lock();
    for (name, target, scope) in list {
        let r = if common.json {
            output::json_line(
                &mut out,
                "volume",
                &json!({"name": name, "target": target, "scope": scope}),
            )
        } else {
            writeln!(out, "{name}\t{target}\t{scope}")
        };
        r.map_err(|e| RunError::Io("stdout".into(), e))?;
    }
    ok()
}

/// Every object of `kind` carrying the sbx.workspace label, inspected.
fn labelled(kind: &str) -> Result<Vec<Value>, RunError> {
    let ids = match kind {
        "container" => docker::output(&[
            "ps",
            "--all",
            "--quiet",
            "--no-trunc",
            "--filter",
            "label=sbx.workspace",
        ])?,
        "network" => docker::output(&[
            "network",
            "ls",
            "--quiet",
            "--filter",
            "label=sbx.workspace",
        ])?,
        _ => docker::output(&["volume", "ls", "--quiet", "--filter", "label=sbx.workspace"])?,
    };
    docker::inspect_all(kind, &ids.split_whitespace().collect::<Vec<_>>())
}

fn label<'a>(v: &'a Value, key: &str) -> &'a str {
    v.pointer("/Config/Labels")
        .or_else(|| v.get("Labels"))
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The named volumes a container mounts, as `{name, target}`, by target.
fn mapped_volumes(c: &Value) -> Vec<Value> {
    let mut v: Vec<Value> = c["Mounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["Type"] == "volume")
        .map(|m| json!({"name": m["Name"], "target": m["Destination"]}))
        .collect();
    v.sort_by(|a, b| a["target"].as_str().cmp(&b["target"].as_str()));
    v
}

pub fn list(common: &CommonArgs) -> Res {
    docker::require_engine()?;
    let mut out = std::io::stdout().lock();
    let containers = labelled("container")?;
    if !common.json && !common.quiet {
        writeln!(
            out,
            "NAME\tSTATUS\tHEALTH\tMODE\tWORKDIR\tVOLUMES\tBRANCH\tWORKSPACE"
        )
        .map_err(|e| RunError::Io("stdout".into(), e))?;
    }
    for c in containers
        .iter()
        .filter(|c| label(c, LABEL_ROLE).is_empty())
    {
        let name = c["Name"].as_str().unwrap_or("").trim_start_matches('/');
        let (health, reason) = health_of(name, c);
        let data = json!({
            "name": name,
            "status": c.pointer("/State/Status").and_then(Value::as_str).unwrap_or(""),
            "health": health,
            "reason": reason,
            "mode": label(c, LABEL_MODE),
            "branch": label(c, LABEL_BRANCH),
            "workspace": label(c, LABEL_WORKSPACE),
            "hash": label(c, LABEL_HASH),
            "image": c.pointer("/Config/Image").and_then(Value::as_str).unwrap_or(""),
            "workdir": workdir_of(c),
            "volumes": mapped_volumes(c),
        });
        let r = if common.json {
            output::json_line(&mut out, "sandbox", &data)
        } else {
            let health = match data["reason"].as_str() {
                Some(r) if health == "stopped" => format!("stopped ({r})"),
                Some(r) => format!("{health}: {r}"),
                None => health.to_owned(),
            };
            let vols: Vec<String> = mapped_volumes(c)
                .iter()
                .map(|v| {
                    format!(
                        "{}:{}",
                        v["name"].as_str().unwrap_or(""),
                        v["target"].as_str().unwrap_or("")
                    )
                })
                .collect();
            // Labels, branch names and the guest's health reason are not
            // ours to trust on a terminal: each field escaped.
            let f =
                |k: &str| sbx_core::sanitize::field(data[k].as_str().unwrap_or("")).into_owned();
            writeln!(
                out,
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                f("name"),
                f("status"),
                sbx_core::sanitize::field(&health),
                f("mode"),
                f("workdir"),
                sbx_core::sanitize::field(&vols.join(",")),
                f("branch"),
                f("workspace")
            )
        };
        r.map_err(|e| RunError::Io("stdout".into(), e))?;
    }
    ok()
}

/// A running sandbox's health from its guest's status file (immediate),
/// else Docker's healthcheck; "-" when it is not running.
fn health_of(name: &str, c: &Value) -> (&'static str, Option<String>) {
    if !running(c) {
        // The guest's own stop (`[lifecycle] idle-stop`) says why and when.
        return match read_status(name) {
            Some(st) if st["state"] == "stopped" => (
                "stopped",
                Some(format!(
                    "{} since {}",
                    st["reason"].as_str().unwrap_or("by its guest"),
                    st["since"].as_str().unwrap_or("?")
                )),
            ),
            _ => ("-", None),
        };
    }
    if let Some(st) = read_status(name) {
        let reason = st["reason"].as_str().map(str::to_owned);
        return match st["state"].as_str() {
            Some("ready") => {
                let w: Vec<&str> = st["warnings"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                ("healthy", (!w.is_empty()).then(|| w.join("; ")))
            }
            Some("unhealthy") => ("unhealthy", reason),
            Some("stopping") => ("stopping", None),
            _ => ("starting", None),
        };
    }
    match c.pointer("/State/Health/Status").and_then(Value::as_str) {
        Some("healthy") => ("healthy", None),
        Some("unhealthy") => (
            "unhealthy",
            c.pointer("/State/Health/Log")
                .and_then(Value::as_array)
                .and_then(|l| l.last())
                .and_then(|e| e["Output"].as_str())
                .map(|s| s.trim().to_owned()),
        ),
        Some("starting") => ("starting", None),
        _ => (
            "unknown",
            Some("no guest status (an image without sbx-guest?)".into()),
        ),
    }
}

pub fn rm(
    common: &CommonArgs,
    path: Option<PathBuf>,
    with_volumes: bool,
    force: bool,
    branch: Option<&str>,
) -> Res {
    let ws = open_for_names(common, path)?.with_branch(branch);
    docker::require_engine()?;
    let n = &ws.names;
    // The workspace's shared volumes (history, shelf, logins) go only with
    // the last of its sandboxes: refuse before anything is removed.
    let volumes = if with_volumes {
        doomed_volumes(&ws, branch.is_some())?
    } else {
        Vec::new()
    };
    if volumes.contains(&n.home) && !force {
        home_is_backed_up(&ws)?;
    }
    if check_owner(&ws)?.is_some() {
        docker::remove(&["rm", "--force", &n.container])?;
    }
    workspace::release_mount(&n.container);
    release_git(&ws);
    // An empty scratch root goes with the sandbox; one holding a chat's
    // directory stays for that chat (prune --chats removes it).
    if ws.branch.is_none() {
        let _ = std::fs::remove_dir(workspace::scratch_root(&n.hash));
    }
    // The managed settings are written anew at each start.
    let managed = crate::toolpolicy::host_dir(&n.container);
    if managed.exists() {
        std::fs::remove_dir_all(&managed).map_err(|e| RunError::Io(managed.clone(), e))?;
    }
    if owned(&ws, &n.holder)?.is_some() {
        docker::remove(&["rm", "--force", &n.holder])?;
    }
    // By id: a network name can be ambiguous (the engine's duplicate check
    // races), and every copy of ours goes.
    for net in labelled("network")?.iter().filter(|v| {
        v["Name"] == n.network.as_str() && label(v, LABEL_WORKSPACE) == ws.path.to_string_lossy()
    }) {
        docker::remove(&["network", "rm", net["Id"].as_str().unwrap_or_default()])?;
    }
    if with_volumes {
        for v in &volumes {
            docker::remove(&["volume", "rm", v])?;
            crate::login::forget(v);
        }
        // The snapshots are the workspace's too: with its last sandbox.
        if ws.branch.is_none() {
            crate::snapshot::remove_all(&ws)?;
        }
        // The sandbox's ssh keys (kept by a plain rm, so an IDE's config
        // stays valid for the sandbox made again).
        let keys = crate::ssh::Keys::of(&n.container).dir;
        match std::fs::remove_dir_all(&keys) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(RunError::Io(keys, e).into());
            }
            _ => {}
        }
    }
    remove_repo_image(&n.image)?;
    ok()
}

/// Before `rm --volumes` takes a home volume: with backups on, its newest
/// state must be in a completed backup. A running sandbox is stopped the
/// way `stop` does (its final backup) rather than killed; then the stop's
/// record decides. A missing home volume has nothing to lose.
fn home_is_backed_up(ws: &Workspace) -> Result<(), RunError> {
    let n = &ws.names;
    if ws.loaded.config.backup.url.is_none() && read_status(&n.container).is_none() {
        return Ok(());
    }
    if !docker::exists("volume", &n.home)? {
        return Ok(());
    }
    if let Some(c) = check_owner(ws)?
        && running(&c)
    {
        if ws.loaded.config.backup.url.is_none() {
            return Ok(());
        }
        docker::output(&["stop", "--time", spec::STOP_TIMEOUT, &n.container])?;
    }
    match unbacked_home(ws) {
        None => Ok(()),
        Some(line) => Err(RunError::Usage(format!(
            "{line}; refusing to remove it: run the sandbox until a backup completes, or add --force to lose it"
        ))),
    }
}

/// The volumes `rm --volumes` takes. For a branch sandbox, its own home;
/// the workspace's shared ones stay with the others. Without `--branch`,
/// the workspace's volumes and every branch sandbox's home, refused while
/// a branch sandbox of the workspace exists (it holds the shared ones).
/// Clone mode's sandbox is the workspace's own: its `rm --volumes` without
/// `--branch` takes them all too.
fn doomed_volumes(ws: &Workspace, branch_given: bool) -> Result<Vec<String>, RunError> {
    let n = &ws.names;
    if branch_given {
        return Ok(vec![n.home.clone()]);
    }
    let mine = |v: &&Value| label(v, LABEL_WORKSPACE) == ws.path.to_string_lossy();
    let others: Vec<String> = labelled("container")?
        .iter()
        .filter(mine)
        .filter(|c| label(c, LABEL_MODE) == "branch")
        .map(|c| label(c, LABEL_BRANCH).to_owned())
        .collect();
    if !others.is_empty() {
        return Err(RunError::Usage(format!(
            "--volumes: branch sandboxes of {} still hold the shared volumes ({}): \
             remove them first (`sbx-run rm --volumes --branch B`), or leave out --volumes",
            ws.path.display(),
            others.join(", ")
        )));
    }
    let mut out = spec::workspace_volumes(n);
    for v in labelled("volume")?.iter().filter(mine) {
        let name = v["Name"].as_str().unwrap_or_default();
        if !name.is_empty() && !out.iter().any(|o| o == name) {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

/// Remove a per-repo image: it is the base plus the repository's
/// Dockerfile, rebuilt by the next start, and one per workspace piles up.
/// Kept while a container uses it (another branch's sandbox). Never a
/// base image. True when removed. Its untagged parents stay
/// (`--no-prune`): they are the build cache every other workspace's image
/// shares, and removing them under a build that is using them fails that
/// build ("failed to get digest").
fn remove_repo_image(image: &str) -> Result<bool, RunError> {
    let repo = image.split(':').next().unwrap_or(image);
    if repo == BASE_IMAGE || !repo.starts_with("agent-sandbox-") {
        return Ok(false);
    }
    let args = ["image", "rm", "--no-prune", image];
    let out = docker::probe(&args)?;
    if out.status.success() {
        return Ok(true);
    }
    let err = String::from_utf8_lossy(&out.stderr).to_ascii_lowercase();
    if err.contains("no such image") || err.contains("is using its referenced image") {
        return Ok(false);
    }
    Err(RunError::Docker {
        command: format!("docker {}", args.join(" ")),
        message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    })
}

/// Remove sandboxes (containers, then networks, volumes and per-repo
/// images) whose workspace directory no longer exists. Shared config
/// volumes and base images stay.
pub fn prune(common: &CommonArgs) -> Res {
    docker::require_engine()?;
    let gone = |v: &Value| {
        let w = label(v, LABEL_WORKSPACE);
        !w.is_empty() && !Path::new(w).exists()
    };
    let mut removed = 0;
    for kind in ["container", "network", "volume"] {
        let mut objects: Vec<Value> = labelled(kind)?.into_iter().filter(gone).collect();
        // Sandboxes before the holders whose namespaces they use.
        objects.sort_by_key(|v| !label(v, LABEL_ROLE).is_empty());
        for v in &objects {
            let name = v["Name"]
                .as_str()
                .unwrap_or("")
                .trim_start_matches('/')
                .to_owned();
            let id = v["Id"].as_str().unwrap_or(&name);
            let args: Vec<&str> = match kind {
                "container" => vec!["rm", "--force", &name],
                "network" => vec!["network", "rm", id],
                _ => vec!["volume", "rm", &name],
            };
            if !docker::remove(&args)? {
                continue;
            }
            if kind == "container" {
                workspace::release_mount(&name);
            }
            removed += 1;
            let w = label(v, LABEL_WORKSPACE);
            say(
                common,
                "removed",
                json!({"kind": kind, "name": name, "workspace": w}),
                &format!("removed {kind} {name} ({w} is gone)"),
            )?;
        }
    }
    let ids = docker::output(&[
        "image",
        "ls",
        "--quiet",
        "--no-trunc",
        "--filter",
        &format!("label={LABEL_IMAGE}"),
    ])?;
    let mut ids: Vec<&str> = ids.split_whitespace().collect();
    ids.sort_unstable();
    ids.dedup();
    for v in docker::inspect_all("image", &ids)? {
        let w = label(&v, LABEL_IMAGE);
        if w.is_empty() || Path::new(w).exists() {
            continue;
        }
        for tag in v["RepoTags"].as_array().into_iter().flatten() {
            let tag = tag.as_str().unwrap_or_default();
            if !remove_repo_image(tag)? {
                continue;
            }
            removed += 1;
            say(
                common,
                "removed",
                json!({"kind": "image", "name": tag, "workspace": w}),
                &format!("removed image {tag} ({w} is gone)"),
            )?;
        }
    }
    output::info(&format!("pruned {removed} objects"));
    ok()
}
