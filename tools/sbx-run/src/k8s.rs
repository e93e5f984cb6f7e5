//! `show-run --format k8s|pod|k8s-template`: the same sandbox as Kubernetes
//! objects. Translated from the very `docker run` argv `spec::build` makes
//! (as api.rs does for the engine), so the cluster gets what `start` runs:
//! a flag or mount this cannot express is an error, never skipped. Config
//! with no meaning on a cluster is refused by key before anything prints.
//!
//! What differs, by design: the workspace is a clone (an init container,
//! from `--repo`) on an emptyDir instead of a host bind, worked on in
//! branch mode on the shelf; named volumes are claims; sbx's own files
//! (masks, managed settings, the config) come from a ConfigMap; the holder
//! container is the pod's own sandbox; `sbx-fw init` runs once more in an
//! init container, so the pod's network namespace is filtered before the
//! guest's container exists.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::RunError;
use crate::spec::{self, Spec};
use crate::workspace::{AGENT_ID, Workspace};

/// `agents.x-k8s.io`: v1beta1 is the storage version; v1alpha1 is
/// deprecated upstream.
pub const SANDBOX_API: &str = "agents.x-k8s.io/v1beta1";
pub const EXTENSIONS_API: &str = "extensions.agents.x-k8s.io/v1beta1";
/// The label that lets a pod (sbx-server) reach sandboxes (NetworkPolicy).
pub const SERVER_LABEL: (&str, &str) = ("app.kubernetes.io/name", "sbx-server");
pub const PART_OF: (&str, &str) = ("app.kubernetes.io/part-of", "sbx");
/// sbx-fw in the image (base-image/Dockerfile).
pub const FW: &str = "/usr/local/bin/sbx-fw";
/// The clone's emptyDir and the seeding container's mount of each claim.
const WORKSPACE_VOLUME: &str = "workspace";
const SEED_ROOT: &str = "/sbx-seed";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A Sandbox, a ConfigMap and a NetworkPolicy.
    Sandbox,
    /// A Pod, its PersistentVolumeClaims, a ConfigMap and a NetworkPolicy.
    Pod,
    /// A SandboxTemplate (with its NetworkPolicy), a SandboxWarmPool and a ConfigMap.
    Template,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub format: Format,
    /// What the clone init container clones.
    pub repo: String,
    /// The image the cluster pulls.
    pub image: String,
}

/// One row per config key: what it becomes on a cluster. `Refused` keys
/// fail `show-run --format k8s` when set (not their default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meaning {
    /// Read inside the sandbox from /.agent-sandbox/config.toml, which the
    /// pod gets from its ConfigMap, byte for byte.
    InPod,
    /// Turned into a pod-spec field (named), asserted by tests/k8s.rs.
    PodSpec(&'static str),
    /// No meaning on a cluster: refused with this reason.
    Refused(&'static str),
}

/// Every config key (section, key) and its meaning on a cluster. The
/// table test in tests/k8s.rs checks this against docs/config.md.
pub const KEYS: &[(&str, &str, Meaning)] = {
    use Meaning::*;
    &[
        ("sandbox", "memory", PodSpec("resources.limits.memory")),
        ("sandbox", "cpus", PodSpec("resources.limits.cpu")),
        (
            "sandbox",
            "pids",
            Refused(
                "Kubernetes has no per-pod process limit (the kubelet's podPidsLimit sets one for every pod of a node): remove it, and set podPidsLimit on the nodes",
            ),
        ),
        ("sandbox", "ports", PodSpec("containers[].ports")),
        ("sandbox", "protected", PodSpec("volumeMounts (readOnly)")),
        ("sandbox", "workspace", PodSpec("volumeMounts (readOnly)")),
        ("sandbox", "enabled", InPod),
        ("filesystem", "blocked", PodSpec("volumeMounts (masks)")),
        ("filesystem", "allowed", PodSpec("volumeMounts (masks)")),
        ("filesystem", "accept-in-git", InPod),
        ("environment", "filter-secrets", InPod),
        (
            "environment",
            "allow",
            Refused(
                "it passes host variables, and a cluster's pod is started from no host environment: set what the sandbox needs in the manifest",
            ),
        ),
        ("environment", "block", InPod),
        (
            "environment",
            "pass",
            Refused(
                "it passes host variables, and a cluster's pod is started from no host environment: set what the sandbox needs in the manifest",
            ),
        ),
        ("network", "allow-domains", InPod),
        ("network", "required", InPod),
        ("network", "registries", InPod),
        ("network", "github", InPod),
        ("network", "allow-localhost", InPod),
        ("network", "allow-external", InPod),
        ("network", "allow-git", InPod),
        (
            "network",
            "mode",
            PodSpec("initContainers[firewall] capabilities"),
        ),
        ("network", "dns-types", InPod),
        ("network", "rules", InPod),
        (
            "network",
            "on-block",
            Refused("it runs a program on the host, and a cluster has none to run it on"),
        ),
        (
            "network",
            "on-block-timeout",
            Refused("it runs a program on the host, and a cluster has none to run it on"),
        ),
        ("git", "block-no-verify", InPod),
        ("git", "block-force-push", InPod),
        ("git", "block-global-config", InPod),
        ("git", "push-non-commits", InPod),
        ("backup", "url", InPod),
        ("backup", "interval", InPod),
        ("backup", "exclude", InPod),
        ("backup", "keep", InPod),
        ("guest.services.NAME", "command", InPod),
        ("agent", "cli", InPod),
        ("agent", "base-url", InPod),
        (
            "agent",
            "credential-file",
            Refused("it names a file on the host, which a cluster's sandbox cannot read"),
        ),
        ("agent", "model", InPod),
        ("agent", "max-turns", InPod),
        ("agent", "permission-mode", InPod),
        ("agent", "timeout", InPod),
        ("agent", "chat-retention", InPod),
        ("agent.mcp.NAME", "command", InPod),
        ("agent.mcp.NAME", "env", InPod),
        (
            "agent.host-tools.NAME",
            "argv",
            Refused("host tools run on the host, and a cluster has none to run them on"),
        ),
        (
            "agent.host-tools.NAME",
            "description",
            Refused("host tools run on the host, and a cluster has none to run them on"),
        ),
        (
            "agent.host-tools.NAME",
            "timeout",
            Refused("host tools run on the host, and a cluster has none to run them on"),
        ),
        (
            "agent.host-tools.NAME",
            "writes",
            Refused("host tools run on the host, and a cluster has none to run them on"),
        ),
        (
            "lifecycle",
            "keep-snapshots",
            Refused(
                "snapshots are docker images of the container (`sbx-run snapshot`), not yet made on a cluster",
            ),
        ),
        (
            "lifecycle",
            "idle-stop",
            Refused(
                "the host's sbx-run stops an idle sandbox; on a cluster nothing does yet (set shutdownTime on the Sandbox)",
            ),
        ),
        (
            "tools",
            "disallowed",
            PodSpec("volumeMounts (managed settings)"),
        ),
        (
            "tools",
            "allowed",
            PodSpec("volumeMounts (managed settings)"),
        ),
        ("tools", "read-only", PodSpec("volumeMounts (readOnly)")),
        (
            "tools",
            "deny-read",
            PodSpec("volumeMounts (managed settings)"),
        ),
        (
            "ssh",
            "enabled",
            Refused(
                "sshd's keys are made on the host and its port is published by the holder; on a cluster reach the sandbox through the API server (kubectl exec or port-forward) instead",
            ),
        ),
        (
            "secrets.NAME",
            "from",
            Refused(
                "secret values reach sbx-fw through the sandbox's host directory, which a pod has not (a Kubernetes Secret for them is not done yet)",
            ),
        ),
        (
            "secrets.NAME",
            "host",
            Refused(
                "secret values reach sbx-fw through the sandbox's host directory, which a pod has not (a Kubernetes Secret for them is not done yet)",
            ),
        ),
        (
            "secrets.NAME",
            "header",
            Refused(
                "secret values reach sbx-fw through the sandbox's host directory, which a pod has not (a Kubernetes Secret for them is not done yet)",
            ),
        ),
    ]
};

/// The refused keys this config sets (differs from the default), in
/// table order: `[section].key`.
pub fn refused_keys(cfg: &sbx_core::config::Config) -> Vec<(String, &'static str)> {
    let d = sbx_core::config::Config::default();
    let set = |section: &str, key: &str| -> bool {
        match (section, key) {
            ("sandbox", "pids") => cfg.sandbox.pids.0 != d.sandbox.pids.0,
            ("environment", "allow") => !cfg.environment.allow.0.is_empty(),
            ("environment", "pass") => !cfg.environment.pass.0.is_empty(),
            ("agent", "credential-file") => cfg.agent.credential_file.is_some(),
            ("agent.host-tools.NAME", _) => !cfg.agent.host_tools.is_empty(),
            ("lifecycle", "keep-snapshots") => cfg.lifecycle.keep_snapshots.is_some(),
            ("lifecycle", "idle-stop") => cfg.lifecycle.idle_stop.is_some(),
            ("secrets.NAME", _) => !cfg.secrets.is_empty(),
            ("ssh", "enabled") => cfg.ssh.enabled,
            ("network", "on-block") => cfg.network.on_block.is_some(),
            ("network", "on-block-timeout") => {
                cfg.network.on_block_timeout.0 != d.network.on_block_timeout.0
            }
            _ => false,
        }
    };
    let mut out: Vec<(String, &'static str)> = Vec::new();
    for (section, key, m) in KEYS {
        if let Meaning::Refused(why) = m
            && set(section, key)
        {
            let name = match section.strip_suffix(".NAME") {
                Some(s) => format!("[{s}]"),
                None => format!("[{section}].{key}"),
            };
            if !out.iter().any(|(n, _)| *n == name) {
                out.push((name, why));
            }
        }
    }
    out
}

/// The first refused key `ws`'s config sets, as the error to exit with.
pub fn refuse(ws: &Workspace) -> Result<(), RunError> {
    match refused_keys(&ws.loaded.config).into_iter().next() {
        Some((key, why)) => Err(RunError::Config(format!(
            "{}: {key}: no Kubernetes meaning: {why} (nothing was printed)",
            ws.loaded.describe()
        ))),
        None => Ok(()),
    }
}

/// A name Kubernetes takes for an object (a DNS-1123 label, at most 63):
/// sbx's docker names allow `_` and `.`, and may be longer; the hash at
/// the end is kept.
pub fn object_name(docker_name: &str) -> String {
    let mut s: String = docker_name
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() { c } else { '-' }
        })
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    let s = s.trim_matches('-').to_owned();
    if s.len() <= 63 {
        return s;
    }
    // Keep the tail (the workspace hash): cut the middle.
    let tail = &s[s.len() - 20..];
    let head = s[..42].trim_end_matches('-');
    format!("{head}-{}", tail.trim_start_matches('-'))
}

/// The spec's named volumes and what each is on a cluster: a claim
/// template name and its size.
fn claim_for(ws: &Workspace, volume: &str) -> Option<(&'static str, &'static str)> {
    let n = &ws.names;
    Some(match volume {
        v if v == n.home => ("home", "10Gi"),
        v if v == n.repo_shelf => ("shelf", "10Gi"),
        v if v == n.history => ("history", "1Gi"),
        v if v == n.git_record => ("git-record", "1Gi"),
        v if v == n.claude => ("claude", "1Gi"),
        v if v == n.codex => ("codex", "1Gi"),
        _ => return None,
    })
}

/// One `--mount` field list, CSV as docker reads it (spec::mount).
fn mount_fields(s: &str) -> Result<BTreeMap<String, String>, RunError> {
    let mut r = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(s.as_bytes());
    let rec = r
        .records()
        .next()
        .and_then(Result::ok)
        .ok_or_else(|| untranslatable("--mount", s))?;
    let mut m = BTreeMap::new();
    for f in rec.iter() {
        match f.split_once('=') {
            Some((k, v)) => m.insert(k.to_owned(), v.to_owned()),
            None => m.insert(f.to_owned(), "true".to_owned()),
        };
    }
    Ok(m)
}

fn untranslatable(flag: &str, value: &str) -> RunError {
    RunError::Usage(format!(
        "show-run: docker's {flag} {value:?} has no Kubernetes translation in this sbx-run (a bug: report it)"
    ))
}

/// Where a pod mount's content comes from.
#[derive(Debug, Clone, PartialEq)]
enum From {
    /// The clone, or a path in it (subPath).
    Workspace(Option<String>),
    /// A claim (its template name, its size).
    Claim(&'static str, &'static str),
    /// A key of the sandbox's ConfigMap.
    File(String),
    /// A directory of ConfigMap keys (key, file name).
    Dir(Vec<(String, String)>),
    /// A read-only empty directory (a mask).
    EmptyDir,
    /// A fresh emptyDir of its own (name, medium, size).
    Scratch(&'static str, Option<&'static str>, Option<String>),
}

#[derive(Debug, Clone)]
struct Mount {
    from: From,
    target: String,
    readonly: bool,
}

/// The main container and what the objects around it need, from the argv.
#[derive(Debug, Default)]
struct Translated {
    name: String,
    labels: BTreeMap<String, String>,
    caps_add: Vec<String>,
    caps_drop: Vec<String>,
    no_new_privs: bool,
    user: Option<(i64, i64)>,
    entrypoint: Option<String>,
    stop_timeout: Option<i64>,
    memory: Option<u64>,
    memory_swap: Option<u64>,
    cpus: Option<f64>,
    pids: Option<i64>,
    mounts: Vec<Mount>,
    env: Vec<(String, String)>,
    workdir: Option<String>,
    image: String,
    args: Vec<String>,
    files: BTreeMap<String, String>,
}

fn tmpfs(v: &str) -> Result<Mount, RunError> {
    let (target, opts) = v.split_once(':').unwrap_or((v, ""));
    let size = opts
        .split(',')
        .find_map(|o| o.strip_prefix("size="))
        .map(|s| match s.strip_suffix('m') {
            Some(n) => format!("{n}Mi"),
            None => s.to_owned(),
        });
    Ok(Mount {
        from: From::Scratch("tmpfs", Some("Memory"), size),
        target: target.to_owned(),
        readonly: false,
    })
}

fn translate(
    ws: &Workspace,
    argv: &[String],
    masks: (&Path, &Path),
) -> Result<Translated, RunError> {
    let mut t = Translated::default();
    let mut it = argv.iter().map(String::as_str);
    if it.next() != Some("run") {
        return Err(untranslatable("run", argv.first().map_or("", |s| s)));
    }
    let state = spec::state_dir();
    let image = loop {
        let Some(flag) = it.next() else {
            return Err(untranslatable("run", "(no image)"));
        };
        if !flag.starts_with("--") {
            break flag;
        }
        if flag == "--detach" {
            continue;
        }
        let v = it.next().ok_or_else(|| untranslatable(flag, ""))?;
        let num = |v: &str| v.parse::<i64>().map_err(|_| untranslatable(flag, v));
        match flag {
            "--name" => t.name = v.to_owned(),
            "--label" => {
                let (k, val) = v.split_once('=').unwrap_or((v, ""));
                t.labels.insert(k.to_owned(), val.to_owned());
            }
            "--cap-add" => t.caps_add.push(v.to_owned()),
            "--cap-drop" => t.caps_drop.push(v.to_owned()),
            "--security-opt" if v == "no-new-privileges" => t.no_new_privs = true,
            "--user" => {
                let (u, g) = v.split_once(':').unwrap_or((v, v));
                t.user = Some((num(u)?, num(g)?));
            }
            "--entrypoint" => t.entrypoint = Some(v.to_owned()),
            "--stop-timeout" => t.stop_timeout = Some(num(v)?),
            "--memory" => t.memory = Some(num(v)? as u64),
            "--memory-swap" => t.memory_swap = Some(num(v)? as u64),
            "--cpus" => t.cpus = Some(v.parse().map_err(|_| untranslatable(flag, v))?),
            "--pids-limit" => t.pids = Some(num(v)?),
            // The holder's namespace: on a cluster, the pod's own.
            "--network" if v.starts_with("container:") => {}
            "--mount" => {
                if let Some(m) = mount(ws, &mount_fields(v)?, masks, &state, &mut t.files)? {
                    t.mounts.push(m);
                }
            }
            "--tmpfs" => t.mounts.push(tmpfs(v)?),
            "--env" => match v.split_once('=') {
                Some((k, val)) => t.env.push((k.to_owned(), val.to_owned())),
                // A host variable's value: a pod has no host environment
                // (refused as [environment] keys before this).
                None => return Err(untranslatable(flag, v)),
            },
            "--workdir" => t.workdir = Some(v.to_owned()),
            _ => return Err(untranslatable(flag, v)),
        }
    };
    t.image = image.to_owned();
    t.args = it.map(str::to_owned).collect();
    // The same memory with and without swap: no swap, a pod's default.
    if t.memory_swap.is_some() && t.memory_swap != t.memory {
        return Err(untranslatable(
            "--memory-swap",
            &format!("{:?}", t.memory_swap),
        ));
    }
    Ok(t)
}

/// One docker mount as a pod mount. `None`: nothing to mount on a cluster
/// (the sandbox's host directory holds the status and audit log, which
/// the server reads through the guest API there).
fn mount(
    ws: &Workspace,
    f: &BTreeMap<String, String>,
    masks: (&Path, &Path),
    state: &Path,
    files: &mut BTreeMap<String, String>,
) -> Result<Option<Mount>, RunError> {
    let get = |k: &str| f.get(k).cloned().unwrap_or_default();
    let target = get("target");
    let readonly = f.contains_key("readonly");
    let raw = format!("{f:?}");
    let from = match get("type").as_str() {
        "volume" => match claim_for(ws, &get("source")) {
            Some((name, size)) => From::Claim(name, size),
            None => return Err(untranslatable("--mount", &raw)),
        },
        "bind" => {
            let src = PathBuf::from(get("source"));
            let under = |base: &Path| {
                src.strip_prefix(base)
                    .ok()
                    .map(|r| r.to_string_lossy().into_owned())
            };
            let in_ws = under(&ws.path).or_else(|| under(&ws.mount_source()));
            if src == masks.0 {
                files.insert("empty".into(), String::new());
                From::File("empty".into())
            } else if src == masks.1 {
                From::EmptyDir
            } else if let Some(rel) = in_ws {
                if target == "/.agent-sandbox" {
                    config_file(ws, files)?
                } else if rel.is_empty() {
                    From::Workspace(None)
                } else {
                    From::Workspace(Some(rel))
                }
            } else if target.starts_with("/.agent-sandbox/") {
                config_file(ws, files)?
            } else if src == spec::host_dir(&ws.names.container) {
                From::Scratch("host", None, None)
            } else if src == ws.scratch_source() {
                From::Scratch("scratch", None, None)
            } else if let Some(items) = managed(ws, &src, files) {
                From::Dir(items)
            } else if src.starts_with(state) && src.is_file() {
                // sbx's own files (the commondir mask), keyed by where
                // they go, so the key is the same on every host.
                let text =
                    std::fs::read_to_string(&src).map_err(|e| RunError::Io(src.clone(), e))?;
                let key = format!("f-{}", crate::names::digest(target.as_bytes()));
                files.insert(key.clone(), text);
                From::File(key)
            } else {
                return Err(untranslatable("--mount", &raw));
            }
        }
        _ => return Err(untranslatable("--mount", &raw)),
    };
    Ok(Some(Mount {
        from,
        target,
        readonly,
    }))
}

/// `[tools]`'s managed files (toolpolicy.rs): the directory `start`
/// writes them into, as ConfigMap keys and their file names.
fn managed(
    ws: &Workspace,
    src: &Path,
    files: &mut BTreeMap<String, String>,
) -> Option<Vec<(String, String)>> {
    let dir = crate::toolpolicy::host_dir(&ws.names.container);
    let ((sub, name, _), text) = crate::toolpolicy::files(ws)
        .into_iter()
        .find(|((sub, _, _), _)| src == dir.join(sub))?;
    let key = format!("{sub}.{name}");
    files.insert(key.clone(), text?);
    Some(vec![(key, name.to_owned())])
}

/// The loaded config, as the ConfigMap's key (the file the guest reads).
fn config_file(ws: &Workspace, files: &mut BTreeMap<String, String>) -> Result<From, RunError> {
    use sbx_core::config::Source;
    let (name, text) = match &ws.loaded.source {
        Source::File(p) => ("config.toml", Some(p)),
        Source::Legacy(p) => ("config.json", Some(p)),
        Source::Default => ("config.toml", None),
    };
    let text = match text {
        Some(p) => std::fs::read_to_string(p).map_err(|e| RunError::Io(p.clone(), e))?,
        None => String::new(),
    };
    files.insert(name.into(), text);
    Ok(From::File(format!("/{name}")))
}

fn quantity_cpu(c: f64) -> String {
    let m = (c * 1000.0).round() as i64;
    if m % 1000 == 0 {
        (m / 1000).to_string()
    } else {
        format!("{m}m")
    }
}

fn obj(
    kind: &str,
    api: &str,
    name: &str,
    labels: &Value,
    annotations: Option<&Value>,
) -> Map<String, Value> {
    let mut meta = json!({"name": name, "labels": labels});
    if let Some(a) = annotations {
        meta["annotations"] = a.clone();
    }
    let mut m = Map::new();
    m.insert("apiVersion".into(), json!(api));
    m.insert("kind".into(), json!(kind));
    m.insert("metadata".into(), meta);
    m
}

/// The manifests for `ws`, from `s` (spec::build with `show_names`, no
/// host variables). Config refused here fails before anything prints.
pub fn manifests(
    ws: &Workspace,
    s: &Spec,
    masks: (&Path, &Path),
    o: &Options,
) -> Result<Vec<Value>, RunError> {
    let cfg = &ws.loaded.config;
    refuse(ws)?;
    let branch = ws.branch.clone().ok_or_else(|| {
        RunError::Usage("show-run --format k8s: the checkout is on no branch (a detached HEAD): give --branch B".into())
    })?;
    let t = translate(ws, &s.run, masks)?;
    let name = object_name(&t.name);
    let target = ws.target();

    let labels = json!({
        PART_OF.0: PART_OF.1,
        "sbx.dev/workspace-hash": ws.names.hash,
        "sbx.dev/sandbox": name,
    });
    // Docker's labels hold paths: annotations take any text.
    let annotations: Map<String, Value> = t
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .chain([("sbx.dev/repo".to_owned(), json!(o.repo))])
        .chain(
            t.pids
                .map(|p| ("sbx.dev/pids-limit".to_owned(), json!(p.to_string()))),
        )
        .collect();
    let annotations = Value::Object(annotations);
    let cm_name = format!("{name}-files");

    // Volumes and mounts.
    let mut volumes: Vec<Value> = Vec::new();
    let mut claims: Vec<(&'static str, &'static str)> = Vec::new();
    let mut mounts: Vec<Value> = Vec::new();
    let add_volume = |volumes: &mut Vec<Value>, v: Value| {
        if !volumes.iter().any(|x| x["name"] == v["name"]) {
            volumes.push(v);
        }
    };
    add_volume(
        &mut volumes,
        json!({"name": WORKSPACE_VOLUME, "emptyDir": {}}),
    );
    // Mount points the clone must hold for mounts inside the workspace
    // (a read-only workspace cannot get them made at mount time).
    let mut points: Vec<String> = Vec::new();
    for m in &t.mounts {
        let mut vm = json!({"mountPath": m.target});
        if m.readonly {
            vm["readOnly"] = json!(true);
        }
        if let Some(rel) = m.target.strip_prefix(&format!("{target}/")) {
            let dir = !matches!(&m.from, From::File(_))
                && !matches!(&m.from, From::Workspace(Some(r)) if ws.path.join(r).is_file());
            points.push(format!("{}:{rel}", if dir { "d" } else { "f" }));
        }
        match &m.from {
            From::Workspace(sub) => {
                vm["name"] = json!(WORKSPACE_VOLUME);
                if let Some(sub) = sub {
                    vm["subPath"] = json!(sub);
                }
            }
            From::Claim(c, size) => {
                vm["name"] = json!(c);
                if !claims.iter().any(|(n, _)| n == c) {
                    claims.push((c, size));
                }
            }
            From::File(key) => {
                vm["name"] = json!("files");
                match key.strip_prefix('/') {
                    // The config: a directory holding the one file.
                    Some(k) => {
                        if m.target != "/.agent-sandbox" {
                            vm["mountPath"] = json!("/.agent-sandbox");
                        }
                        vm["readOnly"] = json!(true);
                        add_volume(&mut volumes, config_volume(&cm_name, k));
                        vm["name"] = json!("config");
                    }
                    None => {
                        vm["subPath"] = json!(key);
                        add_volume(
                            &mut volumes,
                            json!({"name": "files", "configMap": {"name": cm_name, "defaultMode": 0o444}}),
                        );
                    }
                }
            }
            From::Dir(items) => {
                let vname = format!("files-{}", crate::names::digest(m.target.as_bytes()));
                let vname: String = vname.chars().take(40).collect();
                vm["name"] = json!(vname);
                vm["readOnly"] = json!(true);
                let items: Vec<Value> = items
                    .iter()
                    .map(|(k, p)| json!({"key": k, "path": p}))
                    .collect();
                add_volume(
                    &mut volumes,
                    json!({"name": vname, "configMap": {"name": cm_name, "items": items, "defaultMode": 0o444}}),
                );
            }
            From::EmptyDir => {
                vm["name"] = json!("empty-dir");
                vm["readOnly"] = json!(true);
                add_volume(
                    &mut volumes,
                    json!({"name": "empty-dir", "emptyDir": {"sizeLimit": "1Mi"}}),
                );
            }
            From::Scratch(n, medium, size) => {
                vm["name"] = json!(n);
                let mut e = json!({});
                if let Some(md) = medium {
                    e["medium"] = json!(md);
                }
                if let Some(sz) = size {
                    e["sizeLimit"] = json!(sz);
                }
                add_volume(&mut volumes, json!({"name": n, "emptyDir": e}));
            }
        }
        // Docker stacks a later mount on an earlier one at the same path.
        mounts.retain(|x: &Value| x["mountPath"] != vm["mountPath"]);
        mounts.push(vm);
    }
    add_volume(&mut volumes, json!({"name": "tmp", "emptyDir": {}}));

    // The guest's container: what `docker run` gives it.
    let (uid, gid) = t.user.unwrap_or((0, 0));
    let mut resources = json!({"limits": {}, "requests": {}});
    if let Some(m) = t.memory {
        resources["limits"]["memory"] = json!(m.to_string());
        resources["requests"]["memory"] = json!(m.to_string());
    }
    if let Some(c) = t.cpus {
        resources["limits"]["cpu"] = json!(quantity_cpu(c));
        resources["requests"]["cpu"] = json!(quantity_cpu(c));
    }
    let ports: Vec<Value> = cfg
        .sandbox
        .ports
        .0
        .iter()
        .map(|p| json!({"containerPort": p.container, "protocol": if p.udp { "UDP" } else { "TCP" }}))
        .collect();
    let mut main = json!({
        "name": "sandbox",
        "image": o.image,
        "imagePullPolicy": "IfNotPresent",
        "command": t.entrypoint.iter().collect::<Vec<_>>(),
        "args": t.args,
        "env": t.env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect::<Vec<_>>(),
        "workingDir": t.workdir,
        "resources": resources,
        "volumeMounts": mounts,
        "securityContext": {
            "runAsUser": uid,
            "runAsGroup": gid,
            "runAsNonRoot": uid != 0,
            "allowPrivilegeEscalation": !t.no_new_privs,
            // The guest writes /etc (the agent's passwd entry, resolv.conf)
            // and /run at its start: the base image is not read-only yet.
            "readOnlyRootFilesystem": false,
            "capabilities": {"drop": t.caps_drop, "add": t.caps_add},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    });
    if !ports.is_empty() {
        main["ports"] = json!(ports);
    }
    if t.workdir.is_none() {
        main.as_object_mut().map(|m| m.remove("workingDir"));
    }

    // Init containers, in order: seed the new claims from the image (what
    // docker does for a new volume), clone, then the firewall.
    let seeds: Vec<(String, String)> = t
        .mounts
        .iter()
        .filter_map(|m| match &m.from {
            From::Claim(c, _) => Some((m.target.clone(), format!("{SEED_ROOT}/{c}"))),
            _ => None,
        })
        .collect();
    let seed_mounts: Vec<Value> = seeds
        .iter()
        .zip(t.mounts.iter().filter_map(|m| match m.from {
            From::Claim(c, _) => Some(c),
            _ => None,
        }))
        .map(|((_, at), c)| json!({"name": c, "mountPath": at}))
        .collect();
    let mut seed_args = vec![SEED_SCRIPT.to_owned(), "sbx-seed".to_owned()];
    for (from, to) in &seeds {
        seed_args.push(from.clone());
        seed_args.push(to.clone());
    }
    let restricted = |user: i64, caps: &[&str], ro_root: bool| {
        json!({
            "runAsUser": user,
            "runAsGroup": user,
            "runAsNonRoot": user != 0,
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": ro_root,
            "capabilities": {"drop": ["ALL"], "add": caps},
            "seccompProfile": {"type": "RuntimeDefault"},
        })
    };
    let small = json!({"limits": {"memory": "512Mi", "cpu": "1"}, "requests": {"memory": "64Mi", "cpu": "100m"}});
    let seed = json!({
        "name": "seed",
        "image": o.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c"],
        "args": seed_args,
        "volumeMounts": seed_mounts,
        "resources": small,
        // cp -a as root: ownership (CHOWN), modes of what it does not own
        // (FOWNER), 0700 directories of the image (DAC_OVERRIDE).
        "securityContext": restricted(0, &["CHOWN", "FOWNER", "DAC_OVERRIDE"], true),
    });
    let mut clone_args = vec![
        CLONE_SCRIPT.to_owned(),
        "sbx-clone".to_owned(),
        o.repo.clone(),
        branch.clone(),
        target.clone(),
    ];
    clone_args.extend(points);
    let clone = json!({
        "name": "clone",
        "image": o.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c"],
        "args": clone_args,
        // No system or global git config: nothing of the image's or the
        // repository's runs (hooks, filters); HOME is an empty scratch.
        "env": [
            {"name": "HOME", "value": "/tmp"},
            {"name": "GIT_CONFIG_NOSYSTEM", "value": "1"},
            {"name": "GIT_CONFIG_GLOBAL", "value": "/dev/null"},
            {"name": "GIT_TERMINAL_PROMPT", "value": "0"},
        ],
        "volumeMounts": [
            {"name": WORKSPACE_VOLUME, "mountPath": target},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "resources": small,
        "securityContext": restricted(i64::from(AGENT_ID), &[], true),
    });
    // The rules live in the pod's network namespace: installed here,
    // before the guest's container exists. The guest runs init again (its
    // DNS filter and proxy live in its own container) and drops what it
    // keeps before the agent starts. Proxy mode: init starts the proxy,
    // which drops to its own uid.
    let mut fw_caps = vec!["NET_ADMIN", "NET_RAW"];
    if cfg.network.mode == sbx_core::config::NetMode::Proxy {
        fw_caps.extend(["SETUID", "SETGID"]);
    }
    let firewall = json!({
        "name": "firewall",
        "image": o.image,
        "imagePullPolicy": "IfNotPresent",
        "command": [FW, "init"],
        "volumeMounts": [
            {"name": "config", "mountPath": "/.agent-sandbox", "readOnly": true},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "resources": small,
        "securityContext": restricted(0, &fw_caps, false),
    });
    if !volumes.iter().any(|v| v["name"] == "config") {
        volumes.push(config_volume(&cm_name, "config.toml"));
    }

    let mut pod_spec = json!({
        "hostname": object_name(&format!("sbx-{}", ws.names.repo)).chars().take(63).collect::<String>(),
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": t.stop_timeout.unwrap_or(30),
        "securityContext": {
            "seccompProfile": {"type": "RuntimeDefault"},
            // What docker sets in a container's own network namespace: the
            // DNS filter binds 53 without CAP_NET_BIND_SERVICE.
            "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}],
        },
        "initContainers": [seed, clone, firewall],
        "containers": [main],
        "volumes": volumes,
    });
    let vcts: Vec<Value> = claims
        .iter()
        .map(|(c, size)| {
            json!({
                "metadata": {"name": c, "labels": labels},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
            })
        })
        .collect();
    let pod_meta = json!({"labels": labels, "annotations": annotations});

    let mut out = Vec::new();
    let mut files = t.files.clone();
    if !files.contains_key("config.toml") && !files.contains_key("config.json") {
        config_file(ws, &mut files)?;
    }
    let mut cm = obj("ConfigMap", "v1", &cm_name, &labels, None);
    cm.insert("data".into(), json!(files));
    cm.insert("immutable".into(), json!(true));
    out.push(Value::Object(cm));
    let np = network_policy(cfg);
    match o.format {
        Format::Sandbox => {
            let mut sb = obj("Sandbox", SANDBOX_API, &name, &labels, Some(&annotations));
            sb.insert(
                "spec".into(),
                json!({
                    "podTemplate": {"metadata": pod_meta, "spec": pod_spec},
                    "volumeClaimTemplates": vcts,
                }),
            );
            out.push(Value::Object(sb));
            out.push(network_policy_object(&name, &labels, np));
        }
        Format::Pod => {
            // The claims as the Sandbox controller names them
            // (<template>-<sandbox>), so either format finds the same data.
            let vols = pod_spec["volumes"].as_array_mut().expect("volumes");
            for (c, _) in &claims {
                vols.push(json!({"name": c, "persistentVolumeClaim": {"claimName": format!("{c}-{name}")}}));
            }
            for v in &vcts {
                let c = v["metadata"]["name"].as_str().unwrap_or_default();
                let mut pvc = obj(
                    "PersistentVolumeClaim",
                    "v1",
                    &format!("{c}-{name}"),
                    &labels,
                    None,
                );
                pvc.insert("spec".into(), v["spec"].clone());
                out.push(Value::Object(pvc));
            }
            let mut pod = obj("Pod", "v1", &name, &labels, Some(&annotations));
            pod.insert("spec".into(), pod_spec);
            out.push(Value::Object(pod));
            out.push(network_policy_object(&name, &labels, np));
        }
        Format::Template => {
            let mut tpl = obj(
                "SandboxTemplate",
                EXTENSIONS_API,
                &name,
                &labels,
                Some(&annotations),
            );
            tpl.insert(
                "spec".into(),
                json!({
                    "podTemplate": {"metadata": pod_meta, "spec": pod_spec},
                    "volumeClaimTemplates": vcts,
                    "networkPolicyManagement": "Managed",
                    "networkPolicy": {"ingress": np["ingress"], "egress": np["egress"]},
                }),
            );
            out.push(Value::Object(tpl));
            let mut pool = obj("SandboxWarmPool", EXTENSIONS_API, &name, &labels, None);
            pool.insert(
                "spec".into(),
                json!({"replicas": 1, "sandboxTemplateRef": {"name": name}}),
            );
            out.push(Value::Object(pool));
        }
    }
    Ok(out)
}

/// CSI snapshots' API (kubernetes-csi/external-snapshotter's CRDs).
pub const SNAPSHOT_API: &str = "snapshot.storage.k8s.io/v1";
/// The claims a snapshot on a cluster keeps: the home, the shelf (the
/// branch's worktree, its uncommitted work included: on a cluster the
/// workspace's only copy) and the git broker's record of the shelf's
/// stash and notes commits, which must go back with it. The history and
/// the AI CLIs' settings stay as they are, as docker's volumes do.
pub const SNAPSHOT_CLAIMS: [&str; 3] = ["home", "shelf", "git-record"];
/// The label naming a snapshot's id on its VolumeSnapshots.
pub const SNAPSHOT_LABEL: &str = "sbx.dev/snapshot";
/// The annotation holding a snapshot's tag (free text).
pub const SNAPSHOT_TAG: &str = "sbx.dev/snapshot-tag";

/// The VolumeSnapshot of `claim` in snapshot `id` of `sandbox`.
pub fn snapshot_name(sandbox: &str, id: &str, claim: &str) -> String {
    format!("{sandbox}-{id}-{claim}")
}

/// Snapshot `id` (tagged `tag`) of a Sandbox, the one `manifests` makes
/// or the cluster's: one `VolumeSnapshot` per claim of
/// [`SNAPSHOT_CLAIMS`] its templates have, of the claim the controller
/// made (`<template>-<sandbox>`), labelled as the Sandbox and with the
/// snapshot's id, in the cluster's default VolumeSnapshotClass.
pub fn volume_snapshots(sandbox: &Value, id: &str, tag: Option<&str>) -> Vec<Value> {
    let name = sandbox["metadata"]["name"].as_str().unwrap_or_default();
    let mut labels = sandbox["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({"sbx.dev/sandbox": name});
    }
    labels[SNAPSHOT_LABEL] = json!(id);
    let annotations = tag.map(|t| json!({SNAPSHOT_TAG: t}));
    snapshot_claims(sandbox)
        .into_iter()
        .map(|claim| {
            let mut l = labels.clone();
            l["sbx.dev/claim"] = json!(claim);
            let mut vs = obj(
                "VolumeSnapshot",
                SNAPSHOT_API,
                &snapshot_name(name, id, &claim),
                &l,
                annotations.as_ref(),
            );
            vs.insert(
                "spec".into(),
                json!({"source": {"persistentVolumeClaimName": format!("{claim}-{name}")}}),
            );
            Value::Object(vs)
        })
        .collect()
}

/// Which of [`SNAPSHOT_CLAIMS`] the Sandbox's templates have.
pub fn snapshot_claims(sandbox: &Value) -> Vec<String> {
    let have: Vec<&str> = sandbox["spec"]["volumeClaimTemplates"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter_map(|t| t["metadata"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    SNAPSHOT_CLAIMS
        .iter()
        .filter(|c| have.contains(c))
        .map(|c| (*c).to_owned())
        .collect()
}

/// `docs` (any format) made to start from snapshot `id`: each claim of
/// `claims` is made from its VolumeSnapshot (`dataSource`), in the
/// Sandbox's `volumeClaimTemplates` or the plain Pod's claims. Only a
/// claim made anew reads it: the claims must not exist (the caller
/// deletes them, and the Sandbox, whose templates are immutable).
pub fn from_snapshot(docs: &mut [Value], id: &str, claims: &[String]) {
    let source = |sandbox: &str, claim: &str| {
        json!({"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot",
               "name": snapshot_name(sandbox, id, claim)})
    };
    for d in docs.iter_mut() {
        match d["kind"].as_str() {
            Some("Sandbox" | "SandboxTemplate") => {
                let name = d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                if let Some(ts) = d["spec"]["volumeClaimTemplates"].as_array_mut() {
                    for t in ts {
                        let c = t["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned();
                        if claims.contains(&c) {
                            t["spec"]["dataSource"] = source(&name, &c);
                        }
                    }
                }
            }
            Some("PersistentVolumeClaim") => {
                let pvc = d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let sandbox = d["metadata"]["labels"]["sbx.dev/sandbox"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                if let Some(c) = claims.iter().find(|c| pvc == format!("{c}-{sandbox}")) {
                    d["spec"]["dataSource"] = source(&sandbox, c);
                }
            }
            _ => {}
        }
    }
}

/// The ConfigMap's config file as a directory of that one file.
fn config_volume(cm_name: &str, key: &str) -> Value {
    json!({"name": "config", "configMap": {"name": cm_name, "items": [{"key": key, "path": key}], "defaultMode": 0o444}})
}

/// Ingress from sbx-server's pods alone, on the published ports (none:
/// the server reaches the guest through the API server's exec); egress
/// anywhere but the private, link-local (metadata) and reserved ranges
/// sbx-fw never allows, and DNS to the cluster's resolver.
pub fn network_policy(cfg: &sbx_core::config::Config) -> Value {
    use sbx_core::netblock::{NEVER4, NEVER6};
    let ports: Vec<Value> = cfg
        .sandbox
        .ports
        .0
        .iter()
        .map(|p| json!({"port": p.container, "protocol": if p.udp { "UDP" } else { "TCP" }}))
        .collect();
    let mut from = json!({"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {SERVER_LABEL.0: SERVER_LABEL.1}}}]});
    let ingress = if ports.is_empty() {
        Vec::new()
    } else {
        from["ports"] = json!(ports);
        vec![from]
    };
    json!({
        "podSelector": {},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": ingress,
        "egress": [
            {"to": [
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": NEVER4}},
                {"ipBlock": {"cidr": "::/0", "except": NEVER6}},
            ]},
            {
                "to": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }],
                "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
            },
        ],
    })
}

fn network_policy_object(name: &str, labels: &Value, mut spec: Value) -> Value {
    spec["podSelector"] = json!({"matchLabels": {"sbx.dev/sandbox": name}});
    let mut np = obj("NetworkPolicy", "networking.k8s.io/v1", name, labels, None);
    np.insert("spec".into(), spec);
    Value::Object(np)
}

/// The seeding init container's script: each claim that is new (empty,
/// but for a filesystem's lost+found) gets a copy of the image's content
/// at its target, owners and modes kept, as docker fills a new volume.
/// Arguments: pairs of (image path, claim mount).
const SEED_SCRIPT: &str = r#"set -eu
while [ $# -ge 2 ]; do
  src=$1 dst=$2; shift 2
  if [ -z "$(ls -A "$dst" | grep -vx lost+found || true)" ] && [ -d "$src" ]; then
    cp -a "$src/." "$dst/"
  fi
done"#;

/// The clone init container's script: the repository on the branch
/// (branch mode provisions the agent's worktree from it), then the mount points the pod's
/// mounts inside the workspace need (`d:PATH` a directory, `f:PATH` a
/// file), made only where missing. Names are arguments, never code.
const CLONE_SCRIPT: &str = r#"set -eu
repo=$1 branch=$2 dir=$3; shift 3
[ -e "$dir/.git" ] || git clone --no-recurse-submodules --branch "$branch" -- "$repo" "$dir"
cd "$dir"
for p in "$@"; do
  rel=${p#?:}
  [ -e "$rel" ] || [ -L "$rel" ] && continue
  mkdir -p -- "$(dirname -- "$rel")"
  case $p in d:*) mkdir -- "$rel" ;; *) : > "$rel" ;; esac
done"#;

/// Manifests as YAML documents, every string value double-quoted: a YAML
/// 1.1 reader (kubectl's) takes a bare `y`, `on` or `1_000` for a bool or
/// a number.
pub fn yaml(docs: &[Value]) -> String {
    let mut out = String::new();
    for d in docs {
        let mut text = String::new();
        let mut e = saphyr::YamlEmitter::new(&mut text);
        e.quoted_value(true);
        // Cannot fail on a String writer.
        let _ = e.dump(&to_yaml(d));
        out.push_str(&text);
        out.push('\n');
    }
    out
}

fn to_yaml(v: &Value) -> saphyr::Yaml<'static> {
    use saphyr::{Scalar, Yaml};
    match v {
        Value::Null => Yaml::Value(Scalar::Null),
        Value::Bool(b) => Yaml::Value(Scalar::Boolean(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Yaml::Value(Scalar::Integer(i)),
            None => Yaml::Value(Scalar::FloatingPoint(n.as_f64().unwrap_or_default().into())),
        },
        Value::String(s) => Yaml::Value(Scalar::String(s.clone().into())),
        Value::Array(a) => Yaml::Sequence(a.iter().map(to_yaml).collect()),
        Value::Object(m) => Yaml::Mapping(
            m.iter()
                .map(|(k, v)| (Yaml::Value(Scalar::String(k.clone().into())), to_yaml(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_dns_labels_keeping_the_hash() {
        assert_eq!(
            object_name("agent-sandbox-my_repo.x-0123abcd"),
            "agent-sandbox-my-repo-x-0123abcd"
        );
        let long = format!("agent-sandbox-{}-feature-0123456789abcdef", "a".repeat(60));
        let n = object_name(&long);
        assert!(n.len() <= 63, "{n}");
        assert!(n.ends_with("0123456789abcdef"), "{n}");
    }

    #[test]
    fn cpus_are_quantities() {
        assert_eq!(quantity_cpu(2.0), "2");
        assert_eq!(quantity_cpu(1.5), "1500m");
        assert_eq!(quantity_cpu(0.01), "10m");
    }
}
