//! The smaller commands (doctor, log, codex-init-config, codex-logout) and
//! the interrupt flag that lets long work clean up after Ctrl-C.

use std::io::{Read, Seek, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use sbx_core::cli::CommonArgs;
use sbx_core::error::BoxError;
use sbx_core::{Exit, output};
use serde_json::Value;

use crate::names::BASE_IMAGE;
use crate::{RunError, docker};

pub use sbx_image::{ci, interrupted, watch_interrupts};

type Res = Result<ExitCode, BoxError>;

/// Each check: what, ok, how to fix.
pub fn doctor(common: &CommonArgs, path: Option<PathBuf>) -> Res {
    let mut checks: Vec<(String, bool, String)> = Vec::new();
    // The workspace here (or -C PATH): can the agent write it?
    if let Ok(root) = crate::workspace::resolve(path) {
        let ws = crate::workspace::Workspace::with_config(
            root.clone(),
            sbx_core::config::Loaded {
                config: Default::default(),
                source: sbx_core::config::Source::Default,
            },
        );
        let (u, g) = ws.owner;
        let what = format!(
            "workspace {} (owner {u}:{g}) writable by the agent",
            root.display()
        );
        if ws.idmapped() {
            let r = idmap_probe(&root);
            checks.push((what, r.is_ok(), r.err().unwrap_or_default()));
        } else {
            checks.push((what, true, String::new()));
        }
    }
    let client = docker::probe(&["version", "--format", "{{.Client.Version}}"]);
    checks.push((
        "docker client".into(),
        client.is_ok(),
        "bash scripts/prereqs (installs docker.io)".into(),
    ));
    let engine = docker::require_engine();
    checks.push((
        "Docker engine answers".into(),
        engine.is_ok(),
        "bash scripts/prereqs (starts it)".into(),
    ));
    let kernel = |p: &str| std::path::Path::new(p).exists();
    checks.push((
        "kernel: network namespaces".into(),
        kernel("/proc/self/ns/net"),
        "a kernel with CONFIG_NET_NS".into(),
    ));
    checks.push((
        "kernel: netfilter (for sbx-fw)".into(),
        kernel("/proc/sys/net/netfilter") || kernel("/proc/net/ip_tables_names"),
        "load the modules: modprobe ip_tables ip6_tables xt_set".into(),
    ));
    checks.push((
        "kernel: cgroups (memory, cpu, pids limits)".into(),
        kernel("/sys/fs/cgroup"),
        "mount cgroups (systemd does)".into(),
    ));
    if engine.is_ok() {
        checks.push((
            format!("image {BASE_IMAGE}:latest"),
            docker::exists("image", &format!("{BASE_IMAGE}:latest")).unwrap_or(false),
            "bash scripts/shell (or sbx-run build-base --bootstrap)".into(),
        ));
    }
    checks.push((
        "mmdebstrap (for build-base --bootstrap)".into(),
        ["/usr/bin/mmdebstrap", "/usr/sbin/mmdebstrap"]
            .iter()
            .any(|p| kernel(p)),
        "bash scripts/prereqs (installs mmdebstrap)".into(),
    ));
    let mut out = std::io::stdout().lock();
    let mut all = true;
    for (what, good, fix) in &checks {
        all &= good;
        let r = if common.json {
            output::json_line(
                &mut out,
                "check",
                &serde_json::json!({"check": what, "ok": good, "fix": fix}),
            )
        } else if *good {
            writeln!(out, "ok    {what}")
        } else {
            writeln!(out, "FAIL  {what}: {fix}")
        };
        r.map_err(|e| RunError::Io("stdout".into(), e))?;
    }
    Ok(if all { Exit::Ok } else { Exit::No }.into())
}

/// Make and drop an idmapped view of `root`, as start would.
fn idmap_probe(root: &std::path::Path) -> Result<(), String> {
    let dir = tempfile::Builder::new()
        .prefix("sbx-doctor-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let a = crate::workspace::AGENT_ID;
    let m = sbx_sys::idmap::swap(a, 0);
    match sbx_sys::idmap::bind(root, dir.path(), &m, &m) {
        Ok(()) => {
            let _ = sbx_sys::idmap::detach(dir.path());
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(format!(
            "an idmapped mount needs root: run sbx-run as root, or `chown -R {a}:{a} {}`",
            root.display()
        )),
        Err(e) => Err(format!(
            "this filesystem cannot make an idmapped mount ({e}): move the repository to ext4, xfs, btrfs or tmpfs, or `chown -R {a}:{a} {}`",
            root.display()
        )),
    }
}

#[derive(Debug, Clone, Args)]
pub struct LogOpts {
    /// Only records whose result is "blocked".
    #[arg(long)]
    pub blocked_only: bool,
    /// Keep reading as records are appended.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Read only this file (default: the host's audit log merged in time
    /// order with every sandbox's, which their guests keep on the host;
    /// a sandbox record's tool is marked with *).
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
}

fn print_record(
    common: &CommonArgs,
    opts: &LogOpts,
    line: &str,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        output::warn("skipping a malformed audit record");
        return Ok(());
    };
    if opts.blocked_only && v["result"] != "blocked" {
        return Ok(());
    }
    if common.json {
        return output::json_line(out, "audit", &v);
    }
    // Every field can come from a sandbox's log: escaped for the terminal.
    let s = |k: &str| sbx_core::sanitize::field(v[k].as_str().unwrap_or("")).into_owned();
    let tool = match v["origin"].as_str() {
        Some(_) => format!("{}*", s("tool")),
        None => s("tool"),
    };
    // The sender as the guest's sink saw it: a record's tool name is the
    // sender's claim; its uid, and the binary the sink verified, are not.
    // First on the line, before every field the sender wrote: at the end,
    // a forged record's padded target pushed it onto a wrapped line of its
    // own, after a fake tag of the sender's choosing (a38).
    let mut text = String::new();
    if let Some(uid) = v["peer"]["uid"].as_u64() {
        match v["peer"]["source"].as_str() {
            Some(src) => {
                let src = sbx_core::sanitize::field(src);
                text.push_str(&format!("[{src}, uid {uid}] "));
            }
            None if uid == 0 => text.push_str("[uid 0] "),
            None => text.push_str(&format!("[uid {uid}, unverified] ")),
        }
    }
    text.push_str(&format!(
        "{} {:<14} {:<8} {:<20} {}",
        s("timestamp"),
        tool,
        s("result"),
        s("policy"),
        s("target")
    ));
    if let Some(r) = v["reason"].as_str() {
        text.push_str(&format!(" ({})", sbx_core::sanitize::field(r)));
    }
    writeln!(out, "{text}")
}

/// One log being read: where, how far, and whose.
struct Source {
    path: PathBuf,
    offset: u64,
    pending: String,
    /// The sandbox's container name, for records from inside one.
    origin: Option<String>,
}

impl Source {
    /// Complete new lines since the last read; a truncated or replaced
    /// log starts over.
    fn read_new(&mut self) -> std::io::Result<Vec<String>> {
        let mut file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        if len < self.offset {
            self.offset = 0;
            self.pending.clear();
        }
        file.seek(std::io::SeekFrom::Start(self.offset))?;
        let mut chunk = String::new();
        file.read_to_string(&mut chunk)?;
        self.offset += chunk.len() as u64;
        self.pending.push_str(&chunk);
        let mut out = Vec::new();
        while let Some(i) = self.pending.find('\n') {
            let line: String = self.pending.drain(..=i).collect();
            out.push(line.trim_end().to_owned());
        }
        Ok(out)
    }
}

/// The host's log and every sandbox's (the guests write them into their
/// host directories), or just `--file`.
fn sources(opts: &LogOpts) -> Vec<Source> {
    let src = |path: PathBuf, origin: Option<String>| Source {
        path,
        offset: 0,
        pending: String::new(),
        origin,
    };
    if let Some(f) = &opts.file {
        return vec![src(f.clone(), None)];
    }
    let mut v = vec![src(sbx_core::audit::default_path(), None)];
    let dir = crate::spec::state_dir().join("sandboxes");
    if let Ok(rd) = std::fs::read_dir(&dir) {
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for n in names {
            v.push(src(dir.join(&n).join("audit.jsonl"), Some(n)));
        }
    }
    v
}

/// Records from every source, merged in time order (RFC 3339 UTC stamps
/// sort as text; equal stamps keep their order within a source).
pub fn log(common: &CommonArgs, opts: &LogOpts) -> Res {
    let mut sources = sources(opts);
    if !opts.follow && sources.iter().all(|s| !s.path.exists()) {
        output::info(&format!("{}: no audit log yet", sources[0].path.display()));
        return Ok(Exit::Ok.into());
    }
    let mut out = std::io::stdout().lock();
    loop {
        let mut batch: Vec<(String, String)> = Vec::new();
        for s in sources.iter_mut() {
            let lines = s.read_new().map_err(|e| RunError::Io(s.path.clone(), e))?;
            for line in lines {
                let line = match (&s.origin, serde_json::from_str::<Value>(&line)) {
                    (Some(o), Ok(Value::Object(mut m))) => {
                        m.insert("origin".into(), Value::String(o.clone()));
                        Value::Object(m).to_string()
                    }
                    _ => line,
                };
                let ts = serde_json::from_str::<Value>(&line)
                    .ok()
                    .and_then(|v| v["timestamp"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                batch.push((ts, line));
            }
        }
        batch.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, line) in &batch {
            print_record(common, opts, line, &mut out)
                .map_err(|e| RunError::Io("stdout".into(), e))?;
        }
        if !opts.follow || interrupted() {
            break;
        }
        out.flush().map_err(|e| RunError::Io("stdout".into(), e))?;
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(Exit::Ok.into())
}

const CODEX_CONFIG: &str = "[profiles.high]\nmodel = \"gpt-5\"\n# Constrains reasoning effort for reasoning-capable models\nreasoning_effort = \"high\"\n";
const CODEX_AGENTS: &str = "# Sandbox notes\n\n\
- Purpose: You are running inside a containerized sandbox (agent-sandbox) designed to provide a safe, auditable coding environment with network/filesystem guardrails.\n\
- Persistence: `~/.codex` is a Docker volume of this repository's sandbox; only the login is shared with other sandboxes.\n\
- Installed tools: ast-grep (`ast-grep` / `sg`) for structural search and rewrites. Additional tools may be added over time.\n";

/// Run a short script as the agent in a throwaway base-image container
/// with the Codex store at /codex (and `extra` volumes). A store Docker
/// creates on first use is root-owned: the helper hands it to the agent.
fn in_codex_volume(
    script: &str,
    stdin: Option<&[u8]>,
    extra: &[(String, String)],
) -> Result<String, RunError> {
    docker::require_engine()?;
    let image = format!("{BASE_IMAGE}:latest");
    if !docker::exists("image", &image)? {
        return Err(RunError::Usage(format!(
            "{image} is missing: run `sbx-run build-base` first"
        )));
    }
    let mut mounts = vec![(crate::names::codex_store(), "/codex".to_owned())];
    mounts.extend(extra.iter().cloned());
    crate::login::helper(&image, &mounts, script, stdin)
}

fn shq(s: &str) -> String {
    shlex::try_quote(s)
        .map(|c| c.into_owned())
        .unwrap_or_default()
}

pub fn codex_init_config(common: &CommonArgs, auth: bool, force: bool) -> Res {
    // Each file: written when missing, or always with --force.
    let mut script = String::from("set -e\ncd /codex\n");
    for (name, text) in [("config.toml", CODEX_CONFIG), ("AGENTS.md", CODEX_AGENTS)] {
        let write = format!("printf %s {} > {name}", shq(text));
        if force {
            script.push_str(&format!("{write}; echo wrote {name}\n"));
        } else {
            script.push_str(&format!(
                "if [ -e {name} ]; then echo kept {name}; else {write}; echo wrote {name}; fi\n"
            ));
        }
    }
    let mut payload = Vec::new();
    if auth {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        let auth_file = home.join(".codex/auth.json");
        let data = std::fs::read(&auth_file).map_err(|e| RunError::Io(auth_file.clone(), e))?;
        // auth.json is always replaced with --auth; profile.json only when present.
        payload.extend_from_slice(&data);
        script.push_str(&format!(
            "head -c {} > auth.json; chmod 600 auth.json; echo wrote auth.json\n",
            data.len()
        ));
        let profile = home.join(".codex/profile.json");
        if let Ok(p) = std::fs::read(&profile) {
            payload.extend_from_slice(&p);
            let cond = if force {
                "true"
            } else {
                "[ ! -e profile.json ]"
            };
            script.push_str(&format!(
                "if {cond}; then head -c {n} > profile.json; echo wrote profile.json; else head -c {n} >/dev/null; echo kept profile.json; fi\n",
                n = p.len()
            ));
        }
    }
    let out = in_codex_volume(&script, Some(&payload), &[])?;
    file_actions(common, &out)?;
    Ok(Exit::Ok.into())
}

/// Print a helper script's `VERB PATH` lines (wrote, kept, removed,
/// shared): as they are, or with --json one `file` object each.
pub fn file_actions(common: &CommonArgs, text: &str) -> Result<(), RunError> {
    if common.quiet {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    for line in text.lines() {
        let r = if common.json {
            let (action, path) = line.split_once(' ').unwrap_or(("", line));
            output::json_line(
                &mut out,
                "file",
                &serde_json::json!({"action": action, "path": path}),
            )
        } else {
            writeln!(out, "{line}")
        };
        r.map_err(|e| RunError::Io("stdout".into(), e))?;
    }
    Ok(())
}

pub fn codex_logout(common: &CommonArgs) -> Res {
    // Every workspace's copy too, or the next start would store it again.
    let ws_volumes =
        docker::output(&["volume", "ls", "--quiet", "--filter", "label=sbx.workspace"])?;
    let extra: Vec<(String, String)> = ws_volumes
        .split_whitespace()
        .filter(|v| v.starts_with("agent-sandbox-") && v.ends_with("-codex"))
        .enumerate()
        .map(|(i, v)| (v.to_owned(), format!("/w/{i}")))
        .collect();
    let out = in_codex_volume(
        "for d in /codex /w/*; do [ -d \"$d\" ] || continue; for f in auth.json profile.json; do if [ -e \"$d/$f\" ] || [ -L \"$d/$f\" ]; then rm -f \"$d/$f\"; echo removed \"$d/$f\"; fi; done; done",
        None,
        &extra,
    )?;
    file_actions(common, &out)?;
    if !common.quiet && !common.json {
        println!("(server-side tokens are not revoked)");
    }
    Ok(Exit::Ok.into())
}
