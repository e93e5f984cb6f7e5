//! The real side effects (iptables-restore, sbx-fw, fork/exec, kill,
//! waitpid, signalfd) and the guest's main loop that drives the pure parts.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use sbx_core::audit::Outcome as AuditOutcome;

use crate::Paths;
use crate::boot::{self, Effects, ToolOut};
use crate::config::{self, Agent, User};
use crate::init::{ChildSpec, Ended, Procs, Supervisor};
use crate::sink::{self, LogFile, UnixTransport};
use crate::status::{self, State, Status};

/// Signals the guest handles; blocked in every thread, read from a signalfd.
fn handled() -> SigSet {
    let mut s = SigSet::empty();
    for sig in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGWINCH,
    ] {
        s.add(sig);
    }
    s
}

/// The iptables backend, chosen as sbx-fw chooses it (apply.rs `backend`),
/// so the pre-block and sbx-fw's rules live in the same tables.
pub fn restore_programs() -> (&'static str, &'static str) {
    let legacy = ("iptables-legacy-restore", "ip6tables-legacy-restore");
    let system = ("iptables-restore", "ip6tables-restore");
    match std::env::var("SBX_FW_BACKEND").as_deref() {
        Ok("legacy") => return legacy,
        Ok("system" | "nft") => return system,
        _ => {}
    }
    let state = fw_state_dir().join("state.json");
    if let Ok(text) = std::fs::read_to_string(state) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            match v["backend"].as_str() {
                Some("legacy") => return legacy,
                Some("system") => return system,
                _ => {}
            }
        }
    }
    let kernel = Path::new("/proc/net/ip_tables_names").exists()
        && (!has_ipv6() || Path::new("/proc/net/ip6_tables_names").exists());
    if kernel && which(legacy.0).is_some() && which(legacy.1).is_some() {
        legacy
    } else {
        system
    }
}

fn fw_state_dir() -> PathBuf {
    std::env::var_os("SBX_FW_STATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/sbx-fw"))
}

/// The supervised service that is sbx-fw's proxy in `[network] mode = "proxy"`.
pub const PROXY_SVC: &str = "sbx-fw-proxy";

/// In proxy mode (sbx-fw's state says so): Some, with the pid of the proxy
/// `sbx-fw init` left running, if it still runs.
fn fw_proxy() -> Option<Option<i32>> {
    let dir = fw_state_dir();
    let text = std::fs::read_to_string(dir.join("state.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    if v["proxy"] != true {
        return None;
    }
    let pid = std::fs::read_to_string(dir.join("proxy.pid"))
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
        .filter(|p| *p > 1 && kill(Pid::from_raw(*p), None).is_ok());
    Some(pid)
}

fn has_ipv6() -> bool {
    Path::new("/proc/sys/net/ipv6").exists()
}

fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The real effects; `steps` keeps how long each took, for the ready line
/// (the start's profile, in every container's log).
#[derive(Default)]
pub struct RealEffects {
    pub steps: Vec<(String, Duration)>,
    /// Phases of the start, as times since it began.
    pub marks: Vec<(&'static str, Duration)>,
}

impl RealEffects {
    /// "block 6 ms, sbx-fw init 41 ms, …, the rest 9 ms; done at (ms):
    /// sink 8, firewall 80, …" of `total`.
    pub fn profile(&self, total: Duration) -> String {
        let mut parts: Vec<String> = self
            .steps
            .iter()
            .map(|(what, t)| format!("{what} {} ms", t.as_millis()))
            .collect();
        let steps: Duration = self.steps.iter().map(|(_, t)| *t).sum();
        parts.push(format!(
            "the rest {} ms",
            total.saturating_sub(steps).as_millis()
        ));
        let marks: Vec<String> = self
            .marks
            .iter()
            .map(|(what, t)| format!("{what} {}", t.as_millis()))
            .collect();
        format!("{}; done at (ms): {}", parts.join(", "), marks.join(", "))
    }
}

impl Effects for RealEffects {
    fn block_egress(&mut self) -> Result<(), String> {
        let t = Instant::now();
        let r = self.block_egress_now();
        self.steps.push(("block".into(), t.elapsed()));
        r
    }

    fn find_tool(&self, name: &str) -> Option<PathBuf> {
        which(name)
    }

    fn run_tool(&mut self, path: &Path, args: &[&str]) -> std::io::Result<ToolOut> {
        let t = Instant::now();
        let r = self.run_tool_now(path, args);
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let what = format!("{name} {}", args.first().copied().unwrap_or_default());
        self.steps.push((what, t.elapsed()));
        r
    }

    fn write_marker(&mut self) -> std::io::Result<()> {
        self.write_marker_now()
    }
}

impl RealEffects {
    fn block_egress_now(&mut self) -> Result<(), String> {
        let (v4, v6) = restore_programs();
        // sbx-fw's own block-everything rules: one generator for both.
        let block = sbx_core::netblock::block_all;
        let mut jobs = vec![(v4, block(false))];
        if has_ipv6() {
            jobs.push((v6, block(true)));
        }
        // Both families at once: each restore is a process and a commit.
        let mut running = Vec::new();
        for (prog, rules) in jobs {
            let mut cmd = Command::new(prog);
            sbx_sys::unblock_signals(&mut cmd);
            let mut child = cmd
                .arg("--wait")
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("{prog}: {e}"))?;
            if let Some(mut i) = child.stdin.take() {
                i.write_all(rules.as_bytes())
                    .map_err(|e| format!("{prog}: {e}"))?;
            }
            running.push((prog, child));
        }
        for (prog, child) in running {
            let out = child
                .wait_with_output()
                .map_err(|e| format!("{prog}: {e}"))?;
            if !out.status.success() {
                let err = String::from_utf8_lossy(&out.stderr);
                return Err(format!(
                    "{prog}: {}",
                    err.lines().next().unwrap_or("failed").trim()
                ));
            }
        }
        Ok(())
    }

    fn run_tool_now(&mut self, path: &Path, args: &[&str]) -> std::io::Result<ToolOut> {
        let mut cmd = Command::new(path);
        cmd.args(args).stdin(Stdio::null());
        // Daemons it leaves behind (the DNS filter) must see our SIGTERM.
        sbx_sys::unblock_signals(&mut cmd);
        Ok(echoed(cmd.output()?))
    }

    fn write_marker_now(&mut self) -> std::io::Result<()> {
        // A directory in the image (the config is mounted onto it); made
        // here when an image lacks it, so every tool knows where it runs.
        let m = Path::new(sbx_core::audit::SANDBOX_MARKER);
        if !m.exists() {
            std::fs::create_dir_all(m)?;
        }
        Ok(())
    }
}

pub struct RealProcs {
    pid1: bool,
    /// API children's statuses go to the API server, not the supervisor.
    api: Option<Arc<crate::api::Registry>>,
    /// Where a tapped service's events go (ssh.rs).
    audit: Option<Arc<LogFile>>,
}

impl Procs for RealProcs {
    fn spawn(&mut self, spec: &ChildSpec) -> std::io::Result<i32> {
        let (prog, args) = spec.argv.split_first().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty command")
        })?;
        let path_var = spec
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_os_str());
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let resolved = sbx_sys::resolve_program(prog, path_var, &cwd)?;
        let mut cmd = Command::new(resolved);
        cmd.arg0(prog)
            .args(args)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)));
        if !spec.main {
            cmd.stdin(Stdio::null());
        }
        sbx_sys::unblock_signals(&mut cmd);
        if let Some(c) = &spec.creds {
            sbx_sys::drop_to(&mut cmd, c)?;
        }
        let tap = match spec.tap {
            Some(crate::init::Tap::Sshd) => {
                let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
                cmd.stderr(w);
                Some(std::fs::File::from(r))
            }
            None => None,
        };
        let child = cmd.spawn()?;
        // The pipe's write end goes with `cmd`: the reader sees sshd's end.
        drop(cmd);
        // Reaped by waitpid(-1) in the loop, never through this handle.
        let pid = child.id() as i32;
        std::mem::forget(child);
        if let Some(r) = tap {
            let log = self.audit.clone();
            let uid = spec.creds.as_ref().map_or(0, |c| c.uid);
            std::thread::spawn(move || {
                crate::ssh::follow(r, |ev| {
                    if let Some(l) = &log {
                        let _ = l.append(&crate::ssh::record(ev, pid, uid));
                    }
                })
            });
        }
        Ok(pid)
    }

    fn signal(&mut self, pid: i32, sig: Signal) {
        let _ = kill(Pid::from_raw(pid), sig);
    }

    fn signal_rest(&mut self, sig: Signal) {
        if self.pid1 {
            // kill(-1) from PID 1 reaches every other process of the sandbox.
            let _ = kill(Pid::from_raw(-1), sig);
        } else {
            // Not PID 1 (tests): only our own children, never the machine.
            for pid in children_of(std::process::id()) {
                let _ = kill(Pid::from_raw(pid), sig);
            }
        }
    }

    fn reap(&mut self) -> (Vec<(i32, Ended)>, bool) {
        match &self.api {
            Some(reg) => reg.reap_with(reap_all),
            None => reap_all(),
        }
    }

    fn await_socket(&mut self, path: &Path, by: Instant) -> Result<(), String> {
        loop {
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() >= by => return Err(e.to_string()),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

/// waitpid(-1) until nothing more has ended.
fn reap_all() -> (Vec<(i32, Ended)>, bool) {
    let mut out = Vec::new();
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(p, c)) => out.push((p.as_raw(), Ended::Code(c))),
            Ok(WaitStatus::Signaled(p, s, _)) => out.push((p.as_raw(), Ended::Signal(s as i32))),
            Ok(WaitStatus::StillAlive) => return (out, false),
            Ok(_) => continue,
            Err(nix::errno::Errno::ECHILD) => return (out, true),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return (out, false),
        }
    }
}

use std::os::unix::process::CommandExt;

/// Direct children of `pid`, from /proc.
fn children_of(pid: u32) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .map(|(_, r)| r.split_whitespace().nth(1).map(str::to_owned))
                })
                .flatten()
                .and_then(|pp| pp.parse::<u32>().ok())
                == Some(pid)
        })
        .collect()
}

/// Run `argv` as the agent to completion (home preparation).
fn run_as(
    creds: &sbx_sys::Creds,
    argv: &[&str],
    env: &[(OsString, OsString)],
) -> Result<ToolOut, String> {
    let (prog, args) = argv.split_first().ok_or("empty command")?;
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_os_str());
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let resolved = sbx_sys::resolve_program(prog.as_ref(), path_var, &cwd)
        .map_err(|e| format!("{prog}: {e}"))?;
    let mut cmd = Command::new(resolved);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null());
    sbx_sys::unblock_signals(&mut cmd);
    sbx_sys::drop_to(&mut cmd, creds).map_err(|e| e.to_string())?;
    Ok(echoed(cmd.output().map_err(|e| format!("{prog}: {e}"))?))
}

/// A finished tool's result; its stderr (sbx-fw's diagnostics, a home
/// step's complaint) is copied to ours so the container's log has it too.
fn echoed(out: std::process::Output) -> ToolOut {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !stderr.is_empty() {
        eprint!("{stderr}");
    }
    ToolOut {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
    }
}

/// The home operations through sbx-backup, as the agent.
struct RealHome<'a> {
    creds: sbx_sys::Creds,
    env: Vec<(OsString, OsString)>,
    home: &'a Path,
}

impl RealHome<'_> {
    fn backup(&self, args: &[&str]) -> Result<ToolOut, String> {
        let mut argv = vec!["sbx-backup"];
        argv.extend_from_slice(args);
        let o = run_as(&self.creds, &argv, &self.env)?;
        if o.code != Some(0) {
            let last = o
                .stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("failed");
            return Err(format!(
                "sbx-backup {}: {}",
                args.last().unwrap_or(&""),
                last.trim()
            ));
        }
        Ok(o)
    }

    fn write_marker(&self) -> Result<(), String> {
        self.touch(&crate::home::marker(self.home))
    }

    fn touch(&self, m: &Path) -> Result<(), String> {
        self.sh_on("mkdir -p \"${1%/*}\" && : > \"$1\"", m, "write")
    }

    /// `script` with `$1` = `m`, as the agent; `what` names a failure.
    fn sh_on(&self, script: &str, m: &Path, what: &str) -> Result<(), String> {
        let argv = ["/bin/sh", "-c", script, "sh", &m.to_string_lossy()];
        let o = run_as(&self.creds, &argv, &self.env)?;
        if o.code == Some(0) {
            Ok(())
        } else {
            Err(format!("cannot {what} {}", m.display()))
        }
    }
}

impl crate::home::HomeOps for RealHome<'_> {
    fn marker_exists(&self) -> bool {
        crate::home::marker(self.home).exists()
    }
    fn unrestored_exists(&self) -> bool {
        crate::home::unrestored(self.home).exists()
    }
    fn mark_unrestored(&mut self) -> Result<(), String> {
        self.touch(&crate::home::unrestored(self.home))?;
        self.touch(&crate::home::adopt_pending(self.home))
    }
    fn adopt_pending_exists(&self) -> bool {
        crate::home::adopt_pending(self.home).exists()
    }
    fn adopt(&mut self) -> Result<(), String> {
        self.backup(&["-q", "adopt"])?;
        self.sh_on(
            "rm -f -- \"$1\"",
            &crate::home::adopt_pending(self.home),
            "remove",
        )
    }
    fn has_snapshot(&mut self) -> Result<bool, String> {
        let o = self.backup(&["--json", "snapshots"])?;
        Ok(o.stdout
            .lines()
            .any(|l| l.contains("\"type\":\"snapshot\"")))
    }
    fn restore(&mut self) -> Result<(), String> {
        self.backup(&["-q", "restore", "--force"]).map(|_| ())
    }
}

/// sbx-backup's status in the agent's home, opened beneath it through no
/// link and bounded: the agent can write it.
fn backup_status(home: &Path) -> Option<sbx_core::backup::Status> {
    use std::io::Read as _;
    let rel = Path::new(sbx_core::backup::STATE_DIR).join(sbx_core::backup::STATUS_FILE);
    let f = sbx_sys::beneath::Root::open(home)
        .ok()?
        .open_read(&rel)
        .ok()?;
    let mut b = Vec::new();
    f.take(sbx_core::backup::STATUS_MAX)
        .read_to_end(&mut b)
        .ok()?;
    sbx_core::backup::Status::parse(&b)
}

fn stop_grace() -> Duration {
    std::env::var("SBX_GUEST_STOP_TIMEOUT")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(8))
}

/// The main loop. Never returns early on a failed start: it stays up,
/// unhealthy, with egress blocked, until stopped.
/// `from_snapshot`: None for a fresh container, else the number of the
/// snapshot's layers sbx-run bound (0: none, read every directory).
pub fn init(paths: &Paths, command: Vec<OsString>, from_snapshot: Option<usize>) -> ExitCode {
    let mask = handled();
    // Before any thread exists, so every thread inherits the mask.
    if let Err(e) = mask.thread_block() {
        eprintln!("sbx-guest: cannot block signals: {e}");
        return ExitCode::from(71);
    }
    let pid1 = std::process::id() == 1;
    if !pid1 {
        // Orphans of our children come to us, as they would to PID 1.
        let _ = nix::sys::prctl::set_child_subreaper(true);
    }
    let sfd = match SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sbx-guest: signalfd: {e}");
            return ExitCode::from(71);
        }
    };
    let t0 = Instant::now();
    let mut fx = RealEffects::default();
    let registry = Arc::new(crate::api::Registry::default());
    let mut procs = RealProcs {
        pid1,
        api: Some(Arc::clone(&registry)),
        audit: None,
    };
    let agent_name = std::env::var_os("SBX_AGENT")
        .filter(|v| !v.is_empty())
        .or_else(|| {
            command
                .first()
                .and_then(|a| Path::new(a).file_name())
                .map(|n| n.to_owned())
        })
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unknown".into());

    // 1. Block egress before anything else; the outcome decides the rest.
    let mut outcome = match fx.block_egress() {
        Ok(()) => None,
        Err(e) => Some(format!("cannot block egress before the firewall: {e}")),
    };
    // 1b. A sandbox made from a snapshot: what the agent left outside its
    // home and the old runtime state go before anything reads or runs
    // there (snapclean.rs). Not finished, not started.
    if let (Some(layers), None) = (from_snapshot, &outcome) {
        let agent = Agent::from_lookup(|k| std::env::var(k).ok());
        match agent
            .map_err(|e| e.to_string())
            .and_then(|a| crate::snapclean::run(&a, layers))
        {
            Ok(c) => eprintln!(
                "sbx-guest: snapshot cleanup: {} entries removed, {} directories read ({}) ({} ms)",
                c.swept.removed,
                c.swept.dirs,
                match (c.layers, c.too_many) {
                    (0, Some(max)) => format!(
                        "every one: the snapshot's layers name more than {} MiB hold",
                        max >> 20
                    ),
                    (0, None) => "every one".to_owned(),
                    (n, _) => format!(
                        "where the snapshot's {n} layer(s) changed, {} directories",
                        c.layer_dirs
                    ),
                },
                t0.elapsed().as_millis()
            ),
            Err(e) => {
                outcome = Some(format!(
                    "the snapshot's start-time cleanup did not finish: {}",
                    sbx_core::sanitize::field(&e)
                ))
            }
        }
        fx.marks.push(("snapshot cleanup", t0.elapsed()));
    }
    let _ = std::fs::create_dir_all(&paths.run_dir);
    set_mode(&paths.run_dir, 0o700);
    let _ = status::write(&paths.status(), &Status::new(State::Starting, None, vec![]));

    // 2. The audit sink, so sbx-fw's own records already reach the log.
    let stop_sink = Arc::new(AtomicBool::new(false));
    let log = match LogFile::open(&paths.audit_log()) {
        Ok(l) => Some(Arc::new(l)),
        Err(e) => {
            outcome.get_or_insert(format!(
                "cannot open the audit log {}: {e}",
                paths.audit_log().display()
            ));
            None
        }
    };
    procs.audit = log.clone();
    if let (Some(log), None) = (&log, &outcome) {
        match UnixTransport::bind(&paths.audit_socket, Duration::from_millis(500)) {
            Ok(mut t) => {
                let log = Arc::clone(log);
                let stop = Arc::clone(&stop_sink);
                std::thread::spawn(move || sink::serve(&mut t, &log, &stop));
            }
            Err(e) => {
                outcome = Some(format!(
                    "cannot open the audit socket {}: {e}",
                    paths.audit_socket.display()
                ));
            }
        }
        match sink::bind_verified(&paths.verified_socket) {
            Ok(l) => {
                let log = Arc::clone(log);
                let stop = Arc::clone(&stop_sink);
                let known = sink::Known::new(
                    sink::VERIFIED_TOOLS
                        .iter()
                        .map(|(p, t)| (Path::new(*p), *t)),
                );
                std::thread::spawn(move || {
                    sink::serve_verified(&l, &known, &log, Duration::from_secs(1), &stop)
                });
            }
            Err(e) => {
                outcome = Some(format!(
                    "cannot open the audit socket {}: {e}",
                    paths.verified_socket.display()
                ));
            }
        }
    }
    let agent = Agent::from_lookup(|k| std::env::var(k).ok());
    let services = config::load(&paths.config);
    fx.marks.push(("sink", t0.elapsed()));

    // 2b-4. Branch mode's worktree on a thread while the firewall comes
    // up: provisioning is local (the shelf's clone, file:// only, as the
    // agent), nothing of the agent's starts before both are done, and
    // either failing fails the start with egress blocked.
    let mut exit_hint = None;
    let branch = crate::branch::Branch::from_lookup(|k| std::env::var(k).ok());
    let mut warnings = Vec::new();
    let mut early_masker = None;
    let provisioned = std::thread::scope(|s| {
        let job = match (&outcome, &branch, &agent) {
            (None, Some(b), Ok(agent)) => Some(s.spawn(move || {
                let mut marks = Vec::new();
                let r = start_branch(paths, b, agent, pid1, &mut |m| {
                    marks.push((m, t0.elapsed()))
                });
                marks.push(("branch", t0.elapsed()));
                (r, marks)
            })),
            _ => None,
        };
        // 3-4. Firewall, verify, marker (the pre-block above is repeated
        // inside `firewall` only in tests; here it has run).
        if outcome.is_none() {
            outcome = match (&agent, &services) {
                (Err(e), _) => Some(e.to_string()),
                (_, Err(e)) => Some(e.to_string()),
                _ => match boot::firewall(&mut AlreadyBlocked(&mut fx)) {
                    boot::Outcome::Ready { warnings: w } => {
                        warnings = w;
                        None
                    }
                    boot::Outcome::Unhealthy(r) => {
                        // Whatever sbx-fw left (a leaking set of rules, a half
                        // init) is replaced by the full block again.
                        if let Err(e) = fx.block_egress() {
                            eprintln!("sbx-guest: cannot re-block egress: {e}");
                        }
                        Some(r)
                    }
                },
            };
        }
        fx.marks.push(("firewall", t0.elapsed()));
        // Branch mode: the masker's watch (a walk of the workspace, the
        // host checkout; nothing of the worktree) is set up while
        // provisioning runs, not after it.
        if job.is_some() && outcome.is_none() {
            if let Ok(l) = sbx_core::config::discover_from_env(None) {
                early_masker = Some(masker_or_warning(paths, &l.config));
                fx.marks.push(("masker", t0.elapsed()));
            }
        }
        job.map(|j| {
            j.join().unwrap_or_else(|_| {
                let reason = "branch mode: provisioning panicked".to_owned();
                (Err(crate::branch::Failed { reason, exit: 70 }), Vec::new())
            })
        })
    });
    if let (Some((r, marks)), Some(b)) = (provisioned, &branch) {
        fx.marks.extend(marks);
        fx.marks.sort_by_key(|(_, t)| *t);
        match r {
            // The agent's command and every exec start in the worktree.
            Ok(()) => {
                if outcome.is_none() {
                    if let Err(e) = std::env::set_current_dir(b.worktree()) {
                        outcome = Some(format!("{}: {e}", b.worktree().display()));
                    }
                }
            }
            Err(f) => {
                // The firewall opened meanwhile: closed again. Its own
                // failure has re-blocked already.
                if outcome.is_none() {
                    if let Err(e) = fx.block_egress() {
                        eprintln!("sbx-guest: cannot re-block egress: {e}");
                    }
                }
                outcome = Some(f.reason);
                exit_hint = Some(f.exit);
            }
        }
    }
    let audit =
        |op: &str, target: &str, result: AuditOutcome, policy: &str, reason: Option<String>| {
            if let Some(l) = &log {
                let _ = l.append(&sink::own(op, target, result, policy, reason, &agent_name));
            }
        };

    // Backups: on when the workspace config names a store.
    let ws_config = match sbx_core::config::discover_from_env(None) {
        Ok(l) => l.config,
        Err(e) => {
            outcome.get_or_insert(format!("config: {e}"));
            sbx_core::config::Config::default()
        }
    };
    let backup_on = ws_config.backup.url.is_some();
    // The first run builds sbx-backup after the first shell (scripts/shell):
    // until its image is rebuilt, a config with backups does not start
    // without them.
    if backup_on && !Path::new(BACKUP_TOOL).is_file() {
        outcome.get_or_insert(format!(
            "[backup] url is set, but this image has no {BACKUP_TOOL}: a first run builds it after the first shell; \
             once it is installed, `sbx-run build-base --bootstrap` and `sbx-run restart` (or start without [backup])"
        ));
    }
    let mut home_new = false;
    let agent_all = &agent;
    let hold = std::env::var_os(sbx_core::guestapi::HOLD_ENV).is_some_and(|v| v == "1");
    let mut api_up = false;
    // For the stop's record of the final backup (issue 43).
    let mut backup_daemon = false;
    let mut paused: Option<&str> = None;
    let mut sup = match (&outcome, &agent, &services) {
        (None, Ok(agent), Ok(file)) => {
            let base: Vec<(OsString, OsString)> = std::env::vars_os().collect();
            let mut svcs = Vec::new();
            let mut daemon = backup_on;
            let mut home = RealHome {
                creds: agent.creds(),
                env: config::agent_env(base.clone(), agent, "sbx-guest"),
                home: &agent.home,
            };
            let free = sbx_sys::available_bytes(&agent.home);
            if let Some(w) = crate::home::space_warning(&agent.home, free) {
                warnings.push(w);
            }
            match crate::home::prepare(&mut home, backup_on) {
                Ok(crate::home::Prepared::Known) => {}
                Ok(crate::home::Prepared::New { restored }) => {
                    home_new = true;
                    if restored {
                        eprintln!("sbx-guest: restored the home from the newest backup");
                    }
                }
                Ok(crate::home::Prepared::Unrestored { why }) => {
                    daemon = false;
                    paused = Some("the home was not restored at its first start");
                    // The agent works in it: once the mark is deleted, a
                    // start must find it used, not new.
                    home_new = true;
                    warnings.push(format!(
                        "home not restored ({why}): the home is used as it is and no later start restores over it; \
                         backups are paused until you restore by hand (sbx-backup restore --to DIR), merge, and delete {}",
                        crate::home::unrestored(&agent.home).display()
                    ));
                }
                Ok(crate::home::Prepared::NotAdopted { why }) => {
                    daemon = false;
                    paused = Some("this merged home is not the store's owner yet");
                    warnings.push(format!(
                        "backups paused: this merged home could not be made the store's owner ({why}); \
                         the next start tries again (or run sbx-backup adopt)"
                    ));
                }
                Err(e) => {
                    // No daemon over a home that missed its restore: its
                    // snapshots would push the good ones out of retention.
                    daemon = false;
                    paused = Some("the home was not restored at its first start");
                    warnings.push(format!(
                        "home not restored and not marked so ({e}): starting with the home as it is, backups paused; \
                         the next start restores over it again (copy out what the agent writes)"
                    ));
                }
            }
            fx.marks.push(("home", t0.elapsed()));
            // Under [tools], the shell's startup files are not the agent's:
            // what they define runs in place of the commands the checker
            // reads (rcfiles.rs).
            if ws_config.tools.is_some() {
                if let Err(e) = pin_startup_files(paths, agent) {
                    warnings.push(format!(
                        "the shell's startup files in the home are not held read-only: {e}"
                    ));
                }
                // The CLI's own settings, snapshots and MCP servers
                // likewise: it runs what they hold past the hook (clihome.rs).
                let errs = crate::clihome::hold_all(
                    &agent.home,
                    agent.uid,
                    agent.gid,
                    &mut sbx_sys::idmap::bind_onto_itself_readonly,
                );
                if !errs.is_empty() {
                    warnings.push(format!(
                        "the AI CLI's own files in the home are not held read-only: {}",
                        errs.join("; ")
                    ));
                }
            }
            // The workspace's [guest.services]: the agent's uid, never root.
            for (name, svc) in &ws_config.guest.services {
                if file.services.contains_key(name) {
                    warnings.push(format!(
                        "[guest.services].{name}: the image defines a service of this name; the image's runs"
                    ));
                    continue;
                }
                svcs.push(ChildSpec {
                    name: name.clone(),
                    argv: svc.command.0.iter().map(OsString::from).collect(),
                    creds: Some(agent.creds()),
                    env: config::agent_env(base.clone(), agent, name),
                    main: false,
                    tap: None,
                });
            }
            backup_daemon = daemon;
            if daemon {
                svcs.push(ChildSpec {
                    name: "backup".into(),
                    argv: ["sbx-backup", "-q", "daemon", "--final-sync"]
                        .map(OsString::from)
                        .to_vec(),
                    creds: Some(agent.creds()),
                    env: config::agent_env(base.clone(), agent, "sbx-backup"),
                    main: false,
                    tap: None,
                });
            }
            for (name, s) in &file.services {
                let (creds, env) = match s.user {
                    User::Agent => (
                        Some(agent.creds()),
                        config::agent_env(base.clone(), agent, name),
                    ),
                    User::Root => (None, base.clone()),
                };
                svcs.push(ChildSpec {
                    name: name.clone(),
                    argv: s.command.iter().map(OsString::from).collect(),
                    creds,
                    env,
                    main: false,
                    tap: None,
                });
            }
            // Proxy mode: the proxy is a root service (it drops to its own
            // uid), restarted with backoff; while it is down the redirected
            // ports lead nowhere, so TCP 80/443 stay blocked.
            let proxy = fw_proxy();
            if proxy.is_some() {
                svcs.push(ChildSpec {
                    name: PROXY_SVC.into(),
                    argv: ["sbx-fw", "proxy"].map(OsString::from).to_vec(),
                    creds: None,
                    env: base.clone(),
                    main: false,
                    tap: None,
                });
            }
            // [ssh] enabled: sshd as the agent, its log read for the audit.
            if ws_config.ssh.enabled {
                let dir = Path::new(crate::ssh::DIR);
                let env = config::agent_env(base.clone(), agent, "ssh");
                match crate::ssh::install(
                    Path::new(crate::ssh::SSHD),
                    &paths.shared(),
                    dir,
                    sbx_core::config::SSH_PORT,
                    &crate::ssh::session_env(&env),
                ) {
                    Ok(()) => svcs.push(ChildSpec {
                        name: "sshd".into(),
                        argv: crate::ssh::argv(dir),
                        creds: Some(agent.creds()),
                        env,
                        main: false,
                        tap: Some(crate::init::Tap::Sshd),
                    }),
                    Err(e) => warnings.push(format!("no sshd: {e}")),
                }
            }
            let main = ChildSpec {
                name: "main".into(),
                argv: command.clone(),
                creds: Some(agent.creds()),
                env: config::agent_env(base, agent, &agent_name),
                main: true,
                tap: None,
            };
            // The guest keeps only what it still needs: KILL to stop the
            // agent's processes, SETUID/SETGID/SETPCAP to start services as
            // the agent with an empty bounding set. NET_ADMIN/NET_RAW go.
            use sbx_sys::caps::cap;
            let have = sbx_sys::caps::cap_masks(std::process::id())
                .map(|m| m[1])
                .unwrap_or(0);
            // Secret files created later: masked by bind mounts (SYS_ADMIN).
            let masked = early_masker
                .take()
                .unwrap_or_else(|| masker_or_warning(paths, &ws_config));
            warnings.extend(masked);
            if pid1 {
                warnings.extend(broker_dirs_on_tmpfs());
            }
            fx.marks.push(("broker tmpfs", t0.elapsed()));
            let keep: Vec<u32> = [
                cap::KILL,
                cap::SETUID,
                cap::SETGID,
                cap::SETPCAP,
                cap::SYS_ADMIN,
                cap::DAC_READ_SEARCH,
            ]
            .into_iter()
            .filter(|c| have & (1 << c) != 0)
            .collect();
            if pid1 || nix::unistd::geteuid().is_root() {
                if let Err(e) = sbx_sys::keep_only_caps(&keep) {
                    warnings.push(format!("cannot trim the guest's capabilities: {e}"));
                }
            }
            fx.marks.push(("masks+caps", t0.elapsed()));
            let mut sup = Supervisor::new(Some(main), svcs, stop_grace());
            for (name, s) in &file.services {
                if let Some(sock) = &s.ready_socket {
                    sup.ready_when_listening(name, sock);
                }
            }
            if let Some(Some(pid)) = proxy {
                sup.adopt(PROXY_SVC, pid, Instant::now());
            }
            // Held for the host's check of the mounts (HOLD_ENV): the API
            // first, then nothing of the agent's (main, services, execs)
            // until the host's Release. No release, no agent.
            let go = hold.then(|| {
                api_up = true;
                hold_for_host(paths, agent_all, Arc::clone(&registry), &sfd)
            });
            let started = match &go {
                Some(Err(e)) => Err(e.clone()),
                _ => sup.start(&mut procs, Instant::now()),
            };
            if let Some(Ok(done)) = &go {
                let _ = done.send(started.clone());
            }
            match started {
                Ok(()) => {
                    if home_new {
                        if let Err(e) = home.write_marker() {
                            warnings.push(e);
                        }
                    }
                }
                Err(e) => outcome = Some(e),
            }
            sup
        }
        _ => Supervisor::new(None, vec![], stop_grace()),
    };

    // The host API, before the status says ready (sbx-run execs right
    // after), and after a failed start too, so the host can read why.
    fx.marks.push(("children", t0.elapsed()));
    if !api_up && let Err(e) = start_api(paths, &agent, registry) {
        warnings.push(format!("the host API is not available: {e}"));
    }
    fx.marks.push(("api", t0.elapsed()));

    match &outcome {
        None => {
            let _ = status::write(
                &paths.status(),
                &Status::new(State::Ready, None, warnings.clone()),
            );
            for w in &warnings {
                eprintln!("sbx-guest: warning: {w}");
            }
            audit(
                "start",
                &command_text(&command),
                AuditOutcome::Allowed,
                "guest-start",
                None,
            );
            let total = t0.elapsed();
            eprintln!(
                "sbx-guest: ready ({} ms; {})",
                total.as_millis(),
                fx.profile(total)
            );
        }
        Some(reason) => {
            let mut st = Status::new(State::Unhealthy, Some(reason.clone()), vec![]);
            st.exit = exit_hint;
            let _ = status::write(&paths.status(), &st);
            audit(
                "start",
                &command_text(&command),
                AuditOutcome::Blocked,
                "guest-start",
                Some(reason.clone()),
            );
            eprintln!("sbx-guest: unhealthy: {reason}");
        }
    }

    // The proxy's ends and restarts: audited, and the status is unhealthy
    // while it is down (TCP 80/443 blocked).
    let mut proxy_up = sup.running(PROXY_SVC);
    let report_proxy = |up: bool| {
        let (st, result, reason) = if up {
            (
                Status::new(State::Ready, None, warnings.clone()),
                AuditOutcome::Allowed,
                "the firewall proxy was restarted: TCP 80/443 are checked again".to_owned(),
            )
        } else {
            let r = "the firewall proxy ended: TCP 80/443 are blocked until it is restarted";
            (
                Status::new(State::Unhealthy, Some(r.into()), warnings.clone()),
                AuditOutcome::Blocked,
                r.to_owned(),
            )
        };
        eprintln!("sbx-guest: {reason}");
        audit(
            if up { "restart" } else { "end" },
            "sbx-fw proxy",
            result,
            "fw-proxy",
            Some(reason),
        );
        let _ = status::write(&paths.status(), &st);
    };
    let mut watch_proxy = |sup: &Supervisor| {
        let now = sup.running(PROXY_SVC);
        if outcome.is_none() && !sup.stopping() && now.is_some() && now != proxy_up {
            proxy_up = now;
            report_proxy(now == Some(true));
        }
    };

    // [lifecycle] idle-stop: only for a sandbox that started cleanly.
    let idle_after = ws_config.lifecycle.idle_stop.filter(|_| outcome.is_none());
    let mut cpu = crate::idle::Cpu::default();
    let mut idle_stopped = false;

    // The loop: signals and timers until every child is gone.
    loop {
        let now = Instant::now();
        sup.tick(&mut procs, now);
        watch_proxy(&sup);
        if let Some(after) = idle_after
            && !sup.stopping()
        {
            cpu.sample(now);
            if crate::idle::stop_if_idle(after.0, now) {
                // The same stop as `docker stop`'s TERM: the backup
                // daemon's final sync runs before the guest exits.
                idle_stopped = true;
                let why = format!("idle for {}", humantime::format_duration(after.0));
                eprintln!("sbx-guest: {why}: final backup, then stop");
                let st = Status::new(State::Stopping, Some("idle".into()), vec![]);
                let _ = status::write(&paths.status(), &st);
                audit(
                    "idle-stop",
                    "sandbox",
                    AuditOutcome::Allowed,
                    "idle-stop",
                    Some(why),
                );
                sup.on_signal(&mut procs, Signal::SIGTERM, now);
            }
        }
        if let Some(code) = sup.finished(&mut procs, now) {
            // Read by `sbx-run list` and the server once the container
            // has ended: the host learns of the idle stop from here.
            let mut st =
                idle_stopped.then(|| Status::new(State::Stopped, Some("idle".into()), vec![]));
            if backup_on && outcome.is_none() {
                // `sbx-run stop` and `rm --volumes` read it (issue 43).
                let fb = crate::home::final_backup(
                    backup_daemon,
                    paused,
                    sup.stop_end("backup"),
                    stop_grace(),
                    agent.as_ref().ok().and_then(|a| backup_status(&a.home)),
                );
                let why = fb.why.as_ref().map(|w| {
                    eprintln!("sbx-guest: warning: the final backup did not complete: {w}");
                    format!("did not complete: {w}")
                });
                audit(
                    "final-backup",
                    "home",
                    AuditOutcome::Allowed,
                    "final-backup",
                    why,
                );
                st.get_or_insert_with(|| Status::new(State::Stopping, None, vec![]))
                    .final_backup = Some(fb);
            }
            if let Some(st) = st {
                let _ = status::write(&paths.status(), &st);
            }
            stop_sink.store(true, std::sync::atomic::Ordering::Relaxed);
            return ExitCode::from(code.clamp(0, 255) as u8);
        }
        let wait = sup.next_wake(now);
        let ms = u16::try_from(wait.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [nix::poll::PollFd::new(
            std::os::fd::AsFd::as_fd(&sfd),
            nix::poll::PollFlags::POLLIN,
        )];
        let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms));
        while let Ok(Some(info)) = sfd.read_signal() {
            let Ok(sig) = Signal::try_from(info.ssi_signo as i32) else {
                continue;
            };
            let now = Instant::now();
            if matches!(sig, Signal::SIGTERM | Signal::SIGINT | Signal::SIGQUIT) && !sup.stopping()
            {
                let _ = status::write(&paths.status(), &Status::new(State::Stopping, None, vec![]));
                if outcome.is_some() {
                    // A failed start has nothing to stop but itself.
                    stop_sink.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
            sup.on_signal(&mut procs, sig, now);
        }
        watch_proxy(&sup);
        // With no main child (a failed start), stay up until told to stop.
        if outcome.is_some() && !sup.stopping() {
            let _ = procs.reap();
        }
    }
}

/// Bind the API socket in the shared directory and serve it on a thread.
/// Start the host API and wait for the host's `Release` (HOLD_ENV): what
/// runs before it is the guest's own start-up only. A stop signal
/// meanwhile ends the guest, nothing of the agent's having run.
fn hold_for_host(
    paths: &Paths,
    agent: &Result<Agent, config::ConfigError>,
    registry: Arc<crate::api::Registry>,
    sfd: &SignalFd,
) -> Result<crate::api::Go, String> {
    use std::sync::mpsc::RecvTimeoutError;
    let rx = crate::api::hold();
    start_api(paths, agent, registry).map_err(|e| {
        format!("the host API is not available, so the host cannot check the mounts: {e}")
    })?;
    eprintln!(
        "{}: waiting for sbx-run's check of the mounts",
        sbx_core::guestapi::HELD_LINE
    );
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(go) => return Ok(go),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Err("the hold ended without the host's release".into());
            }
        }
        while let Ok(Some(info)) = sfd.read_signal() {
            let sig = Signal::try_from(info.ssi_signo as i32);
            if matches!(sig, Ok(Signal::SIGTERM | Signal::SIGINT | Signal::SIGQUIT)) {
                eprintln!("sbx-guest: stopped while held: nothing of the agent's ran");
                std::process::exit(143);
            }
        }
    }
}

fn start_api(
    paths: &Paths,
    agent: &Result<Agent, config::ConfigError>,
    registry: Arc<crate::api::Registry>,
) -> Result<(), String> {
    let sock = paths.api_socket();
    let listener = crate::api::bind(&sock).map_err(|e| format!("{}: {e}", sock.display()))?;
    let base: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let (creds, home, env) = match agent {
        Ok(a) => (
            Some(a.creds()),
            a.home.clone(),
            config::agent_env(base.clone(), a, "sbx-run"),
        ),
        Err(_) => (None, PathBuf::from("/"), vec![]),
    };
    let mut roots: Vec<PathBuf> = ["/workspace", "/tmp", "/repo-shelf"]
        .into_iter()
        .map(PathBuf::from)
        .collect();
    roots.push(home.clone());
    let server = crate::api::Server::new(crate::api::Config {
        roots,
        agent: creds,
        agent_home: home,
        agent_env: env,
        root_env: base,
        status: paths.status(),
        reaper: crate::api::Reaper::Pid1(registry),
        audit_log: Some(paths.audit_log()),
    });
    std::thread::spawn(move || crate::api::serve(listener, server));
    Ok(())
}

/// Bind the image's startup files over the agent's (rcfiles.rs).
fn pin_startup_files(paths: &Paths, agent: &Agent) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let empty = paths.run_dir.join("empty-rc");
    // Made anew: a restarted container's 0444 file cannot be opened for
    // writing by root without CAP_DAC_OVERRIDE.
    let _ = std::fs::remove_file(&empty);
    std::fs::write(&empty, b"").map_err(|e| format!("{}: {e}", empty.display()))?;
    std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o444))
        .map_err(|e| e.to_string())?;
    crate::rcfiles::pin_all(
        &agent.home,
        agent.uid,
        agent.gid,
        &mut crate::rcfiles::BindPinner {
            skel: Path::new("/etc/skel"),
            empty: &empty,
        },
    )
}

/// Watch the workspace (`SBX_WORKSPACE`) for new secret files.
/// The git broker's per-call directories (the image's `/run/sbx-git/index`,
/// and `approved`, which the broker makes root's 0755): each hooked commit
/// makes and removes a dozen entries there, and on a busy disk each waited
/// for the journal (bench/RESULTS.md, h46v). A tmpfs on each, with the
/// owner, group and mode the directory has: made before the broker starts,
/// on every start, never in a snapshot (docker commit skips mounts).
/// Without the guard in the image: nothing. Some: why they stay on disk.
fn broker_dirs_on_tmpfs() -> Option<String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    const DIRS: [(&str, &str); 2] = [
        ("/run/sbx-git/index", "256m"),
        ("/run/sbx-git/approved", "16m"),
    ];
    let index = Path::new(DIRS[0].0);
    if !index.is_dir() {
        return None;
    }
    let one = |path: &Path, size: &str| -> std::io::Result<()> {
        match std::fs::DirBuilder::new().mode(0o755).create(path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        let m = std::fs::symlink_metadata(path)?;
        if !m.is_dir() || m.uid() != 0 {
            return Err(std::io::Error::other("not a directory of root's"));
        }
        let opts = format!(
            "mode={:o},uid=0,gid={},size={size}",
            m.mode() & 0o7777,
            m.gid()
        );
        sbx_sys::idmap::mount_tmpfs(path, &opts)
    };
    let errs: Vec<String> = DIRS
        .iter()
        .filter_map(|(p, size)| one(Path::new(p), size).err().map(|e| format!("{p}: {e}")))
        .collect();
    (!errs.is_empty()).then(|| {
        format!(
            "the git broker's per-commit files stay on the disk (slower hooked commits): {}",
            errs.join("; ")
        )
    })
}

/// The masker, when the guest may mount (SYS_ADMIN); else why not.
fn masker_or_warning(paths: &Paths, cfg: &sbx_core::config::Config) -> Option<String> {
    use sbx_sys::caps::cap;
    let have = sbx_sys::caps::cap_masks(std::process::id())
        .map(|m| m[1])
        .unwrap_or(0);
    if have & (1 << cap::SYS_ADMIN) == 0 {
        return Some("new secret files are not masked: no CAP_SYS_ADMIN".into());
    }
    match start_masker(paths, cfg) {
        Ok(None) => None,
        Ok(Some(e)) => Some(format!(
            "a secret file the host replaces is readable until masked again: {e}"
        )),
        Err(e) => Some(format!("new secret files are not masked: {e}")),
    }
}

fn start_masker(paths: &Paths, cfg: &sbx_core::config::Config) -> Result<Option<String>, String> {
    use std::os::unix::fs::PermissionsExt;
    let Some(ws) = std::env::var_os("SBX_WORKSPACE").map(PathBuf::from) else {
        return Ok(None);
    };
    if !ws.is_dir() {
        return Ok(None);
    }
    let file = paths.run_dir.join("empty");
    let dir = paths.run_dir.join("empty.d");
    // A restarted container still has the 0444 file of its last start,
    // which root without CAP_DAC_OVERRIDE cannot open for writing: the
    // watcher stopped at every `stop` + `start`. Made anew instead.
    // The file is there when this container started before: then what
    // appeared while it was stopped is masked now, not only what comes.
    let restarted = file.exists();
    let _ = std::fs::remove_file(&file);
    std::fs::write(&file, b"").map_err(|e| format!("{}: {e}", file.display()))?;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444))
        .map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555))
        .map_err(|e| e.to_string())?;
    let set = |p: Vec<sbx_core::glob::PathPattern>| {
        sbx_core::glob::PathSet::new(&p).map_err(|e| e.to_string())
    };
    crate::masks::watch(
        crate::masks::Masker {
            root: ws,
            blocked: set(cfg.blocked_files())?,
            allowed: set(cfg.allowed_files())?,
            mounter: Box::new(crate::masks::BindMounter {
                empty_file: file,
                empty_dir: dir,
            }),
            agent: crate::config::Agent::from_lookup(|v| std::env::var(v).ok())
                .ok()
                .map(|a| (a.uid, a.gid)),
        },
        restarted,
    )
}

/// Branch mode's provisioning and pins (branch.rs); a failure is the
/// start's, with sbx-worktree's exit status for sbx-run to pass on.
fn start_branch(
    paths: &Paths,
    b: &crate::branch::Branch,
    agent: &Agent,
    pid1: bool,
    mark: &mut dyn FnMut(&'static str),
) -> Result<(), crate::branch::Failed> {
    use crate::branch::{Failed, failure};
    let fail = |what: String| Failed {
        reason: format!("branch {:?}: {what}", b.name),
        exit: 71,
    };
    mark("branch start");
    let base: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let env = config::agent_env(base, agent, "sbx-worktree");
    // Every start, so a name that maps to another branch's directory is
    // refused; a worktree that exists is only checked (--keep-existing).
    let stage = {
        // Root's, 0711: the agent's git can run the copy, nobody can list
        // or read it, and it is gone before anything else starts.
        let stage = PathBuf::from(format!("/run/sbx-git.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&stage);
        let r = (|| {
            std::fs::create_dir(&stage).map_err(|e| fail(format!("{}: {e}", stage.display())))?;
            set_mode(&stage, 0o711);
            mark("stage made");
            let real = Path::new(sbx_worktree::git::SANDBOX_REAL_GIT);
            sbx_worktree::git::stage_private_git(real, &stage)
                .map_err(|e| fail(format!("cannot stage git for provisioning: {e}")))?;
            let mut env = env.clone();
            env.push((
                sbx_worktree::git::PRIVATE_GIT_ENV.into(),
                stage.clone().into(),
            ));
            let argv = b.argv();
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            mark("git staged");
            let o = run_as(&agent.creds(), &argv, &env).map_err(fail)?;
            mark("provisioned");
            if o.code != Some(0) {
                return Err(failure(&b.name, o.code, &o.stderr));
            }
            Ok(())
        })();
        if r.is_err() {
            let _ = std::fs::remove_dir_all(&stage);
        }
        r?;
        stage
    };
    // The staged git is removed while the pins are made (each takes a few
    // milliseconds); gone before this returns.
    std::thread::scope(|s| {
        let gone = s.spawn(|| {
            let _ = std::fs::remove_dir_all(&stage);
        });
        let r = pin(paths, b, agent, pid1, &env, &fail, mark);
        let _ = gone.join();
        r
    })
}

/// The pins of `start_branch`, after a sweep of what provisioning left.
fn pin(
    paths: &Paths,
    b: &crate::branch::Branch,
    agent: &Agent,
    pid1: bool,
    env: &[(OsString, OsString)],
    fail: &dyn Fn(String) -> crate::branch::Failed,
    mark: &mut dyn FnMut(&'static str),
) -> Result<(), crate::branch::Failed> {
    let cfg = sbx_core::config::discover_from_env(None)
        .map_err(|e| fail(format!("config: {e}")))?
        .config;
    let empty = paths.run_dir.join("empty.d");
    std::fs::create_dir_all(&empty).map_err(|e| fail(format!("{}: {e}", empty.display())))?;
    set_mode(&empty, 0o555);
    let pins = b.pins(&cfg.protected_paths(), &empty);
    let points = crate::branch::mount_points(&b.shelf, &pins);
    // Nothing provisioning started outlives it (as with --rm): MKPOINTS'
    // kill(-1) as the agent reaches every process of its uid, which are
    // provisioning's alone yet (the firewall's, running meanwhile, are
    // root's and sbx-fw's own uid's), and not PID 1's tests' machine. The
    // main loop reaps them: a waitpid(-1) here could take the firewall's.
    if pid1 || !points.is_empty() {
        let sweep = if pid1 { "1" } else { "0" };
        let mut argv = vec!["/bin/sh", "-c", crate::branch::MKPOINTS, "sh", sweep];
        argv.extend(points.iter().map(String::as_str));
        let o = run_as(&agent.creds(), &argv, env).map_err(fail)?;
        if o.code != Some(0) {
            return Err(fail(format!(
                "cannot make the mount points of the protected paths: {}",
                o.stderr.lines().last().unwrap_or("").trim()
            )));
        }
    }
    mark("mount points");
    for (src, rel) in &pins {
        let dst = b.shelf.join(rel);
        let fd = sbx_sys::beneath::Root::open(&b.shelf)
            .and_then(|r| r.open_path(rel))
            .map_err(|e| {
                fail(format!(
                    "{}: {e} (a symbolic link on the shelf? remove it)",
                    dst.display()
                ))
            })?;
        sbx_sys::idmap::bind_readonly_at(src, &fd).map_err(|e| {
            fail(format!(
                "cannot pin {} read-only over {}: {e}",
                src.display(),
                dst.display()
            ))
        })?;
    }
    Ok(())
}

/// `firewall` with the block already done by `init`.
struct AlreadyBlocked<'a>(&'a mut RealEffects);

impl Effects for AlreadyBlocked<'_> {
    fn block_egress(&mut self) -> Result<(), String> {
        Ok(())
    }
    fn find_tool(&self, name: &str) -> Option<PathBuf> {
        self.0.find_tool(name)
    }
    fn run_tool(&mut self, path: &Path, args: &[&str]) -> std::io::Result<ToolOut> {
        self.0.run_tool(path, args)
    }
    fn write_marker(&mut self) -> std::io::Result<()> {
        self.0.write_marker()
    }
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
}

fn command_text(c: &[OsString]) -> String {
    let words: Vec<String> = c.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    shell_words(&words)
}

fn shell_words(w: &[String]) -> String {
    w.join(" ")
}

/// sbx-backup in the image (the first run adds it after the first shell).
const BACKUP_TOOL: &str = "/usr/local/bin/sbx-backup";
