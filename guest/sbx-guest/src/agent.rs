//! `agent-launch`: runs the agent CLI for `sbx-run agent` so that the API
//! key reaches the CLI process and nothing else in the sandbox.
//!
//! The key arrives as the first line of stdin (sbx-run writes it into the
//! exec's pipe: never an argument, a variable or a file). The CLI is started
//! without it in its environment and with an `apiKeyHelper` that runs
//! `sbx-guest agent-key SOCKET`: the launcher serves the key on that socket
//! once, to a process whose parent or grandparent is the CLI, then removes
//! the socket and forgets the key. The CLI asks before its first request,
//! so by the time a tool of the agent runs the key is gone from everywhere
//! but the CLI's memory. The rest of stdin is the prompt.
//!
//! For codex (`--cli codex`) the same socket is served to its provider's
//! token command: `-c model_providers.sbx.auth={command = "sbx-guest",
//! args = ["agent-key", SOCKET]}` goes in after `exec`.
//!
//! The CLI runs in its own process group, and the launcher is a child
//! subreaper, so whatever the CLI's tree leaves behind (a daemon that made
//! its own session) is re-parented here, not to PID 1, and stays findable.
//! `--timeout` sends the group SIGTERM, and 2 s later kills the whole tree;
//! exit 124, like timeout(1). SIGINT, SIGTERM, SIGHUP and SIGQUIT (from the
//! host's `sbx-run agent`, or the guest when the host's connection closed)
//! go to the CLI's group first; 3 s later, or at a second signal, the tree
//! is killed; exit 128+N. When the CLI ends, what is left of its tree is
//! killed too.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Exit status of a run killed by `--timeout`.
pub const TIMEOUT_EXIT: u8 = 124;
/// After a stop signal (or the timeout's SIGTERM) the CLI has this long
/// before its whole tree is killed.
const STOP_GRACE: Duration = Duration::from_secs(3);
const TIMEOUT_GRACE: Duration = Duration::from_secs(2);

enum Ev {
    Exited,
    Signal(i32),
}

fn read_key_line() -> std::io::Result<String> {
    // Byte by byte on the raw fd (std's stdin buffers): whatever follows
    // the line is the CLI's stdin.
    use std::os::fd::AsFd;
    let stdin = std::io::stdin();
    let mut key = Vec::new();
    let mut b = [0u8; 1];
    while nix::unistd::read(stdin.as_fd(), &mut b).map_err(std::io::Error::from)? == 1
        && b[0] != b'\n'
    {
        key.push(b[0]);
        if key.len() > 4096 {
            return Err(std::io::Error::other("key line longer than 4096 bytes"));
        }
    }
    Ok(String::from_utf8_lossy(&key).trim().to_owned())
}

pub(crate) fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: parse after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

fn serve_key_once(listener: UnixListener, path: PathBuf, key: String, cli: u32) {
    let cli = cli as i32;
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let peer = nix::sys::socket::getsockopt(&conn, nix::sys::socket::sockopt::PeerCredentials)
            .map(|c| c.pid())
            .unwrap_or(-1);
        let p1 = parent_of(peer);
        let p2 = p1.and_then(parent_of);
        if p1 == Some(cli) || p2 == Some(cli) {
            let _ = conn.write_all(key.as_bytes());
            break;
        }
        // Not the CLI's helper: nothing, and keep waiting for the real one.
        let _ = conn.write_all(b"");
    }
    let _ = std::fs::remove_file(&path);
}

pub fn launch(
    timeout: Option<Duration>,
    host_tools: bool,
    scratch: Option<&Path>,
    codex: bool,
    command: &[std::ffi::OsString],
) -> ExitCode {
    match launch_inner(timeout, host_tools, scratch, codex, command) {
        Ok(code) => code,
        Err(e) => {
            sbx_core::output::error(&format!("agent-launch: {e}"));
            ExitCode::from(125)
        }
    }
}

/// Make the chat's scratch directory in its mount; a sandbox made before
/// the mount existed has none (the parent is missing), and says how to fix it.
fn make_scratch(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let root = dir.parent().unwrap_or(Path::new("/"));
    if !root.is_dir() {
        return Err(std::io::Error::other(format!(
            "{}: no chat scratch mount in this sandbox (made by an older sbx-run): remove it with `sbx-run rm` and run again",
            root.display()
        )));
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            Err(std::io::Error::other(format!("{}: {e}", dir.display())))
        }
        _ if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) => Err(
            std::io::Error::other(format!("{}: not a directory", dir.display())),
        ),
        _ => Ok(()),
    }
}

fn launch_inner(
    timeout: Option<Duration>,
    host_tools: bool,
    scratch: Option<&Path>,
    codex: bool,
    command: &[std::ffi::OsString],
) -> std::io::Result<ExitCode> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    let (prog, args) = command
        .split_first()
        .ok_or_else(|| std::io::Error::other("no command"))?;
    // Before anything runs, so no stop signal is missed.
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT])?;
    nix::sys::prctl::set_child_subreaper(true).map_err(std::io::Error::from)?;
    let key = read_key_line()?;
    let mut args: Vec<std::ffi::OsString> = args.to_vec();
    let mut cmd = Command::new(prog);
    cmd.env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .process_group(0);
    if let Some(d) = scratch {
        make_scratch(d)?;
        cmd.env("SBX_SCRATCH", d);
    }
    let tools = if host_tools {
        let t = crate::hosttools::launcher::Session::start()?;
        cmd.env(crate::hosttools::SOCKET_ENV, t.socket())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        Some(t)
    } else {
        cmd.stdin(Stdio::inherit());
        None
    };
    let mut server = None;
    if !key.is_empty() {
        let dir = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = dir.join(format!("sbx-key-{}-{nanos}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        if codex {
            // Asked again only after a day, so never in a run.
            let auth = format!(
                "model_providers.sbx.auth={{command = \"/usr/local/bin/sbx-guest\", args = [\"agent-key\", {}], refresh_interval_ms = 86400000}}",
                toml::Value::String(path.display().to_string())
            );
            let at = args.len().min(1); // after `exec`
            args.splice(at..at, ["-c".into(), auth.into()]);
        } else {
            let settings = serde_json::json!({
                "apiKeyHelper": format!("/usr/local/bin/sbx-guest agent-key {}", path.display())
            });
            args.extend(["--settings".into(), settings.to_string().into()]);
            // The helper is asked again only after this long: a day, so never in a run.
            cmd.env("CLAUDE_CODE_API_KEY_HELPER_TTL_MS", "86400000");
        }
        server = Some((listener, path, key));
    }
    cmd.args(&args);
    let mut child = cmd.spawn()?;
    let pid = child.id();
    let relay = match tools {
        Some(t) => Some(t.run(&mut child)?),
        None => None,
    };
    let server_thread = server.map(|(l, p, k)| {
        let p2 = p.clone();
        (std::thread::spawn(move || serve_key_once(l, p, k, pid)), p2)
    });
    // A waiter thread reports the exit at once (no polling latency).
    let (tx, rx) = std::sync::mpsc::channel();
    let tx2 = tx.clone();
    let waiter = std::thread::spawn(move || {
        let s = child.wait();
        let _ = tx.send(Ev::Exited);
        s
    });
    std::thread::spawn(move || {
        for sig in signals.forever() {
            if tx2.send(Ev::Signal(sig)).is_err() {
                return;
            }
        }
    });
    let me = std::process::id() as i32;
    let group = Pid::from_raw(pid as i32);
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    let mut timed_out = false;
    let mut stopped_by: Option<i32> = None;
    let mut kill_at: Option<std::time::Instant> = None;
    loop {
        let now = std::time::Instant::now();
        // Each second the orphans that ended are reaped.
        let mut wake = now + Duration::from_secs(1);
        if let (Some(d), false) = (deadline, timed_out) {
            wake = wake.min(d);
        }
        if let Some(k) = kill_at {
            wake = wake.min(k);
        }
        match rx.recv_timeout(wake.saturating_duration_since(now)) {
            Ok(Ev::Exited) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Ok(Ev::Signal(sig)) => {
                let now = std::time::Instant::now();
                if stopped_by.is_some() || timed_out {
                    kill_at = Some(now); // a second signal: no more grace
                } else {
                    stopped_by = Some(sig);
                    let sig = Signal::try_from(sig).unwrap_or(Signal::SIGTERM);
                    let _ = killpg(group, sig);
                    kill_at = Some(now + STOP_GRACE);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        let now = std::time::Instant::now();
        if deadline.is_some_and(|d| now >= d) && !timed_out && stopped_by.is_none() {
            timed_out = true;
            let _ = killpg(group, Signal::SIGTERM);
            kill_at = Some(now + TIMEOUT_GRACE);
        }
        if kill_at.is_some_and(|k| now >= k) {
            kill_at = None;
            crate::tree::kill_tree(me, false);
        }
        crate::tree::reap_children(me, pid as i32);
    }
    if let Some((_, path)) = &server_thread {
        // The CLI never asked: the socket goes; the thread ends with us.
        let _ = std::fs::remove_file(path);
    }
    let status = waiter
        .join()
        .map_err(|_| std::io::Error::other("waiter thread panicked"))??;
    // Whatever the CLI's tree left running goes with it, and is reaped.
    crate::tree::kill_tree(me, false);
    let t = std::time::Instant::now();
    while !crate::tree::descendants(me).is_empty() && t.elapsed() < Duration::from_secs(2) {
        crate::tree::reap_children(me, -1);
        std::thread::sleep(Duration::from_millis(5));
    }
    if let Some(r) = relay {
        // The CLI's last lines (its result) before our exit.
        r.drain(Duration::from_secs(2));
    }
    if timed_out {
        return Ok(ExitCode::from(TIMEOUT_EXIT));
    }
    if let Some(sig) = stopped_by {
        return Ok(ExitCode::from((128 + sig).clamp(0, 255) as u8));
    }
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
        _ => ExitCode::from(125),
    })
}

/// `agent-key SOCKET`: the `apiKeyHelper`: print what the launcher serves.
pub fn key(socket: &Path) -> ExitCode {
    let mut s = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e) => {
            sbx_core::output::error(&format!(
                "agent-key: {}: {e} (the key is served once, to the agent CLI)",
                socket.display()
            ));
            return ExitCode::from(77);
        }
    };
    let mut key = String::new();
    if s.read_to_string(&mut key).is_err() || key.is_empty() {
        sbx_core::output::error("agent-key: refused (the key is served once, to the agent CLI)");
        return ExitCode::from(77);
    }
    println!("{key}");
    ExitCode::SUCCESS
}
