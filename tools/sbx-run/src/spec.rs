//! The `docker run` of a sandbox, computed in one place: `start` runs it and
//! `show-run` prints it, so what is shown is what is run.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sbx_core::config::Source;
use sbx_core::glob::{NameSet, PathSet};
use sbx_envfilter::Policy;

use crate::RunError;
use crate::names::{
    self, LABEL_BRANCH, LABEL_HASH, LABEL_MODE, LABEL_ROLE, LABEL_SPEC, LABEL_WORKSPACE,
};
use crate::workspace::Workspace;

/// Host variables considered for the container, before the filter decides.
/// NODE_ENV, DEBUG and CI are allowed by default; they still
/// pass through the filter, so a secret-looking value is dropped.
pub const HOST_VARS: &[&str] = &[
    "TERM",
    "LANG",
    "LC_*",
    "TZ",
    "COLORTERM",
    "NODE_ENV",
    "DEBUG",
    "CI",
];

/// Capabilities sbx-guest needs: the firewall (NET_ADMIN, NET_RAW, dropped
/// once it is up), switching to the agent user (SETUID, SETGID, SETPCAP to
/// clear the bounding set), and KILL to stop the agent's processes (root
/// without CAP_KILL may not signal another uid), and SYS_ADMIN with
/// DAC_READ_SEARCH to watch the workspace (whatever its modes) and mask
/// secret files that appear after the start. The agent gets none.
pub const INIT_CAPS: &[&str] = &[
    "NET_ADMIN",
    "NET_RAW",
    "SETUID",
    "SETGID",
    "SETPCAP",
    "KILL",
    "SYS_ADMIN",
    "DAC_READ_SEARCH",
    // The audit sink reads /proc/PID/exe of a non-dumpable checker.
    "SYS_PTRACE",
];

/// `docker stop --time` and the container's `--stop-timeout`, in seconds:
/// room for the guest's stop (services, the backup's final sync) before the
/// engine kills. A sandbox whose processes end on SIGTERM stops at once.
pub const STOP_TIMEOUT: &str = "30";
/// The guest's own deadline: a few seconds under the engine's.
pub const GUEST_STOP_TIMEOUT: &str = "25";
/// The guest, always PID 1, whatever a per-repo image set as ENTRYPOINT/USER.
pub const GUEST: &str = "/usr/local/bin/sbx-guest";
/// The guest's flag for a container made from a snapshot: it cleans what
/// the snapshot holds of the agent's before anything starts (snapshot.rs).
pub const FROM_SNAPSHOT: &str = "--from-snapshot";

pub use sbx_core::guestapi::SNAPSHOT_LAYERS;

/// Make `run` (a `docker run` argv from [`build`]) start the guest with
/// [`FROM_SNAPSHOT`]: an argument after the image, which the image's
/// config cannot preset or leave out. `layers` (from
/// [`crate::snapshot::own_layers`]) are bound read-only for its cleanup.
pub fn from_snapshot(run: &mut Vec<String>, layers: &[PathBuf]) {
    let n = run.len();
    // Never a start without it: a panic, no container.
    assert!(
        n >= 5 && run[n - 4..n - 2] == ["init", "--"],
        "the guest's command ends the docker run argv"
    );
    let mut flags = vec![FROM_SNAPSHOT.to_owned()];
    if !layers.is_empty() {
        flags.extend(["--snapshot-layers".into(), layers.len().to_string()]);
    }
    run.splice(n - 3..n - 3, flags);
    let mounts = layers.iter().enumerate().flat_map(|(i, l)| {
        [
            "--mount".into(),
            bind(l, &format!("{SNAPSHOT_LAYERS}/{i}"), true),
        ]
    });
    run.splice(n - 5..n - 5, mounts.collect::<Vec<String>>());
}

/// The host directory of one sandbox, mounted at /run/sbx/host: the guest
/// writes its status and the sandbox's audit log there. Inside, /run/sbx is
/// root's 0700 directory, so the agent cannot reach it whatever its uid;
/// on the host it sits in the user's state directory.
pub fn host_dir(container: &str) -> PathBuf {
    state_dir().join("sandboxes").join(container)
}

/// Make the host directory: 0777 so the guest's root (which has no
/// CAP_DAC_OVERRIDE) may create files in it, under a 0700 parent so no
/// one else on the host can reach it.
pub fn ensure_host_dir(container: &str) -> Result<PathBuf, RunError> {
    use std::os::unix::fs::PermissionsExt;
    let dir = host_dir(container);
    let parent = state_dir().join("sandboxes");
    let io = |p: &Path, e| RunError::Io(p.to_owned(), e);
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| io(&parent, e))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
        .map_err(|e| io(&dir, e))?;
    Ok(dir)
}

/// Hand `[secrets]` to the sandbox's `sbx-fw init` through its host
/// directory (root's alone inside): 0600, replaced whole, and removed by
/// init once it has them on its tmpfs. None: any earlier file goes. With
/// them (or with `ends_tls`: [network.rules] end TLS too) goes the tests'
/// upstream root when the host's own environment names one (never the
/// workspace's config, never the sandbox's).
pub fn stage_secrets(
    container: &str,
    b: &[sbx_core::secrets::Binding],
    ends_tls: bool,
) -> Result<(), RunError> {
    use sbx_core::secrets::{HANDOFF, TEST_ROOT_ENV, TEST_ROOT_HANDOFF};
    let dir = host_dir(container);
    let json = (!b.is_empty())
        .then(|| serde_json::to_vec(b))
        .transpose()
        .map_err(|e| RunError::Io(dir.join(HANDOFF), std::io::Error::other(e)))?;
    let root = match std::env::var_os(TEST_ROOT_ENV).filter(|_| json.is_some() || ends_tls) {
        Some(p) => Some(std::fs::read(&p).map_err(|e| RunError::Io(p.into(), e))?),
        None => None,
    };
    stage_file(&dir.join(HANDOFF), json.as_deref())?;
    stage_file(&dir.join(TEST_ROOT_HANDOFF), root.as_deref())
}

/// `data` at `path`, 0600 and new; None removes what is there.
pub(crate) fn stage_file(path: &Path, data: Option<&[u8]>) -> Result<(), RunError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |e| RunError::Io(path.to_owned(), e);
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
        _ => {}
    }
    let Some(data) = data else { return Ok(()) };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    f.write_all(data).map_err(io)
}

#[derive(Debug, Clone)]
pub struct Spec {
    /// `docker network create …` (run when the network is missing).
    pub network: Vec<String>,
    /// `docker volume create …` for each per-workspace volume.
    pub volumes: Vec<Vec<String>>,
    /// `docker run …` of the network holder: a sleeping container that owns
    /// the sandbox's network namespace (its bridge, address, published
    /// ports, hostname and resolv.conf), as a pod's pause container does.
    /// The sandbox joins it, so a new sandbox container starts without the
    /// engine building a namespace and its DNS rules (~130 ms here), and
    /// keeps its address. Its digest is `holder_spec`.
    pub holder: Vec<String>,
    pub holder_spec: String,
    /// `docker run …`
    pub run: Vec<String>,
    /// Masked paths, workspace-relative, for show-run and tests.
    pub masked: Vec<String>,
    /// Directories bound onto themselves so they cannot be renamed
    /// (`pinned_parents`), workspace-relative.
    pub pinned: Vec<String>,
    /// Bind sources docker gets as copies mounted by fd (hostpath.rs),
    /// which `start` mounts before it runs or starts the container.
    pub staged: Vec<crate::hostpath::Staged>,
    /// Every bind source under the workspace and its target, which
    /// `start` checks in the started sandbox (hostpath::verify).
    pub bound: Vec<crate::hostpath::Bound>,
}

pub use sbx_image::state_dir;

/// An empty read-only file and directory to mount over masked paths.
pub fn mask_sources() -> Result<(PathBuf, PathBuf), RunError> {
    use std::os::unix::fs::PermissionsExt;
    let dir = state_dir();
    let file = dir.join("empty");
    let empty_dir = dir.join("empty.d");
    let io = |p: &Path, e| RunError::Io(p.to_owned(), e);
    std::fs::create_dir_all(&empty_dir).map_err(|e| io(&empty_dir, e))?;
    if !file.exists() {
        std::fs::write(&file, b"").map_err(|e| io(&file, e))?;
    }
    // Stay empty even if someone wrote to them: masks must read as empty.
    if std::fs::metadata(&file).map(|m| m.len()).unwrap_or(1) != 0 {
        std::fs::write(&file, b"").map_err(|e| io(&file, e))?;
    }
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444))
        .map_err(|e| io(&file, e))?;
    std::fs::set_permissions(&empty_dir, std::fs::Permissions::from_mode(0o555))
        .map_err(|e| io(&empty_dir, e))?;
    Ok((file, empty_dir))
}

/// A `--mount` value; fields with ',', '"' or a line break are CSV-quoted
/// as docker expects.
fn mount(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| {
            let f = if v.is_empty() {
                k.to_string()
            } else {
                format!("{k}={v}")
            };
            // A newline would end docker's CSV record and drop the fields
            // after it (readonly among them): quote it like ',' and '"'.
            if f.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", f.replace('"', "\"\""))
            } else {
                f
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn bind(src: &Path, dst: &str, readonly: bool) -> String {
    let src = src.to_string_lossy();
    let mut f = vec![("type", "bind"), ("source", src.as_ref()), ("target", dst)];
    if readonly {
        f.push(("readonly", ""));
    }
    mount(&f)
}

/// Where the git broker's record volume is mounted (base-image/guest.toml).
pub const GIT_RECORD_DIR: &str = "/var/lib/sbx-git";

fn volume(name: &str, dst: &str) -> String {
    mount(&[("type", "volume"), ("source", name), ("target", dst)])
}

/// Files and directories under `root` that match `blocked` but not
/// `allowed`, workspace-relative. A masked directory is not descended.
/// `.git` is skipped: it holds no files by these names, only objects.
///
/// Fails closed: a directory that cannot be listed, or a masked name docker
/// cannot be given (not UTF-8), is an error, not a secret left visible.
pub fn find_masked(
    root: &Path,
    blocked: &PathSet,
    allowed: &PathSet,
) -> Result<Vec<String>, RunError> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            // Removed while we walked: nothing left to mask.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(RunError::Io(dir, e)),
        };
        let mut entries = Vec::new();
        for e in rd {
            entries.push(e.map_err(|e| RunError::Io(dir.clone(), e))?);
        }
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name();
            if rel.as_os_str().is_empty() && name == ".git" {
                continue;
            }
            let path = rel.join(&name);
            // Symlinks are left alone: docker would mount over what the
            // link names (`hook.key -> .git/hooks/pre-commit` blanked the
            // hook, issue 37); a secret it names in the workspace is
            // masked under its own name.
            let ft = e
                .file_type()
                .map_err(|e| RunError::Io(dir.join(&name), e))?;
            if ft.is_symlink() {
                continue;
            }
            let is_dir = ft.is_dir();
            if allowed.first_match(&path, is_dir).is_none()
                && blocked.first_match(&path, is_dir).is_some()
            {
                let text = path
                    .to_str()
                    .ok_or_else(|| RunError::Unmaskable(root.join(&path)))?;
                out.push(text.to_owned());
            } else if is_dir {
                stack.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The directories strictly between the workspace root and each held
/// path, workspace-relative and parents first, less those that are held
/// (so mounted) themselves.
pub fn pinned_parents(held: &[String]) -> Vec<String> {
    let held_set: std::collections::BTreeSet<&str> = held.iter().map(String::as_str).collect();
    let mut out = std::collections::BTreeSet::new();
    for p in held {
        let mut prefix = PathBuf::new();
        let comps: Vec<_> = Path::new(p)
            .components()
            .filter(|c| matches!(c, std::path::Component::Normal(_)))
            .collect();
        for c in comps.iter().take(comps.len().saturating_sub(1)) {
            prefix.push(c);
            let s = prefix.to_string_lossy().into_owned();
            if !held_set.contains(s.as_str()) {
                out.insert(s);
            }
        }
    }
    out.into_iter().collect()
}

/// Whether a protected path whose parents are missing is held anyway (its
/// parents made): yes for what the user listed, no for the built-in ones,
/// which would leave `.agent-precommit/` in every repository that has none.
fn made_when_missing(p: &str) -> bool {
    !sbx_core::config::ALWAYS_PROTECTED.contains(&p)
}

/// The paths held read-only: the config's, and the work-tree hooks
/// directory `verify-commits` recorded at this start (`core.hooksPath =
/// .githooks`), unless one of the others holds it already. The next
/// start records it again: the agent must not have written it meanwhile.
///
/// So are the work-tree files a recorded hook is a link to
/// (`.git/hooks/pre-commit -> ../../scripts/pre-commit`): `.git/hooks` is
/// read-only, but the agent rewrote `scripts/pre-commit` and the user's
/// next `git commit` on the host ran it (a37c).
fn protected_paths(ws: &Workspace) -> Vec<String> {
    use crate::verify::record;
    let mut v = ws.loaded.config.protected_paths();
    let dir = record::dir(&ws.names.hash);
    let mut extra = Vec::new();
    if let Some(rec) = record::load(&dir) {
        if let record::Location::Tree(t) = &rec.location {
            extra.push(t.clone());
        }
        extra.extend(record::linked_targets(&dir, &rec, &ws.path));
    }
    // A submodule's hooks (`.git/modules/<name>/hooks`, held read-only by
    // gitpins) run when the user commits in it: their links too.
    for p in crate::gitpins::pins(&ws.path).unwrap_or_default() {
        if p.dir && p.exists && p.rel.ends_with("/hooks") {
            let d = ws.path.join(&p.rel);
            extra.extend(record::links_into(&d, &d, &ws.path));
        }
    }
    for t in extra {
        if !v.contains(&t)
            && !v
                .iter()
                .any(|p| Path::new(&t).starts_with(p.trim_end_matches('/')))
        {
            v.push(t);
        }
    }
    v
}

/// Make the missing directories above the protected paths, and the
/// missing files `.git` holds read-only (gitpins.rs), owned as the
/// workspace is, so `start` can pin them (docker would make them anyway,
/// as root, for the read-only mount below). Nothing under read-only.
pub fn make_parents(ws: &Workspace) -> Result<(), RunError> {
    if ws.loaded.config.read_only() {
        return Ok(());
    }
    crate::gitpins::make_missing(&ws.path, ws.owner)?;
    let root =
        sbx_sys::beneath::Root::open(&ws.path).map_err(|e| RunError::Io(ws.path.clone(), e))?;
    for p in protected_paths(ws) {
        if !made_when_missing(&p) {
            continue;
        }
        // Only below real directories (hostpath.rs refuses a link).
        if !matches!(
            crate::hostpath::protected(&root, &p)?,
            crate::hostpath::State::Missing(_)
        ) {
            continue;
        }
        let mut dir = PathBuf::new();
        let comps: Vec<_> = Path::new(&p).components().collect();
        for c in comps.iter().take(comps.len().saturating_sub(1)) {
            dir.push(c);
            let new = root.open_path(&dir).is_err();
            let fd = root
                .create_dir_all(&dir, 0o755)
                .map_err(|e| RunError::BadWorkspace(e.to_string()))?;
            if new {
                // As root on the host: give it to the workspace's owner.
                crate::workspace::give_fd(&fd, ws.owner);
            }
        }
    }
    Ok(())
}

/// Host variables for `-e NAME`: the candidates that sbx-envfilter keeps.
/// Values are never put on the command line (they would show in `ps` and in
/// show-run); docker reads them from its own environment.
pub fn env_names(
    ws: &Workspace,
    host: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Vec<String> {
    let env = &ws.loaded.config.environment;
    let mut wanted: Vec<&str> = HOST_VARS.to_vec();
    wanted.extend(env.allow.iter().map(|g| g.0.as_str()));
    wanted.extend(env.pass.iter().map(|g| g.0.as_str()));
    // Same parser as config validation (sbx_core::glob::name_glob), so this
    // cannot fail on a config that loaded; no panic if it ever does.
    let Ok(candidates) = NameSet::new(&wanted) else {
        return Vec::new();
    };
    let policy = Policy::new(env);
    let considered: Vec<_> = host
        .into_iter()
        .filter(|(k, _)| {
            candidates.first_match(k).is_some() && std::str::from_utf8(k.as_bytes()).is_ok()
        })
        .collect();
    let entries = sbx_envfilter::filter(&policy, considered);
    sbx_envfilter::audit_entries(&entries, "container-env");
    let mut names: Vec<String> = sbx_envfilter::kept(&entries)
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The per-workspace volumes `start` creates (labelled, so `rm --volumes`
/// and `prune` find them), in a fixed order.
pub fn workspace_volumes(n: &names::Names) -> Vec<String> {
    vec![
        n.history.clone(),
        n.git_record.clone(),
        n.repo_shelf.clone(),
        n.claude.clone(),
        n.codex.clone(),
        n.home.clone(),
    ]
}

/// The complete spec for a workspace and image.
pub fn build(
    ws: &Workspace,
    image: &str,
    env_names: &[String],
    masks: (&Path, &Path),
    show_names: bool,
) -> Result<Spec, RunError> {
    let n = &ws.names;
    let cfg = &ws.loaded.config;
    let target = ws.target();
    let workspace = ws.path.to_string_lossy().into_owned();
    let labels = [
        format!("{LABEL_WORKSPACE}={workspace}"),
        format!(
            "{LABEL_MODE}={}",
            if ws.clone_mode() {
                "clone"
            } else if ws.branch.is_some() {
                "branch"
            } else {
                "bind"
            }
        ),
        format!("{LABEL_BRANCH}={}", ws.branch.as_deref().unwrap_or("")),
        format!("{LABEL_HASH}={}", n.hash),
    ];
    let label_args: Vec<String> = labels
        .iter()
        .flat_map(|l| ["--label".to_string(), l.clone()])
        .collect();

    let mut network = vec![
        "network".to_string(),
        "create".into(),
        "--driver".into(),
        "bridge".into(),
    ];
    network.extend(label_args.iter().cloned());
    network.push(n.network.clone());

    let volumes = workspace_volumes(n)
        .into_iter()
        .map(|v| {
            let mut c = vec!["volume".to_string(), "create".into()];
            c.extend(label_args.iter().cloned());
            c.push(v);
            c
        })
        .collect();

    // The holder: no capabilities, no writes, nobody's uid, a few pids.
    let mut h: Vec<String> = vec!["run".into(), "--detach".into()];
    h.extend(["--name".into(), n.holder.clone()]);
    h.extend([
        "--hostname".into(),
        format!("sbx-{}", n.repo.chars().take(50).collect::<String>()),
    ]);
    h.extend(label_args.iter().cloned());
    h.extend(["--label".into(), format!("{LABEL_ROLE}=netns")]);
    h.extend(["--cap-drop".into(), "ALL".into()]);
    h.extend(["--security-opt".into(), "no-new-privileges".into()]);
    h.extend(["--user".into(), "65534:65534".into(), "--read-only".into()]);
    // The image's HEALTHCHECK asks the guest, which the holder does not run.
    h.push("--no-healthcheck".into());
    h.extend([
        "--memory".into(),
        "32m".into(),
        "--pids-limit".into(),
        "8".into(),
    ]);
    // Its own bridge, so sandboxes cannot reach each other.
    h.extend(["--network".into(), n.network.clone()]);
    for p in cfg.sandbox.ports.iter() {
        h.extend(["--publish".into(), p.text.clone()]);
    }
    // sshd's port, on 127.0.0.1 unless `start --ssh-listen` said otherwise.
    if cfg.ssh.enabled {
        let keys = crate::ssh::Keys::of(&n.container);
        h.extend(["--publish".into(), keys.publish()?]);
    }
    // The per-repo image, never a snapshot's: the agent wrote into a
    // snapshot's layer and the holder runs none of the guest's start-time
    // cleanup. It is then kept across a start from a snapshot too. A
    // snapshot imported where there is no per-repo image: its own.
    let holder_image = if image == n.image || crate::docker::exists("image", &n.image)? {
        n.image.as_str()
    } else {
        image
    };
    h.extend([
        "--entrypoint".into(),
        "sleep".into(),
        holder_image.to_owned(),
        "infinity".into(),
    ]);
    let holder_spec = names::digest(h.join("\0").as_bytes());
    h.insert(2, "--label".into());
    h.insert(3, format!("{LABEL_SPEC}={holder_spec}"));

    let mut a: Vec<String> = vec!["run".into(), "--detach".into()];
    a.extend(["--name".into(), n.container.clone()]);
    a.extend(label_args.iter().cloned());
    // Privileges: nothing but what init needs, and no way to regain any.
    a.extend(["--cap-drop".into(), "ALL".into()]);
    for c in INIT_CAPS {
        a.extend(["--cap-add".into(), (*c).into()]);
    }
    a.extend(["--security-opt".into(), "no-new-privileges".into()]);
    // The guest is PID 1 as root whatever the image says; it drops to the
    // agent itself.
    a.extend(["--user".into(), "0:0".into()]);
    a.extend(["--entrypoint".into(), GUEST.into()]);
    a.extend(["--stop-timeout".into(), STOP_TIMEOUT.into()]);
    // Resources.
    // Bytes, as sbx-core parsed them: docker's own size parser refuses some
    // spellings the config accepts (".5g"), one parser decides.
    let mem = cfg.sandbox.memory.bytes.to_string();
    a.extend(["--memory".into(), mem.clone()]);
    a.extend(["--memory-swap".into(), mem]);
    a.extend(["--cpus".into(), cfg.sandbox.cpus.0.to_string()]);
    a.extend(["--pids-limit".into(), cfg.sandbox.pids.0.to_string()]);
    // Network: the holder's namespace on the sandbox's own bridge.
    a.extend(["--network".into(), format!("container:{}", n.holder)]);
    // The workspace, then read-only and masking mounts over parts of it
    // (later mounts stack on earlier ones).
    // Owned by someone other than the agent: the idmapped view (workspace.rs).
    // [tools].read-only: the OS refuses every writer, whatever tool it is.
    // Clone mode: the agent works on the shelf, and nothing it can write
    // lands in the host checkout (work tree or `.git`); it keeps a
    // read-only view for provisioning and the hooks and protected paths
    // the guest pins from it (sbx-guest's branch.rs).
    let ro = cfg.read_only() || ws.clone_mode();
    a.extend(["--mount".into(), bind(&ws.mount_source(), &target, ro)]);
    // Every read-only or masking mount inside the workspace, whose parent
    // directories get pinned below.
    let mut held: Vec<String> = Vec::new();
    // Resolved through no link (hostpath.rs): a protected path that is a
    // link is refused, a missing one is masked from its first missing
    // component, so the agent cannot make it one for the next start.
    let root =
        sbx_sys::beneath::Root::open(&ws.path).map_err(|e| RunError::Io(ws.path.clone(), e))?;
    let mut sources = crate::hostpath::Sources::new(show_names);
    let container = n.container.as_str();
    for p in protected_paths(ws) {
        use crate::hostpath::State;
        let dst = format!("{target}/{p}");
        // `.claude` is made on the host first, so it is a real directory
        // bound read-only: `sbx-run agent` copies skills into it while the
        // sandbox runs, and an empty mask over it would hide them.
        if p == ".claude" && !ro && root.create_dir_all(Path::new(".claude"), 0o755).is_ok() {
            crate::agent::skills::give(&root, Path::new(".claude"), ws.owner);
        }
        match crate::hostpath::protected(&root, &p)? {
            State::UnderFile(bad) => {
                // A worktree's `.git` is a file: git keeps the hooks elsewhere
                // and the guard pins them itself. Under read-only nothing moves.
                if p == ".git/hooks" || ro {
                    continue;
                }
                return Err(RunError::Config(format!(
                    "{}: [sandbox].protected: \"{p}\": {bad} is not a directory, so no read-only mount under it can be held in place; protect \"{bad}\" itself",
                    ws.loaded.describe()
                )));
            }
            State::Present(kind) => {
                // husky writes its hooks into .husky/_: make it before the
                // directory turns read-only, so the guard can pin it.
                if p == ".husky" && kind == sbx_sys::beneath::Kind::Dir {
                    let _ = root.create_dir_all(Path::new(".husky/_"), 0o755);
                }
                let src = sources.source(container, &ws.path, &p, &dst, true);
                a.extend(["--mount".into(), bind(&src, &dst, true)]);
                held.push(p);
            }
            // Missing: an empty read-only directory from its first missing
            // component stops the agent creating it (docker makes the
            // mount point, an empty directory that must stay). Not under
            // read-only: the agent cannot create it, and docker could not
            // make the mount point inside a read-only bind.
            State::Missing(top) if !ro => {
                // What the user listed: `make_parents` makes its parents.
                let top = if made_when_missing(&p) { p } else { top };
                let dst = format!("{target}/{top}");
                sources.mask(masks.1, &dst);
                a.extend(["--mount".into(), bind(masks.1, &dst, true)]);
                if !held.contains(&top) {
                    held.push(top);
                }
            }
            State::Missing(_) => {}
        }
    }
    // What the host's git reads as configuration or code under `.git`
    // (gitpins.rs): the agent must not write it. Under read-only nothing
    // is writable anyway.
    if !ro {
        for p in crate::gitpins::pins(&ws.path)? {
            // By fd, like a protected path: the agent of another sandbox of
            // this workspace (a `--branch` one) can swap a name checked
            // here for a link before docker binds it.
            let dst = format!("{target}/{}", p.rel);
            let src = match (p.exists, p.dir) {
                (true, _) => sources.source(container, &ws.path, &p.rel, &dst, true),
                (false, true) => masks.1.to_owned(),
                (false, false) if p.rel.ends_with("/commondir") => {
                    crate::gitpins::commondir_mask()?
                }
                (false, false) => masks.0.to_owned(),
            };
            if !p.exists {
                sources.mask(&src, &dst);
            }
            a.extend(["--mount".into(), bind(&src, &dst, true)]);
            held.push(p.rel);
        }
    }
    let set = |pats: &[sbx_core::glob::PathPattern], key: &str| {
        PathSet::new(pats).map_err(|e| {
            RunError::Config(format!("{}: [filesystem].{key}: {e}", ws.loaded.describe()))
        })
    };
    let blocked = set(&cfg.blocked_files(), "blocked")?;
    let allowed = set(&cfg.allowed_files(), "allowed")?;
    let masked = find_masked(&ws.path, &blocked, &allowed)?;
    for m in &masked {
        let src = if ws.path.join(m).is_dir() {
            masks.1
        } else {
            masks.0
        };
        let dst = format!("{target}/{m}");
        sources.mask(src, &dst);
        a.extend(["--mount".into(), bind(src, &dst, true)]);
    }
    held.extend(masked.iter().cloned());
    // Each directory above a held mount, bound onto itself (from the same
    // source as the workspace, so writes in it stay the agent's): rename(2)
    // and rmdir of a mount point fail with EBUSY, so `mv .github .gh2`
    // cannot carry `.github/workflows`'s read-only mount away and free the
    // path for a writable copy. Read-only: nothing can be renamed.
    let pinned = if ro {
        Vec::new()
    } else {
        pinned_parents(&held)
    };
    for d in &pinned {
        let dst = format!("{target}/{d}");
        let src = sources.source(container, &ws.mount_source(), d, &dst, false);
        a.extend(["--mount".into(), bind(&src, &dst, false)]);
    }
    // The config, read-only where every tool inside looks for it (inside a
    // sandbox, tools read only /.agent-sandbox: the agent cannot pick its own).
    let cfg_dir = ws.config_dir();
    if let Ok(rel) = cfg_dir.strip_prefix(&ws.path)
        && let Some(rel) = rel.to_str()
        && crate::hostpath::protected(&root, rel)?
            == crate::hostpath::State::Present(sbx_sys::beneath::Kind::Dir)
    {
        let src = sources.source(container, &ws.path, rel, "/.agent-sandbox", true);
        a.extend(["--mount".into(), bind(&src, "/.agent-sandbox", true)]);
    }
    if let Source::File(p) | Source::Legacy(p) = &ws.loaded.source {
        if p.parent() != Some(cfg_dir.as_path()) {
            let name = if matches!(ws.loaded.source, Source::Legacy(_)) {
                "config.json"
            } else {
                "config.toml"
            };
            a.extend([
                "--mount".into(),
                bind(p, &format!("/.agent-sandbox/{name}"), true),
            ]);
        }
    }
    // The home first (the engine mounts parents before children): a new
    // volume starts as a copy of the image's home, and the guest restores
    // the newest backup into it on its first start.
    a.extend(["--mount".into(), volume(&n.home, "/home/agent")]);
    // Each workspace its own AI CLI config: only the login is shared, by
    // copy, never by mounting a shared volume (login.rs).
    for c in crate::login::CLIS {
        a.extend(["--mount".into(), volume(&c.volume(n), c.target)]);
    }
    a.extend(["--mount".into(), volume(&n.history, "/commandhistory")]);
    // Root's only (the image makes the directory root 0755): the git
    // broker keeps its stash record there (`serve --keep`).
    a.extend(["--mount".into(), volume(&n.git_record, GIT_RECORD_DIR)]);
    if cfg.read_only() {
        a.extend([
            "--mount".into(),
            mount(&[
                ("type", "volume"),
                ("source", &n.repo_shelf),
                ("target", crate::branch::SHELF),
                ("readonly", ""),
            ]),
        ]);
    } else {
        a.extend([
            "--mount".into(),
            volume(&n.repo_shelf, crate::branch::SHELF),
        ]);
    }
    // [tools] at the agent: the AI CLIs' managed files, read-only.
    for (src, dst) in crate::toolpolicy::mounts(ws, &n.container) {
        a.extend(["--mount".into(), bind(&src, dst, true)]);
    }
    a.extend([
        "--mount".into(),
        bind(&host_dir(&n.container), "/run/sbx/host", false),
    ]);
    // Chat scratch directories (`sbx-run agent --scratch`), in every sandbox
    // so a chat can ask for one without a restart.
    a.extend([
        "--mount".into(),
        bind(
            &ws.scratch_source(),
            crate::workspace::SCRATCH_TARGET,
            false,
        ),
    ]);
    // Environment: fixed values, then host names the filter allows.
    a.extend(["--env".into(), format!("SBX_WORKSPACE={target}")]);
    // Branch mode: the guest provisions the worktree and pins the host's
    // hooks and protected paths over the shelf's (sbx-guest's branch.rs).
    if let Some(b) = &ws.branch {
        a.extend(["--env".into(), format!("SBX_BRANCH={b}")]);
        // Its own home, so its own store prefix: sharing the main sandbox's
        // would make two homes claim one prefix (sbx-backup refuses the
        // second, and the main sandbox's backups would stop).
        if let Some(u) = &cfg.backup.url {
            let c = u
                .child("branch", &sbx_core::sanitize_branch(b))
                .map_err(|e| {
                    RunError::Config(format!("{}: [backup].url: {e}", ws.loaded.describe()))
                })?;
            a.extend(["--env".into(), format!("SBX_BACKUP_URL={}", c.text)]);
        }
    }
    a.extend([
        "--env".into(),
        format!("SBX_GUEST_STOP_TIMEOUT={GUEST_STOP_TIMEOUT}"),
    ]);
    // Nothing of the agent's runs before `start` has checked the bind
    // mounts (hostpath.rs). Not in show-run's line: pasted, no sbx-run
    // would release it.
    if !show_names {
        a.extend([
            "--env".into(),
            format!("{}=1", sbx_core::guestapi::HOLD_ENV),
        ]);
    }
    // A variable a secret is read from never crosses, even when passed:
    // the sandbox gets its placeholder (below).
    let secret_var = |n: &str| {
        cfg.secrets
            .values()
            .any(|s| s.from == sbx_core::config::SecretFrom::Env(n.to_owned()))
    };
    // Nor do the firewall's own knobs (test roots, directories): those
    // come from the image and sbx-run, not from a variable `pass` names.
    for name in env_names
        .iter()
        .filter(|n| !secret_var(n) && !n.starts_with("SBX_FW_"))
    {
        a.extend(["--env".into(), name.clone()]);
    }
    // [secrets]: the values go to the proxy alone (sbx-fw init moves them
    // from the host directory onto this tmpfs, root's, never in a
    // snapshot); the sandbox gets a placeholder under an env: source's
    // own name, and Node the sandbox CA. [network.rules] need the CA too
    // (its key on the same tmpfs): the proxy ends TLS for those hosts.
    if !cfg.secrets.is_empty() || !cfg.network.rules.is_empty() {
        a.extend([
            "--tmpfs".into(),
            format!("{}:mode=0700,size=1m", sbx_core::secrets::TMPFS),
        ]);
        a.extend([
            "--env".into(),
            format!("NODE_EXTRA_CA_CERTS={}", sbx_core::secrets::SANDBOX_CA),
        ]);
        for (name, sec) in &cfg.secrets {
            if let sbx_core::config::SecretFrom::Env(var) = &sec.from {
                let ph = sbx_core::secrets::placeholder(name);
                a.extend(["--env".into(), format!("{var}={ph}")]);
            }
        }
    }
    // The host's agent endpoints, for sbx-fw to allowlist (not secrets).
    let host_var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let Some(urls) = sbx_core::config::agent::sandbox_api_value(host_var) {
        let var = sbx_core::config::agent::SANDBOX_API_VAR;
        a.extend(["--env".into(), format!("{var}={urls}")]);
    }
    // Branch mode: the shelf, which exists; docker would make a missing
    // workdir itself, root's, where the worktree is to be provisioned.
    let workdir = if ws.branch.is_some() {
        crate::branch::SHELF.to_owned()
    } else {
        ws.workdir()
    };
    a.extend(["--workdir".into(), workdir]);
    a.push(image.to_owned());
    // --entrypoint clears the image's CMD: the command is given here.
    a.extend(["init", "--", "sleep", "infinity"].map(String::from));
    Ok(Spec {
        network,
        volumes,
        holder: h,
        holder_spec,
        run: a,
        masked,
        pinned,
        staged: sources.staged,
        bound: sources.bound,
    })
}

/// Shell-quote a docker command so it can be pasted.
pub fn shell_line(args: &[String]) -> String {
    let mut words = vec![crate::docker::program().to_string_lossy().into_owned()];
    words.extend(args.iter().cloned());
    shlex::try_join(words.iter().map(String::as_str)).unwrap_or_else(|_| words.join(" "))
}

/// For show-run's comment: a human list of the masked paths.
pub fn masked_comment(masked: &[String]) -> String {
    if masked.is_empty() {
        "# masked (read as empty): none".into()
    } else {
        // Agent-made names: a newline would end the comment and put the
        // rest on a line `show-run | sh` runs; escaped, it stays a comment.
        let names: Vec<_> = masked
            .iter()
            .map(|m| sbx_core::sanitize::field(m).into_owned())
            .collect();
        format!("# masked (read as empty): {}", names.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_names_stay_in_their_comment() {
        let c = masked_comment(&["a\nrm -rf ~ \x1b]0;t\x07".into()]);
        assert_eq!(c.lines().count(), 1, "{c}");
        assert!(!c.contains('\x1b'), "{c}");
    }

    #[test]
    fn mount_fields_are_csv_quoted() {
        assert_eq!(
            bind(Path::new("/a b/c,d"), "/workspace/x", true),
            "type=bind,\"source=/a b/c,d\",target=/workspace/x,readonly"
        );
    }

    /// A newline in a masked name must not end docker's
    /// CSV record (dropping `readonly` and pointing the mask elsewhere).
    #[test]
    fn line_breaks_are_quoted() {
        assert_eq!(
            bind(Path::new("/m"), "/workspace/x/a secret\nb", true),
            "type=bind,source=/m,\"target=/workspace/x/a secret\nb\",readonly"
        );
    }

    /// Every directory above a held mount is pinned once, parents first;
    /// a held directory is a mount already and is not bound again.
    #[test]
    fn pinned_parents_are_every_directory_above_a_held_mount() {
        let held: Vec<String> = [
            ".git/hooks",
            ".agent-sandbox",
            ".github/workflows",
            "docs",
            "docs/api/v1",
            "a/b/c/.env",
            "a/b/key.pem",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            pinned_parents(&held),
            [".git", ".github", "a", "a/b", "a/b/c", "docs/api"]
        );
    }

    /// A masked name docker cannot be given is an error, not a skip.
    #[test]
    fn unmaskable_names_fail_closed() {
        use std::os::unix::ffi::OsStrExt;
        let t = tempfile::tempdir().unwrap();
        let name = std::ffi::OsStr::from_bytes(b".env.\xff");
        std::fs::write(t.path().join(name), "x").unwrap();
        let cfg = sbx_core::config::Config::default();
        let r = find_masked(
            t.path(),
            &PathSet::new(&cfg.blocked_files()).unwrap(),
            &PathSet::new(&cfg.allowed_files()).unwrap(),
        );
        assert!(matches!(r, Err(RunError::Unmaskable(_))), "{r:?}");
    }

    #[test]
    fn masks_follow_blocked_and_allowed() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for f in [
            ".env",
            ".env.example",
            ".env.local",
            "src/app.rs",
            "src/secret.txt",
            "certs/a.pem",
            ".git/x.key",
        ] {
            std::fs::create_dir_all(r.join(f).parent().unwrap()).unwrap();
            std::fs::write(r.join(f), "x").unwrap();
        }
        std::fs::create_dir_all(r.join("home/.ssh")).unwrap();
        std::fs::write(r.join("home/.ssh/id_ed25519"), "k").unwrap();
        let cfg = sbx_core::config::Config::default();
        let m = find_masked(
            r,
            &PathSet::new(&cfg.blocked_files()).unwrap(),
            &PathSet::new(&cfg.allowed_files()).unwrap(),
        )
        .unwrap();
        assert_eq!(
            m,
            [
                ".env",
                ".env.local",
                "certs/a.pem",
                "home/.ssh",
                "src/secret.txt"
            ]
        );
    }
}
